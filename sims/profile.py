"""Where a benchmark's time goes: every simulation's build, compile, run and decode, summed.

Each :func:`ctmhsa.simulate_mhsa` (through :meth:`ctmhsa.sims.build.Simulation.run`) and
:func:`ctmhsa.simulate_model` adds its ``timings`` to the open :func:`collecting` blocks of
this process; ``ctmhsa bench`` opens one around each benchmark and writes it into the
benchmark's JSON (key ``profile``) beside the load average. Simulations a benchmark runs in
fresh processes (``bench speed``'s repeats) are not in it: they count as ``outside``, with the
benchmark's own figures, reference maths and process starts.
"""

from __future__ import annotations

import contextlib
import threading
import time

__all__ = ["PARTS", "record", "collecting"]

PARTS = ("build", "compile", "run", "decode")
"""The parts of a simulation's wall time (s), as its ``timings`` name them."""

_LOCK = threading.Lock()
_OPEN: list = []


def record(timings: dict) -> None:
    """Add one simulation's ``timings`` (s; a part it lacks counts 0, ``nan`` too) to every open
    :func:`collecting` block."""
    parts = {k: float(timings.get(k) or 0.0) for k in PARTS}
    parts = {k: (v if v == v else 0.0) for k, v in parts.items()}       # nan: not measured
    with _LOCK:
        for acc in _OPEN:
            acc["simulations"] += 1
            for k, v in parts.items():
                acc[k] += v


@contextlib.contextmanager
def collecting():
    """Sum the simulations of the block: yields a dict that, at the end, holds ``simulations``
    (count), ``build``, ``compile``, ``run``, ``decode`` (s, summed), ``wall`` (the block's wall
    time, s), ``outside`` (wall minus the four parts: everything else) and ``shares`` (each part
    and ``outside`` as a fraction of ``wall``)."""
    acc = dict(simulations=0, **{k: 0.0 for k in PARTS})
    t0 = time.perf_counter()
    with _LOCK:
        _OPEN.append(acc)
    try:
        yield acc
    finally:
        with _LOCK:
            _OPEN.remove(acc)
        acc["wall"] = time.perf_counter() - t0
        inside = sum(acc[k] for k in PARTS)
        acc["outside"] = max(acc["wall"] - inside, 0.0)
        acc["shares"] = {k: (acc[k] / acc["wall"] if acc["wall"] > 0 else 0.0) for k in (*PARTS, "outside")}
