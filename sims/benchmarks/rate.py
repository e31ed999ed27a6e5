"""``ctmhsa bench rate``: builds and runs one head (default barrel size n = 33, dk = dv = de = 33)
at the rate level and reports build, compile and run times, neuron and synapse counts, peak
memory and the per-stage error against :mod:`ctmhsa.maths.reference`.

Each repetition runs in a fresh process so that peak memory (``ru_maxrss``) belongs to that run
alone; medians are reported. Prints a table and writes JSON.
"""

from __future__ import annotations

import os

import numpy as np

from ctmhsa.sims import simulate_mhsa
from ctmhsa.sims.io import atomic_write_json, versions
from ctmhsa.sims.progress import progress

from .common import (add_out_argument, add_size_arguments, count, fresh_process, one_shot_main, peak_rss_mb,
                     square_problem)

__all__ = ["HELP", "add_arguments", "run_rate_once", "main"]

MODULE = "ctmhsa.sims.benchmarks.rate"     # run as ``python -m MODULE --one JSON`` per repetition
HELP = "a head (barrel size by default) at the rate level: times, counts, peak memory, per-stage error"


def add_arguments(parser) -> None:
    add_size_arguments(parser)
    parser.add_argument("--duration", type=float, default=1.0, help="simulated time, s (default 1)")
    parser.add_argument("--repeats", type=count, default=3, help="repetitions, each in a fresh process (default 3)")
    parser.add_argument("--codegen", default="auto", choices=["auto", "numpy", "cython"],
                        help="Brian2 target (auto: Cython from 200k synapses)")
    add_out_argument(parser, "bench_results/rate.json")


def run_rate_once(n: int, d: int, H: int, duration: float, codegen: str, seed: int = 0) -> dict:
    """One benchmark repetition in this process; returns the measured figures."""
    x = square_problem(n, d, H, seed=seed)
    res = simulate_mhsa(x["X"], x["WQ"], x["WK"], x["WV"], x["WO"], neuron="rate",
                        duration=duration, codegen=codegen)
    met = res.metrics()
    return dict(
        n=n, d=d, H=H, duration=duration, codegen=codegen,
        neurons=res.counts["neurons"], synapses=res.counts["synapses"],
        build_s=res.timings["build"], compile_s=res.timings["compile"], run_s=res.timings["run"],
        total_s=res.timings["total"],
        peak_rss_mb=peak_rss_mb(),
        memory_estimate_mb=res.diagnostics["memory_estimate_bytes"] / 2**20,
        convergence=res.diagnostics["convergence"],
        errors={k: dict(max_rel_error=v["max_rel_error"], nrmse=v["nrmse"], r=v["r"])
                for k, v in met.items()},
    )


def main(args) -> int:
    if args.repeats < 1:
        raise ValueError(f"--repeats: expected >= 1, got {args.repeats}")
    reps = []
    for r in progress(range(args.repeats), desc="bench rate", unit="rep"):
        rep = fresh_process(MODULE, dict(n=args.n, d=args.d, H=args.H, duration=args.duration,
                                         codegen=args.codegen, seed=0))
        reps.append(rep)
        print(f"  repetition {r + 1}/{args.repeats}: build {rep['build_s']:.2f} s, "
              f"compile {rep['compile_s']:.2f} s, run {rep['run_s']:.2f} s, "
              f"peak {rep['peak_rss_mb']:.0f} MB", flush=True)
    keys = ("build_s", "compile_s", "run_s", "total_s", "peak_rss_mb")
    med = {k: float(np.median([r[k] for r in reps])) for k in keys}
    first = reps[0]
    summary = dict(benchmark="rate", n=args.n, d=args.d, H=args.H, duration=args.duration,
                   codegen=args.codegen, repeats=args.repeats, neurons=first["neurons"],
                   synapses=first["synapses"], median=med,
                   memory_estimate_mb=first["memory_estimate_mb"],
                   errors=first["errors"], convergence=first["convergence"],
                   repetitions=reps, versions=versions(), cpus=os.cpu_count())
    print()
    print(f"rate level, n={args.n}, dk=dv=de={args.d}, H={args.H}, {args.duration} s simulated, "
          f"codegen={args.codegen}, median of {args.repeats}")
    print(f"  neurons {first['neurons']:,}   synapses {first['synapses']:,}")
    print(f"  {'build s':>10} {'compile s':>10} {'run s':>10} {'run s/bio s':>12} {'peak MB':>9} {'est. MB':>9}")
    print(f"  {med['build_s']:>10.2f} {med['compile_s']:>10.2f} {med['run_s']:>10.2f} "
          f"{med['run_s'] / args.duration:>12.2f} {med['peak_rss_mb']:>9.0f} {first['memory_estimate_mb']:>9.0f}")
    print(f"  {'stage':<8} {'max rel err':>12} {'NRMSE':>10} {'r':>10}")
    for k, v in first["errors"].items():
        print(f"  {k:<8} {v['max_rel_error']:>12.2e} {v['nrmse']:>10.2e} {v['r']:>10.6f}")
    atomic_write_json(args.out, summary)
    print(f"written {os.path.abspath(args.out)}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    one_shot_main(MODULE, run_rate_once)
