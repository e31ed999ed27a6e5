"""Circuit diagrams drawn from built circuit descriptions (paper figs. 1b, 1c, 3, 4a).

Nothing here is drawn by hand: positions come from the populations' index axes and every line is
a projection (or a synapse) of the :class:`ctmhsa.circuits.graph.Circuit`, coloured by its weight source.
"""

from __future__ import annotations

import numpy as np

from .style import POP_COLOURS, PROJECTION_COLOURS, plt

__all__ = ["draw_head_cells", "draw_pathway"]

RAD = {"core_q": 0.25, "matrix_k": -0.1, "matrix_v": 0.05, "pool": 0.3, "shunt": 0.3, "pt_out": 0.1}
"""Curvature of each projection's arrow, so that parallel projections stay apart (in the pathway
diagram, the preferred one: an arrow that would cross a node bends further, :func:`_route`)."""

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


NODE_SIZE = 2300
"""Marker area of a pathway node (points², :meth:`matplotlib.axes.Axes.scatter`): a circle of
sqrt(2300) ≈ 48 pt, room for two lines of 7-pt type."""

_HEAD_XY = {"l23": (0.0, 3.0), "interneuron": (1.75, 3.85), "l5it": (0.0, 1.6), "l5pt": (1.5, 2.2)}
"""Position of each per-head population inside its head's column (x from the column's left, y)."""
_HEAD_DX = 3.3
"""Width of one head's column."""
_RELAY_DX = 1.6
"""Space between the relay nuclei of the bottom row."""


def _arc(a, b, rad, t):
    """Points at ``t`` of matplotlib's ``arc3`` curve from a to b (in display coordinates, where
    matplotlib bends it)."""
    (x1, y1), (x2, y2) = a, b
    c = np.array([(x1 + x2) / 2 + rad * (y2 - y1), (y1 + y2) / 2 - rad * (x2 - x1)])
    t = np.asarray(t, float)[:, None]
    return (1 - t) ** 2 * np.asarray(a, float) + 2 * (1 - t) * t * c + t ** 2 * np.asarray(b, float)


def _box_gap(p, w, h, q):
    """Distance from the points ``q`` to the axis-aligned boxes of size ``w`` × ``h`` centred at ``p``."""
    dx = np.maximum(np.abs(q[..., 0] - p[..., 0]) - w / 2, 0)
    dy = np.maximum(np.abs(q[..., 1] - p[..., 1]) - h / 2, 0)
    return np.hypot(dx, dy)


def _route(a, b, rad0, centres, r, margin):
    """The curvature of the arrow from ``a`` to ``b`` nearest ``rad0`` whose curve keeps ``margin``
    clear of every node (circles of radius ``r`` at ``centres``, all in points) other than its own
    ends; where none does, the one that keeps farthest from them."""
    a, b, centres = np.asarray(a, float), np.asarray(b, float), np.asarray(centres, float)
    others = centres[(np.hypot(*(centres - a).T) > 1e-6) & (np.hypot(*(centres - b).T) > 1e-6)]
    if not len(others):
        return rad0
    best, best_gap = rad0, -np.inf
    sign = 1 if rad0 >= 0 else -1
    for rad in sorted(np.round(np.arange(-0.7, 0.701, 0.05), 2), key=lambda x: (round(abs(x - rad0), 6), -sign * x)):
        pts = _arc(a, b, rad, np.linspace(0, 1, 121))
        pts = pts[(np.hypot(*(pts - a).T) > r) & (np.hypot(*(pts - b).T) > r)]
        gap = np.min(np.hypot(*(pts[:, None, :] - others[None, :, :]).transpose(2, 0, 1))) - r
        if gap >= margin:
            return float(rad)
        if gap > best_gap:
            best, best_gap = float(rad), gap
    return best


def draw_pathway(circuit, ax=None):
    """Population-level diagram: one node per population and head, one arrow per projection
    and head, labelled with its synapse count; thalamus at the bottom and top.

    Arrows bend round the nodes they would cross, and each label sits on its arrow where it keeps
    clearest of the nodes and of the labels placed before it (above the nodes and arrows). Set the
    axes' title before calling: the placement measures the laid-out axes."""
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 5), constrained_layout=True)
    fig = ax.figure
    H = circuit.meta.H
    nodes = {}
    relays = [p for p in ("nucleus1_v", "nucleus1", "nucleus1_kv") if p in circuit.populations]
    relays += [p for p, pop in circuit.populations.items()
               if "head" not in pop.axes and p != "nucleus2" and p not in relays]
    centre = ((H - 1) * _HEAD_DX + max(x for x, _ in _HEAD_XY.values())) / 2
    for name, pop in circuit.populations.items():
        if "head" in pop.axes:
            for h in range(H):
                dx, y = _HEAD_XY[name]
                nodes[(name, h)] = (h * _HEAD_DX + dx, y)
        elif name in relays:    # the bottom row, evenly spaced about the heads' centre
            k = relays.index(name)
            nodes[(name, None)] = (centre + (k - (len(relays) - 1) / 2) * _RELAY_DX, 0.0)
        else:
            nodes[(name, None)] = (centre, 5.0)
    for (name, h), (x, y) in nodes.items():
        pop = circuit.population(name)
        n_cells = pop.N // (H if "head" in pop.axes else 1)
        ax.scatter([x], [y], s=NODE_SIZE, color=POP_COLOURS[name], edgecolor="k", zorder=3)
        ax.text(x, y, f"{name}\n{'' if h is None else f'h{h}: '}{n_cells:,}", ha="center", va="center",
                fontsize=7, zorder=4)
    xs, ys = [x for x, _ in nodes.values()], [y for _, y in nodes.values()]
    ax.set_xlim(min(xs) - 1.0, max(xs) + 1.0)
    ax.set_ylim(min(ys) - 0.8, max(ys) + 0.8)
    ax.axis("off")

    # geometry in points of the laid-out axes (where matplotlib bends the arrows and sizes the nodes)
    if fig.get_layout_engine() is not None:
        fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    px = 72 / fig.dpi

    def to_pt(xy):
        return ax.transData.transform(np.asarray(xy, float)) * px

    r = np.sqrt(NODE_SIZE) / 2                    # node radius (points)
    margin = 3.0                                  # clearance of labels (points)
    at = {key: to_pt(xy) for key, xy in nodes.items()}
    centres = np.array(list(at.values()))

    edges = []
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
            ka, kb = (proj.source, h if hs is not None else None), (proj.target, h if ht is not None else None)
            rad = _route(at[ka], at[kb], RAD.get(name, 0.08), centres, r, 2 * margin)
            colour = PROJECTION_COLOURS.get(name, "0.4")
            ax.annotate("", xy=nodes[kb], xytext=nodes[ka], zorder=2,
                        arrowprops=dict(arrowstyle="-|>", color=colour, lw=1.2, shrinkA=21, shrinkB=21,
                                        connectionstyle=f"arc3,rad={rad}"))
            label = ax.text(*nodes[ka], f"{proj.weight} {count:,}", fontsize=7, color=colour, ha="center",
                            va="center", zorder=5,
                            bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.85))
            edges.append((at[ka], at[kb], rad, label))

    # labels: the shortest arrows first (they have the least room), each where it keeps clearest
    # of every node and of the labels already placed; the arrow's middle where several are clear
    box = ax.get_window_extent(renderer)
    lo, hi = np.array([box.x0, box.y0]) * px, np.array([box.x1, box.y1]) * px
    placed = []
    t = np.linspace(0.12, 0.88, 39)
    for a, b, rad, label in sorted(edges, key=lambda e: np.hypot(*(e[1] - e[0]))):
        bb = label.get_window_extent(renderer)
        w, h = bb.width * px + 2, bb.height * px + 2
        pts = _arc(a, b, rad, t)
        gap = np.min(_box_gap(pts[:, None, :], w, h, centres[None, :, :]), axis=1) - r
        for p, pw, ph in placed:
            sep = np.maximum(np.abs(pts[:, 0] - p[0]) - (w + pw) / 2, np.abs(pts[:, 1] - p[1]) - (h + ph) / 2)
            gap = np.minimum(gap, sep)
        inside = np.all((pts - [w / 2, h / 2] >= lo) & (pts + [w / 2, h / 2] <= hi), axis=1)
        gap = np.where(inside, gap, -np.inf)
        clear = gap >= margin
        k = int(np.argmin(np.abs(t - 0.5) + np.where(clear, 0, np.inf))) if clear.any() else int(np.argmax(gap))
        label.set_position(ax.transData.inverted().transform(pts[k] / px))
        placed.append((pts[k], w, h))
    return ax
