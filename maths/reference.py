"""Exact multihead linear self-attention: the ground truth of the simulator.

Everything the circuit computes is measured against this module. It imports numpy
only and nothing from the project.

Three implementations of the same maths are kept, so that each checks the others:

``method="loops"``
    A literal transcription of Algorithm 1 of Granier & Senn (2025); each line carries the
    paper's comment on which cell or compartment computes it.
``method="vectorized"`` (default)
    The same sums as ``einsum`` contractions; returns every stage.
``method="linear"``
    The linear-time reorganisation ``S = Σ_j phi(k_j) v_jᵀ``, ``z = Σ_j phi(k_j)``,
    ``ṽ_i = Sᵀ phi(q_i) / zᵀ phi(q_i)`` (no n × m object is formed; causal masks use prefix sums).

Shapes (one sequence; a leading batch axis ``B`` is accepted on ``X`` and ``Y``):

=========  ================  ===============================================
``X``      ``(n, de)``       tokens (thalamic nucleus 1)
``Y``      ``(m, de)``       key/value tokens for cross-attention (default X)
``WQ/WK``  ``(H, dk, de)``   query / key projections per head
``WV``     ``(H, dv, de)``   value projection per head
``WO``     ``(H, de, dv)``   output projection per head
=========  ================  ===============================================
"""

from __future__ import annotations

import numbers
import sys
from typing import Callable, Mapping

import numpy as np

__all__ = [
    "FEATURE_MAPS",
    "resolve_phi",
    "check_attention_inputs",
    "plain_array",
    "integer",
    "linear_mhsa",
    "memory_attention",
    "softmax_mhsa",
]

STAGES = ("q", "k", "v", "s", "kappa", "v_tilde", "x_tilde")
"""Stages every implementation returns, in circuit order."""


# --------------------------------------------------------------------------------------------
# Feature maps phi (dendritic nonlinearities) and their derivatives
# --------------------------------------------------------------------------------------------

def _elu1(z):
    # elu(z) + 1: z + 1 above 0, exp(z) below; exp of a clipped argument avoids overflow warnings
    return np.where(z > 0, z + 1.0, np.exp(np.minimum(z, 0.0)))


def _delu1(z):
    return np.where(z > 0, 1.0, np.exp(np.minimum(z, 0.0)))


def _relu(z):
    return np.maximum(z, 0.0)


def _drelu(z):
    return (z > 0).astype(float)


def _softplus(z):
    return np.logaddexp(0.0, z)


def _dsoftplus(z):
    # logistic sigmoid, written to stay finite for large |z|
    return 0.5 * (1.0 + np.tanh(0.5 * z))


FEATURE_MAPS: Mapping[str, tuple[Callable, Callable]] = {
    "elu1": (_elu1, _delu1),
    "relu": (_relu, _drelu),
    "softplus": (_softplus, _dsoftplus),
    "exp": (np.exp, np.exp),
}
"""Named feature maps: ``name -> (phi, dphi)``. All are non-negative."""


def resolve_phi(phi) -> tuple[str, Callable, Callable]:
    """Return ``(name, phi, dphi)`` for a feature-map name or a callable pair.

    Parameters
    ----------
    phi : str or (callable, callable)
        One of ``FEATURE_MAPS`` (``"elu1"``, ``"relu"``, ``"softplus"``, ``"exp"``) or a pair
        ``(phi, dphi)`` of elementwise numpy functions; ``phi`` must be non-negative.

    Raises
    ------
    ValueError
        Unknown name.
    TypeError
        Neither a string nor a pair of callables.
    """
    if isinstance(phi, str):
        if phi not in FEATURE_MAPS:
            raise ValueError(
                f"phi: unknown feature map {phi!r}; expected one of {sorted(FEATURE_MAPS)} "
                "or a pair of callables (phi, dphi)"
            )
        f, df = FEATURE_MAPS[phi]
        return phi, f, df
    if (
        isinstance(phi, (tuple, list))
        and len(phi) == 2
        and callable(phi[0])
        and callable(phi[1])
    ):
        name = getattr(phi[0], "__name__", "custom")
        return f"custom:{name}", phi[0], phi[1]
    raise TypeError(
        "phi: expected a feature-map name (str) or a pair of callables (phi, dphi); "
        f"got {type(phi).__name__}"
    )


# --------------------------------------------------------------------------------------------
# Validation (shared with the simulator, which must refuse bad input before building anything)
# --------------------------------------------------------------------------------------------

def integer(name: str, value, least: int = 0) -> int:
    """``value`` as an int: a ``TypeError`` naming ``name`` if it is not an integer (``bool``
    included), a ``ValueError`` if it is below ``least``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}: expected an integer, got {value!r}")
    if value < least:
        raise ValueError(f"{name}: expected an integer >= {least}, got {value!r}")
    return int(value)


def plain_array(name: str, value):
    """``value`` without a unit or a mask, or a ``ValueError`` naming ``name``.

    Tokens and weights are numbers in the units of the circuit's codes: a Brian2 quantity must be
    dimensionless (``X * mV`` would otherwise lose its unit and be read 1000 times too small);
    a pint or astropy quantity is refused (a scaled dimensionless one, mV/V, hands over
    unscaled numbers). A numpy masked array with masked entries is refused (the
    circuit has no missing values, and numpy would hand over the entries under the mask); one
    with nothing masked is its data.
    """
    if value is None:
        return None
    if isinstance(value, np.ma.MaskedArray):
        k = int(np.ma.count_masked(value))
        if k:
            raise ValueError(
                f"{name}: a masked array with {k} masked entr{'y' if k == 1 else 'ies'}; the circuit has no "
                f"missing values and would ignore the mask. Pass {name}.filled(0.0) (or drop the masked "
                "tokens) for a plain array; to hide later tokens from each query use causal=True")
        value = np.ma.getdata(value)
    if hasattr(value, "dim"):          # a Brian2 quantity: Brian2 is loaded already, named through it
        if not getattr(value.dim, "is_dimensionless", False):
            unit = sys.modules["brian2"].get_unit(value.dim) if "brian2" in sys.modules else value.dim
            raise ValueError(f"{name}: expected dimensionless numbers (tokens and weights are in units of "
                             f"the circuit's codes), got a quantity in units of {unit!s}")
        return np.asarray(value)
    unit = getattr(value, "units", getattr(value, "unit", None))    # pint, astropy: scaled units too
    if unit is not None:
        raise ValueError(f"{name}: expected plain numbers (tokens and weights are in units of the circuit's "
                         f"codes), got a quantity in units of {unit!s}; pass its dimensionless magnitude")
    return value


def _as_real_array(name: str, a) -> np.ndarray:
    if isinstance(a, (str, bytes)) or a is None:
        raise TypeError(f"{name}: expected a real numeric array, got {type(a).__name__}")
    a = plain_array(name, a)
    try:
        arr = np.asarray(a)
    except Exception as exc:  # pragma: no cover - numpy raises rarely here
        raise TypeError(f"{name}: cannot be converted to an array ({exc})") from exc
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.floating)
        or np.issubdtype(arr.dtype, np.integer)
        or np.issubdtype(arr.dtype, np.bool_)
    ):
        raise TypeError(f"{name}: expected a real numeric array, got dtype {arr.dtype}")
    arr = arr.astype(float)
    if not np.all(np.isfinite(arr)):
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise ValueError(f"{name}: contains {bad} NaN or infinite value(s); all entries must be finite")
    return arr


def check_attention_inputs(X, WQ, WK, WV, WO, Y=None, causal=False, normalize=True):
    """Validate and convert the inputs of multihead attention.

    Returns
    -------
    dict
        ``X``, ``Y`` (float arrays, with a batch axis added when absent), weights as float
        arrays, ``batched`` (bool) and the sizes ``B, n, m, de, H, dk, dv``.

    Raises
    ------
    ValueError
        Wrong number of dimensions, inconsistent shapes or head counts, empty axes, NaN/inf.
    TypeError
        Non-numeric arrays or a non-boolean flag.
    """
    X = _as_real_array("X", X)
    if X.ndim not in (2, 3):
        raise ValueError(f"X: expected shape (n, de) or (B, n, de); got shape {X.shape}")
    batched = X.ndim == 3
    if not batched:
        X = X[None]
    B, n, de = X.shape
    if n == 0 or de == 0 or B == 0:
        raise ValueError(f"X: every axis must be non-empty; got shape {X.shape[1 - batched:]}")

    if Y is None:
        Yb = X
    else:
        Yb = _as_real_array("Y", Y)
        if Yb.ndim != X.ndim - (0 if batched else 1):
            raise ValueError(
                f"Y: expected shape {'(B, m, de)' if batched else '(m, de)'} like X; got {Yb.shape}"
            )
        if not batched:
            Yb = Yb[None]
        if Yb.shape[0] != B:
            raise ValueError(f"Y: batch size {Yb.shape[0]} differs from X's batch size {B}")
        if Yb.shape[2] != de:
            raise ValueError(f"Y: embedding dimension {Yb.shape[2]} differs from X's de = {de}")
        if Yb.shape[1] == 0:
            raise ValueError("Y: needs at least one token (m >= 1)")
    m = Yb.shape[1]

    W = {}
    for name, w in (("WQ", WQ), ("WK", WK), ("WV", WV), ("WO", WO)):
        W[name] = _as_real_array(name, w)
        if W[name].ndim != 3:
            expected = "(H, de, dv)" if name == "WO" else f"(H, {'dv' if name == 'WV' else 'dk'}, de)"
            hint = f"; for a single head pass {name}[None]" if W[name].ndim == 2 else ""
            raise ValueError(f"{name}: expected shape {expected}; got {W[name].shape}{hint}")
    H, dk, de_q = W["WQ"].shape
    if H == 0 or dk == 0:
        raise ValueError(f"WQ: H and dk must be >= 1; got shape {W['WQ'].shape}")
    if de_q != de:
        raise ValueError(f"WQ: last axis must equal de = {de} (from X); got shape {W['WQ'].shape}")
    if W["WK"].shape != (H, dk, de):
        raise ValueError(f"WK: expected shape (H, dk, de) = {(H, dk, de)} like WQ; got {W['WK'].shape}")
    if W["WV"].shape[0] != H:
        raise ValueError(f"WV: has {W['WV'].shape[0]} heads, WQ has {H}; head counts must match")
    if W["WV"].shape[2] != de or W["WV"].shape[1] == 0:
        raise ValueError(f"WV: expected shape (H, dv, de) with de = {de}; got {W['WV'].shape}")
    dv = W["WV"].shape[1]
    if W["WO"].shape[0] != H:
        raise ValueError(f"WO: has {W['WO'].shape[0]} heads, WQ has {H}; head counts must match")
    if W["WO"].shape != (H, de, dv):
        raise ValueError(f"WO: expected shape (H, de, dv) = {(H, de, dv)}; got {W['WO'].shape}")
    for flag, val in (("causal", causal), ("normalize", normalize)):
        if not isinstance(val, (bool, np.bool_)):
            raise TypeError(f"{flag}: expected True or False, got {val!r}")
    return dict(X=X, Y=Yb, batched=batched, B=B, n=n, m=m, de=de, H=H, dk=dk, dv=dv, **W)


def _features(name: str, f: Callable, z: np.ndarray, what: str) -> np.ndarray:
    with np.errstate(over="ignore"):  # overflow is reported below as a ValueError
        out = np.asarray(f(z), dtype=float)
    if out.shape != z.shape:
        raise ValueError(f"phi: returned shape {out.shape} for {what} of shape {z.shape}; must be elementwise")
    if not np.all(np.isfinite(out)):
        raise ValueError(
            f"phi: {name}({what}) is not finite (overflow); scale down the inputs or weights "
            "or choose a bounded feature map"
        )
    if np.any(out < 0):
        raise ValueError(f"phi: {name}({what}) has negative entries; a feature map must be non-negative")
    return out


def _mask(n: int, m: int, causal: bool) -> np.ndarray:
    """``M[i, j] = 1`` where query i may attend to key j (j <= i when causal)."""
    if not causal:
        return np.ones((n, m))
    return (np.arange(m)[None, :] <= np.arange(n)[:, None]).astype(float)


def _check_Z(Z: np.ndarray, name: str, f: Callable, a: dict, offset=(0, 0, 0)) -> None:
    """Z (B, H, n) must be strictly positive wherever a division by it happens.

    A map positive at ordinary arguments (elu1, softplus, exp) gives Z = 0 only when its
    features underflow: the message then names the tokens and weights and their magnitude,
    not another map."""
    bad = np.argwhere(Z <= 0)
    if not bad.size:
        return
    b, h, i = (int(x) + o for x, o in zip(bad[0], offset))
    first = f"for {len(bad)} (batch, head, query) triple(s), first at batch {b}, head {h}, query {i}"
    try:   # the map at ordinary arguments: positive there, Z vanished only by underflow
        with np.errstate(all="ignore"):
            positive = bool(np.all(np.asarray(f(np.linspace(-20.0, 20.0, 41)), dtype=float) > 0))
    except Exception:  # noqa: BLE001 - a custom map that cannot say: the general message
        positive = False
    if not positive:
        raise ValueError(
            f"phi: the normaliser Z is 0 {first}: every feature phi(k_j) * phi(q_i) vanished "
            f"(feature map {name!r}). Use a strictly positive map such as 'elu1', or normalize=False"
        )
    q = a["WQ"][h] @ a["X"][b, i]
    k = a["Y"][b] @ a["WK"][h].T
    cross = a["Y"] is not a["X"] and not np.array_equal(a["Y"], a["X"])
    tokens = f"X: largest |x| {np.abs(a['X']).max():.3g}" + (
        f", Y: largest |y| {np.abs(a['Y']).max():.3g}" if cross else "")
    raise ValueError(
        f"phi: the normaliser Z underflowed to 0 {first}: the feature map {name!r} is positive, but the "
        f"projections reach |q| = {np.abs(q).max():.3g} (q = WQ x) and |k| = {np.abs(k).max():.3g} (k = WK "
        f"{'y' if cross else 'x'}), where every product phi(k_j) * phi(q_i) underflows to 0 in floating point. "
        f"The tokens ({tokens}) or the weights (WQ: largest |w| {np.abs(a['WQ']).max():.3g}, WK: "
        f"{np.abs(a['WK']).max():.3g}) are far too large: scale them down (the circuit's codes are of order 1)"
    )


# --------------------------------------------------------------------------------------------
# Linear multihead self-attention
# --------------------------------------------------------------------------------------------

def linear_mhsa(
    X,
    WQ,
    WK,
    WV,
    WO,
    phi="elu1",
    Y=None,
    causal: bool = False,
    normalize: bool = True,
    method: str = "vectorized",
    WS=None,
) -> dict[str, np.ndarray]:
    """Multihead linear self-attention with every intermediate stage.

    Parameters
    ----------
    X : array, shape (n, de) or (B, n, de)
        Query tokens (thalamic nucleus 1). Dimensionless.
    WQ, WK : array, shape (H, dk, de)
        Query and key projections (core and matrix thalamo-cortical weights).
    WV : array, shape (H, dv, de)
        Value projection (matrix projection to basal L5 IT dendrites).
    WO : array, shape (H, de, dv)
        Output projection (L5 PT to higher-order thalamus).
    phi : str or (callable, callable)
        Feature map, see :func:`resolve_phi`.
    Y : array, shape (m, de) or (B, m, de), optional
        Key/value tokens for cross-attention; default ``X``.
    causal : bool
        Restrict query i to keys j <= i.
    normalize : bool
        Divide by ``Z_i``; ``False`` gives the unnormalised variant (no interneurons).
    method : {"vectorized", "loops", "linear"}
        Implementation; all give the same output to rounding.
    WS : array, shape (H, dv, de), optional
        Skip connection (paper, discussion: core thalamic axons contacting L5 PT directly):
        ``v_tilde_i += WS x_i`` per head, and x̃ accordingly. ``None``: no skip path.

    Returns
    -------
    dict of str -> ndarray
        ``q (H, n, dk)``, ``k (H, m, dk)``, ``v (H, m, dv)``, ``Z (H, n)``, ``x_tilde (n, de)``,
        ``v_tilde (H, n, dv)``; the quadratic methods add ``u`` and ``s (H, n, m, dk)``,
        ``kappa (H, n, m)`` and ``y (H, n, m, dv)`` (attention-modulated values, L5 IT soma);
        the linear method adds ``S (H, dk, dv)`` and ``z (H, dk)`` (per query ``(H, n, dk, dv)``,
        ``(H, n, dk)`` when causal). With a batch axis every array gains a leading ``B``.

    Raises
    ------
    ValueError
        Bad shapes, NaN/inf, unknown ``phi`` or ``method``, ``Z = 0`` when normalising.
    """
    if method not in ("vectorized", "loops", "linear"):
        raise ValueError(f"method: expected 'vectorized', 'loops' or 'linear'; got {method!r}")
    name, f, _ = resolve_phi(phi)
    a = check_attention_inputs(X, WQ, WK, WV, WO, Y=Y, causal=causal, normalize=normalize)
    impl = {"vectorized": _vectorized, "loops": _loops, "linear": _linear}[method]
    out = impl(a, name, f, causal, normalize)
    if WS is not None:   # the skip path adds to the context-aware value, before W_O
        WS = _as_real_array("WS", WS)
        if WS.shape != (a["WV"].shape[0], a["WV"].shape[1], a["X"].shape[-1]):
            raise ValueError(f"WS: expected shape (H, dv, de) = {(a['WV'].shape[0], a['WV'].shape[1], a['X'].shape[-1])}, "
                             f"got {WS.shape}")
        skip = np.einsum("hce,bne->bhnc", WS, a["X"])
        out["skip"] = skip
        out["v_tilde"] = out["v_tilde"] + skip
        out["x_tilde"] = out["x_tilde"] + np.einsum("hec,bhnc->bne", a["WO"], skip)
    if not a["batched"]:
        out = {key: val[0] for key, val in out.items()}
    return out


def _projections(a, name, f):
    q = np.einsum("hce,bne->bhnc", a["WQ"], a["X"])
    k = np.einsum("hce,bme->bhmc", a["WK"], a["Y"])
    v = np.einsum("hce,bme->bhmc", a["WV"], a["Y"])
    return q, k, v, _features(name, f, q, "q"), _features(name, f, k, "k")


def _vectorized(a, name, f, causal, normalize):
    q, k, v, fq, fk = _projections(a, name, f)
    M = _mask(a["n"], a["m"], causal)
    u = np.einsum("bhmc,bhnc,nm->bhnmc", fk, fq, M)          # L2/3 cells before division
    Z = u.sum(axis=(3, 4))                                    # interneurons of macrocolumn i
    if normalize:
        _check_Z(Z, name, f, a)
        s = u / Z[..., None, None]                            # salience, soma L2/3
    else:
        s = u
    kappa = s.sum(axis=-1)                                    # apical L5 IT (A = ones)
    y = kappa[..., None] * v[:, :, None, :, :]                # soma L5 IT
    v_tilde = y.sum(axis=3)                                   # L5 PT
    x_tilde = np.einsum("hec,bhnc->bne", a["WO"], v_tilde)    # higher-order thalamus
    return dict(q=q, k=k, v=v, u=u, Z=Z, s=s, kappa=kappa, y=y, v_tilde=v_tilde, x_tilde=x_tilde)


def _loops(a, name, f, causal, normalize):
    """Algorithm 1, line by line (1-based line numbers of the paper in the comments)."""
    B, n, m, de, H, dk, dv = (a[key] for key in ("B", "n", "m", "de", "H", "dk", "dv"))
    WQ, WK, WV, WO = a["WQ"], a["WK"], a["WV"], a["WO"]

    def phi_(z, what):
        return _features(name, f, z, what)

    out = {key: [] for key in ("q", "k", "v", "u", "Z", "s", "kappa", "y", "v_tilde", "x_tilde")}
    for b in range(B):
        xs, ys = a["X"][b], a["Y"][b]                         # 1: tokens — thalamus
        x_tilde = np.zeros((n, de))                           # 2: output — #neurons per token
        A = np.ones((dv, dk))                                 # 3: local weights L2/3 -> apical L5
        q_all = np.zeros((H, n, dk))
        k_all = np.zeros((H, m, dk))
        v_all = np.zeros((H, m, dv))
        u_all = np.zeros((H, n, m, dk))
        Z_all = np.zeros((H, n))
        s_all = np.zeros((H, n, m, dk))
        kap_all = np.zeros((H, n, m))
        y_all = np.zeros((H, n, m, dv))
        vt_all = np.zeros((H, n, dv))
        for h in range(H):                                    # 4: heads / cortical areas
            for i in range(n):                                # 5: queries / macrocolumns
                Z, v_tilde = 0.0, np.zeros(dv)                # 6
                keys = range(min(i + 1, m)) if causal else range(m)
                for j in keys:                                # 7: keys / microcolumns
                    # 8: divisive normalisation — interneurons L2/3
                    Z = Z + np.ones(dk) @ (phi_(WK[h] @ ys[j], "k") * phi_(WQ[h] @ xs[i], "q"))
                if normalize:
                    _check_Z(np.array([[[Z]]]), name, f, a, offset=(b, h, i))
                q = WQ[h] @ xs[i]                             # 10: query — basal L2/3
                for j in keys:                                # 11: keys / microcolumns
                    k = WK[h] @ ys[j]                         # 12: key — apical L2/3
                    u = phi_(k, "k") * phi_(q, "q")
                    s = u / Z if normalize else u             # 13: salience — soma L2/3
                    v = WV[h] @ ys[j]                         # 14: value — basal L5 IT
                    alpha = A @ s                             # 15: attention — apical L5 IT
                    y = alpha * v                             # 16: modulated value — soma L5 IT
                    v_tilde = v_tilde + y                     # 17: sum over j — L5 PT
                    k_all[h, j], v_all[h, j] = k, v
                    u_all[h, i, j], s_all[h, i, j] = u, s
                    kap_all[h, i, j], y_all[h, i, j] = alpha[0], y
                x_tilde[i] = x_tilde[i] + WO[h] @ v_tilde     # 19: sum over heads — higher thalamus
                q_all[h, i], Z_all[h, i], vt_all[h, i] = q, Z, v_tilde
            for j in range(m):                                # keys of tokens no query reached
                k_all[h, j], v_all[h, j] = WK[h] @ ys[j], WV[h] @ ys[j]
        for key, val in zip(
            ("q", "k", "v", "u", "Z", "s", "kappa", "y", "v_tilde", "x_tilde"),
            (q_all, k_all, v_all, u_all, Z_all, s_all, kap_all, y_all, vt_all, x_tilde),
        ):
            out[key].append(val)
    return {key: np.stack(val) for key, val in out.items()}


def _linear(a, name, f, causal, normalize):
    q, k, v, fq, fk = _projections(a, name, f)
    if causal:
        # prefix sums over keys: S_i = Σ_{j<=i} phi(k_j) v_jᵀ (query i sees keys 0..min(i, m-1))
        Sc = np.cumsum(np.einsum("bhmc,bhmd->bhmcd", fk, v), axis=2)
        zc = np.cumsum(fk, axis=2)
        idx = np.minimum(np.arange(a["n"]), a["m"] - 1)
        S, z = Sc[:, :, idx], zc[:, :, idx]                   # (B, H, n, dk, dv), (B, H, n, dk)
        Z = np.einsum("bhnc,bhnc->bhn", z, fq)
        num = np.einsum("bhncd,bhnc->bhnd", S, fq)
    else:
        S = np.einsum("bhmc,bhmd->bhcd", fk, v)               # key-value memory
        z = fk.sum(axis=2)
        Z = np.einsum("bhc,bhnc->bhn", z, fq)
        num = np.einsum("bhcd,bhnc->bhnd", S, fq)
    if normalize:
        _check_Z(Z, name, f, a)
        v_tilde = num / Z[..., None]
    else:
        v_tilde = num
    x_tilde = np.einsum("hec,bhnc->bne", a["WO"], v_tilde)
    return dict(q=q, k=k, v=v, Z=Z, S=S, z=z, v_tilde=v_tilde, x_tilde=x_tilde)


# --------------------------------------------------------------------------------------------
# The key-value memory over a stream (the paper's revised circuit, arXiv 2504.06354v3)
# --------------------------------------------------------------------------------------------

def memory_attention(X, WQ, WK, WV, WO, forget=1.0, normalize: bool = False, Y=None,
                     phi="elu1") -> dict[str, np.ndarray]:
    """Attention as a key-value memory written by a stream of tokens, one token at a time.

    Granier & Senn's revised circuit (arXiv 2504.06354v3): L2/3 holds a key-value memory over the
    tokens seen so far, L5 encodes the current query and is gain-modulated by that memory; the
    attention is unnormalised, linear and causal. Per head, tokens ``t = 1 ... T``::

        M_t = λ M_{t-1} + v_t φ(k_t)ᵀ          (dv × dk, M_0 = 0)
        z_t = λ z_{t-1} + φ(k_t)               (normalised variant only, z_0 = 0)
        ṽ_t = M_t φ(q_t)                       or  M_t φ(q_t) / (z_tᵀ φ(q_t))
        x̃_t = Σ_h W_O ṽ_t

    with ``q_t = W_Q x_t``, ``k_t = W_K y_t``, ``v_t = W_V y_t`` (``y = x`` unless ``Y`` is
    given). At ``forget = 1`` this is causal linear attention
    (:func:`linear_mhsa` with ``causal=True``); with a memory time constant τ_mem and one token
    per presentation P, ``forget = exp(-P / τ_mem)``.

    Parameters
    ----------
    X : array, shape (T, de) or (B, T, de)
        The stream whose queries read the memory, one token per step. Dimensionless.
    WQ, WK : array, shape (H, dk, de)
    WV : array, shape (H, dv, de)
    WO : array, shape (H, de, dv)
        As in :func:`linear_mhsa`.
    forget : float
        λ in (0, 1]: the fraction of the memory kept from one token to the next (1: nothing is
        forgotten).
    normalize : bool
        Divide by ``Z_t = z_tᵀ φ(q_t)`` (the v1 circuit's normaliser over the stream); the revised
        circuit is unnormalised (default).
    Y : array, shape like X, optional
        Cross-attention: the stream that writes the memory (keys and values), token t of ``Y``
        written before token t of ``X`` reads it. Default ``X``.
    phi : str or (callable, callable)
        Feature map (:func:`resolve_phi`).

    Returns
    -------
    dict of str -> ndarray
        ``q (H, T, dk)``, ``k (H, T, dk)``, ``v (H, T, dv)``, ``M (H, T, dv, dk)`` (the memory after
        token t is written), ``v_tilde (H, T, dv)``, ``x_tilde (T, de)``; normalised also
        ``z (H, T, dk)`` and ``Z (H, T)``. With a batch axis every array gains a leading ``B``.

    Raises
    ------
    ValueError
        Bad shapes (``Y`` must have X's number of tokens), NaN/inf, ``forget`` outside (0, 1],
        an unknown ``phi``, ``Z = 0`` when normalising.
    TypeError
        A non-numeric ``forget`` or a non-boolean ``normalize``.
    """
    if isinstance(forget, (bool, np.bool_)) or not isinstance(forget, numbers.Real):
        raise TypeError(f"forget: expected a real number in (0, 1], got {forget!r}")
    lam = float(forget)
    if not (0.0 < lam <= 1.0):
        raise ValueError(f"forget: the fraction of the memory kept per token must lie in (0, 1], got {forget!r}")
    name, f, _ = resolve_phi(phi)
    a = check_attention_inputs(X, WQ, WK, WV, WO, Y=Y, causal=True, normalize=normalize)
    if a["m"] != a["n"]:
        raise ValueError(f"Y: the stream writing the memory needs one token per token of X ({a['n']}); "
                         f"got {a['m']}")
    q, k, v, fq, fk = _projections(a, name, f)
    B, H, T, dk, dv = a["B"], a["H"], a["n"], a["dk"], a["dv"]
    M = np.zeros((B, H, T, dv, dk))
    z = np.zeros((B, H, T, dk))
    m_t, z_t = np.zeros((B, H, dv, dk)), np.zeros((B, H, dk))
    for t in range(T):      # the recurrence itself, token by token: the reference the circuit follows
        m_t = lam * m_t + np.einsum("bhd,bhc->bhdc", v[:, :, t], fk[:, :, t])
        z_t = lam * z_t + fk[:, :, t]
        M[:, :, t], z[:, :, t] = m_t, z_t
    num = np.einsum("bhtdc,bhtc->bhtd", M, fq)
    out = dict(q=q, k=k, v=v, M=M)
    if normalize:
        Z = np.einsum("bhtc,bhtc->bht", z, fq)
        _check_Z(Z, name, f, a)
        out.update(z=z, Z=Z)
        v_tilde = num / Z[..., None]
    else:
        v_tilde = num
    out.update(v_tilde=v_tilde, x_tilde=np.einsum("hec,bhtc->bte", a["WO"], v_tilde))
    if not a["batched"]:
        out = {key: val[0] for key, val in out.items()}
    return out


# --------------------------------------------------------------------------------------------
# Softmax attention, for comparison plots only (the circuit realises the linear kernel)
# --------------------------------------------------------------------------------------------

def softmax_mhsa(X, WQ, WK, WV, WO, Y=None, causal: bool = False, scale=None) -> dict[str, np.ndarray]:
    """Standard softmax multihead attention, ``kappa = softmax_j(k_j·q_i * scale)``.

    For comparison plots only: the circuit realises the *linear* kernel of :func:`linear_mhsa`.

    Parameters
    ----------
    scale : float, optional
        Logit scale; default ``1/sqrt(dk)``.

    Returns
    -------
    dict
        ``q, k, v, scores (H, n, m), kappa (H, n, m), v_tilde, x_tilde`` (batch axis leading
        when ``X`` has one).
    """
    a = check_attention_inputs(X, WQ, WK, WV, WO, Y=Y, causal=causal)
    if scale is None:
        scale = 1.0 / np.sqrt(a["dk"])
    elif not isinstance(scale, numbers.Real) or not np.isfinite(scale):
        raise ValueError(f"scale: expected a finite real number, got {scale!r}")
    q = np.einsum("hce,bne->bhnc", a["WQ"], a["X"])
    k = np.einsum("hce,bme->bhmc", a["WK"], a["Y"])
    v = np.einsum("hce,bme->bhmc", a["WV"], a["Y"])
    scores = np.einsum("bhnc,bhmc->bhnm", q, k) * scale
    scores = np.where(_mask(a["n"], a["m"], causal) > 0, scores, -np.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)
    w = np.exp(scores)
    kappa = w / w.sum(axis=-1, keepdims=True)
    v_tilde = np.einsum("bhnm,bhmd->bhnd", kappa, v)
    x_tilde = np.einsum("hec,bhnc->bne", a["WO"], v_tilde)
    out = dict(q=q, k=k, v=v, scores=scores, kappa=kappa, v_tilde=v_tilde, x_tilde=x_tilde)
    if not a["batched"]:
        out = {key: val[0] for key, val in out.items()}
    return out
