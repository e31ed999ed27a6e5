"""The measurement window of a spiking run, written once.

Every spiking measurement in the project — a circuit on the runtime device, one stage of a
split run, a cell experiment of :mod:`neurons.cellsim`, a compiled standalone run read back from
its spike times — is the same thing: discard a warm-up, then, over a window of length ``T``,
count each cell's spikes (in ``n_chunks`` equal chunks, whose spread gives the Fano factor) and
average each observable. The observables are integrated by the cells themselves
(``acc_<v> += v dt``, see :func:`neurons.models.add_step_code`), so a window mean is a
difference of two integrals divided by ``T``, exact whatever the step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import brian2 as b2
import numpy as np

__all__ = ["Probe", "Window", "measure", "window_observables", "counts_from_spikes", "fano_factors",
           "fano_sums", "fano_from_sums", "counts_as_rates", "chunk_ends"]


@dataclass(frozen=True)
class Probe:
    """One measured population.

    Attributes
    ----------
    monitor : brian2.SpikeMonitor
        Its spike counts.
    read : callable
        ``read(var)`` -> current values (SI) of variable ``var``, one per cell.
    observables : tuple of str
        Variables whose window means are wanted (integrated by the cells as ``acc_<var>``).
    """

    monitor: object
    read: Callable[[str], np.ndarray]
    observables: tuple = ()

    def counts(self) -> np.ndarray:
        return np.array(self.monitor.count[:], dtype=float)


def window_observables(means: dict, count: np.ndarray, T: float) -> dict:
    """A window's observables: the means (SI), the spike ``count`` per cell, ``rate`` = count /
    T (Hz) and ``T`` (s). The one shape every way of measuring returns."""
    return {**means, "count": count, "rate": count / T, "T": T}


class Window:
    """Spike counts and observable integrals of ``probes`` from the moment it is opened."""

    def __init__(self, probes: dict, t: float):
        self.probes, self.t = dict(probes), float(t)
        # copies: a reader may return a view of the live state, which the run goes on changing
        self._start = {name: ({v: np.array(p.read(f"acc_{v}"), dtype=float) for v in p.observables}, p.counts())
                       for name, p in self.probes.items()}

    def start_counts(self, name: str) -> np.ndarray:
        """Spike counts per cell of ``name`` when the window opened."""
        return self._start[name][1]

    def read(self, name: str, T: float) -> dict:
        """Window observables of ``name`` (see :func:`window_observables`) after ``T`` seconds."""
        if T <= 0:
            raise RuntimeError("read: the window is empty; run the network first")
        p, (acc0, c0) = self.probes[name], self._start[name]
        means = {v: (p.read(f"acc_{v}") - acc0[v]) / T for v in p.observables}
        return window_observables(means, p.counts() - c0, T)


def chunk_ends(T: float, n_chunks: int) -> list[float]:
    """Window times (s) at which the ``n_chunks`` equal chunks of a window ``T`` end."""
    return [T * (k + 1) / n_chunks for k in range(n_chunks)]


def counts_from_spikes(i: np.ndarray, t: np.ndarray, N: int, t0: float, T: float,
                       n_chunks: int) -> tuple[np.ndarray, np.ndarray]:
    """Spike counts per cell over the window [t0, t0 + T) and per chunk, from spike times.

    For devices that cannot be read during a run (``cpp_standalone``). Returns
    ``(count (N,), chunks (n_chunks, N))``.
    """
    i, t = np.asarray(i), np.asarray(t, float)
    keep = t >= t0 - 1e-12
    edges = t0 + np.asarray([0.0, *chunk_ends(T, n_chunks)])
    k = np.clip(np.searchsorted(edges, t[keep], side="right") - 1, 0, n_chunks - 1)
    chunks = np.zeros((n_chunks, N))
    np.add.at(chunks, (k, i[keep]), 1.0)
    return chunks.sum(axis=0), chunks


def fano_sums(chunks: dict) -> dict:
    """Per population ``(sum over cells of the chunk-count variance (ddof 1), sum over cells of
    the mean chunk count)``: additive over cells, so over heads run apart; see :func:`fano_from_sums`."""
    return {p: (float(c.var(axis=0, ddof=1).sum()), float(c.mean(axis=0).sum())) for p, c in chunks.items()}


def fano_from_sums(sums: dict) -> dict:
    """Pooled Fano factor per population from :func:`fano_sums` (of one run or added over runs)."""
    return {p: (v / m if m > 0 else 1.0) for p, (v, m) in sums.items()}


def fano_factors(chunks: dict) -> dict:
    """Pooled Fano factor per population from spike counts per chunk (``(n_chunks, N)``)."""
    return fano_from_sums(fano_sums(chunks))


def counts_as_rates(obs: dict) -> dict:
    """Make ``r`` the measured spike rate (decoding uses counts) and keep the window-mean
    intensity as ``expected_r``; in place, for every population with a ``rate``."""
    for o in obs.values():
        if "rate" in o and "expected_r" not in o:
            o["expected_r"], o["r"] = o["r"], o["rate"]
    return obs


def measure(network, probes: dict, clock, run: Callable[[float, object], float], warmup: float,
            T: float, n_chunks: int = 1, checkpoints=(), report=None) -> dict:
    """Run for ``warmup`` (discarded) and a window ``T`` in ``n_chunks`` equal chunks.

    The window is one Brian2 ``run``: a network operation at the end of every step takes the
    chunk counts and checkpoint snapshots when their time is reached (running each chunk as its
    own ``run`` made Brian2 re-create every code object per chunk: 75 % of a small run's wall
    time, measured).

    Parameters
    ----------
    network : brian2.Network
    probes : dict
        Population name -> :class:`Probe`.
    clock : brian2.Clock
        The network's clock.
    run : callable
        ``run(duration_s, report)`` advances the network and returns its wall time (s).
    warmup, T : float
        Discarded warm-up and window (s).
    checkpoints : sequence of float
        Window lengths (s, < T) at which the observables are also read.

    Returns
    -------
    dict
        ``snapshots``: ``[(t, {population: observables})]`` at every checkpoint and at ``T``
        (last); ``chunks``: spike counts per chunk and cell of every probe; ``run``: wall time (s).
    """
    t_run = run(warmup, report) if warmup > 0 else 0.0
    window = Window(probes, float(network.t_))
    dt = float(clock.dt_)
    ends = chunk_ends(T, n_chunks)
    marks = sorted({float(x) for x in checkpoints if 0 < float(x) < T} | set(ends))
    counts = {p: [window.start_counts(p)] for p in probes}
    snapshots, todo = [], list(marks)

    def at_step_end(t):
        elapsed = float(t[:]) + dt - window.t       # the step that starts at t has just been run
        while todo and elapsed >= todo[0] - 0.5 * dt:
            mark = todo.pop(0)
            if mark in ends:
                for p, probe in probes.items():
                    counts[p].append(probe.counts())
            if not todo or any(abs(mark - float(x)) < 1e-12 for x in checkpoints):
                snapshots.append((mark, {p: window.read(p, elapsed) for p in probes}))

    # after the window integrals (run_regularly at "end", order 0) and the spike monitors
    op = b2.NetworkOperation(at_step_end, clock=clock, when="end", order=1000, name="window_marks")
    network.add(op)
    try:
        t_run += run(T, report)
    finally:
        network.remove(op)
    if todo:
        raise RuntimeError(f"measure: window marks {todo} s were not reached in T = {T} s")
    return dict(snapshots=snapshots, chunks={p: np.diff(np.stack(c), axis=0) for p, c in counts.items()},
                run=t_run)

