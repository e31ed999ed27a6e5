"""``ctmhsa bench circuits``: Algorithm 1's quadratic circuit against the linear key-value memory.

For every n of ``--sizes`` (dk = dv = de = ``--d``, H = 1, escape level) and both circuits, one
run of ``--duration`` s (after the default warm-up) reports neurons, synapses, build and compile
time, wall time per biological second and every decoded stage's NRMSE, r and noise floor. Neuron
and synapse counts are also listed from the circuit descriptions alone (nothing allocated) for n
up to 256. Prints tables, writes JSON atomically after every run.
"""

from __future__ import annotations

import os
import time

from ctmhsa.circuits.builders import CIRCUITS, pathway
from ctmhsa.sims import simulate_mhsa
from ctmhsa.sims.io import atomic_write_json, versions
from ctmhsa.sims.progress import progress

from .common import add_out_argument, count, square_problem

__all__ = ["HELP", "COUNT_SIZES", "add_arguments", "counts", "run_one", "main"]

HELP = ("quadratic vs linear key-value-memory circuit per n: counts, build, compile, run time and "
        "per-stage error")
COUNT_SIZES = (4, 8, 16, 33, 64, 128, 256)


def add_arguments(parser) -> None:
    parser.add_argument("--sizes", nargs="+", type=count, default=[8, 16, 33], help="values of n (default 8 16 33)")
    parser.add_argument("--d", type=count, default=33, help="dk = dv = de (default 33)")
    parser.add_argument("--duration", type=float, default=1.0,
                        help="measurement window after the warm-up, s (default 1)")
    parser.add_argument("--codegen", default="auto", choices=["auto", "numpy", "cython"],
                        help="Brian2 target (auto: Cython from 200k synapses)")
    add_out_argument(parser, "bench_results/circuits.json")


def counts(d: int, sizes=COUNT_SIZES) -> list[dict]:
    """Neurons and synapses of one head of each circuit vs n, from descriptions."""
    out = []
    for n in sizes:
        for kind in CIRCUITS:
            c = pathway(n, d, d, d, H=1, circuit=kind)
            out.append(dict(circuit=kind, n=n, d=d, neurons=c.n_neurons(), synapses=c.n_synapses()))
    return out


def run_one(kind: str, n: int, d: int, duration: float, seed: int = 0, codegen: str = "auto") -> dict:
    """One escape-level run of one circuit; timings, counts and per-stage metrics."""
    x = square_problem(n, d, 1, seed=seed)
    t0 = time.perf_counter()
    res = simulate_mhsa(x["X"], x["WQ"], x["WK"], x["WV"], x["WO"], neuron="escape", circuit=kind,
                        duration=duration, seed=seed, codegen=codegen)
    t = res.timings
    return dict(circuit=kind, n=n, d=d, duration=duration, neurons=res.counts["neurons"],
                synapses=res.counts["synapses"], build_s=t["build"], compile_s=t["compile"],
                run_s_per_bio_s=t["run"] / (duration + res.config["warmup"]),
                wall_s=time.perf_counter() - t0, metrics=res.metrics())


def main(args) -> int:
    table = counts(args.d)
    print(f"one head, dk = dv = de = {args.d}: neurons / synapses from the descriptions")
    print(f"  {'n':>5} {'quadratic neurons':>18} {'linear neurons':>15} {'quadratic syn':>15} {'linear syn':>13}")
    for n in COUNT_SIZES:
        q, li = (next(r for r in table if r["n"] == n and r["circuit"] == k) for k in CIRCUITS)
        print(f"  {n:>5} {q['neurons']:>18,} {li['neurons']:>15,} {q['synapses']:>15,} {li['synapses']:>13,}")
    runs = []
    doc = dict(benchmark="circuits", versions=versions(), d=args.d, duration=args.duration,
               counts=table, runs=runs)
    print(f"\nescape level, {args.duration:g} s window (+ warm-up), seed 0:")
    print(f"  {'circuit':<10} {'n':>4} {'neurons':>9} {'synapses':>11} {'build s':>8} {'compile s':>9} "
          f"{'s/bio s':>8}   {'ṽ NRMSE/floor':>14} {'x̃ NRMSE/floor':>14}")
    bar = progress(total=len(args.sizes) * len(CIRCUITS), desc="bench circuits", unit="run")
    for n in args.sizes:
        for kind in CIRCUITS:
            bar.set_postfix_str(f"{kind} n={n}")
            r = run_one(kind, n, args.d, args.duration, codegen=args.codegen)
            runs.append(r)
            m = r["metrics"]
            print(f"  {kind:<10} {n:>4} {r['neurons']:>9,} {r['synapses']:>11,} {r['build_s']:>8.2f} "
                  f"{r['compile_s']:>9.2f} {r['run_s_per_bio_s']:>8.2f}   "
                  f"{m['v_tilde']['nrmse']:>6.3f}/{m['v_tilde']['noise_floor']:<7.3f} "
                  f"{m['x_tilde']['nrmse']:>6.3f}/{m['x_tilde']['noise_floor']:<7.3f}", flush=True)
            bar.update()
            atomic_write_json(args.out, doc)
    bar.close()
    atomic_write_json(args.out, doc)
    print(f"\nwritten {os.path.abspath(args.out)}")
    return 0
