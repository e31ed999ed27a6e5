"""Declarative circuit description: populations and projections held in a networkx graph.

A :class:`Circuit` *describes* a network; it allocates no Brian2 object (that is
:mod:`ctmhsa.circuits.instantiate`). Everything here is plain data that can be printed, compared,
checked and saved (:meth:`Circuit.to_dict`), in the spirit of NetPyNE's declarative networks.

Index structure
    Every population has named axes, e.g. ``("head", "i", "j", "c")`` for L2/3 cells
    (head, macrocolumn = query index, microcolumn = key index, cell = feature). Its cells are the
    grid of those axes, optionally restricted by a mask rule (``"j<=i"`` for causal attention:
    microcolumns j > i are absent). A cell's flat index is its row in :attr:`Population.index`.

Connectivity rule
    A projection connects every (pre, post) pair whose matched axes are equal
    (``match=(("token", "i"),)``: token t of the nucleus contacts macrocolumn i = t). Axes not named
    in ``match`` are connected all-to-all. The synaptic weight of a pair is an entry of a named
    weight source (``WQ``, ``WK``, ``WV``, ``WO`` or ``ones``) picked by ``weight_index``
    (e.g. ``("post.head", "post.c", "pre.e")`` for ``WQ[h, c, e]``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from functools import cached_property
from typing import Iterable

import networkx as nx
import numpy as np

from .roles import EXTERNAL, ROLES, check_role

EXTERNAL_CELL_TYPES = ("relay", "gate")
"""Cell types taken as driven from outside in a population that declares no role (a user's
part written before roles): they may receive no projection."""

__all__ = ["Population", "Projection", "Circuit", "CircuitMeta", "connect_pairs"]

MASK_RULES = {
    None: None,
    "j<=i": lambda idx, axes: idx[:, axes.index("j")] <= idx[:, axes.index("i")],
}
"""Mask rules restricting a population's grid (name -> predicate on the multi-index)."""


@dataclass(frozen=True, eq=False)
class Population:
    """A group of cells of one type, indexed by named axes.

    Parameters
    ----------
    name : str
        Unique name in the circuit (``"l23"``, ``"nucleus1"``...).
    cell_type : str
        Key of the neuron model (``"relay"``, ``"l23"``, ``"interneuron"``, ``"l5it"``,
        ``"l5pt"``, ``"relay_out"``).
    axes : tuple of str
        Names of the index axes.
    sizes : tuple of int
        Size of each axis.
    compartments : tuple of str
        Compartments that can receive synapses (``"basal"``, ``"apical"``, ``"soma"``).
    mask : str, optional
        Mask rule name in :data:`MASK_RULES` (``"j<=i"``).
    area : str
        Anatomical label used in drawings (``"thalamus"``, ``"cortex"``).
    role : str
        What it carries in the computation, a name registered in :mod:`ctmhsa.circuits.roles`
        (``"salience"``, ``"head_output"``...; ``""``: none declared).
    """

    name: str
    cell_type: str
    axes: tuple[str, ...]
    sizes: tuple[int, ...]
    compartments: tuple[str, ...] = ("soma",)
    mask: str | None = None
    area: str = "cortex"
    role: str = ""

    def __post_init__(self):
        if len(self.axes) != len(self.sizes):
            raise ValueError(f"population {self.name}: {len(self.axes)} axes but {len(self.sizes)} sizes")
        if any(int(s) < 1 for s in self.sizes):
            raise ValueError(f"population {self.name}: axis sizes must be >= 1, got {self.sizes}")
        if self.mask not in MASK_RULES:
            raise ValueError(f"population {self.name}: unknown mask rule {self.mask!r}")
        check_role(self.role, self.name)

    @cached_property
    def index(self) -> np.ndarray:
        """Multi-index of every present cell, shape ``(N, len(axes))``, C order."""
        grid = np.indices(self.sizes).reshape(len(self.sizes), -1).T.astype(np.int64)
        rule = MASK_RULES[self.mask]
        return grid if rule is None else grid[rule(grid, self.axes)]

    @property
    def N(self) -> int:
        """Number of cells (from the sizes when no mask removes any: no index is built)."""
        if self.mask is None:
            return math.prod(int(s) for s in self.sizes)
        return int(self.index.shape[0])

    def axis(self, name: str) -> np.ndarray:
        """Value of axis ``name`` for every cell (shape ``(N,)``)."""
        return self.index[:, self.axes.index(name)]

    @cached_property
    def flat_lookup(self) -> np.ndarray:
        """Dense array of shape ``sizes`` holding each cell's flat index, -1 where absent."""
        lut = -np.ones(self.sizes, dtype=np.int64)
        lut[tuple(self.index.T)] = np.arange(self.N)
        return lut

    def cells_over(self, axes: tuple) -> np.ndarray:
        """Cells present per entry of ``axes`` (in that order), counted over every other axis
        (copies, for example); computed once per population and ``axes``."""
        cache = self.__dict__.setdefault("_cells_over", {})
        if axes not in cache:
            others = tuple(k for k, a in enumerate(self.axes) if a not in axes)
            kept = [a for a in self.axes if a in axes]
            cache[axes] = (self.flat_lookup >= 0).sum(axis=others).transpose([kept.index(a) for a in axes])
        return cache[axes]

    def to_dense(self, values: np.ndarray, fill=0.0) -> np.ndarray:
        """Scatter per-cell ``values`` (N, ...) onto the full grid ``sizes`` (absent cells: ``fill``)."""
        values = np.asarray(values)
        out = np.full(self.sizes + values.shape[1:], fill, dtype=float)
        out[tuple(self.index.T)] = values
        return out

    def describe(self) -> dict:
        return dict(
            name=self.name, cell_type=self.cell_type, role=self.role, area=self.area,
            axes=list(self.axes), sizes=[int(s) for s in self.sizes],
            compartments=list(self.compartments), mask=self.mask, N=self.N,
        )


@dataclass(frozen=True)
class Projection:
    """Synaptic projection between two populations.

    Parameters
    ----------
    name : str
        Unique name (``"core_q"``, ``"matrix_k"``...).
    source, target : str
        Population names.
    compartment : str
        Target compartment (``"basal"``, ``"apical"``, ``"soma"``).
    match : tuple of (str, str)
        ``(source_axis, target_axis)`` pairs that must be equal for a synapse to exist.
    weight : str
        Weight source: ``"WQ"``, ``"WK"``, ``"WV"``, ``"WO"`` or ``"ones"``.
    weight_index : tuple of str
        ``"pre.<axis>"`` / ``"post.<axis>"`` selectors into the weight source.
    pathway : str
        Anatomical class for drawings and checks: ``"core"``, ``"matrix"``, ``"local"``,
        ``"normalisation"``, ``"corticothalamic"``.
    sign : {"", "+", "-"}
        Which entries of the weights the synapses carry: all (``""``), the positive ones only
        (``"+"``, the other synapses hold 0) or the negative ones only (``"-"``). Under Dale's law
        a signed projection is two: ``"+"`` from the excitatory cells, ``"-"`` from their
        feedforward inhibitory followers (:mod:`ctmhsa.circuits.dale`).
    origin : str
        The projection whose weights and lesions (:class:`ctmhsa.circuits.perturb.Cut`) this one
        shares (``""``: its own).
    """

    name: str
    source: str
    target: str
    compartment: str
    match: tuple[tuple[str, str], ...]
    weight: str = "ones"
    weight_index: tuple[str, ...] = ()
    pathway: str = "local"
    sign: str = ""
    origin: str = ""

    def __post_init__(self):
        if self.sign not in ("", "+", "-"):
            raise ValueError(f"projection {self.name}: sign must be '', '+' or '-', got {self.sign!r}")

    def describe(self) -> dict:
        d = dict(
            name=self.name, source=self.source, target=self.target, compartment=self.compartment,
            match=[list(m) for m in self.match], weight=self.weight,
            weight_index=list(self.weight_index), pathway=self.pathway,
        )
        if self.sign or self.origin:   # Dale's law split (older descriptions have neither)
            d.update(sign=self.sign, origin=self.origin)
        return d


def _key(pop: Population, axes: Iterable[str], sizes: Iterable[int]) -> np.ndarray:
    """Encode the values of ``axes`` of every cell as one integer (mixed radix)."""
    key = np.zeros(pop.N, dtype=np.int64)
    for ax, size in zip(axes, sizes):
        key = key * int(size) + pop.axis(ax)
    return key


def _match_keys(pre: Population, post: Population, match) -> tuple[np.ndarray, np.ndarray, int]:
    """Key of every presynaptic and postsynaptic cell on the matched axes (equal keys connect),
    and the number of possible keys."""
    sizes = [max(pre.sizes[pre.axes.index(a)], post.sizes[post.axes.index(b)]) for a, b in match]
    return (_key(pre, [a for a, _ in match], sizes), _key(post, [b for _, b in match], sizes),
            int(np.prod(sizes, dtype=np.int64)))


def connect_pairs(pre: Population, post: Population, match, post_cells=None) -> tuple[np.ndarray, np.ndarray]:
    """All (pre, post) flat-index pairs whose matched axes agree (vectorised relational join).

    ``post_cells`` (sorted flat indices) restricts the join to those postsynaptic cells.

    Returns
    -------
    (i, j) : tuple of int64 arrays
        Presynaptic and postsynaptic flat indices, ordered by postsynaptic cell.
    """
    kpre, kpost, _ = _match_keys(pre, post, match)
    cells = np.arange(post.N, dtype=np.int64) if post_cells is None else np.asarray(post_cells, np.int64)
    kpost = kpost[cells]
    order = np.argsort(kpre, kind="stable")
    ksorted = kpre[order]
    start = np.searchsorted(ksorted, kpost, side="left")
    count = np.searchsorted(ksorted, kpost, side="right") - start
    total = int(count.sum())
    j = np.repeat(cells, count)
    # position within each post cell's block of matching pre cells
    offsets = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
    i = order[np.repeat(start, count) + offsets]
    return i, j



@dataclass(eq=True)
class CircuitMeta:
    """What a circuit was built as: the builder's arguments, typed (plain data, like the graph).

    Attributes
    ----------
    level : str
        The circuit's name as built (``"pathway"``, ``"head"``, ...).
    n, m : int
        Query tokens (macrocolumns per area) and key/value tokens (microcolumns per macrocolumn).
    H, dk, dv, de : int
        Heads (areas), key/query, value and embedding dimensions.
    cross, causal, normalize, skip : bool
        Cross-attention nucleus, causal mask, divisive interneurons, core → L5 PT skip path.
    n_inh : int
        Divisive interneurons per macrocolumn.
    P : dict
        Population -> neurons per represented dimension, where above 1.
    signed : {"onoff", "offset"}
        Code of the signed read-outs.
    circuit : str
        The registered attention part of every area (:mod:`ctmhsa.circuits.parts`).
    parts : tuple of str
        Every registered part built, the area's first (what the encoder encodes).
    perturbations : tuple of dict
        Lesions and drive applied (:mod:`ctmhsa.circuits.perturb`), as plain data.
    blocks : tuple of dict
        Transformer blocks in series (:mod:`ctmhsa.circuits.transformer`): per block ``H``,
        ``dk``, ``dv``, ``dh`` (MLP hidden units, 0: none) and ``prefix``; empty for a pathway.
    classes : int
        Class cells of a transformer's read-out (0: none).
    latents : int
        A Co4 model's latent queries (:func:`ctmhsa.circuits.transformer.model_circuit`; 0: none).
    dale : bool
        Dale's law: every cell excitatory or inhibitory, negative weights carried by feedforward
        inhibitory followers (:mod:`ctmhsa.circuits.dale`).
    firing : str
        How the escape level's cells fire (:data:`ctmhsa.neurons.models.FIRING`): ``"poisson"``
        (escape noise), ``"regular"`` or ``"population"`` (perfect integrate-and-fire somata).
    apical : bool
        The divisive interneurons also shunt the apical dendrites of the cells they divide (a
        second, multiplicative division stage; :mod:`ctmhsa.mapping.operating`).
    """

    level: str = ""
    n: int = 0
    m: int = 0
    H: int = 0
    dk: int = 0
    dv: int = 0
    de: int = 0
    cross: bool = False
    causal: bool = False
    normalize: bool = True
    n_inh: int = 1
    P: dict = field(default_factory=dict)
    signed: str = "onoff"
    skip: bool = False
    circuit: str = "quadratic"
    parts: tuple = ()
    perturbations: tuple = ()
    blocks: tuple = ()
    classes: int = 0
    latents: int = 0
    dale: bool = False
    firing: str = "poisson"
    apical: bool = False

    @classmethod
    def from_dict(cls, d) -> "CircuitMeta":
        """From a mapping of its fields (``TypeError`` naming an unknown key)."""
        if isinstance(d, cls):
            return cls(**asdict(d))
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d or {}) - known)
        if unknown:
            raise TypeError(f"meta: unknown field(s) {unknown}; expected some of {sorted(known)}")
        out = dict(d or {})
        for k in ("parts", "perturbations", "blocks"):
            if k in out:
                out[k] = tuple(dict(v) if isinstance(v, dict) else v for v in out[k])
        return cls(**out)

    def to_dict(self) -> dict:
        """Plain data (JSON/TOML serialisable)."""
        d = asdict(self)
        return dict(d, parts=list(self.parts), perturbations=[dict(p) for p in self.perturbations],
                    blocks=[dict(b) for b in self.blocks])

    def build_args(self, **changes) -> dict:
        """The keywords of :func:`ctmhsa.circuits.builders.build` that rebuild this circuit
        (``changes`` override them, e.g. ``H=1`` for one head of it)."""
        args = dict(n=self.n, dk=self.dk, dv=self.dv, de=self.de, H=self.H, m=self.m, cross=self.cross,
                    causal=self.causal, normalize=self.normalize, n_inh=self.n_inh, P=dict(self.P) or 1,
                    signed=self.signed, skip=self.skip, circuit=self.circuit, parts=tuple(self.parts[1:]),
                    name=self.level or "pathway", apical=self.apical)
        return {**args, **changes}


def copies(pop) -> int:
    """Neurons per represented dimension of a population (size of its ``p`` axis, else 1)."""
    return pop.sizes[pop.axes.index("p")] if "p" in pop.axes else 1


class Circuit:
    """A circuit description: a ``networkx.MultiDiGraph`` of populations and projections.

    Nodes are population names (attribute ``pop``); edges ``source -> target`` keyed by the
    projection name (attribute ``proj``). ``meta`` (:class:`CircuitMeta`) holds the builder's
    arguments (n, m, dk, ...).
    """

    def __init__(self, name: str, meta: "CircuitMeta | dict | None" = None):
        self.name = name
        self.meta = CircuitMeta.from_dict(meta)
        self.graph = nx.MultiDiGraph(name=name)

    def with_meta(self, **changes) -> "Circuit":
        """The same populations and projections under ``meta`` with ``changes`` (a new circuit)."""
        out = Circuit(self.name, meta=dict(self.meta.to_dict(), **changes))
        for pop in self.populations.values():
            out.add_population(pop)
        for proj in self.projections.values():
            out.add_projection(proj)
        return out

    # -- construction -------------------------------------------------------------------------
    def by_role(self, role: str) -> tuple[str, ...]:
        """Names of the populations that carry ``role`` (:mod:`ctmhsa.circuits.roles`), in the
        order they were built (a transformer has one set per block); ``ValueError`` for a role
        that is not registered."""
        if role not in ROLES:
            raise ValueError(f"role: expected one of the registered roles {sorted(ROLES)}, got {role!r}")
        return tuple(name for name, pop in self.populations.items() if pop.role == role)

    def add_population(self, pop: Population) -> Population:
        if pop.name in self.graph:
            raise ValueError(f"population {pop.name!r} already exists in circuit {self.name!r}")
        self.graph.add_node(pop.name, pop=pop)
        return pop

    def add_projection(self, proj: Projection) -> Projection:
        for end in (proj.source, proj.target):
            if end not in self.graph:
                raise ValueError(f"projection {proj.name!r}: unknown population {end!r}")
        if proj.name in self.projections:
            raise ValueError(f"projection {proj.name!r} already exists")
        tgt = self.population(proj.target)
        if proj.compartment not in tgt.compartments:
            raise ValueError(
                f"projection {proj.name!r}: {tgt.name} has no compartment {proj.compartment!r} "
                f"(has {tgt.compartments})"
            )
        src = self.population(proj.source)
        for a, b in proj.match:
            if a not in src.axes or b not in tgt.axes:
                raise ValueError(f"projection {proj.name!r}: cannot match {a!r} -> {b!r}")
        self.graph.add_edge(proj.source, proj.target, key=proj.name, proj=proj)
        return proj

    # -- queries ------------------------------------------------------------------------------
    @property
    def populations(self) -> dict[str, Population]:
        return {name: data["pop"] for name, data in self.graph.nodes(data=True)}

    @property
    def projections(self) -> dict[str, Projection]:
        return {key: data["proj"] for _, _, key, data in self.graph.edges(keys=True, data=True)}

    def population(self, name: str) -> Population:
        try:
            return self.graph.nodes[name]["pop"]
        except KeyError:
            raise KeyError(f"circuit {self.name!r} has no population {name!r}") from None

    def pairs(self, proj: Projection | str, post_cells=None) -> tuple[np.ndarray, np.ndarray]:
        """Presynaptic and postsynaptic flat indices of a projection (onto ``post_cells`` only,
        sorted flat indices, when given)."""
        proj = self.projections[proj] if isinstance(proj, str) else proj
        return connect_pairs(self.population(proj.source), self.population(proj.target), proj.match,
                             post_cells)

    def weight_indices(self, proj: Projection, i: np.ndarray, j: np.ndarray) -> tuple[np.ndarray, ...]:
        """Index arrays into the weight source for each synapse (pre ``i``, post ``j``)."""
        pre, post = self.population(proj.source), self.population(proj.target)
        out = []
        for sel in proj.weight_index:
            side, ax = sel.split(".")
            out.append(pre.axis(ax)[i] if side == "pre" else post.axis(ax)[j])
        return tuple(out)

    def synapse_weights(self, proj: Projection, weights, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Weight of every synapse (pre ``i``, post ``j``) from ``weights``: a scalar, or an array
        indexed by the projection's ``weight_index`` (as the mapping layer writes them)."""
        src = np.asarray(weights, dtype=float)
        if proj.sign:   # one sign of the weights (Dale's law), the other entries 0
            src = np.maximum(src, 0.0) if proj.sign == "+" else np.minimum(src, 0.0)
        if src.ndim == 0:
            return np.broadcast_to(src, (len(i),))
        if src.ndim != len(proj.weight_index):
            raise ValueError(
                f"values.weights[{proj.name!r}]: expected a scalar or an array indexed by "
                f"{proj.weight_index}; got shape {src.shape}")
        return src[self.weight_indices(proj, i, j)]

    def n_neurons(self) -> int:
        return sum(p.N for p in self.populations.values())

    def in_degree(self, proj: Projection | str) -> np.ndarray:
        """Synapses onto every cell of the projection's target (from the axes, no pairs)."""
        proj = self.projections[proj] if isinstance(proj, str) else proj
        kpre, kpost, nkeys = _match_keys(self.population(proj.source), self.population(proj.target), proj.match)
        return np.bincount(kpre, minlength=nkeys)[kpost].astype(np.int64)

    def out_degree(self, proj: Projection | str, post_cells=None) -> np.ndarray:
        """Synapses from every cell of the projection's source (onto ``post_cells`` only, when
        given; from the axes, no pairs)."""
        proj = self.projections[proj] if isinstance(proj, str) else proj
        kpre, kpost, nkeys = _match_keys(self.population(proj.source), self.population(proj.target), proj.match)
        if post_cells is not None:
            kpost = kpost[np.asarray(post_cells, np.int64)]
        return np.bincount(kpost, minlength=nkeys)[kpre].astype(np.int64)

    def n_synapses(self, by_projection: bool = False):
        """Synapse count, computed from group sizes without building the pairs."""
        counts = {name: int(self.in_degree(proj).sum()) for name, proj in self.projections.items()}
        return counts if by_projection else sum(counts.values())

    # -- structural checks ------------------------------------------------------------------
    def check(self) -> None:
        """Raise ``ValueError`` if the circuit breaks a rule of the paper's architecture.

        Rules: L5 IT -> L5 PT only (no PT -> IT synapse); L5 PT never projects to the nucleus
        that drives its area (anti-reciprocal cortico-thalamic pathways); L2/3 and L5 IT counts
        per microcolumn are dk and dv; one set of dv L5 PT per macrocolumn; no dangling input
        (every population receives a projection unless its role is driven from outside,
        :data:`ctmhsa.circuits.roles.EXTERNAL`, or, declaring none, it is a relay).
        """
        pops, projs = self.populations, self.projections
        types = {name: p.cell_type for name, p in pops.items()}
        for proj in projs.values():
            if types[proj.source] == "l5pt" and types[proj.target] == "l5it":
                raise ValueError(f"{proj.name}: L5 PT -> L5 IT breaks the IT -> PT-only rule")
            if types[proj.source] == "l5pt" and types[proj.target] == "relay":
                raise ValueError(f"{proj.name}: L5 PT projects back to its driving nucleus {proj.target}")
        m = self.meta
        for name, pop in pops.items():
            if "c" not in pop.axes:
                continue
            nc = pop.sizes[pop.axes.index("c")]
            if pop.cell_type == "l23" and m.dk and nc != m.dk:
                raise ValueError(f"{name}: {nc} L2/3 cells per microcolumn, expected dk = {m.dk}")
            if pop.cell_type in ("l5it", "l5pt") and m.dv and nc != m.dv:
                raise ValueError(f"{name}: {nc} cells per column, expected dv = {m.dv}")
        for name, pop in pops.items():   # only cells driven from outside may have no input
            external = pop.role in EXTERNAL if pop.role else pop.cell_type in EXTERNAL_CELL_TYPES
            if not external and self.graph.in_degree(name) == 0:
                raise ValueError(f"{name}: population receives no projection (its "
                                 + (f"role {pop.role!r}" if pop.role else f"cell type {pop.cell_type!r}, no role declared,")
                                 + " is not one driven from outside the circuit)")

    # -- export ----------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """Plain-data description (JSON/TOML serialisable) with counts."""
        syn = self.n_synapses(by_projection=True)
        return dict(
            name=self.name,
            meta=self.meta.to_dict(),
            populations=[p.describe() for p in self.populations.values()],
            projections=[dict(p.describe(), synapses=syn[k]) for k, p in self.projections.items()],
            n_neurons=self.n_neurons(),
            n_synapses=sum(syn.values()),
        )

    def summary(self) -> str:
        """Human-readable table of populations and projections."""
        d = self.to_dict()
        lines = [f"circuit {self.name}: {d['n_neurons']:,} neurons, {d['n_synapses']:,} synapses"]
        for p in d["populations"]:
            axes = " x ".join(f"{a}={s}" for a, s in zip(p["axes"], p["sizes"]))
            mask = f" [{p['mask']}]" if p["mask"] else ""
            lines.append(f"  {p['name']:<12} {p['cell_type']:<12} {p['N']:>10,}  ({axes}){mask}")
        for p in d["projections"]:
            lines.append(
                f"  {p['name']:<12} {p['source']:>10} -> {p['target']:<10}.{p['compartment']:<7}"
                f" {p['weight']:<5} {p['synapses']:>12,}"
            )
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Circuit {self.name}: {len(self.graph)} populations, {self.graph.number_of_edges()} projections>"
