"""The figure of ``ctmhsa bench language`` (the shipped causal models read in spikes), drawn from
its JSON only: the benchmark (:mod:`ctmhsa.sims.benchmarks.language`) writes the data, the
command line draws this after it.

Usage::

    python -m ctmhsa.figures.language JSON [OUT.png]
"""

from __future__ import annotations

import sys

import numpy as np

from .style import draw_from_json, plt

__all__ = ["draw_language", "draw", "LEVEL_MAPS"]

LEVEL_MAPS = {"rate": "Blues", "escape": "Oranges"}
"""Colour map of each spiking level: one shade per presentation time, darker for longer ones."""

FLOAT = "0.3"
"""Colour of the float model (the reference)."""


def _shades(doc: dict) -> dict:
    """``(level, presentation) -> colour`` for the spiking levels' rows."""
    ps = sorted(doc["presentations"])
    out = {}
    for level, name in LEVEL_MAPS.items():
        cmap = plt.get_cmap(name)
        for i, p in enumerate(ps):
            out[level, p] = cmap(0.45 + 0.5 * (i / max(1, len(ps) - 1)))
    return out


def draw_language(doc: dict):
    """The figure (a Matplotlib figure) of the JSON ``doc``: (a) recall accuracy vs pairs per
    level and presentation, the float model dashed; (b) bits per character per presentation and
    level (bars, labelled with the ratio to float), the float model's dashed, uniform guessing dotted."""
    shade = _shades(doc)
    fig, (a, b) = plt.subplots(1, 2, figsize=(7.4, 3.9), constrained_layout=True)
    col = {k: i for i, k in enumerate(doc["pairs"])}   # one column per number of facts
    series = [(lv, p) for lv in doc["levels"] if lv != "float" for p in doc["presentations"]]
    for level in doc["levels"]:
        rows = [r for r in doc["recall"] if r["level"] == level]
        for p in ([None] if level == "float" else doc["presentations"]):
            pts = sorted((col[r["pairs"]], r["accuracy"]) for r in rows if level == "float" or r["presentation"] == p)
            if not pts:
                continue
            x, y = map(np.array, zip(*pts))
            if level == "float":
                a.plot(x, y, ls="--", marker="s", ms=4, mfc="none", lw=1.2, color=FLOAT, label="float", zorder=3)
            else:   # side by side within a column: equal accuracies stay visible
                dx = 0.07 * (series.index((level, p)) - (len(series) - 1) / 2)
                a.plot(x + dx, y, marker="o", ms=3.5, lw=1.1, color=shade[level, p], label=f"{level}, {p:g} s")
    chance = 1.0 / doc["recall_values"]
    a.axhline(chance, color="0.6", lw=0.8, ls=":", zorder=0)
    a.text(len(col) - 1, chance + 0.015, f"chance (1/{doc['recall_values']})", fontsize=7, color="0.45", ha="right")
    a.set_xticks(range(len(col)), [str(k) for k in doc["pairs"]])
    a.set_xlim(-0.5, len(col) - 0.5)
    a.set_ylim(0, 1.08)
    a.set_xlabel("facts per sequence (queries = facts)")
    a.set_ylabel("recall accuracy")
    a.set_title(f"(a) in-context recall, {doc['sequences']} seq. per point", fontsize=9)
    a.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3)

    spiking = [lv for lv in doc["levels"] if lv != "float"]
    chars = doc["characters"]
    width = 0.8 / max(1, len(spiking))
    for j, level in enumerate(spiking):
        for i, p in enumerate(doc["presentations"]):
            r = next((r for r in chars if r["level"] == level and r["presentation"] == p), None)
            if r is None:
                continue
            x = i + (j - (len(spiking) - 1) / 2) * width
            b.bar(x, r["bpc"], width * 0.9, color=shade[level, p], edgecolor="0.2", lw=0.5,
                  label=level if i == len(doc["presentations"]) - 1 else None)
            pct = round(r["ratio_pct"])
            label = f"{pct:+d}%" if pct else "0%"
            if r.get("windows", doc["windows"]) < doc["windows"]:   # windows the circuit refused, left out
                label += f"\n{r['windows']:g} of {doc['windows']:g} windows"
            b.text(x, r["bpc"] + 0.05, label, ha="center", va="bottom", fontsize=7)
    uniform = np.log2(doc["vocabulary"])
    if chars:
        b.axhline(chars[0]["float_bpc"], color=FLOAT, ls="--", lw=1.2, label=f"float {chars[0]['float_bpc']:.2f}")
    b.axhline(uniform, color="0.6", ls=":", lw=0.9, label=f"uniform {uniform:.2f}")
    b.set_xticks(range(len(doc["presentations"])), [f"{p:g} s" for p in doc["presentations"]])
    b.set_xlim(-0.6, max(len(doc["presentations"]), 1) - 0.4)
    top = max([r["bpc"] for r in chars] + [uniform])
    b.set_ylim(0, 1.18 * top)
    b.set_xlabel("presentation time per character")
    b.set_ylabel("bits per character")
    b.set_title(f"(b) Shakespeare, {doc['windows']} window(s) of {doc['length']} chars", fontsize=9)
    b.legend(fontsize=7, loc="upper right", ncol=2)
    return fig


def _caption(doc: dict) -> str:
    P = "the default copies" if np.isnan(doc["P"]) else f"P = {doc['P']:g}"   # null is read as NaN
    return (f"The shipped causal models read one token per presentation by their circuits (rate and escape levels, "
            f"{P} at the escape level) and exactly (float). (a) In-context recall accuracy vs facts per sequence, "
            f"{doc['sequences']} held-out sequence(s) per point. (b) Bits per character of the next characters of "
            f"{doc['windows']} held-out window(s) of {doc['length']} characters of the validation play; each bar "
            f"labelled with its excess over the float model's on the same windows (dashed: the float model on "
            f"every window; a window the circuit refused before building is left out of its bar). The escape "
            f"cells fire by {doc.get('firing', 'poisson') if isinstance(doc.get('firing'), str) else 'poisson'} "
            f"firing.")


def draw(json_path: str, png: str | None = None) -> str:
    """Draw the figure of ``ctmhsa bench language`` from its JSON ``json_path`` into ``png``
    (default: beside the JSON, same name with ``.png``; with a PDF and a caption). Returns the
    PNG's path."""
    return draw_from_json(json_path, png, draw_language, _caption)


if __name__ == "__main__":  # pragma: no cover
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: python -m ctmhsa.figures.language JSON [OUT.png]  (redraws the language figure)")
    print(draw(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
