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

from ctmhsa.mapping.stages import STAGE_ORDER, symbol, title
from ctmhsa.sims.io import atomic_path, load
from ctmhsa.sims.nwb import circuit_of

from .panels import draw_raster
from .style import DPI, POP_COLOURS, check_fonts, plt

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
            ax.set_ylabel("decoded from spikes" if res.level != "rate" else "decoded from rates")
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
    ax.legend(loc="upper left", frameon=False)
    # raster
    ax = fig.add_subplot(gs[2, :3])
    warm = float(c.get("warmup") or 0.0)
    if res.spikes:
        t1 = warm + min(span, float(c["duration"]))
        draw_raster(ax, res, circuit_of(c), head, macro, span=(warm, t1))
        ax.set_title(f"spikes of macrocolumn {macro}, head {head}, and of the nucleus-2 relays of token "
                     f"{macro}: first {t1 - warm:g} s of the window", fontsize=7.5)
    else:
        ax.axis("off")
        ax.text(0.5, 0.5, "rate level: no spikes" if res.level == "rate" else
                "no spikes recorded (record_spikes = false)", ha="center", va="center", fontsize=8)
    # error vs window
    ax = fig.add_subplot(gs[2, 3:])
    cps = res.diagnostics.get("checkpoints") or []
    if len(cps) > 1:
        T = np.array([cp["T"] for cp in cps])
        for key, col in (("v_tilde", POP_COLOURS["l5pt"]), ("x_tilde", "#238b45"), ("s", "#e08214")):
            if key not in cps[-1]["metrics"]:
                continue
            e = [cp["metrics"][key]["nrmse"] for cp in cps]
            f = [cp["metrics"][key]["noise_floor"] for cp in cps]
            sym = symbol(key)
            ax.loglog(T, e, "o-", color=col, ms=3, label=f"{sym} NRMSE")
            ax.loglog(T, f, "--", color=col, lw=0.9, label=f"{sym} floor")
        ax.loglog(T, cps[0]["metrics"]["x_tilde"]["noise_floor"] * np.sqrt(T[0] / T), ":", color="0.5",
                  label="∝ 1/√T")
        ax.set_xticks(T, [f"{t:g}" for t in T])
        ax.xaxis.set_minor_locator(plt.NullLocator())
        lo, hi = ax.get_ylim()
        ticks = [t for t in (0.01, 0.02, 0.03, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 5) if lo <= t <= hi]
        ax.yaxis.set_minor_locator(plt.NullLocator())
        ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
        ax.set(xlabel="measurement window T (s)", ylabel="NRMSE")
        ax.set_title("error vs simulated time (one run, checkpoints)", fontsize=7.5)
        ax.legend(ncol=2, loc="lower left", frameon=False)
    else:
        ax.axis("off")
        lines = [f"{_pad(symbol(k), 3)} NRMSE {met[k]['nrmse']:.3f}  floor {met[k]['noise_floor']:.3f}"
                 for k in stages]
        ax.text(0.0, 1.0, "\n".join(lines), va="top", family="monospace", fontsize=7, transform=ax.transAxes)
    counts = res.counts
    firing = f" ({c['firing']} firing)" if c.get("firing", "poisson") != "poisson" else ""
    fig.suptitle(f"ctmhsa run: {res.level} level{firing}, n = {c['n']}, H = {c['H']}, dk = {c['dk']}, dv = {c['dv']}, "
                 f"de = {c['de']}; {counts.get('neurons', 0):,} neurons, {counts.get('synapses', 0):,} synapses; "
                 f"window {c['duration']:g} s, seed {c.get('seed')}", fontsize=9)
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
