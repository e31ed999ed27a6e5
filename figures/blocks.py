"""The figures of ``ctmhsa bench depth`` (transformer blocks in series), drawn from its JSON and
from the circuit description of the model it simulated.

:func:`draw_model_circuit` draws a transformer circuit (:func:`ctmhsa.circuits.transformer.model_circuit`)
at the level of populations: every node is a population of the circuit and every arrow a
projection of it (nothing is drawn by hand; a TRN pool and its shunt, or cortical interneurons'
pool and shunt, are one double-headed arrow). :func:`draw_depth` draws the benchmark's error vs
depth and per stage and block; :func:`draw` draws both from the JSON (the command line calls it
after the run: :data:`ctmhsa.sims.benchmarks.depth.FIGURE`).
"""

from __future__ import annotations

import os
import re
import sys

import numpy as np

from ctmhsa.maths.stages import BLOCK_STAGES, stage, symbol

from .style import POP_COLOURS, PROJECTION_COLOURS, QUICK_MARK, mark_quick, plt, read_json_numbers, save

__all__ = ["draw_model_circuit", "draw_depth", "draw", "PATHWAY_COLOURS", "CELL_COLOURS", "SHORT_NAMES"]

PATHWAY_COLOURS = {
    "driver": "#525252",
    "core": PROJECTION_COLOURS["core_q"],
    "matrix": PROJECTION_COLOURS["matrix_k"],
    "normalisation": PROJECTION_COLOURS["pool"],
    "local": PROJECTION_COLOURS["attention"],
    "corticothalamic": PROJECTION_COLOURS["pt_out"],
    "corticothalamic_loop": "#17becf",
    "readout": "#b15928",
}
"""Arrow colour of each projection pathway (the paper's colours where :data:`PROJECTION_COLOURS`
has the pathway's projection)."""

CELL_COLOURS = {"relay": "#ffffb3", "relay_norm": "#ccebc5", "trn": "#c994c7", "l6ct": "#e5c494",
                "relay_out": POP_COLOURS["nucleus2"], "decoder": "#fb8072"}
"""Node colour of the cell types :data:`POP_COLOURS` has no population for (``trn``: an
interneuron pool in the thalamus)."""

SHORT_NAMES = {"input": "input", "nucleus1": "core q", "nucleus1_kv": "matrix k", "nucleus1_v": "matrix v",
               "trn_q": "TRN q", "trn_k": "TRN k", "trn_v": "TRN v", "l23": "L2/3", "interneuron": "interneurons",
               "l5it": "L5 IT", "l5pt": "L5 PT", "nucleus2": "nucleus 2", "mlp_relay": "MLP relays",
               "trn_mlp": "TRN MLP", "hidden": "L6 CT hidden", "out": "out", "readout_pool": "mean pool",
               "readout_relay": "relays", "readout_trn": "TRN", "classes": "classes"}
"""Node label of each population (without its block prefix ``b{l}_``); others keep their name."""

PATHWAY_NAMES = {"driver": "driver (one-to-one)", "core": "core (WQ)", "matrix": "matrix (WK, WV)",
                 "normalisation": "normalisation (pool / shunt)", "local": "local (cortical)",
                 "corticothalamic": "corticothalamic (WO, W2)", "corticothalamic_loop": "corticothalamic loop (W1)",
                 "readout": "read-out (R)"}
"""Legend entry of each pathway."""

# Node positions inside a block (x from the block's left edge, y): the thalamus in a bottom band
# (relays of N(x), their TRN pools below) and a top band (nucleus 2, the MLP's relays with their
# TRN pool above, the block's output), the cortex between them.
_ROW = {"trn": -1.15, "relay": 0.0, "low": 1.65, "high": 2.85, "top": 4.55, "trn_top": 5.6}
_BLOCK_XY = {"nucleus1": (0.0, _ROW["relay"]), "nucleus1_kv": (1.6, _ROW["relay"]), "nucleus1_v": (3.2, _ROW["relay"]),
             "trn_q": (0.6, _ROW["trn"]), "trn_k": (2.2, _ROW["trn"]), "trn_v": (3.8, _ROW["trn"]),
             "l23": (0.8, _ROW["low"]), "interneuron": (0.8, _ROW["high"]),
             "l5it": (3.2, _ROW["low"]), "l5pt": (3.2, _ROW["high"]),
             "nucleus2": (3.2, _ROW["top"]), "mlp_relay": (4.8, _ROW["top"]), "trn_mlp": (4.8, _ROW["trn_top"]),
             "hidden": (4.8, _ROW["high"]), "out": (6.4, _ROW["top"])}
_READOUT_XY = {"readout_pool": (0.0, _ROW["top"]), "readout_relay": (1.6, _ROW["top"]),
               "readout_trn": (1.6, _ROW["trn_top"]), "classes": (1.6, _ROW["high"])}
_GAP = 1.9
"""Space between a block's right-most node and the next block's left-most (the stream's bus)."""
_INCH = 0.5
"""Inches per unit of the diagram's coordinates."""


def _role(name: str):
    """(block index or None, name without its block prefix)."""
    m = re.match(r"^b(\d+)_(.+)$", name)
    return (int(m.group(1)), m.group(2)) if m else (None, name)


def _layout(circuit):
    """Position (x, y) and column (-1: input, l: block l, L: read-out) of every population."""
    roles = {name: _role(name) for name in circuit.populations}
    L = 1 + max((l for l, _ in roles.values() if l is not None), default=-1)
    x0 = {-1: -2.2}
    for l in range(L + 1):
        x0[l] = l * (_BLOCK_XY["out"][0] + _GAP)
    pos, col, spare = {}, {}, {}
    for name, (l, role) in roles.items():
        if l is not None:
            c, table = l, _BLOCK_XY
        elif role == "input":
            c, table = -1, {"input": (0.0, _ROW["top"])}
        else:
            c, table = L, _READOUT_XY
        if role in table:
            dx, y = table[role]
        else:   # a population this layout does not know: a row of its own above its column
            k = spare[c] = spare.get(c, -1) + 1
            dx, y = 1.6 * k, _ROW["trn_top"] + 1.3
        pos[name], col[name] = (x0[c] + dx, y), c
    return pos, col, L


def _node_colour(circuit, name: str) -> str:
    pop = circuit.population(name)
    role = _role(name)[1]
    if pop.cell_type == "interneuron" and pop.area == "thalamus":
        return CELL_COLOURS["trn"]
    if role in POP_COLOURS:
        return POP_COLOURS[role]
    return CELL_COLOURS.get(pop.cell_type, "#d9d9d9")


def _dark(colour: str) -> bool:
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(colour)
    return 0.299 * r + 0.587 * g + 0.114 * b < 0.45


def _bezier(a, b, rad, t):
    """Points of matplotlib's ``arc3`` curve from a to b (with equal axes: data = display up to scale)."""
    (x1, y1), (x2, y2) = a, b
    cx, cy = (x1 + x2) / 2 + rad * (y2 - y1), (y1 + y2) / 2 - rad * (x2 - x1)
    t = np.asarray(t)[:, None]
    return (1 - t) ** 2 * np.array(a) + 2 * (1 - t) * t * np.array([cx, cy]) + t ** 2 * np.array(b)


def _hits(points, boxes, skip, margin=0.08):
    for name, (x, y, w, h) in boxes.items():
        if name in skip:
            continue
        inside = (np.abs(points[:, 0] - x) < w / 2 + margin) & (np.abs(points[:, 1] - y) < h / 2 + margin)
        if inside.any():
            return True
    return False


def draw_model_circuit(circuit, ax=None) -> dict:
    """Population-level diagram of a transformer circuit (:func:`ctmhsa.circuits.transformer.model_circuit`).

    Blocks left to right; in each block the thalamus in a bottom band (the three relay sets of
    N(x) and their TRN pools) and a top band (nucleus 2, the MLP's relays and TRN pool, the
    block's output), the cortex between them (L2/3 and its interneurons, L5 IT, L5 PT, the MLP's
    hidden units in L6 CT); the input at the far left, the read-out at the far right. Every node
    is a population (labelled with its neuron count, coloured by cell type), every arrow a
    projection (coloured by pathway; labelled with its weight source where that is a learned
    matrix); a pair of opposite projections (a pool and its shunt) is one double-headed arrow.
    The stream from one block (or the input) to the next block's relays runs along a bus below
    the thalamus.

    Returns ``{"ax", "nodes": {population: label}, "boxes": {population: patch}, "arrows":
    {projection: arrow}}`` (the two projections of a pool/shunt pair share their arrow).
    """
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle
    from matplotlib.path import Path

    pos, col, L = _layout(circuit)
    xs = [p[0] for p in pos.values()]
    ys = [p[1] for p in pos.values()]
    lane = min(ys) - 0.95                     # the stream's bus, below the thalamus
    xlim = (min(xs) - 1.5, max(xs) + 1.4)
    pathways = {p.pathway for p in circuit.projections.values()}
    ncol = min(len(pathways), 4 if xlim[1] - xlim[0] < 24 else 8)
    rows = -(-len(pathways) // max(ncol, 1))
    ylim = (lane - 0.3 - 0.36 * (rows + 1), max(ys) + 1.25)      # room for the legend below, titles above
    if ax is None:
        fig, ax = plt.subplots(figsize=((xlim[1] - xlim[0]) * _INCH, (ylim[1] - ylim[0]) * _INCH))
        fig.subplots_adjust(0, 0, 1, 1)
    fig = ax.figure
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_aspect("equal")
    ax.axis("off")

    # nodes: the label first (its size sets the box)
    nodes = {}
    for name, (x, y) in pos.items():
        pop = circuit.population(name)
        colour = _node_colour(circuit, name)
        nodes[name] = ax.text(x, y, f"{SHORT_NAMES.get(_role(name)[1], _role(name)[1])}\n{pop.N:,}", ha="center",
                              va="center", fontsize=7, zorder=5, linespacing=1.1,
                              color="white" if _dark(colour) else "black")
    renderer = fig.canvas.get_renderer()
    ax.apply_aspect()
    inv = ax.transData.inverted()
    size = {}
    for name, t in nodes.items():
        bb = t.get_window_extent(renderer)
        (x0, y0), (x1, y1) = inv.transform([[bb.x0, bb.y0], [bb.x1, bb.y1]])
        size[name] = (max(x1 - x0 + 0.2, 0.75), y1 - y0 + 0.16)
    h = max(s[1] for s in size.values())
    boxes, patches = {}, {}
    for name, (x, y) in pos.items():
        w = size[name][0]
        boxes[name] = (x, y, w, h)
        patches[name] = ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0,rounding_size=0.12",
                                                    fc=_node_colour(circuit, name), ec="k", lw=0.6, zorder=4))

    # bands and block titles
    thal = [b for n, b in boxes.items() if circuit.population(n).area == "thalamus"]
    bottom = [b for b in thal if b[1] < _ROW["low"]]
    top = [b for b in thal if b[1] > _ROW["high"]]
    cortex = [b for n, b in boxes.items() if circuit.population(n).area != "thalamus"]
    for label, group, colour in (("thalamus", bottom, "#f2f2f2"), ("cortex", cortex, "#fdf1e6"), ("thalamus", top, "#f2f2f2")):
        if group:
            lo = min(b[1] - b[3] / 2 for b in group) - 0.2
            hi = max(b[1] + b[3] / 2 for b in group) + 0.2
            ax.add_patch(Rectangle((xlim[0] + 0.55, lo), xlim[1] - xlim[0] - 0.6, hi - lo, fc=colour, ec="none", zorder=0))
            ax.text(xlim[0] + 0.3, (lo + hi) / 2, label, rotation=90, ha="center", va="center", fontsize=7, color="0.3")
    synapses = circuit.n_synapses(by_projection=True)
    for l in range(L):
        members = [n for n in circuit.populations if _role(n)[0] == l]
        n_syn = sum(v for k, v in synapses.items() if _role(k)[0] == l)
        left = min(boxes[n][0] - boxes[n][2] / 2 for n in members)
        right = max(boxes[n][0] + boxes[n][2] / 2 for n in members)
        ax.text((left + right) / 2, ylim[1] - 0.35, f"block {l}: {sum(circuit.population(n).N for n in members):,} "
                f"neurons, {n_syn:,} synapses", ha="center", va="center", fontsize=8, fontweight="bold")
    readout = [n for n in circuit.populations if col[n] == L]
    if readout:
        x = np.mean([boxes[n][0] for n in readout])
        ax.text(x, ylim[1] - 0.35, f"read-out: {sum(circuit.population(n).N for n in readout):,} neurons",
                ha="center", va="center", fontsize=8, fontweight="bold")

    # gap (bus) x between each column and the next
    def edge(c, side):
        members = [b for n, b in boxes.items() if col[n] == c]
        if not members:
            return None
        return (max(b[0] + b[2] / 2 for b in members) if side > 0 else min(b[0] - b[2] / 2 for b in members))

    arrows, drawn = {}, {}
    for name, proj in circuit.projections.items():
        s, t = proj.source, proj.target
        if name in arrows:
            continue
        colour = PATHWAY_COLOURS.get(proj.pathway, "0.4")
        back = [k for k, p in circuit.projections.items() if p.source == t and p.target == s and k not in arrows]
        style = "<|-|>" if back else "-|>"
        (sx, sy, sw, _), (tx, ty, tw, th) = boxes[s], boxes[t]
        label_at = None
        if col[s] != col[t] and ty < sy - 0.5:           # the stream, to the next column's relays: the bus
            right, left = edge(col[s], +1), edge(col[t], -1)
            gx = (right + left) / 2 if left is not None and left > right else sx + sw / 2 + 0.4
            ex = tx - tw / 4
            verts = [(sx + sw / 2, sy), (gx, sy), (gx, lane), (ex, lane), (ex, ty - th / 2)]
            arrow = FancyArrowPatch(path=Path(verts, [Path.MOVETO] + [Path.LINETO] * 4), arrowstyle=style,
                                    mutation_scale=8, color=colour, lw=1.0, zorder=2, joinstyle="miter")
        else:
            rad = 0.0
            for r in (0.0, -0.25, 0.25, -0.4, 0.4, -0.6, 0.6):
                if not _hits(_bezier((sx, sy), (tx, ty), r, np.linspace(0.05, 0.95, 60)), boxes, (s, t)):
                    rad = r
                    break
            arrow = FancyArrowPatch((sx, sy), (tx, ty), connectionstyle=f"arc3,rad={rad}", arrowstyle=style,
                                    patchA=patches[s], patchB=patches[t], shrinkA=1, shrinkB=1, mutation_scale=8,
                                    color=colour, lw=1.0, zorder=3)
            label_at = tuple(_bezier((sx, sy), (tx, ty), rad, [0.5])[0])
        ax.add_patch(arrow)
        for k in [name] + back[:1]:
            arrows[k] = arrow
        drawn[proj.pathway] = colour
        if label_at is not None and proj.weight not in (None, "ones", "pooling"):
            ax.text(*label_at, proj.weight, fontsize=7, color=colour, ha="center", va="center", zorder=6,
                    bbox=dict(boxstyle="round,pad=0.12", fc="white", ec="none", alpha=0.9))
    # legend: the pathways drawn
    handles = [Line2D([], [], color=c, lw=1.5, label=PATHWAY_NAMES.get(p, p)) for p, c in
               sorted(drawn.items(), key=lambda pc: list(PATHWAY_COLOURS).index(pc[0]) if pc[0] in PATHWAY_COLOURS else 99)]
    ax.legend(handles=handles, loc="lower center", ncol=ncol, fontsize=7, frameon=False,
              bbox_to_anchor=(0.5, 0.0), handlelength=1.8, columnspacing=1.2,
              title="pathways (double arrow: a pool and its shunt)", title_fontsize=7)
    return dict(ax=ax, nodes=nodes, boxes=patches, arrows=arrows)


def _num(v) -> float:
    return float("nan") if v is None else float(v)


def _stage_keys(blocks) -> list:
    """The stages of the block metrics, in :data:`BLOCK_STAGES` order (keys the stage table
    does not know are left out)."""
    keys = []
    for st in blocks:
        for k in st:
            if k not in keys:
                keys.append(k)
    known = []
    for k in keys:
        try:
            stage(k)
        except KeyError:
            continue
        known.append(k)
    order = {k: i for i, k in enumerate(BLOCK_STAGES)}
    return sorted(known, key=lambda k: order.get(k, len(order)))


BLOCK_COLOURS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d")


def draw_depth(doc: dict, fig=None):
    """The figure of ``ctmhsa bench depth`` from its JSON (as a dict). (a) The output's (the last
    block's stream) and the logits' NRMSE vs depth, with their floors (dashed), and r (dotted,
    right axis). (b) For the deepest model, every stage's NRMSE per block (bars, one colour per
    block) and its floor (black tick; none where the floor is unknown). Quick data are marked."""
    from matplotlib.lines import Line2D

    rows = sorted(doc["rows"], key=lambda r: r["depth"])
    if fig is None:
        fig = plt.figure(figsize=(7.4, 3.6), constrained_layout=True)
    gs = fig.add_gridspec(1, 2, width_ratios=(1.0, 2.3))
    ax = fig.add_subplot(gs[0])
    depths = [r["depth"] for r in rows]
    out_sym = symbol("out")
    rax = ax.twinx()
    handles = []
    for key, colour, name in (("output", "#1f78b4", f"output ({out_sym}, last block)"), ("logits", "#e31a1c", "logits")):
        if not any(key in r for r in rows):
            continue
        get = lambda m: [_num((r.get(key) or {}).get(m)) for r in rows]   # noqa: E731
        ax.plot(depths, get("nrmse"), "-o", color=colour, ms=4, lw=1.3)
        ax.plot(depths, get("floor"), "--", color=colour, lw=1.0)
        rax.plot(depths, get("r"), ":^", color=colour, ms=3.5, lw=1.0, alpha=0.8)
        handles.append(Line2D([], [], color=colour, lw=1.3, label=name))
    handles += [Line2D([], [], color="k", ls="-", marker="o", ms=4, lw=1.3, label="NRMSE"),
                Line2D([], [], color="k", ls="--", lw=1.0, label="floor"),
                Line2D([], [], color="k", ls=":", marker="^", ms=3.5, lw=1.0, label="r (right axis)")]
    ax.set_xticks(depths)
    ax.set_xlim(min(depths) - 0.3, max(depths) + 0.3)
    ax.set_xlabel("depth (blocks)")
    ax.set_ylabel("NRMSE (solid), floor (dashed)")
    lo, hi = ax.get_ylim()
    ax.set_ylim(0, hi * 1.05)
    rax.set_ylabel("r (dotted)")
    rlo, rhi = rax.get_ylim()
    rlo = min(rlo, 0.9) if np.isfinite(rlo) else 0.9
    rax.set_ylim(rlo, 1.0 + 0.03 * (1.0 - rlo))
    ax.set_title("(a) error vs depth")
    ax.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False,
              handlelength=2.2, columnspacing=1.0)

    bx = fig.add_subplot(gs[1])
    deep = rows[-1]
    blocks = deep["blocks"]
    keys = _stage_keys(blocks)
    L = len(blocks)
    width = 0.8 / max(L, 1)
    x = np.arange(len(keys))
    vals = []
    for l, st in enumerate(blocks):
        off = (l - (L - 1) / 2) * width
        y = np.array([_num((st.get(k) or {}).get("nrmse")) for k in keys])
        f = np.array([_num((st.get(k) or {}).get("floor")) for k in keys])
        vals.extend(v for v in np.concatenate([y, f]) if np.isfinite(v) and v > 0)
        bx.bar(x + off, np.nan_to_num(y, nan=0.0), width=width * 0.92, color=BLOCK_COLOURS[l % len(BLOCK_COLOURS)],
               label=f"block {l}", zorder=2)
        ok = np.isfinite(f)
        bx.hlines(f[ok], (x + off - width * 0.46)[ok], (x + off + width * 0.46)[ok], color="k", lw=1.6, zorder=3)
    if vals and max(vals) / min(vals) > 30:
        bx.set_yscale("log")
    elif vals:
        bx.set_ylim(0, max(vals) * 1.05)
    else:
        bx.set_ylim(0, 1)
        bx.text(0.5, 0.5, "no per-stage NRMSE in the results file", transform=bx.transAxes, ha="center",
                va="center", fontsize=8, color="0.4")
    bx.set_xticks(x)
    bx.set_xticklabels([symbol(k) for k in keys])
    bx.set_xlim(-0.6, len(keys) - 0.4)
    bx.set_xlabel("stage, in circuit order")
    bx.set_ylabel("NRMSE")
    bx.grid(axis="y", color="0.9", lw=0.6, zorder=0)
    handles, _ = bx.get_legend_handles_labels()
    handles.append(Line2D([], [], color="k", lw=1.6, label="floor"))
    bx.legend(handles=handles, fontsize=7, loc="upper left", frameon=False, ncol=min(L + 1, 4))
    bx.set_title(f"(b) per stage and block, depth {deep['depth']}")
    lo, hi = bx.get_ylim()
    bx.set_ylim(lo, hi * (1.35 if bx.get_yscale() == "linear" else 3.0))
    P = deep.get("P")
    fig.suptitle(f"Transformer blocks in series, {doc.get('level', 'escape')} level: {_num(doc['duration']):g} s window, "
                 f"median of {doc['sets']} token sets (n = {doc['n']}, de = {doc['de']}"
                 + (f", P = {P}" if P is not None and np.isfinite(_num(P)) else "") + ")")
    mark_quick(fig, bool(doc.get("quick")))
    return fig


def _model_P(doc) -> int:
    """Cells per value of the simulated model: the deepest row's ``P``, else the document's, else 4."""
    for v in (doc["rows"][-1].get("P") if doc.get("rows") else None, doc.get("P")):
        if v is not None and np.isfinite(_num(v)) and int(v) >= 1:
            return int(v)
    return 4


def draw(json_path: str, png: str | None = None) -> str:
    """Draw the figures of ``ctmhsa bench depth`` from its JSON ``json_path``: ``png`` (default:
    beside the JSON, same name with ``.png``; with a PDF and a caption) and, beside it,
    ``<stem>_circuit.png``: the circuit of the deepest model. Returns the first PNG's path (what
    the command line prints); the circuit's is the same with ``_circuit``."""
    from ctmhsa.circuits.transformer import model_circuit

    png = png or os.path.splitext(json_path)[0] + ".png"
    out_dir, stem = os.path.dirname(os.path.abspath(png)), os.path.splitext(os.path.basename(png))[0]
    doc = read_json_numbers(json_path)
    quick = bool(doc.get("quick"))
    fig = draw_depth(doc)
    deep = max(doc["rows"], key=lambda r: r["depth"])
    caption = (f"Transformer blocks in series (random blocks: H = {doc['H']}, dk = {doc['dk']}, dv = {doc['dv']}, "
               f"MLP of dh = {doc['dh']}; read-out of {doc['classes']} classes; n = {doc['n']} tokens of de = "
               f"{doc['de']}), {doc.get('level', 'escape')} level, {_num(doc['duration']):g} s window, medians over "
               f"{doc['sets']} held-out token sets. (a) NRMSE of the last block's stream and of the logits vs depth "
               "(solid), their spike-count noise floors (dashed) and r (dotted, right axis). (b) Depth "
               f"{deep['depth']}: NRMSE of every stage of every block (bars) and its floor (black tick; none where "
               "it is unknown).")
    paths = save(fig, out_dir, stem, (f"{QUICK_MARK}. " if quick else "") + caption)
    depth = int(deep["depth"])
    blocks = [dict(H=int(doc["H"]), dk=int(doc["dk"]), dv=int(doc["dv"]), dh=int(doc["dh"]))] * depth
    circuit = model_circuit(int(doc["n"]), int(doc["de"]), blocks, classes=int(doc["classes"]), P=_model_P(doc))
    ax = draw_model_circuit(circuit)["ax"]
    cfig = ax.figure
    w, h = cfig.get_size_inches()
    room = 0.55 if quick else 0.3              # a title line (and the quick mark) above the diagram
    cfig.set_size_inches(w, h + room)
    cfig.subplots_adjust(top=h / (h + room))
    cfig.suptitle(f"The circuit of the {depth}-block model: {circuit.n_neurons():,} neurons, "
                  f"{circuit.n_synapses():,} synapses (P = {_model_P(doc)} cells per value)", fontsize=9)
    save(cfig, out_dir, f"{stem}_circuit",
         f"The circuit of the {depth}-block model of the depth benchmark, population by population, from its "
         f"circuit description ({circuit.n_neurons():,} neurons; P = {_model_P(doc)} cells per value): every node is a "
         "population (neuron count; colour: cell type), every arrow a projection (colour: pathway; learned weight "
         "matrices named), a pool and its shunt one double-headed arrow. The thalamus in the bottom and top bands, "
         "the cortex between; the stream runs along the bus below each block to the next block's relays.",
         quick=quick)
    return paths[0]


if __name__ == "__main__":  # pragma: no cover
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: python -m ctmhsa.figures.blocks JSON [OUT.png]  (redraws the depth figures)")
    p = draw(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
    print(p)
    print(os.path.splitext(p)[0] + "_circuit.png")
