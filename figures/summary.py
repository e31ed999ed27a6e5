"""``summary.png`` of one run, drawn from its results directory: every decoded stage against the
exact reference, each stage's error beside its noise floor, a spike raster of one macrocolumn and
(with checkpoints) the error against the measurement window.

Usage::

    python -m ctmhsa.figures.summary RESULTS_DIR [OUT.png]
"""

from __future__ import annotations

import os
import sys
import unicodedata

import numpy as np

from ctmhsa.maths.stages import STAGE_ORDER, symbol, title
from ctmhsa.sims.io import atomic_path, load
from ctmhsa.sims.nwb import circuit_of
from ctmhsa.neurons.firing import get_firing
from ctmhsa.neurons.levels import get_level

from .panels import INTERNEURON_NOTE, draw_raster
from .style import DPI, POP_COLOURS, check_fonts, clear_legend, plt

__all__ = ["draw_summary"]

_STAGE_COLOUR = {"q": "#33a02c", "k": "#e31a1c", "v": "#e31a1c", "s": "#e08214", "kappa": "#e08214",
                 "S": "#b15928", "z": "#b15928", "Z": "#6a3d9a", "y": "#1f78b4", "v_tilde": "#08519c",
                 "x_tilde": "#238b45"}


def _pad(text: str, width: int) -> str:
    """``text`` padded to ``width`` columns (a combining mark, as in x̃, takes none)."""
    return text + " " * max(0, width - sum(not unicodedata.combining(ch) for ch in text))


def _scatter(ax, key, decoded, exact, m):
    d, r = np.asarray(decoded, float).ravel(), np.asarray(exact, float).ravel()
    ok = np.isfinite(d) & np.isfinite(r)
    d, r = d[ok], r[ok]
    if d.size > 4000:               # a subsample draws the same cloud
        pick = np.random.default_rng(0).choice(d.size, 4000, replace=False)
        d, r = d[pick], r[pick]
    lo, hi = float(min(r.min(), d.min())), float(max(r.max(), d.max()))
    ax.plot([lo, hi], [lo, hi], color="0.55", lw=0.8, zorder=0)
    ax.scatter(r, d, s=4, lw=0, alpha=0.7, color=_STAGE_COLOUR.get(key, "#1f78b4"), edgecolors="none")
    ax.set_title(title(key), fontsize=7.5)
    floor = m.get("noise_floor", 0.0)
    txt = f"NRMSE {m['nrmse']:.3f}" + (f"\nfloor {floor:.3f}" if floor > 0 else "")
    ax.text(0.04, 0.96, txt, transform=ax.transAxes, va="top", fontsize=7,
            bbox=dict(fc="white", ec="none", alpha=0.75, pad=1))
    ax.tick_params(labelsize=7)
    ax.locator_params(nbins=4)


FLOOR_SCALING_TOL = 0.05
"""Largest relative departure of floor·√T from its mean over the checkpoints under which the
error-vs-window panel says the floors fall as 1/√T instead of drawing a 1/√T guide: the floors are
predicted from spike counts, so a guide through one would lie on it."""


def _log_ticks(ax) -> None:
    """Round tick values on a log y axis (no minor ticks), within its limits."""
    lo, hi = ax.get_ylim()
    ticks = [t for t in (0.01, 0.02, 0.03, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 5) if lo <= t <= hi]
    ax.yaxis.set_minor_locator(plt.NullLocator())
    ax.set_yticks(ticks, [f"{t:g}" for t in ticks])


def _error_vs_window(ax, cps) -> list:
    """Error (solid, dots) and predicted spike-count floor (dashed) of ṽ, x̃ and s against the
    window T of the checkpoints ``cps``, log-log. Where every floor falls as 1/√T to within
    :data:`FLOOR_SCALING_TOL` the legend says so; else a dotted 1/√T guide is drawn through x̃'s
    first floor. Returns the legend's handles (placed clear of the data once the figure is laid
    out: :func:`ctmhsa.figures.style.clear_legend`)."""
    from matplotlib.lines import Line2D

    T = np.array([cp["T"] for cp in cps], float)
    drawn, dev = [], 0.0
    for key, col in (("v_tilde", POP_COLOURS["l5pt"]), ("x_tilde", "#238b45"), ("s", "#e08214")):
        if key not in cps[-1]["metrics"]:
            continue
        e = np.array([cp["metrics"][key]["nrmse"] for cp in cps], float)
        f = np.array([cp["metrics"][key]["noise_floor"] for cp in cps], float)
        ax.loglog(T, e, "o-", color=col, ms=3, label=f"{symbol(key)} NRMSE")
        ax.loglog(T, f, "--", color=col, lw=0.9, label=f"{symbol(key)} floor")
        g = f * np.sqrt(T)
        g = g[np.isfinite(g) & (g > 0)]
        dev = max(dev, float(np.max(np.abs(g / g.mean() - 1))) if g.size > 1 else np.inf)
        drawn.append((key, col))
    if not drawn:
        return []
    handles = [Line2D([], [], color=col, marker="o", ms=3, label=symbol(key)) for key, col in drawn]
    handles.append(Line2D([], [], color="0.3", marker="o", ms=3, label="NRMSE"))
    if dev <= FLOOR_SCALING_TOL:
        label = f"floor, ∝ 1/√T (± {100 * dev:.0f} %)" if dev >= 0.005 else "floor, ∝ 1/√T"
        handles.append(Line2D([], [], color="0.3", ls="--", lw=0.9, label=label))
    else:
        handles.append(Line2D([], [], color="0.3", ls="--", lw=0.9, label="floor"))
        key = "x_tilde" if "x_tilde" in dict(drawn) else drawn[0][0]
        f0 = cps[0]["metrics"][key]["noise_floor"]
        ax.loglog(T, f0 * np.sqrt(T[0] / T), ":", color="0.5", label="∝ 1/√T")
        handles.append(Line2D([], [], color="0.5", ls=":", label=f"∝ 1/√T (through {symbol(key)}'s floor)"))
    ax.set_xticks(T, [f"{t:g}" for t in T])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    lo, hi = ax.get_ylim()      # headroom above the lines (they fall to the right) for the legend
    ax.set_ylim(lo, hi * (hi / lo) ** 0.3)
    _log_ticks(ax)
    ax.set(xlabel="measurement window T (s)", ylabel="NRMSE")
    ax.set_title("error vs simulated time (one run, checkpoints)", fontsize=7.5)
    return handles


def draw_summary(results_dir, out: str | None = None, head: int = 0, macro: int = 0, span: float = 1.0):
    """Draw the summary of a run: a :class:`ctmhsa.sims.result.SimulationResult`, or the path of a
    results directory (read with :func:`ctmhsa.sims.io.load`).

    Parameters
    ----------
    results_dir : SimulationResult or str
    out : str, optional
        PNG to write (at :data:`ctmhsa.figures.style.DPI`); the figure is returned either way.
    head, macro : int
        The macrocolumn whose spikes the raster shows.
    span : float
        Seconds of the measurement window the raster shows (from its start).

    Returns
    -------
    matplotlib.figure.Figure
    """
    res = load(results_dir) if isinstance(results_dir, (str, os.PathLike)) else results_dir
    met = res.metrics()
    c = res.config
    stages = [k for k in STAGE_ORDER if k in met]
    fig = plt.figure(figsize=(10, 7.6), layout="constrained")
    gs = fig.add_gridspec(3, 5, height_ratios=[1, 1, 1.35])
    for n, key in enumerate(stages[:9]):
        ax = fig.add_subplot(gs[n // 5, n % 5])
        _scatter(ax, key, res.stages[key], res.reference_stages[key], met[key])
        if n % 5 == 0:
            ax.set_ylabel("decoded from spikes" if get_level(res.level).spiking else "decoded from rates")
        if n >= 5 or n + 5 >= len(stages):
            ax.set_xlabel("exact (reference)")
    # error beside floor, per stage
    ax = fig.add_subplot(gs[1, 4])
    x = np.arange(len(stages))
    err = [met[k]["nrmse"] for k in stages]
    floor = [met[k]["noise_floor"] for k in stages]
    ax.bar(x - 0.2, err, width=0.4, color="#1f78b4", label="NRMSE")
    if any(f > 0 for f in floor):
        ax.bar(x + 0.2, floor, width=0.4, color="0.7", label="noise floor")
    ax.set_xticks(x, [symbol(k) for k in stages])
    ax.set_title("error vs spike-count floor", fontsize=7.5)
    # the legend in one row above the tallest bar (upper left, it covered the tall κ bars)
    top = max([e for e in err + floor if np.isfinite(e)], default=0.0)
    ax.set_ylim(0, 1.3 * top if top > 0 else 1.0)
    ax.legend(loc="upper center", ncols=2, frameon=False, borderaxespad=0.2, handlelength=1.2, columnspacing=1.0)
    # raster, its time axis counted from the start of the measurement window (after the warm-up)
    ax = fig.add_subplot(gs[2, :3])
    warm = float(c.get("warmup") or 0.0)
    if res.spikes:
        shown = min(span, float(c["duration"]))
        circuit = circuit_of(c)
        draw_raster(ax, res, circuit, head, macro, span=(warm, warm + shown), origin=warm)
        ax.set_xlabel("time in the measurement window (s)" + (f"; {warm:g} s warm-up before it" if warm else ""))
        note = f"\n{INTERNEURON_NOTE}" if "interneuron" in circuit.populations else ""
        ax.set_title(f"spikes of macrocolumn {macro}, head {head}, and of the nucleus-2 relays of token {macro}: "
                     f"first {shown:g} s of the window{note}", fontsize=7.5)
    else:
        ax.axis("off")
        ax.text(0.5, 0.5, "rate level: no spikes" if not get_level(res.level).spiking else
                "no spikes recorded (record_spikes = false)", ha="center", va="center", fontsize=8)
    # error vs window
    err_ax = fig.add_subplot(gs[2, 3:])
    cps = res.diagnostics.get("checkpoints") or []
    handles = _error_vs_window(err_ax, cps) if len(cps) > 1 else None
    if not handles:
        ax = err_ax
        ax.axis("off")
        lines = [f"{_pad(symbol(k), 3)} NRMSE {met[k]['nrmse']:.3f}  floor {met[k]['noise_floor']:.3f}"
                 for k in stages]
        ax.text(0.0, 1.0, "\n".join(lines), va="top", family="monospace", fontsize=7, transform=ax.transAxes)
    counts = res.counts
    firing = f" ({c['firing']} firing)" if get_firing(c.get("firing", "poisson")).integrator else ""
    fig.suptitle(f"ctmhsa run: {res.level} level{firing}, n = {c['n']}, H = {c['H']}, dk = {c['dk']}, dv = {c['dv']}, "
                 f"de = {c['de']}; {counts.get('neurons', 0):,} neurons, {counts.get('synapses', 0):,} synapses; "
                 f"window {c['duration']:g} s, seed {c.get('seed')}", fontsize=9)
    if handles:       # once the figure has its titles: the legend where it hides no line or marker
        ylim = err_ax.get_ylim()
        clear_legend(err_ax, handles=handles, ncol=2)
        if err_ax.get_ylim() != ylim:
            _log_ticks(err_ax)
    check_fonts(fig)
    if out:
        with atomic_path(out, ".png") as tmp:
            fig.savefig(tmp, dpi=DPI, format="png")
        plt.close(fig)
    return fig


if __name__ == "__main__":  # pragma: no cover
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: python -m ctmhsa.figures.summary RESULTS_DIR [OUT.png]")
    draw_summary(sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else os.path.join(sys.argv[1], "summary.png"))
