"""Training shared by the shipped causal models (``recall``, ``shakespeare``): the maths of a causal
:func:`ctmhsa.transformer_forward` written for ``autograd``, batched over sequences, and an Adam loop.

The model is trained in exactly the circuit's form: per block, with ``N(x) = x / mean_e |x_e|``
and ``φ = elu + 1``, the key-value memory read per token ``ṽ_t = Σ_{s≤t} λ^{t-s} (φ(q_t)·φ(k_s)) v_s``
(unnormalised; divided by ``Σ_{s≤t} λ^{t-s} φ(q_t)·φ(k_s)`` where ``normalize``), ``q, k, v`` the
projections of ``N(x)`` (no biases), ``H = X + Σ_h WO[h] ṽ_h``, ``X = H + W2 relu(W1 N(H) + b1) + b2``,
logits ``R N(X_t) + c`` per token; inputs one-hot characters, ``x_t = embed.W u_t`` (no positional
embedding: the memory reads a stream of any length). The sum over ``s ≤ t`` is written as a
``(T, T)`` matrix per head (the recurrence of :func:`ctmhsa.memory_attention` unrolled), which
autograd differentiates; :func:`check_against_reference` confirms it equals the package's reference.

Needs ``autograd`` (``pip install autograd``), nothing else beyond numpy; what it shares with
:mod:`ctmhsa.sims.models.train_digits` is in :mod:`ctmhsa.sims.models.training`.
"""

from __future__ import annotations

import numpy as np

from . import training
from .training import (Adam, block_params, blocks_of, features, logsumexp, lr_at, mlp, readout_params, sha256,
                       write_npz)

__all__ = ["require", "init_params", "decay_mask", "forward", "cross_entropy", "train", "to_model",
           "check_against_reference", "sha256", "write_npz", "lr_at"]   # the last three for the task scripts


def require() -> None:
    """autograd, or an ImportError that says how to install it."""
    training.require("training a causal model needs autograd: pip install autograd")


def init_params(rng: np.random.Generator, arch: dict) -> dict:
    """Initial weights, entries of order ``1/sqrt(fan-in)`` (output layers smaller).

    Parameters
    ----------
    rng : numpy.random.Generator
    arch : dict
        ``blocks, H, dk, dv, de, dh, classes, p`` (``p``: one-hot input size).

    Returns
    -------
    dict of str -> ndarray
        Keys of the model file (:mod:`ctmhsa.maths.model`), float64.
    """
    L, H, dk, dv, de, dh = (arch[k] for k in ("blocks", "H", "dk", "dv", "de", "dh"))
    g = lambda *shape, s: rng.normal(size=shape) * s     # noqa: E731
    P = {"embed.W": g(de, arch["p"], s=1.0)}
    for l in range(L):
        P.update(block_params(g, l, H, dk, dv, de, dh))
    P.update(readout_params(g, arch["classes"], de))
    return P


def decay_mask(T: int, forget: float) -> np.ndarray:
    """``D[t, s] = λ^(t - s)`` for ``s ≤ t``, else 0: what the memory keeps of token ``s`` at ``t``."""
    lag = np.arange(T)[:, None] - np.arange(T)[None, :]
    return np.where(lag >= 0, float(forget) ** np.maximum(lag, 0), 0.0)


def forward(P: dict, U, arch: dict, np_=np):
    """Per-token logits of a batch of sequences, the maths of a causal :func:`ctmhsa.transformer_forward`.

    Parameters
    ----------
    P : dict of str -> ndarray
        Weights, model-file keys.
    U : ndarray, shape (B, T, p)
        One-hot inputs (dimensionless).
    arch : dict
        ``blocks``, ``forget`` (λ), ``normalize`` (bool).
    np_ : module
        ``numpy`` or ``autograd.numpy`` (to differentiate).

    Returns
    -------
    ndarray, shape (B, T, classes)
    """
    N, elu1 = features(np_)
    D = decay_mask(U.shape[1], arch["forget"])
    x = U @ P["embed.W"].T
    for l in range(arch["blocks"]):
        b = f"blocks.{l}."
        xn = N(x)
        att = 0.0
        for h in range(P[b + "attn.WQ"].shape[0]):
            fq = elu1(xn @ P[b + "attn.WQ"][h].T)                    # (B, T, dk)
            fk = elu1(xn @ P[b + "attn.WK"][h].T)
            v = xn @ P[b + "attn.WV"][h].T                            # (B, T, dv)
            A = (fq @ np_.swapaxes(fk, 1, 2)) * D                     # (B, T, T): λ^(t-s) φ(q_t)·φ(k_s), s ≤ t
            if arch["normalize"]:
                A = A / np_.sum(A, axis=-1, keepdims=True)
            att = att + (A @ v) @ P[b + "attn.WO"][h].T
        x = x + att
        if b + "mlp.W1" in P:
            x = mlp(P, b, x, np_)
    return N(x) @ P["readout.W"].T + P["readout.b"]


def cross_entropy(logits, targets, mask=None, np_=np):
    """Mean softmax cross-entropy (nats) of ``logits`` (B, T, C) against integer ``targets`` (B, T),
    over the positions where ``mask`` (B, T) is true (all if None)."""
    logz = logsumexp(logits, np_)
    onehot = np.eye(logits.shape[-1])[targets]
    nll = logz - np_.sum(logits * onehot, axis=-1)
    if mask is None:
        return np_.mean(nll)
    w = np.asarray(mask, float)
    return np_.sum(nll * w) / w.sum()


def train(batches, arch: dict, settings: dict, log=print, evaluate=None) -> tuple[dict, list]:
    """Minimise the masked cross-entropy with Adam (decoupled weight decay on the weight matrices,
    gradient clipping by global norm, warm-up then cosine learning rate).

    Parameters
    ----------
    batches : callable
        ``batches(step, rng) -> (U, targets, mask)``: the minibatch of a step, ``U`` (B, T, p),
        ``targets`` (B, T) int, ``mask`` (B, T) bool or None.
    arch : dict
        :func:`init_params`'s and :func:`forward`'s keys.
    settings : dict
        ``seed, steps, lr, lr_final, warmup, beta1, beta2, eps, weight_decay, clip, log_every``.
    log : callable
        Progress lines.
    evaluate : callable, optional
        ``evaluate(P) -> str``, appended to the progress line every ``log_every`` steps.

    Returns
    -------
    params : dict of str -> ndarray
    history : list of (step, training loss of the step's minibatch in nats)
    """
    require()
    import autograd.numpy as anp
    from autograd import value_and_grad

    s = settings
    rng = np.random.default_rng(s["seed"])
    P = init_params(rng, arch)
    loss_and_grad = value_and_grad(lambda P, U, y, w: cross_entropy(forward(P, U, arch, anp), y, w, anp))
    adam = Adam(P, s)
    history = []
    for step in range(s["steps"]):
        U, y, w = batches(step, rng)
        loss, G = loss_and_grad(P, U, y, w)
        lr = lr_at(step, s)
        adam.step(P, G, step, lr)
        history.append((step, float(loss)))
        if step % s["log_every"] == 0 or step == s["steps"] - 1:
            extra = f"  {evaluate(P)}" if evaluate is not None else ""
            log(f"step {step:5d}  loss {float(loss):.4f}  lr {lr:.2e}{extra}")
    return P, history


def to_model(P: dict, arch: dict, name: str, vocab: str | None):
    """The weights as a causal :class:`ctmhsa.maths.model.Model` carrying its vocabulary."""
    from ctmhsa.maths.model import Model

    return Model(blocks=blocks_of(P, arch["blocks"]), readout_W=P["readout.W"], readout_b=P["readout.b"],
                 embed_W=P["embed.W"], name=name, causal=True, forget=float(arch["forget"]),
                 normalize=bool(arch["normalize"]), vocab=vocab)


def check_against_reference(P: dict, arch: dict, U, vocab: str | None, rtol: float = 1e-9) -> float:
    """Largest relative difference between :func:`forward` and the package's reference
    (:func:`ctmhsa.transformer_forward` of :func:`to_model`) on sequences ``U`` (B, T, p).

    Raises
    ------
    RuntimeError
        The two differ by more than ``rtol`` (relative to the logits' largest magnitude).
    """
    from ctmhsa.maths.transformer import transformer_forward

    model = to_model(P, arch, "check", vocab)
    ours = forward(P, np.asarray(U, float), arch)
    ref = np.stack([transformer_forward(u, model)["logits"] for u in np.asarray(U, float)])
    err = float(np.max(np.abs(ours - ref)) / max(np.max(np.abs(ref)), 1e-300))
    if err > rtol:
        raise RuntimeError(f"the training forward differs from transformer_forward by {err:.2e} (relative)")
    return err
