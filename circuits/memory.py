"""Memory a circuit will need, estimated from its description before anything is allocated."""

from __future__ import annotations

from .graph import Circuit

__all__ = ["estimate_memory", "BYTES_PER_SYNAPSE", "BYTES_PER_NEURON", "BASE_BYTES"]

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
