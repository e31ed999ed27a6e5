"""Attention weights of trained transformers, in this project's convention.

Reads the attention projections of one layer from a PyTorch state dict (``.pt``/``.bin``,
needs ``torch``) or a safetensors file (read with the ``safetensors`` numpy API, no ``torch``),
and splits them into heads as :func:`ctmhsa.maths.reference.linear_mhsa` takes them:

=========  ================  =============================================================
``WQ/WK``  ``(H, dk, de)``   ``q_i = WQ[h] @ x_i``: rows are the head's query/key features
``WV``     ``(H, dv, de)``   ``v_j = WV[h] @ x_j``
``WO``     ``(H, de, dv)``   ``x̃_i = Σ_h WO[h] @ ṽ_i[h]``: the head's block of columns
=========  ================  =============================================================

Layouts (``layout="auto"`` recognises them from the keys):

``"mha"``
    ``torch.nn.MultiheadAttention`` (also inside ``nn.TransformerEncoderLayer``):
    ``in_proj_weight`` (3E, E) stacking W_q, W_k, W_v, ``in_proj_bias`` (3E,),
    ``out_proj.weight`` (E, E), ``out_proj.bias`` (E,). Biases are optional.
``"bert"``
    BERT, MiniLM and other Hugging Face encoders: ``attention.self.query/key/value.weight``
    (E, E) and ``attention.output.dense.weight`` (E, E), with biases.
``"gpt2"``
    GPT-2: ``attn.c_attn.weight`` (E, 3E) and ``attn.c_proj.weight`` (E, E) are ``Conv1D``
    weights, ``y = x @ W + b`` (transposed with respect to ``nn.Linear``'s ``y = x @ W.T + b``);
    they are transposed here.

Every layout stores the heads side by side along the projection's output axis: head ``h`` owns
output features ``h*dh ... (h+1)*dh - 1`` (``dh = E / n_heads``), and the matching input columns
of the output projection. A state dict does not record the number of heads; pass ``n_heads``,
or keep the model's ``config.json`` (Hugging Face: ``num_attention_heads`` or ``n_head``) next
to the weights file.

Biases: the circuit computes ``q = WQ x`` without an offset. :meth:`AttentionWeights.fold_biases`
makes the in-projection biases exact by appending a constant coordinate 1 to every token
(``x' = [x, 1]``, ``W' = [W, b]``; ``WO`` gains a zero row, so x̃ gains a coordinate that is
exactly 0); the output bias ``bo`` is a constant added to x̃ after the circuit.

A trained transformer uses softmax attention; the circuit computes *linear* attention
(``phi(q)ᵀphi(k)``, no ``1/sqrt(dk)``), so it runs the trained projections through another
kernel: the reference it is compared with is :func:`ctmhsa.maths.reference.linear_mhsa` on the same
weights, not the transformer's output.
"""

from __future__ import annotations

import json
import logging
import os
import re
import zipfile
import zlib
from dataclasses import dataclass, field

import numpy as np

__all__ = ["AttentionWeights", "LAYOUTS", "load_attention", "read_state_dict", "attention_layers",
           "split_heads", "read_tokens", "read_npz", "real_array"]

log = logging.getLogger(__name__)

LAYOUTS = ("mha", "bert", "gpt2")
"""Layouts of attention projections in a state dict (see the module docstring)."""

# (suffix of every tensor relative to the layer's prefix) per layout; None = optional
_KEYS = {
    "mha": dict(qkv="in_proj_weight", qkv_b="in_proj_bias", o="out_proj.weight", o_b="out_proj.bias"),
    "bert": dict(q="attention.self.query.weight", q_b="attention.self.query.bias",
                 k="attention.self.key.weight", k_b="attention.self.key.bias",
                 v="attention.self.value.weight", v_b="attention.self.value.bias",
                 o="attention.output.dense.weight", o_b="attention.output.dense.bias"),
    "gpt2": dict(qkv="attn.c_attn.weight", qkv_b="attn.c_attn.bias", o="attn.c_proj.weight",
                 o_b="attn.c_proj.bias"),
}
# the tensor whose presence marks a layer of the layout
_MARK = {"mha": "in_proj_weight", "bert": "attention.self.query.weight", "gpt2": "attn.c_attn.weight"}
_HEAD_KEYS = ("num_attention_heads", "n_head", "num_heads", "n_heads")


@dataclass(frozen=True)
class AttentionWeights:
    """The attention projections of one layer, split into heads (this project's convention).

    Attributes
    ----------
    WQ, WK : ndarray, shape (H, dk, de)
        Query and key projections of the selected heads (dimensionless).
    WV : ndarray, shape (H, dv, de)
        Value projections.
    WO : ndarray, shape (H, de, dv)
        Output projection: head ``h``'s block of columns.
    bq, bk : ndarray, shape (H, dk)
        In-projection biases (zeros where the model has none).
    bv : ndarray, shape (H, dv)
    bo : ndarray, shape (de,)
        Output bias (added once, not per head).
    layout : str
        One of :data:`LAYOUTS`.
    layer : int or None
        The layer's index in the model (``None``: a bare attention module).
    heads : tuple of int
        Indices of the selected heads among the layer's ``n_heads``.
    n_heads : int
        Heads of the layer.
    source : str
        The file read.
    keys : dict
        Layout role -> state-dict key that was read.
    """

    WQ: np.ndarray
    WK: np.ndarray
    WV: np.ndarray
    WO: np.ndarray
    bq: np.ndarray
    bk: np.ndarray
    bv: np.ndarray
    bo: np.ndarray
    layout: str
    layer: int | None
    heads: tuple
    n_heads: int
    source: str = ""
    keys: dict = field(default_factory=dict)

    @property
    def H(self) -> int:
        return int(self.WQ.shape[0])

    @property
    def de(self) -> int:
        return int(self.WQ.shape[2])

    @property
    def has_bias(self) -> bool:
        """Whether any in-projection bias is non-zero."""
        return bool(np.any(self.bq) or np.any(self.bk) or np.any(self.bv))

    def fold_biases(self, X) -> dict:
        """Tokens and weights with the in-projection biases made exact.

        Appends a constant coordinate 1 to every token and the biases as a last column of
        ``WQ``, ``WK``, ``WV`` (``W' x' = W x + b`` exactly); ``WO`` gains a zero row, so the
        output gains a last coordinate that is exactly 0.

        Parameters
        ----------
        X : array, shape (n, de)
            Token embeddings (dimensionless).

        Returns
        -------
        dict
            ``X (n, de + 1)``, ``WQ``, ``WK`` ``(H, dk, de + 1)``, ``WV (H, dv, de + 1)``,
            ``WO (H, de + 1, dv)``.
        """
        X = np.asarray(X, float)
        if X.ndim != 2 or X.shape[1] != self.de:
            raise ValueError(f"X: expected token embeddings of shape (n, {self.de}), got {X.shape}")
        one = np.ones((X.shape[0], 1))
        WO = np.concatenate([self.WO, np.zeros((self.H, 1, self.WO.shape[2]))], axis=1)
        return dict(X=np.concatenate([X, one], 1),
                    WQ=np.concatenate([self.WQ, self.bq[:, :, None]], 2),
                    WK=np.concatenate([self.WK, self.bk[:, :, None]], 2),
                    WV=np.concatenate([self.WV, self.bv[:, :, None]], 2), WO=WO)

    def arrays(self) -> dict:
        """``WQ, WK, WV, WO`` as a dict (the keywords of :func:`ctmhsa.maths.reference.linear_mhsa`)."""
        return dict(WQ=self.WQ, WK=self.WK, WV=self.WV, WO=self.WO)


# ------------------------------------------------------------------------------------------
# reading files
# ------------------------------------------------------------------------------------------

def _npz_reason(exc: BaseException) -> str:
    """Why an ``.npz`` could not be read, in a few words (a damaged archive's exception quotes raw
    bytes of the file: cut them)."""
    text = str(exc)
    if "allow_pickle" in text:
        return "it holds an object (pickled) array, which is never unpickled"
    if isinstance(exc, (zipfile.BadZipFile, EOFError, zlib.error)):
        text = f"the archive is truncated or damaged ({type(exc).__name__}: {text})"
    return text if len(text) <= 160 else text[:157] + "..."


_NPZ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error)


def read_npz(path, what: str) -> dict:
    """Every array of the ``.npz`` at ``path``; ``ValueError`` naming ``what`` (the argument or
    key it came from) when the file is missing or unreadable (truncated, damaged, pickled arrays,
    a single ``.npy``)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:    # ours to close, whatever np.load makes of it
            try:
                data = np.load(fh)
            except _NPZ_ERRORS as exc:
                raise ValueError(f"{what}: {path!r} is not a readable .npz: {_npz_reason(exc)}") from None
            if not isinstance(data, np.lib.npyio.NpzFile):    # np.load reads a .npy whatever its name
                raise ValueError(f"{what}: {path!r} holds a single .npy array of shape {np.shape(data)}, not an "
                                 f".npz archive of named arrays; save it with np.savez(path, X=..., ...)")
            try:
                with data:
                    return {k: np.array(data[k]) for k in data.files}
            except _NPZ_ERRORS as exc:
                raise ValueError(f"{what}: {path!r} is not a readable .npz: {_npz_reason(exc)}") from None
    except FileNotFoundError:
        raise ValueError(f"{what}: file {path!r} does not exist") from None
    except IsADirectoryError:
        raise ValueError(f"{what}: {path!r} is a directory, not an .npz file") from None
    except OSError as exc:     # unreadable (permissions, a device)
        raise ValueError(f"{what}: {path!r} cannot be read ({exc})") from None


def _to_numpy(t) -> np.ndarray:
    if isinstance(t, np.ndarray):
        return t
    if hasattr(t, "detach"):     # a torch tensor (bfloat16 has no numpy type: go through float32)
        t = t.detach().cpu()
        if str(t.dtype) in ("torch.bfloat16", "torch.float16"):
            t = t.float()
        return t.numpy()
    return np.asarray(t)


def read_state_dict(path: str | os.PathLike) -> dict:
    """Every tensor of a weights file as numpy arrays.

    Parameters
    ----------
    path : str or path-like
        ``.safetensors`` (read with ``safetensors.numpy``, no torch needed), ``.pt``/``.pth``/
        ``.bin``/``.ckpt`` (a PyTorch state dict: needs ``torch``, loaded with
        ``weights_only=True``; a checkpoint dict holding it under ``"state_dict"`` or
        ``"model"`` is unwrapped) or ``.npz``.

    Returns
    -------
    dict of str -> ndarray

    Raises
    ------
    ValueError
        Missing file, unknown extension, or a file that holds no tensors.
    ImportError
        A PyTorch file without torch installed, or a safetensors file without ``safetensors``.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"weights: file {path!r} does not exist")
    ext = os.path.splitext(path)[1].lower()
    if ext == ".safetensors":
        try:
            from safetensors.numpy import load_file
        except ImportError:
            raise ImportError(f"weights: reading {path!r} needs the safetensors package "
                              "(pip install safetensors, or pip install 'ctmhsa[weights]')") from None
        try:
            return dict(load_file(path))
        except Exception as exc:  # noqa: BLE001 - any decoding failure is the file's
            raise ValueError(f"weights: {path!r} is not a readable safetensors file ({exc})") from None
    if ext in (".pt", ".pth", ".bin", ".ckpt"):
        try:
            import torch
        except ImportError:
            raise ImportError(f"weights: {path!r} is a PyTorch file; reading it needs torch "
                              "(pip install torch), or save the model with safetensors, which is "
                              "read without torch") from None
        try:
            sd = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001
            raise ValueError(f"weights: {path!r} is not a PyTorch state dict torch can load "
                             f"with weights_only=True ({exc})") from None
        for wrap in ("state_dict", "model"):
            if isinstance(sd, dict) and isinstance(sd.get(wrap), dict):
                sd = sd[wrap]
        if not isinstance(sd, dict):
            raise ValueError(f"weights: {path!r} holds a {type(sd).__name__}, not a state dict "
                             "(save model.state_dict())")
        return {k: _to_numpy(v) for k, v in sd.items() if hasattr(v, "shape")}
    if ext == ".npz":
        return read_npz(path, "weights")
    raise ValueError(f"weights: unknown file type {ext!r} of {path!r}; expected .safetensors, "
                     ".pt, .pth, .bin, .ckpt or .npz")


def _layer_number(prefix: str) -> int | None:
    nums = re.findall(r"(?:^|\.)(\d+)(?=\.|$)", prefix.rstrip("."))
    return int(nums[-1]) if nums else None


def attention_layers(state: dict, layout: str = "auto") -> list[tuple[str, int | None, str]]:
    """The attention layers of a state dict: ``[(layout, layer number, key prefix)]`` in layer
    order. The layer number is the last integer of the prefix (``encoder.layer.3.`` -> 3;
    ``None`` for a bare attention module)."""
    layouts = LAYOUTS if layout == "auto" else (layout,)
    if layout != "auto" and layout not in LAYOUTS:
        raise ValueError(f"layout: expected 'auto' or one of {list(LAYOUTS)}, got {layout!r}")
    found = []
    for lay in layouts:
        mark = _MARK[lay]
        for k in state:
            if k == mark or k.endswith("." + mark):
                prefix = k[: len(k) - len(mark)]
                found.append((lay, _layer_number(prefix), prefix))
    kinds = sorted({f[0] for f in found})
    if len(kinds) > 1:
        raise ValueError(f"layout: the state dict holds layers of several layouts {kinds}; "
                         "name one with layout=")
    return sorted(found, key=lambda f: (-1 if f[1] is None else f[1], f[2]))


def _n_heads_from_config(path: str) -> int | None:
    cfg = os.path.join(os.path.dirname(os.path.abspath(path)), "config.json")
    if not os.path.isfile(cfg):
        return None
    try:
        with open(cfg) as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None
    for k in _HEAD_KEYS:
        if isinstance(doc.get(k), int):
            log.info("n_heads = %d from %s (%s)", doc[k], cfg, k)
            return int(doc[k])
    return None


def split_heads(Wq, Wk, Wv, Wo, n_heads: int, heads=None, bq=None, bk=None, bv=None):
    """Split full projections in ``nn.Linear`` layout into heads.

    Parameters
    ----------
    Wq, Wk, Wv : array, shape (E_qk or E_v, de)
        ``q = Wq x`` for all heads at once (rows: output features, heads side by side).
    Wo : array, shape (de, E_v)
        Output projection ``x̃ = Wo [ṽ_0; ṽ_1; ...]``.
    n_heads : int
        Heads of the layer; must divide the output features.
    heads : sequence of int, optional
        Heads to keep (default all), in the order given.
    bq, bk, bv : array, optional
        Biases of the in-projections (length E).

    Returns
    -------
    tuple
        ``WQ, WK (H, dk, de)``, ``WV (H, dv, de)``, ``WO (H, de, dv)``, ``bq, bk (H, dk)``,
        ``bv (H, dv)``, heads (tuple of int).
    """
    if isinstance(n_heads, bool) or not isinstance(n_heads, (int, np.integer)) or n_heads < 1:
        raise ValueError(f"n_heads: expected an integer >= 1, got {n_heads!r}")
    Wq, Wk, Wv, Wo = (np.asarray(w, float) for w in (Wq, Wk, Wv, Wo))
    for name, w in (("Wq", Wq), ("Wk", Wk), ("Wv", Wv), ("Wo", Wo)):
        if w.ndim != 2:
            raise ValueError(f"{name}: expected a matrix, got shape {w.shape}")
        if not np.all(np.isfinite(w)):
            raise ValueError(f"{name}: contains NaN or inf")
    de = Wq.shape[1]
    if Wk.shape != Wq.shape or Wv.shape[1] != de or Wo.shape[0] != de or Wo.shape[1] != Wv.shape[0]:
        raise ValueError(f"weights: inconsistent projection shapes Wq {Wq.shape}, Wk {Wk.shape}, "
                         f"Wv {Wv.shape}, Wo {Wo.shape}")
    for name, E in (("query/key", Wq.shape[0]), ("value", Wv.shape[0])):
        if E % n_heads:
            raise ValueError(f"n_heads: {n_heads} heads do not divide the {E} {name} features")
    dk, dv = Wq.shape[0] // n_heads, Wv.shape[0] // n_heads
    if heads is None:
        heads = tuple(range(n_heads))
    else:
        heads = tuple(int(h) for h in heads)
        bad = [h for h in heads if not 0 <= h < n_heads]
        if bad or not heads:
            raise ValueError(f"heads: expected indices in 0 ... {n_heads - 1}, got {list(heads)}")
        if len(set(heads)) != len(heads):
            raise ValueError(f"heads: {list(heads)} repeats a head")
    idx = np.asarray(heads)

    def rows(W, d):          # (H_all, d, de) -> selected
        return W.reshape(n_heads, d, -1)[idx]

    def bias(b, d):
        return np.zeros((len(heads), d)) if b is None else np.asarray(b, float).reshape(n_heads, d)[idx]

    WO = Wo.reshape(de, n_heads, dv).transpose(1, 0, 2)[idx]
    return (rows(Wq, dk), rows(Wk, dk), rows(Wv, dv), WO, bias(bq, dk), bias(bk, dk), bias(bv, dv), heads)


def load_attention(path, layer: int | None = None, heads=None, n_heads: int | None = None,
                   layout: str = "auto") -> AttentionWeights:
    """The attention projections of one layer of a weights file, split into heads.

    Parameters
    ----------
    path : str or path-like
        A safetensors file, a PyTorch state dict or an ``.npz`` (:func:`read_state_dict`).
    layer : int or str, optional
        Layer number, as it appears in the keys (``encoder.layer.3...`` is layer 3), or the
        key prefix (``"decoder.layers.0.multihead_attn."``) where numbers repeat; may be
        omitted when the file holds one attention layer.
    heads : sequence of int, optional
        Heads to keep (default all).
    n_heads : int, optional
        Heads of the layer; default from a ``config.json`` beside the file
        (``num_attention_heads`` or ``n_head``).
    layout : {"auto", "mha", "bert", "gpt2"}
        Key layout (see the module docstring); ``"auto"`` recognises it.

    Returns
    -------
    AttentionWeights

    Raises
    ------
    ValueError
        No attention layer of a known layout, an unknown or ambiguous ``layer``, unknown
        ``n_heads``, heads out of range, inconsistent shapes.
    ImportError
        A PyTorch file without torch.
    """
    path = os.fspath(path)
    state = read_state_dict(path)
    layers = attention_layers(state, layout)
    if not layers:
        raise ValueError(f"weights: {path!r} holds no attention layer of a known layout "
                         f"({', '.join(f'{k}: ...{_MARK[k]}' for k in LAYOUTS)}); "
                         f"its first keys are {sorted(state)[:8]}")
    numbers = [f[1] for f in layers]
    if layer is None:
        if len(layers) > 1:
            raise ValueError(f"layer: {path!r} has {len(layers)} attention layers {numbers}; choose one")
        chosen = layers[0]
    else:
        if isinstance(layer, str):       # a key prefix, for models with several stacks
            match = [f for f in layers if f[2].rstrip(".") == layer.rstrip(".")]
        elif isinstance(layer, bool) or not isinstance(layer, (int, np.integer)):
            raise TypeError(f"layer: expected an integer or a key prefix, got {layer!r}")
        else:
            match = [f for f in layers
                     if f[1] == int(layer) or (f[1] is None and int(layer) == 0 and len(layers) == 1)]
        if len(match) != 1:
            if len(match) > 1:
                raise ValueError(f"layer: several attention layers are numbered {layer} "
                                 f"({[f[2] for f in match]}); pass the key prefix instead")
            raise ValueError(f"layer: {path!r} has attention layers {numbers} "
                             f"({[f[2] for f in layers]}), not {layer!r}")
        chosen = match[0]
    lay, number, prefix = chosen
    if n_heads is None:
        n_heads = _n_heads_from_config(path)
        if n_heads is None:
            raise ValueError("n_heads: a state dict does not record the number of heads; pass "
                             "n_heads (--n-heads) or keep the model's config.json beside the weights")
    names = {role: prefix + suffix for role, suffix in _KEYS[lay].items()}
    missing = [names[r] for r in names if not r.endswith("_b") and names[r] not in state]
    if missing:
        raise ValueError(f"weights: layer {number} of {path!r} lacks {missing}")

    def get(role):
        return None if names[role] not in state else np.asarray(state[names[role]], float)

    if lay == "bert":
        Wq, Wk, Wv, Wo = get("q"), get("k"), get("v"), get("o")
        bq, bk, bv, bo = get("q_b"), get("k_b"), get("v_b"), get("o_b")
    else:
        W, b = get("qkv"), get("qkv_b")
        Wo, bo = get("o"), get("o_b")
        if lay == "gpt2":            # Conv1D: y = x @ W + b, W (in, out)
            W, Wo = W.T, Wo.T
        if W.ndim != 2 or W.shape[0] % 3:
            raise ValueError(f"weights: {names['qkv']} has shape {W.shape}; expected three stacked "
                             "projections")
        E = W.shape[0] // 3
        Wq, Wk, Wv = W[:E], W[E:2 * E], W[2 * E:]
        bq, bk, bv = (None, None, None) if b is None else (b[:E], b[E:2 * E], b[2 * E:])
    WQ, WK, WV, WO, bq, bk, bv, heads = split_heads(Wq, Wk, Wv, Wo, n_heads, heads, bq, bk, bv)
    de = WQ.shape[2]
    bo = np.zeros(de) if bo is None else np.asarray(bo, float).reshape(de)
    log.info("read %s layer %s of %s: %d of %d heads, dk=%d, dv=%d, de=%d", lay, number, path,
             len(heads), n_heads, WQ.shape[1], WV.shape[1], de)
    return AttentionWeights(WQ=WQ, WK=WK, WV=WV, WO=WO, bq=bq, bk=bk, bv=bv, bo=bo, layout=lay,
                            layer=number, heads=heads, n_heads=int(n_heads), source=os.path.abspath(path),
                            keys={r: k for r, k in names.items() if k in state})


def real_array(a: np.ndarray, what: str) -> np.ndarray:
    """``a`` as float; ``ValueError`` naming ``what`` when it is not real numbers (a complex array
    would lose its imaginary part, booleans and integers convert exactly)."""
    if a.dtype.kind not in "biuf":
        raise ValueError(f"{what} has dtype {a.dtype}; expected real numbers"
                         + (" (its imaginary part would be lost)" if a.dtype.kind == "c" else ""))
    return np.asarray(a, float)


def read_tokens(path) -> dict:
    """Token embeddings from an ``.npz``: ``X (n, de)`` and, for cross-attention, ``Y (m, de)``.

    Raises
    ------
    ValueError
        Missing file, no ``X``, or arrays that are not matrices of finite numbers.
    """
    path = os.fspath(path)
    arrays = read_npz(path, "tokens")
    if "X" not in arrays:
        raise ValueError(f"tokens: {path!r} has no array 'X' (token embeddings, shape (n, de)); "
                         f"it has {sorted(arrays)}")
    out = {}
    for k in ("X", "Y"):
        if k in arrays:
            a = real_array(arrays[k], f"tokens: {k} in {path!r}")
            if a.ndim != 2 or not np.all(np.isfinite(a)):
                raise ValueError(f"tokens: {k} in {path!r} must be a finite matrix (tokens, de), got shape {a.shape}")
            out[k] = a
    out.setdefault("Y", None)
    return out
