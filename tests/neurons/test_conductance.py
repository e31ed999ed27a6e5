"""The conductance-based adaptive soma (ctmhsa.neurons.conductance): a high-conductance state, and
adaptation that makes the f-I curve closer to affine and the spiking regular (docs/lif.md)."""

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
    assert out["adapt"][1] < 0.5 < out["plain"][1]


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
