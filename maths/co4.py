"""The maths of Co4, a rival theory of cortical attention built from the same two-point neurons
(Adeel, "Beyond Attention: Toward Machines with Intrinsic Higher Mental States", seed 003), in
numpy, as the reference a Co4 circuit will be measured against.

Two-point neurons combine a receptive-field drive ``R`` (basal) with a context ``C`` (apical)
through a modulatory (MOD) transfer function; the seed's own is the Cooperation Equation (its
eq. 1), the classical ones its eqs. 2-5 (:data:`MOD_FUNCTIONS`). A Co4 block has ``L`` learned
latent queries. Per head, with ``N(x) = x / mean|x|`` the project's divisive normalisation
(:func:`ctmhsa.maths.transformer.normalise`) and φ the attention's feature map::

    Q = N(latents) WQᵀ  (L, d)      K = N(X) WKᵀ  (n, d)      V = N(X) WVᵀ  (n, d)
    for every latent l and token j (the triadic loops, elementwise over d):
        Qm[l, j] = MOD(Q[l], (K[j] + V[j]) / 2)      Q the RF, K and V its context
        Km[l, j] = MOD(K[j], (Q[l] + V[j]) / 2)      K the RF, Q and V its context
        Vm[l, j] = MOD(V[j], (Q[l] + K[j]) / 2)      V the RF, Q and K its context
    averaged over the other index:  Qm[l] = mean_j Qm[l, j],  Km[j], Vm[j] = mean_l ...
    κ[l, j] = φ(Qm[l])·φ(Km[j]) / Σ_j' φ(Qm[l])·φ(Km[j'])      ṽ[l] = Σ_j κ[l, j] Vm[j]
    out = latents + Σ_h WO_h ṽ_h          logits = R N(mean_l out) + c

The choices where the seed leaves one open (how two contexts combine, what is averaged, the
feature map, the normalisation, the read-out) are argued in docs/co4.md. Nothing here sets a
value of any circuit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .model import _EMBED, Model, _check_shapes, _floats, register_file_kind
from .reference import _as_real_array, resolve_phi
from .transformer import normalise

__all__ = ["cooperation", "MOD_FUNCTIONS", "Co4Model", "co4_forward", "co4_attention", "CO4_STAGES"]


def cooperation(R, C) -> np.ndarray:
    """The Cooperation Equation (seed 003, eq. 1), elementwise:
    ``ReLU6(R² + 2R + C (1 + |R|))``, with ``ReLU6(x) = min(6, max(0, x))``.

    Parameters
    ----------
    R, C : array_like
        Receptive-field (basal) and context (apical) drives, broadcast together. Dimensionless.

    Returns
    -------
    ndarray
        In ``[0, 6]``.
    """
    R = _as_real_array("R", R)
    C = _as_real_array("C", C)
    return np.clip(R * R + 2.0 * R + C * (1.0 + np.abs(R)), 0.0, 6.0)


MOD_FUNCTIONS = {
    "cooperation": cooperation,
    "tm1": lambda R, C: 0.5 * R * (1.0 + np.exp(R * C)),       # eq. 2
    "tm2": lambda R, C: R + R * C,                              # eq. 3
    "tm3": lambda R, C: R * (1.0 + np.tanh(R * C)),            # eq. 4
    "tm4": lambda R, C: R * 2.0 ** (R * C),                     # eq. 5
    "none": lambda R, C: np.asarray(R, float) + 0.0 * C,       # no modulation: the ablation
}
"""Name -> ``f(R, C)``: the seed's Cooperation Equation, the classical MOD functions of its eqs.
2-5 (unrectified, as the seed writes them; the cells' versions are rectified:
:data:`ctmhsa.neurons.laws.LAWS`), and ``"none"`` (``R`` unmodulated: Co4 without its triadic
loops, the latents' plain attention over the tokens)."""

FILE_KIND = "co4"
"""The ``kind`` a Co4 model file carries (a 0-d string array; the reader decides by its ``co4.*`` keys)."""

CO4_STAGES = ("x_norm", "latents_norm", "q", "k", "v", "q_m", "k_m", "v_m", "kappa", "Z", "v_tilde", "x_tilde",
              "out", "pooled", "logits")
"""The stages :func:`co4_forward` returns, in circuit order."""


@dataclass(frozen=True)
class Co4Model:
    """One Co4 block with a read-out (plain arrays, dimensionless).

    Attributes
    ----------
    latents : ndarray (L, de)
        The learned latent queries.
    WQ, WK, WV : ndarray (H, d, de)
        Projections of the latents (questions) and of the tokens (clues, hypotheses). The triadic
        loops are elementwise, so questions, clues and hypotheses share one width ``d``.
    WO : ndarray (H, de, d)
        Output projection of every head.
    readout_W : ndarray (classes, de), optional
        Read-out of the latents' mean; ``readout_b`` (classes,) its bias.
    embed_W : ndarray (de, p), optional
        Input embedding of ``p``-dimensional inputs (:meth:`embed`), as
        :class:`ctmhsa.maths.model.Model`'s.
    embed_pos : ndarray (n, de), optional
        Positional embedding of ``n`` tokens; needs ``embed_W``.
    name : str
        A label (:func:`ctmhsa.load_model` sets the file's stem).
    source : str
        The file read, if any.
    """

    latents: np.ndarray
    WQ: np.ndarray
    WK: np.ndarray
    WV: np.ndarray
    WO: np.ndarray
    readout_W: np.ndarray | None = None
    readout_b: np.ndarray | None = None
    embed_W: np.ndarray | None = None
    embed_pos: np.ndarray | None = None
    name: str = ""
    source: str = ""

    def __post_init__(self):
        arr = {k: _as_real_array(k, getattr(self, k)) for k in ("latents", "WQ", "WK", "WV", "WO")}
        if arr["latents"].ndim != 2 or arr["latents"].shape[0] < 1:
            raise ValueError(f"latents: expected (L, de) with L >= 1, got shape {arr['latents'].shape}")
        L, de = arr["latents"].shape
        for k in ("WQ", "WK", "WV"):
            if arr[k].ndim != 3 or arr[k].shape[2] != de:
                raise ValueError(f"{k}: expected (H, d, de={de}), got shape {arr[k].shape}")
        if not (arr["WQ"].shape == arr["WK"].shape == arr["WV"].shape):
            raise ValueError(f"WQ, WK, WV: the triadic loops are elementwise, so questions, clues and hypotheses "
                             f"need one shape (H, d, de); got {arr['WQ'].shape}, {arr['WK'].shape}, "
                             f"{arr['WV'].shape}")
        H, d, _ = arr["WQ"].shape
        if arr["WO"].shape != (H, de, d):
            raise ValueError(f"WO: expected (H={H}, de={de}, d={d}), got shape {arr['WO'].shape}")
        for k, v in arr.items():
            object.__setattr__(self, k, v)
        if (self.readout_W is None) != (self.readout_b is None):
            raise ValueError("readout_W, readout_b: give both or neither")
        if self.readout_W is not None:
            W, b = _as_real_array("readout_W", self.readout_W), _as_real_array("readout_b", self.readout_b)
            if W.ndim != 2 or W.shape[1] != de or b.shape != (W.shape[0],):
                raise ValueError(f"readout_W, readout_b: expected (classes, de={de}) and (classes,), got "
                                 f"{W.shape} and {b.shape}")
            object.__setattr__(self, "readout_W", W)
            object.__setattr__(self, "readout_b", b)

        if self.embed_pos is not None and self.embed_W is None:
            raise ValueError("embed_pos: given without embed_W")
        embed = _floats({k: getattr(self, k) for k in ("embed_W", "embed_pos")}, str)
        _check_shapes({"W": embed["embed_W"], "pos": embed["embed_pos"]}, _EMBED, lambda k: f"embed_{k}",
                      {"de": (de, "latents")})
        for k, a in embed.items():
            object.__setattr__(self, k, a)
        for k in ("name", "source"):
            if not isinstance(getattr(self, k), str):
                raise TypeError(f"{k}: expected a str, got {type(getattr(self, k)).__name__}")

    def embed(self, inputs) -> np.ndarray:
        """Token embeddings ``inputs @ embed_W.T + embed_pos``, exactly
        :meth:`ctmhsa.maths.model.Model.embed` (same shapes, same errors).

        Parameters
        ----------
        inputs : array, shape (n, p) or (B, n, p)
            Raw inputs (dimensionless; the digits' patches, pixels / 16).

        Returns
        -------
        ndarray, shape (n, de) or (B, n, de)
            The tokens :func:`co4_forward` takes.

        Raises
        ------
        ValueError
            No input embedding, or ``inputs`` that do not match ``embed_W`` (``p``) or
            ``embed_pos`` (``n``).
        """

        return Model.embed(self, inputs)

    #: The keys of a Co4 model file besides ``readout.*`` and ``embed.*`` (:meth:`state_dict`).
    FILE_KEYS = ("co4.latents", "co4.WQ", "co4.WK", "co4.WV", "co4.WO")

    def state_dict(self) -> dict:
        """The model as a file's arrays: :data:`FILE_KEYS`, ``readout.W, readout.b, embed.W,
        embed.pos`` where present, and ``kind`` = ``"co4"`` (a 0-d string array; a reader decides
        the kind by the ``co4.*`` keys, a file without ``kind`` is read alike)."""
        out = {k: getattr(self, k.split(".")[1]) for k in self.FILE_KEYS}
        out.update({k: a for k, a in (("readout.W", self.readout_W), ("readout.b", self.readout_b),
                                      ("embed.W", self.embed_W), ("embed.pos", self.embed_pos)) if a is not None})
        out["kind"] = np.array(FILE_KIND)
        return out

    @classmethod
    def from_state_dict(cls, state, source: str = "", *, name: str = "") -> "Co4Model":
        """Parse a Co4 model file's arrays (the inverse of :meth:`state_dict`).

        Parameters
        ----------
        state : mapping of str -> array
            Keys and arrays as :meth:`state_dict` writes them (``kind`` optional; ``readout.b``
            absent: zeros).
        source : str
            Where the arrays came from.
        name : str
            The model's label.

        Returns
        -------
        Co4Model

        Raises
        ------
        ValueError
            Unknown keys (all listed: a transformer's ``blocks.*`` among them), missing ``co4.*``
            keys, a ``kind`` other than ``"co4"``, a bias or positional embedding without its
            weights, or the shapes, NaN and inf :class:`Co4Model` refuses.
        """
        optional = ("readout.W", "readout.b", "embed.W", "embed.pos")
        unknown = sorted(str(k) for k in state if k not in (*cls.FILE_KEYS, *optional, "kind"))
        if unknown:
            raise ValueError(f"state: unknown key(s) {unknown} in a Co4 model file (decided by its co4.* keys), "
                             f"which holds {', '.join(cls.FILE_KEYS)}, readout.{{W,b}}, embed.{{W,pos}} and kind")
        if "kind" in state:
            kind = np.asarray(state["kind"])
            if kind.shape != () or kind.dtype.kind != "U" or str(kind) != FILE_KIND:
                raise ValueError(f"kind: a Co4 model file's kind is the string 'co4', got {kind!r}")
        missing = [k for k in cls.FILE_KEYS if k not in state]
        missing += [f"{g}.W" for g, extra in (("readout", "b"), ("embed", "pos"))
                    if f"{g}.{extra}" in state and f"{g}.W" not in state]
        if missing:
            raise ValueError(f"state: missing required key(s) {missing} of a Co4 model file")
        arrays = {k.split(".")[1]: state[k] for k in cls.FILE_KEYS}
        arrays.update({k.replace(".", "_"): state[k] for k in optional if k in state})
        if "readout_W" in arrays and "readout_b" not in arrays:
            arrays["readout_b"] = np.zeros(np.shape(arrays["readout_W"])[:1])
        return cls(**arrays, name=name, source=source)

    @property
    def shape(self) -> dict:
        """``L, de, H, d`` (and ``classes``, 0 without a read-out)."""
        H, d, de = self.WQ.shape
        return dict(L=self.latents.shape[0], de=de, H=H, d=d,
                    classes=0 if self.readout_W is None else self.readout_W.shape[0])

    # what a model run asks of any model (ctmhsa.sims.model): one block over a token set
    causal = False
    forget = 1.0
    memory_normalised = True
    n_blocks = 1

    @property
    def de(self) -> int:
        """The embedding dimension (the tokens' and the latents')."""
        return int(self.latents.shape[1])

    @property
    def sizes(self) -> list:
        """The block's sizes as a transformer's (``H``, ``dk = dv = d``, no MLP), for its circuit."""
        H, d, _ = self.WQ.shape
        return [dict(H=int(H), dk=int(d), dv=int(d), dh=0)]


def _triad(Q, K, V, mod) -> tuple:
    """The triadic loops of one head: every (latent l, token j) pair modulates its question, clue
    and hypothesis by the other two (their mean as the context), then the questions are averaged
    over the tokens and the clues and hypotheses over the latents (seed: "after this interaction,
    they are averaged ... a simple attention map of O(L×N)")."""
    q, k, v = Q[:, None, :], K[None, :, :], V[None, :, :]             # (L, 1, d), (1, n, d)
    q_m = mod(q, (k + v) / 2.0).mean(axis=1)                            # (L, d)
    k_m = mod(k, (q + v) / 2.0).mean(axis=0)                            # (n, d)
    v_m = mod(v, (q + k) / 2.0).mean(axis=0)                            # (n, d)
    return q_m, k_m, v_m


def co4_forward(X, model: Co4Model, phi: str = "elu1", mod: str = "cooperation") -> dict:
    """Run one Co4 block on the tokens ``X`` exactly (numpy).

    Parameters
    ----------
    X : array (n, de)
        Input tokens. Dimensionless.
    model : Co4Model
    phi : str
        Feature map of the attention (``"elu1"``, ``"relu"``, ``"softplus"``, ``"exp"``).
    mod : str
        The MOD function of the triadic loops (:data:`MOD_FUNCTIONS`): ``"cooperation"`` (the
        seed's), ``"tm1"``-``"tm4"``, or ``"none"`` (no loops).

    Returns
    -------
    dict
        :data:`CO4_STAGES`: the normalised tokens and latents, per head ``q (H, L, d)``, ``k, v
        (H, n, d)`` and their modulated ``q_m, k_m, v_m``, ``kappa (H, L, n)``, ``Z (H, L)``, ``v_tilde (H, L,
        d)``, ``x_tilde (L, de)`` (the heads' sum through WO), ``out (L, de)`` (the residual to the latents),
        ``pooled (de,)`` (its mean over the latents) and ``logits`` (``R N(pooled) + c``)
        ((classes,) or ``None``).

    Raises
    ------
    ValueError
        Bad shapes (named), an unknown ``mod`` or ``phi``, a token or latent with ``mean|x| = 0``,
        or a latent whose attention normaliser is 0 (relu with no positive feature).
    TypeError
        ``model`` is not a :class:`Co4Model`.
    """
    if not isinstance(model, Co4Model):
        raise TypeError(f"model: expected a ctmhsa.maths.co4.Co4Model, got {type(model).__name__}")
    x = _as_real_array("X", X)
    de = model.shape["de"]
    if x.ndim != 2 or x.shape[1] != de or x.shape[0] < 1:
        hint = "" if model.embed_W is None else "; raw inputs (n, p) go through model.embed(inputs) first"
        raise ValueError(f"X: expected tokens (n, de={de}) with n >= 1, got shape {x.shape}{hint}")
    xn = normalise(x, "X")
    ln = normalise(model.latents, "latents")
    st = co4_attention(ln, model.WQ, model.WK, model.WV, model.WO, Y=xn, phi=phi, mod=mod)
    out = model.latents + st["x_tilde"]           # the residual to the latents
    pooled = out.mean(axis=0)
    logits = None if model.readout_W is None else model.readout_W @ normalise(pooled, "pooled") + model.readout_b
    return dict(x_norm=xn, latents_norm=ln, **{k: st[k] for k in ("q", "k", "v", "q_m", "k_m", "v_m", "kappa", "Z",
                                                                   "v_tilde", "x_tilde")},
                out=out, pooled=pooled, logits=logits)


def co4_attention(X, WQ, WK, WV, WO, Y=None, phi: str = "elu1", normalize: bool = True,
                  mod: str = "cooperation") -> dict:
    """The attention of one Co4 block on given queries' and tokens' inputs, exactly (numpy): the
    triadic loops, then the linear attention of the modulated questions over the modulated clues
    and hypotheses, summed over the heads through ``WO``; no divisive normalisation of the inputs,
    no residual (what a Co4 attention area computes, :func:`co4_forward` wraps it).

    Parameters
    ----------
    X : array (L, de)
        The queries' source: the latents (L rows), as given. Dimensionless.
    WQ, WK, WV : array (H, d, de)
        One width ``d`` for all three (the loops are elementwise).
    WO : array (H, de, d)
    Y : array (n, de), optional
        The tokens (clues and hypotheses); ``None``: ``X`` itself.
    phi : str
        Feature map of the attention.
    normalize : bool
        ``κ = scores / Σ_j scores`` (the seed's softmax-like normalisation) or the raw scores
        (unnormalised: ``ṽ_l = Σ_j φ(q_m,l)·φ(k_m,j) v_m,j``).
    mod : str
        The MOD function of the loops (:data:`MOD_FUNCTIONS`).

    Returns
    -------
    dict
        ``q (H, L, d)``, ``k, v (H, n, d)``, ``q_m (H, L, d)``, ``k_m, v_m (H, n, d)``, ``kappa
        (H, L, n)``, ``Z (H, L)`` (the normaliser ``Σ_j φ(q_m)·φ(k_m)``), ``v_tilde (H, L, d)``,
        ``x_tilde (L, de)``.

    Raises
    ------
    ValueError
        Bad shapes (named), an unknown ``mod`` or ``phi``, or (normalised) a latent whose
        attention normaliser is 0.
    """
    if mod not in MOD_FUNCTIONS:
        raise ValueError(f"mod: unknown MOD function {mod!r}; expected one of {sorted(MOD_FUNCTIONS)}")
    f = resolve_phi(phi)[1]
    arr = {k: _as_real_array(k, a) for k, a in (("X", X), ("WQ", WQ), ("WK", WK), ("WV", WV), ("WO", WO))}
    arr["Y"] = arr["X"] if Y is None else _as_real_array("Y", Y)
    if arr["WQ"].ndim != 3:
        raise ValueError(f"WQ: expected (H, d, de), got shape {arr['WQ'].shape}")
    H, d, de = arr["WQ"].shape
    for k in ("WK", "WV"):
        if arr[k].shape != (H, d, de):
            raise ValueError(f"{k}: the triadic loops are elementwise, so questions, clues and hypotheses need one "
                             f"shape (H, d, de) = {(H, d, de)}; got {arr[k].shape}")
    if arr["WO"].shape != (H, de, d):
        raise ValueError(f"WO: expected (H={H}, de={de}, d={d}), got shape {arr['WO'].shape}")
    for k in ("X", "Y"):
        if arr[k].ndim != 2 or arr[k].shape[1] != de or arr[k].shape[0] < 1:
            raise ValueError(f"{k}: expected (rows, de={de}) with rows >= 1, got shape {arr[k].shape}")
    q = np.einsum("hde,le->hld", arr["WQ"], arr["X"])
    k = np.einsum("hde,ne->hnd", arr["WK"], arr["Y"])
    v = np.einsum("hde,ne->hnd", arr["WV"], arr["Y"])
    fn = MOD_FUNCTIONS[mod]
    q_m, k_m, v_m = (np.stack(s) for s in zip(*(_triad(q[h], k[h], v[h], fn) for h in range(H))))
    scores = np.einsum("hld,hnd->hln", f(q_m), f(k_m))
    Z = scores.sum(axis=2)
    if normalize:
        if np.any(Z <= 0):
            h, l = (int(i) for i in np.argwhere(Z <= 0)[0])
            raise ValueError(f"phi: the attention normaliser of head {h}, latent {l} is {float(Z[h, l]):.3g}; "
                             f"every feature phi(q_m)·phi(k_m) vanished (use a positive feature map: elu1, "
                             f"softplus, exp)")
        kappa = scores / Z[..., None]
    else:
        kappa = scores
    v_tilde = np.einsum("hln,hnd->hld", kappa, v_m)
    x_tilde = np.einsum("hed,hld->le", arr["WO"], v_tilde)
    return dict(q=q, k=k, v=v, q_m=q_m, k_m=k_m, v_m=v_m, kappa=kappa, Z=Z, v_tilde=v_tilde, x_tilde=x_tilde)


register_file_kind("co4.", Co4Model)   # load_model reads a file with co4.* keys as a Co4Model
