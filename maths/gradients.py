"""Formal gradients of the tokenwise loss through one multihead linear self-attention block.

Implements eqs. (2)–(5) of Granier & Senn (2025), section 5, as written there — not by
automatic differentiation. With ``e_i = t_i − x̃_i`` and, per head (index omitted),
``Δ_ij = WOᵀ e_i x_jᵀ``::

    −∂E/∂WO = Σ_i e_i ṽ_iᵀ                                                       (2)
    −∂E/∂WV = Σ_ij κ_ij Δ_ij                                                     (3)
    −∂E/∂WQ = Σ_ij Z_i⁻¹ [Γq_ijj − κ_ij Σ_j' Γq_ijj'],  Γq_ijj' = [phi'(q_i) ⊙ phi(k_j')] v_jᵀ Δ_ii   (4)
    −∂E/∂WK = Σ_ij Z_i⁻¹ [Γk_ijj − κ_ij Σ_j' Γk_ijj'],  Γk_ijj' = [phi(q_i) ⊙ phi'(k_j')] v_jᵀ Δ_ij'  (5)

``v_jᵀ Δ_ij' = (v_j · WOᵀ e_i) x_j'ᵀ`` factorises into a scalar ``c_ij = v_jᵀ WOᵀ e_i`` times a
token, so the Γ tensors are contracted on the fly instead of being stored (they have
n·m·m·dk·de entries); summed over j' they regroup per microcolumn into the local form of
:func:`gradients_from_stages`, which takes the stages from anywhere (the reference here, a
simulated circuit in :mod:`ctmhsa.sims.train`). Cross-attention uses the key/value tokens ``Y`` for ``x_j`` in Δ_ij;
causal masking restricts every sum over keys to j <= i.
"""

from __future__ import annotations

import numpy as np

from .reference import _as_real_array, _mask, check_attention_inputs, linear_mhsa, resolve_phi

__all__ = ["formal_gradients", "gradients_from_stages", "mhsa_loss"]


def _targets(T, a) -> np.ndarray:
    """Validate targets against the block output shape; return them with a batch axis."""
    T = _as_real_array("T", T)
    expected = (a["B"], a["n"], a["de"]) if a["batched"] else (a["n"], a["de"])
    if T.shape != expected:
        raise ValueError(f"T: expected the shape of the block output {expected}; got {T.shape}")
    return T if a["batched"] else T[None]


def mhsa_loss(X, T, WQ, WK, WV, WO, phi="elu1", Y=None, causal=False, normalize=True) -> float:
    """Tokenwise squared error ``E = Σ_i ½ ‖t_i − x̃_i‖²`` (summed over a batch axis if present)."""
    a = check_attention_inputs(X, WQ, WK, WV, WO, Y=Y, causal=causal, normalize=normalize)
    T = _targets(T, a)
    st = linear_mhsa(a["X"], a["WQ"], a["WK"], a["WV"], a["WO"], phi=phi, Y=a["Y"],
                     causal=causal, normalize=normalize)
    return 0.5 * float(np.sum((T - st["x_tilde"]) ** 2))


def formal_gradients(X, T, WQ, WK, WV, WO, phi="elu1", Y=None, causal=False, normalize=True):
    """Negative loss gradients ``(−∂E/∂WQ, −∂E/∂WK, −∂E/∂WV, −∂E/∂WO)`` from eqs. (2)–(5).

    Parameters
    ----------
    X : array, shape (n, de) or (B, n, de)
        Query tokens.
    T : array, shape like ``X`` (n, de)
        Targets ``t_i`` of the block output.
    WQ, WK, WV, WO : arrays
        Weights, shapes as in :func:`ctmhsa.maths.reference.linear_mhsa`.
    phi : str or (callable, callable)
        Feature map and its derivative.
    Y : array, optional
        Key/value tokens (cross-attention).
    causal, normalize : bool
        As in :func:`ctmhsa.maths.reference.linear_mhsa`; ``normalize=False`` drops ``Z`` and the
        second term of (4)–(5).

    Returns
    -------
    tuple of ndarray
        Arrays shaped like ``WQ, WK, WV, WO``; summed over a batch axis if present.
    """
    a = check_attention_inputs(X, WQ, WK, WV, WO, Y=Y, causal=causal, normalize=normalize)
    st = linear_mhsa(a["X"], a["WQ"], a["WK"], a["WV"], a["WO"], phi=phi,
                     Y=a["Y"], causal=causal, normalize=normalize)
    T = _targets(T, a)
    out = [np.zeros_like(a[w]) for w in ("WQ", "WK", "WV", "WO")]
    for b in range(a["B"]):
        stages = {k: st[k][b] for k in ("q", "k", "v", "kappa", "Z", "v_tilde") if k in st}
        e = T[b] - st["x_tilde"][b]                                   # e_i = t_i − x̃_i
        g = gradients_from_stages(a["X"][b], a["Y"][b], stages, e, a["WO"], phi=phi, causal=causal,
                                  normalize=normalize)
        for acc, gi in zip(out, g):
            acc += gi
    return tuple(out)


def _per_copy(a, n: int, name: str, what: str) -> np.ndarray:
    """``a`` as seen by every query/macrocolumn: shape (H, n, m, d) from (H, m, d) (shared) or
    (H, n, m, d) (one copy per macrocolumn)."""
    a = np.asarray(a, float)
    if a.ndim == 3:
        return np.broadcast_to(a[:, None], (a.shape[0], n) + a.shape[1:])
    if a.ndim == 4 and a.shape[1] == n:
        return a
    raise ValueError(f"stages[{name!r}]: expected {what} (H, m, d) or one copy per macrocolumn (H, n, m, d); "
                     f"got shape {a.shape}")


def gradients_from_stages(x, y, stages: dict, e, WO, phi="elu1", causal: bool = False,
                          normalize: bool = True, per_query: bool = False):
    """Eqs. (2)–(5) from the stages of one sequence, however they were obtained.

    The core of :func:`formal_gradients` (which passes the exact stages of
    :func:`ctmhsa.maths.reference.linear_mhsa`) and of :func:`ctmhsa.sims.train.train_mhsa` (which passes the
    stages decoded from a simulated circuit). Written per microcolumn (i, j), in the form a
    synapse can use: with the error fed back to macrocolumn i, ``ε_i = WOᵀ e_i``, the value
    term ``c_ij = v_j · ε_i`` and its attention-weighted mean ``c̄_i = Σ_j κ_ij c_ij = ṽ_i · ε_i``
    (``normalize=False``: ``c̄_i = 0``, ``Z_i = 1``), every L2/3 cell c of microcolumn (i, j)
    changes ::

        ΔWQ[c] ∝ Z_i⁻¹ phi'(q_ic) phi(k_jc) (c_ij − c̄_i) x_iᵀ     (4), regrouped
        ΔWK[c] ∝ Z_i⁻¹ phi(q_ic) phi'(k_jc) (c_ij − c̄_i) y_jᵀ     (5), regrouped
        ΔWV    ∝ κ_ij ε_i y_jᵀ                                    (3)
        ΔWO    ∝ e_i ṽ_iᵀ                                         (2)

    summed over i and j (identical to the Γ form of the paper, term by term after summing j').

    Parameters
    ----------
    x : array (n, de)
        Query tokens (presynaptic rates of nucleus 1, decoded; units of the tokens).
    y : array (m, de)
        Key/value tokens (``x`` for self-attention).
    stages : dict
        ``q (H, n, dk)``, ``kappa (H, n, m)``, ``v_tilde (H, n, dv)``, ``Z (H, n)`` (unused when
        ``normalize=False``), and ``k``, ``v``: shared ``(H, m, dk)``, ``(H, m, dv)`` or as seen by
        every macrocolumn ``(H, n, m, dk)``, ``(H, n, m, dv)`` (the copies of a circuit).
    e : array (n, de)
        Output error ``t_i − x̃_i``.
    WO : array (H, de, dv) or (n, H, de, dv)
        Output weights of the feedback ``WOᵀ e_i`` (one copy per macrocolumn allowed).
    phi : str or (callable, callable)
        Feature map and its derivative (:func:`ctmhsa.maths.reference.resolve_phi`).
    causal, normalize : bool
        As in :func:`ctmhsa.maths.reference.linear_mhsa`.
    per_query : bool
        Return every macrocolumn's term separately (a leading axis of length n) instead of
        their sum: the gradient of each macrocolumn's own copy of the weights.

    Returns
    -------
    tuple of ndarray
        ``(−∂E/∂WQ, −∂E/∂WK, −∂E/∂WV, −∂E/∂WO)`` shaped like ``WQ, WK, WV, WO`` (with a leading
        n axis when ``per_query``); units of ``e`` times the units of the presynaptic factor.
    """
    _, f, df = resolve_phi(phi)
    x, y, e = (np.asarray(a, float) for a in (x, y, e))
    n, m = x.shape[0], y.shape[0]
    q = np.asarray(stages["q"], float)
    H = q.shape[0]
    kappa = np.asarray(stages["kappa"], float)
    v_tilde = np.asarray(stages["v_tilde"], float)
    if q.shape[:2] != (H, n) or kappa.shape != (H, n, m) or v_tilde.shape[:2] != (H, n) or e.shape != (n, x.shape[1]):
        raise ValueError(f"stages: q {q.shape}, kappa {kappa.shape}, v_tilde {v_tilde.shape}, e {e.shape} do not "
                         f"match n={n}, m={m}, H={H}")
    M = _mask(n, m, causal)
    # the copies of k_j, v_j seen by macrocolumn i; absent microcolumns (causal) contribute 0
    k = np.where(M[None, :, :, None], _per_copy(stages["k"], n, "k", "keys"), 0.0)
    v = np.where(M[None, :, :, None], _per_copy(stages["v"], n, "v", "values"), 0.0)
    Z = np.asarray(stages["Z"], float) if normalize else np.ones((H, n))
    WO = np.asarray(WO, float)
    WOi = np.broadcast_to(WO, (n,) + WO.shape) if WO.ndim == 3 else WO     # (n, H, de, dv)
    eps = np.einsum("ne,nhed->hnd", e, WOi)                       # ε_i = WOᵀ e_i, fed back to L5
    c = np.einsum("hnmd,hnd->hnm", v, eps) * M                    # c_ij = v_j · ε_i
    cbar = np.einsum("hnm,hnm->hn", kappa, c) if normalize else np.zeros((H, n))
    delta = (c - cbar[..., None]) * M / Z[..., None]              # (c_ij − c̄_i) / Z_i
    fq, dfq, fk, dfk = f(q), df(q), f(k), df(k)
    gQ = np.einsum("hnc,hnmc,hnm,ne->nhce", dfq, fk, delta, x)
    gK = np.einsum("hnc,hnmc,hnm,me->nhce", fq, dfk, delta, y)
    gV = np.einsum("hnm,hnd,me->nhde", kappa * M, eps, y)
    gO = np.einsum("ne,hnd->nhed", e, v_tilde)
    out = (gQ, gK, gV, gO)
    return out if per_query else tuple(g.sum(axis=0) for g in out)
