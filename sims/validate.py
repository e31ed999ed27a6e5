"""Input validation for the simulator: the arrays are checked before anything is built."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ctmhsa.maths.model import Block
from ctmhsa.maths.reference import check_attention_inputs, linear_mhsa, plain_array

__all__ = ["check_inputs", "available_memory", "Inputs"]


@dataclass(frozen=True, eq=False)
class Inputs:
    """What a built simulation is shown and computes with: its tokens and its block's weights.

    Attributes
    ----------
    X : ndarray (n, de)
        Query tokens (nucleus 1).
    Y : ndarray (m, de) or None
        Key/value tokens (cross-attention).
    block : ctmhsa.maths.model.Block
        The weights, typed (attention and the skip path's ``WS``); every layer takes it whole.
    """

    X: np.ndarray
    Y: np.ndarray | None
    block: Block

    @classmethod
    def from_checked(cls, a: dict) -> "Inputs":
        """From the dict :func:`check_inputs` returns."""
        return cls(a["X"], a["Y"], Block.from_arrays(a["WQ"], a["WK"], a["WV"], a["WO"], a["WS"]))

    def arrays(self) -> dict:
        """``X, Y, WQ, WK, WV, WO, WS`` as plain arrays (``Y``, ``WS`` may be None): the
        keywords of :func:`ctmhsa.maths.reference.linear_mhsa`."""
        b = self.block
        return dict(X=self.X, Y=self.Y, WQ=b.WQ, WK=b.WK, WV=b.WV, WO=b.WO, WS=b.WS)

    def __getitem__(self, key: str):
        """One array by name (the dict of plain arrays this replaced is read the same way)."""
        return self.arrays()[key]


def available_memory() -> int:
    """Bytes of memory available to a new allocation (``MemAvailable``; physical RAM fallback)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # pragma: no cover - non-Linux
        pass
    try:  # pragma: no cover - non-Linux
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        return 8 * 2**30


def check_inputs(X, WQ, WK, WV, WO, Y=None, WS=None, causal=False, normalize=True, phi="elu1",
                 stream: bool = False) -> dict:
    """Validate the arrays of :func:`ctmhsa.sims.simulate_mhsa` (the options are validated by
    :mod:`ctmhsa.sims.options`); return them converted, with the sizes ``n, m, H, dk, dv, de``.

    Raises
    ------
    ValueError, TypeError
        With a message naming the argument and the expected value: also a quantity with a unit
        or a masked array with masked entries (:func:`ctmhsa.maths.reference.plain_array`).
    """
    a = check_attention_inputs(X, WQ, WK, WV, WO, Y=Y, causal=causal, normalize=normalize)
    if stream:   # a stream of token sets (T, n, de), shown one after another to one circuit
        if not a["batched"]:
            raise ValueError(f"X: a stream is T token sets of shape (T, n, de); got {np.shape(X)}")
    elif a["batched"]:
        raise ValueError(
            f"X: the simulator takes one sequence of shape (n, de), or a stream (T, n, de) shown one set "
            f"after another; got {np.shape(X)}")
    else:
        a["X"], a["Y"] = a["X"][0], (None if Y is None else a["Y"][0])
    if WS is not None:   # the reference checks the skip weights' shape and values
        linear_mhsa(a["X"], a["WQ"], a["WK"], a["WV"], a["WO"], phi=phi, Y=a["Y"], causal=causal,
                    normalize=normalize, WS=WS)
        WS = np.asarray(plain_array("WS", WS), float)
    a["WS"] = WS
    return a
