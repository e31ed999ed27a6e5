"""``ctmhsa bench dale``: what Dale's law costs, in neurons, synapses, accuracy and time.

The default problem of ``ctmhsa run`` (n = 8, dk = dv = de = 8, H = 2) by default, at the levels
asked for (escape and lif by default), each spike seed run once with the plain circuit and once
under Dale's law (:mod:`ctmhsa.circuits.dale`), alternated in this process: per level and
circuit the neurons and synapses, every stage's error / floor (mean over seeds), the seed-paired
ratio of NRMSEs (Dale / plain, mean ± s.e.), the population firing rates (means over seeds) and the
run time per biological second (median).
"""

from __future__ import annotations

import os

import numpy as np

from ctmhsa.sims import simulate_mhsa
from ctmhsa.sims.io import atomic_write_json, versions

from .common import add_out_argument, count, square_problem

__all__ = ["HELP", "add_arguments", "main"]

HELP = "Dale's law vs the plain circuit: neurons, synapses, error/floor per stage, rates, time"


def add_arguments(parser) -> None:
    parser.add_argument("--n", type=count, default=8, help="tokens = macrocolumns (default 8)")
    parser.add_argument("--d", type=count, default=8, help="dk = dv = de (default 8)")
    parser.add_argument("--H", type=count, default=2, help="heads (default 2)")
    parser.add_argument("--duration", type=float, default=10.0, help="measurement window, s (default 10)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4], help="spike seeds (default 1 2 3 4)")
    parser.add_argument("--neuron", nargs="+", default=["escape", "lif"], choices=["escape", "lif"],
                        help="levels (default escape lif)")
    parser.add_argument("--codegen", default="numpy", choices=["numpy", "cython", "auto"],
                        help="Brian2 code generation target (default numpy)")
    add_out_argument(parser, "bench_results/dale.json")


def _one(x: dict, neuron: str, dale: bool, seed: int, duration: float, codegen: str) -> dict:
    res = simulate_mhsa(x["X"], x["WQ"], x["WK"], x["WV"], x["WO"], neuron=neuron, dale=dale, seed=seed,
                        duration=duration, codegen=codegen, max_runtime=None)
    m = res.metrics()
    return dict(nrmse={s: m[s]["nrmse"] for s in m}, floor={s: m[s]["noise_floor"] for s in m},
                rates={r["population"]: r["mean"] for r in res.rate_table()},
                neurons=res.counts["neurons"], synapses=res.counts["synapses"],
                synapses_simulated=res.counts.get("simulated_synapses"),
                run_per_bio_s=res.timings["run"] / (duration + res.config["warmup"]))


def _summary(runs: list, plain: list | None) -> dict:
    stages = list(runs[0]["nrmse"])
    out = dict(neurons=runs[0]["neurons"], synapses=runs[0]["synapses"],
               synapses_simulated=runs[0]["synapses_simulated"],
               run_per_bio_s=float(np.median([r["run_per_bio_s"] for r in runs])),
               error_over_floor={s: float(np.mean([r["nrmse"][s] / r["floor"][s] for r in runs])) for s in stages},
               rates={p: float(np.mean([r["rates"][p] for r in runs])) for p in runs[0]["rates"]})
    if plain is not None:   # seed-paired: the same spike seed, the same problem
        q = {s: np.array([d["nrmse"][s] / p["nrmse"][s] for d, p in zip(runs, plain)]) for s in stages}
        out["nrmse_vs_plain"] = {s: dict(mean=float(v.mean()),
                                         se=float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else None)
                                 for s, v in q.items()}
    return out


def main(args) -> int:
    if not args.seeds:
        raise ValueError("--seeds: expected at least one spike seed")
    if args.duration <= 0:
        raise ValueError(f"--duration: expected a positive window in s, got {args.duration}")
    x = square_problem(args.n, args.d, args.H)
    rows = []
    for neuron in args.neuron:
        runs = {False: [], True: []}
        for seed in args.seeds:
            for dale in (False, True):       # alternated: both circuits see the same machine load
                r = _one(x, neuron, dale, seed, args.duration, args.codegen)
                runs[dale].append(r)
                worst = max(r["nrmse"][s] / r["floor"][s] for s in r["nrmse"])
                print(f"  {neuron} seed {seed} {'dale ' if dale else 'plain'}: {r['neurons']:,} neurons, "
                      f"worst error/floor {worst:.2f}, {r['run_per_bio_s']:.2f} s per biological s", flush=True)
        for dale in (False, True):
            rows.append(dict(neuron=neuron, dale=dale, **_summary(runs[dale], runs[False] if dale else None),
                             repetitions=runs[dale]))
    spec = dict(n=args.n, d=args.d, H=args.H, duration=args.duration, seeds=args.seeds, codegen=args.codegen)
    atomic_write_json(args.out, dict(benchmark="dale", **spec, rows=rows, versions=versions(), cpus=os.cpu_count()))
    stages = list(rows[0]["error_over_floor"])
    print(f"\nn={args.n} d={args.d} H={args.H}, {args.duration} s window, spike seeds {args.seeds}; "
          "error/floor: mean over seeds; Dale/plain: seed-paired NRMSE ratio")
    print(f"  {'level':<7}{'circuit':<7}{'neurons':>8}{'synapses':>10}{'s/bio s':>9}  " +
          " ".join(f"{s:>7}" for s in stages))
    for r in rows:
        print(f"  {r['neuron']:<7}{'dale' if r['dale'] else 'plain':<7}{r['neurons']:>8,}{r['synapses']:>10,}"
              f"{r['run_per_bio_s']:>9.2f}  " + " ".join(f"{r['error_over_floor'][s]:>7.2f}" for s in stages))
        if r["dale"]:
            print(f"  {'':<14}{'Dale/plain NRMSE':>27}  " +
                  " ".join(f"{r['nrmse_vs_plain'][s]['mean']:>7.2f}" for s in stages))
    print("  mean rates (Hz): " + "; ".join(
        f"{r['neuron']} {'dale' if r['dale'] else 'plain'}: " +
        ", ".join(f"{p} {v:.1f}" for p, v in r["rates"].items()) for r in rows))
    print(f"written {os.path.abspath(args.out)}")
    return 0
