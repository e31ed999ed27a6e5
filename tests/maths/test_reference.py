"""ctmhsa.maths.reference: the three implementations agree, stages have SPEC shapes and meaning."""

import numpy as np
import pytest

from ctmhsa.maths.reference import FEATURE_MAPS, STAGES, linear_mhsa, resolve_phi, softmax_mhsa
from conftest import random_problem

pytestmark = pytest.mark.codegen_independent
PHIS = sorted(FEATURE_MAPS)
SHAPES = [  # (n, m, H, dk, dv, de)
    (4, None, 1, 3, 3, 3),
    (5, None, 3, 2, 4, 6),
    (3, 6, 2, 5, 3, 4),   # cross-attention, m > n
    (6, 2, 2, 3, 2, 5),   # cross-attention, m < n
]


def _max_diff(a, b, keys):
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in keys)


@pytest.mark.parametrize("phi", PHIS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("normalize", [True, False])
def test_loops_vectorized_linear_agree(phi, shape, causal, normalize):
    n, m, H, dk, dv, de = shape
    # a positive offset on the weights keeps relu features alive so Z > 0 on every row
    X, Y, WQ, WK, WV, WO = random_problem(seed=sum(s or 0 for s in shape), n=n, m=m, H=H, dk=dk, dv=dv, de=de)
    if phi == "relu":
        X, WQ, WK = np.abs(X), np.abs(WQ), np.abs(WK)
        Y = None if Y is None else np.abs(Y)
    kw = dict(phi=phi, Y=Y, causal=causal, normalize=normalize)
    vec = linear_mhsa(X, WQ, WK, WV, WO, **kw)
    loops = linear_mhsa(X, WQ, WK, WV, WO, method="loops", **kw)
    lin = linear_mhsa(X, WQ, WK, WV, WO, method="linear", **kw)
    assert _max_diff(vec, loops, list(vec)) <= 1e-12
    assert _max_diff(vec, lin, ["q", "k", "v", "Z", "v_tilde", "x_tilde"]) <= 1e-12


@pytest.mark.smoke
def test_stage_shapes_match_spec():
    n, m, H, dk, dv, de = 5, 7, 3, 2, 4, 6
    X, Y, WQ, WK, WV, WO = random_problem(n=n, m=m, H=H, dk=dk, dv=dv, de=de)
    st = linear_mhsa(X, WQ, WK, WV, WO, Y=Y)
    expected = {
        "q": (H, n, dk), "k": (H, m, dk), "v": (H, m, dv), "s": (H, n, m, dk),
        "kappa": (H, n, m), "v_tilde": (H, n, dv), "x_tilde": (n, de), "Z": (H, n),
        "y": (H, n, m, dv),
    }
    assert set(STAGES) <= set(st)
    for key, shape in expected.items():
        assert st[key].shape == shape, key


@pytest.mark.smoke
def test_kernel_is_normalised_and_matches_definition():
    X, _, WQ, WK, WV, WO = random_problem(seed=3, n=6, H=2, dk=4, dv=3, de=5)
    st = linear_mhsa(X, WQ, WK, WV, WO)
    np.testing.assert_allclose(st["kappa"].sum(axis=-1), 1.0, rtol=0, atol=1e-13)
    f = FEATURE_MAPS["elu1"][0]
    # κ_ij = phi(k_j)·phi(q_i) / Σ_j' phi(k_j')·phi(q_i), written independently of the module
    for h in range(2):
        K = f(X @ WK[h].T)
        Qf = f(X @ WQ[h].T)
        G = Qf @ K.T
        np.testing.assert_allclose(st["kappa"][h], G / G.sum(1, keepdims=True), rtol=1e-12)
        vt = (G / G.sum(1, keepdims=True)) @ (X @ WV[h].T)
        np.testing.assert_allclose(st["v_tilde"][h], vt, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(
        st["x_tilde"], sum(st["v_tilde"][h] @ WO[h].T for h in range(2)), atol=1e-13)


def test_causal_mask_zeroes_future_keys():
    X, _, WQ, WK, WV, WO = random_problem(seed=4, n=5)
    st = linear_mhsa(X, WQ, WK, WV, WO, causal=True)
    future = np.triu(np.ones((5, 5), bool), k=1)
    assert np.all(st["kappa"][:, future] == 0)
    np.testing.assert_allclose(st["kappa"].sum(-1), 1.0, atol=1e-13)
    # the first query only sees itself: ṽ_0 = v_0
    np.testing.assert_allclose(st["v_tilde"][:, 0], st["v"][:, 0], atol=1e-13)


def test_unnormalised_variant_is_Z_times_normalised():
    X, _, WQ, WK, WV, WO = random_problem(seed=5)
    a = linear_mhsa(X, WQ, WK, WV, WO)
    b = linear_mhsa(X, WQ, WK, WV, WO, normalize=False)
    np.testing.assert_allclose(b["v_tilde"], a["v_tilde"] * a["Z"][..., None], rtol=1e-12)


@pytest.mark.parametrize("method", ["vectorized", "loops", "linear"])
def test_batch_axis_equals_stacked_runs(method):
    X, Y, WQ, WK, WV, WO = random_problem(seed=6, n=4, m=3, batch=3)
    st = linear_mhsa(X, WQ, WK, WV, WO, Y=Y, method=method)
    for b in range(3):
        one = linear_mhsa(X[b], WQ, WK, WV, WO, Y=Y[b], method=method)
        for key in one:
            np.testing.assert_allclose(st[key][b], one[key], rtol=0, atol=1e-14)


def test_custom_feature_map_pair():
    X, _, WQ, WK, WV, WO = random_problem(seed=7)
    sq = (lambda z: z ** 2 + 0.1, lambda z: 2 * z)
    st = linear_mhsa(X, WQ, WK, WV, WO, phi=sq)
    ref = linear_mhsa(X, WQ, WK, WV, WO, phi=sq, method="loops")
    np.testing.assert_allclose(st["x_tilde"], ref["x_tilde"], atol=1e-13)
    assert resolve_phi(sq)[0].startswith("custom")


@pytest.mark.parametrize("phi", PHIS)
def test_feature_map_derivatives(phi):
    f, df = FEATURE_MAPS[phi]
    z = np.linspace(-3, 3, 61) + 0.013  # avoid relu's kink at exactly 0
    num = (f(z + 1e-6) - f(z - 1e-6)) / 2e-6
    np.testing.assert_allclose(df(z), num, rtol=1e-6, atol=1e-8)
    assert np.all(f(z) >= 0)


def test_softmax_rows_sum_to_one_and_differ_from_linear():
    X, _, WQ, WK, WV, WO = random_problem(seed=8)
    sm = softmax_mhsa(X, WQ, WK, WV, WO)
    lin = linear_mhsa(X, WQ, WK, WV, WO)
    np.testing.assert_allclose(sm["kappa"].sum(-1), 1.0, atol=1e-13)
    assert np.abs(sm["x_tilde"] - lin["x_tilde"]).max() > 1e-3
    smc = softmax_mhsa(X, WQ, WK, WV, WO, causal=True)
    assert np.all(smc["kappa"][:, 0, 1:] == 0)


@pytest.mark.parametrize("method", ["loops", "linear"])
def test_skip_path_same_in_every_method(method):
    from conftest import random_problem

    X, _, WQ, WK, WV, WO = random_problem(seed=9, n=4, H=2, dk=3, dv=2, de=5)
    WS = np.random.default_rng(0).normal(size=(2, 2, 5))
    a = linear_mhsa(X, WQ, WK, WV, WO, WS=WS)
    b = linear_mhsa(X, WQ, WK, WV, WO, WS=WS, method=method)
    plain = linear_mhsa(X, WQ, WK, WV, WO)
    for key in ("v_tilde", "x_tilde"):
        np.testing.assert_allclose(b[key], a[key], rtol=0, atol=1e-12)
    np.testing.assert_allclose(a["x_tilde"] - plain["x_tilde"],
                               np.einsum("hec,hnc->ne", WO, np.einsum("hce,ne->hnc", WS, X)), atol=1e-12)
