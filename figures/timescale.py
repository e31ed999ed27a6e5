"""The figure of ``ctmhsa bench timescale``, drawn from its JSON only (the benchmark,
:mod:`ctmhsa.sims.benchmarks.timescale`, writes the data; the command line draws this after it)."""

from __future__ import annotations

import json
import os
import sys

import numpy as np

from ctmhsa.maths.stages import symbol

from .style import DPI, check_fonts, mark_quick, plt

X = symbol("x_tilde")
"""The output's symbol, from the stage table."""

__all__ = ["draw_timescale", "draw"]


P_COLOURS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02")


def _ms(x) -> str:
    """A time (s) in ms for a legend ("—" where it was not reached)."""
    return "—" if x is None or not np.isfinite(x) else f"{1e3 * x:.0f}"


def _nan(v):
    return float("nan") if v is None else v


def draw_timescale(path: str, out: str | None = None) -> str:
    """Draw ``timescale.png`` from the JSON ``path`` of ``ctmhsa bench timescale`` (default: beside
    it, same name with ``.png``), atomically; return the path. Left: x̃'s NRMSE (median over
    presentations after the first) vs presentation time per P, streamed (solid) and static
    (dashed), the noise floor of the streamed runs dotted. Right: the fraction of the change of
    x̃ after a switch of token sets, rate level and escape level."""
    from matplotlib.ticker import FixedLocator, FormatStrFormatter, LogLocator, NullFormatter, NullLocator

    from ctmhsa.sims.io import atomic_path

    out = out or os.path.splitext(path)[0] + ".png"
    with open(path) as fh:
        doc = json.load(fh)
    lat = doc.get("latency") or {}
    fig, axes = plt.subplots(1, 2 if lat else 1, figsize=(7.2 if lat else 3.6, 3.0), constrained_layout=True)
    ax = axes[0] if lat else axes
    for i, P in enumerate(doc["P"]):
        c = P_COLOURS[i % len(P_COLOURS)]
        for mode, ls, mk in (("streamed", "-", "o"), ("static", (0, (4, 2)), "s")):
            rows = sorted((r for r in doc["rows"] if r["P"] == P and r["mode"] == mode), key=lambda r: r["presentation"])
            x = [r["presentation"] for r in rows]
            ax.plot(x, [_nan(r["nrmse_median"]) for r in rows], ls=ls, marker=mk, ms=3, lw=1.2, color=c,
                    label=f"P={P}, {mode}")
            if mode == "streamed":
                ax.plot(x, [_nan(r["noise_floor_median"]) for r in rows], ls=":", lw=0.9, color=c, alpha=0.7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(FixedLocator(doc["presentations"]))
    ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_locator(LogLocator(base=10, subs=tuple(range(1, 10))))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("presentation time (s)")
    ax.set_ylabel(f"{X} NRMSE (median over presentations)")
    cells = doc.get("firing", "poisson") + " firing"
    if doc.get("params", {}).get("tau_m", 0.01) != 0.01:
        cells += f", τ_m {1e3 * doc['params']['tau_m']:g} ms"
    ax.set_title(f"stream of {doc['T']} token sets, escape level, {cells}\n(dotted: noise floor, streamed)")
    ax.legend(fontsize=7, ncol=1 if len(doc["P"]) < 3 else 2, loc="best")
    if lat:
        ax2 = axes[1]
        for th in (0.5, 0.9):
            ax2.axhline(th, color="0.7", lw=0.6, zorder=0)
        ax2.axhline(0.0, color="0.85", lw=0.6, zorder=0)
        ax2.axhline(1.0, color="0.85", lw=0.6, zorder=0)
        ax2.axvline(0.0, color="0.5", lw=0.6, ls=":", zorder=0)
        if "escape" in lat:
            e = lat["escape"]
            t = 1e3 * np.asarray(e["t"])
            ax2.plot(t, np.asarray(e["fraction_raw"], float), color="#e31a1c", lw=0.6, alpha=0.35)
            ax2.plot(t, np.asarray(e["fraction"], float), color="#e31a1c", lw=1.4,
                     label=f"escape (P={e['P']}, {e['seeds']} seed{'s' if e['seeds'] > 1 else ''}): "
                           f"{_ms(e['t50']).strip()} / {_ms(e['t90']).strip()} ms")
            ax2.plot([1e3 * _nan(e["t50"]), 1e3 * _nan(e["t90"])], [0.5, 0.9], "o", ms=3.5, color="#e31a1c")
        if "rate" in lat:
            r = lat["rate"]
            ax2.plot(1e3 * np.asarray(r["t"]), np.asarray(r["fraction"], float), color="#1f78b4", lw=1.4,
                     label=f"rate: {_ms(r['t50']).strip()} / {_ms(r['t90']).strip()} ms")
            ax2.plot([1e3 * _nan(r["t50"]), 1e3 * _nan(r["t90"])], [0.5, 0.9], "o", ms=3.5, color="#1f78b4")
        pres = (lat.get("escape") or lat.get("rate"))["presentation"]
        ax2.set_xlim(-0.25e3 * pres, 0.75e3 * pres)
        ax2.set_ylim(-0.3, 1.45)
        ax2.set_xlabel("time from the switch of token sets (ms)")
        ax2.set_ylabel(f"fraction of the change of {X}")
        ax2.set_title(f"latency: {X}(t) projected on {X}_ref[1] − {X}_ref[0]")
        ax2.legend(fontsize=7, loc="upper left", title="to 50 % / 90 % of the change", frameon=True)
    mark_quick(fig, bool(doc.get("quick")))
    check_fonts(fig)
    with atomic_path(out, ".png") as tmp:
        fig.savefig(tmp, dpi=DPI, format="png")
    plt.close(fig)
    return out


draw = draw_timescale
"""The figure function the command line calls after ``ctmhsa bench timescale`` (its ``FIGURE``)."""


if __name__ == "__main__":  # pragma: no cover
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: python -m ctmhsa.figures.timescale JSON [OUT.png]  (redraws the figure)")
    print(draw_timescale(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
