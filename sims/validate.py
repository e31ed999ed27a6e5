"""Argument validation for the simulator: everything is checked before anything is built."""

from __future__ import annotations

import numbers
import os

import numpy as np

from mapping.reference import check_attention_inputs
from neurons.models import PHI_EXPRESSIONS

__all__ = ["check_simulation_args", "available_memory", "LEVELS", "IMPLEMENTED_LEVELS"]

LEVELS = ("rate", "escape", "lif")
IMPLEMENTED_LEVELS = ("rate", "escape", "lif")
CODEGEN = ("auto", "numpy", "cython")


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


def _positive_time(name, value, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: expected a number of seconds, got {type(value).__name__}")
    value = float(value)
    if not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name}: expected a positive finite time in seconds, got {value!r}")
    return value


def check_simulation_args(X, WQ, WK, WV, WO, phi, neuron, duration, seed, Y, causal, dt, codegen,
                          warmup=None, normalize=True):
    """Validate the arguments of :func:`sims.simulate_mhsa`; return the converted inputs.

    Raises
    ------
    ValueError, TypeError
        With a message naming the argument and the expected value.
    NotImplementedError
        A known fidelity level whose cells are not built yet.
    """
    a = check_attention_inputs(X, WQ, WK, WV, WO, Y=Y, causal=causal, normalize=normalize)
    if a["batched"]:
        raise ValueError(
            f"X: the simulator takes one sequence of shape (n, de); got a batch {np.shape(X)}. "
            "Loop over the batch (each sequence is one network run)")
    if not isinstance(phi, str):
        raise TypeError(
            f"phi: the circuit implements named feature maps {sorted(PHI_EXPRESSIONS)} "
            f"(dendritic nonlinearities); got {type(phi).__name__}. Custom callables work in "
            "mapping.reference only")
    if phi not in PHI_EXPRESSIONS:
        raise ValueError(f"phi: unknown feature map {phi!r}; expected one of {sorted(PHI_EXPRESSIONS)}")
    if not isinstance(neuron, str) or neuron not in LEVELS:
        raise ValueError(f"neuron: expected one of {list(LEVELS)}, got {neuron!r}")
    if neuron not in IMPLEMENTED_LEVELS:
        raise NotImplementedError(
            f"neuron={neuron!r}: the spiking cells of this level are not built yet; "
            f"available levels: {list(IMPLEMENTED_LEVELS)}")
    duration = _positive_time("duration", duration)
    dt = _positive_time("dt", dt, allow_none=True)
    if warmup is not None:
        if isinstance(warmup, bool) or not isinstance(warmup, numbers.Real) or not np.isfinite(warmup) or warmup < 0:
            raise ValueError(f"warmup: expected a non-negative finite time in seconds, got {warmup!r}")
    if dt is not None and dt > duration:
        raise ValueError(f"dt: {dt} s is longer than duration = {duration} s")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed: expected a non-negative integer, got {seed!r}")
    if codegen not in CODEGEN:
        raise ValueError(f"codegen: expected one of {list(CODEGEN)}, got {codegen!r}")
    a.update(duration=duration, dt=dt, seed=int(seed), warmup=None if warmup is None else float(warmup))
    return a
