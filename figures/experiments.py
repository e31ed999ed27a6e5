"""The figure of an in-silico experiment (``ctmhsa experiment NAME``), drawn from its
``experiment.json`` only (:mod:`ctmhsa.sims.experiments` writes the data).

:func:`draw_experiment` draws the figure from the document (a dict); :func:`draw` reads the JSON
and saves the figure (PNG, PDF and caption).

Usage::

    python -m ctmhsa.figures.experiments experiment.json [OUT.png]
"""

from __future__ import annotations

import sys

import numpy as np

from ctmhsa.maths.stages import symbol
from ctmhsa.sims.experiments.fit import fit_line

from .style import POP_COLOURS, draw_from_json, plt

__all__ = ["draw_experiment", "draw"]

_POP_LABELS = {"l23": "L2/3", "l5it": "L5 IT", "l5pt": "L5 PT", "interneuron": "interneurons"}
_CONDITION_STYLES = ("-o", "--s", ":^", "-.v", "-D")


def _conditions(doc) -> list:
    seen = []
    for r in doc["rows"]:
        if r["condition"] not in seen and "psth" not in r:
            seen.append(r["condition"])
    return seen


def _series(doc, condition, get):
    rs = sorted((r for r in doc["rows"] if r["condition"] == condition and "psth" not in r), key=lambda r: r["value"])
    return np.array([r["value"] for r in rs]), np.array([get(r) for r in rs], float)


def _rate_panel(ax, doc, population, xlabel, fit=True) -> None:
    for k, c in enumerate(_conditions(doc)):
        x, y = _series(doc, c, lambda r: r["rates"][population])
        line, = ax.plot(x, y, _CONDITION_STYLES[k % len(_CONDITION_STYLES)], ms=4, label=c)
        s, i = fit_line(x, y)
        if fit and np.isfinite(s):
            xx = np.linspace(0, x.max(), 2)
            ax.plot(xx, s * xx + i, color=line.get_color(), lw=0.6, alpha=0.6)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"{_POP_LABELS[population]} mean rate (Hz)")
    ax.legend(frameon=False)


def _time_course(ax, doc) -> None:
    row = next(r for r in doc["rows"] if "psth" in r)
    b, onset, w0 = row["psth_bin"], row["value"], doc["warmup"]
    for pop, h in row["psth"].items():
        h = np.asarray(h, float)
        t = (np.arange(len(h)) + 0.5) * b
        before = h[(t >= max(w0, onset - 0.2)) & (t < onset)].mean()
        keep = t >= w0
        ax.plot(t[keep], h[keep] / before, color=POP_COLOURS.get(pop), lw=1.0,
                label=f"{_POP_LABELS.get(pop, pop)} ({before:.1f} Hz before)")
    ax.axvspan(onset, w0 + doc["duration"], color="#4daf4a", alpha=0.12, lw=0, label="half of L2/3 silenced")
    ax.axhline(1.0, color="0.6", lw=0.6, ls=":")
    ax.set_xlabel("time (s)")
    ax.set_ylabel(f"population rate / rate before ({1e3 * b:g} ms bins)")
    ax.set_ylim(0, 2)
    ax.legend(frameon=False, loc="upper left")


def _photoinhibition(fig, doc):
    onset = any("psth" in r for r in doc["rows"])
    axes = fig.subplots(1, 3 if onset else 2)
    label = doc["sweep"]["label"]
    _rate_panel(axes[0], doc, "l5it", label)
    _rate_panel(axes[1], doc, "l5pt", label)
    axes[0].set_title("(a) L5 IT gain")
    axes[1].set_title("(b) L5 PT gain")
    if onset:
        _time_course(axes[2], doc)
        axes[2].set_title("(c) silencing half of L2/3 at onset")


def _interneurons(fig, doc):
    axes = fig.subplots(1, 3)
    label = doc["sweep"]["label"]
    for k, c in enumerate(_conditions(doc)):
        st = _CONDITION_STYLES[k % len(_CONDITION_STYLES)]
        x, y = _series(doc, c, lambda r: r["pooled_l23"] / r["set_point"])
        axes[0].plot(x, y, st, ms=4, label=c)
        for pop, colour in (("l5it", POP_COLOURS["l5it"]), ("l5pt", POP_COLOURS["l5pt"])):
            x, y = _series(doc, c, lambda r: r["rates"][pop])
            axes[1].plot(x, y, st, ms=4, color=colour, label=f"{_POP_LABELS[pop]}, {c}")
        x, y = _series(doc, c, lambda r: r["nrmse"]["x_tilde"])
        axes[2].plot(x, y, st, ms=4, label=c)
    axes[0].axhline(1.0, color="0.6", lw=0.6, ls=":")
    axes[0].set_ylabel("pooled L2/3 rate / set point")
    axes[0].set_title("(a) normalisation of L2/3")
    axes[1].set_ylabel("mean rate (Hz)")
    axes[1].set_title("(b) L5 rates")
    axes[2].set_ylabel(f"{symbol('x_tilde')} NRMSE against attention")
    axes[2].set_title("(c) output")
    for ax in axes:
        ax.set_xlabel(label)
        ax.set_yscale("log")
        ax.legend(frameon=False)


def _it_pt(fig, doc):
    axes = fig.subplots(1, 2)
    c = _conditions(doc)[0]
    for stage, st in (("v_tilde", "-o"), ("x_tilde", "--s")):
        x, y = _series(doc, c, lambda r: r["gain"][stage])
        axes[0].plot(x, y, st, ms=4, label=f"decoded {symbol(stage)}")
    axes[0].plot([0, 1], [1, 0], color="0.5", lw=0.8, ls=":", label="1 − f")
    axes[0].set_ylabel("gain (slope on the exact value)")
    axes[0].set_title("(a) output gain")
    for pop in ("l23", "l5it", "l5pt"):
        x, y = _series(doc, c, lambda r: r["rates"][pop])
        axes[1].plot(x, y, "-o", ms=4, color=POP_COLOURS[pop], label=_POP_LABELS[pop])
    axes[1].set_ylabel("mean rate (Hz)")
    axes[1].set_title("(b) rates up- and downstream of the cut")
    for ax in axes:
        ax.set_xlabel(doc["sweep"]["label"])
        ax.legend(frameon=False)


def _apical(fig, doc):
    axes = fig.subplots(1, 2)
    _rate_panel(axes[0], doc, "l5it", doc["sweep"]["label"])
    axes[0].set_title("(a) L5 IT input-output curves")
    s = doc["summary"]
    axes[1].plot(s["apical"], s["slope"], "-o", ms=4, color=POP_COLOURS["l5it"])
    axes[1].set_xlabel("extra apical drive per L5 IT cell (Hz)")
    axes[1].set_ylabel("slope (Hz per Hz of basal drive)")
    axes[1].set_title("(b) gain against apical input")
    axes[1].set_ylim(bottom=0)


_VERDICT = {True: ("agrees", "#4daf4a"), False: ("disagrees", "#e41a1c"), None: ("undecided", "0.6")}


def _fingerprints(fig, doc):
    """(a) every fingerprint's circuit value against its published range, one row each, coloured
    by the verdict; the measures' text is the table of ``summary``."""
    rows = doc["summary"]["table"]
    ax = fig.subplots(1, 1)
    y = np.arange(len(rows))[::-1]
    for k, r in zip(y, rows):
        # (the JSON's nulls are read back as NaN)
        text, colour = _VERDICT[r["agrees"] if isinstance(r["agrees"], bool) else None]
        value = "-" if r["circuit"] is None or not np.isfinite(r["circuit"]) else f"{r['circuit']:.3g}"
        ax.text(0.0, k, r["measure"], va="center", fontsize=7)
        ax.text(0.62, k, value, va="center", ha="right", fontsize=7)
        ax.text(0.64, k, r["published"], va="center", fontsize=7)
        ax.text(0.86, k, text, va="center", fontsize=7, color=colour, weight="bold")
    for x, head in ((0.0, "measure"), (0.62, "circuit"), (0.64, "published"), (0.86, "verdict")):
        ax.text(x, len(rows), head, va="center", ha="right" if x == 0.62 else "left", fontsize=7, weight="bold")
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.7, len(rows) + 0.7)
    ax.axis("off")


_PANELS = {"photoinhibition": _photoinhibition, "interneurons": _interneurons, "it_pt": _it_pt, "apical": _apical,
           "fingerprints": _fingerprints}
_SIZES = {"fingerprints": (9.0, 4.6)}
"""Figure sizes (inches) that differ from the panels' default."""


def draw_experiment(doc):
    """The figure of one experiment document (a dict as in ``experiment.json``)."""
    name = doc["experiment"]
    if name not in _PANELS:
        raise ValueError(f"doc: unknown experiment {name!r}; expected one of {sorted(_PANELS)}")
    n = 3 if name in ("interneurons",) or any("psth" in r for r in doc["rows"]) else 2
    fig = plt.figure(figsize=_SIZES.get(name, (3.3 * n, 3.2)), layout="constrained")
    _PANELS[name](fig, doc)
    fig.suptitle(f"{doc['title']} — {doc['neuron']} level, {doc['neurons']:,} neurons, seed {doc['seed']}")
    return fig


def _caption(doc) -> str:
    return (f"{doc['title']} ({doc['source']}). {doc['protocol']} Circuit: n = {doc['problem']['n']}, "
            f"H = {doc['problem']['H']}, dk = {doc['problem']['dk']}, {doc['neuron']} level, "
            f"{doc['duration']:g} s window after {doc['warmup']:g} s, seed {doc['seed']}. "
            + " ".join(doc["predictions"]))


def draw(json_path: str, png: str | None = None) -> str:
    """Draw the figure of the experiment in ``json_path`` into ``png`` (default: beside it, same
    name with ``.png``; with a PDF and a caption). Returns the PNG's path."""
    return draw_from_json(json_path, png, draw_experiment, _caption)


if __name__ == "__main__":  # pragma: no cover
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: python -m ctmhsa.figures.experiments experiment.json [OUT.png]")
    print(draw(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
