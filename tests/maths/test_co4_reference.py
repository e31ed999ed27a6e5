"""The Co4 reference maths (seed 003): the Cooperation Equation, the MOD functions and one Co4
block of latent queries, checked against hand values, the seed's stated properties and, without
its triadic loops, the project's linear attention."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import ctmhsa
from ctmhsa.maths.co4 import MOD_FUNCTIONS, Co4Model, co4_forward, cooperation
from ctmhsa.maths.reference import linear_mhsa
from ctmhsa.maths.transformer import normalise
from ctmhsa.neurons.laws import law_numpy

pytestmark = pytest.mark.codegen_independent

finite = st.floats(-20, 20, allow_nan=False)


def _model(seed=0, L=3, de=5, H=2, d=4, classes=3, scale=0.5):
    r = np.random.default_rng(seed)
    W = [r.normal(size=(H, d, de)) * scale for _ in range(3)]
    return Co4Model(r.normal(size=(L, de)), *W, r.normal(size=(H, de, d)) * scale,
                    r.normal(size=(classes, de)), r.normal(size=classes))


def test_cooperation_by_hand():
    # R = 1, C = 0.5: 1 + 2 + 0.5*2 = 4;  R = -1, C = 3: 1 - 2 + 3*2 = 5;  R = 2, C = 1: 4 + 4 + 3 -> 6
    assert cooperation([1.0, -1.0, 2.0, -0.5], [0.5, 3.0, 1.0, -1.0]) == pytest.approx([4.0, 5.0, 6.0, 0.0])
    assert ctmhsa.cooperation(0.0, 0.0) == 0.0


@given(R=finite, C=finite)
def test_cooperation_is_the_cells_co4_law_and_bounded(R, C):
    y = cooperation(R, C)
    assert 0.0 <= y <= 6.0
    assert y == pytest.approx(law_numpy("co4")(R, C), rel=1e-12, abs=1e-12)


@given(R=finite, C=finite, dC=st.floats(1e-3, 5))
def test_context_drives_the_output(R, C, dC):
    """The seed: "C is the driving force": the output never falls as C grows (slope 1 + |R|
    inside the ReLU6), and a high C pushes even a negative R to the positive side."""
    assert cooperation(R, C + dC) >= cooperation(R, C)
    if -1.0 < R < 0.0:
        assert cooperation(R, 10.0) > 0.0


def test_the_classical_mod_functions():
    R, C = 0.7, -0.4
    assert MOD_FUNCTIONS["tm1"](R, C) == pytest.approx(0.5 * R * (1 + np.exp(R * C)))
    assert MOD_FUNCTIONS["tm2"](R, C) == pytest.approx(R + R * C)
    assert MOD_FUNCTIONS["tm3"](R, C) == pytest.approx(R * (1 + np.tanh(R * C)))
    assert MOD_FUNCTIONS["tm4"](R, C) == pytest.approx(R * 2 ** (R * C))
    for name in ("tm1", "tm2", "tm3", "tm4"):   # the cells' laws are the same functions, rectified
        assert law_numpy(name)(R, C) == pytest.approx(max(MOD_FUNCTIONS[name](R, C), 0.0))


def test_without_its_loops_co4_is_the_latents_linear_attention():
    """mod="none": the latents attend over the tokens, exactly the project's cross-attention."""
    m = _model()
    X = np.random.default_rng(1).normal(size=(6, 5))
    out = co4_forward(X, m, mod="none")
    ref = linear_mhsa(normalise(m.latents), m.WQ, m.WK, m.WV, m.WO, Y=normalise(X))
    np.testing.assert_allclose(out["kappa"], ref["kappa"], rtol=1e-12)
    np.testing.assert_allclose(out["x_tilde"], ref["x_tilde"], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out["out"], m.latents + ref["x_tilde"], rtol=1e-12)


def test_the_triadic_loops_by_hand():
    """One head, one latent, two tokens, d = 1: every modulated stage written out."""
    m = Co4Model(np.array([[1.0, -1.0]]), np.array([[[0.5, 0.0]]]), np.array([[[0.0, 1.0]]]),
                 np.array([[[1.0, 1.0]]]), np.array([[[1.0], [0.0]]]))
    X = np.array([[2.0, -2.0], [1.0, 3.0]])
    out = co4_forward(X, m)
    q, k, v = out["q"][0, :, 0], out["k"][0, :, 0], out["v"][0, :, 0]
    np.testing.assert_allclose(out["q_m"][0, 0, 0], np.mean([cooperation(q[0], (k[j] + v[j]) / 2) for j in (0, 1)]))
    np.testing.assert_allclose(out["k_m"][0, :, 0], [cooperation(k[j], (q[0] + v[j]) / 2) for j in (0, 1)])
    np.testing.assert_allclose(out["v_m"][0, :, 0], [cooperation(v[j], (q[0] + k[j]) / 2) for j in (0, 1)])


@given(seed=st.integers(0, 1000), mod=st.sampled_from(sorted(MOD_FUNCTIONS)))
def test_a_permutation_of_the_tokens_changes_nothing(seed, mod):
    """The latents are independent of the input, so the block is permutation invariant (the
    seed's PI networks): the output and logits stay, the attention permutes with the tokens."""
    m = _model(seed)
    r = np.random.default_rng(seed + 1)
    X = r.normal(size=(7, 5))
    p = r.permutation(7)
    a, b = co4_forward(X, m, mod=mod, phi="softplus"), co4_forward(X[p], m, mod=mod, phi="softplus")
    np.testing.assert_allclose(b["out"], a["out"], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(b["logits"], a["logits"], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(b["kappa"], a["kappa"][:, :, p], rtol=1e-9, atol=1e-15)


def test_cost_is_linear_in_the_tokens():
    """O(L n d): the stages of a 3-latent block over n tokens hold L x n attention entries."""
    m = _model(L=3)
    out = co4_forward(np.random.default_rng(2).normal(size=(50, 5)), m)
    assert out["kappa"].shape == (2, 3, 50)
    np.testing.assert_allclose(out["kappa"].sum(axis=2), 1.0)


@pytest.mark.parametrize("call, err, match", [
    (lambda: Co4Model(np.zeros((0, 3)), *[np.zeros((1, 2, 3))] * 3, np.zeros((1, 3, 2))), ValueError, "latents"),
    (lambda: Co4Model(np.ones((2, 3)), np.ones((1, 2, 3)), np.ones((1, 3, 3)), np.ones((1, 2, 3)),
                      np.ones((1, 3, 2))), ValueError, "one shape"),
    (lambda: Co4Model(np.ones((2, 3)), *[np.ones((1, 2, 3))] * 3, np.ones((1, 2, 3))), ValueError, "WO"),
    (lambda: Co4Model(np.ones((2, 3)), *[np.ones((1, 2, 3))] * 3, np.ones((1, 3, 2)), np.ones((4, 3))),
     ValueError, "readout"),
    (lambda: co4_forward(np.ones((2, 4)), _model(de=5)), ValueError, "X: expected tokens"),
    (lambda: co4_forward(np.ones((2, 5)), _model(), mod="co5"), ValueError, "mod"),
    (lambda: co4_forward(np.ones((2, 5)), "model"), TypeError, "model"),
    (lambda: co4_forward(np.zeros((2, 5)), _model()), ValueError, "mean"),
    (lambda: cooperation("a", 1.0), TypeError, "R"),
    (lambda: cooperation(1.0, np.nan), ValueError, "C"),
])
def test_bad_input_is_refused_naming_it(call, err, match):
    with pytest.raises(err, match=match):
        call()
