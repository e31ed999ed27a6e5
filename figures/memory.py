"""The figure of ``ctmhsa bench memory`` (the key-value memory over a stream), drawn from its
JSON only: the benchmark (:mod:`ctmhsa.sims.benchmarks.memory`) writes the data, the command
line draws this after it.

:func:`draw_memory` draws the figure from the JSON (as a dict); :func:`draw` reads the JSON and
saves the figure (PNG, PDF and caption) beside it.

Usage::

    python -m ctmhsa.figures.memory JSON [OUT.png]
"""

from __future__ import annotations

import sys

import numpy as np

from ctmhsa.maths.stages import symbol

from .style import draw_from_json, plt

__all__ = ["draw_memory", "draw", "COLOURS"]

COLOURS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02")
"""One colour per declared τ_mem in (a) and (c) and per dk in (b)."""

NO_FORGETTING = "0.2"
"""The colour of the memory without forgetting in (c)."""

V = symbol("v_tilde")


def draw_memory(doc: dict, fig=None):
    """The figure of ``ctmhsa bench memory`` from its JSON (as a dict).

    (a) The memory's component along its one write vs time since the write, per declared
    τ_mem: the circuit (dots) and λ^lag of the declared λ (line), log scale; the legend gives the
    measured τ_mem. (b) Recall (the stored value nearest the read-out is the query's own) vs the
    number of stored pairs N, per dk: the reference over many instances (line), the circuit and
    the reference on the circuit's instances (dots, rings), the 90 % level and chance (1/N).
    (c) Recall of a stored pair vs its lag (tokens since written), without forgetting and per
    declared τ_mem, drawn as (b); absent from a JSON written before it was measured."""
    from matplotlib.ticker import FormatStrFormatter, NullFormatter

    fig = fig or plt.figure(figsize=(10.8, 3.2), constrained_layout=True)
    ax1, ax2, ax3 = fig.subplots(1, 3)
    P = doc["presentation"]
    for i, r in enumerate(doc["decay"]):
        c = COLOURS[i % len(COLOURS)]
        t = P * np.asarray(r["lags"], float)
        ax1.plot(t, np.asarray(r["forget"]) ** np.asarray(r["lags"], float), color=c, lw=1.0)
        ax1.plot(t, r["component"], "o", ms=3.5, color=c,
                 label=f"τ_mem {r['tau_mem']:g} s: measured {r['tau_measured']:.3f} s")
    ax1.set_yscale("log")
    ax1.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    low = min(min(r["component"]) for r in doc["decay"]) if doc["decay"] else 1.0
    ax1.yaxis.set_minor_formatter(FormatStrFormatter("%g") if low > 0.1 else NullFormatter())   # within a decade
    ax1.set_xlabel("time since the write (s)")
    ax1.set_ylabel("memory along the write, ⟨M_t, M_1⟩ / ‖M_1‖²")
    ax1.set_title(f"(a) decay, {doc['neuron']} level, {P:g} s per token\n(dots: circuit; line: λ^lag declared)")
    ax1.legend(fontsize=7, loc="lower left")
    for i, ref in enumerate(doc["reference_capacity"]):
        c, dk = COLOURS[i % len(COLOURS)], ref["dk"]
        ax2.plot(ref["pairs"], ref["recall"], color=c, lw=1.2,
                 label=f"dk={dk}: reference ({ref['trials']} instances per N)")
        rows = [r for r in doc["capacity"] if r["dk"] == dk]
        ns = sorted({r["N"] for r in rows})
        mean = [np.mean([r[k] for r in rows if r["N"] == N]) for k in ("recall", "recall_reference") for N in ns]
        ax2.plot(ns, mean[:len(ns)], "o", ms=3.5, color=c, label=f"dk={dk}: circuit")
        ax2.plot(ns, mean[len(ns):], "o", ms=7, mfc="none", color=c, lw=0.8)
    N = np.asarray(sorted({N for ref in doc["reference_capacity"] for N in ref["pairs"]}), float)
    ax2.plot(N, 1 / N, ":", color="0.5", lw=0.9, label="chance, 1/N")
    ax2.axhline(doc["recall_level"], color="0.7", lw=0.6, zorder=0)
    ax2.set_xscale("log", base=2)
    ax2.xaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax2.set_ylim(0, 1.05)
    ax2.set_xlabel("stored key-value pairs N")
    ax2.set_ylabel(f"recall (nearest stored value to {V})")
    ax2.set_title("(b) capacity, queried by the stored keys\n(rings: reference on the circuit's instances)")
    ax2.legend(fontsize=7, loc="upper right")
    _draw_lag(ax3, doc)
    return fig


def _tau(tau):
    """A declared τ_mem, None without forgetting (the JSON's null reads as NaN)."""
    return None if tau is None or not np.isfinite(tau) else float(tau)


def _draw_lag(ax, doc: dict) -> None:
    """(c): recall vs lag per forgetting (see :func:`draw_memory`)."""
    from matplotlib.ticker import MaxNLocator

    refs = doc.get("lag_reference", [])
    colour = {r["tau_mem"]: COLOURS[i % len(COLOURS)] for i, r in enumerate(doc["decay"])}
    count = 0
    for k, ref in enumerate(refs):
        tau = _tau(ref["tau_mem"])
        c = NO_FORGETTING if tau is None else colour.get(tau, COLOURS[-1])
        what = "no forgetting" if tau is None else f"τ_mem {tau:g} s (λ {ref['forget']:.2f})"
        ax.plot(ref["lags"], ref["recall"], color=c, lw=1.2, label=what)
        rows = [r for r in doc["lag"] if _tau(r["tau_mem"]) == tau]
        if rows:   # the series side by side at each lag: their few instances often recall alike
            x = np.asarray(ref["lags"], float) + 0.12 * (k - (len(refs) - 1) / 2)
            count = len(rows)
            ax.plot(x, np.mean([r["recalled"] for r in rows], axis=0), "o", ms=3.5, color=c)
            ax.plot(x, np.mean([r["recalled_reference"] for r in rows], axis=0), "o", ms=7, mfc="none",
                    color=c, lw=0.8)
    if refs:
        N = refs[0]["N"]
        ax.axhline(1 / N, ls=":", color="0.5", lw=0.9, label=f"chance, 1/{N}")
        ax.set_title(f"(c) recall vs lag, {N} pairs stored, dk={refs[0]['dk']}\n(lines: reference; dots: circuit and "
                     f"rings: reference, n = {count})")
        ax.legend(fontsize=7)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("lag L (tokens since the pair was written)")
    ax.set_ylabel("recall of the pair at lag L")


def _caption(doc: dict) -> str:
    lat = "; ".join(f"{r['circuit']}: {r['neurons']} neurons ({r['neurons_per_head']} per head), "
                    f"{r['s_per_token']:.3f} s per token" for r in doc["latency"])
    c = doc.get("circuit") if isinstance(doc.get("circuit"), dict) else {}
    cells = (f", {c['P']:g} copies per value, {c['firing']} firing, {c['params']['tau_m'] * 1e3:g} ms cells"
             if c else "")
    latency = f" Latency: {lat}." if lat else " Latency: measured at the rate level only."
    return (f"The memory circuit over a stream of tokens ({doc['neuron']} level{cells}, {doc['presentation']:g} s per "
            f"token, held-out random weights, seed {doc['seed']}). (a) One key-value pair written, then tokens "
            f"that write nothing: the memory's component along the write decays as λ per token. (b) Recall of N "
            f"stored pairs queried by their keys (cross-attention). (c) Recall of a stored pair by the tokens since "
            f"it was written, with and without forgetting.{latency}")


def draw(json_path: str, png: str | None = None) -> str:
    """Draw the figure of ``ctmhsa bench memory`` from its JSON ``json_path`` into ``png``
    (default: beside the JSON, same name with ``.png``; with a PDF and a caption). Returns the
    PNG's path."""
    return draw_from_json(json_path, png, draw_memory, _caption)


if __name__ == "__main__":  # pragma: no cover
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: python -m ctmhsa.figures.memory JSON [OUT.png]  (redraws the memory figure)")
    print(draw(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
