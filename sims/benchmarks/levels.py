"""``ctmhsa bench levels``: the lif level's cost against the escape level's, in one run.

One problem (a barrel head by default), one device (``cpp_standalone`` by default, one thread),
the escape and lif levels alternated repetition by repetition, each repetition in a fresh process,
so that both levels see the same machine load: wall seconds per biological second of each, their
ratio (lif / escape), compile time, and the accuracy of x̃ (NRMSE, floor) of each, so that a
faster step is not bought with a worse answer. ``--lif-dt`` compares lif integration steps (the
level's default, :data:`ctmhsa.sims.options.DEFAULT_DT`, when not given).
"""

from __future__ import annotations

import os

import numpy as np

from ctmhsa.sims import simulate_mhsa
from ctmhsa.sims.io import atomic_write_json, versions
from ctmhsa.sims.options import DEFAULT_DT

from .common import add_out_argument, add_size_arguments, count, fresh_process, one_shot_main, square_problem

__all__ = ["HELP", "add_arguments", "run_once", "main"]

MODULE = "ctmhsa.sims.benchmarks.levels"
HELP = "escape vs lif: wall s per biological s in the same run, their ratio, and x~'s accuracy at each"
WARMUP = 0.5


def add_arguments(parser) -> None:
    add_size_arguments(parser)
    parser.add_argument("--duration", type=float, default=1.0, help="measurement window, s (default 1)")
    parser.add_argument("--repeats", type=count, default=3, help="repetitions per level, fresh processes (default 3)")
    parser.add_argument("--device", default="cpp_standalone", choices=["runtime", "cpp_standalone"],
                        help="Brian2 device (default cpp_standalone)")
    parser.add_argument("--threads", type=int, default=1, help="OpenMP threads of the standalone device (default 1)")
    parser.add_argument("--lif-dt", type=float, nargs="+", default=None,
                        help=f"lif integration steps to compare, s (default the level's: {DEFAULT_DT['lif']:g})")
    add_out_argument(parser, "bench_results/levels.json")


def run_once(n: int, d: int, H: int, duration: float, device: str, threads: int, neuron: str,
             dt: float | None = None) -> dict:
    """One run of one level in this process."""
    x = square_problem(n, d, H)
    res = simulate_mhsa(x["X"], x["WQ"], x["WK"], x["WV"], x["WO"], neuron=neuron, duration=duration,
                        warmup=WARMUP, seed=1, device=device, threads=threads, codegen="auto", dt=dt,
                        max_runtime=None)
    m = res.metrics()
    return dict(neuron=neuron, dt=res.config["dt"], compile_s=res.timings["compile"], run_s=res.timings["run"],
                run_per_bio_s=res.timings["run"] / (duration + WARMUP), neurons=res.counts["neurons"],
                ratio={s: m[s]["nrmse"] / m[s]["noise_floor"] for s in m},
                x_tilde=dict(nrmse=m["x_tilde"]["nrmse"], floor=m["x_tilde"]["noise_floor"], r=m["x_tilde"]["r"]))


def main(args) -> int:
    if args.repeats < 1:
        raise ValueError(f"--repeats: expected >= 1, got {args.repeats}")
    lif_dts = args.lif_dt or [DEFAULT_DT["lif"]]
    spec = dict(n=args.n, d=args.d, H=args.H, duration=args.duration, device=args.device, threads=args.threads)
    configs = [("escape", None)] + [("lif", dt) for dt in lif_dts]
    reps = {c: [] for c in configs}
    for k in range(args.repeats):        # interleaved: every level sees the same load
        for neuron, dt in configs:
            r = fresh_process(MODULE, dict(spec, neuron=neuron, dt=dt))
            reps[(neuron, dt)].append(r)
            print(f"  {k + 1}/{args.repeats} {neuron} dt={r['dt'] * 1e3:g} ms: {r['run_per_bio_s']:.2f} s per "
                  f"biological s (compile {r['compile_s']:.0f} s), x~ NRMSE {r['x_tilde']['nrmse']:.3f} "
                  f"(floor {r['x_tilde']['floor']:.3f})", flush=True)
    esc = float(np.median([r["run_per_bio_s"] for r in reps[("escape", None)]]))
    rows = []
    for (neuron, dt), rs in reps.items():
        per = float(np.median([r["run_per_bio_s"] for r in rs]))
        ratio = {s: float(np.median([r["ratio"][s] for r in rs])) for s in rs[0]["ratio"]}
        rows.append(dict(neuron=neuron, dt=rs[0]["dt"], run_per_bio_s=per, vs_escape=per / esc,
                         compile_s=float(np.median([r["compile_s"] for r in rs])), error_over_floor=ratio,
                         x_tilde_nrmse=float(np.median([r["x_tilde"]["nrmse"] for r in rs])),
                         x_tilde_floor=float(np.median([r["x_tilde"]["floor"] for r in rs])),
                         neurons=rs[0]["neurons"], repetitions=rs))
    atomic_write_json(args.out, dict(benchmark="levels", **spec, repeats=args.repeats, rows=rows,
                                     versions=versions(), cpus=os.cpu_count()))
    print(f"\nn={args.n} d={args.d} H={args.H}, {args.device} ({args.threads} thread), {WARMUP}+{args.duration} s "
          f"simulated, median of {args.repeats} fresh processes, levels interleaved")
    print(f"  {'level':<7}{'dt ms':>7}{'s/bio s':>9}{'x escape':>9}{'compile s':>10}{'x~ NRMSE':>10}{'floor':>7}"
          f"  error/floor per stage")
    for r in rows:
        st = " ".join(f"{k}:{v:.2f}" for k, v in r["error_over_floor"].items())
        print(f"  {r['neuron']:<7}{r['dt'] * 1e3:>7g}{r['run_per_bio_s']:>9.2f}{r['vs_escape']:>9.1f}"
              f"{r['compile_s']:>10.0f}{r['x_tilde_nrmse']:>10.3f}{r['x_tilde_floor']:>7.3f}  {st}")
    print(f"written {os.path.abspath(args.out)}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    one_shot_main(MODULE, run_once)
