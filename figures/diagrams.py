"""Circuit diagrams drawn from built circuit descriptions (paper figs. 1b, 1c, 3, 4a).

Nothing here is drawn by hand: positions come from the populations' index axes and every line is
a projection (or a synapse) of the :class:`ctmhsa.circuits.graph.Circuit`, coloured by its weight source.
"""

from __future__ import annotations

import numpy as np

from .style import POP_COLOURS, PROJECTION_COLOURS, plt

__all__ = ["draw_head_cells", "draw_pathway"]

RAD = {"core_q": 0.25, "matrix_k": -0.1, "matrix_v": 0.05, "pool": 0.3, "shunt": 0.3, "pt_out": 0.1}
"""Curvature of each projection's arrow, so that parallel projections stay apart."""

LAYER_Y = {"nucleus1": 0.0, "nucleus1_kv": -0.35, "nucleus1_v": -0.7, "l5it": 1.0, "l5pt": 1.9, "l23": 3.0,
           "interneuron": 3.9, "nucleus2": 5.0}


def _cell_xy(circuit, name):
    """Positions of every cell of ``name`` in one head: x by macrocolumn i and microcolumn j."""
    pop = circuit.population(name)
    m = circuit.meta
    N = pop.N
    x, y = np.zeros(N), np.full(N, LAYER_Y[name])
    if name in ("l23", "l5it"):
        c = pop.axis("c") + (pop.axis("sign") * m.dv if "sign" in pop.axes else 0)
        width = m.dk if name == "l23" else 2 * m.dv
        x = pop.axis("i") * (m.m + 0.6) + pop.axis("j") + 0.1 + 0.8 * c / max(width, 1)
        y = y + (0.25 * (c % 2) if name == "l23" else 0.0)
    elif name in ("interneuron", "l5pt"):
        k = pop.axis("k") if name == "interneuron" else pop.axis("c") * 2 + (pop.axis("sign") if "sign" in pop.axes else 0)
        kmax = pop.sizes[-1] if name == "interneuron" else 2 * m.dv
        x = pop.axis("i") * (m.m + 0.6) + m.m * (k + 0.5) / kmax
    else:   # thalamic relays, one row per nucleus
        tok, e = pop.axis("token"), pop.axis("e")
        s = pop.axis("sign") if "sign" in pop.axes else 0
        span = m.n * (m.m + 0.6)
        x = (tok * 2 * m.de + e * 2 + s) / (m.n * 2 * m.de) * span
    return x, y


def draw_head_cells(circuit, ax=None, max_lines: int = 4000, seed: int = 0):
    """Every cell of one head and (a sample of) every synapse, from ``circuit.pairs``."""
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 5))
    xy = {p: _cell_xy(circuit, p) for p in circuit.populations}
    rng = np.random.default_rng(seed)
    for name, proj in circuit.projections.items():
        i, j = circuit.pairs(proj)
        if len(i) > max_lines:
            keep = rng.choice(len(i), max_lines, replace=False)
            i, j = i[keep], j[keep]
        (xs, ys), (xt, yt) = xy[proj.source], xy[proj.target]
        segs = np.stack([np.stack([xs[i], ys[i]], -1), np.stack([xt[j], yt[j]], -1)], 1)
        from matplotlib.collections import LineCollection

        ax.add_collection(LineCollection(segs, colors=PROJECTION_COLOURS.get(name, "0.5"),
                                         linewidths=0.3, alpha=0.35, zorder=1))
    for p, (x, y) in xy.items():
        ax.scatter(x, y, s=14, color=POP_COLOURS[p], edgecolor="k", linewidth=0.3, zorder=3, label=p)
    m = circuit.meta
    for i in range(m.n):   # macrocolumn boxes
        x0 = i * (m.m + 0.6) - 0.1
        ax.add_patch(plt.Rectangle((x0, 0.7), m.m + 0.2, 3.55, fill=False, lw=0.8, ls="--", color="0.4"))
        ax.text(x0 + (m.m + 0.2) / 2, 4.35, f"macrocolumn {i}", ha="center", fontsize=7)
    rows = [p for p in ("nucleus1_v", "nucleus1_kv", "nucleus1", "l5it", "l5pt", "l23", "interneuron", "nucleus2")
            if p in circuit.populations]
    ax.set_yticks([LAYER_Y[p] for p in rows])
    ax.set_yticklabels(rows, fontsize=7)
    ax.set_xticks([])
    ax.autoscale()
    for s in ("top", "right", "bottom"):
        ax.spines[s].set_visible(False)
    return ax


def draw_pathway(circuit, ax=None):
    """Population-level diagram: one node per population and head, one arrow per projection
    and head, labelled with its synapse count; thalamus at the bottom and top."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    H = circuit.meta.H
    nodes = {}
    for name, pop in circuit.populations.items():
        if "head" in pop.axes:
            for h in range(H):
                nodes[(name, h)] = (h * 3.2 + {"l23": 0.0, "interneuron": 1.4, "l5it": 0.0, "l5pt": 1.4}[name],
                                    {"l23": 3.0, "interneuron": 3.6, "l5it": 1.6, "l5pt": 2.2}[name])
        else:
            x = ((H - 1) * 1.6 + 0.7 + {"nucleus1_kv": 1.6, "nucleus1_v": -1.6}.get(name, 0.0)
                 - (0.8 if name == "nucleus1" and "nucleus1_kv" in circuit.populations else 0))
            nodes[(name, None)] = (x, 0.0 if name != "nucleus2" else 5.0)
    for name, proj in circuit.projections.items():
        i, j = circuit.pairs(proj)
        src, tgt = circuit.population(proj.source), circuit.population(proj.target)
        hs = src.axis("head")[i] if "head" in src.axes else None
        ht = tgt.axis("head")[j] if "head" in tgt.axes else None
        for h in range(H):
            sel = (hs == h) if hs is not None else (ht == h)
            count = int(np.count_nonzero(sel))
            if count == 0:
                continue
            a = nodes[(proj.source, h if hs is not None else None)]
            b = nodes[(proj.target, h if ht is not None else None)]
            rad = RAD.get(name, 0.08)
            ax.annotate("", xy=b, xytext=a, arrowprops=dict(arrowstyle="-|>", color=PROJECTION_COLOURS.get(name, "0.4"),
                                                            lw=1.2, shrinkA=21, shrinkB=21,
                                                            connectionstyle=f"arc3,rad={rad}"))
            # label at the arc's midpoint (matplotlib's arc3 control point is offset by rad*|b-a|)
            dx, dy = b[0] - a[0], b[1] - a[1]
            mx, my = (a[0] + b[0]) / 2 + 0.5 * rad * dy, (a[1] + b[1]) / 2 - 0.5 * rad * dx
            ax.text(mx, my, f"{proj.weight} {count:,}", fontsize=7, color=PROJECTION_COLOURS.get(name, "0.4"),
                    ha="center", va="center", bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.8))
    for (name, h), (x, y) in nodes.items():
        pop = circuit.population(name)
        n_cells = pop.N // (H if "head" in pop.axes else 1)
        ax.scatter([x], [y], s=2300, color=POP_COLOURS[name], edgecolor="k", zorder=3)
        ax.text(x, y, f"{name}\n{'' if h is None else f'h{h}: '}{n_cells:,}", ha="center", va="center",
                fontsize=7, zorder=4)
    ax.set_xlim(-1, max(x for x, _ in nodes.values()) + 1)
    ax.set_ylim(-0.8, 5.8)
    ax.axis("off")
    return ax
