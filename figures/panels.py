"""Figure panels read from data files (results directories, npz) — never from a simulation."""

from __future__ import annotations

import os

import numpy as np

from ctmhsa.maths.stages import STAGE_TABLE, symbol, title
from ctmhsa.neurons.law_registry import get_law
from ctmhsa.neurons.laws import law_numpy
from ctmhsa.sims.io import load

from .style import PROJECTION_COLOURS, clear_legend, plt, read_json_numbers

__all__ = ["fig2", "raster", "draw_raster", "error_scaling", "counts_vs_n", "circuits_vs_n", "laws",
           "INTERNEURON_NOTE"]

INTERNEURON_NOTE = "a macrocolumn's interneurons share one integral loop, so they fire together (docs/physiology.md)"
"""The line a raster's title adds where it shows interneurons: their common bursts are the shared
loop's rate, not a defect (docs/physiology.md, "Why the interneurons fire together")."""


def fig2(npz_paths: dict, it_pt_matrix: np.ndarray):
    """In-silico fig. 2, one row per cell level (``npz_paths``: level -> npz of
    :func:`ctmhsa.sims.benchmarks.cells.fig2_data`): (a) apical drive multiplies the f–I gain of an L5 IT
    cell; (b) silencing L2/3 lowers it; (c) divisive normalisation: measured with interneurons
    (solid), the prediction ``R_set u_own / Σu`` above the baseline (black), and without
    interneurons (dashed, right axis); (d) the IT→PT connection matrix of a built macrocolumn."""
    levels = list(npz_paths)
    fig = plt.figure(figsize=(13, 2.9 * len(levels)), constrained_layout=True)
    grid = fig.add_gridspec(len(levels), 4)
    for row, level in enumerate(levels):
        with np.load(npz_paths[level]) as d:
            d = {k: np.array(d[k]) for k in d.files}
        # the somata's baselines: L5 IT in (a, b), L2/3 in (c) (data before version 0.11: one value)
        base_it = float(d.get("a_r_base", d.get("r_base", 0.0)))
        base_l23 = float(d.get("c_r_base", d.get("r_base", 0.0)))
        ax = [fig.add_subplot(grid[row, k]) for k in range(3)]
        b = d["basal"]
        for k, a in enumerate(d["a_apical"]):
            ax[0].plot(b, d["a_rate"][:, k], "o-", ms=3, label=f"apical {a:g}")
        ax[0].set(title=f"(a) {level}: apical input multiplies the gain", xlabel="basal drive (units)",
                  ylabel="L5 IT rate (Hz)")
        for k, f in enumerate(d["b_l23_active_fraction"]):
            ax[1].plot(b, d["b_rate"][:, k], "o-", ms=3, label=f"L2/3 active {100 * f:.0f} %")
        ax[1].set(title=f"(b) {level}: silencing L2/3 lowers the gain", xlabel="basal drive (units)")
        right = ax[2].twinx()
        for k, o in enumerate(d["c_others"]):
            line, = ax[2].plot(b, d["c_rate_with_interneurons"][:, k], "o-", ms=3, label=f"others {o:g}")
            ax[2].plot(b, base_l23 + d["c_prediction"][:, k], "-", color="k", lw=0.6)
            right.plot(b, d["c_rate_without_interneurons"][:, k], "--", color=line.get_color(), lw=0.8)
        right.set_ylabel("without interneurons (Hz, dashed)", fontsize=7)
        right.tick_params(labelsize=7)
        ax[2].set(title=f"(c) {level}: normalisation (black: R_set u/Σu)", xlabel="own basal drive (units)",
                  ylabel="L2/3 rate with interneurons (Hz)")
        for a, base in zip(ax, (base_it, base_it, base_l23)):
            if base > 0:
                a.axhline(base, color="0.6", lw=0.6, ls=":")
        for a in ax:
            a.title.set_fontsize(8)
            a.tick_params(labelsize=7)
            a.legend(fontsize=7)
    axd = fig.add_subplot(grid[:, 3])
    _sign_matrix(fig, axd, it_pt_matrix)
    axd.set(title="(d) IT → PT connections (sign)", xlabel="L5 PT cell", ylabel="L5 IT cell")
    axd.title.set_fontsize(8)
    axd.tick_params(labelsize=7)
    return fig


SIGN_LEVELS = ((-1, "−1: inhibitory", "#2166ac"), (0, "0: none", "#f7f7f7"), (1, "+1: excitatory", "#b2182b"))
"""The three values of a connection-sign matrix: value, label, colour."""


def _sign_matrix(fig, ax, m) -> None:
    """A −1/0/+1 matrix in three colours with a colour bar of three labelled levels (a continuous
    bar would suggest values in between)."""
    from matplotlib.colors import BoundaryNorm, ListedColormap

    values = [v for v, _, _ in SIGN_LEVELS]
    m = np.asarray(m, float)
    if not np.isin(m, values).all():
        raise ValueError(f"sign matrix: expected entries in {values}, got {np.unique(m)[:6]}")
    cmap = ListedColormap([c for _, _, c in SIGN_LEVELS])
    norm = BoundaryNorm([-1.5, -0.5, 0.5, 1.5], cmap.N)
    im = ax.imshow(m, cmap=cmap, norm=norm, aspect="auto", interpolation="nearest")
    bar = fig.colorbar(im, ax=ax, shrink=0.5, ticks=values, drawedges=True)
    bar.ax.set_yticklabels([label for _, label, _ in SIGN_LEVELS], fontsize=7)
    bar.ax.tick_params(length=0)


RASTER_COLOURS = {"nucleus2": "#238b45", "l5pt": "#08519c", "l5it": "#1f78b4", "readout": "#1f78b4",
                  "readout_z": "#6baed6", "interneuron": "#6a3d9a", "l23": "#e08214"}
"""Darker versions of the population colours, for spikes (thin marks)."""


def draw_raster(ax, res, circuit, head: int = 0, macro: int = 0, span: tuple | None = None,
                origin: float = 0.0) -> None:
    """Spikes of one macrocolumn (L2/3, interneurons, L5 IT, L5 PT; or the key-value-memory
    circuit's read-out cells) and of the nucleus-2 relays of the same token, on ``ax``.

    ``span``: ``(t0, t1)`` in s, the part of the run drawn (default all of it); ``origin`` (s):
    the run's time drawn as 0 (the start of the measurement window, say). The y range leaves
    :data:`RASTER_PAD` of the rows above and below, so that no spike mark is cut at an edge."""
    offset = 0
    ticks = []
    names = [p for p in ("nucleus2", "l5pt", "l5it", "readout", "readout_z", "interneuron", "l23")
             if p in circuit.populations]
    for name in names:
        pop = circuit.population(name)
        i, t = res.spikes.get(name, (np.array([], int), np.array([])))
        i, t = np.asarray(i, int), np.asarray(t, float)
        if span is not None:
            keep_t = (t >= span[0]) & (t < span[1])
            i, t = i[keep_t], t[keep_t]
        sel = np.ones(pop.N, bool)
        if "head" in pop.axes:
            sel &= pop.axis("head") == head
        if "i" in pop.axes:
            sel &= pop.axis("i") == macro
        if "token" in pop.axes:          # nucleus 2: the relay cells of token i = macro
            sel &= pop.axis("token") == macro
        cells = np.flatnonzero(sel)
        row = np.full(pop.N, -1)
        row[cells] = np.arange(cells.size)
        keep = row[i] >= 0
        ax.scatter(t[keep] - origin, offset + row[i[keep]], s=4, color=RASTER_COLOURS.get(name, "0.2"), marker="|",
                   linewidths=0.7)
        ticks.append((offset + (cells.size - 1) / 2, f"{name} ({cells.size})"))
        offset += cells.size + 3
    ax.set_yticks([p for p, _ in ticks])
    ax.set_yticklabels([s for _, s in ticks])
    top = offset - 3 - 1                 # the last row drawn
    pad = 1 + RASTER_PAD * max(top, 1)
    ax.set_ylim(-pad, top + pad)
    if span is not None:
        ax.set_xlim(span[0] - origin, span[1] - origin)
    ax.set_xlabel("time (s)")


RASTER_PAD = 0.03
"""Margin of a raster above its top row and below its bottom one, as a fraction of its rows."""


def raster(results_dir: str, circuit, head: int = 0, macro: int = 0):
    """Spikes of one macrocolumn (L2/3, interneurons, L5 IT, L5 PT) and of nucleus 2, from the
    start of the run: the warm-up, then the measurement window (a dotted line between them)."""
    res = load(results_dir)
    fig, ax = plt.subplots(figsize=(8, 4.5), constrained_layout=True)
    draw_raster(ax, res, circuit, head, macro)
    c = res.config
    warm = float(c.get("warmup") or 0.0)
    if warm:
        ax.axvline(warm, color="0.4", lw=0.8, ls=":", zorder=0)
    ax.set_xlabel("time from the start of the run (s)" + (f"; the window starts after {warm:g} s of warm-up (dotted)"
                                                         if warm else ""))
    note = f"\n{INTERNEURON_NOTE}" if "interneuron" in circuit.populations else ""
    ax.set_title(f"{res.level} level, macrocolumn {macro} of head {head} (n={c['n']}, dk={c['dk']}, "
                 f"dv={c['dv']}) and the nucleus-2 relays of token {macro}; warm-up {warm:g} s{note}")
    return fig


def error_scaling(time_dirs: dict, p_dirs: dict):
    """NRMSE and noise floor of ṽ and x̃ vs window length (one run, checkpoints) and vs read-out
    copies P, log–log, with the 1/sqrt(T) and 1/sqrt(P) expectations through the first point."""
    fig, ax = plt.subplots(1, 2, figsize=(8.5, 3.2), constrained_layout=True)
    for stage, col in (("v_tilde", PROJECTION_COLOURS["it_pt"]), ("x_tilde", PROJECTION_COLOURS["pt_out"])):
        for label, path in time_dirs.items():
            cps = read_json_numbers(os.path.join(path, "provenance.json"))["diagnostics"]["checkpoints"]
            T = np.array([c["T"] for c in cps])
            e = np.array([c["metrics"][stage]["nrmse"] for c in cps])
            f = np.array([c["metrics"][stage]["noise_floor"] for c in cps])
            ax[0].loglog(T, e, "o-", color=col, label=f"{symbol(stage)} NRMSE")
            ax[0].loglog(T, f, "s--", color=col, alpha=0.6, label=f"{symbol(stage)} floor")
            ax[0].loglog(T, e[0] * np.sqrt(T[0] / T), ":", color="0.5")
        P = np.array(sorted(p_dirs))
        e, f = [], []
        for p in P:
            met = read_json_numbers(os.path.join(p_dirs[p], "metrics.json"))
            e.append(met[stage]["nrmse"])
            f.append(met[stage]["noise_floor"])
        ax[1].loglog(P, e, "o-", color=col, label=f"{symbol(stage)} NRMSE")
        ax[1].loglog(P, f, "s--", color=col, alpha=0.6, label=f"{symbol(stage)} floor")
        ax[1].loglog(P, e[0] * np.sqrt(P[0] / P), ":", color="0.5")
    ax[0].set(xlabel="measurement window T (s)", ylabel="NRMSE", title="error vs simulated time (⋯ 1/√T)")
    ax[1].set(xlabel="read-out copies P (L5 PT, nucleus 2)", title="error vs neurons per dimension (⋯ 1/√P)")
    ax[0].set_xticks(T, [f"{t:g}" for t in T])
    ax[1].set_xticks(P, [f"{p:g}" for p in P])
    for a in ax:
        a.xaxis.set_minor_locator(plt.NullLocator())
        a.legend(fontsize=7)
    return fig


def counts_vs_n(circuit_counts: dict, ns):
    """Neurons and synapses of one head of the quadratic circuit vs n, read from the circuit
    counts (``{"d", "rows": [{circuit, n, d, neurons, synapses}]}``, counted from descriptions;
    see :func:`ctmhsa.sims.benchmarks.circuits.counts`) at the sizes ``ns``."""
    d = circuit_counts["d"]
    rows = {r["n"]: r for r in circuit_counts["rows"] if r["circuit"] == "quadratic"}
    missing = [n for n in ns if n not in rows]
    if missing:
        raise ValueError(f"circuit_counts: no quadratic counts for n = {missing}")
    neurons = [rows[n]["neurons"] for n in ns]
    synapses = [rows[n]["synapses"] for n in ns]
    fig, ax = plt.subplots(figsize=(4.2, 3.2), constrained_layout=True)
    ax.loglog(ns, neurons, "o-", label="neurons")
    ax.loglog(ns, synapses, "s-", label="synapses")
    ns = np.asarray(ns, float)
    ax.loglog(ns, neurons[-1] * (ns / ns[-1]) ** 2, ":", color="0.5", label="∝ n²")
    ax.axvline(33, color="0.7", lw=0.8)
    ax.text(33, ax.get_ylim()[0] * 2, " barrel\n n=33", fontsize=7)
    ax.set_xticks(ns, [f"{int(n)}" for n in ns], minor=False)
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.set(xlabel=f"tokens n (d = {d}, H = 1)", ylabel="neurons or synapses per head",
           title="quadratic circuit: size vs n")
    clear_legend(ax)
    return fig


def circuits_vs_n(runs: dict, count_rows: list[dict]):
    """Quadratic (Algorithm 1) vs linear key-value-memory circuit: (a) neurons and (b) synapses of
    one head vs n from descriptions, (c) build and run time and (d) read-out error vs n from runs.

    ``runs`` maps ``(circuit, n)`` to a results directory; ``count_rows`` holds
    ``{circuit, n, d, neurons, synapses}`` (see :func:`ctmhsa.sims.benchmarks.circuits.counts`)."""
    colours = {"quadratic": "#ff7f00", "linear": "#1f78b4"}
    fig, ax = plt.subplots(1, 4, figsize=(14, 3.3), constrained_layout=True)
    for kind, col in colours.items():
        rows = sorted((r for r in count_rows if r["circuit"] == kind), key=lambda r: r["n"])
        n = [r["n"] for r in rows]
        ax[0].loglog(n, [r["neurons"] for r in rows], "o-", color=col, ms=3, label=kind)
        ax[1].loglog(n, [r["synapses"] for r in rows], "o-", color=col, ms=3, label=kind)
        res = {n_: load(p) for (k, n_), p in sorted(runs.items()) if k == kind}
        ns = sorted(res)
        ax[2].plot(ns, [res[x].timings["build"] for x in ns], "s--", color=col, ms=3, label=f"{kind}: build")
        ax[2].plot(ns, [res[x].timings["run"] / (res[x].config["duration"] + res[x].config["warmup"])
                        for x in ns], "o-", color=col, ms=3, label=f"{kind}: run / bio s")
        for stage, mk in (("v_tilde", "o"), ("x_tilde", "s")):
            met = [res[x].metrics()[stage] for x in ns]
            ax[3].plot(ns, [m["nrmse"] for m in met], mk + "-", color=col, ms=3,
                       label=f"{kind}: {symbol(stage)}")
            ax[3].plot(ns, [m["noise_floor"] for m in met], ":", color=col, lw=0.8)
    d = count_rows[0]["d"]
    ax[0].set(title=f"(a) neurons per head (d = {d})", xlabel="tokens n")
    ax[1].set(title=f"(b) synapses per head (d = {d})", xlabel="tokens n")
    some = next(iter(runs.values()))
    c = load(some).config
    ax[2].set(title=f"(c) wall time (escape, d = {c['dk']})", xlabel="tokens n", ylabel="s")
    ax[3].set(title=f"(d) read-out error, {c['duration']:g} s (dotted: floors)", xlabel="tokens n",
              ylabel="NRMSE")
    for a in ax:
        a.title.set_fontsize(8)
        a.tick_params(labelsize=7)
    for a in ax:                # once every axes is sized: clear_legend lays the figure out
        clear_legend(a)         # inside the axes, clear of the data
    return fig


def laws(law_runs: dict):
    """Two-point-neuron laws on the L5 IT soma: (a) each law f(R, C) at C = 1 against the product
    R C, (b) its departure from attention (decoded ṽ, x̃ NRMSE vs the reference), (c) decoded x̃ vs
    exact per law. ``law_runs`` maps law name -> results directory (rate level, same head)."""
    fig, ax = plt.subplots(1, 3, figsize=(12, 3.4), constrained_layout=True)
    R = np.linspace(-2, 2, 201)
    for k, law in enumerate(law_runs):
        f = law_numpy(law)
        style = dict(color="k", lw=1.8, ls="--") if get_law(law).product else dict(lw=1.0)
        ax[0].plot(R, f(R, 1.0), label=law, **style)
    ax[0].set(title="(a) soma rate law f(R, C = 1) (rectified)", xlabel="basal R (value units)",
              ylabel="f / rate gain", ylim=(-0.2, 6.5))
    names = list(law_runs)
    met = {law: load(p).metrics() for law, p in law_runs.items()}
    x = np.arange(len(names))
    for off, stage in ((-0.2, "v_tilde"), (0.2, "x_tilde")):
        ax[1].bar(x + off, [max(met[n][stage]["nrmse"], 1e-16) for n in names], width=0.4, label=title(stage))
    ax[1].set_yscale("log")
    ax[1].set_xticks(x, names)
    ax[1].set(title="(b) departure from attention (rate level)", ylabel="NRMSE vs linear_mhsa")
    for law, p in law_runs.items():
        r = load(p)
        ax[2].scatter(r.reference_stages["x_tilde"].ravel(), r.stages["x_tilde"].ravel(), s=5, lw=0,
                      label=law, color="k" if get_law(law).product else None)
    lo, hi = ax[2].get_xlim()
    ax[2].plot([lo, hi], [lo, hi], color="0.6", lw=0.8, zorder=0)
    out = STAGE_TABLE["x_tilde"]
    ax[2].set(title=f"(c) decoded {out.symbol} vs exact {out.long}", xlabel=f"exact {out.symbol}",
              ylabel=f"decoded {out.symbol}")
    for a in ax:
        a.title.set_fontsize(8)
        a.tick_params(labelsize=7)
    for a in ax:                # once every axes is sized: clear_legend lays the figure out
        clear_legend(a)         # inside the axes, clear of the data
    return fig
