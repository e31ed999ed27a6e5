"""Build, then run: :func:`build_mhsa` makes a :class:`Simulation`; :meth:`Simulation.run` runs it.

As in Nengo's Builder/Simulator split: building validates every argument, describes the
pathway (:func:`ctmhsa.circuits.builders.pathway`), checks that it fits in memory, encodes tokens and
weights into rates, synaptic weights and biases (:mod:`ctmhsa.mapping.encode`) and hands them to the
runner of the run options (:mod:`ctmhsa.sims.runners`). On the runtime device the Brian2 network then
exists, and a user may add monitors to ``sim.network`` before ``sim.run()``::

    sim = build_mhsa(X, WQ, WK, WV, WO, neuron="escape")
    mon = brian2.StateMonitor(sim.groups["l23"], "V_a", record=[0, 1])
    sim.network.add(mon)
    res = sim.run(2 * brian2.second)
"""

from __future__ import annotations

import time

from ctmhsa.circuits.fold import fold_plan, simulated_synapse_count
from ctmhsa.circuits.memory import BASE_BYTES, estimate_memory
from ctmhsa.mapping.baseline import add_lif_drive
from ctmhsa.mapping.dendrites import add_phi_variances
from ctmhsa.mapping.encode import encode
from ctmhsa.mapping.reference import linear_mhsa

from .options import AUTO_CYTHON_SYNAPSES, CircuitOptions, RunOptions, split_options
from .readout import read_out
from .result import SimulationResult
from .runners import Runner, runner_for
from .validate import available_memory, check_inputs

__all__ = ["build_mhsa", "Simulation"]


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
        The exact stages (:func:`ctmhsa.mapping.reference.linear_mhsa`), for comparison only.
    runner : ctmhsa.sims.runners.Runner
    """

    def __init__(self, circuit, encoding, reference, inputs: dict, sizes: dict, options: CircuitOptions,
                 run_options: RunOptions, runner: Runner, memory_estimate: int, simulated_synapses: int,
                 t_start: float):
        self.circuit, self.encoding, self.reference, self.inputs, self.sizes = circuit, encoding, reference, inputs, sizes
        self.options, self.run_options, self.runner = options, run_options, runner
        self.memory_estimate, self.simulated_synapses = memory_estimate, simulated_synapses
        self._t_start, self._ran = t_start, False
        self.observations = None   # what the runner measured (ctmhsa.sims.runners.Observations), after run()

    @property
    def network(self):
        """The ``brian2.Network`` (runtime device, one network): add monitors before :meth:`run`."""
        return self.runner.network

    @property
    def groups(self) -> dict:
        """Population name -> Brian2 group (runtime device)."""
        return self.runner.built.groups

    def run(self, duration=None) -> SimulationResult:
        """Run for ``duration`` (s or a Brian2 time; default ``run_options.duration``: the
        measurement window after the warm-up at the spiking levels) and read the result out.

        A simulation runs once (its measurement window starts after the warm-up of a fresh
        network); build another for another run.
        """
        if self._ran:
            raise RuntimeError("run: this simulation has already run; build a new one (ctmhsa.sims.build_mhsa)")
        ro = self.run_options if duration is None else self.run_options.replace(duration=duration)
        self._ran = True
        self.observations = self.runner.run(ro)
        res = read_out(self, self.observations, ro)
        res.timings["total"] = time.perf_counter() - self._t_start
        return res

    def __repr__(self):
        o = self.options
        return (f"<Simulation {o.neuron} {o.circuit} {self.circuit.n_neurons():,} neurons "
                f"{self.circuit.n_synapses():,} synapses on {type(self.runner).__name__}>")


def _per_task(estimate: int, heads: int) -> int:
    """The share of one of ``heads`` tasks in a network's memory ``estimate`` (bytes): the
    fixed base once, the rest split evenly (the heads are equal; the nuclei are small)."""
    return BASE_BYTES + (estimate - BASE_BYTES) // max(int(heads), 1)


def build_mhsa(X, WQ, WK, WV, WO, *, Y=None, WS=None, circuit_options: CircuitOptions | None = None,
               run_options: RunOptions | None = None, **options) -> Simulation:
    """Validate, describe, encode and build the attention pathway; return a :class:`Simulation`.

    Parameters
    ----------
    X, WQ, WK, WV, WO, Y, WS
        Tokens and weights, as in :func:`ctmhsa.sims.simulate_mhsa`.
    circuit_options : CircuitOptions, optional
        What is built (default :class:`ctmhsa.sims.options.CircuitOptions`).
    run_options : RunOptions, optional
        How it runs (default :class:`ctmhsa.sims.options.RunOptions`).
    **options
        Any field of either, overriding them (the keywords of :func:`ctmhsa.sims.simulate_mhsa`).

    Raises
    ------
    ValueError, TypeError
        Bad arguments, or a network that would not fit in memory (the message gives the
        estimate) — before any Brian2 object exists.
    """
    t_start = time.perf_counter()
    co, ro = split_options(circuit_options, run_options, **options)
    a = check_inputs(X, WQ, WK, WV, WO, Y=Y, WS=WS, causal=co.causal, normalize=co.normalize, phi=co.phi)
    ro = ro.resolved(co.neuron)
    runner_for(ro).check(co, ro)
    circuit = co.describe(a["n"], a["dk"], a["dv"], a["de"], H=a["H"], m=a["m"], cross=Y is not None,
                          skip=WS is not None)
    limit = int(0.8 * available_memory()) if ro.max_memory is None else int(ro.max_memory)
    # a split run holds one head per task (on a worker): the limit applies to one head
    per = a["H"] if ro.scheduler is not None else 1
    floor = _per_task(estimate_memory(circuit, 0), per)    # the neurons alone: refuses a huge network at once
    if floor > limit:
        raise ValueError(
            f"max_memory: the network needs an estimated {floor / 2**30:.2f} GiB for its "
            f"{circuit.n_neurons():,} neurons alone, but the limit is {limit / 2**30:.2f} GiB; "
            "reduce n, m, H, dk, dv or de, or raise max_memory")
    # synapses Brian2 will hold: fewer than the description's when compartments are folded
    if per > 1:
        # the heads are identical and fold alike: H times one head's count, without the fold plan
        # of the whole pathway (at 100 barrel heads that plan alone took minutes on the client;
        # every worker makes its head's own plan)
        one = co.describe(a["n"], a["dk"], a["dv"], a["de"], H=1, m=a["m"], cross=Y is not None,
                          skip=WS is not None)
        n_simulated = per * simulated_synapse_count(one, fold_plan(one, co.neuron) if co.fold else {})
    else:
        n_simulated = simulated_synapse_count(circuit, fold_plan(circuit, co.neuron) if co.fold else {})
    need = _per_task(estimate_memory(circuit, n_simulated), per)
    if need > limit:
        raise ValueError(
            f"max_memory: the network{' (one head of the split run)' if per > 1 else ''} needs an estimated "
            f"{need / 2**30:.2f} GiB "
            f"({circuit.n_neurons():,} neurons, {circuit.n_synapses():,} synapses) but the limit is "
            f"{limit / 2**30:.2f} GiB; reduce n, m, H, dk, dv or de, or raise max_memory")
    if ro.codegen == "auto":
        ro = ro.replace(codegen="cython" if circuit.n_synapses() >= AUTO_CYTHON_SYNAPSES else "numpy")
    inputs = {k: a[k] for k in ("X", "WQ", "WK", "WV", "WO", "Y", "WS")}
    x = inputs
    # the reference is computed for comparison only; nothing of it enters the circuit
    ref = linear_mhsa(x["X"], x["WQ"], x["WK"], x["WV"], x["WO"], phi=co.phi, Y=x["Y"], causal=co.causal,
                      normalize=co.normalize, WS=x["WS"], method="linear" if co.circuit == "linear" else "vectorized")
    enc = encode(circuit, x["X"], x["WQ"], x["WK"], x["WV"], x["WO"], Y=x["Y"], gains=co.code_gains, params=co.params,
                 phi=co.phi, WS=x["WS"])
    # escape cells correct phi for their dendrites' spike-noise variance (no-op at other levels);
    # a split run computes them per head on its worker (the client runs only the nuclei)
    if ro.scheduler is None:
        add_phi_variances(circuit, enc.values, co.params, ro.dt, co.neuron)
    # lif somata: drive on their calibrated affine branch, baselines cancelled (no-op otherwise)
    add_lif_drive(circuit, enc.values, co.neuron, ro.dt)
    runner = runner_for(ro)(circuit, enc, inputs, co, ro)
    sizes = {k: a[k] for k in ("n", "m", "H", "dk", "dv", "de")}
    return Simulation(circuit, enc, ref, inputs, sizes, co, ro, runner, need, n_simulated, t_start)
