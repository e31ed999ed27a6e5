"""Shared figure conventions: the paper's colour code, type sizes, saving PNG + PDF + caption.

Every figure is saved at :data:`DPI` dots per inch with no text smaller than :data:`MIN_FONT`
points (set here for matplotlib as a whole; :func:`check_fonts` verifies a figure before it is
saved) and legends inside the axes, clear of the data (:func:`clear_legend`).
"""

from __future__ import annotations

import json
import os

__all__ = ["read_json_numbers", "PROJECTION_COLOURS", "POP_COLOURS", "save", "plt", "DPI", "MIN_FONT", "check_fonts",
           "QUICK_MARK", "mark_quick", "clear_legend"]

DPI = 300
"""Resolution of every PNG (dots per inch)."""

MIN_FONT = 7.0
"""Smallest type size (points) of any text in a figure."""

QUICK_MARK = "QUICK (smoke-test data: short windows, small sizes)"
"""Label of figures drawn from ``ctmhsa figures --quick`` data, in the title and the caption."""

# paper: green W_Q (core thalamus -> queries), red W_K / W_V (matrix thalamus -> keys, values),
# blue W_O (L5 PT -> higher-order thalamus), purple normalisation (interneurons)
PROJECTION_COLOURS = {"core_q": "#33a02c", "matrix_k": "#e31a1c", "matrix_v": "#e31a1c",
                      "pool": "#6a3d9a", "shunt": "#6a3d9a", "attention": "#ff7f00",
                      "it_pt": "#525252", "pt_out": "#1f78b4"}
POP_COLOURS = {"nucleus1": "#b2df8a", "nucleus1_kv": "#fb9a99", "nucleus1_v": "#e31a1c", "l23": "#fdbf6f", "interneuron": "#cab2d6",
               "l5it": "#a6cee3", "l5pt": "#1f78b4", "nucleus2": "#8dd3c7",
               "outer": "#fdbf6f", "outer_z": "#ffe0a0", "memory": "#b15928", "memory_z": "#d9a27a",
               "readout": "#a6cee3", "readout_z": "#cfe5f2"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    pyplot.rcParams.update({
        "font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "xtick.labelsize": 7,
        "ytick.labelsize": 7, "legend.fontsize": 7, "legend.title_fontsize": 7, "figure.titlesize": 9,
        "savefig.dpi": DPI, "figure.dpi": 100,
    })
    return pyplot


plt = _pyplot()


def check_fonts(fig, minimum: float = MIN_FONT) -> None:
    """Raise ``ValueError`` if any visible text of ``fig`` is smaller than ``minimum`` points."""
    small = sorted({(round(t.get_fontsize(), 2), t.get_text()[:40]) for t in fig.findobj(
        lambda o: hasattr(o, "get_fontsize") and hasattr(o, "get_text"))
        if t.get_visible() and t.get_text().strip() and t.get_fontsize() < minimum - 1e-9})
    if small:
        raise ValueError(f"figure: text below {minimum} pt: {small[:6]}")


def _marks(ax, renderer):
    """What an axes shows, in display coordinates: points (each line densely sampled, its markers,
    scatter points) with their half-size in pixels, and boxes (bars and other patches, texts)."""
    import numpy as np

    points, boxes = [], []
    scale = ax.figure.dpi / 72
    for line in ax.get_lines():
        xy = np.asarray(line.get_xydata(), float)
        if not line.get_visible() or not len(xy):
            continue
        xy = line.get_transform().transform(xy)
        xy = xy[np.all(np.isfinite(xy), axis=1)]
        if not len(xy):
            continue
        marked = line.get_marker() not in (None, "", "None", " ")
        half = max(line.get_linewidth(), line.get_markersize() if marked else 0)
        if line.get_linestyle() not in ("None", "", " ", "none") and len(xy) > 1:
            seg = [np.linspace(a, b, max(2, int(np.hypot(*(b - a))) + 1)) for a, b in zip(xy[:-1], xy[1:])]
            xy = np.concatenate(seg + [xy])
        points.append((xy, half / 2 * scale))
    for coll in ax.collections:
        offs = np.asarray(coll.get_offsets(), float)
        if coll.get_visible() and len(offs):
            sizes = coll.get_sizes() if hasattr(coll, "get_sizes") else []
            half = np.sqrt(max(sizes)) / 2 if len(sizes) else 3.0
            points.append((coll.get_offset_transform().transform(offs), half * scale))
    for patch in ax.patches:
        if patch.get_visible():
            boxes.append(patch.get_window_extent(renderer))
    for text in ax.texts:
        if text.get_visible() and text.get_text().strip():
            boxes.append(text.get_window_extent(renderer))
    return points, boxes


def clear_legend(ax, pad: float = 3.0, grow: float = 0.12, tries: int = 12, **kwargs):
    """Draw ``ax``'s legend inside the axes where it hides none of its lines, markers, bars or
    texts (with ``pad`` points to spare): matplotlib's ``best`` place if that is clear, else the
    corners and edges (one column, then two), else the first clear place on a grid; where none is,
    the y axis is extended upwards by ``grow`` of its span (of its decades on a log axis) and the
    search repeated. ``kwargs`` go to :meth:`matplotlib.axes.Axes.legend`. Returns the legend."""
    import numpy as np

    fig = ax.figure
    kwargs.setdefault("fontsize", 7)
    ncol0 = kwargs.pop("ncols", kwargs.pop("ncol", 1))
    spots = [dict(loc="best", ncols=ncol0)] + [
        dict(loc=loc, ncols=n) for n in dict.fromkeys((ncol0, 2))
        for loc in ("upper left", "upper right", "lower left", "lower right", "center left", "center right",
                    "upper center", "lower center", "center")]

    def clear(leg, renderer, points, boxes):
        bb = leg.get_window_extent(renderer)
        box = ax.get_window_extent(renderer)
        if bb.x0 < box.x0 - 1 or bb.x1 > box.x1 + 1 or bb.y0 < box.y0 - 1 or bb.y1 > box.y1 + 1:
            return False
        p = pad * fig.dpi / 72
        for xy, half in points:
            m = p + half
            if np.any((xy[:, 0] > bb.x0 - m) & (xy[:, 0] < bb.x1 + m)
                      & (xy[:, 1] > bb.y0 - m) & (xy[:, 1] < bb.y1 + m)):
                return False
        return not any(b.x1 > bb.x0 - p and b.x0 < bb.x1 + p and b.y1 > bb.y0 - p and b.y0 < bb.y1 + p for b in boxes)

    for _ in range(tries):
        fig.draw_without_rendering()
        renderer = fig.canvas.get_renderer()
        points, boxes = _marks(ax, renderer)
        for spot in spots:
            leg = ax.legend(**{**kwargs, **spot})
            if clear(leg, renderer, points, boxes):
                return leg
        # a grid of places, top rows first, for the legend of one column
        leg = ax.legend(**{**kwargs, "ncols": ncol0})
        bb, box = leg.get_window_extent(renderer), ax.get_window_extent(renderer)
        w, h = bb.width / box.width, bb.height / box.height
        for y0 in np.linspace(1 - h - 0.02, 0.02, 25):
            for x0 in np.linspace(0.02, max(0.02, 1 - w - 0.02), 13):
                leg = ax.legend(**{**kwargs, "ncols": ncol0, "loc": "lower left", "bbox_to_anchor": (x0, y0),
                                   "borderaxespad": 0})
                if clear(leg, renderer, points, boxes):
                    return leg
        lo, hi = ax.get_ylim()
        if ax.get_yscale() == "log":
            ax.set_ylim(lo, hi * (hi / lo) ** grow)
        else:
            ax.set_ylim(lo, hi + (hi - lo) * grow)
    return ax.legend(**{**kwargs, "ncols": ncol0})


def mark_quick(fig, quick: bool) -> None:
    """Mark a figure drawn from quick data in its title (the figure's suptitle, in red, above
    any title it had)."""
    if quick:
        old = fig.get_suptitle()
        fig.suptitle(QUICK_MARK + (f"\n{old}" if old else ""), color="#b2182b", fontsize=9)


def save(fig, out_dir: str, name: str, caption: str, quick: bool = False) -> list[str]:
    """Write ``name.png`` (at :data:`DPI`), ``name.pdf`` and ``name.txt`` (the caption) into
    ``out_dir``; a figure of quick data is marked in its title and its caption."""
    os.makedirs(out_dir, exist_ok=True)
    mark_quick(fig, quick)
    check_fonts(fig)
    if quick:
        caption = f"{QUICK_MARK}. " + caption
    paths = []
    for ext in ("png", "pdf"):
        p = os.path.join(out_dir, f"{name}.{ext}")
        fig.savefig(p, dpi=DPI)
        paths.append(p)
    with open(os.path.join(out_dir, f"{name}.txt"), "w") as fh:
        fh.write(caption.strip() + "\n")
    plt.close(fig)
    return paths


def read_json_numbers(path: str):
    """A results JSON file (metrics.json, provenance.json) with ``null`` read as NaN: the files
    are strict JSON, where an undefined number (r of a constant stage, an unknown floor) is
    ``null``, and the figures plot it as a gap."""
    with open(path) as fh:
        return json.load(fh, object_hook=lambda d: {k: float("nan") if v is None else v for k, v in d.items()})


def draw_from_json(json_path: str, png: str | None, figure, caption) -> str:
    """A benchmark's figure from its JSON alone: ``figure(doc)`` saved with ``caption(doc)`` into
    ``png`` (default: beside the JSON, same name with ``.png``; with a PDF and the caption), quick
    data marked (:func:`save`). Returns the PNG's path."""
    png = png or os.path.splitext(json_path)[0] + ".png"
    doc = read_json_numbers(json_path)
    return save(figure(doc), os.path.dirname(os.path.abspath(png)), os.path.splitext(os.path.basename(png))[0],
                caption(doc), quick=bool(doc.get("quick")))[0]
