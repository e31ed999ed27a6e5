"""``ctmhsa bench heads``: H barrel-size heads split across dask workers (or serially).

Runs ``simulate_mhsa(..., scheduler=..., device=...)`` on an H-head pathway (n = d = 33 by
default) at the escape level and reports the wall time, the time per head, the peak memory of this process and
of every dask worker (``ru_maxrss``), and x̃'s error against its noise floor.
"""

from __future__ import annotations

import os
import time

from ctmhsa.devices.registry import DEVICES
from ctmhsa.sims import simulate_mhsa
from ctmhsa.sims.distributed import client_for
from ctmhsa.sims.io import atomic_write_json, versions

from .common import add_out_argument, add_size_arguments, peak_rss_mb, square_problem

__all__ = ["HELP", "add_arguments", "main"]

HELP = "H barrel-size heads split across dask workers: wall time per head, peak memory, x̃ error"


def add_arguments(parser) -> None:
    add_size_arguments(parser)
    parser.add_argument("--duration", type=float, default=1.0,
                        help="measurement window after a 0.2 s warm-up, s (default 1)")
    parser.add_argument("--scheduler", default="local",
                        help="'local' (LocalCluster), 'serial' or a dask scheduler address (default local)")
    parser.add_argument("--device", default="runtime", choices=tuple(DEVICES),
                        help="device of the heads (default runtime; cpp_standalone: one compiled project "
                             "per head shape, see ctmhsa bench cortex)")
    add_out_argument(parser, "bench_results/heads.json")


def main(args) -> int:
    x = square_problem(args.n, args.d, args.H)
    sched = args.scheduler
    t0 = time.perf_counter()
    with client_for(sched) as client:
        res = simulate_mhsa(x["X"], x["WQ"], x["WK"], x["WV"], x["WO"], neuron="escape",
                            duration=args.duration, warmup=0.2, seed=0, device=args.device,
                            scheduler=client if client is not None else "serial")
        workers = client.run(peak_rss_mb) if client is not None else {}
    wall = time.perf_counter() - t0
    met = res.metrics()["x_tilde"]
    out = dict(benchmark="heads", n=args.n, d=args.d, H=args.H, duration=args.duration,
               scheduler=sched, device=args.device, neurons=res.counts["neurons"], synapses=res.counts["synapses"],
               wall_s=wall, wall_per_head_s=wall / args.H, peak_rss_mb_main=peak_rss_mb(),
               peak_rss_mb_workers=list(workers.values()), x_tilde=met,
               versions=versions(), cpus=os.cpu_count())
    print(f"{args.H} heads, n={args.n}, d={args.d}, escape, 0.2+{args.duration} s, scheduler={sched}, "
          f"device={args.device}")
    print(f"  {res.counts['neurons']:,} neurons, {res.counts['synapses']:,} synapses")
    print(f"  wall {wall:.0f} s ({wall / args.H:.1f} s per head); peak memory: main "
          f"{out['peak_rss_mb_main']:.0f} MB, workers {[round(v) for v in workers.values()]} MB")
    print(f"  x̃ NRMSE {met['nrmse']:.3f} (floor {met['noise_floor']:.3f}), r {met['r']:.4f}")
    atomic_write_json(args.out, out)
    print(f"written {os.path.abspath(args.out)}")
    return 0
