"""The normalisation's operating range: chosen from the problem, refused where no physiological
setting exists, and checked after every run (ctmhsa.mapping.operating).

The property tests draw inputs nobody tuned (shapes down to dk = 1, m != n, weight scales 1e-2 to
1e1, every phi, causal, unnormalised, skip path, both signed codes, both circuits, P > 1): at the
rate level every example is either exact to 1e-3 or refused before building with the measured
drive ratio, which the test recomputes independently from the reference.
"""


import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ctmhsa.mapping import operating
from ctmhsa.maths.codes import DEFAULT_GAINS, CodeGains
from ctmhsa.mapping.operating import (CircuitRangeError, OperatingRangeError, OperatingRangeWarning,
                               division_bounds, operating_point)
from ctmhsa.maths.reference import linear_mhsa
from ctmhsa.sims import simulate_mhsa
from ctmhsa.sims.benchmarks.robustness import refusal_justified

WIDE = CodeGains(r_inh_max=1e15)
"""Interneurons without an upper rate bound: the wiring itself, outside physiology."""
WIDER = CodeGains(r_inh_max=667.0)
"""A wider interneuron range, in which the issue example's spread of drives (queries whose
phi(q) differ 20-fold) is divided at the one gain fixed from the range of its tokens."""


def _issue_example():
    """The report's example: X (4 x 7), weights N(0, 0.5^2), H = 3, dk = dv = 2, keys and values
    from a second sequence of 5 tokens (kappa was 14.5 % wrong, silently). With this draw the
    default gain would divide the least-driven macrocolumn by 0.51: impossible for a shunt."""
    rng = np.random.default_rng(18)
    X, Y = rng.normal(size=(4, 7)), rng.normal(size=(5, 7))
    W = [rng.normal(scale=0.5, size=s) for s in ((3, 2, 7), (3, 2, 7), (3, 2, 7), (3, 7, 2))]
    return X, Y, W


# ------------------------------------------------------------------------------------------------
# operating point (no Brian2)
# ------------------------------------------------------------------------------------------------

@pytest.mark.codegen_independent
def test_gain_is_the_centre_of_the_feasible_gains():
    g = DEFAULT_GAINS
    d_min, d_max = division_bounds(g)
    for drive in (np.array([[1.0, 2.0, 3.0]]) / g.r_l23, np.array([[0.01, 0.02, 0.1]]) / g.r_l23):
        op = operating_point(drive, g)
        lo, hi = d_min / drive.min(), d_max / drive.max()
        np.testing.assert_allclose(op.rho[0], np.sqrt(lo * hi))   # the centre (7.6 < ROOM_BELOW)
        assert d_min <= op.division.min() and op.division.max() <= d_max
        # equal room on both sides, in ratio
        np.testing.assert_allclose(op.division.min() / d_min, d_max / op.division.max())
        np.testing.assert_allclose(op.interneuron_rate, (op.division - 1) / g.g_sh)


@pytest.mark.codegen_independent
def test_refusal_names_head_ratio_and_remedy():
    d_min, d_max = division_bounds(DEFAULT_GAINS)
    ratio = 2 * d_max / d_min
    with pytest.raises(OperatingRangeError, match=rf"head 1 .* ratio of {ratio:.4g}.*r_inh_max=") as e:
        operating_point(np.array([[1.0, 2.0], [1.0, ratio]]), DEFAULT_GAINS)
    assert isinstance(e.value, ValueError)
    # the remedy it names works
    need = float(str(e.value).split("r_inh_max=")[1].split(")")[0])
    operating_point(np.array([[1.0, 2.0], [1.0, ratio]]), CodeGains(r_inh_max=need * 1.001))
    with pytest.raises(OperatingRangeError, match="no L2/3 drive"):
        operating_point(np.array([[0.0, 1.0]]), DEFAULT_GAINS)


@pytest.mark.codegen_independent
def test_gains_range_validated():
    with pytest.raises(ValueError, match="r_inh_max"):
        CodeGains(r_inh_min=10.0, r_inh_max=5.0)


# ------------------------------------------------------------------------------------------------
# the circuit (rate level, Brian2 numpy target)
# ------------------------------------------------------------------------------------------------

@pytest.mark.brian2
def test_issue_example_is_exact():
    X, Y, (WQ, WK, WV, WO) = _issue_example()
    res = simulate_mhsa(X, WQ, WK, WV, WO, Y=Y, neuron="rate", duration=0.5, gains=WIDER)
    for stage, m in res.metrics().items():
        assert m["max_rel_error"] <= 1e-6, (stage, m)
    assert res.diagnostics["in_range"] and not res.diagnostics["operating"]["violations"]
    assert np.all(res.diagnostics["operating"]["interneuron_rate"] > 0)


@pytest.mark.brian2
def test_answer_does_not_depend_on_the_gain_chosen():
    """No leak: two feasible gains give different rates but the same decoded attention."""
    X, Y, (WQ, WK, WV, WO) = _issue_example()
    a = simulate_mhsa(X, WQ, WK, WV, WO, Y=Y, neuron="rate", duration=0.5, gains=WIDER)
    b = simulate_mhsa(X, WQ, WK, WV, WO, Y=Y, neuron="rate", duration=0.5, gains=CodeGains(r_inh_max=1333.0))
    assert not np.allclose(a.diagnostics["operating"]["interneuron_rate"],
                           b.diagnostics["operating"]["interneuron_rate"], rtol=0.05)
    for k in ("s", "kappa", "v_tilde", "x_tilde"):
        np.testing.assert_allclose(a.stages[k], b.stages[k], rtol=1e-9, atol=1e-12)


@pytest.mark.brian2
def test_wrong_fixed_point_raises_at_rate_level_and_warns_at_escape(monkeypatch):
    """The old failure (a fixed gain; the least-driven macrocolumns not divided, the run
    stationary) is caught by the checks, naming the macrocolumn."""
    X, Y, (WQ, WK, WV, WO) = _issue_example()
    fixed = lambda drive, gains, apical=False: operating.OperatingPoint(   # noqa: E731 - the pre-fix encoder
        rho=np.full(drive.shape[0], gains.rho_l23), drive=drive,
        division=gains.rho_l23 * drive, bounds=division_bounds(gains), g_sh=gains.g_sh)
    monkeypatch.setattr("ctmhsa.mapping.encode.operating_point", fixed)
    monkeypatch.setattr("ctmhsa.mapping.encode.check_division", lambda *a, **k: None)   # no refusal
    with pytest.raises(CircuitRangeError, match=r"macrocolumn \(head \d, query \d\).*interneurons are silent"):
        simulate_mhsa(X, WQ, WK, WV, WO, Y=Y, neuron="rate", duration=0.5)
    with pytest.warns(OperatingRangeWarning, match="outside its working range"):
        res = simulate_mhsa(X, WQ, WK, WV, WO, Y=Y, neuron="escape", duration=1.0, warmup=0.2, seed=1)
    assert not res.diagnostics["in_range"]
    assert any(v.startswith("macrocolumn") and "below its set point" in v
               for v in res.diagnostics["operating"]["violations"])


@pytest.mark.brian2
def test_unsettled_run_raises():
    X, Y, (WQ, WK, WV, WO) = _issue_example()
    with pytest.raises(CircuitRangeError, match="run longer"):
        simulate_mhsa(X, WQ, WK, WV, WO, Y=Y, neuron="rate", duration=0.03, gains=WIDER)


@pytest.mark.codegen_independent
def test_refused_before_building(monkeypatch):
    def no_build(*a, **k):
        raise AssertionError("a network was built")
    monkeypatch.setattr("ctmhsa.sims.runners.instantiate", no_build)
    rng = np.random.default_rng(3)
    X = rng.normal(size=(6, 3))
    W = [rng.normal(scale=3.0, size=s) for s in ((1, 1, 3), (1, 1, 3), (1, 1, 3), (1, 3, 1))]
    with pytest.raises(OperatingRangeError, match="needs a division of .* at the gain fixed from the weights"):
        simulate_mhsa(X, *W, phi="exp", neuron="escape")


# ------------------------------------------------------------------------------------------------
# property: exact or refused, on the whole input space
# ------------------------------------------------------------------------------------------------

@st.composite
def problems(draw):
    circuit = draw(st.sampled_from(["quadratic", "linear"]))
    normalize = draw(st.booleans()) if circuit == "quadratic" else draw(st.sampled_from([True, True, False]))
    signed = "onoff" if not normalize else draw(st.sampled_from(["onoff", "offset"]))
    cross = draw(st.booleans())
    causal = (not cross) and circuit == "quadratic" and draw(st.booleans())
    n = draw(st.integers(1, 5))
    m = draw(st.integers(1, 5)) if cross else n
    H, dk, dv, de = (draw(st.integers(1, hi)) for hi in (3, 4, 3, 6))
    scale = 10 ** draw(st.floats(-2, 1))
    phi = draw(st.sampled_from(["elu1", "softplus", "exp", "relu"]))
    skip = draw(st.booleans())
    P = draw(st.sampled_from([1, 1, 2]))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, de))
    Y = rng.normal(size=(m, de)) if cross else None
    W = [rng.normal(scale=scale, size=s) for s in ((H, dk, de), (H, dk, de), (H, dv, de), (H, de, dv))]
    WS = rng.normal(scale=scale, size=(H, dv, de)) if skip else None
    return dict(X=X, Y=Y, WQ=W[0], WK=W[1], WV=W[2], WO=W[3], WS=WS, phi=phi, causal=causal,
                normalize=normalize, signed=signed, circuit=circuit, P=P)


def _exact_or_refused(kw, gains):
    try:
        ref = linear_mhsa(kw["X"], kw["WQ"], kw["WK"], kw["WV"], kw["WO"], phi=kw["phi"], Y=kw["Y"],
                          causal=kw["causal"], normalize=kw["normalize"], WS=kw["WS"])
    except ValueError as e:      # Z = 0 (relu): the reference refuses, so must the simulator
        assert "Z" in str(e)
        with pytest.raises(ValueError):
            simulate_mhsa(neuron="rate", duration=0.3, gains=gains, **kw)
        return "invalid"
    try:
        res = simulate_mhsa(neuron="rate", duration=0.3, gains=gains, **kw)
    except OperatingRangeError as e:
        # the circuit built for these tokens' range (their statistics) cannot divide them:
        # recomputed independently from the reference (ctmhsa.sims.benchmarks.robustness)
        assert refusal_justified(ref, kw, gains), str(e)
        return "refused"
    for stage, m in res.metrics().items():
        assert m["max_rel_error"] <= 1e-3, (stage, m)
    assert res.diagnostics["in_range"]
    return "exact"


@pytest.mark.brian2
@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(problems())
def test_rate_level_exact_or_refused(kw):
    _exact_or_refused(kw, DEFAULT_GAINS)


@pytest.mark.brian2
@settings(max_examples=4, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(problems())
def test_rate_level_wiring_exact_without_rate_bound(kw):
    """Without the interneurons' physiological rate bound nothing is refused: the wiring divides
    any spread of Z."""
    assume(kw["phi"] != "relu")
    assert _exact_or_refused(kw, WIDE) == "exact"


@pytest.mark.codegen_independent
def test_offset_code_refused_without_normalisation(monkeypatch):
    """The offset v0 passes through the attention only because sum_j kappa_ij = 1: unnormalised,
    the offset code would be silently wrong (found by the property test), so it is refused."""
    monkeypatch.setattr("ctmhsa.sims.runners.instantiate", lambda *a, **k: pytest.fail("built"))
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3, 2))
    W = [rng.normal(size=s) for s in ((1, 2, 2), (1, 2, 2), (1, 2, 2), (1, 2, 2))]
    with pytest.raises(ValueError, match="signed: the unnormalised variant needs ON/OFF"):
        simulate_mhsa(X, *W, neuron="rate", normalize=False, signed="offset")


@st.composite
def spiking_problems(draw):
    """Small problems for the escape level: every phi but relu, moderate weight scales, and
    macrocolumns of >= 12 L2/3 cells (smaller pools fire too few spikes for the interneurons'
    feedback at 5 Hz per cell: see docs/operating_range.md)."""
    cross = draw(st.booleans())
    n = draw(st.integers(4, 6))
    m = draw(st.integers(4, 6)) if cross else n
    H, dk, dv, de = draw(st.integers(1, 2)), draw(st.integers(3, 4)), draw(st.integers(1, 3)), draw(st.integers(2, 4))
    scale = 10 ** draw(st.floats(-1, 0)) / np.sqrt(de)
    phi = draw(st.sampled_from(["elu1", "softplus", "exp"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    X = rng.normal(size=(n, de))
    Y = rng.normal(size=(m, de)) if cross else None
    W = [rng.normal(scale=scale, size=s) for s in ((H, dk, de), (H, dk, de), (H, dv, de))]
    W.append(rng.normal(size=(H, de, dv)) / np.sqrt(dv))
    return dict(X=X, Y=Y, WQ=W[0], WK=W[1], WV=W[2], WO=W[3], phi=phi)


@pytest.mark.brian2
@settings(max_examples=3, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(spiking_problems())
@pytest.mark.long
@pytest.mark.filterwarnings("ignore::ctmhsa.mapping.operating.OperatingRangeWarning")
def test_escape_level_at_its_noise_floor(kw):
    """Seeded escape-level property: every stage's error within 1.5x its spike-count noise floor
    (stages with >= 12 entries; fewer entries make a single run's NRMSE too noisy to judge).
    A strict xfail until version 0.12: with few strong thalamic inputs (de = 2, weights ~0.7) s
    reached 1.8x its floor, the phi correction past its range; the relays' 80 Hz per unit
    (version 0.13) halved the dendrites' variance. Single runs scatter: on an instance with de = 2
    (8 relays behind 12 key entries) k's ratio over spike seeds 3-28 is 0.46-2.07, its root mean
    square 1.0, so more examples would test the tail of one run, not a bias."""
    try:
        res = simulate_mhsa(neuron="escape", duration=2.0, seed=3, **kw)
    except OperatingRangeError:
        return
    # (small pools may flag interneurons driven past 1/dt in bursts: a warning, measured in
    # docs/operating_range.md; the answer must still be at its floor)
    for stage, m in res.metrics().items():
        if m["n"] >= 12 and m["noise_floor"] > 0:
            assert m["nrmse"] <= 1.5 * m["noise_floor"], (stage, m)


@pytest.mark.brian2
def test_offset_code_with_a_strong_skip_path_is_exact():
    """Offset code and skip path: the PT cells also carry WS x_i, which the value offset v0 does
    not bound; with WS 20x WV they were rectified (found by bench robustness). They now get an
    offset of their own."""
    rng = np.random.default_rng(431)
    X = rng.normal(size=(4, 3))
    W = [rng.normal(scale=0.3, size=s) for s in ((2, 2, 3), (2, 2, 3), (2, 2, 3), (2, 3, 2))]
    WS = 20 * rng.normal(scale=0.3, size=(2, 2, 3))
    res = simulate_mhsa(X, *W, WS=WS, neuron="rate", signed="offset", duration=0.5)
    for stage, m in res.metrics().items():
        assert m["max_rel_error"] <= 1e-6, (stage, m)


@pytest.mark.brian2
@pytest.mark.long   # 6.5 s of escape runs
def test_escape_cells_past_the_phi_correction_are_reported_not_called_unsettled():
    """At weight scale 4.5 the dendrites fluctuate past the phi-bias correction's range: corrected
    L2/3 somata are driven below rest part of the time and fire more spikes than their intensity.
    The warning names that bias (it does not fall with the window), not an unsettled loop. (Scale
    3 did it until the relays' 80 Hz per unit of version 0.13 halved the dendrites' variance: its
    cells are still flagged, but their macrocolumn now holds its set point.)"""
    import warnings
    from ctmhsa.sims.config import problem_inputs

    x = problem_inputs(n=5, H=2, dk=4, dv=4, de=5, input_seed=13, weight_scale=4.5)
    with pytest.warns(OperatingRangeWarning, match="fire above their intensity"):   # the somatic stage alone
        res = simulate_mhsa(x["X"], x["WQ"], x["WK"], x["WV"], x["WO"], neuron="escape", duration=2.0, seed=21,
                            apical_inhibition=False)
    rep = res.diagnostics["operating"]
    assert rep["rectified"]["l23"] > 0
    assert any("fire more spikes than their intensity" in v for v in rep["violations"])
    x = problem_inputs(n=5, H=2, dk=4, dv=4, de=5, input_seed=13, weight_scale=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", OperatingRangeWarning)
        res = simulate_mhsa(x["X"], x["WQ"], x["WK"], x["WV"], x["WO"], neuron="escape", duration=2.0, seed=21)
    assert "l23" not in res.diagnostics["operating"]["rectified"]


@pytest.mark.brian2
def test_lif_cells_past_the_phi_correction_are_reported():
    """The lif somata have no intensity to compare their spikes with; a negative window-mean
    product P (which neither the exact product nor a correction in its range can give) names the
    correction's range left. Found by ``ctmhsa bench robustness --level lif`` (instance 21 of seed
    0: one key's apical variance 2.47, its L2/3 cells silent, s at 2.9 times its floor unflagged)."""
    import warnings
    from ctmhsa.mapping.operating import _negative_product
    from ctmhsa.sims.benchmarks.robustness import draw_instance

    assert _negative_product({"P": [0.2, -1e-3, 0.0]}, "lif").tolist() == [False, True, False]
    assert _negative_product({"P": [-1.0]}, "rate") is None and _negative_product({"r": [1.0]}, "lif") is None
    rng = np.random.default_rng(0)
    kw = [draw_instance(rng) for _ in range(22)][-1]["kwargs"]   # n = m = 3, dk = 1, de = 2, elu1, scale 2.43
    with pytest.warns(OperatingRangeWarning, match="negative phi-bias-corrected product"):
        res = simulate_mhsa(neuron="lif", duration=0.3, warmup=0.2, seed=22, codegen="numpy", **kw)
    assert res.diagnostics["operating"]["rectified"]["l23"] == 3      # the three cells of the key past it
    kw = dict(kw, WK=kw["WK"] / 3, WQ=kw["WQ"] / 3, WV=kw["WV"] / 3)   # the same problem within the range
    with warnings.catch_warnings():
        warnings.simplefilter("error", OperatingRangeWarning)
        res = simulate_mhsa(neuron="lif", duration=0.3, warmup=0.2, seed=22, codegen="numpy", **kw)
    assert "l23" not in res.diagnostics["operating"]["rectified"]


@pytest.mark.brian2
def test_a_saturated_pathway_is_not_called_unsettled():
    """exp at weight scale 5.6 (the robustness sweep's lif instance 35 of seed 0, the linear
    circuit): the write cells' product reaches 1e22, they fire at their refractory limit, and the
    read-out-z pool misses its set point. The macrocolumn's message names the saturated cells, not
    a loop to run longer; a memory cell driven below rest under the on/off code is not told to
    use it."""
    from ctmhsa.sims.benchmarks.robustness import draw_instance

    rng = np.random.default_rng(0)
    kw = [draw_instance(rng) for _ in range(36)][-1]["kwargs"]
    with pytest.warns(OperatingRangeWarning, match="fire outside their range"):
        res = simulate_mhsa(neuron="lif", duration=0.3, warmup=0.2, seed=36, codegen="numpy", **kw)
    viol = res.diagnostics["operating"]["violations"]
    assert not any("run longer" in v for v in viol)
    assert any(v.startswith("outer: ") and "outside the somata's affine range" in v for v in viol)
    assert not any("use signed='onoff'" in v for v in viol)


@pytest.mark.codegen_independent
@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 5), m=st.integers(1, 5), dk=st.integers(1, 3), H=st.integers(1, 3), P=st.integers(1, 3),
       causal=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_pooled_drive_sums_the_l23_cells_present(n, m, dk, H, P, causal, seed):
    # the dense product against the sum over every L2/3 cell, copies averaged, masks honoured
    from ctmhsa.circuits.builders import build
    from ctmhsa.circuits.graph import copies

    assume(not (causal and m != n))
    c = build(n, dk, 2, 3, m=m, H=H, P=P, causal=causal, cross=m != n)
    rng = np.random.default_rng(seed)
    fq, fk = rng.random((H, n, dk)), rng.random((H, m, dk))
    l23 = c.populations["l23"]
    h, i, j, k = (l23.axis(a) for a in ("head", "i", "j", "c"))
    brute = np.zeros((H, n))
    np.add.at(brute, (h, i), fq[h, i, k] * fk[h, j, k])
    np.testing.assert_allclose(operating._microcolumn_drive(c, fq, fk), brute / copies(l23), rtol=1e-12, atol=0)


@pytest.mark.codegen_independent
@settings(max_examples=60, deadline=None, derandomize=True)
@given(heads=st.integers(1, 3), k=st.integers(5, 400), spread=st.floats(0.1, 5.0), tail=st.floats(0.0, 4.0),
       lif=st.booleans(), seed=st.integers(0, 2**16))
def test_a_models_centre_divides_its_calibration_where_a_gain_can(heads, k, spread, tail, lif, seed):
    """A model's attention centre (:func:`ctmhsa.mapping.blocks._central_drive`) from calibration
    drives with long tails: every calibration drive is divided at its gain whenever the full
    range fits the interneurons' divisions, by the gain closest to the quantiles' centre (a
    smallest or largest drive then sits at a bound); where the quantiles' centre already divides
    them all it is kept; where even the quantiles do not fit, the median."""
    from ctmhsa.mapping.blocks import DRIVE_QUANTILES, _central_drive
    from ctmhsa.maths.codes import default_gains

    gains = default_gains("lif" if lif else "escape")
    rs = np.random.default_rng(seed)
    drive = np.exp(rs.normal(scale=spread / 3, size=(heads, k)))
    drive[:, 0] *= np.exp(-tail)              # one outlier below the rest
    lo, hi = division_bounds(gains)
    q = np.quantile(drive, DRIVE_QUANTILES, axis=1).T
    centre = _central_drive(drive.copy(), gains)
    need = operating_point(centre, gains).rho[:, None] * drive
    divided = (need >= lo * (1 - 1e-9)).all(axis=1) & (need <= hi * (1 + 1e-9)).all(axis=1)
    full_fits = drive.max(axis=1) / drive.min(axis=1) <= hi / lo
    assert divided[full_fits].all()
    q_fits = q[:, 1] / q[:, 0] <= hi / lo
    at_q = operating_point(np.where(q_fits[:, None], q, 1.0), gains).rho[:, None] * drive
    q_divides = q_fits & (at_q >= lo * (1 - 1e-9)).all(axis=1) & (at_q <= hi * (1 + 1e-9)).all(axis=1)
    np.testing.assert_array_equal(centre[q_divides], q[q_divides])
    moved = full_fits & ~q_divides & q_fits
    at_bound = np.isclose(need.min(axis=1), lo, rtol=1e-9) | np.isclose(need.max(axis=1), hi, rtol=1e-9)
    assert at_bound[moved].all()
    np.testing.assert_array_equal(centre[~q_fits], np.median(drive[~q_fits], axis=1)[:, None] * np.ones((1, 2)))


@pytest.mark.codegen_independent
def test_cells_whose_intensity_outran_their_spikes_are_found_at_the_escape_level_only():
    o = {"rate": np.array([60.0, 65.5, 33.5, 0.0]), "expected_r": np.array([86.6, 62.7, 51.9, 0.0])}
    assert operating._under_intensity(o, "escape", 2.0).tolist() == [True, False, True, False]
    assert operating._under_intensity(o, "lif", 2.0) is None
    assert not operating._under_intensity({"rate": o["expected_r"], "expected_r": o["rate"]}, "escape", 2.0).any()


@pytest.mark.brian2
def test_a_pool_above_its_set_point_by_clipped_peaks_is_not_called_unsettled():
    """relu at weight scale 0.02 (the escape sweep's instance 16 of seed 0): a few L2/3 cells'
    intensity passes 1/dt in brief peaks, so a macrocolumn's pooled intensity sits 46 % above
    the set point while its pooled count, which the loop holds, is within 5 % (209.5 Hz). Its
    message names those cells, not a loop to run longer. (Macrocolumns whose gap is spread over
    their cells, none beyond its counting noise, keep the general cause.)"""
    from ctmhsa.sims.benchmarks.robustness import draw_instance

    rng = np.random.default_rng(0)
    kw = [draw_instance(rng) for _ in range(17)][-1]["kwargs"]
    with pytest.warns(OperatingRangeWarning):
        res = simulate_mhsa(neuron="escape", duration=2.0, seed=17, **kw)
    (msg,) = [v for v in res.diagnostics["operating"]["violations"] if v.startswith("macrocolumn (head 1, query 4)")
              and "pooled" in v]
    assert "fire fewer spikes than their intensity" in msg and "run longer" not in msg
