"""Instantiate a circuit description in Brian2.

One ``NeuronGroup`` per population and one ``Synapses`` per projection; connectivity comes from
the numpy index arrays of :meth:`circuits.graph.Circuit.pairs` (``Synapses.connect(i=, j=)``),
so no Python loop ever creates Brian2 objects per microcolumn.

The values that depend on the task (synaptic weights, biases, input rates, gains) are not part
of the description: the mapping layer supplies them as :class:`CircuitValues`, plain numpy in SI
units, and they are written into Brian2 variables (never compiled into code), so a new input
reuses every compiled code object.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from neurons.backend import cache_dir, configure_brian2  # noqa: F401  (re-exported)
from neurons.models import add_step_code, get_model, initial_draws, synapse_model
from neurons.params import DEFAULT_PARAMS, CellParams, with_units

from .fold import class_values, fold_classes, split_equations
from .graph import Circuit

__all__ = ["CircuitValues", "BuiltCircuit", "instantiate", "estimate_memory", "cache_dir",
           "configure_brian2", "project_key", "fold_plan", "simulated_pairs", "simulated_out_degree",
           "simulated_synapse_count", "FoldedGroup"]


@dataclass
class CircuitValues:
    """Task-dependent values, supplied by the mapping layer (SI units, numpy).

    Attributes
    ----------
    weights : dict
        Projection name -> weight source array (indexed by the projection's ``weight_index``)
        or a scalar for ``"ones"`` projections; already in SI weight units (input unit x s).
    params : dict
        Population name -> {parameter: per-cell array or scalar}.
    init : dict
        Population name -> {state variable: initial value(s)} (optional).
    """

    weights: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    init: dict = field(default_factory=dict)


# Conservative bytes per object for the runtime device (measured peaks are in the benchmarks):
# a synapse holds pre/post indices, its weight, Brian2's bookkeeping arrays and the temporary
# arrays of connect(i=, j=); a neuron a few tens of float64 state and bookkeeping values.
BYTES_PER_SYNAPSE = 96
BYTES_PER_NEURON = 1024
BASE_BYTES = 250 * 2**20  # Python, numpy, Brian2 and compiled modules


@dataclass
class FoldedGroup:
    """State of one :class:`neurons.models.Fold` of a population, simulated once per class.

    ``group`` holds one entry per class; cell ``c`` reads entry ``cls[c]``; ``reps`` are the
    classes' first cells; ``names`` the variables moved here from the cells.
    """

    fold: object
    group: object
    cls: np.ndarray
    reps: np.ndarray
    names: frozenset


def fold_plan(circuit: Circuit, level: str) -> dict:
    """Population -> ``[(fold, cls, reps)]``: the folds of its cell model that share anything
    (fewer classes than cells; see :func:`circuits.fold.fold_classes`).

    Spiking levels only: at the rate level outgoing synapses read the source's rate expression,
    and Brian2 synapses cannot read a group's linked variables.
    """
    import hashlib
    import json

    key = hashlib.sha256(json.dumps(dict(c=circuit.to_dict(), level=level), sort_keys=True,
                                    default=str).encode()).hexdigest()
    if key not in _FOLD_PLANS:      # 0.15 s at barrel size, asked for three times per run
        if len(_FOLD_PLANS) >= 4:
            _FOLD_PLANS.pop(next(iter(_FOLD_PLANS)))
        _FOLD_PLANS[key] = _fold_plan(circuit, level)
    return _FOLD_PLANS[key]


_FOLD_PLANS: dict = {}


def _fold_plan(circuit: Circuit, level: str) -> dict:
    incoming: dict[str, dict[str, list[str]]] = {name: {} for name in circuit.populations}
    for pname, proj in circuit.projections.items():
        incoming[proj.target].setdefault(proj.compartment, []).append(pname)
    plan = {}
    for name, pop in circuit.populations.items():
        model = get_model(level, pop.cell_type)
        if not model.spiking:
            continue
        for f in model.folds:
            projs = [p for comp in f.compartments for p in incoming[name].get(comp, [])]
            cls, reps = fold_classes(circuit, name, f.compartments, projs)
            if len(reps) < pop.N:
                plan.setdefault(name, []).append((f, cls, reps))
    return plan


def _fold_of(plan: dict, proj):
    """``(fold, cls, reps)`` of the fold that takes ``proj``'s synapses, or ``None``."""
    return next((p for p in plan.get(proj.target, []) if proj.compartment in p[0].compartments), None)


def simulated_pairs(circuit: Circuit, proj, plan: dict):
    """Synapses Brian2 simulates for projection ``proj`` under fold ``plan``.

    Returns ``(i, j, post, fold)``: presynaptic cells, postsynaptic cells of the description,
    indices in the target group (the class when the compartment is folded: one synapse per class,
    the representative cell's) and the fold targeted (``None``: the population itself).
    """
    f = _fold_of(plan, proj)
    if f is None:
        i, j = circuit.pairs(proj)
        return i, j, j, None
    fold, cls, reps = f
    i, j = circuit.pairs(proj, post_cells=reps)
    return i, j, cls[j], fold


def simulated_out_degree(circuit: Circuit, proj, plan: dict) -> np.ndarray:
    """Out-degree of every source cell of ``proj`` in the simulated network (from the axes)."""
    f = _fold_of(plan, proj)
    return circuit.out_degree(proj, post_cells=None if f is None else f[2])


def simulated_synapse_count(circuit: Circuit, plan: dict) -> int:
    """Synapses Brian2 holds under fold ``plan`` (see :func:`simulated_pairs`), from the axes."""
    return sum(int(simulated_out_degree(circuit, proj, plan).sum()) for proj in circuit.projections.values())


def estimate_memory(circuit: Circuit, synapses: int | None = None) -> int:
    """Estimated peak memory (bytes) of building and running ``circuit`` on the runtime device;
    ``synapses``: those Brian2 will hold (default the description's; fewer when folded, see
    :func:`simulated_synapse_count`)."""
    synapses = circuit.n_synapses() if synapses is None else int(synapses)
    return BASE_BYTES + BYTES_PER_NEURON * circuit.n_neurons() + BYTES_PER_SYNAPSE * synapses


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
    groups, synapses : dict
        Brian2 objects by population / projection name (a folded projection targets the
        folded group and holds one synapse per class).
    folds : dict
        Population name -> list of :class:`FoldedGroup` (state shared by cells with identical
        inputs, see :mod:`circuits.fold`).
    build_time : float
        Wall-clock seconds spent creating objects and connecting synapses.
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
    device: str = "runtime"
    run_args: dict | None = None
    folds: dict = field(default_factory=dict)
    _window: dict = field(default_factory=dict)
    _seeded: bool = False

    @property
    def spiking(self) -> bool:
        return bool(self.monitors)

    def _seed(self):
        if self.device != "runtime":   # standalone: the seed is a run argument
            return
        if not self._seeded and self.seed is not None:
            import brian2

            brian2.seed(self.seed)
        self._seeded = True

    def prepare(self) -> float:
        """Generate and compile every code object (a zero-length run); return wall time (s).

        Separates code generation from simulation in timings; compiled Cython modules are
        cached, so the ``before_run`` of the following :meth:`run` only reloads them.
        """
        from brian2 import second

        t0 = time.perf_counter()
        self._seed()
        self.network.run(0 * second, namespace={})  # prepares (generates/compiles) every object, 0 steps
        return time.perf_counter() - t0

    def run(self, duration: float, report=None) -> float:
        """Advance the network by ``duration`` seconds; return the wall time (s)."""
        from brian2 import second

        t0 = time.perf_counter()
        self._seed()
        self.network.run(duration * second, report=report, namespace={})
        return time.perf_counter() - t0

    def values(self, pop: str, var: str) -> np.ndarray:
        """Current values (SI) of variable ``var`` of every cell of ``pop``, folded or not."""
        for fg in self.folds.get(pop, []):
            if var in fg.names:
                return np.array(getattr(fg.group, var + "_")[:], dtype=float)[fg.cls]
        return np.array(getattr(self.groups[pop], var + "_")[:], dtype=float)

    def all_groups(self) -> list:
        """Every NeuronGroup simulated: the populations' and their folded groups."""
        return [*self.groups.values(), *(fg.group for fgs in self.folds.values() for fg in fgs)]

    def start_window(self) -> None:
        """Start a measurement window (spiking levels): remember counts and integrals now."""
        self._window = {"t": float(self.network.t_)}
        for pop, g in self.groups.items():
            if pop not in self.monitors:     # replayed spikes: nothing to measure
                continue
            model = get_model(self.level, self.circuit.population(pop).cell_type)
            snap = {v: self.values(pop, f"acc_{v}") for v in model.observables}
            snap["count"] = np.array(self.monitors[pop].count[:], dtype=float)
            self._window[pop] = snap

    def window_start_time(self) -> float:
        """Network time (s) at which the measurement window started."""
        if not self._window:
            raise RuntimeError("window_start_time: call start_window() first")
        return self._window["t"]

    def window_start_counts(self, pop: str) -> np.ndarray:
        """Spike counts per cell of ``pop`` when the window started (see :meth:`start_window`)."""
        if not self._window:
            raise RuntimeError("window_start_counts: call start_window() first")
        return self._window[pop]["count"]

    def read_window(self, pop: str, T: float | None = None) -> dict[str, np.ndarray]:
        """Window averages since :meth:`start_window`: every observable's mean (SI), the spike
        ``count`` per cell, and ``rate`` = count / window length (Hz). ``T``: the window length
        (s) when read during a run (default: network time since the window started)."""
        if not self._window:
            raise RuntimeError("read_window: call start_window() first")
        if T is None:
            T = float(self.network.t_) - self._window["t"]
        if T <= 0:
            raise RuntimeError("read_window: the window is empty; run the network first")
        model = get_model(self.level, self.circuit.population(pop).cell_type)
        snap = self._window[pop]
        out = {v: (self.values(pop, f"acc_{v}") - snap[v]) / T for v in model.observables}
        out["count"] = np.array(self.monitors[pop].count[:], dtype=float) - snap["count"]
        out["rate"] = out["count"] / T
        out["T"] = T
        return out

    def spike_trains(self, pop: str) -> tuple[np.ndarray, np.ndarray]:
        """``(cell_index, time_s)`` of every recorded spike of ``pop``."""
        mon = self.monitors[pop]
        return np.array(mon.i[:]), np.array(mon.t_[:])

    def read(self, pop: str) -> dict[str, np.ndarray]:
        """Current values of the population's observables (SI floats, one entry per cell)."""
        model = get_model(self.level, self.circuit.population(pop).cell_type)
        return {var: self.values(pop, var) for var in model.observables}

    def n_synapses(self) -> int:
        return int(sum(len(s) for s in self.synapses.values()))

    def n_neurons(self) -> int:
        """Cells of the circuit (folded groups hold shared compartments, not cells)."""
        return int(sum(len(g) for g in self.groups.values()))


def _set(group, var: str, value, N: int, what: str, run_args: dict | None = None):
    """Write ``value`` (SI) into ``group.var``; on the standalone device, record it as a run
    argument instead (set when the compiled binary starts: new values need no compilation)."""
    arr = np.asarray(value, dtype=float)
    if arr.ndim and arr.shape != (N,):
        raise ValueError(f"{what}: expected {N} values, got shape {arr.shape}")
    if run_args is None:
        setattr(group, var + "_", arr)
    else:
        from brian2 import Quantity

        view = getattr(group, var)
        run_args[view] = Quantity(arr if arr.ndim else float(arr), dim=view.dim)


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


def project_key(circuit: Circuit, level: str, phi: str, params: CellParams, dt: float,
                schedule: tuple, threads: int, law: str = "product", fold: bool = True) -> str:
    """SHA-256 key of everything compiled into a standalone project: the circuit's structure,
    the level's cell models (equations, spike condition, reset, every per-step code), phi, the
    physiological constants, dt, the run schedule (warm-up, window), OpenMP threads, the package
    and Brian2 versions and the Python environment. Tokens, weights, biases, rates and seeds are
    run arguments and not part of it; spikes are always recorded on this device."""
    import hashlib
    import json
    import sys
    from dataclasses import asdict

    from importlib import metadata

    import brian2

    try:
        version = metadata.version("ctmhsa")
    except metadata.PackageNotFoundError:   # running from a source tree
        version = "source"
    models = {p.cell_type: asdict(get_model(level, p.cell_type)) for p in circuit.populations.values()}
    blob = json.dumps(dict(circuit=circuit.to_dict(), level=level, phi=phi, law=law, fold=bool(fold),
                           params=params.to_dict(),
                           dt=dt, schedule=list(schedule), threads=threads, models=models,
                           version=version, brian2=brian2.__version__,
                           # the compiler flags name the environment's include paths: two
                           # environments sharing a cache would otherwise rebuild each other's project
                           env=sys.prefix), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


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
    device: str = "runtime",
    replay: dict | None = None,
    law: str = "product",
    fold: bool = True,
) -> BuiltCircuit:
    """Create the Brian2 network of ``circuit`` at fidelity ``level``.

    Parameters
    ----------
    circuit : Circuit
        Description to instantiate.
    level : str
        Fidelity level with registered models (``"rate"``).
    values : CircuitValues
        Weights, per-cell parameters and initial values from the mapping layer.
    phi : str
        Feature map of the dendritic nonlinearities.
    params : CellParams
        Physiological constants.
    dt : float
        Integration time step (s).
    codegen : {"numpy", "cython"}
        Brian2 code-generation target of the runtime device.
    seed : int, optional
        Seed of Brian2's random numbers (spiking levels), set before the first run, and of the
        escape cells' first uniform draws (:func:`neurons.models.initial_draws`).
    record_spikes : bool or tuple of str
        Record spike times (all populations, or the named ones); counts are always kept.
    device : {"runtime", "cpp_standalone"}
        Brian2 device. On ``"cpp_standalone"`` (activated by the caller, see
        :mod:`circuits.standalone`) every value of ``values`` and the seed become run
        arguments of the compiled binary (``BuiltCircuit.run_args``), and a spiking
        population's observables are integrated from ``t_win`` on.
    law : str
        Interaction law of the L5 IT somata (:data:`neurons.laws.LAWS`; default the product).
    replay : dict, optional
        Population name -> ``(cell_indices, spike_times_s)``: the population is a
        ``SpikeGeneratorGroup`` replaying these spikes (recorded in another run) instead of
        simulated cells; its projections are event-driven as from the cells themselves.
    fold : bool
        Simulate deterministic compartments with identical synaptic input once per class and
        link the cells to them (:mod:`circuits.fold`; exact: the same seed gives the same
        spikes). Spiking levels only. ``False`` gives every cell its own compartments, as in the
        description.
    """
    import brian2 as b2

    standalone = device == "cpp_standalone"
    run_args = {} if standalone else None
    if not standalone:
        configure_brian2(codegen)
    t0 = time.perf_counter()
    ns = with_units(params, dt)
    clock = b2.Clock(dt=dt * b2.second, name=f"clock_{circuit.name}")
    pops, projs = circuit.populations, circuit.projections

    incoming: dict[str, dict[str, list[str]]] = {name: {} for name in pops}
    for pname, proj in projs.items():
        incoming[proj.target].setdefault(proj.compartment, []).append(pname)

    groups, replay = {}, dict(replay or {})
    folds: dict[str, list[FoldedGroup]] = {}
    plan = {k: v for k, v in fold_plan(circuit, level).items() if k not in replay} if fold else {}
    for name, (idx, times) in replay.items():
        groups[name] = b2.SpikeGeneratorGroup(pops[name].N, np.asarray(idx, np.int32),
                                              np.asarray(times, float) * b2.second, name=name,
                                              clock=clock)
    for name, pop in pops.items():
        if name in replay:
            continue
        model = get_model(level, pop.cell_type)
        eqs = model.render(phi, incoming[name], law=law)
        plans = plan.get(name, [])
        cell_obs = [v for v in model.accumulated if not any(v in f.variables for f, _, _ in plans)]
        for f, cls, reps in plans:
            moved = {*f.variables, *f.parameters}
            for comp in f.compartments:
                var = model.inputs[comp][0]
                moved |= {var, *(f"in_{p}" for p in incoming[name].get(comp, []))}
            # folds exist at spiking levels only: window integrals of the folded observables
            fobs = [v for v in model.observables if v in f.variables]
            moved |= {f"acc_{v}" for v in fobs}
            feqs, eqs, updates = split_equations(eqs, moved, f.variables, f.cached)
            moved |= set(f.cached)
            feqs += b2.Equations("t_win : second (shared)")
            # order 2: after the cells' own state update (0) and regular code (1), so a cell
            # integrating a folded variable sees its value from the start of the step, as unfolded
            fg = b2.NeuronGroup(len(reps), feqs, method=model.method, namespace=ns, clock=clock,
                                name=f"{name}_{f.name}", order=2)
            if updates:   # the cells' state update reads the step's start value, spikes the new one
                code = "\n".join(updates.values())
                fg.run_regularly(code, clock=clock, when="start", name=f"{name}_{f.name}_cache_start")
                fg.run_regularly(code, clock=clock, when="groups", order=3, name=f"{name}_{f.name}_cache")
            _accumulate(fg, fobs, clock)
            folds.setdefault(name, []).append(FoldedGroup(f, fg, cls, reps, frozenset(moved)))
        g = b2.NeuronGroup(pop.N, eqs, method=model.method, namespace=ns, clock=clock, name=name,
                           threshold=model.threshold or None,
                           reset=model.reset or None, refractory=model.refractory or False)
        for fg in folds.get(name, []):
            for v in (*fg.fold.variables, *fg.fold.cached):
                setattr(g, v, b2.linked_var(fg.group, v, index=fg.cls.astype(int)))
        given = values.params.get(name, {})
        unknown = set(given) - set(model.parameters)
        if unknown:
            raise ValueError(f"values.params[{name!r}]: {sorted(unknown)[0]!r} is not a parameter of {pop.cell_type}")
        missing = set(model.parameters) - set(given)
        if missing:
            raise ValueError(f"values.params[{name!r}]: missing {sorted(missing)}")
        # the escape cells' first uniform draws: seeded per population, the same on every device
        init = {**initial_draws(model, pop.N, seed, name), **values.init.get(name, {})}
        for kind, items in (("params", given), ("init", init)):
            for var, val in items.items():
                _set_cells(g, folds.get(name, []), var, val, pop.N, f"values.{kind}[{name!r}][{var!r}]", run_args)
        add_step_code(g, model, clock)
        if model.spiking:
            _accumulate(g, cell_obs, clock)
        groups[name] = g

    synapses = {}
    for pname, proj in projs.items():
        kw = synapse_model(get_model(level, pops[proj.source].cell_type),
                           get_model(level, pops[proj.target].cell_type), proj.compartment, pname)
        i, j, post, f = simulated_pairs(circuit, proj, plan)
        target = groups[proj.target] if f is None else \
            next(fg.group for fg in folds[proj.target] if fg.fold is f)
        S = b2.Synapses(groups[proj.source], target, namespace=ns, clock=clock, name=pname, **kw)
        S.connect(i=i.astype(np.int32), j=post.astype(np.int32))
        if pname not in values.weights:
            raise ValueError(f"values.weights: missing weights for projection {pname!r}")
        w = circuit.synapse_weights(proj, values.weights[pname], i, j)
        if standalone:
            run_args[S.w] = b2.Quantity(np.ascontiguousarray(w, dtype=float), dim=S.w.dim)
        else:
            S.w_[:] = w
        synapses[pname] = S

    monitors = {}
    for name, g in groups.items():
        if name not in replay and get_model(level, pops[name].cell_type).spiking:
            # standalone: counts per chunk are only known from spike times
            rec = standalone or (record_spikes if isinstance(record_spikes, bool) else name in record_spikes)
            monitors[name] = b2.SpikeMonitor(g, record=rec, name=f"{name}_spikes")
    objects = [*groups.values(), *(fg.group for fgs in folds.values() for fg in fgs),
               *synapses.values(), *monitors.values()]
    if standalone:   # the seed, read by code inserted after the run arguments are applied
        rng = b2.NeuronGroup(1, "seed_value : 1", name="rng", clock=clock)
        run_args[rng.seed_value] = float(0 if seed is None else seed)
        objects.append(rng)
    net = b2.Network(*objects)
    return BuiltCircuit(circuit, level, net, groups, synapses, time.perf_counter() - t0, dt,
                        monitors=monitors, seed=seed, device=device, run_args=run_args, folds=folds)
