"""The figure of ``ctmhsa bench digits`` (handwritten digits read by the shipped vision
transformer's circuit), drawn from its JSON only: the benchmark
(:mod:`ctmhsa.sims.benchmarks.digits`) writes the data, the command line draws this after it.

:func:`draw_digits` draws the figure from the JSON (as a dict); :func:`draw` reads the JSON and
saves the figure (PNG, PDF and caption) beside it.

Usage::

    python -m ctmhsa.figures.digits JSON [OUT.png]
"""

from __future__ import annotations

import os
import sys

import numpy as np

from ctmhsa.neurons.levels import get_level

from .style import QUICK_MARK, mark_quick, plt, read_json_numbers, save

__all__ = ["draw_digits", "draw", "EXAMPLE_PRESENTATION", "LEVEL_COLOURS"]

EXAMPLE_PRESENTATION = 0.2
"""Presentation time (s) of the escape row whose examples and confusion matrix are drawn (the
closest one the JSON has)."""

LEVEL_COLOURS = {"escape": "#d95f02", "lif": "#33a02c", "rate": "#1f78b4", "float": "0.35"}
"""Colour of each level (and of the float model)."""

ACC_MS, AGREE_MS = 4.5, 9.0
"""Marker sizes (points) in (a): accuracy a filled dot, agreement with the float model an unfilled
ring drawn above it and wide enough to leave a gap around the dot where the two coincide."""

RIGHT, WRONG = "#1a9641", "#d7191c"
"""Colours of a right and a wrong prediction in the examples' titles."""


def _num(v) -> float:
    return float("nan") if v is None else float(v)


def _ms(p) -> str:
    """A presentation time (s) in ms for a label."""
    return f"{1e3 * _num(p):.0f}"


def _wall(s) -> str:
    s = _num(s)
    if not np.isfinite(s):
        return "—"
    return f"{s:.2f} s" if s < 1 else (f"{s:.1f} s" if s < 10 else f"{s:.0f} s")


def _example_row(doc):
    """The escape row drawn in (b) and (c): the one closest to :data:`EXAMPLE_PRESENTATION` (on a
    log scale); the first row where there is no escape row."""
    escape = [r for r in doc["rows"] if get_level(r["neuron"]).spiking]
    if not escape:
        return doc["rows"][0]
    return min(escape, key=lambda r: abs(np.log(_num(r["presentation"]) / EXAMPLE_PRESENTATION)))


def _accuracy_panel(ax, doc) -> None:
    """(a) Accuracy (solid, filled dots) and agreement with the float model (dashed, unfilled
    rings drawn above the dots) vs presentation time; the float model's accuracy a horizontal
    line; the rate level one marker pair; the wall time per image under each point."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, FormatStrFormatter, NullLocator

    rows = doc["rows"]
    escape = sorted((r for r in rows if get_level(r["neuron"]).spiking), key=lambda r: _num(r["presentation"]))
    rate = [r for r in rows if not get_level(r["neuron"]).spiking]
    fa = _num(doc.get("float_accuracy"))
    spiking = "/".join(sorted({r["neuron"] for r in escape})) or "escape"   # the spiking level(s) drawn
    c = LEVEL_COLOURS.get(spiking, LEVEL_COLOURS["escape"])
    handles = []
    if escape:
        x = [1e3 * _num(r["presentation"]) for r in escape]
        # accuracy a small filled dot with a white rim, agreement an unfilled ring drawn above it:
        # where the two meet the ring stays visible around the dot, a gap between them
        ax.plot(x, [100 * _num(r["accuracy"]) for r in escape], "-o", color=c, ms=ACC_MS, lw=1.4, mec="white",
                mew=0.8, zorder=3)
        ax.plot(x, [100 * _num(r["agreement"]) for r in escape], "--o", color=c, ms=AGREE_MS, lw=1.1, mfc="none",
                mew=1.2, zorder=4)
        handles.append(Line2D([], [], color=c, lw=1.4, marker="o", ms=ACC_MS, label=f"{spiking} level"))
    at = {1e3 * _num(r["presentation"]) for r in escape}
    for r in rate:
        cr = LEVEL_COLOURS["rate"]
        x = 1e3 * _num(r["presentation"])
        x *= 1.14 if x in at else 1.0       # beside an escape point at the same presentation, not on it
        ax.plot([x], [100 * _num(r["accuracy"])], "s", color=cr, ms=ACC_MS, mec="white", mew=0.8, zorder=3)
        ax.plot([x], [100 * _num(r["agreement"])], "s", color=cr, ms=AGREE_MS + 1, mfc="none", mew=1.2, zorder=4)
        handles.append(Line2D([], [], color=cr, ls="none", marker="s", ms=ACC_MS + 1,
                              label=f"rate level ({_wall(r['wall_per_input'])} / image)"))
    if np.isfinite(fa):
        ax.axhline(100 * fa, color=LEVEL_COLOURS["float"], lw=1.0, ls=":", zorder=1)
        handles.append(Line2D([], [], color=LEVEL_COLOURS["float"], lw=1.0, ls=":",
                              label=f"float model ({100 * fa:.1f} %)"))
    handles += [Line2D([], [], color="k", lw=1.3, marker="o", ms=ACC_MS, label="accuracy"),
                Line2D([], [], color="k", lw=1.0, ls="--", marker="o", ms=AGREE_MS, mfc="none",
                       label="agreement with float")]
    ticks = sorted({1e3 * _num(r["presentation"]) for r in rows})
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.xaxis.set_minor_locator(NullLocator())
    lo, hi = min(ticks), max(ticks)
    ax.set_xlim(lo / 1.45, hi * 1.45)
    ys = [100 * _num(r[k]) for r in rows for k in ("accuracy", "agreement")] + [100 * fa]
    ys = [y for y in ys if np.isfinite(y)] or [0.0, 100.0]
    ymin = max(0.0, min(ys) - 0.1 * (100 - min(ys)) - 2)
    # room below the points for the wall times and above them for the legend
    span = 100 - ymin
    ax.set_ylim(ymin - 0.3 * span, 100 + 0.5 * span)
    ax.set_yticks([t for t in ax.get_yticks() if ymin - 1e-9 <= t <= 100 + 1e-9])
    ax.axhline(100, color="0.85", lw=0.6, zorder=0)
    ax.set_xlabel("presentation time per image (ms)")
    ax.set_ylabel("% of test images")
    for r in escape:   # the wall time per image under each escape point
        ax.annotate(_wall(r["wall_per_input"]), (1e3 * _num(r["presentation"]), 0.04),
                    xycoords=("data", "axes fraction"),
                    ha="center", va="bottom", fontsize=7, color=c)
    if escape:
        ax.text(0.02, 0.115, f"{spiking} wall time / image (compiling apart):", transform=ax.transAxes, ha="left",
                va="bottom", fontsize=7, color=c)
    ax.legend(handles=handles, loc="upper left", ncol=2, fontsize=7, frameon=False, handlelength=2.0,
              columnspacing=0.8, borderaxespad=0.3)
    neurons = sorted({int(_num(r["neurons"])) for r in rows if np.isfinite(_num(r["neurons"]))})
    if len(neurons) == 1:
        size = f"one circuit of {neurons[0]:,} neurons"
    else:
        per_level = {}              # each level once (its rows share a circuit size unless P differs)
        for r in rows:
            if np.isfinite(_num(r["neurons"])):
                per_level.setdefault(r["neuron"], set()).add(int(_num(r["neurons"])))
        size = ", ".join(f"{level} " + "/".join(f"{k:,}" for k in sorted(ks)) for level, ks in per_level.items())
        size += " neurons"
    ax.set_title(f"(a) accuracy vs presentation time\n{size}")


def _examples_panel(fig, spec, row) -> list:
    """(b) The row's example images (gray), each beside its spiking class scores (bars) and float
    scores (dots), titled with its label and the two predictions (green right, red wrong).
    Returns the bar axes."""
    from matplotlib.ticker import FormatStrFormatter, MaxNLocator

    examples = row.get("examples") or []
    n = len(examples)
    cols = 4
    lines = max(1, -(-n // cols))
    outer = spec.subgridspec(lines, cols, wspace=0.12, hspace=0.5)
    c = LEVEL_COLOURS[row["neuron"]] if row["neuron"] in LEVEL_COLOURS else "0.5"
    scores = [np.concatenate([np.asarray(e["scores"], float), np.asarray(e["float_scores"], float)]) for e in examples]
    allv = np.concatenate(scores) if scores else np.zeros(1)
    allv = allv[np.isfinite(allv)] if np.isfinite(allv).any() else np.zeros(1)
    lo, hi = min(0.0, allv.min()), max(0.0, allv.max())
    pad = 0.08 * (hi - lo or 1.0)
    ok = {True: RIGHT, False: WRONG}
    bars = []
    for i, e in enumerate(examples):
        cell = outer[i // cols, i % cols].subgridspec(1, 2, width_ratios=(1.0, 1.6), wspace=0.02)
        im = fig.add_subplot(cell[0])
        im.imshow(np.asarray(e["image"], float), cmap="gray_r", vmin=0, vmax=1, interpolation="nearest")
        im.set_xticks([])
        im.set_yticks([])
        label, pred, fpred = int(e["label"]), int(e["prediction"]), int(e["float_prediction"])
        im.set_anchor("NE")               # top-right of its cell: beside its bars, level with their top
        im.annotate(f"#{int(e['index'])}, label {label}", (0, 1), xycoords="axes fraction", xytext=(0, 13),
                    textcoords="offset points", ha="left", va="bottom", fontsize=7)
        im.annotate(f"spiking {pred}", (0, 1), xycoords="axes fraction", xytext=(0, 3), textcoords="offset points",
                    ha="left", va="bottom", fontsize=7, color=ok[pred == label], fontweight="bold")
        bx = fig.add_subplot(cell[1])
        k = np.arange(len(e["scores"]))
        s = np.asarray(e["scores"], float)
        f = np.asarray(e["float_scores"], float)
        bx.bar(k, np.nan_to_num(s), width=0.75, color=c, alpha=0.75, zorder=2)
        bx.plot(k, f, "o", color="k", ms=2.6, zorder=3)
        bx.axhline(0, color="0.5", lw=0.5, zorder=1)
        bx.set_ylim(lo - pad, hi + pad)
        bx.set_xlim(-0.7, len(k) - 0.3)
        bx.set_xticks(k)
        bx.set_xticklabels([str(j) for j in k], fontsize=7)
        bx.tick_params(axis="x", length=1.5, pad=1)
        bx.tick_params(axis="y", length=1.5, pad=1)
        bx.yaxis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 5, 10]))
        bx.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        bx.annotate(f"float {fpred}", (0, 1), xycoords="axes fraction", xytext=(2, 3), textcoords="offset points",
                    ha="left", va="bottom", fontsize=7, color=ok[fpred == label], fontweight="bold")
        bx.get_xticklabels()[label].set_fontweight("bold")      # the label's class
        bars.append(bx)
    return bars


def _confusion_panel(ax, row) -> None:
    """(c) The row's confusion matrix: rows the label, columns the spiking prediction, counts written."""
    m = np.asarray(row["confusion"], float)
    k = m.shape[0]
    ax.imshow(m, cmap="Blues", vmin=0, vmax=max(m.max(), 1), interpolation="nearest")
    top = max(m.max(), 1)
    for i in range(k):
        for j in range(k):
            if m[i, j] > 0:
                ax.text(j, i, f"{int(m[i, j])}", ha="center", va="center", fontsize=7,
                        color="white" if m[i, j] > 0.55 * top else ("k" if i == j else WRONG))
    ax.set_xticks(range(k))
    ax.set_yticks(range(k))
    ax.tick_params(length=1.5, pad=1.5)
    ax.set_xlabel("spiking prediction")
    ax.set_ylabel("label")
    ax.set_title(f"(c) confusion, {row['neuron']} level, {_ms(row['presentation'])} ms\n"
                 f"accuracy {100 * _num(row['accuracy']):.1f} % of {int(_num(row['inputs']))} images")


def draw_digits(doc: dict, fig=None):
    """The figure of ``ctmhsa bench digits`` from its JSON (as a dict).

    (a) Accuracy (solid, dots) and agreement with the float model (dashed, rings drawn above the
    dots) vs presentation time at the escape level, the rate level as a square pair at its
    presentation (nudged right of an escape point there), the float model's accuracy a dotted
    line; the circuit's neurons in the title, the wall time per image under each escape point.
    (b) The example images of the escape row closest to :data:`EXAMPLE_PRESENTATION`, each beside
    its spiking class scores (bars) and the float model's (dots), titled with its label and both
    predictions (green right, red wrong). (c) That row's confusion matrix. Quick data are marked in
    the title. Returns the figure."""
    if fig is None:
        fig = plt.figure(figsize=(7.4, 7.2), constrained_layout=True)
    row = _example_row(doc)
    upper, lower = fig.subfigures(2, 1, height_ratios=(1.08, 1.0))
    ax, cx = upper.subplots(1, 2, gridspec_kw=dict(width_ratios=(1.35, 1.0)))
    _accuracy_panel(ax, doc)
    _confusion_panel(cx, row)
    _examples_panel(lower, lower.add_gridspec(1, 1)[0], row)
    lower.suptitle(f"(b) the first {len(row.get('examples') or [])} test images, {row['neuron']} level, "
                   f"{_ms(row['presentation'])} ms: class scores in spikes (bars) and of the float model (dots)",
                   fontsize=8)
    fa = _num(doc.get("float_accuracy"))
    P = _num(doc.get("P"))
    fig.suptitle(f"Handwritten digits read in spikes: model \"{doc.get('model', '?')}\", {int(_num(doc['images']))} "
                 f"test images, float accuracy {100 * fa:.1f} %" + (f", P = {int(P)}" if np.isfinite(P) else ""))
    mark_quick(fig, bool(doc.get("quick")))
    return fig


def _caption(doc) -> str:
    row = _example_row(doc)
    fa = _num(doc.get("float_accuracy"))
    return (f"Handwritten digits (scikit-learn's 8x8 digits) read by the vision transformer "
            f"\"{doc.get('model', '?')}\" computed in spikes: {int(_num(doc['images']))} held-out test images "
            "streamed one after another through one built circuit per level and presentation time; each "
            "image's class is the largest class score decoded from the read-out's class cells in its window "
            f"(float model: {100 * fa:.1f} % correct). (a) Accuracy (solid, filled dots) and agreement with "
            "the float model's predictions (dashed, open rings drawn over the dots) vs presentation time at "
            "the spiking level, the rate level as squares (just right of a spiking point at the same "
            "presentation), the float model's accuracy dotted; the wall time per image (building included, "
            "compiling apart) under each spiking point. (b) The first "
            f"{len(row.get('examples') or [])} test images ({row['neuron']} level, "
            f"{_ms(row['presentation'])} ms), each with its spiking class scores (bars) and the float model's "
            "(dots); above, the label and the spiking and float predictions (green right, red wrong), the "
            "label's class in bold under the bars. (c) That row's confusion matrix (rows: label, columns: "
            "spiking prediction).")


def draw(json_path: str, png: str | None = None) -> str:
    """Draw the figure of ``ctmhsa bench digits`` from its JSON ``json_path`` into ``png``
    (default: beside the JSON, same name with ``.png``; with a PDF and a caption). Returns the
    PNG's path."""
    png = png or os.path.splitext(json_path)[0] + ".png"
    out_dir, stem = os.path.dirname(os.path.abspath(png)), os.path.splitext(os.path.basename(png))[0]
    doc = read_json_numbers(json_path)
    fig = draw_digits(doc)
    caption = (f"{QUICK_MARK}. " if doc.get("quick") else "") + _caption(doc)
    paths = save(fig, out_dir, stem, caption)
    return paths[0]


if __name__ == "__main__":  # pragma: no cover
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: python -m ctmhsa.figures.digits JSON [OUT.png]  (redraws the digits figure)")
    print(draw(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
