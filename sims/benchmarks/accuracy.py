"""``ctmhsa bench accuracy``: spiking attention against the exact reference, with noise floors.

Cases (``--cases``): ``barrel`` (n = 33, dk = dv = de = 33, H = 1), ``multihead`` (n = 8,
d = 8, H = 4), ``causal`` and ``cross`` (n = 6, d = 6, H = 2; cross with m = 4), and the
variants of issue 8 at the same size: ``unnormalised`` (no interneurons), ``skip`` (core
thalamus -> L5 PT, ``WS ~ N(0, 1/de)``), ``linear`` (the key-value-memory circuit) and
``linear_cross``; ``linear_barrel`` is the linear circuit at barrel size. For each level
(``--levels``) and population coding P (``--P``: copies of L5 PT and nucleus 2, or with
``--copies all`` of every population but the interneurons), one
run decodes every stage at the checkpoints (``--times``, s of measurement window) and reports
NRMSE, Pearson r and the spike-count noise floor; each run's ``worst_stage`` and ``worst_ratio``
(NRMSE / floor), and over the seeds of a case, level and P every stage's ratio pooled
(``pooled``: sqrt(Σ NRMSE² / Σ floor²), what a level leaves above its floor, free of one run's
scatter, with its 90 % interval over the inputs). With ``--spike-seeds K`` each input runs with K
spike seeds, and each stage's error is split into what the seeds share (``bias``: the error of
their mean, less what their spread leaves in it) and what they do not (``spread``, measured
against the floor the noise model predicts): a bias is the circuit's to remove, a spread above
the floor is the noise model's to explain (``decomposition``, pooled over inputs in ``split``).
Prints tables, writes JSON atomically. An input the encoder refuses (``OperatingRangeError``,
before anything is built) is listed under ``refused`` with its reason, and the other runs go on.
"""

from __future__ import annotations

import itertools
import os
import time

import numpy as np

from ctmhsa.circuits.builders import pathway
from ctmhsa.mapping.decode import nrmse_scale
from ctmhsa.mapping.operating import OperatingRangeError
from ctmhsa.neurons.levels import get_level
from ctmhsa.sims import simulate_mhsa
from ctmhsa.sims.config import problem_inputs
from ctmhsa.sims.io import atomic_write_json, versions

from .common import add_out_argument, count

__all__ = ["HELP", "CASES", "T95", "add_arguments", "copies", "run_case", "worst_stage", "pooled", "t95",
           "decompose", "split", "main"]

HELP = "spiking attention vs the reference over time and read-out copies, with noise floors"

CASES = {
    "barrel": dict(n=33, H=1, dk=33, dv=33, de=33),
    "multihead": dict(n=8, H=4, dk=8, dv=8, de=8),
    "causal": dict(n=6, H=2, dk=6, dv=6, de=6, causal=True),
    "cross": dict(n=6, m=4, H=2, dk=6, dv=6, de=6, cross=True),
    "unnormalised": dict(n=6, H=2, dk=6, dv=6, de=6, normalize=False),
    "skip": dict(n=6, H=2, dk=6, dv=6, de=6, skip=True),
    "linear": dict(n=6, H=2, dk=6, dv=6, de=6, circuit="linear"),
    "linear_cross": dict(n=6, m=4, H=2, dk=6, dv=6, de=6, cross=True, circuit="linear"),
    "linear_barrel": dict(n=33, H=1, dk=33, dv=33, de=33, circuit="linear"),
    # held-out shapes (never used while tuning a level): the tuned target, odd sizes, three heads
    "square8": dict(n=8, H=2, dk=8, dv=8, de=8),
    "odd": dict(n=7, H=3, dk=3, dv=5, de=6),
}


def add_arguments(parser) -> None:
    parser.add_argument("--cases", nargs="+", default=["multihead", "causal", "cross", "barrel"],
                        help=f"cases (default multihead causal cross barrel): {', '.join(CASES)}")
    parser.add_argument("--levels", nargs="+", default=["escape", "lif"], choices=["escape", "lif"],
                        help="fidelity levels (default escape lif)")
    parser.add_argument("--times", nargs="+", type=float, default=[1.0, 2.0, 5.0, 10.0],
                        help="measurement windows (s), from one run each (default 1 2 5 10)")
    parser.add_argument("--P", nargs="+", type=count, default=[1, 4, 10],
                        help="copies of L5 PT and nucleus 2 per dimension (default 1 4 10)")
    parser.add_argument("--copies", default="readout", choices=["readout", "all"],
                        help="P copies of the read-out (L5 PT, nucleus 2) or of every population but "
                             "the interneurons")
    parser.add_argument("--codegen", default="auto", choices=["auto", "numpy", "cython"],
                        help="Brian2 target (auto: Cython from 200k synapses)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0],
                        help="input and simulation seeds, one run each (default 0); seeds other than 0 "
                             "are held out from the tuning of every level")
    parser.add_argument("--spike-seeds", type=count, default=1,
                        help="spike seeds per input seed (default 1: the input's own); K > 1 runs seeds "
                             "s, s + 10000, ... and splits each stage's error into bias and spread")
    parser.add_argument("--phi", default="elu1", choices=["elu1", "relu", "softplus", "exp"],
                        help="feature map (default elu1)")
    parser.add_argument("--weight-scale", type=float, default=1.0,
                        help="WQ, WK, WV ~ N(0, scale^2/de) (default 1)")
    parser.add_argument("--device", default="runtime", choices=["runtime", "cpp_standalone"],
                        help="Brian2 device (default runtime); cpp_standalone takes one window (--times T)")
    parser.add_argument("--threads", type=int, default=0,
                        help="OpenMP threads of the cpp_standalone device (default 0: none)")
    parser.add_argument("--allow-slow", action="store_true", help="also barrel at the lif level")
    add_out_argument(parser, "bench_results/accuracy.json")


def copies(case: str, P: int, which: str = "readout") -> dict:
    """Population coding of a case: ``"readout"``: P copies of L5 PT and nucleus 2;
    ``"all"``: of every population that represents a dimension (all but the interneurons,
    whose pool of ``n_inh`` cells per macrocolumn is not a represented quantity)."""
    if which == "readout":
        return {"l5pt": P, "nucleus2": P}
    if which != "all":
        raise ValueError(f"--copies: expected 'readout' or 'all', got {which!r}")
    prob = dict(CASES[case])
    prob.pop("skip", None)
    c = pathway(prob.pop("n"), prob.pop("dk"), prob.pop("dv"), prob.pop("de"), **prob)
    return {p: P for p, pop in c.populations.items() if pop.cell_type != "interneuron"}


def run_case(case: str, level: str, P: int, times, seed: int = 0, codegen: str = "auto",
             which: str = "readout", phi: str = "elu1", weight_scale: float = 1.0,
             device: str = "runtime", threads: int = 0, spike_seed: int | None = None,
             stages_out: dict | None = None) -> dict:
    """One run: every stage's metrics at each window length in ``times`` (``which``: the
    populations with P copies, see :func:`copies`). ``seed`` draws the input and, unless
    ``spike_seed`` is given, the spikes; ``stages_out`` (a dict) receives the decoded and the
    exact stages of the full window (``"decoded"``, ``"reference"``: stage -> array)."""
    Pd = copies(case, P, which)
    prob = dict(CASES[case])
    opts = {k: prob.pop(k) for k in ("causal", "normalize", "circuit") if k in prob}
    skip = prob.pop("skip", False)
    x = problem_inputs(**prob, input_seed=seed, causal=opts.get("causal", False),
                       normalize=opts.get("normalize", True), weight_scale=weight_scale)
    WS = (np.random.default_rng(seed).normal(size=(prob["H"], prob["dv"], prob["de"])) / np.sqrt(prob["de"])
          if skip else None)
    times = sorted(times)
    t0 = time.perf_counter()
    res = simulate_mhsa(x["X"], x["WQ"], x["WK"], x["WV"], x["WO"], Y=x["Y"], WS=WS, **opts,
                        neuron=level, duration=times[-1], checkpoints=times[:-1],
                        seed=seed if spike_seed is None else spike_seed,
                        P=Pd, codegen=codegen, phi=phi, device=device,
                        **(dict(threads=threads) if device == "cpp_standalone" else {}))
    run = dict(case=case, level=level, P=P, copies=which, seed=seed,
               spike_seed=seed if spike_seed is None else spike_seed, device=device, phi=phi,
               weight_scale=weight_scale, neurons=res.counts["neurons"],
               synapses=res.counts["synapses"], wall_s=time.perf_counter() - t0,
               timings=res.timings, fano=res.diagnostics["fano"],
               checkpoints=res.diagnostics["checkpoints"])
    run["worst_stage"], run["worst_ratio"] = worst_stage(run)
    if stages_out is not None:
        stages_out["decoded"] = {k: np.asarray(v, float) for k, v in res.stages.items()}
        stages_out["reference"] = {k: np.asarray(v, float) for k, v in res.reference_stages.items()}
    return run


def worst_stage(run: dict) -> tuple[str, float]:
    """The stage of a run's full window farthest above its noise floor, and its NRMSE / floor
    (stages with an unknown or zero floor are skipped; none left: ``("", nan)``)."""
    m = run["checkpoints"][-1]["metrics"]
    ratios = {s: v["nrmse"] / v["noise_floor"] for s, v in m.items()
              if np.isfinite(v["noise_floor"]) and v["noise_floor"] > 0}
    if not ratios:
        return "", float("nan")
    stage = max(ratios, key=ratios.get)
    return stage, float(ratios[stage])


def pooled_ratios(metrics: list) -> dict:
    """Every stage's NRMSE over its noise floor pooled over runs of one input (``metrics``: each
    run's ``{stage: {"nrmse", "noise_floor"}}``): sqrt(Σ NRMSE² / Σ floor²); NaN where no floor
    informs it."""
    ratio = {}
    for st in metrics[0]:
        num = sum(m[st]["nrmse"] ** 2 for m in metrics)
        den = sum(m[st]["noise_floor"] ** 2 for m in metrics)
        ratio[st] = float(np.sqrt(num / den)) if np.isfinite(den) and den > 0 else float("nan")
    return ratio


T95 = {1: 6.314, 2: 2.920, 3: 2.353, 4: 2.132, 5: 2.015, 6: 1.943, 7: 1.895, 8: 1.860, 9: 1.833,
       10: 1.812, 12: 1.782, 15: 1.753, 20: 1.725, 30: 1.697, 60: 1.671, 120: 1.658}
"""Student's t at 95 % (one side) by degrees of freedom: the pooled ratios' 90 % intervals."""


def t95(df: int) -> float:
    """Student's t quantile at 95 % for ``df`` degrees of freedom (:data:`T95`, linear in 1/df
    between its entries; 1.645 beyond 120)."""
    if df < 1:
        raise ValueError(f"df: need at least 1 degree of freedom, got {df}")
    if df in T95:
        return T95[df]
    if df > 120:
        return 1.645
    ks = sorted(T95)
    hi = next(k for k in ks if k > df)
    lo = max(k for k in ks if k < df)
    w = (1 / df - 1 / hi) / (1 / lo - 1 / hi)
    return T95[hi] + w * (T95[lo] - T95[hi])


def pooled(runs: list) -> list:
    """Every stage's error against its floor pooled over the seeds of one case, level, P and device:
    sqrt(Σ NRMSE² / Σ floor²) at the full window. A single run's ratio scatters by its count
    noise, whose few degrees of freedom put some stage above 1.3 in about one held-out run of
    eight at the escape level, and would in about 45 of 120 lif runs exactly at their floors
    (docs/lif.md); the pooled ratio over seeds is what a level leaves above its floor (a bias,
    or noise the floor does not count: ``--spike-seeds`` tells them apart). It scatters too, by
    the same few degrees of freedom times the number of runs: ``interval`` is its 90 % interval
    over the inputs (:func:`_interval`: each input with all its spike seeds; NaN under three)."""
    groups = {}
    for r in runs:   # (a run without them: read-out copies, the runtime device)
        key = (r["case"], r["level"], r["P"], r.get("copies", "readout"), r.get("device", "runtime"))
        groups.setdefault(key, []).append(r)
    out = []
    for (case, level, P, which, device), rs in groups.items():
        metrics = [r["checkpoints"][-1]["metrics"] for r in rs]
        ratio = pooled_ratios(metrics)
        out.append(dict(case=case, level=level, P=P, copies=which, device=device, seeds=[r["seed"] for r in rs],
                        spike_seeds=[r.get("spike_seed", r["seed"]) for r in rs],
                        T=rs[0]["checkpoints"][-1]["T"], ratio=ratio,
                        interval=_interval([r["seed"] for r in rs], metrics, list(ratio))))
    return out


def _interval(inputs: list, metrics: list, stages: list) -> dict:
    """Each stage's pooled ratio's 90 % interval over ``inputs`` (see :func:`pooled`): the
    jackknife's standard error of the pooled ratio² (one input, with all its spike seeds, left
    out at a time) times Student's t at n - 1 degrees of freedom, the square root of its ends."""
    ids = list(dict.fromkeys(inputs))
    n = len(ids)
    if n < 3:
        return {st: [float("nan")] * 2 for st in stages}
    of = [[k for k, i in enumerate(inputs) if i == u] for u in ids]
    num = np.array([[sum(metrics[k][st]["nrmse"] ** 2 for k in ks) for st in stages] for ks in of])
    den = np.array([[sum(metrics[k][st]["noise_floor"] ** 2 for k in ks) for st in stages] for ks in of])
    with np.errstate(invalid="ignore", divide="ignore"):
        whole = num.sum(0) / den.sum(0)
        loo = (num.sum(0) - num) / (den.sum(0) - den)                 # (n, stages)
        se = np.sqrt((n - 1) / n * ((loo - loo.mean(0)) ** 2).sum(0))
    half = t95(n - 1) * se
    lo, hi = np.sqrt(np.maximum(whole - half, 0.0)), np.sqrt(whole + half)
    return {st: [float(a), float(b)] for st, a, b in zip(stages, lo, hi)}


def decompose(decoded: list, reference: dict, floors: list) -> dict:
    """One input's error per stage split over its K spike seeds into bias and spread.

    Parameters
    ----------
    decoded : list of dict
        Each spike seed's decoded stages (stage -> array), K >= 2.
    reference : dict
        The exact stages (stage -> array of the same shape).
    floors : list of dict
        Each run's noise floor per stage (NRMSE units); stages absent here are skipped.

    Returns
    -------
    dict
        Stage -> ``spread`` (the seeds' RMS deviation from their mean, unbiased, over the
        stage's NRMSE scale), ``bias`` (the error of the seeds' mean with the part their spread
        leaves in it, ``spread² / K``, taken out; 0 where that is negative), ``bias_sq`` (the same
        before the square root; negative values are the estimate's own scatter), ``floor`` (the
        runs' RMS floor), ``noise`` (``spread / floor``: the measured count noise over the one
        predicted) and ``resolution`` (``spread / sqrt(K)``: a bias much under it cannot be told
        from the seeds' scatter). Entries that are not finite in every seed are left out.
    """
    K = len(decoded)
    if K < 2:
        raise ValueError(f"decoded: need at least 2 spike seeds to split bias from spread, got {K}")
    out = {}
    for st in floors[0]:
        if st not in reference or any(st not in d for d in decoded):
            continue
        D = np.array([np.asarray(d[st], float).ravel() for d in decoded])
        ref = np.asarray(reference[st], float).ravel()
        ok = np.all(np.isfinite(D), 0) & np.isfinite(ref)
        if not ok.any():
            continue
        D, ref = D[:, ok], ref[ok]
        scale = nrmse_scale(ref)
        var = float(np.mean(np.var(D, 0, ddof=1))) / scale ** 2
        b2 = float(np.mean((D.mean(0) - ref) ** 2)) / scale ** 2 - var / K
        floor = float(np.sqrt(np.mean(np.square([f[st] for f in floors]))))
        out[st] = dict(spread=float(np.sqrt(var)), bias=float(np.sqrt(max(b2, 0.0))), bias_sq=b2, floor=floor,
                       resolution=float(np.sqrt(var / K)),
                       noise=float(np.sqrt(var) / floor) if floor > 0 else float("nan"))
    return out


def split(parts: list) -> list:
    """The decompositions of a case, level, P and device pooled over their inputs: per stage the
    mean over inputs of ``bias_sq / floor²`` and of ``noise²`` (each input's bias² and count-noise
    variance in units of its floor², so that ``bias_sq + noise_sq`` is what the pooled ratio² of
    the same runs estimates), with ``inputs`` the count."""
    groups = {}
    for p in parts:
        groups.setdefault((p["case"], p["level"], p["P"], p.get("device", "runtime")), []).append(p)
    out = []
    for (case, level, P, device), ps in groups.items():
        stages = {}
        for st in ps[0]["stages"]:
            ds = [p["stages"][st] for p in ps if st in p["stages"] and p["stages"][st]["floor"] > 0]
            if ds:
                stages[st] = dict(bias_sq=float(np.mean([d["bias_sq"] / d["floor"] ** 2 for d in ds])),
                                  noise_sq=float(np.mean([d["noise"] ** 2 for d in ds])), inputs=len(ds))
        out.append(dict(case=case, level=level, P=P, device=device, seeds=[p["seed"] for p in ps], stages=stages))
    return out


def _pooled_table(groups: list) -> str:
    stages = list(dict.fromkeys(st for g in groups for st in g["ratio"]))
    rows = [f"  {'case':<13} {'level':<7} {'P':>3} {'runs':>5} " + "".join(f"{st:>17}" for st in stages)]
    for g in groups:
        cells = []
        for st in stages:
            lo, hi = g.get("interval", {}).get(st, (float("nan"),) * 2)
            cell = "" if st not in g["ratio"] else f"{g['ratio'][st]:.2f}" + (
                f" ({lo:.2f}-{hi:.2f})" if np.isfinite(lo) and np.isfinite(hi) else "")
            cells.append(f"{cell:>17}")
        rows.append(f"  {g['case']:<13} {g['level']:<7} {g['P']:>3} {len(g['seeds']):>5} " + "".join(cells))
    return "\n".join(rows)


def _pair_table(groups: list, keys: tuple, head: str, pair) -> str:
    """One row per group: its case and level, the columns ``keys`` (``(title, width, value of a
    group)``) and two numbers per stage, titled ``head``: ``pair(d)`` of the stage's dict (``None``:
    left blank)."""
    stages = list(dict.fromkeys(st for g in groups for st in g["stages"]))
    lead = [f"  {'case':<13} {'level':<7} " + " ".join(f"{t:>{w}}" for t, _, w in keys) + " ",
            f"  {'':<13} {'':<7} " + " ".join(f"{'':>{w}}" for _, _, w in keys) + " "]
    rows = [lead[0] + "".join(f"{st:>13}" for st in stages), lead[1] + "".join(f"{head:>13}" for _ in stages)]
    for g in groups:
        cells = [pair(g["stages"][st]) if st in g["stages"] else None for st in stages]
        rows.append(f"  {g['case']:<13} {g['level']:<7} " + " ".join(f"{value(g):>{w}}" for _, value, w in keys) + " "
                    + "".join(f"{'':>13}" if c is None else f"{c[0]:>7.2f}{c[1]:>6.2f}" for c in cells))
    return "\n".join(rows)


def _decomposition_table(parts: list) -> str:
    return _pair_table(parts, (("seed", lambda p: p["seed"], 5), ("K", lambda p: len(p["spike_seeds"]), 3)),
                       "bias noise", lambda d: (d["bias"] / d["floor"], d["noise"]) if d["floor"] > 0 else None)


def _split_table(groups: list) -> str:
    return _pair_table(groups, (("P", lambda g: g["P"], 3), ("inputs", lambda g: len(g["seeds"]), 6)),
                       "bias² noise²", lambda d: (d["bias_sq"], d["noise_sq"]))


def _table(run: dict) -> str:
    stages = list(run["checkpoints"][0]["metrics"])
    head = f"  {'stage':<8}" + "".join(f" {'T=' + format(cp['T'], 'g') + ' s':>26}" for cp in run["checkpoints"])
    rows = [head, f"  {'':<8}" + "".join(f" {'NRMSE    r      floor':>26}" for _ in run["checkpoints"])]
    for st in stages:
        cells = []
        for cp in run["checkpoints"]:
            m = cp["metrics"][st]
            cells.append(f" {m['nrmse']:>8.3f} {m['r']:>7.4f} {m['noise_floor']:>8.3f} ")
        rows.append(f"  {st:<8}" + "".join(f"{c:>27}" for c in cells))
    return "\n".join(rows)


def _write(path, runs, refused, parts=()):
    atomic_write_json(path, dict(benchmark="accuracy", versions=versions(), runs=runs, refused=refused,
                                 pooled=pooled(runs), decomposition=list(parts), split=split(parts)))


def main(args) -> int:
    unknown = sorted(set(args.cases) - set(CASES))
    if unknown:
        raise ValueError(f"--cases: unknown case(s) {unknown}; expected some of {sorted(CASES)}")
    if args.device == "cpp_standalone" and len(args.times) != 1:
        raise ValueError("--times: the cpp_standalone device reads one window; give one value")
    runs, refused, parts, which = [], [], [], args.copies
    for case in args.cases:
        for level in args.levels:
            if case == "barrel" and get_level(level).lif and not args.allow_slow:
                print("skipping barrel/lif (about 6x the escape cost per biological second); --allow-slow runs it")
                continue
            for P, seed in itertools.product(args.P, args.seeds):
                kept = []
                for r in range(args.spike_seeds):
                    spikes = seed + 10000 * r
                    stages = {} if args.spike_seeds > 1 else None
                    try:
                        run = run_case(case, level, P, args.times, seed=seed, codegen=args.codegen, which=which,
                                       phi=args.phi, weight_scale=args.weight_scale, device=args.device,
                                       threads=args.threads, spike_seed=spikes, stages_out=stages)
                    except OperatingRangeError as exc:   # refused before building: recorded, the rest runs
                        refused.append(dict(case=case, level=level, P=P, seed=seed, reason=str(exc)))
                        print(f"\n{case} / {level} / P = {P}, seed {seed}: refused: {exc}", flush=True)
                        _write(args.out, runs, refused, parts)
                        break
                    runs.append(run)
                    print(f"\n{case} / {level} / {'read-out' if which == 'readout' else 'all'} copies "
                          f"P = {P}, seed {seed}{f' (spikes {spikes})' if spikes != seed else ''}, phi {args.phi}, "
                          f"weight scale {args.weight_scale:g}: {run['neurons']:,} neurons, "
                          f"{run['synapses']:,} synapses, {run['wall_s']:.0f} s wall "
                          f"(compile {run['timings']['compile']:.0f} s, run {run['timings']['run']:.0f} s)")
                    print(_table(run), flush=True)
                    if stages is not None:
                        kept.append((run, stages))
                    _write(args.out, runs, refused, parts)
                if len(kept) > 1:
                    floors = [{st: m["noise_floor"] for st, m in run["checkpoints"][-1]["metrics"].items()}
                              for run, _ in kept]
                    parts.append(dict(case=case, level=level, P=P, device=args.device, seed=seed,
                                      spike_seeds=[run["spike_seed"] for run, _ in kept],
                                      T=kept[0][0]["checkpoints"][-1]["T"],
                                      stages=decompose([st["decoded"] for _, st in kept], kept[0][1]["reference"],
                                                       floors)))
                    _write(args.out, runs, refused, parts)
    if runs:
        print("\nNRMSE / floor pooled over seeds (full window): sqrt(Σ NRMSE² / Σ floor²), "
              "its 90 % interval over inputs (jackknife, Student's t)")
        print(_pooled_table(pooled(runs)))
    if parts:
        print("\nBias and noise over spike seeds, each over the stage's floor: bias (the seeds' mean error "
              "less their spread's share; one under noise / sqrt(K) is not told from 0), noise (their spread)")
        print(_decomposition_table(parts))
        print("\nPooled over inputs, in units of the floor²: bias² (negative: the estimate's scatter) and noise²")
        print(_split_table(split(parts)))
    print(f"\nwritten {os.path.abspath(args.out)}")
    return 0
