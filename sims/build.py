"""Build, then run: :func:`build_mhsa` makes a :class:`Simulation`; :meth:`Simulation.run` runs it.

As in Nengo's Builder/Simulator split: building validates every argument, describes the
pathway (:func:`ctmhsa.circuits.builders.pathway`), checks that it fits in memory, encodes tokens and
weights into rates, synaptic weights and biases (:mod:`ctmhsa.mapping.encode`) and hands them to the
runner of the run options (:mod:`ctmhsa.sims.runners`). On the runtime device the Brian2 network then
exists, and a user may add monitors to ``sim.network`` before ``sim.run()``::

    sim = build_mhsa(X, WQ, WK, WV, WO, neuron="escape")
    mon = brian2.StateMonitor(sim.groups["l23"], "V_a", record=[0, 1])
    sim.network.add(mon)
    res = sim.run(2 * brian2.second)    # warm-up (0.5 s by default) + a 2 s window: 2.5 s simulated
    res = sim.run(2 * brian2.second, warmup=0.2 * brian2.second)   # (a fresh sim) 2.2 s simulated

The result states its clock: ``res.warmup``, ``res.duration``, and the window ``[res.t_start,
res.t_stop)`` on the clock of the spike times (t = 0 at the start of the warm-up).
"""

from __future__ import annotations

import logging
import time

import numpy as np

from ctmhsa.circuits import dale, perturb
from ctmhsa.circuits.fold import fold_plan, simulated_synapse_count
from ctmhsa.circuits.perturb import check_perturbations
from ctmhsa.circuits.memory import BASE_BYTES, estimate_memory, stream_memory
from ctmhsa.circuits.parts import get_area
from ctmhsa.devices.registry import get_device
from ctmhsa.mapping import kvmemory, triad  # noqa: F401 - the stream's and Co4's hooks
from ctmhsa.mapping.baseline import add_lif_drive
from ctmhsa.mapping.encode import check_tokens, encode, relay_rates
from ctmhsa.maths.inputs import as_input_range
from ctmhsa.mapping.operating import apical_needed

from . import profile
from .cost import RUN_COST, estimate_runtime  # noqa: F401 - re-exported
from .options import (AUTO_CYTHON_SYNAPSES, DEFAULT_DT, DEFAULT_PRESENTATION, N_CHUNKS, CircuitOptions, RunOptions,
                      check_applies, check_record_spikes, check_run, given_options, level_lag, settling_constant,
                      split_options)
from .readout import read_out
from .result import SimulationResult
from .runners import Runner, runner_for
from .validate import Inputs, available_memory, check_inputs

__all__ = ["build_mhsa", "Simulation", "estimate_runtime", "RUN_COST"]

log = logging.getLogger(__name__)

class Simulation:
    """A built simulation of multihead attention in the cortico-thalamic pathway.

    Attributes
    ----------
    circuit : ctmhsa.circuits.graph.Circuit
        The description (populations, projections), as built.
    options : CircuitOptions
    run_options : RunOptions
        Resolved (level defaults filled in).
    encoding : ctmhsa.mapping.encode.Encoding
        Rates, weights and biases the circuit was given.
    reference : dict
        The exact stages (the attention area's :meth:`ctmhsa.circuits.parts.Part.reference`), for
        comparison only.
    runner : ctmhsa.sims.runners.Runner
    memory_estimate : int
        Estimated memory of the network (bytes).
    runtime_estimate : float
        Estimated wall time of the run (s, :func:`estimate_runtime`; building and compiling
        excluded).
    """

    def __init__(self, circuit, encoding, reference, inputs: Inputs, sizes: dict, options: CircuitOptions,
                 run_options: RunOptions, runner: Runner, memory_estimate: int, simulated_synapses: int,
                 t_start: float, runtime_estimate: float = float("nan")):
        self.circuit, self.encoding, self.reference, self.inputs, self.sizes = circuit, encoding, reference, inputs, sizes
        self.options, self.run_options, self.runner = options, run_options, runner
        self.memory_estimate, self.simulated_synapses = memory_estimate, simulated_synapses
        self._t_start, self._ran = t_start, False
        self.runtime_estimate = runtime_estimate   # checked against max_runtime in build_mhsa
        self.observations = None   # what the runner measured (ctmhsa.sims.runners.Observations), after run()

    @property
    def network(self):
        """The ``brian2.Network`` (runtime device, one network): add monitors before :meth:`run`."""
        return self.runner.network

    @property
    def groups(self) -> dict:
        """Population name -> Brian2 group (runtime device)."""
        return self.runner.built.groups

    def set_tokens(self, X, Y=None) -> None:
        """Show this built circuit other tokens: only the thalamic relays' rates change.

        Every other value of the circuit came from the weights and the declared input range
        (``input_range``), so the same network (the same compiled project on a standalone device)
        runs any tokens of that range. Call before :meth:`run`.

        Parameters
        ----------
        X : array (n, de)
            Query tokens, of the shape the circuit was built for.
        Y : array (m, de), optional
            Key/value tokens (cross-attention circuits only).

        Raises
        ------
        ValueError
            Wrong shape, tokens outside the declared range, tokens the circuit cannot divide
            (:class:`ctmhsa.mapping.operating.OperatingRangeError`), or a simulation that already ran.
        """
        if self._ran:
            raise RuntimeError("set_tokens: this simulation has already run; build a new one")
        if self.run_options.presentation is not None:
            raise ValueError("set_tokens: this circuit was built for a stream; build it for the new stream")
        x, b = self.inputs, self.inputs.block
        if (Y is not None) != (x.Y is not None):
            raise ValueError("Y: " + ("this circuit has no second nucleus (built without Y)" if Y is not None
                                      else "this cross-attention circuit needs key/value tokens Y"))
        a = check_inputs(X, b.WQ, b.WK, b.WV, b.WO, Y=Y, WS=b.WS, causal=self.options.causal,
                         normalize=self.options.normalize, phi=self.options.phi)
        for k, built in (("X", x.X), ("Y", x.Y)):
            if a[k] is not None and a[k].shape != built.shape:
                raise ValueError(f"{k}: expected shape {built.shape} (the circuit as built), got {a[k].shape}")
        enc, co, c = self.encoding, self.options, self.encoding.consts
        check_tokens(self.circuit, c["input_range"], c["operating"], c["R_set"], a["X"], a["Y"], b, co.phi)
        rates = relay_rates(self.circuit, enc.codes["tokens"], a["X"], a["Y"], enc.consts["onoff"])
        for pop, vals in rates.items():
            enc.values.params[pop].update(vals)
            self.runner.set_values(pop, vals)
        self.inputs = Inputs(a["X"], a["Y"], b)
        self.runner.inputs = self.inputs
        self.reference = _reference(self.inputs, co, self.run_options)

    def run(self, duration=None, warmup=None) -> SimulationResult:
        """Simulate ``warmup + duration`` and read the result out.

        Parameters
        ----------
        duration : float or brian2 Quantity, optional
            At the spiking levels the measurement window (s or a Brian2 time); at the rate
            level the simulated time, whose final state is decoded. Default
            ``run_options.duration``.
        warmup : float or brian2 Quantity, optional
            Spiking levels: simulated before the window and discarded (default
            ``run_options.warmup``, :data:`ctmhsa.sims.options.DEFAULT_WARMUP` of the level);
            the rate level has none.

        Returns
        -------
        SimulationResult
            Its clock is the network's: t = 0 at the start of the warm-up. The window is
            ``[res.t_start, res.t_stop)`` = ``[warmup, warmup + duration)``; spike times are on
            that clock (recorded warm-up spikes come before ``t_start``,
            :meth:`SimulationResult.window_spikes` keeps the window's) and every rate is the
            window's spike count / ``duration``.

        Raises
        ------
        ValueError
            A bad ``duration``/``warmup`` (checked as in :func:`build_mhsa`, with the run-time
            estimate) — before anything runs.
        RuntimeError
            The simulation has already run: a simulation runs once (its window starts after the
            warm-up of a fresh network); build another for another run.
        """
        if self._ran:
            raise RuntimeError("run: this simulation has already run; build a new one (ctmhsa.sims.build_mhsa)")
        changes = {k: v for k, v in dict(duration=duration, warmup=warmup).items() if v is not None}
        ro = self.run_options
        if changes:
            ro = ro.replace(**changes).resolved(self.options.neuron, self.options.circuit)
            check_run(self.options, ro)
            self.runtime_estimate = _check_runtime(self.circuit, self.options, ro, self.simulated_synapses,
                                                   self.sizes["H"] if ro.scheduler is not None else 1)
        self._ran = True
        log.info("simulating %g s: warm-up %g s + window %g s (estimated %.3g s of wall time)",
                 ro.warmup + ro.duration, ro.warmup, ro.duration, self.runtime_estimate)
        self.observations = self.runner.run(ro)
        t_decode = time.perf_counter()
        res = read_out(self, self.observations, ro)
        # where the time went: build, compile and run (the runner's), decoding, the whole call, and
        # beside them the run-time estimate that max_runtime was checked against
        res.timings.update(decode=time.perf_counter() - t_decode, total=time.perf_counter() - self._t_start,
                           estimated_run=float(self.runtime_estimate))
        profile.record(res.timings)
        return res

    def __repr__(self):
        o = self.options
        return (f"<Simulation {o.neuron} {o.circuit} {self.circuit.n_neurons():,} neurons "
                f"{self.circuit.n_synapses():,} synapses on {type(self.runner).__name__}>")


def _reference(x: Inputs, co: CircuitOptions, ro: RunOptions | None = None) -> dict:
    """The exact stages, for comparison only: nothing of them enters the circuit. The attention
    area's own (:meth:`ctmhsa.circuits.parts.Part.reference`: the same sums its circuit computes;
    a stream's per token, forgetting λ per presentation)."""
    area = get_area(co.circuit)
    forget = kvmemory.forget_factor(ro.presentation, co.tau_mem) if area.stream else 1.0
    return area.reference(x.arrays(), phi=co.phi, causal=co.causal, normalize=co.normalize, forget=forget)


def _fitting(circuit, co: CircuitOptions, ro: RunOptions, a: dict) -> tuple:
    """``(shaped, bytes needed, simulated synapses, heads per task)`` of ``circuit`` as built
    (Dale's followers counted); a ``ValueError`` where it would not fit in ``max_memory`` (or
    ``record_spikes`` names a population it lacks), before anything is built."""
    # Dale's law: the followers are built and counted; the mapping layer encodes the plain circuit
    shaped = co.as_built(circuit)
    check_record_spikes(ro.record_spikes, shaped.populations)
    # inf: no limit (float comparisons below)
    limit = int(0.8 * available_memory()) if ro.max_memory is None else float(ro.max_memory)
    # a split run holds one head per task (on a worker): the limit applies to one head
    per = a["H"] if ro.scheduler is not None else 1
    floor = _per_task(estimate_memory(shaped, 0), per)    # the neurons alone: refuses a huge network at once
    if floor > limit:
        raise ValueError(
            f"max_memory: the network needs an estimated {floor / 2**30:.2f} GiB for its "
            f"{shaped.n_neurons():,} neurons alone, but the limit is {limit / 2**30:.2f} GiB; "
            "reduce n, m, H, dk, dv or de, or raise max_memory")
    # synapses Brian2 will hold: fewer than the description's when compartments are folded
    if per > 1:
        # the heads are identical and fold alike: H times one head's count, without the fold plan
        # of the whole pathway (at 100 barrel heads that plan alone took minutes on the client;
        # every worker makes its head's own plan)
        one = co.describe(a["n"], a["dk"], a["dv"], a["de"], H=1, m=a["m"], cross=circuit.meta.cross,
                          skip=circuit.meta.skip)
        n_simulated = per * simulated_synapse_count(one, fold_plan(one, co.neuron) if co.fold else {})
    else:
        n_simulated = simulated_synapse_count(shaped, fold_plan(shaped, co.neuron) if co.fold else {})
    need = _per_task(estimate_memory(shaped, n_simulated), per)
    # a stream keeps its windows' values until its run ends (the split runner refuses streams)
    windows = int(round(ro.duration / ro.presentation)) if ro.presentation else 0
    kept = 0 if not windows else stream_memory(shaped, co.neuron, fold_plan(shaped, co.neuron) if co.fold else {},
                                               windows, N_CHUNKS, get_device(ro.device).compiles)
    if need + kept > limit:
        stream = f" and a stream of {windows} presentations keeps {kept / 2**30:.2f} GiB until it ends" if kept else ""
        raise ValueError(
            f"max_memory: the network{' (one head of the split run)' if per > 1 else ''} needs an estimated "
            f"{need / 2**30:.2f} GiB "
            f"({shaped.n_neurons():,} neurons, {shaped.n_synapses():,} synapses){stream} but the limit is "
            f"{limit / 2**30:.2f} GiB; reduce n, m, H, dk, dv or de{', or the stream' if kept else ''}, "
            "or raise max_memory")
    return shaped, need, n_simulated, per


def _apical_needed(circuit, co: CircuitOptions, inputs: Inputs) -> bool:
    """``apical_inhibition=None`` resolved: whether the divisive interneurons shunt the apical
    dendrites too (:func:`ctmhsa.mapping.operating.apical_needed`: the weights and the declared
    range, the range of the tokens given where none is declared, as the encoder takes it)."""
    if not (co.normalize and get_area(co.circuit).apical) or co.level.lif:   # (not built at lif)
        return False
    rng = as_input_range(co.input_range, inputs.X, inputs.Y)
    return apical_needed(circuit, inputs.block, rng, co.phi, co.code_gains)


def _stream_timing(ro: RunOptions, count: int | None, level: str) -> RunOptions:
    """The run options of a stream of ``count`` token sets (``None``: one set): the presentation
    period (:data:`ctmhsa.sims.options.DEFAULT_PRESENTATION` when not given) and ``duration =
    count * presentation`` (what applies to which kind of run was checked before:
    :func:`ctmhsa.sims.options.check_applies`)."""
    if count is None:
        return ro
    period = DEFAULT_PRESENTATION if ro.presentation is None else ro.presentation
    dt = DEFAULT_DT[level] if ro.dt is None else ro.dt
    if period < 4 * dt * (1 - 1e-9):
        raise ValueError(f"presentation: {period:g} s is shorter than four steps (dt = {dt:g} s); a presentation "
                         "needs a decoding window of two steps or more")
    return ro.replace(presentation=period, duration=count * period)


def _stream_tables(circuit, enc, inputs: Inputs, co: CircuitOptions, ro: RunOptions) -> dict:
    """Relay population -> ``(rates (rows, N), period, shift)`` of a stream (see
    :func:`ctmhsa.circuits.instantiate.instantiate`): the first token set during the warm-up,
    then one row per presentation. Every token set is checked against the circuit (its declared
    range and its division) before anything is built; only the relays' rates differ per row."""
    c = enc.consts
    P, W = ro.presentation, ro.warmup
    lead = int(np.ceil(W / P - 1e-9))          # rows of the first set covering the warm-up
    rows: dict = {}
    for k in range(inputs.X.shape[0]):
        Xk, Yk = inputs.X[k], None if inputs.Y is None else inputs.Y[k]
        try:
            check_tokens(circuit, c["input_range"], c["operating"], c["R_set"], Xk, Yk, inputs.block, co.phi)
        except ValueError as exc:
            raise type(exc)(f"X[{k}] (presentation {k}): {exc}") from None
        for pop, vals in relay_rates(circuit, enc.codes["tokens"], Xk, Yk, c["onoff"]).items():
            rows.setdefault(pop, []).extend([vals["r_in"]] * (1 + (lead if k == 0 else 0)))
    return {pop: (np.stack(r), P, lead * P - W) for pop, r in rows.items()}


def _check_runtime(circuit, options: CircuitOptions, run_options: RunOptions, synapses: int,
                   per: int = 1) -> float:
    """The run's :func:`estimate_runtime` (s); a ``ValueError`` naming ``max_runtime`` past it.
    A split run's ``per`` heads run as parallel tasks: one task's share is estimated."""
    ro = run_options
    simulated = ro.warmup + ro.duration
    steps = int(round(simulated / ro.dt))
    estimate = estimate_runtime(options.neuron, ro.device, steps, circuit.n_neurons() // per, synapses // per)
    limit = float("inf") if ro.max_runtime is None else ro.max_runtime
    if estimate > limit:
        raise ValueError(
            f"max_runtime: the run is estimated to take {_wall(estimate)} of wall time, past max_runtime = "
            f"{limit:g} s: {steps:,} steps ({'warmup ' + format(ro.warmup, 'g') + ' s + ' if ro.warmup else ''}"
            f"duration {ro.duration:g} s at dt = {ro.dt:g} s) of {circuit.n_neurons():,} neurons and "
            f"{synapses:,} synapses; shorten duration, raise dt, or raise the limit (max_runtime=<seconds>, "
            "or max_runtime=None for none)")
    return estimate


def _wall(seconds: float) -> str:
    """A wall time for a message: seconds, with hours or days beside when long."""
    if seconds >= 86400:
        return f"{seconds:.3g} s ({seconds / 86400:.3g} days)"
    return f"{seconds:.3g} s ({seconds / 3600:.3g} h)" if seconds >= 3600 else f"{seconds:.3g} s"


def _per_task(estimate: int, heads: int) -> int:
    """The share of one of ``heads`` tasks in a network's memory ``estimate`` (bytes): the
    fixed base once, the rest split evenly (the heads are equal; the nuclei are small)."""
    return BASE_BYTES + (estimate - BASE_BYTES) // max(int(heads), 1)


def check_call(X, WQ, WK, WV, WO, *, Y=None, WS=None, circuit_options: CircuitOptions | None = None,
               run_options: RunOptions | None = None, perturbations=None, **options):
    """The checks of :func:`build_mhsa` that need no circuit: options that apply to this kind of
    run (:func:`ctmhsa.sims.options.check_applies`), their values, the inputs, the timing and the
    device. Cheap (nothing described or encoded), so a sweep checks every item before it runs one.

    Returns
    -------
    stream : bool
    co, ro : CircuitOptions, RunOptions
        Resolved (a stream's timing and the level's defaults filled in).
    inputs : Inputs
        :func:`ctmhsa.sims.validate.check_inputs`.
    """
    area = get_area(_circuit_of(circuit_options, options))
    if options.get("normalize") is None and circuit_options is None and not area.normalize:
        options["normalize"] = False   # the area's default (the revised paper's memory: unnormalised)
    stream = area.stream or np.ndim(X) == 3
    # every option applies to this kind of run or is refused (a stream's duration is T x presentation,
    # it has no checkpoints: options.APPLIES), those inside the option objects too
    check_applies("stream" if stream else "set",
                  given_options(circuit_options, run_options, **options, Y=Y, WS=WS, perturbations=perturbations))
    co, ro = split_options(circuit_options, run_options, **options)
    if area.stream:   # one token per presentation: a stream of one-token sets (T, 1, de)
        X, Y = _token_stream(X, Y, WS)
    a = check_inputs(X, WQ, WK, WV, WO, Y=Y, WS=WS, causal=co.causal, normalize=co.normalize, phi=co.phi,
                     stream=stream)
    ro = _stream_timing(ro, a["X"].shape[0] if stream else None, co.neuron)
    ro = ro.resolved(co.neuron, co.circuit)
    check_run(co, ro)
    runner_for(ro).check(co, ro)
    return stream, co, ro, a


def _circuit_of(circuit_options, options: dict) -> str:
    """The circuit a call asks for (before the options are resolved)."""
    given = options.get("circuit")
    return given if given is not None else getattr(circuit_options, "circuit", "quadratic")


def _token_stream(X, Y, WS) -> tuple:
    """The memory circuit's inputs: ``X`` (and ``Y``) of shape ``(T, de)``, one token per
    presentation, as a stream of one-token sets ``(T, 1, de)``; what it does not take refused.
    (Perturbations are placed as in the other circuits, at the rate level: token t's times on
    the network clock are :func:`ctmhsa.mapping.kvmemory.token_times`.)"""
    if WS is not None:
        raise ValueError("WS: the memory circuit has no skip connection; leave WS out")
    out = []
    for name, arr in (("X", X), ("Y", Y)):
        if arr is None:
            out.append(None)
            continue
        if np.ndim(arr) != 2:
            raise ValueError(f"{name}: the memory circuit takes a stream of tokens of shape (T, de), one token per "
                             f"presentation; got shape {np.shape(arr)}")
        out.append(np.asarray(arr)[:, None, :])
    if out[1] is not None and out[1].shape[0] != out[0].shape[0]:
        raise ValueError(f"Y: the stream writing the memory needs one token per token of X ({out[0].shape[0]}); "
                         f"got {out[1].shape[0]}")
    return out[0], out[1]


def build_mhsa(X, WQ, WK, WV, WO, *, Y=None, WS=None, circuit_options: CircuitOptions | None = None,
               run_options: RunOptions | None = None, perturbations=None, **options) -> Simulation:
    """Validate, describe, encode and build the attention pathway; return a :class:`Simulation`.

    Parameters
    ----------
    X, WQ, WK, WV, WO, Y, WS
        Tokens and weights, as in :func:`ctmhsa.sims.simulate_mhsa`.
    circuit_options : CircuitOptions, optional
        What is built (default :class:`ctmhsa.sims.options.CircuitOptions`).
    run_options : RunOptions, optional
        How it runs (default :class:`ctmhsa.sims.options.RunOptions`).
    perturbations : list, optional
        Lesions and drive (:mod:`ctmhsa.circuits.perturb`), as in :func:`ctmhsa.sims.simulate_mhsa`.
    **options
        Any field of either, overriding them (the keywords of :func:`ctmhsa.sims.simulate_mhsa`).

    Raises
    ------
    ValueError, TypeError
        Bad arguments (also against the cells: ``dt`` above :func:`ctmhsa.sims.options.max_dt`,
        a window below :func:`ctmhsa.sims.options.min_window`, ``record_spikes`` naming no
        population of the circuit), a network that would not fit in memory (``max_memory``) or a
        run estimated to take longer than ``max_runtime`` (:func:`estimate_runtime`; the
        messages give the estimates) — before any Brian2 object exists.
    """
    return _build(X, WQ, WK, WV, WO, Y=Y, WS=WS, circuit_options=circuit_options, run_options=run_options,
                  perturbations=perturbations, make_runner=None, **options)


def _build(X, WQ, WK, WV, WO, *, Y=None, WS=None, circuit_options=None, run_options=None, perturbations=None,
           make_runner=None, **options) -> Simulation:
    """:func:`build_mhsa`; ``make_runner(runner_class, circuit, encoding, inputs, co, ro)``, given,
    makes the runner instead of ``runner_class(circuit, ...)`` (:func:`ctmhsa.sims.train.train_mhsa`:
    one network rewritten for every run)."""
    t_start = time.perf_counter()
    stream, co, ro, a = check_call(X, WQ, WK, WV, WO, Y=Y, WS=WS, circuit_options=circuit_options,
                                   run_options=run_options, perturbations=perturbations, **options)
    memory = get_area(co.circuit).stream

    def describe(co):
        return co.describe(a["n"], a["dk"], a["dv"], a["de"], H=a["H"], m=a["m"], cross=Y is not None,
                           skip=WS is not None)

    circuit = describe(co)
    perts = check_perturbations(perturbations, circuit)
    if perts and ro.scheduler is not None:
        raise ValueError("perturbations: a split run rebuilds every head on its worker; perturb with "
                         "scheduler=None (runtime or standalone device)")
    # what does not fit is refused before the apical stage is weighed: its test samples the
    # range's drive over every L2/3 cell (96 s at n = 200, H = 8, dk = 64, measured)
    shaped, need, n_simulated, per = _fitting(circuit, co, ro, a)
    inputs = Inputs.from_checked(a)
    if co.apical_inhibition is None:   # the apical division stage where the somatic one cannot divide the range
        co = co.replace(apical_inhibition=_apical_needed(circuit, co, inputs))
        if co.apical_inhibition:
            circuit = describe(co)
            perts = check_perturbations(perturbations, circuit)
            shaped, need, n_simulated, per = _fitting(circuit, co, ro, a)
    runtime = _check_runtime(shaped, co, ro, n_simulated, per)
    if ro.codegen == "auto":
        ro = ro.replace(codegen="cython" if n_simulated >= AUTO_CYTHON_SYNAPSES else "numpy")
    ref = _reference(inputs, co, ro)
    if stream:   # one circuit for the whole stream: built for the range of every token set
        rng = as_input_range(co.input_range, inputs.X, inputs.Y)
        first = [None if t is None else t[0] for t in (inputs.X, inputs.Y)]
        timing, drive = None, None
        if memory:   # the integrators' timing, and the normalisation centred on the stream's range
            timing = dict(presentation=ro.presentation, dt=ro.dt, tokens=inputs.X.shape[0],
                          forget=kvmemory.forget_factor(ro.presentation, co.tau_mem),
                          peak_rate=kvmemory.peak_rate(circuit, co.neuron, ro.dt))
            if co.normalize:
                drive = kvmemory.stream_drive(circuit, inputs.block, rng, co.phi, co.code_gains, timing["forget"],
                                              timing["tokens"])
        enc = encode(circuit, first[0], inputs.block, Y=first[1], gains=co.code_gains, params=co.params,
                     phi=co.phi, input_range=rng, drive=drive, timing=timing)
        enc.stream = (kvmemory.stream_tables(circuit, enc, inputs.X, inputs.Y, inputs.block, co.phi, ro.presentation,
                                             ro.warmup) if memory else _stream_tables(circuit, enc, inputs, co, ro))
    else:
        enc = encode(circuit, inputs.X, inputs.block, Y=inputs.Y, gains=co.code_gains, params=co.params,
                     phi=co.phi, input_range=co.input_range)
    # lif somata: drive on their calibrated affine branch, baselines cancelled (no-op otherwise)
    add_lif_drive(circuit, enc.values, co.neuron, ro.dt)
    # lesions and drive: the description records them; drive relays get their rates and weights
    circuit = perturb.apply(circuit, perts)
    perturb.drive_values(circuit, enc.values)
    circuit = co.as_built(circuit)   # Dale's law after the drive relays, which then obey it too
    if co.dale:
        dale.add_values(circuit, enc.values)
    runner = (runner_for(ro)(circuit, enc, inputs, co, ro) if make_runner is None
              else make_runner(runner_for(ro), circuit, enc, inputs, co, ro))
    if memory and co.spiking:   # read each token once the read-out has followed it
        runner.lag = kvmemory.read_lag(ro.presentation, kvmemory.read_settle(settling_constant(co)[0]))
    elif stream and co.spiking:   # and each set, at the lif level
        runner.lag = level_lag(co, ro.presentation)
    sizes = {k: a[k] for k in ("n", "m", "H", "dk", "dv", "de")}
    return Simulation(circuit, enc, ref, inputs, sizes, co, ro, runner, need, n_simulated, t_start, runtime)
