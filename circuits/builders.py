"""Builders for each level of the architecture: microcolumn → macrocolumn → area → pathway.

Each returns a :class:`ctmhsa.circuits.graph.Circuit` (a description; nothing is allocated in Brian2).
All levels share one construction so that a microcolumn is literally the (i=0, j=0) slice of an
area, and an area one head of a pathway.

Populations of the full pathway (``H`` heads, ``n`` query tokens, ``m`` key tokens)::

    nucleus1      relay        (token=n, e=de, sign=2)      thalamic nucleus 1: tokens x_i (ON/OFF)
    nucleus1_kv   relay        (token=m, e=de, sign=2)      matrix relays of the key tokens (keys)
    nucleus1_v    relay        (token=m, e=de, sign=2)      matrix relays of the key tokens onto L5 IT (values)
    l23           l23          (head, i=n, j=m, c=dk)       basal: query, apical: key, soma: salience
    interneuron   interneuron  (head, i=n, k=n_inh)         divisive normalisation per macrocolumn
    l5it          l5it         (head, i=n, j=m, c=dv, sign=2)  basal: ±value, apical: attention, soma: y (ON/OFF)
    l5pt          l5pt         (head, i=n, c=dv, sign=2)    context-aware value ṽ_i (ON/OFF)
    nucleus2      relay_out    (token=n, e=de, sign=2)      higher-order nucleus 2: x̃_i (ON/OFF)

Projections (colour code of the paper's figures in brackets)::

    core_q     nucleus1    -> l23.basal       ±WQ[h,c,e]  core, token = i   (green)
    matrix_k   nucleus1_kv -> l23.apical      ±WK[h,c,e]  matrix, token = j (red)
    matrix_v   nucleus1_v  -> l5it.basal      ±WV[h,c,e]  matrix, token = j (red)
    pool       l23         -> interneuron     pooling     same (head, i)    (purple)
    shunt      interneuron -> l23.soma        1           same (head, i)    (purple)
    attention  l23         -> l5it.apical     1 (A=ones)  same (head, i, j)
    it_pt      l5it        -> l5pt            ±1          same (head, i, c)
    pt_out     l5pt        -> nucleus2        WO[h,e,c]   i = token         (blue)

Three relay sets carry the tokens, each firing at the token's rates with spikes of its own:
``nucleus1`` (core cells: queries, and the skip path), ``nucleus1_kv`` (matrix cells: keys; the
tokens ``Y`` in cross-attention, else ``X``) and ``nucleus1_v`` (matrix cells: values). Quantities
multiplied in one cell then share no relay spike: the query (L2/3 basal) and key (apical) of one
token, and the value (L5 IT basal) and the attention it multiplies (the keys, through L2/3).
With shared relays those products carried their covariance, a bias that does not fall with the
window (docs/design.md, "Streams and floors"). Core and matrix relay cells are distinct
populations (Jones 2001, Trends Neurosci 24:595), and matrix cells differ in their laminar
targets (L1 or deeper layers; Clascá et al. 2012, Eur J Neurosci 35:1524). The linear circuit's
outer-product cells take keys and values from one set (``nucleus1_kv``) and remove that
covariance in the cell (:mod:`ctmhsa.neurons.models`). The ``sign`` axes (ON/OFF pairs) exist with
``signed="onoff"`` (the default); with ``signed="offset"`` each signed quantity has one cell.

Linear-time key-value-memory circuit (``circuit="linear"``, paper discussion "Beyond quadratic
scaling": compute the outer product of keys and values once, store it, reuse it for every query).
Per head, ``f`` indexes key features (dk) and ``c`` value dimensions (dv)::

    outer       kv_write     (head, j=m, f, c, sign)  apical: phi(k_jf), basal: ±v_jc -> phi(k_jf) [±v_jc]_+
    outer_z     kv_write     (head, j=m, f)           apical: phi(k_jf), basal: bias 1 -> phi(k_jf)
    memory      memory       (head, f, c, sign)       S_fc / m = mean_j phi(k_jf) v_jc      (ON/OFF)
    memory_z    memory       (head, f)                z_f / m  = mean_j phi(k_jf)
    readout     kv_read      (head, i=n, f, c, sign)  basal: phi(q_if), apical: ±S_fc, soma shunted
    readout_z   kv_read      (head, i=n, f)           basal: phi(q_if), apical: z_f,   soma shunted
    interneuron interneuron  (head, i, k)             pool readout_z, shunt readout and readout_z
    l5pt, nucleus2                                    as above; l5pt sums readout over f

    matrix_k/_kz nucleus1_kv -> outer(_z).apical ±WK[h,f,e] core_q/_qz nucleus1 -> readout(_z).basal ±WQ
    matrix_v     nucleus1_kv -> outer.basal      ±WV[h,c,e]   write(_z)  outer(_z) -> memory(_z)  (sum over j)
    recall(_z)   memory(_z) -> readout(_z).apical            pool / shunt(_z) as above
    readout_pt   readout -> l5pt                (sum over f)

Cells: H (2 m dk dv + m dk + 2 dk dv + dk + 2 n dk dv + n dk + n n_inh + 2 n dv) and the relays
(2 n de core, 2 m de matrix, 2 n de in nucleus 2) — linear in n and
m, against H (n m dk + 2 n m dv + ...) for the quadratic circuit; at dk = dv = 33 the linear circuit
has fewer neurons from n ≈ 45 on.
"""

from __future__ import annotations

import dataclasses

from ctmhsa.maths.reference import linear_mhsa
from ctmhsa.maths.stages import CIRCUIT_STAGES

from . import kvmemory
from .graph import Circuit, Population, Projection
from .parts import Part, areas, get_area, get_part, register_part

__all__ = ["microcolumn", "macrocolumn", "area", "pathway", "build", "SCALES", "CIRCUITS", "DEFAULT_N_INH",
           "SIGNED_CODES", "STREAM_CIRCUITS"]

SCALES = ("microcolumn", "macrocolumn", "area", "pathway")
"""The scales a circuit composes through (each usable alone); the *fidelity levels* of the
cells are :data:`ctmhsa.neurons.models.FIDELITY_LEVELS`."""
CIRCUITS = ("quadratic", "linear")
"""The shipped circuit families of token sets: Algorithm 1 (n x m microcolumns per head) or the
key-value memory. Every registered attention area (:func:`ctmhsa.circuits.parts.areas`, a user's
too) is accepted by ``circuit=``; code that needs an area's facts asks its part
(:func:`ctmhsa.circuits.parts.get_area`), not these lists."""
STREAM_CIRCUITS = ("memory",)
"""The shipped circuit of a stream of single tokens: the key-value memory over the stream
(:mod:`ctmhsa.circuits.kvmemory`, one token slot)."""
SIGNED_CODES = ("onoff", "offset")
DEFAULT_N_INH = 30
"""Divisive interneurons per macrocolumn (and reticular cells per token and relay set in a
transformer's thalamus). Thirty share the shunt so that each fires at the rates of fast-spiking
interneurons in vivo (~20-35 Hz with ``CodeGains.g_sh`` = 0.6 s; docs/physiology.md); on the
n = d = 8 problem they are 18 % of the cortical cells, about the fraction of GABAergic neurons in cortex."""


def _check_size(name, value, minimum=1):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {value!r}")


def build(
    n: int,
    dk: int,
    dv: int,
    de: int,
    H: int = 1,
    m: int | None = None,
    cross: bool = False,
    causal: bool = False,
    normalize: bool = True,
    with_pt: bool = True,
    with_nucleus2: bool = True,
    name: str = "pathway",
    n_inh: int = DEFAULT_N_INH,
    P: int | dict = 1,
    signed: str = "onoff",
    skip: bool = False,
    circuit: str = "quadratic",
    parts: tuple = (),
    apical: bool = False,
) -> Circuit:
    """Build a circuit description (the common constructor behind every level).

    Parameters
    ----------
    n : int
        Query tokens = macrocolumns per area.
    dk, dv, de : int
        Key/query, value and embedding dimensions (L2/3 cells, L5 IT/PT cells per column,
        relay cells per token).
    H : int
        Heads = cortical areas.
    m : int, optional
        Key/value tokens = microcolumns per macrocolumn (default ``n``).
    cross : bool
        Keys and values are other tokens (``Y``, cross-attention: ``m`` may differ from ``n``).
    causal : bool
        Microcolumns j > i are absent.
    normalize : bool
        Include the divisive interneurons (``False``: unnormalised variant).
    with_pt, with_nucleus2 : bool
        Include L5 PT cells and the output nucleus.
    n_inh : int
        Divisive interneurons per macrocolumn. Each pools all L2/3 cells of its macrocolumn and
        shunts all of them with 1/n_inh of the total shunt: at spiking levels a pool smooths the
        shunting conductance (one interneuron's pulsed shunt divides less than its mean, and
        the loop compensates by firing several hundred Hz).
    P : int or dict
        Population coding: neurons per represented dimension, for every population (int) or per
        population name (dict; others 1). A population with P > 1 gets a trailing index axis
        ``p``; copies receive the same inputs and every projection averages over its source's
        copies (weights divided by the source's P, see ctmhsa.mapping.encode). P = 1 is the paper.
    signed : {"onoff", "offset"}
        Code of the signed rate-coded quantities x (nucleus 1), y (L5 IT), ṽ (L5 PT) and x̃
        (nucleus 2): ON/OFF
        pairs (axis ``sign``: 0 = ON, 1 = OFF) receiving opposite inputs, whose rate difference
        is exactly linear even where each cell is rectified (default: far lower spike-count
        noise, see README), or one cell per dimension on a worst-case offset.
    skip : bool
        Skip connection: core thalamic axons contact L5 PT directly (projection ``core_skip``,
        weights ``WS``, token i -> PT of macrocolumn i), adding ``WS x_i`` to ṽ_i.
    circuit : str
        The attention area, a registered part (:func:`ctmhsa.circuits.parts.areas`):
        ``"quadratic"``, Algorithm 1 (one microcolumn per query-key pair); ``"linear"``, the
        linear-time key-value-memory circuit (module docstring; no causal variant: a causal
        memory is a different memory per query, prefix sums, which is not built); ``"memory"``,
        the memory over a stream (:mod:`ctmhsa.circuits.kvmemory`).
    parts : tuple of str
        Further registered parts (:func:`ctmhsa.circuits.parts.register_part`), built after the
        pathway's own in this order and recorded in ``meta.parts`` for the encoder.
    apical : bool
        The divisive interneurons also shunt the apical dendrite of every cell they shunt at the
        soma (projections ``<shunt>_apical`` onto compartment ``apical_shunt``): a second,
        multiplicative division stage that widens the divisions they can exert from ``D`` to
        ``D^2`` (:mod:`ctmhsa.mapping.operating`). Needs ``normalize``; circuits
        ``"quadratic"`` and ``"linear"``.
    """
    for arg, val in (("n", n), ("dk", dk), ("dv", dv), ("de", de), ("H", H), ("n_inh", n_inh)):
        _check_size(arg, val)
    m = n if m is None else m
    _check_size("m", m)
    if signed not in SIGNED_CODES:
        raise ValueError(f"signed: expected 'offset' or 'onoff', got {signed!r}")
    area = get_area(circuit)
    if causal and area.no_causal:
        raise ValueError(f"causal: {area.no_causal}")
    names = ("nucleus1", "nucleus1_kv") + area.populations + ("interneuron", "l5pt", "nucleus2")
    if isinstance(P, dict):
        unknown = set(P) - set(names)
        if unknown:
            raise ValueError(f"P: unknown population(s) {sorted(unknown)}; expected some of {list(names)}")
        copies = {k: P.get(k, 1) for k in names}
    else:
        copies = {k: P for k in names}
    for k, v in copies.items():
        _check_size(f"P[{k!r}]" if isinstance(P, dict) else "P", v)
    if apical and not (normalize and area.apical):
        raise ValueError(f"apical: the apical division stage is built by the divisive interneurons of circuits "
                         f"{list(apical_areas())} (normalize=True); got circuit={circuit!r}, normalize={normalize}")
    if m != n and not cross:
        raise ValueError(f"m: {m} key tokens differ from n = {n} query tokens; set cross=True")
    if with_nucleus2 and not with_pt:
        raise ValueError("with_nucleus2: nucleus 2 is driven by L5 PT; with_pt must be True")
    c = Circuit(name, meta=dict(level=name, n=n, m=m, H=H, dk=dk, dv=dv, de=de,
                                cross=cross, causal=causal, normalize=normalize, n_inh=n_inh,
                                P={k: v for k, v in copies.items() if v > 1}, signed=signed,
                                skip=bool(skip), circuit=circuit, apical=bool(apical)))

    def pop(pname, cell_type, axes, sizes, *args, **kw):
        if copies.get(pname, 1) > 1:   # population coding: copies of every cell along axis p
            axes, sizes = axes + ("p",), sizes + (copies[pname],)
        return c.add_population(Population(pname, cell_type, axes, sizes, *args, **kw))

    mask = "j<=i" if causal else None
    pair = (("sign",), (2,)) if signed == "onoff" else ((), ())
    sign_w = tuple(f"post.{a}" for a in pair[0])
    pop("nucleus1", "relay", ("token", "e") + pair[0], (n, de) + pair[1], area="thalamus", role="query_relay")
    # the keys' (matrix) relays are cells of their own, apart from the queries' (core) relays
    # even in self-attention: query and key of one token then share no spike (see the module
    # docstring)
    kv = "nucleus1_kv"
    pop(kv, "relay", ("token", "e") + pair[0], (m, de) + pair[1], area="thalamus", role="key_value_relay")
    w_in = ("post.head", "post.c", "pre.e") + tuple(f"pre.{a}" for a in pair[0])
    ctx = dict(pop=pop, kv=kv, pair=pair, sign_w=sign_w, mask=mask, w_in=w_in)
    src_pt = area.build(c, ctx)
    if apical:
        _apical_shunts(c)
    if with_pt:
        pop("l5pt", "l5pt", ("head", "i", "c") + pair[0], (H, n, dv) + pair[1], role="head_output")
        pre_pop, pname = src_pt
        c.add_projection(Projection(pname, pre_pop, "l5pt", "soma",
                                    (("head", "head"), ("i", "i"), ("c", "c")), "ones",
                                    ("post.head", "post.i") + tuple(f"pre.{a}" for a in pair[0]) + sign_w))
        if skip:
            c.add_projection(Projection("core_skip", "nucleus1", "l5pt", "soma", (("token", "i"),),
                                        "WS", w_in + sign_w, "core"))
    elif skip:
        raise ValueError("skip: the skip connection ends on L5 PT; with_pt must be True")
    for name in parts:   # registered parts beyond the pathway's own (checked by get_part)
        get_part(name).build(c, dict(ctx, pt_source=src_pt))
    c.meta.parts = (circuit, *parts)
    if with_nucleus2:
        pop("nucleus2", "relay_out", ("token", "e") + pair[0], (n, de) + pair[1], area="thalamus", role="output_relay")
        signs = ("pre.sign", "post.sign") if signed == "onoff" else ()
        c.add_projection(Projection("pt_out", "l5pt", "nucleus2", "soma", (("i", "token"),),
                                    "WO", ("pre.head", "post.e", "pre.c") + signs, "corticothalamic"))
    c.check()
    return c


APICAL_CIRCUITS = ("quadratic", "linear")
"""The shipped circuits whose divisive interneurons can shunt the apical dendrites too
(``apical``; any area's: :attr:`ctmhsa.circuits.parts.Part.apical`)."""


def apical_areas() -> tuple:
    """The registered areas whose interneurons can shunt the apical dendrites too."""
    return tuple(name for name in areas() if get_part(name).apical)


def _apical_shunts(c) -> None:
    """The second division stage: every interneuron -> soma shunt gets a twin onto the apical
    dendrite of the same cells (compartment ``apical_shunt``, where the cell's apical factor is
    divided: dendrite-targeting inhibition of the tuft, Murayama et al. 2009, Nature 457:1137)."""
    for p in [p for p in c.projections.values() if p.source == "interneuron" and p.compartment == "soma"]:
        tgt = c.population(p.target)
        if "apical_shunt" not in tgt.compartments:
            c.graph.nodes[p.target]["pop"] = dataclasses.replace(tgt, compartments=tgt.compartments + ("apical_shunt",))
        c.add_projection(Projection(p.name + "_apical", "interneuron", p.target, "apical_shunt", p.match,
                                    pathway="normalisation"))


def _area_args(c, ctx) -> tuple:
    m = c.meta
    return (c, ctx["pop"], ctx["kv"], m.H, m.n, m.m, m.dk, m.dv, m.n_inh, m.normalize, ctx["pair"], ctx["sign_w"])


@register_part("quadratic")
class Microcolumns(Part):
    """Algorithm 1: n x m microcolumns per head and the macrocolumns' interneurons (values
    registered by :mod:`ctmhsa.mapping.encode`)."""

    populations = ("nucleus1_v", "l23", "l5it")
    area = apical = two_point_laws = dale = integrators = True
    stages = CIRCUIT_STAGES["quadratic"]

    def build(self, c, ctx):
        return _microcolumns(*_area_args(c, ctx), ctx["mask"], ctx["w_in"])

    def reference(self, arrays, phi, causal, normalize, forget=1.0):
        return linear_mhsa(**arrays, phi=phi, causal=causal, normalize=normalize, method="vectorized")


@register_part("linear")
class KeyValueMemory(Part):
    """The linear-time key-value-memory circuit (values registered by :mod:`ctmhsa.mapping.encode`)."""

    populations = ("outer", "outer_z", "memory", "memory_z", "readout", "readout_z")
    no_causal = ("the linear key-value-memory circuit stores one memory per head; causal attention needs "
                 "one per query (prefix sums) and is built by circuit='quadratic'")
    area = apical = True
    stages = CIRCUIT_STAGES["linear"]

    def build(self, c, ctx):
        return _key_value_memory(*_area_args(c, ctx))

    def reference(self, arrays, phi, causal, normalize, forget=1.0):
        return linear_mhsa(**arrays, phi=phi, causal=causal, normalize=normalize, method="linear")


@register_part("memory")
class StreamMemory(Part):
    """The key-value memory over a stream of single tokens (:mod:`ctmhsa.circuits.kvmemory`; values,
    decoding and timing registered by :mod:`ctmhsa.mapping.kvmemory`): the linear circuit at one
    token slot, its memory cells integrators opened by a gate, and a bypass to L5."""

    populations = ("outer", "outer_z", "memory", "memory_z", "readout", "readout_z", "nucleus_gate")
    no_causal = ("the memory circuit is causal by construction (token t reads the memory of tokens <= t); "
                 "leave causal out")
    area = stream = integrators = True
    normalize = False      # the revised paper's circuit is unnormalised
    # at the lif level's 1 ms its read path erred more with the same floors (ṽ NRMSE 0.287 against
    # 0.248 at 0.5 ms, floor 0.256; x̃ 0.596 against 0.509; T = 8, H = 2, d = 4, 16 copies, 1 s
    # per token, spike seeds 3-14): 0.5 ms there (docs/memory.md, "The lif level")
    lif_max_dt = 5e-4
    stages = CIRCUIT_STAGES["linear"]

    def check_options(self, co):
        for name, ok, why in (
                ("law", "product", "its L5 read-out cells multiply"),
                ("signed", "onoff", "its signed streams use the on/off code")):
            value = getattr(co, name)
            if not isinstance(value, str) or value != ok:
                raise ValueError(f"{name}: {value!r} does not apply to circuit='memory' ({why}); leave it at {ok!r}")

    def build(self, c, ctx):
        if c.meta.n != 1 or c.meta.m != 1:
            raise ValueError(f"n: the memory circuit has one token slot (n = m = 1, one token per presentation); "
                             f"got n = {c.meta.n}, m = {c.meta.m}")
        src = _key_value_memory(*_area_args(c, ctx), memory=kvmemory.CELL)
        kvmemory.add_gate_and_bypass(c, ctx)
        return src


def _microcolumns(c, pop, kv, H, n, m, dk, dv, n_inh, normalize, pair, sign_w, mask, w_in):
    """Algorithm 1: n x m microcolumns per head (L2/3, L5 IT) and the macrocolumns' interneurons.
    Returns the population and projection name that drive L5 PT."""
    pop("l23", "l23", ("head", "i", "j", "c"), (H, n, m, dk), ("basal", "apical", "soma"), mask=mask, role="salience")
    pop("l5it", "l5it", ("head", "i", "j", "c") + pair[0], (H, n, m, dv) + pair[1],
        ("basal", "apical", "soma"), mask=mask, role="attention_value")
    c.add_projection(Projection("core_q", "nucleus1", "l23", "basal", (("token", "i"),),
                                "WQ", w_in, "core"))
    c.add_projection(Projection("matrix_k", kv, "l23", "apical", (("token", "j"),),
                                "WK", w_in, "matrix"))
    # values from their own relays (the key/value tokens, independent spikes): the L5 IT soma
    # (value) and its attention dendrite (keys, through L2/3) then share no relay, so the
    # rate-coded product has no value x attention covariance
    pop("nucleus1_v", "relay", ("token", "e") + pair[0], (m, c.meta.de) + pair[1], area="thalamus",
            role="value_relay")
    c.add_projection(Projection("matrix_v", "nucleus1_v", "l5it", "basal", (("token", "j"),),
                                "WV", w_in + sign_w, "matrix"))
    if normalize:
        pop("interneuron", "interneuron", ("head", "i", "k"), (H, n, n_inh), role="normaliser")
        c.add_projection(Projection("pool", "l23", "interneuron", "soma",
                                    (("head", "head"), ("i", "i")), "pooling",
                                    ("post.head", "post.i"), "normalisation"))
        c.add_projection(Projection("shunt", "interneuron", "l23", "soma",
                                    (("head", "head"), ("i", "i")), pathway="normalisation"))
    # A = ones; the physical efficacy may be scaled per macrocolumn by the mapping layer
    c.add_projection(Projection("attention", "l23", "l5it", "apical",
                                (("head", "head"), ("i", "i"), ("j", "j")), "ones",
                                ("post.head", "post.i")))
    return "l5it", "it_pt"


def _relay_inputs(kv, pair, sign_w) -> dict:
    """The linear circuit's inputs from the relays: keys and values from the matrix relays
    (``kv``), queries from the core relays (``nucleus1``), by input (``"k"``, ``"v"``, ``"q"`` and
    the normaliser's ``"kz"``, ``"qz"``) -> a function of the target population giving the projection."""
    pre_s = tuple(f"pre.{a}" for a in pair[0])
    w_k = ("post.head", "post.f", "pre.e") + pre_s
    w_v = ("post.head", "post.c", "pre.e") + pre_s + sign_w
    return {
        "k": lambda tgt: Projection("matrix_k", kv, tgt, "apical", (("token", "j"),), "WK", w_k, "matrix"),
        "v": lambda tgt: Projection("matrix_v", kv, tgt, "basal", (("token", "j"),), "WV", w_v, "matrix"),
        "q": lambda tgt: Projection("core_q", "nucleus1", tgt, "basal", (("token", "i"),), "WQ", w_k, "core"),
        "kz": lambda tgt: Projection("matrix_kz", kv, tgt, "apical", (("token", "j"),), "WK", w_k, "matrix"),
        "qz": lambda tgt: Projection("core_qz", "nucleus1", tgt, "basal", (("token", "i"),), "WQ", w_k, "core"),
    }


Z_MEMORY = {"memory": "memory_z"}
"""The normaliser memory's cell type for a value memory's: the linear circuit's reads its
potential unrectified at the lif level (:mod:`ctmhsa.neurons.models`); a stream's integrators
keep one type."""


def _key_value_memory(c, pop, kv, H, n, m, dk, dv, n_inh, normalize, pair, sign_w, memory=("memory", ("soma",)),
                      inputs=None):
    """Linear-time circuit: outer-product cells write a key-value memory once per head; each query
    macrocolumn reads it out (module docstring). ``memory``: the memory cells' type and
    compartments (the stream's integrators, :mod:`ctmhsa.circuits.kvmemory`); ``inputs``: where
    keys, values and queries come from (:func:`_relay_inputs`, the default; the Co4 area's
    triad, :mod:`ctmhsa.circuits.co4`). Returns what drives L5 PT."""
    sgn, two = pair
    pre_s = tuple(f"pre.{a}" for a in sgn)
    inputs = _relay_inputs(kv, pair, sign_w) if inputs is None else inputs
    pop("outer", "kv_write", ("head", "j", "f", "c") + sgn, (H, m, dk, dv) + two, ("basal", "apical"), role="kv_write")
    pop("memory", memory[0], ("head", "f", "c") + sgn, (H, dk, dv) + two, memory[1], role="kv_memory")
    pop("readout", "kv_read", ("head", "i", "f", "c") + sgn, (H, n, dk, dv) + two, ("basal", "apical", "soma"),
        role="kv_read")
    c.add_projection(inputs["k"]("outer"))
    c.add_projection(inputs["v"]("outer"))
    c.add_projection(Projection("write", "outer", "memory", "soma",
                                (("head", "head"), ("f", "f"), ("c", "c")), "ones", pre_s + sign_w))
    c.add_projection(inputs["q"]("readout"))
    c.add_projection(Projection("recall", "memory", "readout", "apical",
                                (("head", "head"), ("f", "f"), ("c", "c")), "ones", pre_s + sign_w))
    if normalize:   # z = Σ_j phi(k_j), read out as Z_i = zᵀ phi(q_i) by the cells the interneurons pool
        pop("outer_z", "kv_write", ("head", "j", "f"), (H, m, dk), ("basal", "apical"), role="z_write")
        pop("memory_z", Z_MEMORY.get(memory[0], memory[0]), ("head", "f"), (H, dk), memory[1], role="z_memory")
        pop("readout_z", "kv_read", ("head", "i", "f"), (H, n, dk), ("basal", "apical", "soma"), role="z_read")
        pop("interneuron", "interneuron", ("head", "i", "k"), (H, n, n_inh), role="normaliser")
        c.add_projection(inputs["kz"]("outer_z"))
        c.add_projection(Projection("write_z", "outer_z", "memory_z", "soma",
                                    (("head", "head"), ("f", "f"))))
        c.add_projection(inputs["qz"]("readout_z"))
        c.add_projection(Projection("recall_z", "memory_z", "readout_z", "apical",
                                    (("head", "head"), ("f", "f"))))
        c.add_projection(Projection("pool", "readout_z", "interneuron", "soma",
                                    (("head", "head"), ("i", "i")), "pooling",
                                    ("post.head", "post.i"), "normalisation"))
        for target, pname in (("readout", "shunt"), ("readout_z", "shunt_z")):
            c.add_projection(Projection(pname, "interneuron", target, "soma",
                                        (("head", "head"), ("i", "i")), pathway="normalisation"))
    return "readout", "readout_pt"


def microcolumn(dk: int, dv: int, de: int) -> Circuit:
    """One microcolumn: dk L2/3 and dv L5 IT cells, a query nucleus and a key/value nucleus.

    No interneurons (a single microcolumn has nothing to normalise against): the unit of the
    multiplication ``y = (1ᵀ(phi(k) ⊙ phi(q))) v``.
    """
    return build(1, dk, dv, de, H=1, m=1, cross=True, normalize=False,
                 with_pt=False, with_nucleus2=False, name="microcolumn")


def macrocolumn(m: int, dk: int, dv: int, de: int, normalize: bool = True,
                n_inh: int = DEFAULT_N_INH) -> Circuit:
    """One macrocolumn: m microcolumns sharing one query, interneurons and dv L5 PT cells."""
    return build(1, dk, dv, de, H=1, m=m, cross=True, normalize=normalize,
                 with_nucleus2=False, name="macrocolumn", n_inh=n_inh)


def area(n: int, dk: int, dv: int, de: int, m: int | None = None, cross: bool = False,
         causal: bool = False, normalize: bool = True, n_inh: int = DEFAULT_N_INH) -> Circuit:
    """One head = one cortical area: n macrocolumns of m microcolumns, driven by nucleus 1."""
    return build(n, dk, dv, de, H=1, m=m, cross=cross, causal=causal, normalize=normalize,
                 with_nucleus2=False, name="area", n_inh=n_inh)


def pathway(n: int, dk: int, dv: int, de: int, H: int = 1, m: int | None = None,
            cross: bool = False, causal: bool = False, normalize: bool = True,
            n_inh: int = DEFAULT_N_INH, P: int | dict = 1, signed: str = "onoff", skip: bool = False,
            circuit: str = "quadratic", parts: tuple = (), apical: bool = False) -> Circuit:
    """Thalamo-cortico-thalamic pathway: nucleus 1 → H areas → nucleus 2 (a full MHSA block)."""
    return build(n, dk, dv, de, H=H, m=m, cross=cross, causal=causal, normalize=normalize,
                 name="pathway", n_inh=n_inh, P=P, signed=signed, skip=skip, circuit=circuit, parts=parts,
                 apical=apical)
