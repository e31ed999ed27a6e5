"""Runners: one object per way of running a described, encoded circuit.

=========================  ======================================================================
:class:`RuntimeRunner`     Brian2's runtime device in this process (numpy or Cython code). Builds
                           the network at once, so a user can reach it (``.network``) and add
                           monitors before running; the only runner that reads the network during
                           a run (checkpoints, the rate level's settling check).
:class:`StandaloneRunner`  ``cpp_standalone``: compiles the network shape once into a cached C++
                           project (the run schedule is part of the shape, so it builds when the
                           duration is known) and passes tokens, weights and seed as run arguments
                           (also ``cuda_standalone`` through brian2cuda, where installed). A stream
                           (``cpp_standalone``): its rate table is a run argument, its
                           presentations read from monitors after the run.
:class:`SplitRunner`       The pathway split at its nuclei, every head a task on dask
                           (:mod:`ctmhsa.sims.distributed`); one network per stage, on the workers; heads
                           on the runtime or a standalone device (one project per head shape).
=========================  ======================================================================

Every runner returns the same typed :class:`Observations`; :func:`runner_for` is the one place
that looks at the device and scheduler options. A device (:mod:`ctmhsa.devices.registry`) is run
by the runner registered for its name (:func:`register_runner`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from dataclasses import dataclass, field

import brian2 as b2

from ctmhsa.circuits import perturb
from ctmhsa.devices.registry import DEVICES, get_device
from ctmhsa.circuits.graph import Circuit
from ctmhsa.circuits.instantiate import instantiate
from ctmhsa.devices.standalone import StreamRead, padded_stream, project_key, run_project
from ctmhsa.mapping.encode import Encoding
from ctmhsa.neurons.window import (counts_as_rates, fano_from_sums, measure_stream, stream_delays, stream_state_steps,
                                   stream_steps)

from .distributed import run_split
from .options import N_CHUNKS, CircuitOptions, RunOptions, decode_lag, stream_chunks
from .progress import RunProgress, binary_progress, compile_announcer

log = logging.getLogger(__name__)

__all__ = ["Observations", "Runner", "RuntimeRunner", "StandaloneRunner", "SplitRunner", "runner_for",
           "register_runner", "RUNNERS", "SPLIT"]


@dataclass
class Observations:
    """What one run measured, whichever runner ran it.

    Attributes
    ----------
    snapshots : list of (float, dict)
        ``(T, {population: observables})``: at the spiking levels the window observables
        (``r`` the measured spike rate, ``expected_r`` the window-mean intensity, ``count``,
        ``T``; see :func:`ctmhsa.neurons.window.window_observables`) at every checkpoint and at the end
        of the window (last); at the rate level one entry, the final state.
    chunks : dict
        Spiking population -> spike counts per chunk and cell, ``(n_chunks, N)``.
    spikes : dict
        Population -> ``(cell_index, time_s)`` of the recorded populations.
    fano : dict, optional
        Population -> pooled Fano factor, where the runner reduced ``chunks`` itself (split
        runs reduce every head on its worker, a compiled stream every window as it reads it);
        ``None``: computed from ``chunks``.
    early : dict or list, optional
        Rate level on the runtime device: the observables at 90 % of the run (settling check);
        of a stream, one such dict per presentation (at 90 % of it).
    stream : bool
        A stream of token sets: ``snapshots`` holds one window per presentation, in order, and
        ``chunks`` per population ``(presentations, n_chunks, N)`` (empty where ``fano`` is given).
    build, compile, run : float
        Wall-clock seconds creating Brian2 objects, generating/compiling code, simulating.
    compiled : int
        Cython modules compiled for this run (0: all loaded from the cache, or no Cython), the
        part of ``compile`` a later run on this machine does not pay.
    """

    snapshots: list
    chunks: dict = field(default_factory=dict)
    spikes: dict = field(default_factory=dict)
    fano: dict | None = None
    early: dict | None = None
    stream: bool = False
    build: float = float("nan")
    compile: float = float("nan")
    run: float = float("nan")
    compiled: int = 0

    @property
    def final(self) -> dict:
        """Observables at the end of the run (the last snapshot)."""
        return self.snapshots[-1][1]


class Runner:
    """A way of running ``circuit`` with the encoded ``encoding`` under ``options``.

    Subclasses implement :meth:`run`; those that hold a network before running expose it.
    """

    lag = None
    """Seconds from a presentation's start to its decoding window (``None``:
    :func:`ctmhsa.sims.options.decode_lag`); a deeper circuit needs longer."""

    on_read = None
    """``on_read(k, observables)`` at the end of a stream's presentation ``k``, inside the run
    (:func:`ctmhsa.neurons.window.measure_stream`; the runtime device only): a closed loop."""

    latency = None
    """Population -> delay (s) of its windows in a stream, after ``lag``
    (:func:`ctmhsa.neurons.window.measure_stream`); ``None``: none delayed."""

    def __init__(self, circuit: Circuit, encoding: Encoding, inputs, options: CircuitOptions,
                 run_options: RunOptions):
        self.circuit, self.encoding, self.inputs = circuit, encoding, inputs
        self.options, self.run_options = options, run_options
        # perturbations against the run's span and step, before any network is built
        ro = run_options
        if circuit.meta.perturbations:
            perturb.check_run(circuit, float(ro.warmup or 0.0) + float(ro.duration),
                              float(ro.dt) if options.spiking and ro.dt else None)

    @classmethod
    def check(cls, options: CircuitOptions, run_options: RunOptions) -> None:
        """Raise ``ValueError`` if this runner cannot run ``run_options`` (before any build)."""
        if run_options.checkpoints:
            raise ValueError("checkpoints: only the runtime device reads the network during a run; "
                             "use device='runtime' (scheduler=None) or separate runs")
        why = cls.stream_refusal(options, run_options) if run_options.presentation is not None else None
        if why:
            raise ValueError(f"presentation: {why}")

    @classmethod
    def stream_refusal(cls, options: CircuitOptions, run_options: RunOptions) -> str | None:
        """Why this runner cannot run the stream of ``run_options`` (``None``: it can)."""
        return "a stream runs as one network, on the runtime device or on cpp_standalone; use scheduler=None"

    def config(self) -> dict:
        """Entries of the result's configuration that only this runner knows."""
        return dict(threads=None)

    @property
    def network(self):
        """The ``brian2.Network`` (only a runner that builds before running has one)."""
        return self.built.network

    @property
    def built(self):
        """The :class:`ctmhsa.circuits.instantiate.BuiltCircuit` (runtime runner only)."""
        raise RuntimeError(
            f"network: the {type(self).__name__} builds its network(s) when it runs (the standalone "
            "device compiles the run schedule into the project; a split run has one network per "
            "stage on the workers); use device='runtime' and scheduler=None to reach the Brian2 network")

    def set_values(self, pop: str, params: dict) -> None:
        """New per-cell parameters of ``pop`` (already in ``self.encoding``): a runner that builds
        when it runs reads them from the encoding then; one holding a network writes them."""

    def _no_callback(self) -> None:
        """Refuse :attr:`on_read` where the run cannot call back into this process."""
        if self.on_read is not None:
            raise ValueError(f"on_read: a closed loop runs on the runtime device; the {type(self).__name__} runs "
                             "its network outside this process")

    def run(self, run_options: RunOptions) -> Observations:  # pragma: no cover - interface
        raise NotImplementedError

    def _instantiate(self, run_options: RunOptions, stream: dict | None = None, **kw):
        o = self.options
        return instantiate(self.circuit, o.neuron, self.encoding.values, phi=o.phi, params=o.params,
                           dt=run_options.dt, seed=run_options.seed, record_spikes=run_options.record_spikes,
                           law=o.law, fold=o.fold, stream=stream or self.encoding.stream or None, coupling=o.coupling,
                           **kw)

    def _stream_timing(self, ro: RunOptions) -> tuple:
        """``(presentations, lag, chunks per window)`` of the stream of ``ro``."""
        P = ro.presentation
        lag = decode_lag(P) if self.lag is None else self.lag
        return int(round(ro.duration / P)), lag, stream_chunks(P - lag, self.options)


def _bar(options: CircuitOptions, run_options: RunOptions) -> RunProgress | None:
    """The progress bar of ``report="progress"``: biological time of warm-up and window."""
    if run_options.report != "progress":
        return None
    ro = run_options
    total = ro.duration + (ro.warmup if options.spiking else 0.0)
    return RunProgress(total, f"{options.neuron} level")


@contextlib.contextmanager
def _ticking(built, bar: RunProgress | None, every: int = 20):
    """Move ``bar`` to the network time every ``every`` steps (Brian2 calls a report callable
    only every 10 s of wall time); a network operation, so it draws no random number and
    changes no spike."""
    if bar is None:
        yield
        return
    net, step = built.network, [0]

    def tick():
        step[0] += 1
        if step[0] % every == 0:
            bar.update_to(float(net.t_))

    op = b2.NetworkOperation(tick, clock=built.clock, when="end", order=2000, name="progress_tick")
    net.add(op)
    try:
        yield
    finally:
        net.remove(op)
        bar.update_to(float(net.t_))
        bar.close()


def _recorded(built, ro: RunOptions) -> dict:
    return {p: built.spike_trains(p) for p in built.monitors if ro.records(p)}


class RuntimeRunner(Runner):
    """Brian2's runtime device, in this process; the network exists from construction on."""

    @classmethod
    def check(cls, options, run_options):   # reads the network during the run: checkpoints work
        pass

    def __init__(self, *args):
        super().__init__(*args)
        self._built = self._instantiate(self.run_options, codegen=self.run_options.codegen)

    @property
    def built(self):
        return self._built

    def set_values(self, pop, params):
        for var, val in params.items():
            self._built.set_cells(pop, var, val)

    def run(self, run_options: RunOptions) -> Observations:
        built, ro = self.built, run_options
        log.info("generating code (%s target)", ro.codegen)
        built.prepare(bar=compile_announcer(ro.report))
        bar = _bar(self.options, ro)
        report = bar if bar is not None else ro.report
        with _ticking(built, bar):
            if ro.presentation is not None:
                return dataclasses.replace(self._stream(built, ro, report), compile=built.preparation,
                                           compiled=built.compiled["modules"])
            if not built.spiking:
                # one run; its observables read at 90 % of the time too: the change of each over the
                # last 10 % says how settled the rate dynamics are, without looking at the reference
                m = measure_stream(built.network, {}, built.clock, built.run, 0.0, ro.duration, 1, 0.0,
                                   report=report, read_state=lambda: {p: built.read(p) for p in self.circuit.populations})
                return Observations([(ro.duration, m["snapshots"][0][1])], early=m["early"][0], build=built.build_time,
                                    compile=built.preparation, run=m["run"], compiled=built.compiled["modules"])
            m = built.measure(ro.warmup, ro.duration, N_CHUNKS, ro.checkpoints, report)
        return Observations([(t, counts_as_rates(o)) for t, o in m["snapshots"]], m["chunks"],
                            _recorded(built, ro), build=built.build_time,
                            compile=built.preparation, run=m["run"], compiled=built.compiled["modules"])


    def _stream(self, built, ro: RunOptions, report) -> Observations:
        """A stream of token sets: one window per presentation (see :func:`ctmhsa.neurons.window.measure_stream`)."""
        count, lag, n_chunks = self._stream_timing(ro)
        read_state = None if built.spiking else (lambda: {p: built.read(p) for p in self.circuit.populations})
        on_read = None if self.on_read is None else (
            lambda k, o: self.on_read(k, counts_as_rates(o) if built.spiking else o))
        m = measure_stream(built.network, built.probes(), built.clock, built.run, ro.warmup, ro.presentation, count,
                           lag, n_chunks, report, read_state, on_read, latency=self.latency)
        snaps = [(t, counts_as_rates(o) if built.spiking else o) for t, o in m["snapshots"]]
        return Observations(snaps, m["chunks"], _recorded(built, ro), build=built.build_time,
                            compile=built.preparation, run=m["run"], stream=True, early=m["early"] or None)


class StandaloneRunner(Runner):
    """``cpp_standalone``: one compiled project per network shape, cached.

    A stream (``cpp_standalone``) compiles its shape in: the relays' table of rates padded to
    :func:`ctmhsa.devices.standalone.stream_rows` rows, its presentation period, the warm-up's
    shift and the step its reads are sampled at (:class:`ctmhsa.devices.standalone.StreamRead`);
    its rates are run arguments. Streams of other tokens, or of another length up to the padded
    one, reuse the project.

    ``rebind`` (``rebind(built, run_args)``, set by a caller that runs many tasks of one shape:
    :func:`ctmhsa.sims.train.train_mhsa`) keeps the built network in this process after its run,
    and a later run of the same project only writes its values as run arguments and runs the
    binary (:func:`ctmhsa.devices.standalone.run_project`); not for a stream.
    """

    rebind = None

    @classmethod
    def stream_refusal(cls, options, run_options):
        if not get_device(run_options.device).run_args:
            takes = [n for n in DEVICES if get_device(n).run_args]
            return (f"a stream compiles on a device that takes its rates as run arguments ({', '.join(takes)}; "
                    f"not {run_options.device!r}); use device='cpp_standalone' or 'runtime'")
        return None

    def config(self) -> dict:
        return dict(threads=self.run_options.threads)   # compiled into the project

    def run(self, run_options: RunOptions) -> Observations:
        self._no_callback()
        o, ro = self.options, run_options
        stream, read, duration = None, None, ro.duration
        if ro.presentation is not None:
            count, lag, n_chunks = self._stream_timing(ro)
            stream = padded_stream(self.encoding.stream)
            P = ro.presentation
            delays = stream_delays(self.latency, P, self.circuit.populations)
            read = StreamRead(int(round(ro.warmup / ro.dt)), stream_steps(P, count, lag, n_chunks, ro.dt), P - lag,
                              stream, delays={p: int(round(d / ro.dt)) for p, d in delays.items()}) if o.spiking \
                else StreamRead(0, stream_state_steps(P, count, ro.dt), P, stream, spiking=False)
            # the delayed windows' tail, and a sample at the stream's end
            duration += (max(read.delays.values(), default=0) + read.EXTRA_STEPS) * ro.dt
        key = project_key(self.circuit, o.neuron, o.phi, o.params, ro.dt, (ro.warmup, ro.duration, N_CHUNKS),
                          ro.threads, law=o.law, fold=o.fold, device=ro.device, seed=ro.seed, coupling=o.coupling,
                          record=ro.record_spikes or (), stream=None if read is None else read.key())
        bar = _bar(o, ro)
        # the binary prints Brian2's text report; binary_progress reads it into the bar
        # a spiking stream's cells count each window's spikes (a table of each step's chunk: run argument)
        chunks = None if read is None or not o.spiking else read.chunks(ro.dt)
        with binary_progress(bar):
            built, sa = run_project(key, lambda: self._instantiate(ro, stream=stream, run_args={}, chunks=chunks),
                                    ro.warmup, duration, ro.threads, N_CHUNKS, ro.device,
                                    bar if bar is not None else ro.report, stream=read,
                                    rebind=None if read is not None else self.rebind)
        if bar is not None:
            bar.update_to(bar.total)
            bar.close()
        if read is not None:
            # (not the extra step's spikes)
            m, end = sa["stream"], ro.warmup + duration - (read.EXTRA_STEPS + 0.5) * ro.dt
            spikes = {p: (i[t < end], t[t < end]) for p, (i, t) in sa["spikes"].items()}
            return Observations([(t, counts_as_rates(snap) if o.spiking else snap) for t, snap in m["snapshots"]],
                                m["chunks"], spikes, fano=m.get("fano"), build=built.build_time,
                                compile=sa["compile"], run=sa["run"], stream=True, early=m["early"] or None)
        return Observations([(ro.duration, counts_as_rates(sa["obs"]))], {}, sa["spikes"],
                            fano=fano_from_sums(sa["fano"]), build=built.build_time, compile=sa["compile"],
                            run=sa["run"])


class SplitRunner(Runner):
    """The pathway split at its nuclei; every head a task (see :mod:`ctmhsa.sims.distributed`).

    Heads run on ``run_options.device``: the runtime device, or a standalone device with one
    compiled project per head shape (and nucleus-1 spike train) that every head on every worker
    reuses through run arguments. The thalamic stages run on the runtime device.
    """

    @classmethod
    def check(cls, options, run_options):
        if not options.spiking:
            raise ValueError("scheduler: heads are split at the spiking levels; the rate level is "
                             "deterministic and runs as one network (scheduler=None)")
        if run_options.presentation is not None:
            super().check(options, run_options.replace(checkpoints=()))   # (the stream's refusal)
        if run_options.checkpoints:
            raise ValueError("scheduler: a split run has no checkpoints (only the runtime device "
                             "reads one network during a run); use scheduler=None")

    def config(self) -> dict:
        ro = self.run_options
        return dict(threads=ro.threads if get_device(ro.device).threads else None)

    def run(self, run_options: RunOptions) -> Observations:
        self._no_callback()
        o, ro = self.options, run_options
        record = None if ro.record_spikes is True else tuple(ro.record_spikes or ())
        sa = run_split(self.circuit, self.encoding, self.inputs, o, ro, N_CHUNKS, record=record)
        return Observations([(ro.duration, counts_as_rates(sa["obs"]))], {}, sa["spikes"], fano=sa["fano"],
                            compile=sa["compile"], run=sa["run"])


SPLIT = "split"
"""Key of the runner of a split run (a scheduler given), whatever the device of its heads."""

RUNNERS: dict[str, type[Runner]] = {}
"""Runner per registered device (:data:`ctmhsa.devices.registry.DEVICES`) and for :data:`SPLIT`;
:func:`runner_for` picks one from the run options."""


def register_runner(name: str, runner: type[Runner]) -> type[Runner]:
    """Run the device ``name`` (registered in :mod:`ctmhsa.devices.registry`, or :data:`SPLIT`) with
    ``runner``. Returns ``runner``."""
    if name != SPLIT:
        get_device(name)   # a runner for a device nobody declared is a typo
    if not (isinstance(runner, type) and issubclass(runner, Runner)):
        raise TypeError(f"register_runner: expected a Runner subclass, got {runner!r}")
    RUNNERS[name] = runner
    return runner


def runner_for(run_options: RunOptions) -> type[Runner]:
    """The runner class of ``run_options``: split when a scheduler is given, else the device's."""
    name = SPLIT if run_options.scheduler is not None else run_options.device
    if name not in RUNNERS:
        raise ValueError(f"device: {name!r} has no runner (ctmhsa.sims.runners.register_runner)")
    return RUNNERS[name]


register_runner("runtime", RuntimeRunner)
register_runner("cpp_standalone", StandaloneRunner)
register_runner("cuda_standalone", StandaloneRunner)
register_runner(SPLIT, SplitRunner)
