"""Memory a circuit will need, estimated from its description before anything is allocated."""

from __future__ import annotations

from ctmhsa.neurons.models import get_model

from .graph import Circuit

__all__ = ["estimate_memory", "stream_memory", "BYTES_PER_SYNAPSE", "BYTES_PER_NEURON", "BASE_BYTES"]

# Conservative bytes per object for the runtime device (measured peaks are in the benchmarks):
# a synapse holds pre/post indices, its weight, Brian2's bookkeeping arrays and the temporary
# arrays of connect(i=, j=); a neuron a few tens of float64 state and bookkeeping values.
BYTES_PER_SYNAPSE = 96
BYTES_PER_NEURON = 1024
BASE_BYTES = 250 * 2**20  # Python, numpy, Brian2 and compiled modules


def estimate_memory(circuit: Circuit, synapses: int | None = None) -> int:
    """Estimated peak memory (bytes) of building and running ``circuit`` on the runtime device;
    ``synapses``: those Brian2 will hold (default the description's; fewer when folded, see
    :func:`simulated_synapse_count`)."""
    synapses = circuit.n_synapses() if synapses is None else int(synapses)
    return BASE_BYTES + BYTES_PER_NEURON * circuit.n_neurons() + BYTES_PER_SYNAPSE * synapses


def stream_memory(circuit: Circuit, level: str, plan: dict, windows: int, n_chunks: int, compiled: bool) -> int:
    """Estimated bytes a stream of ``windows`` presentations of ``circuit`` at ``level`` keeps
    until its run ends (they grow with the stream; the network's own memory aside).

    Per window and population, float64 values: the window means of its cell model's
    observables, per cell or, where ``plan`` (:func:`ctmhsa.circuits.fold.fold_plan`) folds
    one, per class, and at a spiking level its window count per cell; a ``compiled`` stream
    samples them at each window's opening and end (its chunk sums are kept once), the runtime
    device keeps one mean, the count and ``n_chunks`` chunk counts per window (the rate level:
    its state at 90 % and at the end of each presentation). A population read with a
    latency is sampled more often on a compiled device (its windows' boundaries share a finer
    clock); the class cells it applies to are few, so that is left out."""
    if windows <= 0:
        return 0
    per_window = 0
    for name, pop in circuit.populations.items():
        model = get_model(level, pop.cell_type)
        classes = {v: len(reps) for f, _, reps in plan.get(name, []) for v in f.variables}
        means = sum(classes.get(v, pop.N) for v in model.observables)
        counts = pop.N if model.spiking else 0
        per_window += 2 * (means + counts) if compiled else (means + counts * (1 + n_chunks) if model.spiking
                                                             else 2 * means)
    return 8 * int(windows) * per_window
