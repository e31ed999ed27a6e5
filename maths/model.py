"""A transformer model as one typed object, and its file format.

A :class:`Model` is a tuple of :class:`Block` (each an attention layer
:class:`~ctmhsa.maths.weights.AttentionWeights`, an optional skip path ``WS`` and an optional
:class:`MLPWeights`) with an optional input embedding and readout: the one object handed from
layer to layer instead of loose arrays ``X, WQ, WK, WV, WO, WS``. :meth:`Model.save` writes it
and :func:`load_model` reads it.

The model file is a flat mapping of keys to arrays, stored as ``.npz`` (``numpy.savez``) or
``.safetensors``. ``l = 0 ... L-1`` numbers the blocks without gaps; the blocks, the readout and
the embedding share the embedding dimension ``de``. All weights are dimensionless (in units of
the circuit's codes).

========================  =================  ========  ====================================================
Key                       Shape              Presence  Meaning
========================  =================  ========  ====================================================
``blocks.{l}.attn.WQ``    ``(H, dk, de)``    required  query projection, ``q_i = WQ[h] @ x_i``
``blocks.{l}.attn.WK``    ``(H, dk, de)``    required  key projection, ``k_j = WK[h] @ x_j``
``blocks.{l}.attn.WV``    ``(H, dv, de)``    required  value projection, ``v_j = WV[h] @ x_j``
``blocks.{l}.attn.WO``    ``(H, de, dv)``    required  output projection, ``x̃_i = Σ_h WO[h] @ ṽ_i[h]``
``blocks.{l}.attn.WS``    ``(H, dv, de)``    optional  skip weights of the core → L5 PT skip path
``blocks.{l}.attn.bq``    ``(H, dk)``        optional  query bias (absent: zero; written when non-zero)
``blocks.{l}.attn.bk``    ``(H, dk)``        optional  key bias (as ``bq``)
``blocks.{l}.attn.bv``    ``(H, dv)``        optional  value bias (as ``bq``)
``blocks.{l}.attn.bo``    ``(de,)``          optional  output bias, added once (as ``bq``)
``blocks.{l}.mlp.W1``     ``(dh, de)``       with MLP  first MLP layer, ``W1 @ x + b1``
``blocks.{l}.mlp.b1``     ``(dh,)``          with MLP  its bias
``blocks.{l}.mlp.W2``     ``(de, dh)``       with MLP  second MLP layer, ``W2 @ h + b2``
``blocks.{l}.mlp.b2``     ``(de,)``          with MLP  its bias
``readout.W``             ``(classes, de)``  optional  linear readout of the last block's tokens
``readout.b``             ``(classes,)``     optional  readout bias (absent: zero; needs ``readout.W``)
``embed.W``               ``(de, p)``        optional  input embedding, ``x_i = embed.W @ u_i + embed.pos[i]``
``embed.pos``             ``(n, de)``        optional  positional embedding of ``n`` tokens (needs ``embed.W``)
``memory.causal``         ``()``             optional  1: every block's attention is the causal key-value memory
                                                       over a sequence, one token per step (absent or 0: linear
                                                       attention over a token set)
``memory.forget``         ``()``             optional  λ in (0, 1] kept per token (causal only; absent: 1)
``memory.normalize``      ``()``             optional  1: the memory's normalised read-out (causal only; absent:
                                                       0, the revised paper's unnormalised memory)
``vocab``                 ``(classes,)``     optional  Unicode code points of the classes' characters: a
                                                       language model (needs ``readout.W``; its inputs one-hot)
========================  =================  ========  ====================================================

A block's MLP keys come all four together or not at all. Any other key, a missing required key,
a gap in the block numbers, a shape that disagrees with the others or a NaN/inf is refused with a
``ValueError`` naming the key. The file holds arrays only: a loaded attention layer has layout
``"ctmhsa"``, all of its ``H`` heads, and records the file it came from.
"""

from __future__ import annotations

import importlib.util
import os
import re
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from .reference import _as_real_array
from .weights import AttentionWeights, read_npz, read_state_dict

__all__ = ["MLPWeights", "Block", "Model", "load_model", "LAYOUT", "SUFFIXES"]

LAYOUT = "ctmhsa"
"""``AttentionWeights.layout`` of attention layers built here (already in this project's convention)."""

SUFFIXES = (".npz", ".safetensors")
"""File types of a model file."""

# Shape specs: (field, axis symbols). The first array to show a symbol fixes its size; every later
# array must agree, and the error names the array(s) that fixed it.
_ATTN = (("WQ", ("H", "dk", "de")), ("WK", ("H", "dk", "de")), ("WV", ("H", "dv", "de")),
         ("WO", ("H", "de", "dv")), ("WS", ("H", "dv", "de")), ("bq", ("H", "dk")), ("bk", ("H", "dk")),
         ("bv", ("H", "dv")), ("bo", ("de",)))
_MLP = (("W1", ("dh", "de")), ("b1", ("dh",)), ("W2", ("de", "dh")), ("b2", ("de",)))
_READOUT = (("W", ("classes", "de")), ("b", ("classes",)))
_EMBED = (("W", ("de", "p")), ("pos", ("n", "de")))
_ATTN_REQUIRED = ("WQ", "WK", "WV", "WO")
_MEMORY_KEYS = ("memory.causal", "memory.forget", "memory.normalize")
_BIASES = ("bq", "bk", "bv", "bo")
_BLOCK_KEY = re.compile(r"blocks\.(0|[1-9][0-9]*)\.(attn|mlp)\.(\w+)")   # no leading zeros: one key per array


def _check_shapes(arrays: Mapping[str, np.ndarray], spec, label: Callable[[str], str],
                  bound: dict | None = None) -> dict:
    """Check the arrays present in ``arrays`` against ``spec``.

    Parameters
    ----------
    arrays : mapping of field -> ndarray
        The arrays of one group (absent fields are skipped).
    spec : sequence of (field, tuple of str)
        Axis symbols of every field.
    label : callable
        Field -> the name used in messages (a file key or an attribute).
    bound : dict, optional
        Symbol -> ``(size, name of the array that fixed it)`` known beforehand (``de``).

    Returns
    -------
    dict
        ``bound`` extended with the sizes of this group.

    Raises
    ------
    ValueError
        A wrong number of axes, a size that disagrees, or an empty axis; names the array.
    """
    bound = dict(bound or {})
    for name, dims in spec:
        a = arrays.get(name)
        if a is None:
            continue
        key = label(name)
        want = [bound[d][0] if d in bound else None for d in dims]
        if a.ndim != len(dims) or any(w is not None and s != w for s, w in zip(a.shape, want)):
            text = ", ".join(d if w is None else f"{d}={w}" for d, w in zip(dims, want))
            sources = list(dict.fromkeys(bound[d][1] for d in dims if d in bound))
            like = f" like {' and '.join(sources)}" if sources else ""
            raise ValueError(f"{key}: expected shape ({text}{',' if len(dims) == 1 else ''}){like}, "
                             f"got {tuple(a.shape)}")
        if 0 in a.shape:
            raise ValueError(f"{key}: every axis must be non-empty, got shape {tuple(a.shape)}")
        for d, s in zip(dims, a.shape):
            bound.setdefault(d, (int(s), key))
    return bound


def _float(name: str, value) -> np.ndarray:
    """``value`` as a real finite float array, errors naming ``name``; a finite float64 array is
    kept as it is (no copy: a model and its blocks check the same arrays again)."""
    if type(value) is np.ndarray and value.dtype == np.float64 and np.isfinite(value).all():
        return value
    return _as_real_array(name, value)


def _floats(values: Mapping[str, object], label: Callable[[str], str]) -> dict:
    """:func:`_float` of every value (``None`` kept), errors naming ``label(field)``."""
    return {k: None if v is None else _float(label(k), v) for k, v in values.items()}


# ------------------------------------------------------------------------------------------
# the model
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class MLPWeights:
    """The two-layer MLP of a block, ``W2 @ f(W1 @ x + b1) + b2``.

    Attributes
    ----------
    W1 : ndarray, shape (dh, de)
        First layer (dimensionless).
    b1 : ndarray, shape (dh,)
    W2 : ndarray, shape (de, dh)
        Second layer.
    b2 : ndarray, shape (de,)

    Raises
    ------
    ValueError
        A shape that disagrees with the others (the message names the field and the expected
        shape), an empty axis, or NaN/inf.
    TypeError
        A non-numeric array.
    """

    W1: np.ndarray
    b1: np.ndarray
    W2: np.ndarray
    b2: np.ndarray

    def __post_init__(self):
        arrays = _floats({k: getattr(self, k) for k, _ in _MLP}, str)
        _check_shapes(arrays, _MLP, str)
        for k, a in arrays.items():
            object.__setattr__(self, k, a)

    @property
    def de(self) -> int:
        """Embedding dimension (input of ``W1``, output of ``W2``)."""
        return int(self.W1.shape[1])

    @property
    def dh(self) -> int:
        """Hidden units."""
        return int(self.W1.shape[0])


@dataclass(frozen=True, eq=False)
class Block:
    """One transformer block: attention, an optional skip path and an optional MLP.

    Attributes
    ----------
    attn : AttentionWeights
        The attention layer, split into heads (:mod:`ctmhsa.maths.weights`).
    mlp : MLPWeights or None
        The block's MLP.
    WS : ndarray, shape (H, dv, de), or None
        Skip weights of the core → L5 PT skip path (dimensionless).

    Raises
    ------
    ValueError
        Attention arrays of inconsistent shapes, or an MLP or ``WS`` whose ``de`` (or ``H``,
        ``dv``) disagrees with the attention's.
    TypeError
        ``attn`` or ``mlp`` of the wrong type.
    """

    attn: AttentionWeights
    mlp: MLPWeights | None = None
    WS: np.ndarray | None = None

    def __post_init__(self):
        if not isinstance(self.attn, AttentionWeights):
            raise TypeError(f"attn: expected AttentionWeights, got {type(self.attn).__name__}")
        if self.mlp is not None and not isinstance(self.mlp, MLPWeights):
            raise TypeError(f"mlp: expected MLPWeights or None, got {type(self.mlp).__name__}")
        names = [k for k, _ in _ATTN if k != "WS"]
        arrays = _floats({k: getattr(self.attn, k) for k in names}, lambda k: f"attn.{k}")
        arrays["WS"] = _floats({"WS": self.WS}, str)["WS"]
        bound = _check_shapes(arrays, _ATTN, lambda k: k if k == "WS" else f"attn.{k}")
        if self.mlp is not None and self.mlp.de != bound["de"][0]:
            raise ValueError(f"mlp: embedding dimension de={self.mlp.de} (mlp.W1 {self.mlp.W1.shape}) "
                             f"differs from attn's de={bound['de'][0]}")
        # keep the caller's AttentionWeights (its layout, heads, source) unless an array had to be converted
        changed = {k: arrays[k] for k in names if arrays[k] is not getattr(self.attn, k)}
        if changed:
            object.__setattr__(self, "attn", replace(self.attn, **changed))
        object.__setattr__(self, "WS", arrays["WS"])

    @property
    def de(self) -> int:
        """Embedding dimension."""
        return self.attn.de

    @property
    def H(self) -> int:
        """Heads."""
        return self.attn.H

    # the attention arrays, read where a layer needs one of them (the block travels whole)
    WQ = property(lambda self: self.attn.WQ, doc="Query projections (H, dk, de).")
    WK = property(lambda self: self.attn.WK, doc="Key projections (H, dk, de).")
    WV = property(lambda self: self.attn.WV, doc="Value projections (H, dv, de).")
    WO = property(lambda self: self.attn.WO, doc="Output projection (H, de, dv).")

    @classmethod
    def from_arrays(cls, WQ, WK, WV, WO, WS=None) -> "Block":
        """An attention block (no MLP) from plain arrays: zero biases, layout ``"ctmhsa"``,
        all heads (``ValueError`` naming an array of the wrong shape, NaN or inf)."""
        arrays = _floats(dict(WQ=WQ, WK=WK, WV=WV, WO=WO, WS=WS), str)
        bound = _check_shapes(arrays, _ATTN, str)
        return cls(attn=_attention(arrays, bound, layer=0, source="", keys={}), WS=arrays["WS"])

    def head(self, h: int) -> "Block":
        """Head ``h`` alone, as a one-head block (its own WO block; the MLP is dropped)."""
        sl = slice(h, h + 1)
        attn = replace(self.attn, WQ=self.WQ[sl], WK=self.WK[sl], WV=self.WV[sl], WO=self.WO[sl],
                       bq=self.attn.bq[sl], bk=self.attn.bk[sl], bv=self.attn.bv[sl],
                       heads=(self.attn.heads[h],))
        return Block(attn=attn, WS=None if self.WS is None else self.WS[sl])

    def arrays(self) -> dict:
        """``WQ, WK, WV, WO`` and, when present, ``WS``: the keywords of
        :func:`ctmhsa.maths.reference.linear_mhsa`."""
        out = self.attn.arrays()
        if self.WS is not None:
            out["WS"] = self.WS
        return out


@dataclass(frozen=True, eq=False, repr=False)
class Model:
    """A stack of blocks with an optional input embedding and readout.

    Attributes
    ----------
    blocks : tuple of Block
        At least one; all share the embedding dimension ``de``.
    readout_W : ndarray, shape (classes, de), or None
        Linear readout (dimensionless).
    readout_b : ndarray, shape (classes,), or None
        Readout bias; zeros when ``readout_W`` is given without it.
    embed_W : ndarray, shape (de, p), or None
        Input embedding of ``p``-dimensional inputs (see :meth:`embed`).
    embed_pos : ndarray, shape (n, de), or None
        Positional embedding of ``n`` tokens; needs ``embed_W``.
    name : str
        A label (``load_model`` sets the file's stem).
    source : str
        The file read, if any.
    causal : bool
        Every block's attention is the causal key-value memory over a sequence, one token per
        step (:func:`ctmhsa.maths.reference.memory_attention`; the revised paper's circuit) and the
        read-out gives logits per token; ``False``: linear attention over a token set, the
        read-out of the tokens' mean.
    forget : float
        λ in (0, 1] the memory keeps per token (causal models; 1: nothing is forgotten).
    normalize : bool or None
        The memory's normalised read-out (causal models; ``None``: unnormalised). A token set's
        attention is normalised (``None`` or ``True``). Kept as given, so that
        ``dataclasses.replace`` of another field keeps the default of the model's kind; the
        effective value is :attr:`memory_normalised`.
    vocab : str or None
        A language model's characters: class ``c`` is ``vocab[c]``; its inputs are one-hot rows
        ``(T, len(vocab))`` (``embed_W`` of shape ``(de, len(vocab))``).

    Raises
    ------
    ValueError
        No block, blocks of different ``de``, readout or embedding shapes that disagree, a
        readout bias without weights, a positional embedding without an input embedding.
    TypeError
        A block that is not a :class:`Block`.
    """

    blocks: tuple
    readout_W: np.ndarray | None = None
    readout_b: np.ndarray | None = None
    embed_W: np.ndarray | None = None
    embed_pos: np.ndarray | None = None
    name: str = ""
    source: str = ""
    causal: bool = False
    forget: float = 1.0
    normalize: bool | None = None
    vocab: str | None = None

    def __post_init__(self):
        if isinstance(self.blocks, Block) or not isinstance(self.blocks, (tuple, list)):
            raise TypeError(f"blocks: expected a tuple of Block, got {type(self.blocks).__name__}")
        blocks = tuple(self.blocks)
        if not blocks:
            raise ValueError("blocks: a model needs at least one block")
        for i, b in enumerate(blocks):
            if not isinstance(b, Block):
                raise TypeError(f"blocks[{i}]: expected a Block, got {type(b).__name__}")
            if b.de != blocks[0].de:
                raise ValueError(f"blocks[{i}]: embedding dimension de={b.de} differs from blocks[0]'s "
                                 f"de={blocks[0].de}; the blocks share one residual stream")
        object.__setattr__(self, "blocks", blocks)
        if self.readout_b is not None and self.readout_W is None:
            raise ValueError("readout_b: given without readout_W")
        if self.embed_pos is not None and self.embed_W is None:
            raise ValueError("embed_pos: given without embed_W")
        de = {"de": (blocks[0].de, "blocks[0].attn.WQ")}
        arrays = _floats({k: getattr(self, k) for k in ("readout_W", "readout_b", "embed_W", "embed_pos")}, str)
        if arrays["readout_W"] is not None and arrays["readout_b"] is None:
            arrays["readout_b"] = np.zeros(arrays["readout_W"].shape[0])
        _check_shapes({"W": arrays["readout_W"], "b": arrays["readout_b"]}, _READOUT,
                      lambda k: f"readout_{k}", de)
        _check_shapes({"W": arrays["embed_W"], "pos": arrays["embed_pos"]}, _EMBED,
                      lambda k: f"embed_{k}", de)
        for k, a in arrays.items():
            object.__setattr__(self, k, a)
        self._check_memory()
        self._check_vocab()

    def _check_memory(self) -> None:
        if not isinstance(self.causal, (bool, np.bool_)):
            raise TypeError(f"causal: expected True or False, got {self.causal!r}")
        forget = float(self.forget) if isinstance(self.forget, (int, float, np.floating, np.integer)) \
            and not isinstance(self.forget, bool) else float("nan")
        if not 0.0 < forget <= 1.0:
            raise ValueError(f"forget: expected λ in (0, 1], got {self.forget!r}")
        if self.normalize is not None and not isinstance(self.normalize, (bool, np.bool_)):
            raise TypeError(f"normalize: expected True, False or None, got {self.normalize!r}")
        if not self.causal:
            if forget != 1.0:
                raise ValueError(f"forget: {forget} applies to a causal model's memory (causal=True)")
            if self.normalize is False:
                raise ValueError("normalize: a token set's attention is normalised; False applies to a causal "
                                 "model's memory (causal=True)")
        elif self.embed_pos is not None:
            raise ValueError("embed_pos: a causal model reads a sequence of any length, one token per step; "
                             "positional embeddings of a fixed n do not apply")
        object.__setattr__(self, "causal", bool(self.causal))
        object.__setattr__(self, "forget", forget)
        if self.normalize is not None:   # as given (None: the default of the model's kind, memory_normalised)
            object.__setattr__(self, "normalize", bool(self.normalize))

    @property
    def memory_normalised(self) -> bool:
        """Whether the attention divides by its normaliser: a causal model's memory where
        ``normalize`` is True (``None``: unnormalised, the revised paper's); a token set's always."""
        return bool(self.normalize) if self.causal else True

    def _check_vocab(self) -> None:
        if self.vocab is None:
            return
        if not isinstance(self.vocab, str) or not self.vocab:
            raise TypeError(f"vocab: expected a non-empty string of the classes' characters, got {self.vocab!r}")
        if len(set(self.vocab)) != len(self.vocab):
            raise ValueError("vocab: a character appears twice")
        if self.readout_W is None or self.readout_W.shape[0] != len(self.vocab):
            got = "no readout" if self.readout_W is None else f"{self.readout_W.shape[0]} classes"
            raise ValueError(f"vocab: {len(self.vocab)} characters need a readout of as many classes; got {got}")
        if self.embed_W is not None and self.embed_W.shape[1] != len(self.vocab):
            raise ValueError(f"vocab: {len(self.vocab)} characters need one-hot inputs of as many entries; "
                             f"embed.W takes p = {self.embed_W.shape[1]}")

    def __repr__(self) -> str:       # the dataclass repr would print every weight
        parts = [f"name={self.name!r}", f"blocks={self.n_blocks}", f"de={self.de}", f"H={self.H}",
                 f"dk={self.dk}", f"dv={self.dv}",
                 f"mlp={[b.mlp is not None for b in self.blocks]}", f"WS={[b.WS is not None for b in self.blocks]}"]
        if self.readout_W is not None:
            parts.append(f"classes={self.readout_W.shape[0]}")
        if self.embed_W is not None:
            parts.append(f"p={self.embed_W.shape[1]}")
        if self.causal:
            parts.append(f"causal=True, forget={self.forget:g}, normalize={self.memory_normalised}")
        if self.vocab is not None:
            parts.append(f"vocab={len(self.vocab)} characters")
        if self.source:
            parts.append(f"source={self.source!r}")
        return f"Model({', '.join(parts)})"

    # sizes (of block 0; later blocks may have other head counts, only de is shared)
    @property
    def de(self) -> int:
        """Embedding dimension, shared by every block."""
        return self.blocks[0].de

    @property
    def n_blocks(self) -> int:
        """Number of blocks."""
        return len(self.blocks)

    @property
    def H(self) -> int:
        """Heads of block 0."""
        return int(self.blocks[0].attn.WQ.shape[0])

    @property
    def dk(self) -> int:
        """Query/key dimension of block 0."""
        return int(self.blocks[0].attn.WQ.shape[1])

    @property
    def dv(self) -> int:
        """Value dimension of block 0."""
        return int(self.blocks[0].attn.WV.shape[1])

    @classmethod
    def from_arrays(cls, WQ, WK, WV, WO, WS=None, name: str = "") -> "Model":
        """A one-block model from plain attention arrays.

        Parameters
        ----------
        WQ, WK : array, shape (H, dk, de)
        WV : array, shape (H, dv, de)
        WO : array, shape (H, de, dv)
        WS : array, shape (H, dv, de), optional
            Skip weights of the core → L5 PT skip path.
        name : str
            The model's label.

        Returns
        -------
        Model
            Attention with zero biases, layout ``"ctmhsa"``, layer 0, all ``H`` heads.

        Raises
        ------
        ValueError
            Inconsistent shapes (naming the array), empty axes, NaN/inf.
        """
        return cls(blocks=(Block.from_arrays(WQ, WK, WV, WO, WS),), name=name)

    def state_dict(self) -> dict:
        """The model in the file layout of the module docstring.

        Returns
        -------
        dict of str -> ndarray
            The model's own arrays (not copies). Attention biases appear only when non-zero,
            ``WS``, MLP, readout and embedding keys only when the model has them.
        """
        out = {}
        for l, b in enumerate(self.blocks):
            p = f"blocks.{l}."
            for k in _ATTN_REQUIRED:
                out[p + "attn." + k] = getattr(b.attn, k)
            if b.WS is not None:
                out[p + "attn.WS"] = b.WS
            for k in _BIASES:
                if np.any(getattr(b.attn, k)):
                    out[p + "attn." + k] = getattr(b.attn, k)
            if b.mlp is not None:
                for k, _ in _MLP:
                    out[p + "mlp." + k] = getattr(b.mlp, k)
        if self.readout_W is not None:
            out["readout.W"], out["readout.b"] = self.readout_W, self.readout_b
        if self.embed_W is not None:
            out["embed.W"] = self.embed_W
            if self.embed_pos is not None:
                out["embed.pos"] = self.embed_pos
        if self.causal:
            out["memory.causal"] = np.array(1.0)
            if self.forget != 1.0:
                out["memory.forget"] = np.array(self.forget)
            if self.memory_normalised:
                out["memory.normalize"] = np.array(1.0)
        if self.vocab is not None:
            out["vocab"] = np.array([ord(ch) for ch in self.vocab], float)
        return out

    def save(self, path) -> str:
        """Write the model file, atomically.

        Parameters
        ----------
        path : str or path-like
            ``*.npz`` (``numpy.savez``) or ``*.safetensors`` (needs the ``safetensors`` package).
            The file is written beside its target and moved over it, so a reader never sees a
            partial file and a failed write leaves an existing file as it was.

        Returns
        -------
        str
            The absolute path written.

        Raises
        ------
        ValueError
            Another suffix, or ``path`` is an existing directory (left untouched) or lies in
            something that is not a directory.
        FileNotFoundError
            The folder of ``path`` does not exist (it is not created).
        ImportError
            ``.safetensors`` without the ``safetensors`` package.
        """
        path = os.path.abspath(os.fspath(path))
        ext = os.path.splitext(path)[1].lower()
        if ext not in SUFFIXES:
            raise ValueError(f"path: a model file ends in {' or '.join(SUFFIXES)}, got {path!r}")
        # checked before anything is written: os.replace would fail only after the temporary file
        folder = os.path.dirname(path)
        if os.path.isdir(path):
            raise ValueError(f"path: {path!r} is an existing directory, not a model file; choose a file name "
                             "(the directory is left as it is)")
        if not os.path.isdir(folder):
            if os.path.exists(folder):
                raise ValueError(f"path: {folder!r} (the folder of {path!r}) is not a directory")
            raise FileNotFoundError(f"path: the folder {folder!r} of {path!r} does not exist; create it first")
        tensors = {k: np.ascontiguousarray(v, dtype=np.float64) for k, v in self.state_dict().items()}
        if ext == ".safetensors":
            try:
                from safetensors.numpy import save_file
            except ImportError:
                raise ImportError(f"path: writing {path!r} needs the safetensors package (pip install "
                                  "safetensors, or pip install 'ctmhsa[weights]'); or save as .npz") from None
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
        try:
            if ext == ".npz":
                with os.fdopen(fd, "wb") as fh:          # a file object: savez would append .npz to a name
                    np.savez(fh, **tensors)
                    fh.flush()
                    os.fsync(fh.fileno())
            else:
                os.close(fd)
                save_file(tensors, tmp)
            os.chmod(tmp, _file_mode(path))               # mkstemp creates 0600
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return path

    @classmethod
    def from_state_dict(cls, state: Mapping, source: str = "", *, name: str = "") -> "Model":
        """Parse a mapping in the file layout of the module docstring.

        Parameters
        ----------
        state : mapping of str -> array
            Keys and arrays as :meth:`state_dict` writes them.
        source : str
            Where the arrays came from (recorded in the model and its attention layers).
        name : str
            The model's label.

        Returns
        -------
        Model

        Raises
        ------
        ValueError
            Unknown keys (all listed), missing required keys, gaps in the block numbering, a
            shape that disagrees (naming the key, the expected and the actual shape), NaN/inf
            (naming the key).
        TypeError
            A non-numeric array.
        """
        if not isinstance(state, Mapping):
            raise TypeError(f"state: expected a mapping of keys to arrays, got {type(state).__name__}")
        known = {"attn": {k for k, _ in _ATTN}, "mlp": {k for k, _ in _MLP}}
        blocks: dict[int, dict[str, dict[str, object]]] = {}
        unknown = []
        for key in state:
            m = _BLOCK_KEY.fullmatch(key) if isinstance(key, str) else None
            if m and m.group(3) in known[m.group(2)]:
                blocks.setdefault(int(m.group(1)), {"attn": {}, "mlp": {}})[m.group(2)][m.group(3)] = state[key]
            elif key not in ("readout.W", "readout.b", "embed.W", "embed.pos", *_MEMORY_KEYS, "vocab"):
                unknown.append(key)
        if unknown:
            raise ValueError(f"state: unknown key(s) {sorted(map(str, unknown))}; a model file holds "
                             "blocks.{l}.attn.{WQ,WK,WV,WO,WS,bq,bk,bv,bo}, blocks.{l}.mlp.{W1,b1,W2,b2}, "
                             "readout.{W,b}, embed.{W,pos}, memory.{causal,forget,normalize} and vocab")
        if not blocks:
            raise ValueError("state: no block; a model file needs at least blocks.0.attn.WQ, WK, WV and WO")
        numbers = sorted(blocks)
        if numbers != list(range(len(numbers))):
            gaps = sorted(set(range(numbers[-1] + 1)) - set(numbers))
            raise ValueError(f"state: non-contiguous block numbering {numbers}; blocks are numbered 0, 1, ... "
                             f"without gaps (missing {gaps})")
        missing = []
        for l in numbers:
            missing += [f"blocks.{l}.attn.{k}" for k in _ATTN_REQUIRED if k not in blocks[l]["attn"]]
            if blocks[l]["mlp"]:
                missing += [f"blocks.{l}.mlp.{k}" for k, _ in _MLP if k not in blocks[l]["mlp"]]
        missing += [f"{g}.W" for g, extra in (("readout", "b"), ("embed", "pos"))
                    if f"{g}.{extra}" in state and f"{g}.W" not in state]
        if missing:
            raise ValueError(f"state: missing required key(s) {missing}")

        de = None                   # the residual stream's width, fixed by blocks.0.attn.WQ
        out = []
        for l in numbers:
            p = f"blocks.{l}."
            attn = _floats(blocks[l]["attn"], lambda k, p=p: f"{p}attn.{k}")
            bound = _check_shapes(attn, _ATTN, lambda k, p=p: f"{p}attn.{k}", de)
            de = de or {"de": bound["de"]}
            keys = {k: f"{p}attn.{k}" for k in attn if k != "WS"}
            weights = _attention(attn, bound, layer=l, source=source, keys=keys)
            mlp = None
            if blocks[l]["mlp"]:
                arrays = _floats(blocks[l]["mlp"], lambda k, p=p: f"{p}mlp.{k}")
                _check_shapes(arrays, _MLP, lambda k, p=p: f"{p}mlp.{k}", de)
                mlp = MLPWeights(**arrays)
            out.append(Block(attn=weights, mlp=mlp, WS=attn.get("WS")))
        extra = {}
        for group, spec in (("readout", _READOUT), ("embed", _EMBED)):
            arrays = _floats({k: state[f"{group}.{k}"] for k, _ in spec if f"{group}.{k}" in state},
                             lambda k, g=group: f"{g}.{k}")
            _check_shapes(arrays, spec, lambda k, g=group: f"{g}.{k}", de)
            extra.update({f"{group}_{k}": a for k, a in arrays.items()})
        extra.update(_memory_fields(state))
        return cls(blocks=tuple(out), name=name, source=source, **extra)

    def embed(self, inputs) -> np.ndarray:
        """Token embeddings ``inputs @ embed_W.T + embed_pos``.

        Parameters
        ----------
        inputs : array, shape (n, p) or (B, n, p)
            Raw inputs (dimensionless).

        Returns
        -------
        ndarray, shape (n, de) or (B, n, de)

        Raises
        ------
        ValueError
            The model has no input embedding, or ``inputs`` does not match ``embed_W`` (``p``)
            or ``embed_pos`` (``n``).
        """
        if self.embed_W is None:
            raise ValueError(f"embed: model {self.name or '(unnamed)'} has no input embedding (embed.W); "
                             "pass token embeddings directly")
        x = _as_real_array("inputs", inputs)
        p = self.embed_W.shape[1]
        n = None if self.embed_pos is None else self.embed_pos.shape[0]
        if x.ndim not in (2, 3) or x.shape[-1] != p or (n is not None and x.shape[-2] != n):
            want = f"{'n' if n is None else f'n={n}'}, p={p}"
            raise ValueError(f"inputs: expected shape ({want}) or (B, {want}) to match embed.W"
                             f"{'' if n is None else ' and embed.pos'}, got {x.shape}")
        out = x @ self.embed_W.T
        return out if self.embed_pos is None else out + self.embed_pos


def _attention(arrays: dict, bound: dict, layer: int, source: str, keys: dict) -> AttentionWeights:
    """AttentionWeights of checked arrays; absent biases are zeros."""
    H, dk, dv, de = (bound[d][0] for d in ("H", "dk", "dv", "de"))
    zeros = dict(bq=(H, dk), bk=(H, dk), bv=(H, dv), bo=(de,))
    biases = {k: arrays[k] if arrays.get(k) is not None else np.zeros(s) for k, s in zeros.items()}
    return AttentionWeights(WQ=arrays["WQ"], WK=arrays["WK"], WV=arrays["WV"], WO=arrays["WO"], **biases,
                            layout=LAYOUT, layer=layer, heads=tuple(range(H)), n_heads=H, source=source,
                            keys=keys)


def _scalar(state: Mapping, key: str) -> float:
    a = _float(key, state[key])
    if a.size != 1 or a.ndim > 1:     # (some readers store a scalar as shape (1,))
        raise ValueError(f"{key}: expected a scalar (shape ()), got shape {a.shape}")
    return float(a.reshape(()))


def _flag(state: Mapping, key: str) -> bool | None:
    if key not in state:
        return None
    v = _scalar(state, key)
    if v not in (0.0, 1.0):
        raise ValueError(f"{key}: expected 0 or 1, got {v!r}")
    return bool(v)


def _memory_fields(state: Mapping) -> dict:
    """The ``memory.*`` and ``vocab`` keys of a model file as :class:`Model` fields."""
    out = {}
    causal = _flag(state, "memory.causal")
    if causal is not None:
        out["causal"] = causal
    for key in ("memory.forget", "memory.normalize"):
        if key in state and not causal:
            raise ValueError(f"{key}: applies to a causal model (memory.causal = 1)")
    if "memory.forget" in state:
        out["forget"] = _scalar(state, "memory.forget")
    if "memory.normalize" in state:
        out["normalize"] = _flag(state, "memory.normalize")
    if "vocab" in state:
        codes = _float("vocab", state["vocab"])
        if codes.ndim != 1 or np.any(codes != np.round(codes)) or np.any(codes < 0) or np.any(codes > 0x10FFFF):
            raise ValueError("vocab: expected a vector of Unicode code points (integers 0 to 0x10FFFF)")
        out["vocab"] = "".join(chr(int(c)) for c in codes)
    return out


def _file_mode(path: str) -> int:
    """The mode a replaced file keeps, or the umask's default for a new one."""
    try:
        return os.stat(path).st_mode & 0o777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


# ------------------------------------------------------------------------------------------
# reading model files
# ------------------------------------------------------------------------------------------

def _models_dir() -> Path:
    """``ctmhsa/sims/models``, found without importing ``ctmhsa.sims`` (which imports Brian2)."""
    spec = importlib.util.find_spec("ctmhsa.sims")
    if spec is not None and spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0]) / "models"
    return Path(__file__).resolve().parent.parent / "sims" / "models"     # pragma: no cover


def _is_model_file(path: Path) -> bool:
    """Whether a shipped ``.npz`` holds a model (``blocks.*`` or Co4's ``co4.*`` arrays), not a
    data set (the digits' ``images``/``labels``). Only the archive's directory is read; an
    unreadable file counts as a model, so that loading it reports the damage."""
    try:
        with np.load(path) as z:
            return any(k.startswith(("blocks.",) + tuple(FILE_KINDS)) for k in z.files)
    except Exception:  # noqa: BLE001 - a damaged file is reported when it is loaded
        return True


FILE_KINDS: dict = {}
"""Key prefix -> the model class whose files hold keys starting with it (besides the
transformer's ``blocks.*``): a file's kind is decided by its keys, never by its name. A model
kind registers itself (:func:`register_file_kind`), so that this module imports none."""


def register_file_kind(prefix: str, kind) -> None:
    """Model files with a key starting with ``prefix`` are read by ``kind.from_state_dict``."""
    FILE_KINDS[prefix] = kind


def _shipped_models() -> list[str]:
    """Names of the models shipped in :func:`_models_dir` (data sets beside them left out)."""
    folder = _models_dir()
    return sorted(p.stem for p in folder.glob("*.npz") if _is_model_file(p)) if folder.is_dir() else []


def load_model(path_or_name):
    """Read a model file, or a model shipped with the package: a transformer :class:`Model`, or a
    :class:`ctmhsa.maths.co4.Co4Model` where the file holds ``co4.*`` keys (:data:`FILE_KINDS`: the
    kind is decided by the keys, never by the name; a file with both kinds' keys is refused).

    Parameters
    ----------
    path_or_name : str or path-like
        A ``.npz`` or ``.safetensors`` file in the layout of the module docstring, or the name
        of a shipped model (no suffix, not an existing file): ``ctmhsa/sims/models/<name>.npz``.

    Returns
    -------
    Model or Co4Model
        Named after the file's stem; ``source`` is the file's absolute path.

    Raises
    ------
    TypeError
        ``path_or_name`` is neither a string nor a path.
    FileNotFoundError
        No such file, a directory, or no shipped model of that name (the message lists the
        shipped ones).
    ValueError
        Another suffix, an unreadable, truncated or damaged file, a file not in
        the model layout, or the name of a data set shipped beside the models (``digits_test``,
        ``digits_train``).
    ImportError
        A ``.safetensors`` file without the ``safetensors`` package.
    """
    if not isinstance(path_or_name, (str, bytes, os.PathLike)):
        raise TypeError(f"model: expected a model file's path or a shipped model's name (str or path-like), "
                        f"got {type(path_or_name).__name__}")
    path = os.fsdecode(path_or_name)
    ext = os.path.splitext(path)[1].lower()
    if not os.path.isfile(path):
        bare = not (ext or os.sep in path or "/" in path)
        if bare and (_models_dir() / f"{path}.npz").is_file():
            shipped = _shipped_models()
            if path not in shipped:
                raise ValueError(f"model: {path!r} is a data set shipped beside the models, not a model; "
                                 f"shipped models: {', '.join(shipped) if shipped else 'none'} (in {_models_dir()})")
        elif os.path.isdir(path):
            # FileNotFoundError like any path that holds no model file
            raise FileNotFoundError(f"model: {path!r} is a directory, not a model file; give a "
                                    f"{' or '.join(SUFFIXES)} file inside it (or the name of a shipped model)")
        elif not bare:
            raise FileNotFoundError(f"model: file {path!r} does not exist")
        else:
            shipped = _shipped_models()
            raise FileNotFoundError(f"model: {path!r} is neither a file nor a shipped model; shipped models: "
                                    f"{', '.join(shipped) if shipped else 'none'} (in {_models_dir()})")
        path, ext = str(_models_dir() / f"{path}.npz"), ".npz"
    if ext in (".npz", ""):             # np.load recognises an .npz archive whatever its name
        state = read_npz(path, "model")     # truncated, bad CRC, pickled: a ValueError naming the file
    elif ext == ".safetensors":
        state = read_state_dict(path)
    else:
        raise ValueError(f"model: {path!r} is not a model file; expected a name ending in "
                         f"{' or '.join(SUFFIXES)}")
    kind = next((k for prefix, k in FILE_KINDS.items() if any(str(key).startswith(prefix) for key in state)), Model)
    # (another kind's parser refuses a transformer's keys beside its own)
    return kind.from_state_dict(state, source=os.path.abspath(path), name=Path(path).stem)
