"""What the shipped models' training scripts share (``train_digits``, ``train_causal`` and the
task scripts on it): the circuit's normalisation and feature map written for ``numpy`` or
``autograd.numpy``, the blocks' initial weights, the MLP, the log-sum-exp of a softmax, Adam with
decoupled weight decay, the learning-rate schedule, and byte-reproducible files and records.

numpy only; ``autograd`` is imported by the scripts that differentiate.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import zipfile

import numpy as np

__all__ = ["require", "training_args", "features", "block_params", "readout_params", "mlp", "logsumexp", "lr_at",
           "Adam", "blocks_of", "write_npz", "sha256", "environment", "write_record"]

WEIGHTS = ("W", "WQ", "WK", "WV", "WO", "W1", "W2")
"""Weight matrices (the last part of a key), decayed by Adam; biases and ``embed.pos`` are not."""


def require(message: str) -> None:
    """autograd, or an ImportError with ``message`` (what needs it and how to install it)."""
    try:
        import autograd  # noqa: F401
    except ImportError:
        raise ImportError(message) from None


def features(np_=np):
    """``(N, elu1)`` of the circuit: ``N(x) = x / mean_e |x_e|`` per token and ``φ = elu + 1``,
    written with ``np_`` (``numpy`` or ``autograd.numpy``)."""
    def N(x):
        return x / np_.mean(np_.abs(x), axis=-1, keepdims=True)

    def elu1(z):
        return np_.where(z > 0, z + 1.0, np_.exp(np_.minimum(z, 0.0)))

    return N, elu1


def block_params(g, l: int, H: int, dk: int, dv: int, de: int, dh: int) -> dict:
    """Block ``l``'s initial weights, drawn by ``g(*shape, s=scale)`` in the model file's key order:
    the attention ``1/sqrt(fan-in)`` (``WO`` ``0.5/sqrt(H dv)``), the MLP (``dh > 0``) ``W1``
    ``1/sqrt(de)``, ``W2`` ``0.5/sqrt(dh)``, biases zero."""
    b = f"blocks.{l}."
    P = {b + "attn.WQ": g(H, dk, de, s=1 / np.sqrt(de)), b + "attn.WK": g(H, dk, de, s=1 / np.sqrt(de)),
         b + "attn.WV": g(H, dv, de, s=1 / np.sqrt(de)), b + "attn.WO": g(H, de, dv, s=0.5 / np.sqrt(H * dv))}
    if dh:
        P[b + "mlp.W1"] = g(dh, de, s=1 / np.sqrt(de))
        P[b + "mlp.b1"] = np.zeros(dh)
        P[b + "mlp.W2"] = g(de, dh, s=0.5 / np.sqrt(dh))
        P[b + "mlp.b2"] = np.zeros(de)
    return P


def readout_params(g, classes: int, de: int) -> dict:
    """The read-out's initial weights (``1/sqrt(de)``, bias zero)."""
    return {"readout.W": g(classes, de, s=1 / np.sqrt(de)), "readout.b": np.zeros(classes)}


def mlp(P: dict, b: str, x, np_=np):
    """``x + W2 relu(W1 N(x) + b1) + b2`` of block prefix ``b`` (the residual MLP of a block)."""
    N, _ = features(np_)
    hidden = np_.maximum(N(x) @ P[b + "mlp.W1"].T + P[b + "mlp.b1"], 0.0)
    return x + hidden @ P[b + "mlp.W2"].T + P[b + "mlp.b2"]


def logsumexp(z, np_=np):
    """``log Σ exp z`` over the last axis, shifted by its maximum (no overflow)."""
    m = np_.max(z, axis=-1, keepdims=True)
    return np_.log(np_.sum(np_.exp(z - m), axis=-1)) + m[..., 0]


def lr_at(step: int, s: dict) -> float:
    """Learning rate of ``step`` (0-based): linear warm-up, then cosine from ``lr`` to ``lr_final``."""
    if step < s["warmup"]:
        return s["lr"] * (step + 1) / s["warmup"]
    t = (step - s["warmup"]) / max(1, s["steps"] - s["warmup"])
    return s["lr_final"] + 0.5 * (s["lr"] - s["lr_final"]) * (1 + np.cos(np.pi * t))


class Adam:
    """Adam with decoupled weight decay (``lr * weight_decay * W``, on :data:`WEIGHTS` only).

    Parameters
    ----------
    P : dict of str -> ndarray
        The weights (updated in place by :meth:`step`).
    settings : dict
        ``beta1, beta2, eps, weight_decay`` and, optionally, ``clip`` (largest global gradient
        norm; absent or 0: no clipping).
    """

    def __init__(self, P: dict, settings: dict):
        self.s = settings
        self.m = {k: np.zeros_like(v) for k, v in P.items()}
        self.v = {k: np.zeros_like(v) for k, v in P.items()}
        self.decay = {k: k.split(".")[-1] in WEIGHTS for k in P}

    def step(self, P: dict, G: dict, step: int, lr: float) -> None:
        """Update ``P`` in place from the gradients ``G`` of 0-based ``step`` at rate ``lr``."""
        s = self.s
        scale = 1.0
        if s.get("clip"):
            norm = np.sqrt(sum(float(np.sum(g ** 2)) for g in G.values()))
            scale = min(1.0, s["clip"] / norm)
        for k in P:
            g = G[k] * scale if scale != 1.0 else G[k]
            self.m[k] = s["beta1"] * self.m[k] + (1 - s["beta1"]) * g
            self.v[k] = s["beta2"] * self.v[k] + (1 - s["beta2"]) * g ** 2
            mh = self.m[k] / (1 - s["beta1"] ** (step + 1))
            vh = self.v[k] / (1 - s["beta2"] ** (step + 1))
            P[k] = P[k] - lr * (mh / (np.sqrt(vh) + s["eps"]) + (s["weight_decay"] * P[k] if self.decay[k] else 0.0))


def blocks_of(P: dict, L: int) -> tuple:
    """The ``L`` :class:`ctmhsa.maths.model.Block` of the weights ``P`` (an MLP where ``P`` has one)."""
    from ctmhsa.maths.model import Block, MLPWeights

    blocks = []
    for l in range(L):
        b = f"blocks.{l}."
        attn = Block.from_arrays(*(P[b + "attn." + k] for k in ("WQ", "WK", "WV", "WO"))).attn
        mlp_w = MLPWeights(*(P[b + "mlp." + k] for k in ("W1", "b1", "W2", "b2"))) if b + "mlp.W1" in P else None
        blocks.append(Block(attn=attn, mlp=mlp_w))
    return tuple(blocks)


def write_npz(path, **arrays) -> None:
    """``numpy.savez_compressed`` with fixed zip timestamps, so equal arrays give equal bytes.

    Parameters
    ----------
    path : str or path-like
        The ``.npz`` file to write.
    **arrays : ndarray
        Name -> array (read back by ``numpy.load``).
    """
    with zipfile.ZipFile(path, "w") as zf:
        for name, a in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asarray(a), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, buf.getvalue())


def sha256(path) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def environment() -> dict:
    """The versions a record states (Python, numpy)."""
    return dict(python=platform.python_version(), numpy=np.__version__)


def training_args(module: str, what: str, files: str, settings: dict, argv=None):
    """A training script's command line (``--out``, ``--seed``, ``--steps``), parsed: ``(args,
    argv)``, ``argv`` the list parsed (``sys.argv[1:]`` where ``None``) for the record's command.

    Parameters
    ----------
    module : str
        The script's module (``python -m`` name, for the usage line).
    what : str
        What it trains, for the description ("the shipped recall model").
    files : str
        The files it writes, for ``--out``'s help ("recall.npz and recall.json").
    settings : dict
        Its defaults (``seed``, ``steps``).
    """
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog=f"python -m {module}", description=f"Train {what} (see the module docstring).")
    ap.add_argument("--out", help=f"folder for {files} (default: the package's sims/models)")
    ap.add_argument("--seed", type=int, default=settings["seed"], help="seed of the weights and training sequences")
    ap.add_argument("--steps", type=int, default=settings["steps"], help="Adam steps")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error(f"--steps: expected ≥ 1, got {args.steps}")
    if args.out is not None and not args.out.strip():
        ap.error("--out: expected a folder, got an empty name")
    return args, argv


def write_record(path, record: dict) -> None:
    """``record`` as indented JSON in ``path``, written to a temporary file and moved over it."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as fh:
        fh.write(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, path)
