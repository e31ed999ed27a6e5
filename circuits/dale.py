"""Dale's law: every cell excitatory or inhibitory.

The circuit of the paper computes with signed weights: a relay cell contacts one L2/3 basal
dendrite with ``+WQ[c, e]`` and another with ``-WQ[c', e]``; an L5 IT ON cell excites its L5 PT
ON cell and inhibits the OFF cell; L5 PT cells project to nucleus 2 through the signed WO. Real
cells make synapses of one sign (Dale's principle; Eccles 1976, Strata & Harvey 1999).

:func:`apply` rewrites a description so that every cell obeys it. Each excitatory population
with a signed projection gets a population of **feedforward inhibitory followers** of the same
shape, cell type ``"ffi"``, one per cell, driven one-to-one by it (projection ``<pop>_ffi_drive``,
an excitatory synapse strong enough that each presynaptic spike fires the follower once, at the
next step). The signed projection ``p`` becomes two: ``p`` from the excitatory cells carrying the
positive weights (:attr:`ctmhsa.circuits.graph.Projection.sign` ``"+"``) and ``p_ffi`` from their
followers carrying the negative ones (``"-"``). This is thalamocortical and intracortical
feedforward inhibition: relay spikes drive fast-spiking interneurons that fire with a
millisecond's delay and inhibit the pyramidal cells the relays excite (Gabernet et al. 2005,
Neuron 48:315; Cruikshank, Lewis & Connors 2007, Nat Neurosci 10:462; Pouille & Scanziani 2001,
Science 293:1159). Because a follower fires with every spike of its cell, the input each
dendrite integrates has the same mean and, up to the one-step delay, the same fluctuations: the
split costs neurons, not accuracy.

Projections whose weights cannot be negative stay as they are: pooling onto interneurons, and
``"ones"`` weights with no ON/OFF axis in their index (the attention projection L2/3 → L5 IT
apical). Inhibitory cells (:data:`INHIBITORY`) keep their projections: their synapses are
shunting (divisive) conductances or negative currents. :func:`check_signs` verifies, on the
weights a circuit is given, that no cell makes synapses of both signs, and raises otherwise.

The values of a Dale circuit are those of the plain circuit (the mapping layer encodes the plain
one): :func:`add_values` lets ``p_ffi`` share ``p``'s weight source (each keeps its sign) and
gives the drive synapses their weight.
"""

from __future__ import annotations

import numpy as np

from .graph import Circuit, Population, Projection

__all__ = ["apply", "add_values", "check_signs", "followers", "INHIBITORY", "FOLLOWER", "FFI_SUFFIX",
           "DRIVE_SUFFIX", "signed"]

FOLLOWER = "ffi"
"""Cell type of the feedforward inhibitory followers."""

INHIBITORY = frozenset({"interneuron", FOLLOWER})
"""Inhibitory cell types: the macrocolumns' divisive interneurons (and a transformer's reticular
cells, the same model), and the followers. Every other cell type is excitatory."""

FFI_SUFFIX = "_ffi"
"""Suffix of a follower population's name and of the negative half of a split projection."""

DRIVE_SUFFIX = "_drive"
"""Suffix of the projection from a population to its followers (``<pop>_ffi_drive``)."""

DRIVE_WEIGHT = 1.0
"""Weight of a follower's drive synapse (dimensionless: each spike fires the follower once)."""


def signed(circuit: Circuit, proj: Projection) -> bool:
    """Whether ``proj`` may carry negative weights from an excitatory cell (then :func:`apply`
    splits it): a projection from an excitatory population whose weight source is not a pooling
    or an unsigned ``"ones"`` (no ON/OFF ``sign`` axis in its index)."""
    if circuit.population(proj.source).cell_type in INHIBITORY:
        return False
    if proj.weight == "pooling":
        return False
    if proj.weight == "ones" and not any(sel.split(".", 1)[1] == "sign" for sel in proj.weight_index):
        return False
    return True


def followers(circuit: Circuit) -> dict[str, str]:
    """Population -> the name of its followers, for every population :func:`apply` gives them."""
    return {p.source: p.source + FFI_SUFFIX for p in circuit.projections.values() if signed(circuit, p)}


def apply(circuit: Circuit) -> Circuit:
    """The circuit under Dale's law (a new description; ``circuit`` is unchanged).

    Parameters
    ----------
    circuit : Circuit
        A plain description (``meta.dale`` False).

    Returns
    -------
    Circuit
        The same populations and projections, every signed projection split into its positive
        part from the excitatory cells and its negative part from their followers (module
        docstring); ``meta.dale`` True.

    Raises
    ------
    ValueError
        ``circuit`` is already under Dale's law.
    """
    if circuit.meta.dale:
        raise ValueError(f"circuit {circuit.name!r} is already under Dale's law")
    meta = circuit.meta.to_dict()
    out = Circuit(circuit.name, meta=dict(meta, dale=True))
    for pop in circuit.populations.values():
        out.add_population(pop)
    for src, name in followers(circuit).items():
        pop = circuit.population(src)
        out.add_population(Population(name, FOLLOWER, pop.axes, pop.sizes, mask=pop.mask, area=pop.area,
                                      role="follower"))
        out.add_projection(Projection(name + DRIVE_SUFFIX, src, name, "soma", tuple((a, a) for a in pop.axes),
                                      pathway="feedforward"))
    for pname, proj in circuit.projections.items():
        if not signed(circuit, proj):
            out.add_projection(proj)
            continue
        out.add_projection(Projection(pname, proj.source, proj.target, proj.compartment, proj.match, proj.weight,
                                      proj.weight_index, proj.pathway, sign="+", origin=pname))
        out.add_projection(Projection(pname + FFI_SUFFIX, proj.source + FFI_SUFFIX, proj.target,
                                      proj.compartment, proj.match, proj.weight, proj.weight_index,
                                      proj.pathway, sign="-", origin=pname))
    out.check()
    return out


def add_values(circuit: Circuit, values) -> None:
    """Weights of a Dale circuit's own projections, into ``values`` (in place): every negative
    half shares its origin's weight source, every drive synapse :data:`DRIVE_WEIGHT`."""
    for pname, proj in circuit.projections.items():
        if proj.sign == "-":
            values.weights[pname] = values.weights[proj.origin]
        elif proj.pathway == "feedforward" and circuit.population(proj.target).cell_type == FOLLOWER:
            values.weights[pname] = DRIVE_WEIGHT


def check_signs(circuit: Circuit, weights: dict, conductance_inputs: dict | None = None) -> None:
    """Raise ``ValueError`` if a cell of ``circuit`` makes synapses of both signs, or of the
    wrong sign for its type (excitatory: >= 0; inhibitory: <= 0 onto a current, >= 0 onto a
    shunting conductance).

    Parameters
    ----------
    circuit : Circuit
        The description (a Dale circuit, or any other: then the check says where it breaks).
    weights : dict
        Projection name -> weight of every synapse, in the order of
        :meth:`ctmhsa.circuits.graph.Circuit.pairs` (as the builder writes them).
    conductance_inputs : dict, optional
        ``(population, compartment)`` -> True where the input is a shunting conductance (the
        divisive shunt, whose weight is a positive conductance of an inhibitory synapse).
    """
    conductance_inputs = conductance_inputs or {}
    for pname, proj in circuit.projections.items():
        w = np.asarray(weights[pname], float)
        if w.size == 0:
            continue
        inhibitory = circuit.population(proj.source).cell_type in INHIBITORY
        shunt = conductance_inputs.get((proj.target, proj.compartment), False)
        bad = (w < 0) if (not inhibitory or shunt) else (w > 0)
        if bad.any():
            kind = "inhibitory" if inhibitory else "excitatory"
            raise ValueError(
                f"Dale's law: projection {pname!r} from the {kind} population {proj.source!r} has "
                f"{int(bad.sum())} synapse(s) of the wrong sign (e.g. {w[bad][0]:.3g}); split it with "
                "ctmhsa.circuits.dale.apply")
