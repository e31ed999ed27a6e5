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

Needs ``autograd`` (``pip install autograd``), nothing else beyond numpy.
"""

from __future__ import annotations

import numpy as np

from .train_digits import lr_at, sha256, write_npz  # noqa: F401 - re-exported for the task scripts

_WEIGHTS = ("W", "WQ", "WK", "WV", "WO", "W1", "W2")


def require() -> None:
    """autograd, or an ImportError that says how to install it."""
    try:
        import autograd  # noqa: F401
    except ImportError:
        raise ImportError("training a causal model needs autograd: pip install autograd") from None


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
        b = f"blocks.{l}."
        P[b + "attn.WQ"] = g(H, dk, de, s=1 / np.sqrt(de))
        P[b + "attn.WK"] = g(H, dk, de, s=1 / np.sqrt(de))
        P[b + "attn.WV"] = g(H, dv, de, s=1 / np.sqrt(de))
        P[b + "attn.WO"] = g(H, de, dv, s=0.5 / np.sqrt(H * dv))
        if dh:
            P[b + "mlp.W1"] = g(dh, de, s=1 / np.sqrt(de))
            P[b + "mlp.b1"] = np.zeros(dh)
            P[b + "mlp.W2"] = g(de, dh, s=0.5 / np.sqrt(dh))
            P[b + "mlp.b2"] = np.zeros(de)
    P["readout.W"] = g(arch["classes"], de, s=1 / np.sqrt(de))
    P["readout.b"] = np.zeros(arch["classes"])
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
    def N(x):
        return x / np_.mean(np_.abs(x), axis=-1, keepdims=True)

    def elu1(z):
        return np_.where(z > 0, z + 1.0, np_.exp(np_.minimum(z, 0.0)))

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
            hidden = np_.maximum(N(x) @ P[b + "mlp.W1"].T + P[b + "mlp.b1"], 0.0)
            x = x + hidden @ P[b + "mlp.W2"].T + P[b + "mlp.b2"]
    return N(x) @ P["readout.W"].T + P["readout.b"]


def cross_entropy(logits, targets, mask=None, np_=np):
    """Mean softmax cross-entropy (nats) of ``logits`` (B, T, C) against integer ``targets`` (B, T),
    over the positions where ``mask`` (B, T) is true (all if None)."""
    m = np_.max(logits, axis=-1, keepdims=True)
    logz = np_.log(np_.sum(np_.exp(logits - m), axis=-1)) + m[..., 0]
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
    m = {k: np.zeros_like(v) for k, v in P.items()}
    v2 = {k: np.zeros_like(v) for k, v in P.items()}
    decay = {k: k.split(".")[-1] in _WEIGHTS for k in P}
    history = []
    for step in range(s["steps"]):
        U, y, w = batches(step, rng)
        loss, G = loss_and_grad(P, U, y, w)
        norm = np.sqrt(sum(float(np.sum(g ** 2)) for g in G.values()))
        scale = min(1.0, s["clip"] / norm) if s.get("clip") else 1.0
        lr = lr_at(step, s)
        for k in P:
            g = G[k] * scale
            m[k] = s["beta1"] * m[k] + (1 - s["beta1"]) * g
            v2[k] = s["beta2"] * v2[k] + (1 - s["beta2"]) * g ** 2
            mh = m[k] / (1 - s["beta1"] ** (step + 1))
            vh = v2[k] / (1 - s["beta2"] ** (step + 1))
            P[k] = P[k] - lr * (mh / (np.sqrt(vh) + s["eps"]) + (s["weight_decay"] * P[k] if decay[k] else 0.0))
        history.append((step, float(loss)))
        if step % s["log_every"] == 0 or step == s["steps"] - 1:
            extra = f"  {evaluate(P)}" if evaluate is not None else ""
            log(f"step {step:5d}  loss {float(loss):.4f}  lr {lr:.2e}{extra}")
    return P, history


def to_model(P: dict, arch: dict, name: str, vocab: str | None):
    """The weights as a causal :class:`ctmhsa.maths.model.Model` carrying its vocabulary."""
    from ctmhsa.maths.model import Block, MLPWeights, Model

    blocks = []
    for l in range(arch["blocks"]):
        b = f"blocks.{l}."
        attn = Block.from_arrays(*(P[b + "attn." + k] for k in ("WQ", "WK", "WV", "WO"))).attn
        mlp = MLPWeights(*(P[b + "mlp." + k] for k in ("W1", "b1", "W2", "b2"))) if b + "mlp.W1" in P else None
        blocks.append(Block(attn=attn, mlp=mlp))
    return Model(blocks=tuple(blocks), readout_W=P["readout.W"], readout_b=P["readout.b"], embed_W=P["embed.W"],
                 name=name, causal=True, forget=float(arch["forget"]), normalize=bool(arch["normalize"]),
                 vocab=vocab)


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
