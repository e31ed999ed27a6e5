"""``ctmhsa bench timescale``: how fast the circuit follows a stream of token sets.

The default problem of ``ctmhsa run`` (n = 8 tokens, dk = dv = de = 8, H = 2, escape level;
weights from input seed 0, :func:`ctmhsa.sims.config.problem_inputs`) is shown held-out token
sets: ``X ~ N(0, 1)`` drawn by the same generator from input seeds 1, 2, ..., T. Two parts:

- accuracy vs presentation time: for every presentation time (default 0.05, 0.1, 0.2, 0.5 s)
  and population-coding factor P (neurons per represented dimension, default 1, 10, 30),
  x̃'s NRMSE and Pearson r against the exact output, per presentation, median over the
  presentations after the first, for

  * ``streamed``: the T sets presented one after another to one built circuit (``X`` of shape
    ``(T, n, de)``, ``presentation=``), each decoded from its window ``[lag, presentation)``
    after its start (:func:`ctmhsa.sims.options.decode_lag`);
  * ``static``: one set per freshly built circuit, warmed up on it (``--warmup``, 0.5 s), then
    decoded from the same window (``--static matched``, a stream of that one set) or from
    ``duration = presentation`` after the warm-up (``--static full``; a presentation below the
    level's minimum window, 0.1 s, is then skipped).

  Every circuit is built for the declared range of all T sets (``input_range``), so static and
  streamed circuits are the same network: only what it saw before the window differs. The
  ``ratio`` column is the median over those sets of streamed / static NRMSE, set by set.
- latency: a stream of two sets with a long presentation (0.4 s). At the escape level the
  nucleus-2 spikes (ON minus OFF cells, averaged over the P copies and ``--latency-seeds``
  seeds) are counted in 5 ms bins and decoded to x̃(t), smoothed (Gaussian, sigma 5 ms) and
  projected onto the change ``x̃_ref[1] - x̃_ref[0]``; the fraction of the change is 0 at the
  first presentation's plateau and 1 at the second's (means over the last half of each). The
  times from the switch to 50 % and 90 % of the change are reported, and the same at the rate
  level, sampled every step (deterministic: the circuit's intrinsic latency).

Prints a table and writes JSON; the command line then draws the figure from the JSON
(:func:`ctmhsa.figures.timescale.draw_timescale`; redraw with ``python -m ctmhsa.figures.timescale
JSON [PNG]``). ``--quick`` is a smoke test.
"""

from __future__ import annotations

import os
import time

import numpy as np

from ctmhsa.neurons.models import FIRING
from ctmhsa.neurons.params import DEFAULT_PARAMS, HIGH_CONDUCTANCE
from ctmhsa.sims.io import versions
from ctmhsa.sims.progress import progress

from .common import add_out_argument, count, finish, shorten, square_problem, warnings_into

FIGURE = "ctmhsa.figures.timescale"
"""The module whose ``draw(json_path)`` the command line calls after the run (figures only read data)."""

__all__ = ["HELP", "add_arguments", "settings", "held_out_tokens", "accuracy_row", "paired_ratio", "escape_latency",
           "rate_latency", "crossing", "main", "FIGURE", "QUICK_MARK", "shorten"]

HELP = "streams of token sets: x̃ error vs presentation time and P (streamed vs static), latency to a switch"

N, D, H = 8, 8, 2          # the default problem of ``ctmhsa run`` (sims/configs/default.toml)

FULL = dict(presentations=[0.05, 0.1, 0.2, 0.5], P=[1, 10, 30], T=6, latency_P=30, latency_seeds=4,
            latency_presentation=0.4)
QUICK = dict(presentations=[0.05, 0.1], P=[1], T=2, latency_P=1, latency_seeds=1, latency_presentation=0.2)


def add_arguments(parser) -> None:
    parser.add_argument("--presentations", type=float, nargs="+", default=None,
                        help="presentation times, s (default 0.05 0.1 0.2 0.5)")
    parser.add_argument("--P", type=count, nargs="+", default=None,
                        help="population-coding factors, neurons per represented dimension (default 1 10 30; "
                             "list more to add them, e.g. --P 1 10 30 100)")
    parser.add_argument("--T", type=int, default=None, help="token sets per stream (default 6)")
    parser.add_argument("--warmup", type=float, default=0.5, help="warm-up before the first presentation, s "
                                                                  "(default 0.5)")
    parser.add_argument("--static", choices=("matched", "full", "none"), default="matched",
                        help="static runs decoded from the streamed window [lag, presentation) (matched, "
                             "default) or from duration = presentation after the warm-up (full); none: "
                             "streams only")
    parser.add_argument("--seed", type=int, default=0, help="simulation seed (default 0)")
    parser.add_argument("--firing", choices=FIRING, default="poisson",
                        help="how the escape cells fire (default poisson; population: perfect integrators, "
                             "each dimension's copies in turn, ctmhsa.neurons.models.integrator_model)")
    parser.add_argument("--high-conductance", action="store_true",
                        help="5 ms somatic and dendritic time constants (ctmhsa.neurons.params.HIGH_CONDUCTANCE)")
    parser.add_argument("--latency-P", type=int, default=None, help="P of the escape latency run (default 30)")
    parser.add_argument("--latency-seeds", type=int, default=None,
                        help="seeds averaged in the escape latency trace (default 4)")
    parser.add_argument("--latency-presentation", type=float, default=None,
                        help="presentation of the latency runs, s (default 0.4)")
    parser.add_argument("--bin", type=float, default=0.005, help="spike-count bin of the latency trace, s "
                                                                "(default 0.005)")
    parser.add_argument("--smooth", type=float, default=0.005,
                        help="Gaussian smoothing (sigma, s) of the latency trace; 0: none (default 0.005)")
    parser.add_argument("--rate-dt", type=float, default=0.0005,
                        help="step of the rate-level latency run, s (default 0.0005)")
    parser.add_argument("--no-latency", action="store_true", help="skip the latency runs")
    parser.add_argument("--codegen", default="auto", choices=["auto", "numpy", "cython"],
                        help="Brian2 target (auto: Cython from 200k synapses)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: presentations 0.05 0.1 s, P 1, T 2, latency P 1 with one seed, 0.2 s")
    parser.add_argument("--no-figure", action="store_true", help="do not draw the figure")
    add_out_argument(parser, "bench_results/timescale.json")


def settings(args) -> dict:
    """The grid of a run: flags given, else the ``--quick`` or full defaults."""
    base = QUICK if args.quick else FULL
    s = {k: (getattr(args, k) if getattr(args, k) is not None else v) for k, v in base.items()}
    if s["T"] < 2:
        raise ValueError(f"--T: a stream needs 2 token sets or more (the first is not counted), got {s['T']}")
    if any(p < 1 for p in s["P"]) or s["latency_P"] < 1 or s["latency_seeds"] < 1:
        raise ValueError("--P, --latency-P, --latency-seeds: expected integers >= 1")
    return s


def held_out_tokens(T: int, first_seed: int = 1) -> np.ndarray:
    """``T`` token sets ``(T, n, de)`` of the default problem's distribution (``X ~ N(0, 1)`` from
    :func:`ctmhsa.sims.config.problem_inputs`), input seeds ``first_seed ... first_seed + T - 1``:
    the weights' seed is 0, so these are not the tokens of ``ctmhsa run``."""
    return np.stack([square_problem(N, D, H, seed=first_seed + k)["X"] for k in range(T)])


def _weights() -> dict:
    x = square_problem(N, D, H, seed=0)
    return {k: x[k] for k in ("WQ", "WK", "WV", "WO")}


def _summary(metrics: list[dict]) -> dict:
    """Median NRMSE, r and noise floor of x̃ over presentations (``None``: skipped), and the
    worst presentation's NRMSE and r."""
    kept = [m for m in metrics if m is not None]
    med = {k: float(np.median([m[k] for m in kept])) if kept else float("nan") for k in ("nrmse", "r", "noise_floor")}
    return dict(nrmse_median=med["nrmse"], r_median=med["r"], noise_floor_median=med["noise_floor"],
                nrmse_max=float(max(m["nrmse"] for m in kept)) if kept else float("nan"),
                r_min=float(min(m["r"] for m in kept)) if kept else float("nan"))


def _x_tilde(met: dict) -> dict:
    m = met["x_tilde"]
    return dict(nrmse=float(m["nrmse"]), r=float(m["r"]), noise_floor=float(m.get("noise_floor", float("nan"))))


def accuracy_row(mode: str, Xs: np.ndarray, W: dict, presentation: float, P: int, warmup: float, seed: int,
                 codegen: str = "auto", static: str = "matched", **cells) -> dict:
    """x̃'s error per presentation of ``Xs`` (``(T, n, de)``), streamed through one circuit or
    one set per circuit (``mode="static"``); medians over the presentations after the first.
    The warnings of the runs are kept in the row (``warnings``), not printed. ``cells``: options
    of the cells (``firing``, ``params``)."""
    from ctmhsa.maths.inputs import InputRange
    from ctmhsa.sims import simulate_mhsa
    from ctmhsa.sims.options import CircuitOptions, min_window

    if mode not in ("streamed", "static"):
        raise ValueError(f"mode: expected 'streamed' or 'static', got {mode!r}")
    kw = dict(neuron="escape", P=P, warmup=warmup, codegen=codegen, input_range=InputRange.from_tokens(Xs), **W, **cells)
    t_min = min_window(CircuitOptions(neuron="escape"), 0.001)[0]
    t0 = time.perf_counter()
    per, counts, window, note, warned = [], None, None, None, []
    with warnings_into(warned):
        if mode == "streamed":
            res = simulate_mhsa(Xs, presentation=presentation, seed=seed, **kw)
            per = [_x_tilde(m) for m in res.presentation_metrics()]
            counts, window = res.counts, list(res.stream["window"])
        for k in range(Xs.shape[0]) if mode == "static" else ():
            if static == "full" and presentation < t_min * (1 - 1e-9):
                per.append(None)
                note = f"skipped: duration {presentation:g} s is below the minimum window {t_min:g} s"
                continue
            if static == "full":
                res = simulate_mhsa(Xs[k], duration=presentation, seed=seed + 1 + k, **kw)
                met, window = res.metrics(), [0.0, presentation]
            else:
                res = simulate_mhsa(Xs[k:k + 1], presentation=presentation, seed=seed + 1 + k, **kw)
                met, window = res.presentation_metrics()[0], list(res.stream["window"])
            per.append(_x_tilde(met))
            counts = res.counts
    wall = time.perf_counter() - t0
    return dict(mode=mode, presentation=presentation, P=P, T=int(Xs.shape[0]),
                neurons=None if counts is None else int(counts["neurons"]),
                synapses=None if counts is None else int(counts["synapses"]),
                window=window, wall_s=wall, **_summary(per[1:]), per_presentation=per, note=note, warnings=warned)


def paired_ratio(streamed: dict, static: dict) -> float:
    """Median over the token sets after the first of streamed NRMSE / static NRMSE, set by set
    (the sets differ in difficulty far more than the two modes do; NaN where static skipped all)."""
    ratios = [a["nrmse"] / b["nrmse"] for a, b in zip(streamed["per_presentation"][1:], static["per_presentation"][1:])
              if a is not None and b is not None]
    return float(np.median(ratios)) if ratios else float("nan")


def crossing(t: np.ndarray, f: np.ndarray, level: float) -> float:
    """First time ``t >= 0`` at which ``f`` reaches ``level`` (linear between samples; NaN if never)."""
    idx = np.flatnonzero((t >= 0) & (f >= level))
    if idx.size == 0:
        return float("nan")
    i = int(idx[0])
    if i == 0 or f[i - 1] >= level:      # already there at the switch
        return float(max(t[i], 0.0))
    a, b = f[i - 1], f[i]
    return float(max(t[i - 1] + (level - a) / (b - a) * (t[i] - t[i - 1]), 0.0))


def _fraction(t: np.ndarray, x: np.ndarray, d: np.ndarray, presentation: float) -> dict:
    """Projection of the decoded ``x (len(t), n, de)`` onto the change ``d``, and its fraction of
    the change: 0 at the mean over the last half of the presentation before the switch (t < 0),
    1 at the mean over the last half of the one after."""
    u = d / np.linalg.norm(d)
    proj = np.tensordot(x, u, axes=([1, 2], [0, 1]))
    before = (t >= -0.5 * presentation) & (t < 0)
    after = t >= 0.5 * presentation
    a, b = float(proj[before].mean()), float(proj[after].mean())
    return dict(proj=proj, fraction=(proj - a) / (b - a), plateau_before=a, plateau_after=b)


def _gauss(y: np.ndarray, sigma_bins: float) -> np.ndarray:
    if sigma_bins <= 0:
        return y.copy()
    h = int(np.ceil(4 * sigma_bins))
    k = np.exp(-0.5 * (np.arange(-h, h + 1) / sigma_bins) ** 2)
    num = np.convolve(y, k, mode="same")
    return num / np.convolve(np.ones_like(y), k, mode="same")      # edges: the kernel's part inside


def escape_latency(X2: np.ndarray, W: dict, presentation: float, P: int, seeds: int, warmup: float,
                   bin_s: float = 0.005, smooth_s: float = 0.005, seed: int = 0, codegen: str = "auto",
                   **cell_options) -> dict:
    """The escape level's decoded x̃(t) around the switch between the two sets ``X2``: nucleus-2
    spikes counted in ``bin_s`` bins (the two presentations, aligned on the switch), decoded as
    the window rates are (ON - OFF, copies averaged), averaged over ``seeds`` runs, smoothed.
    ``cell_options``: options of the cells (``firing``, ``params``)."""
    from ctmhsa.mapping.decode import signed_rate
    from ctmhsa.maths.inputs import InputRange
    from ctmhsa.sims import build_mhsa

    t0 = time.perf_counter()
    xs, neurons, spikes, warned = [], None, 0, []
    for s in range(seeds):
        sim = build_mhsa(X2, neuron="escape", presentation=presentation, P=P, warmup=warmup, seed=seed + s,
                         codegen=codegen, record_spikes=("nucleus2",), input_range=InputRange.from_tokens(X2), **W,
                         **cell_options)
        pop, code, dt = sim.circuit.populations["nucleus2"], sim.encoding.codes["x_tilde"], sim.run_options.dt
        per_bin = int(round(bin_s / dt))          # spikes fall on steps: bins of whole steps, no edge to round
        if per_bin < 1 or abs(per_bin * dt - bin_s) > 1e-9:
            raise ValueError(f"--bin: {bin_s:g} s must be a whole number of steps dt = {dt:g} s")
        nb = int(round(presentation / bin_s))
        with warnings_into(warned):
            res = sim.run()
        cells, times = res.spikes["nucleus2"]
        spikes += len(cells)
        step = np.round((np.asarray(times) - res.stream["starts"][1]) / dt).astype(int)   # steps from the switch
        b = np.floor_divide(step, per_bin) + nb                  # bin 0 starts one presentation before the switch
        ok = (b >= 0) & (b < 2 * nb)
        counts = np.zeros((pop.N, 2 * nb))
        np.add.at(counts, (np.asarray(cells)[ok], b[ok]), 1.0)
        xs.append(np.stack([code.decode(signed_rate(pop, counts[:, j] / bin_s)) for j in range(2 * nb)]))
        neurons, ref = int(res.counts["neurons"]), res.reference
    x = np.mean(xs, axis=0)
    t = (np.arange(2 * nb) - nb + 0.5) * bin_s                 # bin centres, s from the switch
    d = ref[1] - ref[0]
    fr = _fraction(t, x, d, presentation)
    smooth = _gauss(fr["fraction"], smooth_s / bin_s)
    u = d / np.linalg.norm(d)
    each = [_gauss(_fraction(t, xk, d, presentation)["fraction"], smooth_s / bin_s) for xk in xs]   # one seed each
    return dict(per_seed_t50=[crossing(t, f, 0.5) for f in each], per_seed_t90=[crossing(t, f, 0.9) for f in each],
                level="escape", P=P, seeds=seeds, presentation=presentation, bin_s=bin_s, smooth_s=smooth_s,
                neurons=neurons, nucleus2_spikes=int(spikes), t=t.tolist(), fraction_raw=fr["fraction"].tolist(),
                fraction=smooth.tolist(), t50=crossing(t, smooth, 0.5), t90=crossing(t, smooth, 0.9),
                plateau_before=fr["plateau_before"], plateau_after=fr["plateau_after"],
                reference_before=float((ref[0] * u).sum()), reference_after=float((ref[1] * u).sum()),
                warnings=warned, wall_s=time.perf_counter() - t0)


def rate_latency(X2: np.ndarray, W: dict, presentation: float, dt: float = 0.0005, codegen: str = "auto",
                 params=None) -> dict:
    """The rate level's decoded x̃(t) around the switch between the two sets ``X2``, read from
    nucleus 2 at the end of every step (deterministic: the circuit's intrinsic latency)."""
    import brian2 as b2

    from ctmhsa.mapping.decode import signed_rate
    from ctmhsa.maths.inputs import InputRange
    from ctmhsa.sims import build_mhsa

    t0 = time.perf_counter()
    sim = build_mhsa(X2, neuron="rate", presentation=presentation, dt=dt, codegen=codegen,
                     input_range=InputRange.from_tokens(X2), **W, **({} if params is None else dict(params=params)))
    pop, code, built = sim.circuit.populations["nucleus2"], sim.encoding.codes["x_tilde"], sim.runner.built
    ts, xs = [], []

    def sample(t):   # at a step's end: the state at t + dt
        ts.append(float(np.ravel(t[:])[0]) + dt)
        xs.append(code.decode(signed_rate(pop, built.values("nucleus2", "r"))))

    sim.network.add(b2.NetworkOperation(sample, clock=built.clock, when="end", order=999, name="timescale_trace"))
    warned = []
    with warnings_into(warned):
        res = sim.run()
    switch = res.stream["starts"][1]
    t, x = np.asarray(ts) - switch, np.stack(xs)
    keep = t >= -presentation - 1e-12
    t, x = t[keep], x[keep]
    d = res.reference[1] - res.reference[0]
    fr = _fraction(t, x, d, presentation)
    u = d / np.linalg.norm(d)
    return dict(level="rate", dt=dt, presentation=presentation, neurons=int(res.counts["neurons"]), t=t.tolist(),
                fraction=fr["fraction"].tolist(), t50=crossing(t, fr["fraction"], 0.5),
                t90=crossing(t, fr["fraction"], 0.9), plateau_before=fr["plateau_before"],
                plateau_after=fr["plateau_after"], reference_before=float((res.reference[0] * u).sum()),
                reference_after=float((res.reference[1] * u).sum()), warnings=warned,
                wall_s=time.perf_counter() - t0)


def _ms(x) -> str:
    return "   -" if x is None or not np.isfinite(x) else f"{1e3 * x:4.0f}"


def _f(x, fmt) -> str:
    return "-" if x is None or not np.isfinite(x) else format(x, fmt)


_NO_ROW = dict(nrmse_median=float("nan"), r_median=float("nan"), noise_floor_median=float("nan"), wall_s=0.0)
"""The static columns of a run without static rows (``--static none``)."""


QUICK_MARK = "QUICK (not the documented setting)"
"""First line of a ``--quick`` run's table: its grid is a smoke test's, its numbers not the benchmark's."""


def _print_table(doc: dict) -> None:
    rows = {(r["mode"], r["P"], r["presentation"]): r for r in doc["rows"]}
    if doc.get("quick"):
        print(f"{QUICK_MARK}: a smoke test (presentations {', '.join(f'{p:g}' for p in doc['presentations'])} s, "
              f"P {', '.join(map(str, doc['P']))}, T {doc['T']}); its errors are not the benchmark's: run without "
              f"--quick for those")
    cells = f"firing {doc.get('firing', 'poisson')}, tau_m {1e3 * doc.get('params', {}).get('tau_m', 0.01):g} ms"
    print(f"x̃ vs exact attention, median over presentations 2..{doc['T']} (escape level, {cells}, n={N}, "
          f"dk=dv=de={D}, H={H}; static: {doc['static']} window; ratio: median over sets of streamed / static NRMSE; "
          f"worst: the largest streamed NRMSE and smallest r of a presentation)")
    print(f"  {'P':>3} {'neurons':>8} {'pres. s':>7} {'window s':>11} | {'streamed NRMSE':>14} {'r':>6} {'floor':>6} "
          f"{'worst':>12} | "
          f"{'static NRMSE':>12} {'r':>6} {'floor':>6} | {'ratio':>5} | {'wall s':>13}")
    for P in doc["P"]:
        for p in doc["presentations"]:
            s, c = rows.get(("streamed", P, p)), rows.get(("static", P, p), _NO_ROW)
            w = s["window"] if s else [float("nan")] * 2
            print(f"  {P:>3} {s['neurons'] if s else 0:>8,} {p:>7g} {w[0]:>5.3f}-{w[1]:<5.3f} | "
                  f"{_f(s['nrmse_median'], '.3f'):>14} {_f(s['r_median'], '.3f'):>6} {_f(s['noise_floor_median'], '.3f'):>6} "
                  f"{_f(s.get('nrmse_max'), '.3f'):>5}/{_f(s.get('r_min'), '.4f'):>6} | "
                  f"{_f(c['nrmse_median'], '.3f'):>12} {_f(c['r_median'], '.3f'):>6} {_f(c['noise_floor_median'], '.3f'):>6} | "
                  f"{_f(s.get('paired_ratio_median'), '.2f'):>5} | {s['wall_s']:>5.1f} + {c['wall_s']:>5.1f}")
    lat = doc.get("latency") or {}
    if lat:
        print("latency from the switch to 50 % / 90 % of the change of x̃ (projected on x̃_ref[1] - x̃_ref[0]):")
        if "rate" in lat:
            r = lat["rate"]
            print(f"  rate   (deterministic, dt {1e3 * r['dt']:g} ms):                     "
                  f"{_ms(r['t50'])} / {_ms(r['t90'])} ms")
        if "escape" in lat:
            e = lat["escape"]
            spread = ""
            if e["seeds"] > 1:
                lo = [1e3 * np.nanmin(np.asarray(e[f"per_seed_t{q}"], float)) for q in (50, 90)]
                hi = [1e3 * np.nanmax(np.asarray(e[f"per_seed_t{q}"], float)) for q in (50, 90)]
                spread = f"  (single seeds: {lo[0]:.0f}-{hi[0]:.0f} / {lo[1]:.0f}-{hi[1]:.0f} ms)"
            print(f"  escape (P={e['P']}, {e['seeds']} seed(s), {1e3 * e['bin_s']:g} ms bins, sigma "
                  f"{1e3 * e['smooth_s']:g} ms): {_ms(e['t50'])} / {_ms(e['t90'])} ms{spread}")


def main(args) -> int:
    s = settings(args)
    Xs = held_out_tokens(s["T"])
    W = _weights()
    t_all = time.perf_counter()
    params = HIGH_CONDUCTANCE if args.high_conductance else DEFAULT_PARAMS
    cells = dict(firing=args.firing, params=params)
    doc = dict(benchmark="timescale", quick=bool(args.quick), n=N, d=D, H=H, level="escape",
               firing=args.firing, params=params.to_dict(),
               weights_input_seed=0, token_input_seeds=list(range(1, s["T"] + 1)), T=s["T"],
               presentations=s["presentations"], P=s["P"], warmup=args.warmup, seed=args.seed, static=args.static,
               codegen=args.codegen, rows=[], latency={}, versions=versions(), cpus=os.cpu_count())
    modes = ("streamed",) if args.static == "none" else ("streamed", "static")
    grid = [(P, p, mode) for P in s["P"] for p in s["presentations"] for mode in modes]
    for P, p, mode in progress(grid, desc="bench timescale", unit="run"):
        doc["rows"].append(accuracy_row(mode, Xs, W, p, P, args.warmup, args.seed, args.codegen, args.static, **cells))
        if mode == "static":   # after its streamed row
            doc["rows"][-2]["paired_ratio_median"] = paired_ratio(doc["rows"][-2], doc["rows"][-1])
    if not args.no_latency:
        X2 = Xs[:2]
        doc["latency"]["rate"] = rate_latency(X2, W, s["latency_presentation"], args.rate_dt, args.codegen, params)
        doc["latency"]["escape"] = escape_latency(X2, W, s["latency_presentation"], s["latency_P"],
                                                  s["latency_seeds"], args.warmup, args.bin, args.smooth,
                                                  args.seed, args.codegen, **cells)
    doc["wall_s"] = time.perf_counter() - t_all
    print()
    _print_table(doc)
    finish(doc, doc["rows"] + list(doc["latency"].values()), args.out)
    return 0   # the figure is drawn from the JSON by ctmhsa.figures.timescale (FIGURE)
