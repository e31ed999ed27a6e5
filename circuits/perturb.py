"""Perturbations of a built circuit: lesions and drive, for in-silico experiments.

Three kinds, given to :func:`ctmhsa.sims.simulate_mhsa` / :func:`ctmhsa.sims.build_mhsa` as
``perturbations=[...]`` (also ``ctmhsa.perturb``):

==========================================  ==================================================
``Silence("l23", cells=None, start, stop)``  no output from the cells over ``[start, stop)``: no
                                             spikes at the spiking levels, a zero rate seen by
                                             every outgoing synapse at the rate level (the cells'
                                             own state runs on, as under photo-inhibition of
                                             their axon terminals)
``Cut("attention", fraction=1.0)``           a random ``fraction`` of the projection's synapses
                                             removed (weight 0; seeded by the run's seed)
``Drive("interneuron", rate=20*Hz)``         Poisson relay cells at ``rate``, one per target
                                             cell, on its ``compartment`` (default ``soma``)
                                             through synapses of ``weight`` (default: the mean
                                             weight the compartment already receives, so the
                                             drive is "rate Hz more of its usual input")
==========================================  ==================================================

**Names by place.** A target is a population (or projection) name, optionally preceded by its
place: ``"l23"`` matches the L2/3 cells of every area; ``"area1.l23"`` (or ``"head1.l23"``) those
of area 1 only; ``"block0.l23"`` those of block 0 (this release builds one block). A projection
path selects the synapses whose postsynaptic cell (or presynaptic, where the target has no such
axis, e.g. ``pt_out`` onto nucleus 2) is in that place.

Times are on the network's clock (t = 0 at the start of the warm-up), in seconds or Brian2
times. A perturbed run is recorded in the circuit's description (``meta.perturbations``, plain
data), so its compiled project and its provenance differ from the intact circuit's. Results are
returned even where the perturbation moves the circuit out of its working range: the violations
are flagged (``res.diagnostics["operating"]``), at the rate level too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ctmhsa.neurons.params import seconds

from .graph import Circuit, Population, Projection

__all__ = ["Silence", "Cut", "Drive", "PERTURBATIONS", "check_perturbations", "apply", "select_cells",
           "cut_mask", "silence_values", "drive_values", "drive_source", "DRIVE_PREFIX", "DRIVE_SUFFIX"]

DRIVE_PREFIX, DRIVE_SUFFIX = "drive_", "_in"
"""A :class:`Drive` of population ``p`` adds relays ``drive_p`` and their projection ``drive_p_in``
(``drive_p_basal``/``drive_p_apical`` for a dendrite: one Drive per population and compartment)."""


def drive_source(population: str, compartment: str = "soma") -> str:
    """Name of the relay population of a :class:`Drive` of ``population`` on ``compartment``."""
    return DRIVE_PREFIX + population + ("" if compartment == "soma" else f"_{compartment}")

_PLACE = re.compile(r"^(?:(block)(\d+)\.)?(?:(area|head)(\d+)\.)?([A-Za-z_][A-Za-z0-9_]*)$")


def _hz(name: str, value) -> float:
    if hasattr(value, "dim"):
        import brian2 as b2

        if not b2.have_same_dimensions(value, b2.Hz):
            raise ValueError(f"{name}: expected a rate (Hz), got {value}")
        value = float(value / b2.Hz)
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) \
            or not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name}: expected a positive finite rate (Hz), got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Silence:
    """Silence a population (or some of its cells) over ``[start, stop)``.

    Parameters
    ----------
    population : str
        A population name or path (module docstring).
    cells : array of int, optional
        Flat indices of the population's cells to silence (default all selected by the path).
    start, stop : float or brian2 time, optional
        Interval on the network clock (s; default: the whole run).
    """

    population: str
    cells: object = None
    start: object = None
    stop: object = None

    def __post_init__(self):
        _check_name("Silence.population", self.population)
        start = seconds("Silence.start", self.start, allow_none=True, allow_zero=True)
        stop = seconds("Silence.stop", self.stop, allow_none=True, allow_zero=True)
        if start is not None and stop is not None and stop <= start:
            raise ValueError(f"Silence.stop: expected a time after start = {start} s, got {stop} s")
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "stop", stop)
        if self.cells is not None:
            c = np.asarray(self.cells)
            if c.ndim != 1 or not np.issubdtype(c.dtype, np.integer):
                raise TypeError("Silence.cells: expected a 1-d array of integer cell indices")
            object.__setattr__(self, "cells", tuple(int(v) for v in c))

    def describe(self) -> dict:
        return dict(kind="silence", target=self.population, cells=None if self.cells is None else list(self.cells),
                    start=self.start, stop=self.stop)


@dataclass(frozen=True)
class Cut:
    """Remove all or a random fraction of a projection's synapses.

    Parameters
    ----------
    projection : str
        A projection name or path (module docstring).
    fraction : float
        Fraction of the selected synapses removed, in (0, 1].
    """

    projection: str
    fraction: float = 1.0

    def __post_init__(self):
        _check_name("Cut.projection", self.projection)
        f = self.fraction
        if isinstance(f, bool) or not isinstance(f, (int, float, np.floating)) or not 0 < f <= 1:
            raise ValueError(f"Cut.fraction: expected a number in (0, 1], got {f!r}")
        object.__setattr__(self, "fraction", float(f))

    def describe(self) -> dict:
        return dict(kind="cut", target=self.projection, fraction=self.fraction)


@dataclass(frozen=True)
class Drive:
    """Add Poisson drive to a population.

    Parameters
    ----------
    population : str
        A population name or path (module docstring).
    rate : float or brian2 rate
        Rate of every drive relay (Hz).
    weight : float, optional
        Synaptic weight in SI units of the compartment's input times seconds (V s onto a
        dendrite or soma potential, dimensionless onto the interneurons' pooled rate); default
        the mean absolute weight the compartment already receives.
    compartment : str
        Compartment driven (``"soma"``, ``"basal"`` or ``"apical"``).
    """

    population: str
    rate: object
    weight: object = None
    compartment: str = "soma"

    def __post_init__(self):
        _check_name("Drive.population", self.population)
        object.__setattr__(self, "rate", _hz("Drive.rate", self.rate))
        if self.weight is not None:
            w = self.weight
            if isinstance(w, bool) or not isinstance(w, (int, float, np.floating)) or not np.isfinite(w):
                raise ValueError(f"Drive.weight: expected a finite number (SI), got {w!r}")
            object.__setattr__(self, "weight", float(w))
        if self.compartment not in ("soma", "basal", "apical"):
            raise ValueError(f"Drive.compartment: expected 'soma', 'basal' or 'apical', got {self.compartment!r}")

    def describe(self) -> dict:
        return dict(kind="drive", target=self.population, rate=self.rate, weight=self.weight,
                    compartment=self.compartment)


PERTURBATIONS = (Silence, Cut, Drive)


def _check_name(what: str, value) -> None:
    if not isinstance(value, str) or not _PLACE.match(value):
        raise ValueError(f"{what}: expected a name or a path such as 'l23' or 'area1.l23', got {value!r}")


def _parse(path: str) -> tuple[int | None, int | None, str]:
    m = _PLACE.match(path)
    block, head, name = m.group(2), m.group(4), m.group(5)
    return (None if block is None else int(block)), (None if head is None else int(head)), name


def check_perturbations(perturbations, circuit: Circuit) -> tuple:
    """The perturbations as a tuple, every target resolved against ``circuit`` (``ValueError``
    naming the bad entry, with the circuit's names; before anything is built)."""
    if perturbations is None:
        return ()
    if isinstance(perturbations, PERTURBATIONS):
        perturbations = (perturbations,)
    out = tuple(perturbations)
    for k, p in enumerate(out):
        if not isinstance(p, PERTURBATIONS):
            raise TypeError(f"perturbations[{k}]: expected ctmhsa.perturb.Silence, Cut or Drive, got "
                            f"{type(p).__name__}")
        target = p.projection if isinstance(p, Cut) else p.population
        block, head, name = _parse(target)
        names = circuit.projections if isinstance(p, Cut) else circuit.populations
        kind = "projection" if isinstance(p, Cut) else "population"
        if name not in names:
            raise ValueError(f"perturbations[{k}]: {name!r} is not a {kind} of this circuit; its {kind}s are "
                             f"{list(names)}")
        if block not in (None, 0):
            raise ValueError(f"perturbations[{k}]: block {block} does not exist (the circuit has 1 block)")
        if head is not None and not 0 <= head < circuit.meta.H:
            raise ValueError(f"perturbations[{k}]: area {head} does not exist (areas 0-{circuit.meta.H - 1})")
        if isinstance(p, Silence) and p.cells is not None:
            N = circuit.populations[name].N
            if any(not 0 <= c < N for c in p.cells):
                raise ValueError(f"perturbations[{k}]: Silence.cells: indices must lie in [0, {N}) for {name!r}")
        if isinstance(p, Drive) and p.compartment not in circuit.populations[name].compartments:
            raise ValueError(f"perturbations[{k}]: {name!r} has no {p.compartment!r} compartment; it has "
                             f"{list(circuit.populations[name].compartments)}")
        if isinstance(p, Drive) and head is not None:
            raise ValueError(f"perturbations[{k}]: a Drive targets a whole population; silence the rest instead")
    return out


def select_cells(pop: Population, head: int | None) -> np.ndarray:
    """Boolean mask of ``pop``'s cells in area ``head`` (all where ``head`` is None)."""
    if head is None or "head" not in pop.axes:
        return np.ones(pop.N, bool)
    return pop.axis("head") == head


def apply(circuit: Circuit, perturbations: tuple) -> Circuit:
    """A copy of ``circuit`` with the perturbations' structure: their plain-data description in
    ``meta.perturbations`` and a relay population with a one-to-one projection per
    :class:`Drive` (named ``drive_<population>``)."""
    if not perturbations:
        return circuit
    c = Circuit(circuit.name, meta=circuit.meta)   # (a copy)
    for p in circuit.populations.values():
        c.add_population(p)
    for q in circuit.projections.values():
        c.add_projection(q)
    for p in perturbations:
        if isinstance(p, Drive):
            _, _, name = _parse(p.population)
            target = circuit.populations[name]
            src = drive_source(name, p.compartment)
            if src in c.populations:
                raise ValueError(f"perturbations: two Drives target {name!r}.{p.compartment}; give one")
            c.add_population(Population(src, "relay", target.axes, target.sizes, mask=target.mask, area="drive"))
            c.add_projection(Projection(src + DRIVE_SUFFIX, src, name, p.compartment,
                                        tuple((a, a) for a in target.axes), pathway="drive"))
    c.meta.perturbations = tuple(p.describe() for p in perturbations)
    c.check()
    return c


def _by_target(circuit: Circuit, kind: str) -> dict:
    """Target name -> the descriptions of ``kind`` in ``meta.perturbations``."""
    out: dict = {}
    for d in circuit.meta.perturbations:
        if d["kind"] == kind:
            out.setdefault(_parse(d["target"])[2], []).append(d)
    return out


def silenced(circuit: Circuit) -> dict:
    """Population -> its Silence descriptions."""
    return _by_target(circuit, "silence")


def cuts(circuit: Circuit) -> dict:
    """Projection -> its Cut descriptions."""
    return _by_target(circuit, "cut")


def unfolded(circuit: Circuit) -> dict:
    """Population -> compartments whose synapses a partial cut removes one by one (they must not
    be folded: a folded projection holds one synapse per class)."""
    out: dict = {}
    for pname, ds in cuts(circuit).items():
        proj = circuit.projections[pname]
        if any(d["fraction"] < 1 or _parse(d["target"])[1] is not None for d in ds):
            out.setdefault(proj.target, set()).add(proj.compartment)
    return out


def silence_values(circuit: Circuit) -> dict:
    """``{population: {"sil_on": s, "sil_off": s}}`` per cell (inf/inf: never silenced)."""
    out = {}
    for name, ds in silenced(circuit).items():
        pop = circuit.populations[name]
        on, off = np.full(pop.N, np.inf), np.full(pop.N, np.inf)
        for d in ds:
            mask = select_cells(pop, _parse(d["target"])[1])
            if d["cells"] is not None:
                only = np.zeros(pop.N, bool)
                only[list(d["cells"])] = True
                mask &= only
            on[mask] = 0.0 if d["start"] is None else d["start"]
            off[mask] = np.inf if d["stop"] is None else d["stop"]
        out[name] = {"sil_on": on, "sil_off": off}
    return out


def cut_mask(circuit: Circuit, pname: str, i: np.ndarray, j: np.ndarray, seed) -> np.ndarray | None:
    """Boolean mask of the synapses ``(i, j)`` of ``pname`` that remain (``None``: no cut).

    The removed synapses are drawn from ``(seed, projection)``: the same seed removes the same
    synapses on every device."""
    proj = circuit.projections[pname]
    # the halves of a projection split under Dale's law lose the same synapses (same pairs, same draws)
    pname = proj.origin or pname
    ds = cuts(circuit).get(pname)
    if not ds:
        return None
    pre, post = circuit.populations[proj.source], circuit.populations[proj.target]
    keep = np.ones(len(i), bool)
    for k, d in enumerate(ds):
        head = _parse(d["target"])[1]
        sel = select_cells(post, head)[j] if "head" in post.axes else select_cells(pre, head)[i]
        rng = np.random.default_rng(np.random.SeedSequence([0 if seed is None else int(seed), k,
                                                            *map(ord, pname)]))
        keep &= ~(sel & (rng.random(len(i)) < d["fraction"]))
    return keep


def drive_values(circuit: Circuit, values) -> None:
    """Rates and weights of the :class:`Drive` relays, into ``values`` (in place)."""
    for d in circuit.meta.perturbations:
        if d["kind"] != "drive":
            continue
        name = _parse(d["target"])[2]
        src = drive_source(name, d["compartment"])
        w = d["weight"]
        if w is None:
            usual = [p for p, q in circuit.projections.items() if q.target == name and q.pathway != "drive"
                     and q.compartment == d["compartment"]]
            ws = [np.abs(np.asarray(values.weights[p], float)).mean() for p in usual]
            if not ws:
                raise ValueError(f"Drive.weight: {name!r}.{d['compartment']} receives no synapses to take a "
                                 "usual weight from; give weight=")
            w = float(np.mean(ws))
        values.weights[src + DRIVE_SUFFIX] = w
        values.params[src] = {"r_in": d["rate"]}
