"""Transformer blocks in series as one circuit description (docs/transformer_anatomy.md).

A block ``l`` is the attention pathway of :func:`ctmhsa.circuits.builders.build` (its populations
prefixed ``b{l}_``) with its three relay sets turned into normalising relays, plus the
residual and MLP populations. Every signed quantity is an ON/OFF pair (axis ``sign``)::

    input        relay       (token, e, sign)    block 0's stream X (first-order nucleus)
    b{l}_nucleus1, _kv, _v   relay_norm          core / matrix relays of N(X): driven one-to-one
                                                 by the stream, shunted by their TRN pool
    b{l}_trn_q, _k, _v       interneuron (token, k)   TRN: hold each token's ON + OFF total
    b{l}_l23 ... b{l}_l5pt                       the attention area(s), as in the pathway
    b{l}_nucleus2  relay_out (token, e, sign)    H = X + x̃: L5 PT through WO plus the stream (residual)
    b{l}_mlp_relay relay_norm, b{l}_trn_mlp      N(H), as the attention's relays
    b{l}_hidden    l6ct      (token, d)          rho [W1 N(H) + b1]_+ (the MLP's relu)
    b{l}_out       relay_out (token, e, sign)    X' = H + W2 hidden + b2: block l + 1's stream

    readout_pool   relay_out (e, sign)           mean over tokens of the last stream
    readout_relay  relay_norm (token=1, e, sign) N(mean), shunted by readout_trn
    classes        decoder   (class, sign)       R N(mean) + c

Projections (beyond each block's pathway): ``b{l}_drive_q/_k/_v`` (stream -> relays, basal,
one-to-one), ``b{l}_trn_pool_*`` / ``b{l}_trn_shunt_*`` (relays <-> TRN of the same token),
``b{l}_residual`` (stream -> nucleus 2), ``b{l}_drive_mlp``, ``b{l}_w1`` (relays -> hidden,
``W1``), ``b{l}_w2`` (hidden -> out, ``W2``), ``b{l}_skip`` (nucleus 2 -> out), ``readout_mean``,
``readout_drive``, ``readout_trn_pool``/``_shunt`` and ``readout_classes`` (``R``). A block
without an MLP has no MLP populations: its nucleus 2 is the next block's stream.

Only sizes enter here (the circuits layer knows no weights); values come from
:mod:`ctmhsa.mapping.blocks`.
"""

from __future__ import annotations

from dataclasses import replace

from .builders import DEFAULT_N_INH, build
from .graph import Circuit, Population, Projection

__all__ = ["model_circuit", "block_prefix", "stream_source", "block_output", "RELAY_SETS", "CORTICAL",
           "MEMORY_CORTICAL", "attention_circuit", "relay_sets"]

RELAY_SETS = {"q": "nucleus1", "k": "nucleus1_kv", "v": "nucleus1_v"}
"""The attention's relay sets, by what they carry (core: queries; matrix: keys, values)."""

_ONES_SIGNED = ("pre.sign", "post.sign")     # one-to-one ON/OFF drive: + ON->ON, - OFF->ON, ...


def block_prefix(l: int) -> str:
    """Prefix of block ``l``'s populations and projections."""
    return f"b{l}_"


def block_output(l: int, has_mlp: bool) -> str:
    """The population carrying block ``l``'s output stream."""
    return f"b{l}_out" if has_mlp else f"b{l}_nucleus2"


def stream_source(l: int, blocks) -> str:
    """The population carrying block ``l``'s input stream (``input`` for block 0)."""
    return "input" if l == 0 else block_output(l - 1, bool(blocks[l - 1]["dh"]))


CORTICAL = ("l23", "l5it", "l5pt")
"""The attention's spiking cortical populations (copies ``P`` where above 1)."""


MEMORY_CORTICAL = ("outer", "outer_z", "memory", "memory_z", "readout", "readout_z", "l5pt")
"""A causal block's cortical populations (the key-value memory, :mod:`ctmhsa.circuits.kvmemory`)."""

CO4_CORTICAL = ("coop_q", "coop_k", "coop_v", "outer", "outer_z", "memory", "memory_z", "readout", "readout_z", "l5pt")
"""A Co4 block's cortical populations (the triad and the memory it feeds, :mod:`ctmhsa.circuits.co4`)."""


def attention_circuit(n: int, de: int, H: int, dk: int, dv: int, n_inh: int = DEFAULT_N_INH,
                      with_nucleus2: bool = True, P: int = 1, causal: bool = False,
                      normalize: bool = True, latents: int = 0) -> Circuit:
    """The attention pathway of one block, unprefixed (what :func:`ctmhsa.mapping.encode.encode`
    encodes and, without nucleus 2, :func:`ctmhsa.mapping.decode.decode` decodes); ``P`` copies of
    its cortical cells (:data:`CORTICAL`); its relays and nucleus 2 get theirs in the model. A
    causal block's is the key-value memory over a stream (``circuit="memory"``, one token slot,
    ``normalize`` as the model's). A Co4 block's (``latents`` > 0) is the Co4 area: its
    ``latents`` query rows attend over the ``n`` tokens (``circuit="co4"``, cross-attention)."""
    if latents:
        if causal or not normalize:
            raise ValueError(f"latents: a Co4 block attends over a token set, normalised (its seed's softmax); got "
                             f"causal={causal}, normalize={normalize}")
        return build(latents, dk, dv, de, H=H, m=n, cross=True, n_inh=n_inh, name="pathway",
                     with_nucleus2=with_nucleus2, circuit="co4", P={k: P for k in CO4_CORTICAL} if P > 1 else 1)
    if causal:
        names = [k for k in MEMORY_CORTICAL if normalize or not k.endswith("_z")]
        return build(n, dk, dv, de, H=H, n_inh=n_inh, name="pathway", with_nucleus2=with_nucleus2,
                     circuit="memory", normalize=normalize, P={k: P for k in names} if P > 1 else 1)
    return build(n, dk, dv, de, H=H, n_inh=n_inh, name="pathway", with_nucleus2=with_nucleus2,
                 P={k: P for k in CORTICAL} if P > 1 else 1)


def relay_sets(circuit: Circuit, prefix: str = "") -> dict:
    """The attention's relay sets a block's circuit has (:data:`RELAY_SETS`; the memory has no
    values' relays of their own)."""
    return {what: name for what, name in RELAY_SETS.items() if prefix + name in circuit.populations}


def _check_blocks(blocks) -> tuple:
    out = []
    for l, b in enumerate(blocks):
        if not isinstance(b, dict) or set(b) != {"H", "dk", "dv", "dh"}:
            raise ValueError(f"blocks[{l}]: expected a dict with keys H, dk, dv, dh, got {b!r}")
        for k in ("H", "dk", "dv"):
            if isinstance(b[k], bool) or not isinstance(b[k], int) or b[k] < 1:
                raise ValueError(f"blocks[{l}].{k}: expected an integer >= 1, got {b[k]!r}")
        if isinstance(b["dh"], bool) or not isinstance(b["dh"], int) or b["dh"] < 0:
            raise ValueError(f"blocks[{l}].dh: expected an integer >= 0 (0: no MLP), got {b['dh']!r}")
        out.append(dict(b))
    if not out:
        raise ValueError("blocks: a model needs at least one block")
    return tuple(out)


def model_circuit(n: int, de: int, blocks, classes: int = 0, n_inh: int = DEFAULT_N_INH, P: int = 1,
                  name: str = "transformer", causal: bool = False, normalize: bool = True,
                  latents: int = 0) -> Circuit:
    """Describe a stack of transformer blocks and its read-out.

    Parameters
    ----------
    n : int
        Tokens (macrocolumns per area).
    de : int
        Embedding dimension (relay pairs per token of every stream).
    blocks : sequence of dict
        Per block ``{"H", "dk", "dv", "dh"}``: heads, key/query and value dimensions, MLP hidden
        units (0: no MLP).
    classes : int
        Class cells of the read-out (0: none).
    n_inh : int
        Interneurons per macrocolumn and per TRN pool.
    P : int
        Population coding: cells per represented value of every stream, relay, hidden,
        read-out and cortical attention population (axis ``p``; each projection averages its
        source's copies). Interneurons are pools already and keep ``n_inh``.
    name : str
        The circuit's name.
    causal : bool
        Every block's attention is the key-value memory over a stream of single tokens
        (``n = 1``; :mod:`ctmhsa.circuits.kvmemory`, its write gate ``b{l}_nucleus_gate`` a
        declared timing signal per block), normalised where ``normalize``.
    latents : int
        A Co4 model (:mod:`ctmhsa.circuits.co4`; one block, no MLP): a population ``latents``
        (relays, ``(token=latents, e, sign)``, constant rates: the learned latent queries) drives
        the block's query relays and its residual, the input stream its key and value relays; the
        block's nucleus 2 (``latents`` rows, ``latents + x̃``) is its output and the read-out's
        mean is over the latents.

    Returns
    -------
    Circuit
        ``meta.level == "transformer"``, ``meta.blocks`` the per-block sizes (with each block's
        ``prefix``), ``meta.classes``.
    """
    for arg, val in (("n", n), ("de", de), ("n_inh", n_inh), ("P", P)):
        if isinstance(val, bool) or not isinstance(val, int) or val < 1:
            raise ValueError(f"{arg}: expected an integer >= 1, got {val!r}")
    if isinstance(classes, bool) or not isinstance(classes, int) or classes < 0:
        raise ValueError(f"classes: expected an integer >= 0, got {classes!r}")
    blocks = _check_blocks(blocks)
    if causal and n != 1:
        raise ValueError(f"n: a causal model's circuit has one token slot (one token per presentation); got n = {n}")
    if isinstance(latents, bool) or not isinstance(latents, int) or latents < 0:
        raise ValueError(f"latents: expected an integer >= 0 (0: a transformer), got {latents!r}")
    if latents and (len(blocks) != 1 or blocks[0]["dh"] or causal or not normalize):
        raise ValueError("latents: a Co4 model's circuit is one block without an MLP, normalised, over a token set")
    b0 = blocks[0]
    c = Circuit(name, meta=dict(level="transformer", n=n, m=n, H=b0["H"], dk=b0["dk"], dv=b0["dv"], de=de,
                                n_inh=n_inh, blocks=tuple(dict(b, prefix=block_prefix(l)) for l, b in enumerate(blocks)),
                                classes=classes, P={"streams": P} if P > 1 else {}, causal=bool(causal),
                                normalize=bool(normalize) if causal else True, latents=latents,
                                circuit="memory" if causal else "co4" if latents else "quadratic"))
    stream = ("token", "e", "sign")

    def add(name, cell_type, axes, sizes, *args, **kw):   # a stream population, with its copies
        if P > 1:
            axes, sizes = axes + ("p",), sizes + (P,)
        c.add_population(Population(name, cell_type, axes, sizes, *args, **kw))

    add("input", "relay", stream, (n, de, 2), area="thalamus", role="input_relay")
    if latents:
        add("latents", "relay", stream, (latents, de, 2), area="thalamus", role="latent_relay")
    for l, b in enumerate(blocks):
        p = block_prefix(l)
        sub = attention_circuit(n, de, b["H"], b["dk"], b["dv"], n_inh, P=P, causal=causal, normalize=normalize,
                                latents=latents)
        for pop in sub.populations.values():
            if pop.name in RELAY_SETS.values():
                pop = replace(pop, cell_type="relay_norm", compartments=("basal", "soma"))
            if pop.name in (*RELAY_SETS.values(), "nucleus2") and P > 1:
                pop = replace(pop, axes=pop.axes + ("p",), sizes=pop.sizes + (P,))
            c.add_population(replace(pop, name=p + pop.name))
        for proj in sub.projections.values():
            c.add_projection(replace(proj, name=p + proj.name, source=p + proj.source, target=p + proj.target))
        src = stream_source(l, blocks)
        for what, relays in relay_sets(sub).items():   # a Co4 block's queries are its latents'
            _normalised_relays(c, "latents" if latents and what == "q" else src, p + relays, f"{p}trn_{what}",
                               f"{p}drive_{what}", n_inh, ("token",))
        c.add_projection(Projection(p + "residual", "latents" if latents else src, p + "nucleus2", "soma",
                                    (("token", "token"), ("e", "e")), "ones", _ONES_SIGNED, "driver"))
        if b["dh"]:
            add(p + "mlp_relay", "relay_norm", stream, (n, de, 2), ("basal", "soma"), area="thalamus", role="mlp_relay")
            _normalised_relays(c, p + "nucleus2", p + "mlp_relay", p + "trn_mlp", p + "drive_mlp", n_inh, ("token",))
            add(p + "hidden", "l6ct", ("token", "d"), (n, b["dh"]), role="mlp_hidden")
            c.add_projection(Projection(p + "w1", p + "mlp_relay", p + "hidden", "soma", (("token", "token"),),
                                        "W1", ("post.d", "pre.e", "pre.sign"), "corticothalamic_loop"))
            add(p + "out", "relay_out", stream, (n, de, 2), area="thalamus", role="block_output")
            c.add_projection(Projection(p + "w2", p + "hidden", p + "out", "soma", (("token", "token"),),
                                        "W2", ("post.e", "pre.d", "post.sign"), "corticothalamic"))
            c.add_projection(Projection(p + "skip", p + "nucleus2", p + "out", "soma",
                                        (("token", "token"), ("e", "e")), "ones", _ONES_SIGNED, "driver"))
    if classes:
        last = block_output(len(blocks) - 1, bool(blocks[-1]["dh"]))
        add("readout_pool", "relay_out", ("e", "sign"), (de, 2), area="thalamus", role="readout_pool")
        c.add_projection(Projection("readout_mean", last, "readout_pool", "soma", (("e", "e"),), "ones",
                                    _ONES_SIGNED, "driver"))
        add("readout_relay", "relay_norm", ("token", "e", "sign"), (1, de, 2), ("basal", "soma"), area="thalamus",
            role="readout_relay")
        _normalised_relays(c, "readout_pool", "readout_relay", "readout_trn", "readout_drive", n_inh, ())
        add("classes", "decoder", ("class", "sign"), (classes, 2), role="classes")
        c.add_projection(Projection("readout_classes", "readout_relay", "classes", "soma", (), "R",
                                    ("post.class", "pre.e", "pre.sign", "post.sign"), "readout"))
    return c


def _normalised_relays(c: Circuit, source: str, relays: str, trn: str, drive: str, n_inh: int, per: tuple) -> None:
    """Relays ``relays`` (already in ``c``) driven one-to-one by ``source`` (an ON/OFF stream) and
    shunted by a TRN pool ``trn`` per value of the axes ``per`` (the token) that pools their
    ON + OFF rates."""
    tokens = tuple(per)
    pre = c.population(source)
    match = tuple((a, a) for a in tokens if a in pre.axes) + (("e", "e"),)
    c.add_projection(Projection(drive, source, relays, "basal", match, "ones", _ONES_SIGNED, "driver"))
    sizes = tuple(c.population(relays).sizes[c.population(relays).axes.index(a)] for a in tokens)
    c.add_population(Population(trn, "interneuron", tokens + ("k",), sizes + (n_inh,), area="thalamus",
                                role="relay_normaliser"))
    same = tuple((a, a) for a in tokens)
    c.add_projection(Projection(trn + "_pool", relays, trn, "soma", same, "pooling", (), "normalisation"))
    c.add_projection(Projection(trn + "_shunt", trn, relays, "soma", same, pathway="normalisation"))
