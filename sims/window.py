"""The measurement window of a spiking run: warm-up, chunked counting, window observables.

One implementation for every way a network runs in this process (the whole pathway, or one
stage of a split run); the standalone device, which cannot be read during a run, reconstructs
the same quantities from spike times (:mod:`circuits.standalone`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["measure", "counts_as_rates", "fano_factors"]


def counts_as_rates(obs: dict) -> dict:
    """Make ``r`` the measured spike rate (decoding uses counts) and keep the window-mean
    intensity as ``expected_r``; in place, for every population with a ``rate``."""
    for o in obs.values():
        if "rate" in o:
            o["expected_r"], o["r"] = o["r"], o["rate"]
    return obs


def fano_factors(chunks: dict) -> dict:
    """Pooled Fano factor per population from spike counts per chunk (``(n_chunks, N)``)."""
    out = {}
    for p, cnt in chunks.items():
        tot = cnt.mean(axis=0).sum()
        out[p] = float(cnt.var(axis=0, ddof=1).sum() / tot) if tot > 0 else 1.0
    return out


def measure(built, warmup: float, T: float, n_chunks: int, checkpoints=(), report=None) -> dict:
    """Run ``built`` for ``warmup`` (discarded) and a window ``T`` in ``n_chunks`` equal chunks.

    The window is one Brian2 ``run``: a network operation at the end of every step takes the
    chunk counts and checkpoint snapshots when their time is reached. (Running each chunk as its
    own ``run`` made Brian2 re-create every code object per chunk: 75 % of a small run's wall time,
    measured.)

    Returns
    -------
    dict
        ``snapshots``: ``[(t, obs)]`` window observables (see
        :meth:`circuits.instantiate.BuiltCircuit.read_window`, with :func:`counts_as_rates`) at
        every checkpoint and at ``T`` (last); ``chunks``: spike counts per chunk and cell of every
        monitored population; ``run``: wall time (s).
    """
    import brian2 as b2

    t_run = built.run(warmup, report=report) if warmup > 0 else 0.0
    built.start_window()
    dt = built.dt
    ends = [T * (k + 1) / n_chunks for k in range(n_chunks)]
    marks = sorted({float(x) for x in checkpoints if 0 < float(x) < T} | set(ends))
    counts = {p: [built.window_start_counts(p)] for p in built.monitors}
    snapshots, todo, t0 = [], list(marks), built.window_start_time()

    def at_step_end(t):
        elapsed = float(t[:]) + dt - t0       # the step that starts at t has just been run
        while todo and elapsed >= todo[0] - 0.5 * dt:
            mark = todo.pop(0)
            if mark in ends:
                for p in built.monitors:
                    counts[p].append(np.array(built.monitors[p].count[:], dtype=float))
            if not todo or any(abs(mark - float(x)) < 1e-12 for x in checkpoints):
                snapshots.append((mark, counts_as_rates(
                    {p: built.read_window(p, T=elapsed) for p in built.monitors})))

    clock = next(iter(built.groups.values())).clock
    # after the window integrals (run_regularly at "end", order 0) and the spike monitors
    op = b2.NetworkOperation(at_step_end, clock=clock, when="end", order=1000, name="window_marks")
    built.network.add(op)
    try:
        t_run += built.run(T, report=report)
    finally:
        built.network.remove(op)
    if todo:
        raise RuntimeError(f"measure: window marks {todo} s were not reached in T = {T} s")
    return dict(snapshots=snapshots, chunks={p: np.diff(np.stack(c), axis=0) for p, c in counts.items()},
                run=t_run)
