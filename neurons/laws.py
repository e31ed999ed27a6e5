"""Two-point-neuron interaction laws: how an L5 IT soma combines basal drive R and apical drive C.

Algorithm 1 needs the product ``R C`` (value times attention). Adeel ("Beyond Attention", seed
003, eqs. 1-5) proposes other modulation functions for two-point neurons; this module holds each
as a numpy function and as a Brian2 expression, side by side, so the simulated cell and the
prediction of what it computes cannot drift apart. ``R = U/u`` is the (filtered) basal potential
in units of the code (the value, ±v for an ON/OFF pair), ``C = V_a/u`` the apical potential
(``a κ``, ~1 on average). A rate cannot be negative: every law is rectified at 0 (Co4 also
saturates at 6, its ReLU6).

=========  =========================================  ===========================
name       law                                        source
=========  =========================================  ===========================
product    ``[R]_+ [C]_+``                            Algorithm 1 (Granier & Senn)
co4        ``ReLU6(R² + 2R + C (1 + |R|))``           Adeel eq. 1, "Cooperation"
tm1        ``R (1 + exp(R C)) / 2``                   Adeel eq. 2
tm2        ``R + R C``                                Adeel eq. 3
tm3        ``R (1 + tanh(R C))``                      Adeel eq. 4
tm4        ``R 2^(R C)``                              Adeel eq. 5
=========  =========================================  ===========================
"""

from __future__ import annotations

import numpy as np

__all__ = ["LAWS", "law_expression", "law_numpy", "check_law", "attention_under_law"]

_R, _C = "(U/u)", "(V_a/u)"

LAWS = {
    "product": ("clip(U/u, 0, inf)*clip(V_a/u, 0, inf)",
                lambda R, C: np.maximum(R, 0.0) * np.maximum(C, 0.0)),
    "co4": (f"clip({_R}**2 + 2*{_R} + {_C}*(1 + abs({_R})), 0, 6)",
            lambda R, C: np.clip(R ** 2 + 2 * R + C * (1 + np.abs(R)), 0.0, 6.0)),
    "tm1": (f"clip(0.5*{_R}*(1 + exp({_R}*{_C})), 0, inf)",
            lambda R, C: np.maximum(0.5 * R * (1 + np.exp(R * C)), 0.0)),
    "tm2": (f"clip({_R} + {_R}*{_C}, 0, inf)",
            lambda R, C: np.maximum(R + R * C, 0.0)),
    "tm3": (f"clip({_R}*(1 + tanh({_R}*{_C})), 0, inf)",
            lambda R, C: np.maximum(R * (1 + np.tanh(R * C)), 0.0)),
    "tm4": (f"clip({_R}*exp({_R}*{_C}*log(2)), 0, inf)",
            lambda R, C: np.maximum(R * 2.0 ** (R * C), 0.0)),
}
"""Name -> (Brian2 expression in ``U``, ``V_a``, ``u``; numpy function of ``(R, C)``), both
rectified at 0. ``product`` is Algorithm 1's and the default."""


def check_law(law) -> str:
    """Return ``law`` if it names a law of :data:`LAWS`, else raise ``ValueError``/``TypeError``."""
    if not isinstance(law, str):
        raise TypeError(f"law: expected a law name (str), got {type(law).__name__}")
    if law not in LAWS:
        raise ValueError(f"law: unknown two-point-neuron law {law!r}; expected one of {sorted(LAWS)}")
    return law


def law_expression(law: str) -> str:
    """Brian2 expression of ``law`` (dimensionless, >= 0) for the L5 IT soma."""
    return LAWS[check_law(law)][0]


def law_numpy(law: str):
    """Numpy function ``f(R, C)`` of ``law`` (rectified at 0)."""
    return LAWS[check_law(law)][1]


def attention_under_law(kappa, v, WO, law: str, a, v0=None, causal: bool = False) -> dict:
    """What the circuit computes when its L5 IT somata follow ``law`` instead of the product,
    decoded as if they multiplied (the decoder of :mod:`ctmhsa.mapping.decode`).

    An ON/OFF pair sees ``R = ±v_j`` and ``C = a_i κ_ij``; its decoded output is
    ``y_ij = (f(v, C) - f(-v, C)) / a_i``, which is ``κ_ij v_j`` for the product. With the offset
    code (``v0`` given: one cell at ``R = v0 + v``), ``y_ij = f(v0 + v, C) / a_i - v0 κ_ij``.

    Parameters
    ----------
    kappa : ndarray (H, n, m)
        Attention (exact: the L2/3 stage does not depend on the law).
    v : ndarray (H, m, dv)
        Values.
    WO : ndarray (H, de, dv)
    law : str
    a : ndarray (H, n)
        Apical scale per macrocolumn (``Encoding.consts["a"]``: keys per macrocolumn).
    v0 : ndarray (H,), optional
        Value offset of the offset code.
    causal : bool
        Microcolumns j > i are absent (they contribute nothing, whatever the law).

    Returns
    -------
    dict
        ``y (H, n, m, dv)``, ``v_tilde (H, n, dv)``, ``x_tilde (n, de)``.
    """
    f = law_numpy(law)
    kappa, v, a = np.asarray(kappa, float), np.asarray(v, float), np.asarray(a, float)
    C = (a[:, :, None] * kappa)[..., None]                  # (H, n, m, 1)
    R = v[:, None, :, :]                                    # (H, 1, m, dv)
    A = a[:, :, None, None]
    if v0 is None:
        y = (f(R, C) - f(-R, C)) / A
    else:
        off = np.asarray(v0, float)[:, None, None, None]
        y = f(off + R, C) / A - off * kappa[..., None]
    if causal:   # absent cells fire nothing, although f(R, 0) != 0 for most laws
        n, m = kappa.shape[1:]
        y = np.where((np.arange(m)[None, :] <= np.arange(n)[:, None])[None, :, :, None], y, 0.0)
    v_tilde = y.sum(axis=2)
    return dict(y=y, v_tilde=v_tilde, x_tilde=np.einsum("hec,hnc->ne", np.asarray(WO, float), v_tilde))
