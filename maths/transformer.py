"""The maths of a transformer built from :func:`linear_mhsa` blocks (numpy only).

Per token, the divisive normalisation ``N(x) = x / mean_e |x_e|``. For each block ``l`` of a
:class:`ctmhsa.maths.model.Model`, with ``φ`` the feature map (``elu1`` by default) and the
normalised linear attention of :func:`ctmhsa.maths.reference.linear_mhsa`::

    H = X + MHSA_l(N(X))                        attention on the normalised stream, added to it
    X = H + W2_l relu(W1_l N(H) + b1_l) + b2_l  tokenwise MLP, added to the stream

After the last block, where the model has a read-out, ``logits = R N(mean_i X_i) + c``.
With an input embedding (``embed.W``), ``X`` is the raw input ``(n, p)`` and the tokens are
``X @ embed.W.T + embed.pos``.

A causal model (``model.causal``) reads a sequence ``X (T, de)``, one token per step: each
block's attention is the key-value memory of :func:`ctmhsa.maths.reference.memory_attention`
(λ ``model.forget``, normalised where ``model.memory_normalised``), token t reading the memory of tokens
``<= t``, and the read-out gives logits per token, ``logits_t = R N(X_t) + c`` (no mean).

This is the reference the circuit of :mod:`ctmhsa.circuits.transformer` is measured against;
nothing here is used to set a value of that circuit.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .model import Model
from .reference import _as_real_array, linear_mhsa, memory_attention
from .stages import BLOCK_STAGES

__all__ = ["transformer_forward", "normalise", "tokens_of", "plain_model", "BLOCK_STAGES"]


def normalise(x, what: str = "X") -> np.ndarray:
    """``x / mean_e |x_e|`` along the last axis (dimensionless).

    Raises
    ------
    ValueError
        A token whose entries are all zero (naming ``what`` and the token's index).
    """
    x = np.asarray(x, float)
    scale = np.abs(x).mean(axis=-1, keepdims=True)
    if np.any(scale == 0):
        idx = tuple(int(i) for i in np.argwhere(scale[..., 0] == 0)[0])
        which = "it" if not idx else f"token {idx[0] if len(idx) == 1 else idx}"
        raise ValueError(f"{what}: {'its entries are all zero' if not idx else which + ' has mean |x| = 0'}; the "
                         f"divisive normalisation N(x) = x / mean|x| is undefined for {'it' if not idx else 'that token'}")
    return x / scale


def _check_model(model) -> Model:
    if not isinstance(model, Model):
        raise TypeError(f"model: expected a ctmhsa.maths.model.Model (ctmhsa.load_model(path)), "
                        f"got {type(model).__name__}")
    for l, b in enumerate(model.blocks):
        if b.WS is not None:
            raise ValueError(f"model: blocks.{l}.attn.WS, a skip path onto L5 PT, is not part of a transformer "
                             "block (the residual stream carries the skip); remove it")
        for k in ("bq", "bk", "bv", "bo"):
            if np.any(getattr(b.attn, k)):
                raise ValueError(f"model: blocks.{l}.attn.{k} is non-zero; the block's attention has no biases "
                                 "(the thalamo-cortical projections carry none)")
    return model


def plain_model(model: Model) -> Model:
    """``model`` without its input embedding (it then takes tokens)."""
    return model if model.embed_W is None else replace(model, embed_W=None, embed_pos=None)


def tokens_of(model: Model, X, what: str = "X") -> np.ndarray:
    """The tokens of input ``X``: ``X`` itself ``(..., n, de)``, or ``X @ embed.W.T + embed.pos``
    where the model has an embedding (``X`` then ``(..., n, p)``)."""
    x = _as_real_array(what, X)
    shapes = ("a sequence (T, {d}) or a batch of them (B, T, {d}), one token per step" if model.causal
              else "tokens (n, {d}) or a stream (T, n, {d})")
    if model.embed_W is not None:
        if x.ndim not in (2, 3):
            raise ValueError(f"{what}: expected {shapes.format(d='p')}, got shape {x.shape}")
        return model.embed(x)
    if x.ndim not in (2, 3) or x.shape[-1] != model.de:
        raise ValueError(f"{what}: expected {shapes.format(d=f'de={model.de}')}, got shape {x.shape}")
    return x


def transformer_forward(X, model: Model, phi: str = "elu1", stages: bool = False) -> dict:
    """Run ``model`` on ``X`` exactly.

    Parameters
    ----------
    X : array, shape (n, de) or (T, n, de)
        Tokens, or a stream of ``T`` token sets; raw inputs ``(n, p)`` / ``(T, n, p)`` where the
        model has an input embedding. A causal model: a sequence ``(T, de)`` (``(T, p)``), one
        token per step, or a batch of them ``(B, T, de)``. Dimensionless.
    model : Model
        Blocks, MLPs and optional read-out (:func:`ctmhsa.load_model`). A block without an MLP
        adds only its attention.
    phi : str
        Feature map of the attention (``"elu1"``, ``"relu"``, ``"softplus"``, ``"exp"``).
    stages : bool
        Also return every block's stages (:data:`BLOCK_STAGES`).

    Returns
    -------
    dict
        ``output`` ((T,) n, de): the last block's stream; ``logits`` ((T,) classes; a causal
        model's per token, (T, classes)) or ``None`` without a read-out; ``pooled`` ((T,) de, the token mean the read-out normalises) or
        ``None``; with ``stages``, ``blocks``: one dict per block of :data:`BLOCK_STAGES` (and
        ``u``, the unnormalised L2/3 products of ``linear_mhsa``; the
        attention stages as :func:`ctmhsa.maths.reference.linear_mhsa` returns them, ``x_tilde``
        the attention's output, ``h`` the stream after it, ``hidden`` the MLP's rectified units).

    Raises
    ------
    ValueError
        Bad shapes, a token with ``mean |x| = 0`` where it is normalised (named), ``Z = 0``,
        attention biases or a skip path (not part of a block).
    TypeError
        ``model`` is not a :class:`ctmhsa.maths.model.Model`.
    """
    model = _check_model(model)
    x = tokens_of(model, X)
    blocks = []
    for l, b in enumerate(model.blocks):
        xn = normalise(x, f"X (block {l} input)")
        if model.causal:
            att = memory_attention(xn, b.WQ, b.WK, b.WV, b.WO, forget=model.forget, normalize=model.memory_normalised,
                                   phi=phi)
        else:
            att = linear_mhsa(xn, b.WQ, b.WK, b.WV, b.WO, phi=phi)
        h = x + att["x_tilde"]
        st = dict(x=x, x_norm=xn, **att, h=h)
        if b.mlp is not None:
            hn = normalise(h, f"H (block {l}, after attention)")
            hidden = np.maximum(hn @ b.mlp.W1.T + b.mlp.b1, 0.0)
            x = h + hidden @ b.mlp.W2.T + b.mlp.b2
            st.update(h_norm=hn, hidden=hidden)
        else:
            x = h
        st["out"] = x
        if stages:
            blocks.append(st)
    out = dict(output=x, logits=None, pooled=None)
    if model.readout_W is not None and model.causal:   # one prediction per token
        out["logits"] = normalise(x, "output") @ model.readout_W.T + model.readout_b
    elif model.readout_W is not None:
        pooled = x.mean(axis=-2)
        out["pooled"] = pooled
        out["logits"] = normalise(pooled, "pooled output") @ model.readout_W.T + model.readout_b
    if stages:
        out["blocks"] = blocks
    return out
