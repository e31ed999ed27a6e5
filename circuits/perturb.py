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
of area 1 only; ``"block0.l23"`` (or ``"b0.l23"``) those of block 0. An attention pathway is one
block (block 0); a transformer model's circuit names its populations per block (``b0_l23``,
``b1_l23``, ...): there ``"block1.area0.l23"``, ``"b1.l23"`` and the literal ``"b1_l23"`` are all
block 1's, and a bare ``"l23"`` is refused where several blocks have one (:func:`resolve`;
:func:`ctmhsa.sims.simulate_model` takes no perturbations in this release). A projection path
selects the synapses whose postsynaptic cell (or presynaptic, where the target has no such
axis, e.g. ``pt_out`` onto nucleus 2) is in that place. A population without an area axis (the
thalamic nuclei) is shared by every area: an area path to it (or to a projection with no area
axis on either side) is refused where the circuit has several areas.

**Several on one target.** Perturbations compose: several ``Silence`` of one population silence
the union of their cells and intervals (each cell is silent whenever one of them covers it);
several ``Cut`` of one projection remove independent random draws (two cuts of a half remove
about three quarters); a ``Silence`` and a ``Drive`` of one population both apply. Two ``Drive``
of one population and compartment are refused (give one, at the sum of their rates): their
relays would be one population.

**Checked against the run** (:func:`check_run`, before anything is built): a ``Silence`` that
starts after the run ends is refused (a time in ms given as seconds, most likely); one that stops
after it warns (:class:`PerturbationWarning`); a ``Drive`` faster than ``1/dt`` at the spiking
levels is refused, since a relay fires at most once per step and would deliver ``1/dt``.

Times are on the network's clock (t = 0 at the start of the warm-up), in seconds or Brian2
times. A perturbed run is recorded in the circuit's description (``meta.perturbations``, plain
data), so its compiled project and its provenance differ from the intact circuit's. Results are
returned even where the perturbation moves the circuit out of its working range: the violations
are flagged (``res.diagnostics["operating"]``), at the rate level too.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from ctmhsa.neurons.params import seconds

from .graph import Circuit, Population, Projection

__all__ = ["Silence", "Cut", "Drive", "PERTURBATIONS", "PerturbationWarning", "check_perturbations", "check_run",
           "resolve", "apply", "select_cells", "cut_mask", "silence_values", "silence_equations", "drive_values",
           "drive_source", "DRIVE_PREFIX", "DRIVE_SUFFIX"]


class PerturbationWarning(UserWarning):
    """A perturbation that applies only in part (e.g. a ``Silence`` that stops after the run ends)."""


DRIVE_PREFIX, DRIVE_SUFFIX = "drive_", "_in"
"""A :class:`Drive` of population ``p`` adds relays ``drive_p`` and their projection ``drive_p_in``
(``drive_p_basal``/``drive_p_apical`` for a dendrite: one Drive per population and compartment)."""


def drive_source(population: str, compartment: str = "soma") -> str:
    """Name of the relay population of a :class:`Drive` of ``population`` on ``compartment``."""
    return DRIVE_PREFIX + population + ("" if compartment == "soma" else f"_{compartment}")

_PLACE = re.compile(r"^(?:(block|b)(\d+)\.)?(?:(area|head)(\d+)\.)?([A-Za-z_][A-Za-z0-9_]*)$")


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
            if c.ndim == 1 and c.size == 0:   # (an empty list reads as floats: caught first)
                raise ValueError("Silence.cells: empty, so no cell would be silenced; give at least one cell "
                                 "index, or cells=None for every cell the path selects")
            if c.ndim != 1 or not np.issubdtype(c.dtype, np.integer):
                raise TypeError(f"Silence.cells: expected a 1-d array of integer cell indices, got "
                                f"{c.ndim}-d {c.dtype}")
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
        Rate of every drive relay (Hz); at the spiking levels at most ``1/dt`` (a relay fires
        at most once per step: a faster drive is refused, see :func:`check_run`).
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


def _what(value) -> str:
    """What a user gave, for a TypeError: a class is named as one (``Silence``, not ``Silence(...)``)."""
    if isinstance(value, type):
        return f"the class {value.__name__}, not an instance (e.g. {value.__name__}('l23'))"
    return type(value).__name__


def _few(values: list, k: int = 8) -> str:
    """At most ``k`` of ``values`` for a message."""
    return str(values) if len(values) <= k else f"[{', '.join(map(str, values[:k]))}, ...]"


def _has_area(circuit: Circuit, name: str, kind: str) -> bool:
    """Whether an area path can select part of population / projection ``name``."""
    if kind == "population":
        return "head" in circuit.populations[name].axes
    proj = circuit.projections[name]
    return any("head" in circuit.populations[p].axes for p in (proj.source, proj.target))


def resolve(circuit: Circuit, path: str, kind: str = "population") -> tuple[str, int | None]:
    """The population (or projection, ``kind="projection"``) name and area of ``path`` in
    ``circuit`` (module docstring: names by place); ``ValueError`` naming the circuit's names."""
    block, head, name = _parse(path)
    names = circuit.projections if kind == "projection" else circuit.populations
    blocks = tuple(getattr(circuit.meta, "blocks", ()) or ())
    H = circuit.meta.H
    if not blocks:   # an attention pathway: one block, its names unprefixed
        if block not in (None, 0):
            raise ValueError(f"block {block} does not exist (the circuit has 1 block)")
    else:            # a transformer model: names prefixed per block (b0_l23, b1_l23, ...)
        if block is not None:
            if not 0 <= block < len(blocks):
                raise ValueError(f"block {block} does not exist (the model has {len(blocks)} block(s), "
                                 f"0-{len(blocks) - 1})")
            name = blocks[block]["prefix"] + name
        elif name not in names:
            hits = [b["prefix"] + name for b in blocks if b["prefix"] + name in names]
            if len(hits) > 1:
                raise ValueError(f"{name!r} is in {len(hits)} blocks of this model ({hits}); give its block, "
                                 f"e.g. 'block0.{name}' or {hits[0]!r}")
            name = hits[0] if hits else name
        own = [b for b in blocks if name.startswith(b["prefix"])]
        H = own[0]["H"] if own else max(b["H"] for b in blocks)
    if name not in names:
        raise ValueError(f"{name!r} is not a {kind} of this circuit; its {kind}s are {list(names)}")
    if head is not None:
        if not 0 <= head < H:
            raise ValueError(f"area {head} does not exist (areas 0-{H - 1})")
        # a thalamic nucleus serves every area: 'area1.nucleus1' cannot mean a part of it
        if H > 1 and not _has_area(circuit, name, kind):
            what = (f"{name!r} has no area axis (axes {circuit.populations[name].axes})" if kind == "population"
                    else f"{name!r} joins populations without an area axis")
            raise ValueError(f"{what}: it is shared by all {H} areas, so {path!r} cannot select area {head}'s "
                             f"part; give {name!r} to perturb it whole")
    return name, head


def check_perturbations(perturbations, circuit: Circuit) -> tuple:
    """The perturbations as a tuple, every target resolved against ``circuit`` (``ValueError``
    naming the bad entry, with the circuit's names; before anything is built).

    A path that names a population through its block (``"block1.l23"`` in a transformer model) is
    returned with the population's own name (``"b1_l23"``), so the description names it."""
    if perturbations is None:
        return ()
    if isinstance(perturbations, PERTURBATIONS):
        perturbations = (perturbations,)
    if isinstance(perturbations, (type, str, bytes, Mapping)) or not isinstance(perturbations, Iterable):
        raise TypeError(f"perturbations: expected a list of ctmhsa.perturb.Silence, Cut or Drive (or one of "
                        f"them), got {_what(perturbations)}")
    out = list(perturbations)
    drives: dict = {}
    for k, p in enumerate(out):
        if not isinstance(p, PERTURBATIONS):
            raise TypeError(f"perturbations[{k}]: expected ctmhsa.perturb.Silence, Cut or Drive, got {_what(p)}")
        field = "projection" if isinstance(p, Cut) else "population"
        target = getattr(p, field)
        try:
            name, head = resolve(circuit, target, field)
        except ValueError as e:
            raise ValueError(f"perturbations[{k}]: {e}") from None
        if name != _parse(target)[2]:   # named through its block: the description holds the name
            out[k] = p = dataclasses.replace(p, **{field: ("" if head is None else f"area{head}.") + name})
        if isinstance(p, Silence) and p.cells is not None:
            N = circuit.populations[name].N
            if any(not 0 <= c < N for c in p.cells):
                raise ValueError(f"perturbations[{k}]: Silence.cells: indices must lie in [0, {N}) for {name!r}")
            area = select_cells(circuit.populations[name], head)
            outside = [c for c in p.cells if not area[c]]
            if outside:   # the path's area and the cells intersect: cells elsewhere would be left active
                there = np.flatnonzero(area)
                raise ValueError(f"perturbations[{k}]: Silence.cells: {_few(outside)} lie outside area {head} of "
                                 f"{name!r} (its {there.size} cells there: {_few(there.tolist())}); cells are flat "
                                 f"indices of the whole population: give cells of that area, or drop "
                                 f"'area{head}.' from the path")
        if isinstance(p, Drive) and p.compartment not in circuit.populations[name].compartments:
            raise ValueError(f"perturbations[{k}]: {name!r} has no {p.compartment!r} compartment; it has "
                             f"{list(circuit.populations[name].compartments)}")
        if isinstance(p, Drive) and head is not None:
            raise ValueError(f"perturbations[{k}]: a Drive targets a whole population; silence the rest instead")
        if isinstance(p, Drive):   # one relay population per target and compartment
            first = drives.setdefault((name, p.compartment), k)
            if first != k:
                raise ValueError(f"perturbations[{k}]: two Drives target {name!r}.{p.compartment} (perturbations"
                                 f"[{first}] too); give one Drive, at the sum of their rates")
    return tuple(out)


def check_run(circuit: Circuit, span: float, dt: float | None = None) -> None:
    """Check the perturbations recorded in ``circuit`` against the run (before anything is built).

    Parameters
    ----------
    circuit : Circuit
        The perturbed circuit (:func:`apply`).
    span : float
        Seconds the network runs (warm-up and duration): its clock spans ``[0, span)``.
    dt : float, optional
        The step (s) at the spiking levels, where a relay fires at most once per step; ``None``
        at the rate level, whose relays deliver their rate as it is.

    Raises
    ------
    ValueError
        A ``Silence`` that starts after the run ends (it would never act), or a ``Drive`` faster
        than ``1/dt`` (it would be delivered as ``1/dt``).

    Warns
    -----
    PerturbationWarning
        A ``Silence`` that stops after the run ends (it acts up to the end only).
    """
    for k, d in enumerate(circuit.meta.perturbations):
        if d["kind"] == "silence":
            start = 0.0 if d["start"] is None else d["start"]
            stop = "None" if d["stop"] is None else f"{d['stop']:g} s"
            what = f"Silence({d['target']!r}, start={start:g} s, stop={stop})"
            if start >= span:
                raise ValueError(f"perturbations[{k}]: {what} starts after the run ends: the network's clock "
                                 f"spans [0, {span:g}) s (warm-up and duration), so it would never act; "
                                 "times are in seconds (or Brian2 times, e.g. 100*ms)")
            if d["stop"] is not None and d["stop"] > span:
                warnings.warn(f"perturbations[{k}]: {what} stops after the run ends at {span:g} s (warm-up and "
                              f"duration): it silences [{start:g}, {span:g}) s only", PerturbationWarning,
                              stacklevel=3)
        elif d["kind"] == "drive" and dt is not None and d["rate"] * dt > 1 + 1e-9:
            raise ValueError(f"perturbations[{k}]: Drive.rate: {d['rate']:g} Hz is above 1/dt = {1 / dt:g} Hz, "
                             f"the most a relay fires (one spike per step of dt = {dt:g} s), so it would be "
                             f"delivered as {1 / dt:g} Hz; give a rate of at most {1 / dt:g} Hz (a stronger "
                             "drive: a larger weight=) or a smaller dt")


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
            c.add_population(Population(src, "relay", target.axes, target.sizes, mask=target.mask, area="drive",
                                        role="drive"))
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


def _slot(k: int) -> str:
    return "" if k == 0 else f"_{k}"


def silence_values(circuit: Circuit) -> dict:
    """``{population: {"sil_on": s, "sil_off": s, "sil_on_1": s, "sil_off_1": s, ...}}`` per cell.

    The union of a population's Silence intervals, merged per cell into disjoint intervals
    ``[sil_on_k, sil_off_k)``: one pair per interval a cell needs at most (one pair unless two
    Silence of disjoint times cover one cell); inf/inf: none (``sil_on`` is finite for every
    silenced cell)."""
    out = {}
    for name, ds in silenced(circuit).items():
        pop = circuit.populations[name]
        spans = []
        for d in ds:
            mask = select_cells(pop, _parse(d["target"])[1])
            if d["cells"] is not None:
                only = np.zeros(pop.N, bool)
                only[list(d["cells"])] = True
                mask &= only
            spans.append((0.0 if d["start"] is None else d["start"], np.inf if d["stop"] is None else d["stop"],
                          mask))
        # by start: each interval of a cell joins the cell's last one (overlapping or touching it) or opens the next
        spans.sort(key=lambda sp: sp[0])
        on, off = np.full((len(spans), pop.N), np.inf), np.full((len(spans), pop.N), np.inf)
        count = np.zeros(pop.N, int)
        for start, stop, mask in spans:
            cells = np.flatnonzero(mask)
            last = np.maximum(count[cells] - 1, 0)
            joins = (count[cells] > 0) & (start <= off[last, cells])
            j, lj = cells[joins], last[joins]
            off[lj, j] = np.maximum(off[lj, j], stop)
            o = cells[~joins]
            on[count[o], o], off[count[o], o] = start, stop
            count[o] += 1
        out[name] = {}
        for k in range(max(int(count.max()), 1)):
            out[name]["sil_on" + _slot(k)], out[name]["sil_off" + _slot(k)] = on[k], off[k]
    return out


def silence_equations(slots: int = 1) -> str:
    """The gate of a silenced population whose cells have up to ``slots`` disjoint silent
    intervals (:func:`silence_values`): 0 within one of them, else 1."""
    pairs = [("sil_on" + _slot(k), "sil_off" + _slot(k)) for k in range(slots)]
    decl = "\n".join(f"{a} : second (constant)\n{b} : second (constant)" for a, b in pairs)
    return decl + "\ngate = 1 - " + " - ".join(f"int(t >= {a})*int(t < {b})" for a, b in pairs) + " : 1"


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
