"""ctmhsa.maths.gradients: eqs. (2)-(5) of the paper against central finite differences."""

import numpy as np
import pytest

from ctmhsa.maths.gradients import formal_gradients, mhsa_loss
from ctmhsa.maths.reference import FEATURE_MAPS
from conftest import random_problem

pytestmark = pytest.mark.codegen_independent

GRAD_SHAPES = [  # (n, m, H, dk, dv, de): H >= 2, dk != dv != de
    (4, None, 2, 3, 4, 5),
    (3, None, 3, 2, 5, 4),
    (5, 3, 2, 4, 2, 3),    # cross-attention
]


def _fd(X, T, W, phi, Y, causal, h=1e-6):
    out = []
    for wi in range(4):
        g = np.zeros_like(W[wi])
        for idx in np.ndindex(W[wi].shape):
            Wp = [w.copy() for w in W]
            Wm = [w.copy() for w in W]
            Wp[wi][idx] += h
            Wm[wi][idx] -= h
            Ep = mhsa_loss(X, T, *Wp, phi=phi, Y=Y, causal=causal)
            Em = mhsa_loss(X, T, *Wm, phi=phi, Y=Y, causal=causal)
            g[idx] = -(Ep - Em) / (2 * h)
        out.append(g)
    return out


@pytest.mark.parametrize("phi", sorted(FEATURE_MAPS))
@pytest.mark.parametrize("shape", GRAD_SHAPES)
def test_formal_gradients_match_finite_differences(phi, shape):
    n, m, H, dk, dv, de = shape
    X, Y, WQ, WK, WV, WO = random_problem(seed=11 + n, n=n, m=m, H=H, dk=dk, dv=dv, de=de)
    if phi == "relu":  # keep every relu feature away from its kink and Z > 0
        X, WQ, WK = np.abs(X) + 0.1, np.abs(WQ), np.abs(WK)
        Y = None if Y is None else np.abs(Y) + 0.1
    T = np.random.default_rng(99).normal(size=(n, de))
    W = [WQ, WK, WV, WO]
    formal = formal_gradients(X, T, *W, phi=phi, Y=Y)
    numeric = _fd(X, T, W, phi, Y, False)
    for name, g, fd in zip(("WQ", "WK", "WV", "WO"), formal, numeric):
        rel = np.linalg.norm(g - fd) / np.linalg.norm(fd)
        assert rel <= 1e-6, f"{name}: relative error {rel:.2e}"


@pytest.mark.parametrize("phi", ["elu1", "softplus"])
def test_causal_and_batched_gradients(phi):
    X, _, WQ, WK, WV, WO = random_problem(seed=21, n=4, H=2, dk=3, dv=2, de=5, batch=2)
    T = np.random.default_rng(5).normal(size=X.shape)
    W = [WQ, WK, WV, WO]
    formal = formal_gradients(X, T, *W, phi=phi, causal=True)
    numeric = _fd(X, T, W, phi, None, True)
    for g, fd in zip(formal, numeric):
        assert np.linalg.norm(g - fd) / np.linalg.norm(fd) <= 1e-6


def test_gradient_descent_lowers_the_loss():
    X, _, WQ, WK, WV, WO = random_problem(seed=31, n=5, H=2, dk=3, dv=3, de=4)
    T = np.random.default_rng(32).normal(size=(5, 4))
    W = [WQ.copy(), WK.copy(), WV.copy(), WO.copy()]
    losses = [mhsa_loss(X, T, *W)]
    for _ in range(300):
        g = formal_gradients(X, T, *W)
        W = [w + 0.02 * gi for w, gi in zip(W, g)]   # step along −∂E/∂W
        losses.append(mhsa_loss(X, T, *W))
    assert losses[-1] < 0.5 * losses[0]
    assert np.all(np.diff(losses) <= 1e-12)   # small steps: monotone descent
