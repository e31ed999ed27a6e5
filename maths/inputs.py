"""The declared input range: what a circuit is built for, instead of the tokens it is shown.

A brain has one circuit for every input. Every gain, set point, offset and bias of the encoding
(:mod:`ctmhsa.mapping.encode`) is fixed from the weights and an :class:`InputRange` alone, so
one built circuit runs any tokens of the range: only the thalamic relays' rates change
(:func:`ctmhsa.mapping.encode.relay_rates`).

A range has two parts, both in units of the token entries (dimensionless):

- a **bound** ``norm`` on every token's Euclidean norm. Tokens above it are refused
  (``ValueError`` naming the argument). The offset code's worst-case offsets use it
  (``|q_c| <= norm ||WQ_c||``, ``|x_e| <= norm``).
- the **statistics** of the tokens: the mean and standard deviation of every embedding
  dimension (``mean``, ``std``; defaults 0 and ``norm / sqrt(de)``). The normalisation's
  operating point centres the interneurons' range on the drive these statistics predict
  (:func:`expected_feature`, :func:`ctmhsa.mapping.operating.expected_drive`).

``InputRange.from_tokens(data)`` declares the range of a data set (its largest norm and its
per-dimension statistics). :func:`ctmhsa.sims.simulate_mhsa` without ``input_range`` declares the
range of the tokens it is given in this way (documented in docs/design.md, "One circuit for
every input"): the circuit then depends on the tokens through these statistics only, never on
their attention (Z, κ, x̃); declare a range to build one circuit for many inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .reference import FEATURE_MAPS

__all__ = ["InputRange", "as_input_range", "expected_feature", "projection_moments", "sample_tokens"]

_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(60)
_WEIGHTS = _WEIGHTS / _WEIGHTS.sum()   # expectations over a standard normal variable


def _vector(value, de: int | None, what: str) -> np.ndarray | None:
    if value is None:
        return None
    arr = np.asarray(value, float)
    if arr.ndim > 1 or (arr.ndim == 1 and de is not None and arr.shape != (de,)):
        raise ValueError(f"input_range.{what}: expected a number or an array of shape (de,), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"input_range.{what}: expected finite values")
    return arr


@dataclass(frozen=True)
class InputRange:
    """The tokens a circuit is built for.

    Parameters
    ----------
    norm : float
        Largest Euclidean norm of a token (dimensionless, > 0). Larger tokens are refused.
    mean : float or array (de,), optional
        Mean of every embedding dimension over the tokens (default 0).
    std : float or array (de,), optional
        Standard deviation of every embedding dimension (default ``norm / sqrt(de)``, a token of
        norm ``norm`` spread evenly).
    """

    norm: float
    mean: object = None
    std: object = None

    def __post_init__(self):
        if isinstance(self.norm, bool) or not isinstance(self.norm, (int, float, np.floating, np.integer)):
            raise TypeError(f"input_range.norm: expected a positive number, got {type(self.norm).__name__}")
        if not (math.isfinite(self.norm) and self.norm > 0):
            raise ValueError(f"input_range.norm: expected a positive finite number, got {self.norm!r}")
        object.__setattr__(self, "norm", float(self.norm))
        object.__setattr__(self, "mean", _vector(self.mean, None, "mean"))
        std = _vector(self.std, None, "std")
        if std is not None and np.any(std < 0):
            raise ValueError("input_range.std: expected values >= 0")
        object.__setattr__(self, "std", std)

    @classmethod
    def from_tokens(cls, *token_sets, margin: float = 1.0) -> "InputRange":
        """The range of a data set: its largest token norm (times ``margin``) and the mean and
        standard deviation of every dimension over all its tokens.

        Parameters
        ----------
        *token_sets : array (..., de)
            Tokens (any leading shape; several sets are pooled, e.g. queries and keys).
        margin : float
            Factor (>= 1) on the largest norm, room for tokens not in the data set.
        """
        rows = [np.asarray(t, float).reshape(-1, np.shape(t)[-1]) for t in token_sets if t is not None]
        data = np.concatenate(rows, axis=0)
        norm = float(np.max(np.linalg.norm(data, axis=1))) if data.size else 0.0
        if not margin >= 1:
            raise ValueError(f"margin: expected >= 1, got {margin!r}")
        # an all-zero data set still needs a positive bound (any scale works for zero tokens)
        return cls(norm=norm * margin if norm > 0 else 1.0, mean=data.mean(axis=0), std=data.std(axis=0))

    def statistics(self, de: int) -> tuple[np.ndarray, np.ndarray]:
        """``(mean, std)`` of every one of ``de`` dimensions, defaults filled in."""
        mean = np.zeros(de) if self.mean is None else np.broadcast_to(self.mean, (de,)).astype(float)
        std = (np.full(de, self.norm / math.sqrt(de)) if self.std is None
               else np.broadcast_to(self.std, (de,)).astype(float))
        if self.mean is not None and np.ndim(self.mean) == 1 and len(self.mean) != de:
            raise ValueError(f"input_range.mean: expected {de} values (de), got {len(self.mean)}")
        if self.std is not None and np.ndim(self.std) == 1 and len(self.std) != de:
            raise ValueError(f"input_range.std: expected {de} values (de), got {len(self.std)}")
        return mean, std

    def check(self, tokens, name: str = "X", tol: float = 1e-9) -> None:
        """``ValueError`` naming ``name`` and the token if one lies outside the range."""
        x = np.asarray(tokens, float)
        norms = np.linalg.norm(x.reshape(-1, x.shape[-1]), axis=1)
        bad = np.flatnonzero(norms > self.norm * (1 + tol))
        if bad.size:
            k = int(bad[np.argmax(norms[bad])])
            raise ValueError(
                f"{name}: token {k} has norm {norms[k]:.6g}, outside the declared input range (norm <= "
                f"{self.norm:.6g}); the circuit was built for that range: declare a wider one "
                f"(input_range=InputRange(norm=...) or InputRange.from_tokens(data))")

    def to_dict(self) -> dict:
        """Plain data for provenance."""
        return dict(norm=self.norm, mean=None if self.mean is None else np.asarray(self.mean).tolist(),
                    std=None if self.std is None else np.asarray(self.std).tolist())


def as_input_range(value, *tokens) -> InputRange:
    """An :class:`InputRange` from the ``input_range`` option: a range, a positive number (the
    norm bound), a dict of its fields, or ``None`` (the range of ``tokens``,
    :meth:`InputRange.from_tokens`)."""
    if value is None:
        return InputRange.from_tokens(*tokens)
    if isinstance(value, InputRange):
        return value
    if isinstance(value, dict):
        unknown = set(value) - {"norm", "mean", "std"}
        if unknown:
            raise ValueError(f"input_range: unknown field(s) {sorted(unknown)}; expected norm, mean, std")
        if "norm" not in value:
            raise ValueError("input_range: a dict needs 'norm' (the largest token norm)")
        return InputRange(**value)
    if isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool):
        return InputRange(norm=float(value))
    raise TypeError(f"input_range: expected an InputRange, a positive number (the largest token norm), "
                    f"a dict or None, got {type(value).__name__}")


def projection_moments(W: np.ndarray, rng: InputRange) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of ``W x`` for tokens of ``rng`` (dimensions independent).

    Parameters
    ----------
    W : array (..., de)

    Returns
    -------
    (mean, std) : arrays of shape ``W.shape[:-1]``
    """
    W = np.asarray(W, float)
    mean, std = rng.statistics(W.shape[-1])
    return W @ mean, np.sqrt((W ** 2) @ (std ** 2))


def expected_feature(phi: str, mean, std) -> np.ndarray:
    """``E[phi(z)]`` for ``z ~ N(mean, std²)`` (Gauss-Hermite quadrature, 60 nodes; elementwise)."""
    f = FEATURE_MAPS[phi][0]
    mean, std = np.asarray(mean, float), np.asarray(std, float)
    z = mean[..., None] + std[..., None] * _NODES
    return f(z) @ _WEIGHTS


def sample_tokens(rng: InputRange, de: int, shape: tuple, seed: int = 0) -> np.ndarray:
    """Token sets drawn from the range's statistics (a fixed ``seed``: the same draws for the
    same range, never the tokens shown): every dimension ``N(mean, std²)``, independent, as in
    :func:`projection_moments`; a token above the norm bound is scaled onto it (the circuit
    refuses larger ones).

    Returns
    -------
    ndarray ``shape + (de,)``
    """
    mean, std = rng.statistics(de)
    x = mean + std * np.random.default_rng(seed).normal(size=tuple(shape) + (de,))
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    return np.where(norm > rng.norm, x * (rng.norm / np.maximum(norm, 1e-300)), x)
