"""The figure of ``ctmhsa bench theories`` (Granier & Senn vs Co4 on the same cells and digits),
drawn from its JSON only: the benchmark (:mod:`ctmhsa.sims.benchmarks.theories`) writes the data,
the command line draws this after it.

Usage::

    python -m ctmhsa.figures.theories JSON [OUT.png]
"""

from __future__ import annotations

import sys

import numpy as np

from .style import draw_from_json, plt

__all__ = ["draw_theories", "draw", "COLOURS"]

COLOURS = {"Granier & Senn": "tab:blue", "Co4": "tab:orange"}
"""One colour per theory."""


def _label(r: dict) -> str:
    return f"{r['theory']}, {r['presentation']:g} s\nP = {r['P']:g}, {r['neurons'] / 1e3:.1f} k cells"


def draw_theories(doc: dict):
    """The figure (a Matplotlib figure) of the JSON ``doc``: (a) accuracy per circuit in spikes
    (bars) and of its float model (dashes), labelled with the agreement; (b) spikes and wall
    time per image, per circuit."""
    rows = doc["rows"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9.0, 3.8), constrained_layout=True)
    x = np.arange(len(rows))
    for i, r in enumerate(rows):
        c = COLOURS.get(r["theory"], "0.5")
        a.bar(i, r["accuracy"], width=0.6, color=c, alpha=0.85)
        a.hlines(r["float_accuracy"], i - 0.36, i + 0.36, colors="0.2", linestyles="--", lw=1.2,
                 label="float model" if i == 0 else None)
        top = max(r["accuracy"], r["float_accuracy"])          # above the bar and its float dash
        a.text(i, top + 0.004, f"{100 * r['accuracy']:.1f} %\nagree {100 * r['agreement']:.0f} %",
               ha="center", va="bottom", fontsize=7)
    lo = min(min(r["accuracy"], r["float_accuracy"]) for r in rows)
    a.set_ylim(max(0.0, lo - 0.1), 1.07)
    a.set_xticks(x, [_label(r) for r in rows], fontsize=7, rotation=30, ha="right")
    a.set_ylabel("test accuracy")
    a.set_title(f"(a) {doc['images']} test digits at the escape level", fontsize=9)
    a.legend(fontsize=7, loc="lower right")
    spikes = [r["spikes_per_input"] / 1e3 for r in rows]
    b.bar(x - 0.18, spikes, width=0.36, color=[COLOURS.get(r["theory"], "0.5") for r in rows], alpha=0.85,
          label="spikes per image (thousands)")
    t = b.twinx()
    t.bar(x + 0.18, [r["wall_per_input"] for r in rows], width=0.36, color="0.7", label="wall time per image (s)")
    b.set_xticks(x, [_label(r) for r in rows], fontsize=7, rotation=30, ha="right")
    b.set_ylim(0, 1.4 * max(spikes))                                  # room for the legend above the bars
    t.set_ylim(0, 1.4 * max(r["wall_per_input"] for r in rows))
    b.set_ylabel("spikes per image (thousands)")
    t.set_ylabel("wall time per image (s)")
    b.set_title("(b) cost per image", fontsize=9)
    handles = b.get_legend_handles_labels()[0] + t.get_legend_handles_labels()[0]
    b.legend(handles, [h.get_label() for h in handles], fontsize=7, loc="upper left")
    return fig


def _caption(doc: dict) -> str:
    return (f"Two theories of cortical attention on the same cells (escape level, the digits circuit's cells) and "
            f"the same task: the shipped digits models of Granier & Senn (microcolumns, one block with an MLP) and "
            f"of Co4 (cooperation-cell triad over four latent queries, then a memory of keys and values), each circuit built "
            f"for the training images, reading the first {doc['images']} held-out test images for "
            f"{' or '.join(f'{p:g}' for p in doc['presentations'])} s each. (a) Accuracy in spikes (bars) and of the float model (dashes); "
            f"agreement with the float model's predictions. (b) Spikes of every cell and wall time per image. "
            f"P: cells per value; the Co4 circuit at the larger P has about the transformer's neuron count.")


def draw(json_path: str, png: str | None = None) -> str:
    """Draw the figure of ``ctmhsa bench theories`` from its JSON ``json_path`` into ``png``
    (default: beside the JSON, same name with ``.png``; with a PDF and a caption). Returns the
    PNG's path."""
    return draw_from_json(json_path, png, draw_theories, _caption)


if __name__ == "__main__":  # pragma: no cover
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: python -m ctmhsa.figures.theories JSON [OUT.png]  (redraws the theories figure)")
    print(draw(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
