"""The conductance-based adaptive soma (ctmhsa.neurons.conductance): a high-conductance state, and
adaptation that makes the f-I curve closer to affine and the spiking regular (docs/lif.md)."""

import dataclasses

import numpy as np
import pytest

from ctmhsa.neurons.conductance import BRETTE_GERSTNER_2005 as S, affine_fit, fi_curve


@pytest.mark.codegen_independent
def test_affine_fit_recovers_a_line_and_refuses_too_few_points():
    I = np.linspace(0, 1e-9, 20)
    f = affine_fit(I, 5 + 3e10 * I, 0, 100)
    assert f["r0"] == pytest.approx(5) and f["c"] == pytest.approx(3e10) and f["max_residual"] < 1e-9
    with pytest.raises(ValueError, match="fewer than 3 rates"):
        affine_fit(I, np.zeros(20), 10, 80)


@pytest.mark.brian2
def test_background_puts_the_soma_in_a_high_conductance_state():
    assert S.input_conductance() >= 3 * S.g_L           # Destexhe et al. 2001: 3-5x in vivo
    r = fi_curve(S, np.zeros(8), duration=2.0, warmup=0.5, seed=1)
    assert np.all(r["rate"] < 1.0)                       # no drive: (almost) silent
    assert S.E_i < r["v_mean"].mean() < S.V_th           # depolarised from E_L by the balance
    assert 1e-3 < r["v_std"].mean() < 6e-3               # 1-6 mV fluctuations


@pytest.mark.long   # 2 x 40 cells x 8 s at 0.1 ms
@pytest.mark.brian2
def test_adaptation_makes_the_fi_curve_closer_to_affine_and_spiking_regular():
    out = {}
    for name, soma, imax in (("adapt", S, 4e-9), ("plain", S.without_adaptation(), 3e-9)):
        r = fi_curve(soma, np.linspace(0, imax, 40), duration=8.0, warmup=1.0, seed=3)
        mid = (r["rate"] > 30) & (r["rate"] < 50)
        out[name] = (affine_fit(r["current"], r["rate"], 10, 80), np.nanmedian(r["fano"][mid]))
    assert out["adapt"][0]["rms_residual"] < out["plain"][0]["rms_residual"]
    # uniform background increments (version 0.7): 0.05 against 0.42 (Gaussian: 0.12 against 0.84)
    assert out["adapt"][1] < 0.25 * out["plain"][1]


@pytest.mark.long   # 28 s with a cold cache: the calibration and 16 fresh cells for 10 s
@pytest.mark.brian2
def test_soma_calibration_finds_an_affine_branch_above_the_baseline():
    from ctmhsa.neurons.conductance import soma_calibration

    cal = soma_calibration()                 # cached on disk after the first measurement
    assert cal["r_base"] == 20.0 and 1e-9 < cal["I_rh"] < 3e-9
    assert cal["relative"] <= 0.02 and cal["rms_residual"] <= 1.0    # 20-120 Hz within 2 % of a line
    # driven at I_rh + I_gain x, fresh cells fire r_base + x (independent seed, 10 s)
    x = np.array([0.0, 30.0, 60.0, 90.0])
    r = fi_curve(S, np.repeat(cal["I_rh"] + cal["I_gain"] * x, 4), duration=10.0, warmup=1.0, seed=11)
    got = r["rate"].reshape(4, 4).mean(axis=1) - cal["r_base"]
    np.testing.assert_allclose(got, x, atol=2.5)


@pytest.mark.codegen_independent
def test_affine_range_is_where_the_curve_follows_its_law():
    from ctmhsa.neurons.conductance import affine_range
    I = np.linspace(0.0, 4e-9, 41)
    law = 20.0 + (I - 1.5e-9) / 2e-11                        # 20 Hz at 1.5 nA, 50 Hz per nA
    r = np.clip(law, 0.0, None)
    r = np.where(law > 100.0, 100.0 + 0.5 * (law - 100.0), r)   # compressed above 100 Hz
    lo, hi = affine_range(dict(current=I, rate=r, r_base=20.0, I_rh=1.5e-9, I_gain=2e-11), tol=3.0)
    assert lo == 0.0                   # the law falls below 0 before the curve leaves it
    assert 100.0 < hi <= 106.0 + 1e-9  # off by 3 Hz at 106 Hz of the law


@pytest.mark.codegen_independent
def test_lif_cells_outside_the_affine_range_are_reported():
    from types import SimpleNamespace

    from ctmhsa.mapping.operating import check_operating
    pop = SimpleNamespace(cell_type="relay_out", axes={"sign": None}, N=4)
    circuit = SimpleNamespace(populations={"nucleus2": pop}, meta={})
    enc = SimpleNamespace(consts={}, values=SimpleNamespace(params={"nucleus2": {"r_base": 20.0}}))
    obs = {"nucleus2": {"rate": np.array([20.0, 60.0, 130.0, 180.0]), "r": np.zeros(4)}}
    rep = check_operating(circuit, enc, obs, "lif", None, T=5.0, rate_range=(7.0, 136.0))
    assert rep["saturated"] == {"nucleus2": 1}
    assert "nucleus2: 1 cell(s) fire outside the somata's affine range 7–136 Hz" in rep["violations"][0]
    obs["nucleus2"]["rate"][3] = 140.0                   # within 3 Poisson SD of 136 Hz over 5 s
    assert check_operating(circuit, enc, obs, "lif", None, T=5.0, rate_range=(7.0, 136.0))["violations"] == []


@pytest.mark.codegen_independent
def test_a_per_population_rate_range_checks_each_soma_type_on_its_own_range():
    from types import SimpleNamespace

    from ctmhsa.mapping.operating import check_operating
    pops = {"l23": SimpleNamespace(cell_type="l23", axes={}, N=3),
            "nucleus2": SimpleNamespace(cell_type="relay_out", axes={"sign": None}, N=3)}
    circuit = SimpleNamespace(populations=pops, meta={})
    enc = SimpleNamespace(consts={}, values=SimpleNamespace(params={"l23": {"r_base": 1.0},
                                                                    "nucleus2": {"r_base": 20.0}}))
    obs = {"l23": {"rate": np.array([1.0, 5.0, 80.0]), "r": np.zeros(3)},
           "nucleus2": {"rate": np.array([20.0, 60.0, 100.0]), "r": np.zeros(3)}}
    ranges = {"l23": (0.0, 63.0), "nucleus2": (8.5, 145.0)}
    rep = check_operating(circuit, enc, obs, "lif", None, T=10.0, rate_range=ranges)
    with pytest.raises(ValueError, match="no range for the lif population 'nucleus2'"):
        check_operating(circuit, enc, obs, "lif", None, T=10.0, rate_range={"l23": (0.0, 63.0)})
    assert rep["saturated"] == {"l23": 1}                # 80 Hz is past L2/3's range, not nucleus 2's
    assert "l23: 1 cell(s) fire outside the somata's affine range 0–63 Hz" in rep["violations"][0]


@pytest.mark.brian2
@pytest.mark.long   # 10-11 s (fresh cells for 20 s); the shipped calibration is read in the default suite
def test_the_l23_soma_follows_its_law_down_to_its_1_hz_baseline():
    """Strong adaptation (b tau_w = 116 pA/Hz) makes the L2/3 soma's f-I curve nearly affine from
    ~1 Hz, where the default cell's bends below 6.8 Hz; what remains (concave over 1-4 Hz, convex
    above) is the spline law's. Calibrated at the lif level's step, fresh cells driven at
    law_current(x) fire 1 + x Hz within 0.06 Hz from 0 to 20 Hz and 0.3 Hz at 50 Hz (independent
    seed, 20 s, 8 cells each). The former quadratic law missed by -0.12 Hz at 0 and +0.06 Hz at
    2.5-3.5 Hz (16 cells x 40 s: standard errors 0.02 Hz)."""
    from ctmhsa.neurons.conductance import calibration_of, law_current, rate_range_of
    from ctmhsa.neurons.params import L23_SOMA, lif_soma

    t = lif_soma("l23")
    assert t.params is L23_SOMA and t.r_base == 1.0 and lif_soma("relay_out").r_base == 20.0
    cal = calibration_of("l23", 5e-4)                  # shipped, or cached after the first measurement
    assert cal["knots"] == [1.0, 3.0] and cal["dense_rms_residual"] <= 0.03 and cal["max_residual"] <= 0.3
    lo, hi = rate_range_of("l23", 5e-4)
    assert lo <= 1.0 and hi >= 55.0
    x = np.array([0.0, 0.5, 3.0, 10.0, 50.0])
    r = fi_curve(L23_SOMA, np.repeat(law_current(cal, x), 8), duration=20.0, warmup=2.0, dt=5e-4, seed=11)
    got = r["rate"].reshape(x.size, 8).mean(axis=1) - cal["r_base"]
    np.testing.assert_allclose(got[:-1], x[:-1], atol=0.06)
    assert abs(got[-1] - x[-1]) <= 0.3


@pytest.mark.brian2
@pytest.mark.long   # ~20 s (fresh cells for 20 s); the shipped calibration is read in the default suite
def test_the_l5_soma_follows_its_law_from_its_1_hz_baseline_to_150_hz():
    """The L5 IT and PT soma (b tau_w = 46 pA/Hz) fires a 1 Hz baseline: fresh cells driven at
    law_current(x) (independent seed, 20 s, 8 cells each, the lif level's step) fire 1 + x Hz
    within 0.15 Hz up to 20 Hz and 0.3 Hz up to 150 Hz (measured: at most 0.09 and 0.12 Hz)."""
    from ctmhsa.neurons.conductance import calibration_of, law_current, rate_range_of
    from ctmhsa.neurons.params import L5_SOMA, lif_soma

    assert lif_soma("l5it") is lif_soma("l5pt") and lif_soma("l5it").params is L5_SOMA
    cal = calibration_of("l5it", 5e-4)
    assert cal["r_base"] == 1.0 and cal["max_residual"] <= 0.5
    lo, hi = rate_range_of("l5pt", 5e-4)
    assert lo <= 1.0 and hi >= 150.0
    x = np.array([0.0, 1.0, 4.0, 20.0, 80.0, 149.0])
    r = fi_curve(L5_SOMA, np.repeat(law_current(cal, x), 8), duration=20.0, warmup=2.0, dt=5e-4, seed=11)
    got = r["rate"].reshape(x.size, 8).mean(axis=1) - cal["r_base"]
    np.testing.assert_allclose(got[:4], x[:4], atol=0.15)
    np.testing.assert_allclose(got[4:], x[4:], atol=0.3)


@pytest.mark.codegen_independent
def test_the_spline_law_is_fitted_and_inverted_exactly():
    from ctmhsa.neurons.conductance import _spline_fit, law_current, law_rate

    x = np.linspace(-0.5, 60.0, 122)
    truth = dict(I_rh=1.03e-9, I_gain=1.29e-10, I_quad=-2.57e-11, I_cub=1.13e-11, knots=[1.0, 3.0],
                 I_knot=[-1.27e-11, 1.4e-12], r_base=1.0)          # L2/3's at 0.5 ms, rounded
    I = law_current(truth, x)
    fit = _spline_fit(I, 1.0 + x, np.full(x.size, 0.02), 1.0, 61.0, (1.0, 3.0))
    for k in ("I_rh", "I_gain", "I_quad", "I_cub"):
        assert fit[k] == pytest.approx(truth[k], rel=1e-6)
    np.testing.assert_allclose(fit["I_knot"], truth["I_knot"], rtol=1e-6)
    assert fit["max_residual"] < 1e-6
    np.testing.assert_allclose(law_rate(fit, I), 1.0 + x, atol=2e-3)   # the 1 mHz inversion grid
    # beyond the grid: linear in current, continuing the ends
    assert np.all(np.diff(law_rate(fit, np.array([0.0, 5e-10, I[-1], 2 * I[-1]]))) > 0)
    with pytest.raises(RuntimeError, match="not increasing"):
        _spline_fit(law_current(dict(truth, I_gain=-1e-10), x), 1.0 + x, np.full(x.size, 0.02), 1.0, 61.0,
                    (1.0, 3.0))


@pytest.mark.codegen_independent
def test_the_quadratic_law_is_fitted_and_inverted_exactly():
    from ctmhsa.neurons.conductance import _quadratic_fit, law_rate

    x = np.linspace(0.0, 60.0, 61)
    I = 1e-9 + 1.2e-10 * x - 7e-14 * x ** 2        # a convex f-I curve, as L2/3's
    fit = _quadratic_fit(I, 1.0 + x, 1.0, 61.0)
    assert fit["I_quad"] == pytest.approx(-7e-14) and fit["I_gain"] == pytest.approx(1.2e-10)
    assert fit["max_residual"] < 1e-9
    np.testing.assert_allclose(law_rate(fit, I), 1.0 + x, atol=1e-9)
    affine = dict(I_rh=1e-9, I_gain=1e-10, r_base=20.0)       # no I_quad: the affine law
    assert law_rate(affine, 2e-9) == pytest.approx(30.0)
    concave = dict(I_rh=1e-9, I_gain=1e-10, I_quad=2e-13, r_base=20.0)   # I_quad > 0, below I_rh too
    x = np.array([-5.0, 0.0, 10.0, 100.0])
    np.testing.assert_allclose(law_rate(concave, 1e-9 + 1e-10 * x + 2e-13 * x ** 2), 20.0 + x, atol=1e-9)
    with pytest.raises(ValueError, match="reach"):
        from ctmhsa.neurons.conductance import soma_calibration
        soma_calibration(r_base=1.0, span=30.0, reach=20.0)


@pytest.mark.codegen_independent
def test_the_default_somas_calibration_key_is_unchanged_by_soma_types():
    """Adding soma types or changing the coupling must not re-measure the default soma: its key
    holds what its measurement uses (version 0.15's spline law, without the coupling tau_c, which
    the constant-drive measurement does not see; the L2/3 type's procedure enters only the
    other types' keys)."""
    import ctmhsa.neurons.conductance as C

    keys = []

    def capture(kind, key, compute):
        keys.append(key)
        return dict(I_rh=0.0, I_gain=1.0, r_base=20.0, current=[], rate=[])

    orig = C.cached_json
    C.cached_json = capture
    try:
        C.calibration_of("default", 5e-4)
        C.calibration_of("default", 1e-4)
        C.calibration_of("l23", 5e-4)
    finally:
        C.cached_json = orig
    assert keys[:2] == ["4f72bfcfe70dfaed", "fddd36b9abd25dc2"] and keys[2] not in keys[:2]
    keys.clear()
    C.cached_json = capture
    try:   # the coupling does not enter the key
        C.soma_calibration(dataclasses.replace(C.DEFAULT_SOMA, tau_c=0.05), dt=5e-4)
    finally:
        C.cached_json = orig
    assert keys == ["0bbf1e95b9a11f83"]


@pytest.mark.codegen_independent
def test_a_fresh_machine_reads_the_shipped_calibrations(tmp_path, monkeypatch):
    """The lif somata's calibrations at 1, 0.5 and 0.1 ms ship with the package: with an empty
    cache nothing is measured (10-150 s each otherwise), and each stores its own key."""
    import ctmhsa.neurons.conductance as C

    monkeypatch.setenv("CTMHSA_CACHE", str(tmp_path))
    monkeypatch.setattr(C, "fi_curve", lambda *a, **k: pytest.fail("measured a shipped calibration"))
    for cell_type in ("default", "l23", "l5it", "l6ct", "decoder"):   # (a coupling is not calibrated)
        for dt in (1e-3, 5e-4, 1e-4):
            cal = C.calibration_of(cell_type, dt)
            assert cal["r_base"] == C.lif_soma(cell_type).r_base and len(cal["rate"]) >= 32


@pytest.mark.brian2
def test_an_adapting_soma_answers_fast_drives_more_steeply_than_its_law():
    """Slow drives follow the calibrated (adapted) law; drives faster than the 144 ms adaptation
    meet the unadapted slope: several times steeper for L5's type, steeper still for L2/3's
    stronger adaptation, less for the default cell's weaker one (docs/lif.md)."""
    from ctmhsa.neurons.conductance import modulation_gain

    g = {ct: modulation_gain(ct, freqs=(0.25, 8.0), swing=4.0, cells=200, duration=8.0)["gain"]
         for ct in ("l5pt", "l23", "default")}
    assert 0.85 < g["l5pt"][0] < 1.15, g            # slow: the law
    assert g["l5pt"][1] > 3.0, g                     # fast: 4.9 measured with 300 cells for 16 s
    assert g["l23"][1] > g["l5pt"][1] > g["default"][1] > 1.5, g


@pytest.mark.codegen_independent
@pytest.mark.parametrize("kw, match", [
    (dict(freqs=()), r"^freqs: expected frequencies > 0 Hz"),
    (dict(freqs=(1.0, 0.0)), r"^freqs: expected frequencies > 0 Hz"),
    (dict(swing=0.0), r"^swing: expected 0 < swing <= rate"),
    (dict(swing=20.0, rate=12.0), r"^swing: expected 0 < swing <= rate"),
    (dict(rate=float("nan")), r"^rate: expected Hz above the baseline, > 0"),
    (dict(rate="12"), r"^rate: expected Hz above the baseline, > 0"),
    (dict(cells=0), r"^cells: expected an integer >= 1"),
    (dict(cells=True), r"^cells: expected an integer >= 1"),
    (dict(freqs=(0.25,), duration=2.0), r"^duration: 2 s is shorter than one period of 0.25 Hz"),
])
def test_modulation_gain_refuses_bad_arguments_before_simulating(kw, match):
    from ctmhsa.neurons.conductance import modulation_gain

    with pytest.raises(ValueError, match=match):
        modulation_gain("l5pt", **kw)
