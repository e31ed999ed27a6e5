"""Bad input to the reference raises ValueError/TypeError that names the argument."""

import numpy as np
import pytest

from ctmhsa.maths.gradients import formal_gradients
from ctmhsa.maths.reference import linear_mhsa, resolve_phi
from conftest import random_problem

pytestmark = pytest.mark.codegen_independent


@pytest.fixture
def ok():
    X, _, WQ, WK, WV, WO = random_problem(n=4, H=2, dk=3, dv=4, de=5)
    return dict(X=X, WQ=WQ, WK=WK, WV=WV, WO=WO)


@pytest.mark.parametrize(
    "arg, bad, match",
    [
        ("X", np.zeros(5), "X: expected shape"),
        ("X", np.zeros((4, 6)), "WQ: last axis must equal de"),
        ("WQ", np.zeros((3, 5)), r"WQ: expected shape \(H, dk, de\).*WQ\[None\]"),
        ("WK", np.zeros((2, 2, 5)), "WK: expected shape"),
        ("WV", np.zeros((3, 4, 5)), "WV: has 3 heads, WQ has 2"),
        ("WV", np.zeros((2, 4, 6)), "WV: expected shape"),
        ("WO", np.zeros((1, 5, 4)), "WO: has 1 heads, WQ has 2"),
        ("WO", np.zeros((2, 5, 3)), "WO: expected shape"),
    ],
)
def test_wrong_shapes(ok, arg, bad, match):
    ok[arg] = bad
    with pytest.raises(ValueError, match=match):
        linear_mhsa(**ok)


@pytest.mark.parametrize("arg", ["X", "WQ", "WK", "WV", "WO"])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_nan_inf(ok, arg, value):
    ok[arg] = ok[arg].copy()
    ok[arg].flat[1] = value
    with pytest.raises(ValueError, match=f"{arg}: contains 1 NaN or infinite"):
        linear_mhsa(**ok)


def test_non_numeric(ok):
    ok["X"] = np.array([["a"] * 5] * 4)
    with pytest.raises(TypeError, match="X: expected a real numeric array"):
        linear_mhsa(**ok)
    with pytest.raises(TypeError, match="WQ: expected a real numeric array"):
        linear_mhsa(np.zeros((4, 5)), "nope", ok["WK"], ok["WV"], ok["WO"])


def test_complex_rejected(ok):
    ok["WQ"] = ok["WQ"] + 1j
    with pytest.raises(TypeError, match="WQ: expected a real numeric array"):
        linear_mhsa(**ok)


def test_cross_attention_shapes(ok):
    with pytest.raises(ValueError, match="Y: embedding dimension 3 differs"):
        linear_mhsa(**ok, Y=np.zeros((3, 3)))
    with pytest.raises(ValueError, match="Y: expected shape"):
        linear_mhsa(**ok, Y=np.zeros(5))


def test_unknown_phi_and_method(ok):
    with pytest.raises(ValueError, match="phi: unknown feature map 'tanh'"):
        linear_mhsa(**ok, phi="tanh")
    with pytest.raises(TypeError, match="phi: expected a feature-map name"):
        resolve_phi(3)
    with pytest.raises(ValueError, match="method: expected"):
        linear_mhsa(**ok, method="fast")


def test_flags_must_be_bool(ok):
    with pytest.raises(TypeError, match="causal: expected True or False"):
        linear_mhsa(**ok, causal="yes")


def test_negative_custom_phi(ok):
    with pytest.raises(ValueError, match="phi: .* negative entries"):
        linear_mhsa(**ok, phi=(lambda z: z, lambda z: np.ones_like(z)))


def test_exp_overflow_is_reported(ok):
    ok["X"] = ok["X"] * 1e4
    with pytest.raises(ValueError, match="phi: .* not finite"):
        linear_mhsa(**ok, phi="exp")


@pytest.mark.parametrize("method", ["vectorized", "loops", "linear"])
def test_relu_dead_features_give_Z_error_not_nan(ok, method):
    ok["WQ"] = -np.abs(ok["WQ"])
    ok["X"] = np.abs(ok["X"])   # every q < 0: relu kills every feature, Z = 0
    with pytest.raises(ValueError, match="phi: the normaliser Z is 0"):
        linear_mhsa(**ok, phi="relu", method=method)
    # the unnormalised variant has no division and stays finite
    st = linear_mhsa(**ok, phi="relu", normalize=False, method=method)
    assert np.all(np.isfinite(st["x_tilde"])) and np.all(st["x_tilde"] == 0)


def test_gradient_targets_shape(ok):
    with pytest.raises(ValueError, match="T: expected the shape of the block output"):
        formal_gradients(ok["X"], np.zeros((4, 4)), ok["WQ"], ok["WK"], ok["WV"], ok["WO"])
    with pytest.raises(ValueError, match="T: contains 1 NaN"):
        T = np.zeros((4, 5)); T[0, 0] = np.nan
        formal_gradients(ok["X"], T, ok["WQ"], ok["WK"], ok["WV"], ok["WO"])
