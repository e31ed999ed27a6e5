"""The figure of ``ctmhsa bench theories`` (Granier & Senn vs Co4 on the same cells, digits or recall),
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


def _what(doc: dict) -> str:
    """The inputs read: test digits, or recall questions (``--task recall``)."""
    if doc.get("task", "digits") == "recall":
        return f"{doc['sequences']} recall questions of {doc['pairs']} facts"
    return f"{doc['images']} test digits"


def draw_theories(doc: dict):
    """The figure (a Matplotlib figure) of the JSON ``doc``: (a) accuracy per circuit in spikes
    (bars) and of its float model (dashes), labelled with the agreement; (b) spikes and wall
    time per input (image or question), per circuit."""
    rows = doc["rows"]
    unit = doc.get("unit", "image")
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
    if doc.get("majority") is not None:     # recall: naming the commonest value among the facts
        a.axhline(doc["majority"], color="0.5", ls=":", lw=1.0, label="commonest value among the facts")
    lo = min([min(r["accuracy"], r["float_accuracy"]) for r in rows] + [doc.get("majority") or 1.0])
    bottom = max(0.0, lo - 0.1)
    a.set_ylim(bottom, 1.02 + 0.2 * (1.0 - bottom))          # room for the labels above a full bar
    a.set_xticks(x, [_label(r) for r in rows], fontsize=7, rotation=30, ha="right")
    a.set_ylabel("held-out accuracy")
    a.set_title(f"(a) {_what(doc)} at the escape level", fontsize=9)
    low = min(r["accuracy"] for r in rows) < 0.6          # short bars: the legend above them
    a.legend(fontsize=7, loc="center right" if low else "lower right")
    spikes = [r["spikes_per_input"] / 1e3 for r in rows]
    b.bar(x - 0.18, spikes, width=0.36, color=[COLOURS.get(r["theory"], "0.5") for r in rows], alpha=0.85,
          label=f"spikes per {unit} (thousands)")
    t = b.twinx()
    t.bar(x + 0.18, [r["wall_per_input"] for r in rows], width=0.36, color="0.7", label=f"wall time per {unit} (s)")
    b.set_xticks(x, [_label(r) for r in rows], fontsize=7, rotation=30, ha="right")
    b.set_ylim(0, 1.4 * max(spikes))                                  # room for the legend above the bars
    t.set_ylim(0, 1.4 * max(r["wall_per_input"] for r in rows))
    b.set_ylabel(f"spikes per {unit} (thousands)")
    t.set_ylabel(f"wall time per {unit} (s)")
    b.set_title(f"(b) cost per {unit}", fontsize=9)
    handles = b.get_legend_handles_labels()[0] + t.get_legend_handles_labels()[0]
    b.legend(handles, [h.get_label() for h in handles], fontsize=7, loc="upper left")
    return fig


def _caption(doc: dict) -> str:
    times = " or ".join(f"{p:g}" for p in doc["presentations"])
    if doc.get("task", "digits") == "recall":
        return (f"Two theories of cortical attention on the same cells (escape level) and the same task: in-context "
                f"recall asked once, {doc['sequences']} held-out questions of {doc['pairs']} facts (a key and its "
                f"value per token) and one query. Granier & Senn: the shipped memory model (recall, keys and "
                f"values held by its memory cells), the facts and the query streamed for {times} s each and read at "
                f"the query; Co4: the shipped recall_co4 "
                f"(cooperation-cell triad over four latent queries, then a memory of keys and values), the facts and "
                f"the query presented as one token set for {times} s. (a) Accuracy in spikes (bars) and of the float "
                f"model (dashes); agreement with the float model's answers. (b) Spikes of every cell and wall time per "
                f"question (the memory circuit is built anew for each question). P: cells per value"
                + ("; the Co4 row at the smaller P has the neuron count nearest the memory circuit's."
                   if len({r["P"] for r in doc["rows"] if r["theory"] == "Co4"}) > 1 else "."))
    return (f"Two theories of cortical attention on the same cells (escape level, the digits circuit's cells) and "
            f"the same task: the shipped digits models of Granier & Senn (microcolumns, one block with an MLP) and "
            f"of Co4 (cooperation-cell triad over four latent queries, then a memory of keys and values), each circuit built "
            f"for the training images, reading the first {doc['images']} held-out test images for "
            f"{times} s each. (a) Accuracy in spikes (bars) and of the float model (dashes); "
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
