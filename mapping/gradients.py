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
n·m·m·dk·de entries). Cross-attention uses the key/value tokens ``Y`` for ``x_j`` in Δ_ij;
causal masking restricts every sum over keys to j <= i.
"""

from __future__ import annotations

import numpy as np

from .reference import _as_real_array, _mask, check_attention_inputs, linear_mhsa, resolve_phi

__all__ = ["formal_gradients", "mhsa_loss"]


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
        Weights, shapes as in :func:`mapping.reference.linear_mhsa`.
    phi : str or (callable, callable)
        Feature map and its derivative.
    Y : array, optional
        Key/value tokens (cross-attention).
    causal, normalize : bool
        As in :func:`mapping.reference.linear_mhsa`; ``normalize=False`` drops ``Z`` and the
        second term of (4)–(5).

    Returns
    -------
    tuple of ndarray
        Arrays shaped like ``WQ, WK, WV, WO``; summed over a batch axis if present.
    """
    _, f, df = resolve_phi(phi)
    a = check_attention_inputs(X, WQ, WK, WV, WO, Y=Y, causal=causal, normalize=normalize)
    st = linear_mhsa(a["X"], a["WQ"], a["WK"], a["WV"], a["WO"], phi=phi,
                     Y=a["Y"], causal=causal, normalize=normalize)
    T = _targets(T, a)
    M = _mask(a["n"], a["m"], causal)
    gQ, gK, gV, gO = (np.zeros_like(a[w]) for w in ("WQ", "WK", "WV", "WO"))
    for b in range(a["B"]):
        x, y = a["X"][b], a["Y"][b]
        e = T[b] - st["x_tilde"][b]                                   # e_i = t_i − x̃_i
        for h in range(a["H"]):
            q, k, v = st["q"][b, h], st["k"][b, h], st["v"][b, h]
            kappa, v_tilde = st["kappa"][b, h], st["v_tilde"][b, h]
            Z = st["Z"][b, h] if normalize else np.ones(a["n"])
            WO = a["WO"][h]
            eps = e @ WO                                              # WOᵀ e_i  (n, dv)
            c = np.einsum("md,nd->nm", v, eps) * M                    # c_ij = v_jᵀ WOᵀ e_i
            # (2) and (3): Δ_ij = WOᵀ e_i x_jᵀ
            gO[h] += np.einsum("ne,nd->ed", e, v_tilde)
            gV[h] += np.einsum("nm,nd,me->de", kappa, eps, y)
            fq, dfq, fk, dfk = f(q), df(q), f(k), df(k)
            # (4): Γq_ijj' = [phi'(q_i) ⊙ phi(k_j')] c_ij x_iᵀ
            Gq_diag = np.einsum("nc,mc,nm->nmc", dfq, fk, c)          # Γq_ijj, token factor x_i
            Gq_sum = np.einsum("nc,nc,nm->nmc", dfq, M @ fk, c)      # sum over j' of Γq_ijj'
            brk = Gq_diag - (kappa[..., None] * Gq_sum if normalize else 0.0)
            gQ[h] += np.einsum("nmc,n,ne->ce", brk, 1.0 / Z, x)
            # (5): Γk_ijj' = [phi(q_i) ⊙ phi'(k_j')] c_ij x_j'ᵀ
            first = np.einsum("nm,n,nc,mc,me->ce", c, 1.0 / Z, fq, dfk, y)
            if normalize:
                w = np.einsum("nm,nm->n", c, kappa) / Z               # Σ_j c_ij κ_ij / Z_i
                second = np.einsum("n,nm,nc,mc,me->ce", w, M, fq, dfk, y)
            else:
                second = 0.0
            gK[h] += first - second
    return gQ, gK, gV, gO
