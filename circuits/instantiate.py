"""Instantiate a circuit description in Brian2.

One ``NeuronGroup`` per population and one ``Synapses`` per projection; connectivity comes from
the numpy index arrays of :meth:`ctmhsa.circuits.graph.Circuit.pairs` (``Synapses.connect(i=, j=)``),
so no Python loop ever creates Brian2 objects per microcolumn.

The values that depend on the task (synaptic weights, biases, input rates, gains) are not part
of the description: the mapping layer supplies them as :class:`ctmhsa.circuits.values.CircuitValues`,
plain numpy in SI units, and they are written into Brian2 variables (never compiled into code),
so a new input reuses every compiled code object. On a device that cannot be written before it
runs (``cpp_standalone``) the caller passes a ``run_args`` dict and every value becomes a run
argument of the compiled binary instead; nothing here knows device names.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import re
import time
from dataclasses import dataclass, field

import brian2 as b2
import numpy as np
from brian2.codegen.translation import get_identifiers_recursively
from brian2.utils.stringtools import get_identifiers
from brian2.core.variables import Subexpression

from ctmhsa.neurons.backend import building, run_network
from ctmhsa.neurons.compilation import CompileLog, lean_cython, precompile, watch
from ctmhsa.neurons.firing import get_firing
from ctmhsa.neurons.models import (PHI_COVARIANCE, SOURCE_VARIANCE, add_step_code, count_variance, get_model,
                                    initial_draws, source_variance_code, stratify_phases, sums_variance,
                                    synapse_model)
from ctmhsa.neurons.params import DEFAULT_PARAMS, CellParams, coupling_namespace, with_units
from ctmhsa.neurons import simd  # noqa: F401  (registers the lif somata's state-update method)
from ctmhsa.neurons.threshold import RANDOM
from ctmhsa.neurons.window import COUNTER_EQUATIONS, COUNTER_RESET, COUNTER_STEP, STREAM_COUNTER_STEP, Probe, measure

from . import perturb
from .dale import check_signs
from .covariance import covariance_coefficients, covariance_pairs, shared_dendrite_inputs
from .fold import class_values, fold_plan, simulated_pairs, split_equations
from .memory import BASE_BYTES, estimate_memory
from .graph import Circuit, copies
from .values import CircuitValues

__all__ = ["BuiltCircuit", "instantiate", "assign", "replay_table", "FoldedGroup"]


@dataclass
class FoldedGroup:
    """State of one :class:`ctmhsa.neurons.models.Fold` of a population, simulated once per class.

    ``group`` holds one entry per class; cell ``c`` reads entry ``cls[c]``; ``reps`` are the
    classes' first cells; ``names`` the variables moved here from the cells; ``regular``: the
    model's regular code moved here with them (it writes folded state only); ``cache``: the code
    of the cached subexpressions (:func:`ctmhsa.circuits.fold.split_equations`), empty if none.
    """

    fold: object
    group: object
    cls: np.ndarray
    reps: np.ndarray
    names: frozenset
    regular: bool = False
    cache: str = ""


@dataclass
class BuiltCircuit:
    """A circuit instantiated in Brian2, ready to run.

    Attributes
    ----------
    circuit : Circuit
        The description it was built from.
    level : str
        Fidelity level.
    network : brian2.Network
        Every object of the circuit; add monitors to it before running.
    groups, synapses : dict
        Brian2 objects by population / projection name (a folded projection targets the
        folded group and holds one synapse per class).
    monitors : dict
        Population name -> ``SpikeMonitor``: of every spiking population, or on a compiled
        device (``run_args``) of those whose spike trains are recorded.
    counted : tuple of str
        Spiking populations whose cells count their own spikes (compiled devices, see
        :data:`ctmhsa.neurons.window.COUNTER_EQUATIONS`).
    pairs : dict
        Projection name -> ``(i, j)``, the description's cells of each simulated synapse.
    replayed : frozenset of str
        Populations replaying recorded spikes.
    replay_tables : dict
        Population -> ``(TimedArray, table)`` of the populations replayed from a spike table
        (``replay_steps``): the table, ``(steps, N)`` of 0/1, is a run argument of every run.
    replay_source : dict or None
        The recorded spikes the replay (tables or spike generators) was made from: a network
        kept for another run's spikes makes its tables again (:func:`assign`).
    stream_tables : dict
        On a compiled device (``run_args``), population -> ``(TimedArray, rates (rows, N) Hz)`` of
        the streamed relays: the rates are a run argument of every run, the compiled table zeros.
    stream_arrays : dict
        Population -> the ``TimedArray`` of each streamed relay (its rows, Hz, one per
        presentation): on the runtime device a row written in place between presentations
        takes effect when its presentation starts (a closed loop, :mod:`ctmhsa.sims.generate`).
    chunk_tables : dict
        A compiled stream's chunk tables (``chunks``): name -> ``(TimedArray, values)``, the
        values a run argument of every run, the compiled table zeros.
    folds : dict
        Population name -> list of :class:`FoldedGroup` (state shared by cells with identical
        inputs, see :mod:`ctmhsa.circuits.fold`).
    build_time : float
        Wall-clock seconds spent creating objects and connecting synapses.
    dt : float
        Integration step (s).
    seed : int, optional
        Seed of Brian2's random numbers, set before the first run in this process.
    run_args : dict, optional
        The values as run arguments of a compiled binary (``None``: written into the objects;
        the seed is then a run argument too and is not set here).
    compiled : dict
        Set by :meth:`prepare`: Cython ``modules`` compiled for this network (0 when all came
        from the cache), the ``seconds`` that took, and the modules ``loaded`` from the cache.
    preparation : float
        Wall time (s) spent generating and compiling code: :meth:`prepare`'s, or, for numpy
        code, that of the first :meth:`run` before its first step (not counted in its return).
    held_clock : brian2.Clock or None
        The clock of the sums summed once per run (:func:`_hold_constant_sums`), if any.
    """

    circuit: Circuit
    level: str
    network: object
    groups: dict
    synapses: dict
    build_time: float
    dt: float
    monitors: dict = field(default_factory=dict)
    seed: int | None = None
    run_args: dict | None = None
    folds: dict = field(default_factory=dict)
    counted: tuple = ()
    pairs: dict = field(default_factory=dict)
    replayed: frozenset = frozenset()
    replay_tables: dict = field(default_factory=dict)
    replay_source: dict | None = None
    streamed: frozenset = frozenset()
    stream_tables: dict = field(default_factory=dict)
    stream_arrays: dict = field(default_factory=dict)
    chunk_tables: dict = field(default_factory=dict)
    compiled: dict = field(default_factory=lambda: dict(modules=0, seconds=0.0, loaded=0))
    preparation: float = 0.0
    held_clock: object = None
    _seeded: bool = False
    _prepare_in_run: bool = False

    @property
    def spiking(self) -> bool:
        return bool(self.monitors or self.counted)

    @property
    def clock(self):
        return next(iter(self.groups.values())).clock

    def _seed(self):
        if self.run_args is None and not self._seeded and self.seed is not None:
            b2.seed(self.seed)
        self._seeded = True

    def prepare(self, bar=None) -> float:
        """Generate and compile every code object (Cython and compiled devices: a zero-length run;
        numpy: nothing, see below); return wall time (s).

        Separates code generation from simulation in timings; compiled Cython modules are
        cached, so the ``before_run`` of the following :meth:`run` only reloads them. Modules
        missing from the cache are compiled in parallel first and announced
        (:func:`ctmhsa.neurons.compilation.precompile`; ``bar``: its progress bar factory);
        :attr:`compiled` then holds how many compiled and how long it took.

        numpy code compiles nothing ahead: a zero-length run would only generate the code that
        every run generates again (Brian2 re-creates its code objects at each run: 2.5 s of a
        two-block model's 8 s, measured). There the first :meth:`run` times its own preparation
        instead (:attr:`preparation`) and this returns 0.
        """
        t0 = time.perf_counter()
        self._seed()
        if self.run_args is None and b2.prefs.codegen.target == "numpy":
            self._prepare_in_run = True
            return 0.0
        first = CompileLog()
        if self.run_args is None and b2.prefs.codegen.target == "cython":
            lean_cython(self.network)
            first = precompile(self.network, {}, bar=bar)
        with watch(bar=bar) as rest:    # what the parallel compile left (a failure there): one by one
            run_network(self.network, 0 * b2.second, namespace={})  # prepares (generates/compiles) every object, 0 steps
        self.compiled = dict(modules=first.compiled + rest.compiled, seconds=round(first.seconds + rest.seconds, 3),
                             loaded=rest.loaded)
        self.preparation = time.perf_counter() - t0
        return self.preparation

    def run(self, duration: float, report=None) -> float:
        """Advance the network by ``duration`` seconds; return the wall time (s) of the
        simulation (after :meth:`prepare` of numpy code, the first run's code generation is
        timed apart: :attr:`preparation`)."""
        t0 = time.perf_counter()
        self._seed()
        first_step = []
        timer = None
        if self._prepare_in_run:
            # the first step's start: the run's preparation (Brian2's before_run) is over
            timer = b2.NetworkOperation(lambda: first_step or first_step.append(time.perf_counter()),
                                        clock=self.clock, when="start", order=-10 ** 6, name="preparation_timer")
            self.network.add(timer)
        try:
            run_network(self.network, duration * b2.second, report=report, namespace={})
        finally:
            if timer is not None:
                self.network.remove(timer)
        t1 = time.perf_counter()
        if timer is None:
            return t1 - t0
        self._prepare_in_run = False
        self.preparation = (first_step[0] if first_step else t1) - t0
        return t1 - t0 - self.preparation

    def holder(self, pop: str, var: str) -> tuple:
        """``(group, cls)``: the Brian2 group holding variable ``var`` of ``pop``'s cells, and the
        cells' fold classes in it (``None`` where each cell holds its own value)."""
        for fg in self.folds.get(pop, []):
            if var in fg.names:
                return fg.group, fg.cls
        return self.groups[pop], None

    def values(self, pop: str, var: str) -> np.ndarray:
        """Current values (SI) of variable ``var`` of every cell of ``pop``, folded or not."""
        group, cls = self.holder(pop, var)
        out = np.array(getattr(group, var + "_")[:], dtype=float)
        return out if cls is None else out[cls]

    def set_cells(self, pop: str, var: str, value) -> None:
        """Write ``value`` (SI; a scalar or one per cell) into variable ``var`` of ``pop``'s cells
        (into their fold classes where ``var`` is folded), as the instantiation does."""
        _set_cells(self.groups[pop], self.folds.get(pop, []), var, value, self.circuit.population(pop).N,
                   f"{pop}.{var}", self.run_args)

    def all_groups(self) -> list:
        """Every NeuronGroup simulated: the populations' and their folded groups."""
        return [*self.groups.values(), *(fg.group for fgs in self.folds.values() for fg in fgs)]

    def probes(self) -> dict:
        """:class:`ctmhsa.neurons.window.Probe` of every simulated spiking population (replayed spikes
        have nothing to measure)."""
        out = {}
        for pop in self.monitors:
            model = get_model(self.level, self.circuit.population(pop).cell_type)
            out[pop] = Probe(self.monitors[pop], lambda v, pop=pop: self.values(pop, v), tuple(model.observables))
        return out

    def measure(self, warmup: float, T: float, n_chunks: int = 1, checkpoints=(), report=None) -> dict:
        """Warm-up, then a measurement window of ``T`` s (see :func:`ctmhsa.neurons.window.measure`)."""
        return measure(self.network, self.probes(), self.clock, self.run, warmup, T, n_chunks,
                       checkpoints, report)

    def spike_trains(self, pop: str) -> tuple[np.ndarray, np.ndarray]:
        """``(cell_index, time_s)`` of every recorded spike of ``pop``."""
        mon = self.monitors[pop]
        return np.array(mon.i[:]), np.array(mon.t_[:])

    def read(self, pop: str) -> dict[str, np.ndarray]:
        """Current values of the population's observables (SI floats, one entry per cell)."""
        model = get_model(self.level, self.circuit.population(pop).cell_type)
        return {var: self.values(pop, var) for var in model.observables}



def _set(group, var: str, value, N: int, what: str, run_args: dict | None = None):
    """Write ``value`` (SI) into ``group.var``; on the standalone device, record it as a run
    argument instead (set when the compiled binary starts: new values need no compilation)."""
    arr = np.asarray(value, dtype=float)
    if arr.ndim and arr.shape != (N,):
        raise ValueError(f"{what}: expected {N} values, got shape {arr.shape}")
    if run_args is None:
        setattr(group, var + "_", arr)
    else:
        view = getattr(group, var)
        run_args[view] = b2.Quantity(arr if arr.ndim else float(arr), dim=view.dim)


def _accumulate(group, observables, clock) -> None:
    """Window integrals ``acc_<v>`` of ``observables`` from ``t_win`` on, after every step."""
    if observables:
        code = "\n".join(f"acc_{v} += {v}*dt*int(t >= t_win)" for v in observables)
        group.run_regularly(code, clock=clock, when="end", name=f"{group.name}_accumulate")


def _set_cells(group, folded: list, var: str, value, N: int, what: str, run_args: dict | None):
    """:func:`_set` for a population's variable ``var``; a folded variable is written once per
    class (the cells of a class must have been given equal values)."""
    fg = next((fg for fg in folded if var in fg.names), None)
    if fg is None:
        return _set(group, var, value, N, what, run_args)
    arr = np.asarray(value, dtype=float)
    if arr.ndim and arr.shape != (N,):
        raise ValueError(f"{what}: expected {N} values, got shape {arr.shape}")
    _set(fg.group, var, class_values(arr, fg.cls, fg.reps, what), len(fg.reps), what, run_args)


COLLECT_BYTES = 64 * 2 ** 20
"""Networks this large (estimated, :func:`ctmhsa.circuits.memory.estimate_memory` less its
base) are freed by a full garbage collection before the next network of this process is built."""

COLLECT_OBJECTS = 5_000
"""Brian2 objects (named ones, dead or alive) tracked beyond those left by the last full
collection, past which one runs before the next network of this process is built."""

_last_size = [0]
_objects_kept = [0]   # the named objects Brian2 still tracked after the last collection (live ones)


def _collect_dead_networks(circuit: Circuit) -> None:
    """Free the previous network of this process, if large, and dead small ones, once many,
    before ``circuit`` is allocated.

    Its runs skip Brian2's full collection (:func:`ctmhsa.neurons.backend.run_network`), so a
    network that became garbage (reference cycles) waits for Python's own next full collection.
    One that holds much memory is freed here instead, at 0.1-0.3 s, so that two large networks
    are not held at once. Small ones cost no memory to keep a while, but Brian2 names every new
    object against all those it tracks, dead ones included (``brian2.core.names.find_name``), so
    building slows with every dead network kept: 60 recall questions, one network of 221 named
    objects each, took 2.13 s per question (median) at the first ten and 3.22 s at the last ten
    (2.16 s when collected at :data:`COLLECT_OBJECTS`). Once that many more objects are tracked
    than the last collection left (live ones, which it cannot free), they are collected too
    (about 0.2 s, every 20 such networks)."""
    from brian2.core.names import Nameable

    if _last_size[0] >= COLLECT_BYTES or len(Nameable.__instances__()) - _objects_kept[0] >= COLLECT_OBJECTS:
        gc.collect()
        _objects_kept[0] = len(Nameable.__instances__())   # live networks are not collected: count from them
    _last_size[0] = estimate_memory(circuit) - BASE_BYTES


def instantiate(
    circuit: Circuit,
    level: str,
    values: CircuitValues,
    phi: str = "elu1",
    params: CellParams = DEFAULT_PARAMS,
    dt: float = 1e-3,
    codegen: str = "numpy",
    seed: int | None = None,
    record_spikes: bool | tuple = False,
    run_args: dict | None = None,
    replay: dict | None = None,
    law: str = "product",
    fold: bool = True,
    replay_steps: int | None = None,
    stream: dict | None = None,
    coupling: dict | None = None,
    chunks: tuple | None = None,
) -> BuiltCircuit:
    """Create the Brian2 network of ``circuit`` at fidelity ``level``.

    Parameters
    ----------
    circuit : Circuit
        Description to instantiate.
    level : str
        Fidelity level with registered models (``"rate"``, ``"escape"``, ``"lif"``).
    values : CircuitValues
        Weights, per-cell parameters and initial values from the mapping layer.
    phi : str
        Feature map of the dendritic nonlinearities.
    params : CellParams
        Physiological constants.
    dt : float
        Integration time step (s).
    codegen : {"numpy", "cython"}
        Brian2 code-generation target (ignored when ``run_args`` is given: the active device
        generates its own code).
    seed : int, optional
        Seed of Brian2's random numbers (spiking levels), set before the first run, and of the
        escape cells' first uniform draws (:func:`ctmhsa.neurons.models.initial_draws`).
    record_spikes : bool or tuple of str
        Record spike times (all populations, or the named ones); counts are always kept.
    run_args : dict, optional
        Given (an empty dict, on a device activated by the caller such as ``cpp_standalone``,
        see :mod:`ctmhsa.devices.standalone`): every value of ``values`` and the seed are recorded in
        it as run arguments of the compiled binary instead of written into the objects, the
        cells count their own spikes (window and chunk counts, no monitor) and observables are
        integrated from ``t_win`` on.
    replay : dict, optional
        Population name -> ``(cell_indices, spike_times_s)``: the population is a
        ``SpikeGeneratorGroup`` replaying these spikes (recorded in another run) instead of
        simulated cells; its projections are event-driven as from the cells themselves.
    law : str
        Interaction law of the L5 IT somata (:data:`ctmhsa.neurons.laws.LAWS`; default the product).
    fold : bool
        Simulate deterministic compartments with identical synaptic input once per class and
        link the cells to them (:mod:`ctmhsa.circuits.fold`; exact: the same seed gives the same
        spikes). Spiking levels only. ``False`` gives every cell its own compartments, as in the
        description.
    replay_steps : int, optional
        With ``run_args``: replay every population of ``replay`` from a table of
        ``replay_steps`` steps by cells (a spike where the entry is 1), a run argument like any
        value, instead of a ``SpikeGeneratorGroup``, whose spikes Brian2 compiles in. The
        compiled project then does not depend on the replayed spikes.
    stream : dict, optional
        Population -> ``(rates, period, shift)``: the relays' input rate ``r_in`` (Hz) follows a
        table ``rates`` of shape ``(rows, N)``, row ``floor((t + shift) / period)`` at time ``t``
        (a ``TimedArray``: a stream of token sets presented one after another, each for
        ``period`` s, to the one network). The population's static ``r_in`` values are then not
        used. With ``run_args`` the table is a run argument (:attr:`BuiltCircuit.stream_tables`):
        its shape, ``period`` and ``shift`` are compiled in, its rates are not.
    coupling : dict, optional
        Lif soma cell type -> its dendro-somatic coupling (s) in place of its soma type's
        (:func:`ctmhsa.neurons.params.check_coupling`).
    chunks : tuple, optional
        With ``run_args``, a stream's windows: ``(delays, tables)``, population -> its delay
        (steps; 0 where not named) and delay -> the chunk of every step of the run
        (:func:`ctmhsa.neurons.window.chunk_ids`). The counting cells then count each window's
        spikes (:data:`ctmhsa.neurons.window.STREAM_COUNTER_STEP`); the tables' lengths are
        compiled in, their values are run arguments (:attr:`BuiltCircuit.chunk_tables`).
    """
    if run_args is None:
        _collect_dead_networks(circuit)
    with contextlib.nullcontext() if run_args is not None else building(codegen):
        return _instantiate(circuit, level, values, phi, params, dt, seed, record_spikes, run_args, replay, law, fold,
                            replay_steps, stream, coupling, chunks)


def _instantiate(circuit, level, values, phi, params, dt, seed, record_spikes, run_args, replay, law, fold,
                 replay_steps, stream, coupling=None, chunks=None) -> BuiltCircuit:
    t0 = time.perf_counter()
    ns = with_units(params, dt)
    ns.update(coupling_namespace(coupling))   # the lif somata's couplings given in place of their types
    clock = b2.Clock(dt=dt * b2.second, name=f"clock_{circuit.name}")
    replay_source, replay = replay, dict(replay or {})
    plan = {k: v for k, v in fold_plan(circuit, level).items() if k not in replay} if fold else {}
    for name, comps in perturb.unfolded(circuit).items():   # a partial cut removes synapses one by one
        plan[name] = [pl for pl in plan.get(name, []) if not set(pl[0].compartments) & comps]
    # a compiled run is read only when it ends: its cells count their spikes, and only the
    # populations whose trains are wanted carry a monitor (whose spike times the binary writes
    # out and the caller reads back: millions per barrel head and second)
    counting = run_args is not None
    _check_values(circuit, level, values, replay)
    if replay_steps is not None and run_args is None:
        raise ValueError("replay_steps: a replay table is a run argument of a compiled device (run_args)")
    streams = _stream_arrays(circuit, level, stream or {})
    if chunks is not None and not counting:
        raise ValueError("chunks: a stream's window table is for a compiled run's counting cells (run_args)")
    groups, folds, tables, chunk_tables = _populations(circuit, level, phi, law, ns, clock, plan, replay, counting,
                                                       replay_steps, streams, params, chunks)
    synapses, pairs = _projections(circuit, level, ns, clock, groups, folds, plan, replay, params)
    cov = _covariance_synapses(circuit, level, ns, clock, groups, values)
    synapses.update({k: v[0] for k, v in cov.items()})
    pairs.update({k: v[1] for k, v in cov.items()})
    held = _hold_constant_sums(circuit, level, groups, synapses, replay, compiled=run_args is not None)
    recorded = record_spikes or ()
    spiking = [name for name in groups
               if name not in replay and get_model(level, circuit.population(name).cell_type).spiking]
    monitors = {name: b2.SpikeMonitor(groups[name], record=recorded is True or name in recorded,
                                      name=f"{name}_spikes")
                for name in spiking if not counting or recorded is True or name in recorded}
    objects = [*groups.values(), *(fg.group for fgs in folds.values() for fg in fgs),
               *synapses.values(), *monitors.values()]
    if run_args is not None:   # read by code inserted after the run arguments are applied: the
        # seed, and the length of the run (ctmhsa.devices.standalone: not compiled in)
        objects.append(b2.NeuronGroup(1, "seed_value : 1\nrun_duration : second", name="rng", clock=clock))
    built = BuiltCircuit(circuit, level, b2.Network(*objects), groups, synapses, time.perf_counter() - t0, dt,
                         monitors=monitors, seed=seed, run_args=run_args, folds=folds,
                         counted=tuple(spiking) if counting else (), pairs=pairs, replayed=frozenset(replay),
                         replay_tables=tables, replay_source=replay_source, streamed=frozenset(streams),
                         stream_tables={p: (ns[f"{p}_stream"], streams[p][0]) for p in streams if counting},
                         stream_arrays={p: ns[f"{p}_stream"] for p in streams}, chunk_tables=chunk_tables,
                         held_clock=held)
    _write_values(built, values, seed, run_args)   # checked above, before any Brian2 object
    built.build_time = time.perf_counter() - t0
    return built


def _check_values(circuit: Circuit, level: str, values: CircuitValues, replay) -> None:
    """``ValueError`` naming the entry of ``values`` that does not fit ``circuit`` (before any
    Brian2 object exists)."""
    for name, pop in circuit.populations.items():
        if name in replay:
            continue
        model = get_model(level, pop.cell_type)
        given = values.params.get(name, {})
        unknown = set(given) - set(model.parameters)
        if unknown:
            raise ValueError(f"values.params[{name!r}]: {sorted(unknown)[0]!r} is not a parameter of {pop.cell_type}")
        missing = set(model.parameters) - set(given)
        if missing:
            raise ValueError(f"values.params[{name!r}]: missing {sorted(missing)}")
    for pname in circuit.projections:
        if pname not in values.weights:
            raise ValueError(f"values.weights: missing weights for projection {pname!r}")


def assign(built: BuiltCircuit, values: CircuitValues, seed: int | None, run_args: dict | None = None,
           replay: dict | None = None) -> None:
    """Write a task's values into ``built``: per-cell parameters, initial values (with the escape
    cells' seeded first draws, :func:`ctmhsa.neurons.models.initial_draws`), synaptic weights and the
    seed. Given ``run_args`` (a compiled device), they are recorded there as run arguments of the
    binary instead, so the same compiled project runs any task of its shape (:mod:`ctmhsa.devices.standalone`
    calls this again for every new task it runs on a network it keeps). ``replay``: the task's
    replayed spikes; replay tables made from other spikes are made again from these."""
    _check_values(built.circuit, built.level, values, built.replayed)
    _write_values(built, values, seed, run_args)
    built._seeded = False   # the runtime device: Brian2 is seeded with ``seed`` before the next run
    if replay is not None and replay is not built.replay_source:
        built.replay_tables = {p: (ta, replay_table(*replay[p], built.circuit.population(p).N, len(table), built.dt))
                               for p, (ta, table) in built.replay_tables.items()}
        built.replay_source = replay


def _phases(pop, model, draws: dict, firing: str = "poisson") -> dict:
    """``draws`` with a ``"population"``'s phases evenly spread over each dimension's copies
    (:func:`ctmhsa.neurons.models.stratify_phases`); in a circuit of ``firing="population"`` the
    threshold interneurons' phases too, over the cells of each macrocolumn (axis ``k``), which
    integrate the same pooled drive and so fire in turn: their shunt then carries the quantisation
    of one spike, not the beat of independent phases (the digits circuit's class scores on 150
    training images, 0.2 s each: rms error against the float model 1.01 and 0.94 with independent
    phases, 0.50 and 0.51 spread, seeds 0 and 1; docs/digits.md); other models' draws unchanged."""
    if "S" not in draws:
        return draws
    if get_firing(model.firing).in_turn:
        spread = ("p",)
    elif get_firing(firing).in_turn and pop.cell_type == "interneuron":
        spread = ("k", "p")
    else:
        return draws
    spread = [a for a in spread if a in pop.axes]
    others = [a for a in pop.axes if a not in spread]
    P = int(np.prod([pop.sizes[pop.axes.index(a)] for a in spread]))
    if P == 1:
        return draws
    return dict(draws, S=stratify_phases(draws["S"], _flat_index(pop, spread), _flat_index(pop, others), P))


def _flat_index(pop, axes) -> np.ndarray:
    """Each cell's flat index over ``axes`` of ``pop`` (0 for every cell when there are none)."""
    if not axes:
        return np.zeros(pop.N, int)
    return np.ravel_multi_index([pop.axis(a) for a in axes], [pop.sizes[pop.axes.index(a)] for a in axes])


def _write_values(built: BuiltCircuit, values: CircuitValues, seed, run_args) -> None:
    built.seed = seed
    for name, pop in built.circuit.populations.items():
        if name in built.replayed:
            continue
        model = get_model(built.level, pop.cell_type, built.circuit.meta.firing)
        g, folds = built.groups[name], built.folds.get(name, [])
        # the escape cells' first uniform draws: seeded per population, the same on every device
        init = {**_phases(pop, model, initial_draws(model, pop.N, seed, name), built.circuit.meta.firing),
                **values.init.get(name, {})}
        for kind, items in (("params", values.params.get(name, {})), ("init", init)):
            for var, val in items.items():
                if name in built.streamed and var == "r_in":   # follows its stream table
                    continue
                _set_cells(g, folds, var, val, pop.N, f"values.{kind}[{name!r}][{var!r}]", run_args)
    for name, vals in perturb.silence_values(built.circuit).items():
        for var, val in vals.items():
            _set(built.groups[name], var, val, built.circuit.population(name).N, f"{name}.{var}", run_args)
    written = {}
    for pname in built.synapses:
        S, (i, j) = built.synapses[pname], built.pairs[pname]
        proj = built.circuit.projections.get(pname)
        w = (built.circuit.synapse_weights(proj, values.weights[pname], i, j) if proj is not None
             else covariance_coefficients(built.circuit, values, pname[:-len(COV_SUFFIX)], i, j))
        keep = perturb.cut_mask(built.circuit, pname, i, j, seed) if proj is not None else None
        if keep is not None:
            w = np.where(keep, w, 0.0)
        written[pname] = w
        _write(S, "w", w, run_args)
        if "wv" in S.variables:   # the positive half of a Dale split: the whole weight, for the variance
            wv = built.circuit.synapse_weights(dataclasses.replace(proj, sign=""), values.weights[pname], i, j)
            _write(S, "wv", wv if keep is None else np.where(keep, wv, 0.0), run_args)
        if "pvar" in S.variables:   # a replayed source's count variance, from its rates (values)
            r = np.broadcast_to(np.asarray(values.params[proj.source]["r_in"], float),
                                (built.circuit.population(proj.source).N,))[i]
            p = np.clip(r * built.dt, 0.0, 1.0)
            _write(S, "pvar", p * (1 - p), run_args)
    if built.circuit.meta.dale:   # no cell makes synapses of both signs (a check, never a setting)
        pops = built.circuit.populations
        shunts = {(p.target, p.compartment): get_model(built.level, pops[p.target].cell_type).inputs
                  .get(p.compartment, ("", ""))[1] == "1" for p in built.circuit.projections.values()}
        check_signs(built.circuit, {k: v for k, v in written.items() if k in built.circuit.projections}, shunts)
    if run_args is not None:
        run_args[built.network["rng"].seed_value] = float(0 if seed is None else seed)


def _write(S, var: str, value, run_args) -> None:
    """Write a synaptic variable (as a run argument on a compiled device)."""
    if run_args is not None:
        run_args[getattr(S, var)] = b2.Quantity(np.ascontiguousarray(value, dtype=float), dim=getattr(S, var).dim)
    else:
        getattr(S, var + "_")[:] = value


SILENCE_EQUATIONS = """sil_on : second (constant)
sil_off : second (constant)
gate = 1 - int(t >= sil_on)*int(t < sil_off) : 1"""
"""A silenced population's gate: 0 over ``[sil_on, sil_off)`` (:class:`ctmhsa.circuits.perturb.Silence`;
cells silent over several intervals: :func:`ctmhsa.circuits.perturb.silence_equations`)."""

COV_SUFFIX = "_cov"
"""Name suffix of a population's covariance synapses (:func:`_covariance_synapses`)."""


def _covariance_synapses(circuit: Circuit, level: str, ns, clock, groups: dict, values: CircuitValues) -> dict:
    """Synapses summing, every step, the covariance of the soma and apical dendrite of the cells
    whose model removes it (:data:`ctmhsa.neurons.models.PHI_COVARIANCE`, the linear circuit's
    outer-product cells): one per presynaptic cell contacting both dendrites, coefficient
    ``w_b w_a`` (from the weights, :func:`covariance_coefficients`) times that cell's spike-count
    variance per step (from its intensity, at run time) and ``k_syn² G_cross / u²``. Returns
    ``{name: (Synapses, (pre, post))}``."""
    out = {}
    for name, pop in circuit.populations.items():
        model = get_model(level, pop.cell_type)
        if not getattr(model, "covariance", False) or name not in groups:
            continue
        src, _ = shared_dendrite_inputs(circuit, name)
        if src is None:
            continue
        rate = get_model(level, circuit.populations[src].cell_type).output
        S = b2.Synapses(groups[src], groups[name], namespace=ns, clock=clock, name=name + COV_SUFFIX,
                        model=f"w : volt**2*second**2 (constant)\n"
                              f"{PHI_COVARIANCE}_post = w*(k_syn/u)**2*G_cross*{count_variance(rate + '_pre')} : 1 (summed)")
        i, j = covariance_pairs(circuit, values, name)
        S.connect(i=i.astype(np.int32), j=j.astype(np.int32))
        out[name + COV_SUFFIX] = (S, (i, j))
    return out


HELD_SUMS_DT = 1e4
"""Step (s) of the clock of the sums that cannot change during a run (:func:`_hold_constant_sums`)
on a compiled device: longer than any run, so it ticks once, at the run's first step."""

HELD_SUMS_RUNTIME_DT = 1.0
"""The same on the runtime device (s): Brian2's Python clocks round a run's end of under 10^-4 of
a step down to step 0, so a clock of 10^4 s would not tick in a run under 1 s at all. At 1 s it
ticks at the network's first step (in a first run of 0.1 ms or more, and after
``Network.restore``) and again every biological second, summing the same value (1/1000 of the
per-step cost at 1 ms)."""


def constant_intensity(group, model) -> bool:
    """Whether the intensity (``model.output``) of ``group``'s cells is fixed for a run: a
    subexpression of the model's parameters only (set before the run by
    :func:`assign`, e.g. a relay's ``r_in``), not of time, a state variable, a stream table or a
    silencing gate."""
    v = group.variables.get(model.output)
    if not isinstance(v, Subexpression):
        return False
    ids = get_identifiers_recursively([v.expr], group.variables)
    return all(name in model.parameters for name in ids if name in group.variables)


def _hold_constant_sums(circuit: Circuit, level: str, groups: dict, synapses: dict, replay, compiled: bool = False):
    """Sum once per run, at its first step, the summed variables that every step would sum to the
    same value: those whose every term is a constant of the synapse (its weight, a replayed
    cell's count variance) or of a presynaptic cell whose intensity is fixed for the run
    (:func:`constant_intensity`, not silenced): its intensity or count variance. A barrel head's
    thalamic relays are such cells: its two per-step sums of their spike-noise variance over
    72,000 synapses each were 37 % of its binary's time (measured); at the rate level they also
    write the relays' input to the L2/3 and L5 IT dendrites. A held sum is the same number summed
    in the same order, so the spikes are unchanged (tested). Brian2 schedules a summed variable
    on its target's clock; a held one's is replaced by a clock whose step outlasts the run on a
    compiled device (:data:`HELD_SUMS_DT`), of 1 s on the runtime device
    (:data:`HELD_SUMS_RUNTIME_DT`), and reads ``t`` and ``dt`` of its synapses' clock as before.
    Nothing is held on brian2cuda, which compiles a network on one clock only
    (:func:`ctmhsa.devices.cuda.clock_flags`). Returns that clock (``None``: nothing held)."""
    from ctmhsa.devices.cuda import is_cuda

    if is_cuda(b2.get_device()):
        return None
    held = None
    gated = perturb.silenced(circuit)
    for S in synapses.values():
        if not S.summed_updaters:
            continue
        src = S.source.name
        model = get_model(level, circuit.populations[src].cell_type, circuit.meta.firing)
        fixed = src not in replay and src not in gated and constant_intensity(groups[src], model)
        reads = {f"{model.output}_pre", f"{SOURCE_VARIANCE}_pre"} if fixed else set()
        for updater in S.summed_updaters.values():
            if not all(_constant_term(S, name, reads) for name in updater.expression.identifiers):
                continue
            if held is None:
                step = HELD_SUMS_DT if compiled else HELD_SUMS_RUNTIME_DT
                held = b2.Clock(dt=step * b2.second, name=f"held_sums_{circuit.name}")
            updater._clock = held   # (Brian2 has no setter: a CodeRunner's clock is fixed at creation)
    return held


def _constant_term(S, name: str, reads: set) -> bool:
    """Whether identifier ``name`` of a summed expression of synapses ``S`` is fixed for the run:
    a presynaptic quantity in ``reads``, ``dt``, a constant of the synapse, or a name the synapses
    do not hold (a namespace constant or a deterministic function)."""
    if name in RANDOM:   # a sum that draws is never held
        return False
    if name in reads or name == "dt":
        return True
    var = S.variables.get(name)
    return var is None or bool(getattr(var, "constant", False))


def _incoming(circuit: Circuit) -> dict[str, dict[str, list[str]]]:
    """Population -> compartment -> names of the projections onto it."""
    incoming: dict[str, dict[str, list[str]]] = {name: {} for name in circuit.populations}
    for pname, proj in circuit.projections.items():
        incoming[proj.target].setdefault(proj.compartment, []).append(pname)
    return incoming


def _folded_groups(name: str, model, eqs, incoming: dict, plans: list, ns, clock):
    """The folded groups of population ``name``; returns them and the cells' remaining equations."""
    out = []
    for f, cls, reps in plans:
        moved = {*f.variables, *f.parameters}
        for comp in f.compartments:
            moved |= {model.inputs[comp][0], *(f"in_{p}" for p in incoming.get(comp, []))}
        # folds exist at spiking levels only: window integrals of the folded observables (an
        # integrated one stays with the cells, whose threshold loop accumulates it)
        fobs = [v for v in model.observables if v in f.variables and v not in model.integrated]
        moved |= {f"acc_{v}" for v in fobs}
        regular = _moved_regular(model, eqs, moved, f)
        feqs, eqs, updates = split_equations(eqs, moved, f.variables, f.cached)
        moved |= set(f.cached)
        feqs += b2.Equations("t_win : second (shared)")
        # order 2: after the cells' own state update (0) and regular code (1), so a cell
        # integrating a folded variable sees its value from the start of the step, as unfolded
        fg = b2.NeuronGroup(len(reps), feqs, method=model.method, namespace=ns, clock=clock,
                            name=f"{name}_{f.name}", order=2)
        if regular:   # right after the folded state's update, as the cells' after theirs
            fg.run_regularly(model.regular, clock=clock, when="groups", order=3, name=f"{name}_{f.name}_regular")
        code = "\n".join(updates.values())
        if updates:   # the cells' state update reads the step's start value, spikes the new one
            fg.run_regularly(code, clock=clock, when="start", name=f"{name}_{f.name}_cache_start")
            fg.run_regularly(code, clock=clock, when="groups", order=4, name=f"{name}_{f.name}_cache")
        _accumulate(fg, fobs, clock)
        out.append(FoldedGroup(f, fg, cls, reps, frozenset(moved), regular, code))
    return out, eqs


def _moved_regular(model, eqs, moved: set, fold) -> bool:
    """Whether ``model``'s regular code moves with ``fold`` (it reads and writes folded names
    only); ``ValueError`` where it touches both folded and cell state (no exact split)."""
    if not model.regular:
        return False
    names = set((eqs if isinstance(eqs, b2.Equations) else b2.Equations(eqs)).names)
    used = get_identifiers(model.regular) & names
    if not used & moved:
        return False
    if not used <= moved:
        raise ValueError(f"fold {fold.name}: the regular code {model.regular!r} reads {sorted(used - moved)}, "
                         "which do not fold with it")
    return True


STREAM_LINE = re.compile(r"^[ \t]*r_in[ \t]*:[ \t]*Hz[ \t]*$", re.M)
"""The relay's input-rate parameter, replaced by its stream table in a streamed population."""


def _stream_arrays(circuit: Circuit, level: str, stream: dict) -> dict:
    """Check ``stream`` (see :func:`instantiate`) before any Brian2 object: population ->
    ``(rates (rows, N) Hz, period s, shift s)``."""
    out = {}
    for name, (rates, period, shift) in stream.items():
        pop = circuit.populations.get(name)
        if pop is None or "r_in" not in get_model(level, pop.cell_type).parameters:
            raise ValueError(f"stream: {name!r} is not a relay population with an input rate r_in")
        rates = np.asarray(rates, float)
        if rates.ndim != 2 or rates.shape[1] != pop.N or not np.all(np.isfinite(rates)) or np.any(rates < 0):
            raise ValueError(f"stream[{name!r}]: expected finite non-negative rates of shape (rows, {pop.N}), "
                             f"got shape {rates.shape}")
        if not float(period) > 0:
            raise ValueError(f"stream[{name!r}]: the period must be positive, got {period!r}")
        out[name] = (rates, float(period), float(shift))
    return out


def _variance_sources(circuit: Circuit, level: str, replay) -> set:
    """The populations whose synapses sum their count variance into a phi-corrected compartment
    (:func:`ctmhsa.neurons.models.synapse_model`): each holds it per cell
    (:data:`ctmhsa.neurons.models.SOURCE_VARIANCE`); a replayed one's synapses hold it instead."""
    pops = circuit.populations
    return {proj.source for proj in circuit.projections.values() if proj.source not in replay
            and sums_variance(get_model(level, pops[proj.target].cell_type), proj.compartment, proj.sign)}


def _populations(circuit: Circuit, level: str, phi, law, ns, clock, plan: dict, replay: dict,
                 counting: bool = False, replay_steps: int | None = None, streams: dict | None = None,
                 params: CellParams = DEFAULT_PARAMS, chunks: tuple | None = None):
    """One NeuronGroup (or replaying SpikeGeneratorGroup) per population, with its folded groups;
    with ``counting``, the spiking cells count their own spikes
    (:data:`ctmhsa.neurons.window.COUNTER_EQUATIONS`); a source of a phi-corrected compartment
    holds its count variance per step (:func:`_variance_sources`)."""
    incoming = _incoming(circuit)
    variance = _variance_sources(circuit, level, replay)
    # Silence: per population, the silent intervals a cell needs at most (several Silence compose)
    gated = {name: len(v) // 2 for name, v in perturb.silence_values(circuit).items()}
    groups, folds, tables, chunk_tables = {}, {}, {}, {}
    for name, pop in circuit.populations.items():
        if name in replay and replay_steps is not None:
            table = replay_table(*replay[name], pop.N, replay_steps, float(clock.dt_))
            ta = b2.TimedArray(np.zeros_like(table), dt=clock.dt, name=f"{name}_replay")
            # a source that spikes where its table says, with no state to reset: the empty reset
            # says so to Brian2 (which otherwise warns of a forgotten reset); no spike changes
            groups[name] = b2.NeuronGroup(pop.N, "replay_col : integer (constant)\nreplay_bit : 1 (constant)",
                                          threshold=REPLAY_THRESHOLD.format(table=ta.name), reset="",
                                          namespace={ta.name: ta}, clock=clock, name=name)
            cells = np.arange(pop.N)   # structure: compiled in on standalone
            groups[name].replay_col = (cells // REPLAY_BITS).astype(np.int32)
            groups[name].replay_bit = np.ldexp(1.0, cells % REPLAY_BITS)
            tables[name] = (ta, table)
            continue
        if name in replay:
            idx, times = replay[name]
            groups[name] = b2.SpikeGeneratorGroup(pop.N, np.asarray(idx, np.int32),
                                                  np.asarray(times, float) * b2.second, name=name, clock=clock)
            continue
        model = get_model(level, pop.cell_type, circuit.meta.firing)
        plans = plan.get(name, [])
        rendered = model.render(phi, incoming[name], law=law)
        if name in (streams or {}):   # r_in from the stream table: one row per presentation
            rates, period, shift = streams[name]
            # a compiled device reads the rates as a run argument: zeros compiled in (as a replay table)
            ta = b2.TimedArray((np.zeros_like(rates) if counting else rates) * b2.Hz, dt=period * b2.second,
                               name=f"{name}_stream")
            rendered, n_sub = STREAM_LINE.subn(f"r_in = {ta.name}(t + {name}_shift, i) : Hz", rendered)
            if n_sub != 1:
                raise ValueError(f"stream: the model of {name!r} has no single input-rate parameter r_in")
            # in the shared namespace: synapses read the relays' rate (r_pre) too
            ns.update({ta.name: ta, f"{name}_shift": shift * b2.second})
        folds[name], eqs = _folded_groups(name, model, rendered, incoming[name], plans, ns, clock)
        reset, extra = model.reset, []
        threshold = model.threshold
        if name in gated:   # Silence: no output over [sil_on, sil_off) (and [sil_on_1, sil_off_1), ...)
            extra.append(perturb.silence_equations(gated[name]))
            if threshold:
                threshold = f"({threshold}) and gate > 0.5"
        if counting and model.spiking:
            extra.append(COUNTER_EQUATIONS)
            reset = f"{reset}\n{COUNTER_RESET}"
        if name in variance:
            extra.append(f"{SOURCE_VARIANCE} : 1")
        # each cell's fold class, a 32-bit integer (Brian2 keeps an index array as 64 bits):
        # the spiking cells read it every step
        extra.extend(f"cls_{fg.fold.name} : integer (constant)" for fg in folds[name])
        if extra:
            eqs = (eqs if isinstance(eqs, b2.Equations) else b2.Equations(eqs)) + b2.Equations("\n".join(extra))
        g = b2.NeuronGroup(pop.N, eqs, method=model.method, namespace=ns, clock=clock, name=name,
                           threshold=threshold or None,
                           reset=reset or None, refractory=model.refractory or False)
        for fg in folds[name]:
            setattr(g, f"cls_{fg.fold.name}", fg.cls.astype(np.int32))   # structure: compiled in on standalone
            for v in (*fg.fold.variables, *fg.fold.cached):
                setattr(g, v, b2.linked_var(fg.group, v, index=f"cls_{fg.fold.name}"))
        # regular code that moved with its folded state runs in the folded group
        add_step_code(g, dataclasses.replace(model, regular="") if any(fg.regular for fg in folds[name]) else model, clock)
        if name in variance:   # after every update of the step before, before the synapses sum it
            g.run_regularly(source_variance_code(model, name in gated, copies(pop), params), clock=clock,
                            when="before_groups", order=1000, name=f"{name}_count_variance")
        if counting and model.spiking:   # the step's chunk, once per step (shared variables only)
            g.run_regularly(_chunk_step(name, chunks, ns, clock, chunk_tables), clock=clock, when="start",
                            name=f"{name}_chunk")
        if model.spiking:
            _accumulate(g, [v for v in model.accumulated if not any(v in f.variables for f, _, _ in plans)], clock)
        groups[name] = g
    return groups, {k: v for k, v in folds.items() if v}, tables, chunk_tables


def _chunk_step(name: str, chunks: tuple | None, ns: dict, clock, chunk_tables: dict) -> str:
    """The code setting a counting population's chunk each step: one window's
    (:data:`COUNTER_STEP`), or a stream's from the table of its delay: one ``TimedArray`` per
    delay, in the shared namespace, its length compiled in and its values a run argument
    (``chunk_tables``: name -> ``(TimedArray, values)``), so that one project runs streams of any
    length of its shape (as the relays' table)."""
    if chunks is None:
        return COUNTER_STEP
    delays, tables = chunks
    d = int(delays.get(name, 0))
    table = f"stream_chunks_{d}"
    if table not in ns:
        ids = np.asarray(tables[d], float)
        ns[table] = b2.TimedArray(np.zeros_like(ids), dt=clock.dt, name=table)
        chunk_tables[table] = (ns[table], ids)
    return STREAM_COUNTER_STEP.format(table=table)


REPLAY_BITS = 48
"""Cells per column of a replay table (:func:`replay_table`): each entry holds their spikes of
one step as the bits of an integer, exact in a float64 (53-bit mantissa)."""


def replay_columns(N: int) -> int:
    """Columns of the replay table of ``N`` cells."""
    return -(-int(N) // REPLAY_BITS)


def replay_table(cells, times, N: int, steps: int, dt: float) -> np.ndarray:
    """Recorded spikes ``(cells, times_s)`` as a ``(steps, replay_columns(N))`` table: a spike of
    cell ``c`` at step time ``k dt`` sets bit ``c % REPLAY_BITS`` of entry ``[k, c // REPLAY_BITS]``
    (read by :data:`REPLAY_THRESHOLD`). Packed, a barrel head's three relay tables of 2.2 s are
    2.4 MB instead of 115 MB, which Python wrote and Brian2 hashed for every head (0.3 s of its
    1.35 s, measured). ``ValueError`` for a spike outside the table or two spikes of a cell in one
    step (which a table cannot hold)."""
    k = np.rint(np.asarray(times, float) / dt).astype(np.int64)
    cells = np.asarray(cells, np.int64)
    if k.size and (k.min() < 0 or k.max() >= steps or cells.min() < 0 or cells.max() >= N):
        raise ValueError(f"replay: spikes outside the table of {steps} steps x {N} cells")
    flat = k * N + cells
    if flat.size != np.unique(flat).size:
        raise ValueError("replay: a cell spikes twice in one step; a replay table holds one spike per step")
    table = np.zeros((steps, replay_columns(N)))
    np.add.at(table, (k, cells // REPLAY_BITS), np.ldexp(1.0, cells % REPLAY_BITS))
    return table


REPLAY_THRESHOLD = "({table}(t, replay_col) // replay_bit) % 2 > 0.5"
"""Spike condition of a replaying cell: its bit of the step's entry of its table (column
``replay_col``, ``replay_bit`` = 2 to the power of its place in the column)."""


def unpack_replay(table: np.ndarray, N: int) -> np.ndarray:
    """The ``(steps, N)`` table of 0/1 packed in ``table`` (:func:`replay_table`)."""
    cells = np.arange(N)
    return (np.floor_divide(table[:, cells // REPLAY_BITS], np.ldexp(1.0, cells % REPLAY_BITS)) % 2).astype(float)


def _projections(circuit: Circuit, level: str, ns, clock, groups: dict, folds: dict, plan: dict,
                 replay=(), params: CellParams = DEFAULT_PARAMS) -> tuple:
    """One Synapses object per projection (onto the folded group where its compartment folds),
    and its synapses' cells in the description ``(i, j)`` (the weights' order)."""
    synapses, pairs = {}, {}
    pops = circuit.populations
    gated = perturb.silenced(circuit)
    summed_into = {}   # folded group's name -> (its FoldedGroup, the cells' order - 1): a sum writes into it
    for pname, proj in circuit.projections.items():
        kw = synapse_model(get_model(level, pops[proj.source].cell_type, circuit.meta.firing),
                           get_model(level, pops[proj.target].cell_type), proj.compartment, pname,
                           gated=proj.source in gated, replayed=proj.source in replay, sign=proj.sign,
                           source_copies=copies(pops[proj.source]), params=params)
        i, j, post, f = simulated_pairs(circuit, proj, plan)
        target = groups[proj.target] if f is None else \
            next(fg.group for fg in folds[proj.target] if fg.fold is f)
        S = b2.Synapses(groups[proj.source], target, namespace=ns, clock=clock, name=pname, **kw)
        S.connect(i=i.astype(np.int32), j=post.astype(np.int32))
        if f is not None and S.summed_updaters:
            # Brian2 sums a variable just before its target's state update (order - 1): for a
            # folded group (order 2) that is after the cells' own update (0), which would read the
            # step before's sum (a phi-corrected compartment's spike-noise variance). Unfolded, the
            # cells read this step's: so the sum runs before the cells, its cache after it.
            for updater in S.summed_updaters.values():
                updater.order = groups[proj.target].order - 2
            summed_into[target.name] = (next(fg for fg in folds[proj.target] if fg.fold is f),
                                        groups[proj.target].order - 1)
        synapses[pname], pairs[pname] = S, (i, j)
    for name, (fg, order) in summed_into.items():
        if fg.cache:
            fg.group.run_regularly(fg.cache, clock=clock, when="groups", order=order, name=f"{name}_cache_summed")
    return synapses, pairs
