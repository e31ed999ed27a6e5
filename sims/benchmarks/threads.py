"""``ctmhsa bench threads``: OpenMP threads of a standalone head on a quiet and on a busy machine.

One head (barrel size by default: n = dk = dv = de = 33) at the escape level on the
``cpp_standalone`` device, a 0.2 s warm-up and a ``--duration`` s window, run with each
``--variants`` entry at each background ``--load``. A variant is a thread count, ``T``, with an
optional OpenMP waiting setting for the binary: ``T-passive`` (``OMP_WAIT_POLICY=PASSIVE``:
waiting threads sleep at once), ``T-active`` (they spin), ``T-spinN`` (``GOMP_SPINCOUNT=N``:
libgomp spins N times before it sleeps; its default is 300,000). One thread compiles without
OpenMP (:mod:`ctmhsa.devices.standalone`), so ``1`` takes no setting.

The load is made here: ``L`` busy-loop processes at normal priority, started before a load's
block of runs and killed after it (in a ``finally``); each also ends by itself after
``--load-limit`` s, so none outlives an interrupted benchmark for long. Within a block the
variants are interleaved (their order turns by one each round), ``--repeats`` rounds. Reported
per load and variant: the binary's run time (``timings["run"]``, the binary and the read-back of
its results) for warm-up + window, median and every repetition, and s per biological second.
Every project is compiled in a first, untimed run at no load. The 1-, 5- and 15-minute load
averages before and after each block are in the JSON.
"""

from __future__ import annotations

import contextlib
import os
import re
import statistics
import subprocess
import sys
import time

from ctmhsa.sims import simulate_mhsa
from ctmhsa.sims.io import atomic_write_json, versions

from .common import add_out_argument, count, load_average, square_problem

__all__ = ["HELP", "add_arguments", "main", "parse_variant", "busy_load", "WARMUP"]

HELP = "one standalone head with 1 or 2 OpenMP threads (and wait policies), on a quiet and a loaded machine"

WARMUP = 0.2
"""Warm-up before the measurement window (s)."""

_VARIANT = re.compile(r"(\d+)(?:-(passive|active|spin(\d+)))?")


def parse_variant(text: str) -> tuple[int, dict]:
    """``"2-passive"`` -> ``(2, {"OMP_WAIT_POLICY": "PASSIVE"})``: the thread count and the
    environment of the binary; ``ValueError`` naming ``variants`` for anything else."""
    m = _VARIANT.fullmatch(text.strip())
    if m is None or int(m[1]) < 1 or (m[2] and int(m[1]) == 1):
        raise ValueError(f"variants: expected T, T-passive, T-active or T-spinN (T >= 1 threads, a setting "
                         f"only with T >= 2), got {text!r}")
    if m[3]:
        return int(m[1]), {"GOMP_SPINCOUNT": m[3]}
    return int(m[1]), ({"OMP_WAIT_POLICY": m[2].upper()} if m[2] else {})


def add_arguments(parser) -> None:
    parser.add_argument("--n", type=count, default=33, help="tokens = macrocolumns (default 33)")
    parser.add_argument("--d", type=count, default=33, help="dk = dv = de (default 33)")
    parser.add_argument("--duration", type=float, default=1.0,
                        help=f"measurement window after a {WARMUP} s warm-up, s (default 1)")
    parser.add_argument("--repeats", type=count, default=3, help="rounds of every variant at each load (default 3)")
    parser.add_argument("--variants", default="1,2,2-passive,2-spin10000",
                        help="comma-separated T, T-passive, T-active or T-spinN (default 1,2,2-passive,2-spin10000)")
    parser.add_argument("--load", default="0,4",
                        help="comma-separated numbers of busy-loop processes running meanwhile (default 0,4)")
    parser.add_argument("--load-limit", type=float, default=1800.0,
                        help="seconds after which a busy loop ends by itself (default 1800)")
    add_out_argument(parser, "bench_results/threads.json")


def _check(args) -> tuple[list, list]:
    """The variants and loads; ``ValueError`` naming the flag for bad input (before anything runs)."""
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if not variants:
        raise ValueError(f"variants: expected at least one, got {args.variants!r}")
    for v in variants:
        parse_variant(v)
    try:
        loads = [int(x) for x in args.load.split(",") if x.strip()]
    except ValueError:
        loads = []
    if not loads or min(loads) < 0:
        raise ValueError(f"load: expected comma-separated integers >= 0, got {args.load!r}")
    for name in ("n", "d", "repeats"):
        if getattr(args, name) < 1:
            raise ValueError(f"{name}: expected a positive integer, got {getattr(args, name)}")
    for name in ("duration", "load_limit"):
        if not getattr(args, name) > 0:
            raise ValueError(f"{name.replace('_', '-')}: expected a positive time in seconds, "
                             f"got {getattr(args, name)}")
    return variants, loads


@contextlib.contextmanager
def busy_load(n: int, limit: float):
    """``n`` busy-loop processes, killed on exit; each also ends by itself after ``limit`` s or
    as soon as this process is gone (killed, it runs no ``finally``)."""
    code = (f"import os, time\nend = time.monotonic() + {float(limit)!r}\n"
            f"while time.monotonic() < end and os.getppid() == {os.getpid()}:\n    pass\n")
    procs = []
    try:
        for _ in range(n):
            procs.append(subprocess.Popen([sys.executable, "-c", code]))
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


@contextlib.contextmanager
def _environment(values: dict):
    """``os.environ`` updated with ``values`` (the binary inherits it), restored after."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _run(x, variant: str, duration: float, seed: int) -> dict:
    threads, env = parse_variant(variant)
    with _environment(env):
        t0 = time.perf_counter()
        res = simulate_mhsa(x["X"], x["WQ"][:1], x["WK"][:1], x["WV"][:1], x["WO"][:1], neuron="escape",
                            duration=duration, warmup=WARMUP, seed=seed, device="cpp_standalone", threads=threads)
        wall = time.perf_counter() - t0
    return dict(run_s=res.timings["run"], compile_s=res.timings["compile"], wall_s=wall)



def main(args) -> int:
    variants, loads = _check(args)
    x = square_problem(args.n, args.d, 1)
    bio = WARMUP + args.duration
    out = dict(benchmark="threads", n=args.n, d=args.d, duration=args.duration, warmup=WARMUP,
               repeats=args.repeats, variants=variants, loads=loads, cpus=os.cpu_count(), versions=versions(),
               compile={}, results={}, load_average={})
    print(f"one head, escape level, n = d = {args.n if args.n == args.d else (args.n, args.d)}, "
          f"{WARMUP}+{args.duration} s simulated, cpp_standalone; {os.cpu_count()} cores", flush=True)
    for threads in sorted({parse_variant(v)[0] for v in variants}):   # compile, untimed
        first = _run(x, str(threads), args.duration, seed=0)
        out["compile"][str(threads)] = first["compile_s"]
        print(f"  {threads} thread(s): compiled in {first['compile_s']:.1f} s", flush=True)
    seed = 1
    for load in loads:
        runs = {v: [] for v in variants}
        before = load_average()
        with busy_load(load, args.load_limit):
            time.sleep(1.0 if load else 0.0)   # let the busy loops start
            for r in range(args.repeats):
                for v in variants[r % len(variants):] + variants[:r % len(variants)]:
                    rep = _run(x, v, args.duration, seed)
                    seed += 1
                    runs[v].append(rep["run_s"])
                    print(f"  load {load}, {v}: run {rep['run_s']:.2f} s (round {r + 1}/{args.repeats})", flush=True)
        out["load_average"][str(load)] = dict(before=before, after=load_average())
        out["results"][str(load)] = {v: dict(run_s=t, median_s=statistics.median(t),
                                             per_bio_s=statistics.median(t) / bio) for v, t in runs.items()}
        atomic_write_json(args.out, out)
    print(f"\n  {'load':>4}  {'variant':<16} {'median run (s)':>14} {'s per bio s':>11}  runs (s)")
    for load in loads:
        for v in variants:
            res = out["results"][str(load)][v]
            print(f"  {load:>4}  {v:<16} {res['median_s']:>14.3f} {res['per_bio_s']:>11.3f}  "
                  f"{', '.join(f'{t:.2f}' for t in res['run_s'])}")
        la = out["load_average"][str(load)]
        print(f"        load average (1, 5, 15 min) before {la['before']}, after {la['after']}")
    print(f"written {os.path.abspath(args.out)}")
    return 0
