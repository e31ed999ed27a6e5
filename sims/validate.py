"""Input validation for the simulator: the arrays are checked before anything is built."""

from __future__ import annotations

import os

import numpy as np

from ctmhsa.mapping.reference import check_attention_inputs, linear_mhsa, plain_array

__all__ = ["check_inputs", "available_memory"]


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


def check_inputs(X, WQ, WK, WV, WO, Y=None, WS=None, causal=False, normalize=True, phi="elu1") -> dict:
    """Validate the arrays of :func:`ctmhsa.sims.simulate_mhsa` (the options are validated by
    :mod:`ctmhsa.sims.options`); return them converted, with the sizes ``n, m, H, dk, dv, de``.

    Raises
    ------
    ValueError, TypeError
        With a message naming the argument and the expected value: also a quantity with a unit
        or a masked array with masked entries (:func:`ctmhsa.mapping.reference.plain_array`).
    """
    a = check_attention_inputs(X, WQ, WK, WV, WO, Y=Y, causal=causal, normalize=normalize)
    if a["batched"]:
        raise ValueError(
            f"X: the simulator takes one sequence of shape (n, de); got a batch {np.shape(X)}. "
            "Loop over the batch (each sequence is one network run)")
    a["X"], a["Y"] = a["X"][0], (None if Y is None else a["Y"][0])
    if WS is not None:   # the reference checks the skip weights' shape and values
        linear_mhsa(a["X"], a["WQ"], a["WK"], a["WV"], a["WO"], phi=phi, Y=a["Y"], causal=causal,
                    normalize=normalize, WS=WS)
        WS = np.asarray(plain_array("WS", WS), float)
    a["WS"] = WS
    return a
