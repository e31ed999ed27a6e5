"""The rate level reproduces every stage of the reference (≤ 1e-3): the wiring is exact.

These run real Brian2 networks (numpy code-generation target, no compiler needed).
"""

import numpy as np
import pytest

from ctmhsa.maths.model import Block
from ctmhsa.maths.reference import linear_mhsa
from ctmhsa.maths.codes import CodeGains
from ctmhsa.mapping.operating import OperatingRangeError
from ctmhsa.sims import simulate_mhsa
from conftest import random_problem

pytestmark = pytest.mark.brian2
TOL = 1e-3
STAGES = ("q", "k", "v", "s", "kappa", "Z", "y", "v_tilde", "x_tilde")


def _check(res, tol=TOL, stages=STAGES):
    met = res.metrics()
    assert set(stages) <= set(met)
    for stage in stages:
        assert met[stage]["max_rel_error"] <= tol, (stage, met[stage])
    rng = res.diagnostics["range"]
    assert all(not v.get("rectified") and not v.get("silent_interneurons") for v in rng.values())
    return met


@pytest.mark.parametrize("n, H, dims", [
    (2, 1, (3, 3, 3)),
    (2, 3, (2, 4, 5)),
    (5, 1, (4, 2, 3)),
    (5, 3, (3, 3, 6)),
    (8, 1, (2, 3, 4)),
    (8, 3, (3, 2, 2)),
])
def test_rate_level_matches_reference(n, H, dims):
    dk, dv, de = dims
    X, _, WQ, WK, WV, WO = random_problem(seed=100 + n * H, n=n, H=H, dk=dk, dv=dv, de=de)
    res = simulate_mhsa(X, WQ, WK, WV, WO, neuron="rate", duration=1.0)
    _check(res)
    np.testing.assert_allclose(res.reference, linear_mhsa(X, WQ, WK, WV, WO)["x_tilde"])
    assert res.x_tilde.shape == (n, de)
    assert res.stages["v_tilde"].shape == (H, n, dv)
    assert res.rates["l23"].shape == (H, n, n, dk)


@pytest.mark.parametrize("n, m", [(3, 5), (5, 2)])
def test_rate_level_cross_attention(n, m):
    X, Y, WQ, WK, WV, WO = random_problem(seed=7, n=n, m=m, H=2, dk=3, dv=2, de=4)
    res = simulate_mhsa(X, WQ, WK, WV, WO, Y=Y, neuron="rate")
    _check(res)
    assert res.stages["kappa"].shape == (2, n, m)
    assert "nucleus1_kv" in res.rates


@pytest.mark.smoke
def test_rate_level_causal():
    X, _, WQ, WK, WV, WO = random_problem(seed=8, n=5, H=2, dk=2, dv=3, de=4)
    res = simulate_mhsa(X, WQ, WK, WV, WO, neuron="rate", causal=True)
    _check(res)
    assert np.all(np.isnan(res.rates["l23"][:, 0, 1:]))   # absent microcolumns


@pytest.mark.parametrize("phi", ["relu", "softplus", "exp"])
def test_rate_level_other_feature_maps(phi):
    X, _, WQ, WK, WV, WO = random_problem(seed=9, n=4, H=2, dk=3, dv=3, de=4)
    if phi == "relu":   # keep Z well above 0 so the interneurons can reach their set point
        WQ, WK, X = np.abs(WQ), np.abs(WK), np.abs(X)
    res = simulate_mhsa(X, WQ, WK, WV, WO, neuron="rate", phi=phi)
    _check(res)


def test_division_is_done_by_the_interneurons():
    """Silence the interneurons (cut their pooled input): L2/3 rates lose the 1/Z, s is wrong."""
    from ctmhsa.circuits import pathway
    from ctmhsa.circuits.instantiate import instantiate
    from ctmhsa.mapping.decode import decode
    from ctmhsa.mapping.encode import encode

    X, _, WQ, WK, WV, WO = random_problem(seed=10, n=3, H=1, dk=2, dv=2, de=3)
    c = pathway(3, 2, 2, 3)
    ref = linear_mhsa(X, WQ, WK, WV, WO)
    errs = {}
    for shunt in (True, False):
        enc = encode(c, X, Block.from_arrays(WQ, WK, WV, WO))
        if not shunt:
            enc.values.weights["pool"] = 0.0 * enc.values.weights["pool"]
        b = instantiate(c, "rate", enc.values)
        b.run(1.0)
        st = decode(c, enc, {p: b.read(p) for p in c.populations})
        errs[shunt] = np.abs(st["s"] - ref["s"]).max() / np.abs(ref["s"]).max()
        if not shunt:
            assert np.all(b.read("interneuron")["r"] == 0)
    assert errs[True] < 1e-6 and errs[False] > 0.1


def test_rate_level_is_deterministic():
    X, _, WQ, WK, WV, WO = random_problem(seed=11, n=3, H=1, dk=2, dv=2, de=3)
    a = simulate_mhsa(X, WQ, WK, WV, WO, neuron="rate", duration=0.3)
    b = simulate_mhsa(X, WQ, WK, WV, WO, neuron="rate", duration=0.3)
    np.testing.assert_array_equal(a.x_tilde, b.x_tilde)


def test_tiny_features_are_refused_by_the_fixed_circuit():
    """Tiny features: Z_i/N_i spans 6e4 across the macrocolumns. One circuit, its gain fixed from
    the weights and the tokens' range (never their Z), cannot divide them within the interneurons'
    range: refused before building, naming the macrocolumn and the drives it is exact for."""
    X, _, WQ, WK, WV, WO = random_problem(seed=12, n=3, H=1, dk=2, dv=2, de=3)
    WQ = -np.abs(WQ) * 20
    X = np.abs(X) + 1   # q << 0: elu1 features ~ exp(q) ~ 0
    with pytest.raises(OperatingRangeError, match=r"needs a division of .* exact for tokens whose pooled drive"):
        simulate_mhsa(X, WQ, WK, WV, WO, neuron="rate", duration=0.3)


@pytest.mark.parametrize("P", [2, {"l5pt": 3, "nucleus2": 2, "nucleus1": 2}])
def test_population_coding_is_exact_at_the_rate_level(P):
    X, _, WQ, WK, WV, WO = random_problem(seed=13, n=3, H=2, dk=2, dv=2, de=3)
    res = simulate_mhsa(X, WQ, WK, WV, WO, neuron="rate", P=P)
    _check(res)
    npt = P if isinstance(P, int) else P["l5pt"]
    assert res.rates["l5pt"].shape == (2, 3, 2, 2, npt)      # (head, i, c, sign, p)
    assert res.config["P"] == P


def test_offset_code_is_exact_too():
    X, _, WQ, WK, WV, WO = random_problem(seed=14, n=3, H=2, dk=2, dv=2, de=3)
    res = simulate_mhsa(X, WQ, WK, WV, WO, neuron="rate", signed="offset")
    _check(res)
    assert res.rates["l5pt"].shape == (2, 3, 2)


@pytest.mark.parametrize("n, H, causal", [(2, 1, False), (5, 3, False), (5, 2, True)])
def test_unnormalised_variant_is_exact(n, H, causal):
    """normalize=False: no interneurons, s = phi(q) phi(k); every stage as linear_mhsa(normalize=False)."""
    X, _, WQ, WK, WV, WO = random_problem(seed=40 + n, n=n, H=H, dk=3, dv=2, de=4)
    res = simulate_mhsa(X, WQ, WK, WV, WO, neuron="rate", normalize=False, causal=causal)
    _check(res, stages=tuple(s for s in STAGES if s != "Z"))
    assert "interneuron" not in res.rates and "Z" not in res.stages
    ref = linear_mhsa(X, WQ, WK, WV, WO, normalize=False, causal=causal)
    np.testing.assert_allclose(res.reference, ref["x_tilde"])
    normed = linear_mhsa(X, WQ, WK, WV, WO, causal=causal)["x_tilde"]
    assert np.max(np.abs(res.x_tilde - normed)) > 10 * TOL * np.max(np.abs(normed))   # really unnormalised


@pytest.mark.parametrize("signed", ["onoff", "offset"])
def test_skip_connection_is_exact(signed):
    """Core thalamus -> L5 PT adds WS x_i to the context-aware value (paper, discussion)."""
    X, _, WQ, WK, WV, WO = random_problem(seed=12, n=4, H=2, dk=3, dv=3, de=4)
    WS = np.random.default_rng(2).normal(size=(2, 3, 4)) / 2
    res = simulate_mhsa(X, WQ, WK, WV, WO, neuron="rate", WS=WS, signed=signed)
    _check(res)
    plain = linear_mhsa(X, WQ, WK, WV, WO)
    np.testing.assert_allclose(res.reference_stages["v_tilde"] - plain["v_tilde"],
                               np.einsum("hce,ne->hnc", WS, X), atol=1e-12)
    assert res.counts["projections"]["core_skip"] == 2 * 4 * 3 * 4 * (4 if signed == "onoff" else 1)
