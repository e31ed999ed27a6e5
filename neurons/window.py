"""The measurement window of a spiking run, written once.

Every spiking measurement in the project — a circuit on the runtime device, one stage of a
split run, a cell experiment of :mod:`ctmhsa.neurons.cellsim`, a compiled standalone run read back from
its spike times — is the same thing: discard a warm-up, then, over a window of length ``T``,
count each cell's spikes (in ``n_chunks`` equal chunks, whose spread gives the Fano factor) and
average each observable. The observables are integrated by the cells themselves
(``acc_<v> += v dt``, see :func:`ctmhsa.neurons.models.add_step_code`), so a window mean is a
difference of two integrals divided by ``T``, exact whatever the step.

Counts come from a ``SpikeMonitor`` (runtime: read at every chunk end) or, on a compiled device
that runs the whole window unseen, from counters the cells keep themselves
(:data:`COUNTER_EQUATIONS`, updated by :data:`COUNTER_RESET` at each spike only): the window
count and the two per-cell sums behind the Fano factor. No per-cell work between spikes and no
spike times are stored, so only the populations whose spike trains are wanted carry a monitor there.

A stream's windows (:func:`measure_stream`) on such a device are read after the run instead
(:func:`stream_steps`, :func:`window_snapshots`): from the same counters, each step's window chunk
read from a table (:data:`STREAM_COUNTER_STEP`, :func:`chunk_ids`, :func:`stream_counted`), and
from the integrals sampled at the step boundaries where :func:`measure_stream` reads them.
:func:`window_counts` reads the same windows from spike times: the reference the counters are
tested against (and the read of a recorded population's spikes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import brian2 as b2
import numpy as np

__all__ = ["Probe", "Window", "measure", "measure_stream", "window_observables", "fano_factors",
           "fano_sums", "fano_from_sums", "counts_as_rates", "chunk_ends", "COUNTER_EQUATIONS",
           "COUNTER_STEP", "COUNTER_RESET", "STREAM_COUNTER_STEP", "chunk_ids", "stream_counted",
           "counter_run_args", "counted_observables", "stream_steps",
           "stream_state_steps", "counts_before", "window_counts", "window_snapshots", "stream_windows",
           "window_times", "state_times", "stream_delays"]


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


COUNTER_EQUATIONS = """
n_win : 1
n_chunk : 1
k_chunk : 1
s2_chunk : 1
k_now : 1 (shared)
t_chunk : second (shared)
k_last : 1 (shared)
"""
"""Spike counters of a cell (added to a spiking model's equations, which have ``t_win``):
``n_win`` its spikes in the window, ``n_chunk`` those in the chunk it last spiked in (number
``k_chunk``, counted from 1; 0 before its first window spike), ``s2_chunk`` the sum of the
squared counts of its earlier non-empty chunks; ``k_now`` the current step's chunk (0 in the
warm-up, set once per step by :data:`COUNTER_STEP`); ``t_chunk`` the chunk length and
``k_last`` the last chunk's index (shared, set by :func:`counter_run_args`)."""

COUNTER_STEP = "k_now = int(t >= t_win - 0.5*dt)*(clip(floor((t - t_win + 0.5*dt)/t_chunk), 0, k_last) + 1)"
"""Code run once per step (shared variables only): the chunk of a spike at step time ``t`` is
``floor((t - t_win)/t_chunk)`` (half a step added against rounding: step times are multiples
of ``dt``), the chunk that the runtime :func:`measure` assigns it to."""

COUNTER_RESET = """
new_chunk = int(k_now != k_chunk)
s2_chunk += new_chunk*n_chunk**2
n_chunk = n_chunk*(1 - new_chunk) + int(k_now > 0)
k_chunk = k_now
n_win += int(k_now > 0)
"""
"""Reset code (appended to the model's) that updates the counters at each spike: a spike in a
new chunk first adds the square of the cell's last chunk count; empty chunks add nothing to
either sum, so they need no visit."""


STREAM_COUNTER_STEP = "k_now = {table}(t)"
"""A compiled stream's :data:`COUNTER_STEP`: the number of each step's chunk, ``w * n_chunks + k +
1`` in window ``w`` (0 between windows), read from a table of the run's steps made from the
window marks (:func:`chunk_ids`): the cells' counters (:data:`COUNTER_RESET`) then count exactly
the spikes that :func:`window_counts` counts from the spike times, and nothing of the spikes is
kept. ``{table}``: the table's ``TimedArray`` (one value per step)."""


def chunk_ids(marks, t0: int, steps: int) -> np.ndarray:
    """The chunk of each of a run's ``steps`` steps (:data:`STREAM_COUNTER_STEP`): step ``t0 + s``
    lies in chunk ``k`` of window ``w`` where ``marks[w, k] <= s < marks[w, k + 1]`` (``marks``:
    :func:`stream_steps`, from the stream's start ``t0``), numbered ``w * n_chunks + k + 1``; 0
    outside every window (the warm-up, the lags, the run's tail)."""
    marks = np.asarray(marks, np.int64)
    count, B = marks.shape
    ids = np.zeros(int(steps))
    for w in range(count):
        for k in range(B - 1):
            a, b = (int(np.clip(t0 + m, 0, steps)) for m in (marks[w, k], marks[w, k + 1]))
            ids[a:b] = w * (B - 1) + k + 1
    return ids


def stream_counted(n_win, s2_chunk, n_chunk, n_chunks: int) -> tuple[np.ndarray, tuple]:
    """Spikes per cell in each window and the population's :func:`window_counts` sums, from a
    compiled stream's counters (:data:`STREAM_COUNTER_STEP`): ``n_win`` the cells' window count
    sampled at every window's opening and end ``(count, 2, N)``, ``s2_chunk`` and ``n_chunk`` read
    after the run (the squared counts of every chunk but the cell's last, and that one's)."""
    n = np.asarray(n_win, float)
    totals = n[:, 1] - n[:, 0]
    sq = float(np.sum(np.asarray(s2_chunk, float) + np.asarray(n_chunk, float) ** 2))
    tot_sq, tot = float(np.sum(totals * totals)), float(totals.sum())
    var = (sq - tot_sq / n_chunks) / (n_chunks - 1) if n_chunks > 1 else float("nan")
    return totals, (float(var), tot / n_chunks)


def counter_run_args(T: float, n_chunks: int) -> dict:
    """Values (SI) of the shared counter parameters for a window ``T`` (s) in ``n_chunks`` chunks."""
    return dict(t_chunk=T / n_chunks, k_last=float(n_chunks - 1))


def counted_observables(n_win, n_chunk, s2_chunk, n_chunks: int) -> tuple[np.ndarray, tuple]:
    """Window count per cell and the population's :func:`fano_sums` entry from the counters
    of :data:`COUNTER_EQUATIONS` read after the run."""
    n_win = np.asarray(n_win, float)
    s2 = np.asarray(s2_chunk, float) + np.asarray(n_chunk, float) ** 2   # the last chunk, not yet added
    mean = n_win / n_chunks
    var = (s2 - n_chunks * mean ** 2) / (n_chunks - 1) if n_chunks > 1 else np.full_like(n_win, np.nan)
    return n_win, (float(var.sum()), float(mean.sum()))


def fano_sums(chunks: dict) -> dict:
    """Per population ``(sum over cells of the chunk-count variance (ddof 1), sum over cells of
    the mean chunk count)``: additive over cells, so over heads run apart; see :func:`fano_from_sums`.
    Counts ``(n_chunks, N)``, or ``(windows, n_chunks, N)`` (a stream: each window's chunk
    spread, summed over the windows)."""
    return {p: (float(c.var(axis=-2, ddof=1).sum()), float(c.mean(axis=-2).sum())) for p, c in chunks.items()}


def fano_from_sums(sums: dict) -> dict:
    """Pooled Fano factor per population from :func:`fano_sums` (of one run or added over runs)."""
    return {p: (v / m if m > 0 else 1.0) for p, (v, m) in sums.items()}


def fano_factors(chunks: dict) -> dict:
    """Pooled Fano factor per population from spike counts per chunk (``(n_chunks, N)``)."""
    return fano_from_sums(fano_sums(chunks))


def counts_as_rates(obs: dict) -> dict:
    """Make ``r`` the measured spike rate (decoding uses counts) and keep the window-mean
    intensity as ``expected_r``; in place, for every population with a ``rate``. Cells with no
    intensity of their own (the followers of :mod:`ctmhsa.circuits.dale`, which fire with every
    spike of their cell) expect what they fired."""
    for o in obs.values():
        if "rate" in o and "expected_r" not in o:
            o["expected_r"], o["r"] = o.get("r", o["rate"]), o["rate"]
    return obs


def measure(network, probes: dict, clock, run: Callable[[float, object], float], warmup: float,
            T: float, n_chunks: int = 1, checkpoints=(), report=None) -> dict:
    """Run for ``warmup`` (discarded) and a window ``T`` in ``n_chunks`` equal chunks.

    Warm-up and window are one Brian2 ``run``: a network operation at the end of every step opens
    the window when the warm-up is over and takes the chunk counts and checkpoint snapshots when
    their time is reached (each ``run`` makes Brian2 re-create every code object: running each
    chunk as its own made that 75 % of a small run's wall time, measured; a warm-up of its own
    cost one more re-creation).

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
    dt = float(clock.dt_)
    t0 = float(network.t_)
    ends = chunk_ends(T, n_chunks)
    marks = sorted({float(x) for x in checkpoints if 0 < float(x) < T} | set(ends))
    state = {}
    snapshots, todo = [], list(marks)

    def open_window(t):
        state["window"] = window = Window(probes, t)
        state["counts"] = {p: [window.start_counts(p)] for p in probes}

    def at_step_end(t):
        now = float(t[:]) + dt              # the step that starts at t has just been run
        if "window" not in state:
            if now - t0 < warmup - 0.5 * dt:
                return
            # Brian2's own clock reading at the end of a warm-up run of its own, t0 + warmup,
            # where the step's end agrees with it (they may differ in the last bit)
            nominal = t0 + warmup
            open_window(nominal if abs(now - nominal) < 1e-6 * dt else now)
        window, counts = state["window"], state["counts"]
        elapsed = now - window.t
        while todo and elapsed >= todo[0] - 0.5 * dt:
            mark = todo.pop(0)
            if mark in ends:
                for p, probe in probes.items():
                    counts[p].append(probe.counts())
            if not todo or any(abs(mark - float(x)) < 1e-12 for x in checkpoints):
                snapshots.append((mark, {p: window.read(p, elapsed) for p in probes}))

    if warmup <= 0:
        open_window(t0)
    # after the window integrals (run_regularly at "end", order 0) and the spike monitors
    op = b2.NetworkOperation(at_step_end, clock=clock, when="end", order=1000, name="window_marks")
    network.add(op)
    try:
        t_run = run(max(warmup, 0.0) + T, report)
    finally:
        network.remove(op)
    if todo:
        raise RuntimeError(f"measure: window marks {todo} s were not reached in T = {T} s")
    return dict(snapshots=snapshots, chunks={p: np.diff(np.stack(c), axis=0) for p, c in state["counts"].items()},
                run=t_run)



def measure_stream(network, probes: dict, clock, run: Callable[[float, object], float], warmup: float,
                   period: float, count: int, lag: float, n_chunks: int = 1, report=None,
                   read_state: Callable[[], dict] | None = None,
                   on_read: Callable[[int, dict], None] | None = None, latency: dict | None = None) -> dict:
    """Run for ``warmup`` (discarded), then ``count`` presentations of ``period`` s each, with
    one measurement window per presentation: ``[lag, period)`` after its start, each
    population's delayed by its ``latency``.

    One Brian2 ``run`` of ``warmup + count * period`` (and the largest latency after it); a
    network operation at the end of every step opens each window (:class:`Window`) at its
    start, takes its ``n_chunks`` chunk counts and reads it at its end, as :func:`measure` does
    for one window.

    Parameters
    ----------
    period : float
        Presentation period (s).
    count : int
        Presentations.
    lag : float
        Time (s) from a presentation's start to its window's: ``0 <= lag < period``.
    read_state : callable, optional
        Without spiking probes (the rate level): ``read_state()`` -> the observables of every
        population, read at the end of each presentation instead of window means, and at 90 %
        of it (``early``: how much the state still moved, the settling check).

    Returns
    -------
    dict
        ``snapshots``: one ``(window length, {population: observables})`` per presentation, in
        order; ``chunks``: population -> ``(count, n_chunks, N)`` spike counts; ``run``: wall
        time (s); ``early``: with ``read_state`` and no probes, the state at 90 % of each
        presentation (one per presentation, in order), else empty.
    on_read : callable, optional
        ``on_read(k, observables)`` at the end of presentation ``k``'s window, inside the run (a
        closed loop: what it changes, e.g. the next presentation's input table, takes effect at
        once); ``observables`` as in ``snapshots``. Not with a ``latency``.
    latency : dict, optional
        Population -> delay (s, ``0 <= delay < period``) of its windows: ``[lag + delay,
        period + delay)`` after each presentation's start, the stage's response latency (a
        read-out reading the class cells of a chain whose somata follow an input over hundreds
        of ms). Populations not named: 0. The run goes on for the largest delay after the last
        presentation (its input stays on).
    """
    if not 0 <= lag < period:
        raise ValueError(f"lag: expected 0 <= lag < period = {period} s, got {lag}")
    delays = stream_delays(latency, period, probes)
    if on_read is not None and any(delays.values()):
        raise ValueError("latency: a closed loop (on_read) reads each presentation at its end; a delayed window "
                         "would end in the next one")
    dt = float(clock.dt_)
    warmup = max(float(warmup), 0.0)
    t0 = float(network.t_) + warmup      # the stream's start: the warm-up is part of the one run
    T_win = period - lag
    groups = {}   # the probes read together: one group per delay
    for p, probe in probes.items():
        groups.setdefault(delays.get(p, 0.0), {})[p] = probe
    # (time since the stream began, action, presentation, group's delay)
    marks = []
    windows, states = window_times(period, count, lag, n_chunks), state_times(period, count)
    for k in range(count):
        for d in groups:
            marks.append((windows[k, 0] + d, "open", k, d))
            marks.extend((e + d, "chunk", k, d) for e in windows[k, 1:-1])
            marks.append((windows[k, -1] + d, "read", k, d))
        if read_state is not None and not probes:
            marks.append((states[k, 0], "early", k, 0.0))
        if not probes:
            marks.append((states[k, 1], "read", k, 0.0))
    # by step (equal times computed two ways differ in the last bit), then a window's last chunk
    # and read before the next window's opening on the same step (a window starting at 0 lag)
    order = ("chunk", "early", "read", "open")
    marks.sort(key=lambda m: (round(m[0] / dt), order.index(m[1]), m[3]))
    snapshots, chunks, early = [], {p: [] for p in probes}, []
    state = {d: {"window": None, "counts": None} for d in groups}
    pending = {}   # presentation -> the groups' observables read so far

    def take(elapsed):
        """Every mark due ``elapsed`` s after the stream's start."""
        while marks and elapsed >= marks[0][0] - 0.5 * dt:
            _, what, _k, d = marks.pop(0)
            st, group = state.get(d), groups.get(d)
            if what == "open":
                st["window"] = Window(group, t0 + elapsed)
                st["counts"] = {p: [st["window"].start_counts(p)] for p in group}
            elif what == "chunk":
                for p, probe in group.items():
                    st["counts"][p].append(probe.counts())
            elif what == "early":
                early.append(read_state())
            elif probes:
                for p, probe in group.items():
                    st["counts"][p].append(probe.counts())
                got = pending.setdefault(_k, {})
                got.update({p: st["window"].read(p, T_win) for p in group})
                for p, c in st["counts"].items():
                    chunks[p].append(np.diff(np.stack(c), axis=0))
                if len(got) == len(probes):   # every group read: the presentation's snapshot
                    snapshots.append((T_win, {p: got[p] for p in probes}))
                    del pending[_k]
                    if on_read is not None:
                        on_read(_k, snapshots[-1][1])
            else:
                snapshots.append((period, read_state()))
                if on_read is not None:
                    on_read(_k, snapshots[-1][1])

    def at_step_end(t):
        take(float(t[:]) + dt - t0)

    take(float(network.t_) - t0)     # a window opening at the stream's start, with no warm-up
    op = b2.NetworkOperation(at_step_end, clock=clock, when="end", order=1000, name="stream_marks")
    network.add(op)
    try:
        t_run = run(warmup + count * period + max(delays.values(), default=0.0), report)
    finally:
        network.remove(op)
    if marks:
        raise RuntimeError(f"measure_stream: {len(marks)} marks were not reached in {count} x {period} s")
    return dict(snapshots=snapshots, chunks={p: np.stack(c) for p, c in chunks.items()}, run=t_run, early=early)


def window_times(period: float, count: int, lag: float, n_chunks: int) -> np.ndarray:
    """When a stream's windows are read (s, from the stream's start): per presentation its
    window's opening and its ``n_chunks`` chunk ends (the last: the window's end), shape
    ``(count, n_chunks + 1)``; the marks of :func:`measure_stream` and :func:`stream_steps`."""
    ends = chunk_ends(period - lag, n_chunks)
    return np.array([[k * period + lag, *(k * period + lag + e for e in ends)] for k in range(count)],
                    float).reshape(count, n_chunks + 1)


def stream_delays(latency: dict | None, period: float, populations) -> dict:
    """``latency`` (population -> delay, s) checked against a stream's ``period`` and its
    ``populations``: every delay a real number in ``[0, period)``, every name a population; a
    ``ValueError`` naming ``latency`` otherwise. Returns population -> delay (s) of the named ones."""
    out = {}
    for name, d in dict(latency or {}).items():
        if name not in populations:
            raise ValueError(f"latency: {name!r} is not a measured population of this stream "
                             f"({', '.join(map(str, populations))})")
        if isinstance(d, bool) or not isinstance(d, (int, float, np.integer, np.floating)) or not 0 <= d < period:
            raise ValueError(f"latency: the delay of {name!r} must be seconds in [0, {period:g}) (the "
                             f"presentation), got {d!r}")
        out[name] = float(d)
    return out


def state_times(period: float, count: int) -> np.ndarray:
    """When a stream without spiking probes is read (s, from its start): per presentation at 90 %
    of it (how far it has settled) and at its end, shape ``(count, 2)``."""
    return np.array([[k * period + 0.9 * period, k * period + period] for k in range(count)],
                    float).reshape(count, 2)


def stream_steps(period: float, count: int, lag: float, n_chunks: int, dt: float) -> np.ndarray:
    """Where :func:`measure_stream` reads its windows, for a run read after it ends: the step
    boundaries (from the stream's start, in steps of ``dt``) of :func:`window_times`. A read at
    boundary ``s`` holds the spikes of steps ``< s`` and the integrals after step ``s - 1``:
    :func:`measure_stream` takes a mark ``m`` at the end of the first step that reaches ``m - dt/2``."""
    if not 0 <= lag < period:
        raise ValueError(f"lag: expected 0 <= lag < period = {period} s, got {lag}")
    return np.ceil(window_times(period, count, lag, n_chunks) / dt - 0.5).astype(np.int64)


def stream_state_steps(period: float, count: int, dt: float) -> np.ndarray:
    """Where :func:`measure_stream` reads the state of a run without spiking probes (``read_state``):
    the step boundaries of :func:`state_times`; see :func:`stream_steps`."""
    return np.ceil(state_times(period, count) / dt - 0.5).astype(np.int64)


def counts_before(cells, steps, N: int, bounds) -> np.ndarray:
    """Spikes per cell before each step boundary: ``out[..., c]`` counts cell ``c``'s spikes
    (``cells``, at step indices ``steps``) in the steps ``< bounds[...]``; shape
    ``bounds.shape + (N,)``."""
    bounds = np.asarray(bounds, np.int64)
    flat = bounds.ravel()
    order = np.argsort(flat, kind="stable")
    # a spike is counted from the first boundary past its step on
    first = np.searchsorted(flat[order], np.asarray(steps, np.int64), side="right")
    hist = np.bincount(first * N + np.asarray(cells, np.int64), minlength=(flat.size + 1) * N)
    cum = np.cumsum(hist.reshape(flat.size + 1, N), axis=0)[:-1]
    out = np.empty((flat.size, N))
    out[order] = cum
    return out.reshape(*bounds.shape, N)


def window_counts(cells, steps, N: int, marks, block: int = 1 << 24) -> tuple:
    """Spikes per cell in each presentation's window and the spread of its chunk counts, from
    one run's spikes, without :func:`counts_before`'s cumulative counts before every mark (on the
    digits stream, 497 windows of 10 chunks over 70,830 cells: 3 GB, most of a compiled run's
    read-back).

    Parameters
    ----------
    cells, steps : array of int
        Each spike's cell and step (from the stream's start).
    N : int
        Cells of the population.
    marks : array of int, shape (count, n_chunks + 1)
        Each window's opening and chunk ends (:func:`stream_steps`), non-decreasing overall.
    block : int
        Most chunk counts held at once (a window's are ``n_chunks × N``).

    Returns
    -------
    totals : ndarray, shape (count, N)
        Spikes per cell in each window (steps ``marks[k, 0] <= s < marks[k, -1]``).
    sums : tuple of float
        ``(sum over windows and cells of the chunk-count variance (ddof 1), sum of the mean chunk
        count)``, as :func:`fano_sums` gives them on the chunk counts (nan variance for one chunk).
    """
    marks = np.asarray(marks, np.int64)
    count, B = marks.shape
    C, flat = B - 1, marks.ravel()
    if np.any(np.diff(flat) < 0):
        raise ValueError("marks: the windows' openings and chunk ends must not decrease")
    cells, steps = np.asarray(cells, np.int64), np.asarray(steps, np.int64)
    if np.any(np.diff(steps) < 0):                       # a monitor records in time order; others are sorted
        order = np.argsort(steps, kind="stable")
        cells, steps = cells[order], steps[order]
    # the spikes of interval q (flat[q] <= step < flat[q + 1]) are cells[first[q]:first[q + 1]]
    first = np.searchsorted(steps, flat, side="left")
    totals = np.zeros((count, N))
    sq = tot_sq = tot = 0
    per = max(1, int(block) // max(C * N, 1))            # windows per block
    for w0 in range(0, count, per):
        w1 = min(w0 + per, count)
        q = np.arange(w0 * B, (w1 - 1) * B + C)           # the block's chunks and the lags between them
        k, j = np.divmod(q - w0 * B, B)
        # each chunk's counts at (window, chunk, cell); a lag's spikes go to a bin past them
        offset = np.where(j < C, (k * C + j) * N, (w1 - w0) * C * N)
        lo, hi = first[q[0]], first[q[-1] + 1]
        key = cells[lo:hi] + np.repeat(offset, np.diff(first[q[0]:q[-1] + 2]))
        h = np.bincount(key, minlength=((w1 - w0) * C + 1) * N)[:(w1 - w0) * C * N].reshape(w1 - w0, C, N)
        w = h.sum(axis=1)
        totals[w0:w1] = w
        sq += int(np.sum(h * h))
        tot_sq += int(np.sum(w * w))
        tot += int(w.sum())
    var = (sq - tot_sq / C) / (C - 1) if C > 1 else float("nan")
    return totals, (float(var), tot / C)


def window_snapshots(totals: dict, integrals: dict, T: float) -> list:
    """One ``(T, {population: observables})`` per window (:func:`window_observables`) from each
    population's spikes per window and cell ``(count, N)`` and its integrals ``{variable:
    (count, 2, N)}`` at each window's opening and end (SI x s)."""
    n = len(next(iter(totals.values()))) if totals else 0
    return [(T, {p: window_observables({v: (a[k, 1] - a[k, 0]) / T for v, a in integrals[p].items()}, c[k], T)
                 for p, c in totals.items()}) for k in range(n)]


def stream_windows(counts: dict, integrals: dict, T: float) -> dict:
    """The windows of a stream read after its run, as :func:`measure_stream` returns them.

    Parameters
    ----------
    counts : dict
        Population -> ``(count, n_chunks + 1, N)`` spikes per cell before each window's opening
        and chunk ends (:func:`stream_steps`, :func:`counts_before`).
    integrals : dict
        Population -> ``{variable: (count, 2, N)}``: its window integral ``acc_<variable>`` at
        each window's opening and end (SI x s).
    T : float
        Window length (s).

    Returns
    -------
    dict
        ``snapshots``: one ``(T, {population: observables})`` per presentation
        (:func:`window_observables`); ``chunks``: population -> ``(count, n_chunks, N)``.
    """
    snapshots = window_snapshots({p: c[:, -1] - c[:, 0] for p, c in counts.items()}, integrals, T)
    return dict(snapshots=snapshots, chunks={p: np.diff(c, axis=1) for p, c in counts.items()})
