"""Benchmarks: each prints a table and writes JSON (``ctmhsa bench NAME``).

Every benchmark module exposes ``HELP`` (one line), ``add_arguments(parser)`` (its own flags
only) and ``main(args) -> int``; :data:`BENCHMARKS` registers them for the command line, which
builds one ``argparse`` subcommand per entry and runs it through :func:`run_benchmark`, which
prints the machine's load average before and after and records it in the JSON: on a shared
machine a time means little without the load it was measured under. Repetitions that need their own peak memory run in
a fresh process (:func:`ctmhsa.sims.benchmarks.common.fresh_process`).
"""

from __future__ import annotations

from importlib import import_module

from ctmhsa.sims import profile

__all__ = ["BENCHMARKS", "benchmark", "run_benchmark"]

#: subcommand name -> module (imported on demand by :func:`benchmark`)
BENCHMARKS = {
    "rate": "ctmhsa.sims.benchmarks.rate",
    "cells": "ctmhsa.sims.benchmarks.cells",
    "accuracy": "ctmhsa.sims.benchmarks.accuracy",
    "speed": "ctmhsa.sims.benchmarks.speed",
    "heads": "ctmhsa.sims.benchmarks.heads",
    "cortex": "ctmhsa.sims.benchmarks.cortex",
    "circuits": "ctmhsa.sims.benchmarks.circuits",
    "robustness": "ctmhsa.sims.benchmarks.robustness",
    "train": "ctmhsa.sims.benchmarks.train",
    "threads": "ctmhsa.sims.benchmarks.threads",
    "timescale": "ctmhsa.sims.benchmarks.timescale",
    "depth": "ctmhsa.sims.benchmarks.depth",
    "digits": "ctmhsa.sims.benchmarks.digits",
    "levels": "ctmhsa.sims.benchmarks.levels",
    "dale": "ctmhsa.sims.benchmarks.dale",
    "memory": "ctmhsa.sims.benchmarks.memory",
    "stream": "ctmhsa.sims.benchmarks.stream",
    "language": "ctmhsa.sims.benchmarks.language",
    "theories": "ctmhsa.sims.benchmarks.theories",
}


def benchmark(name: str):
    """The module of benchmark ``name`` (a key of :data:`BENCHMARKS`)."""
    if name not in BENCHMARKS:
        raise ValueError(f"benchmark: unknown {name!r}; expected one of {sorted(BENCHMARKS)}")
    return import_module(BENCHMARKS[name])


def run_benchmark(module, args) -> int:
    """Run ``module.main(args)`` between two readings of the load average, printed and added to
    the JSON file the benchmark wrote at ``args.out`` (key ``machine``), with where the time went
    (key ``profile``: its simulations' build, compile, run and decode, and the rest; see
    :mod:`ctmhsa.sims.profile`).

    ``args.out`` is checked first (:func:`~ctmhsa.sims.benchmarks.common.check_json_target`): a
    benchmark replaces only a JSON file that a benchmark wrote, never a user's file.
    """
    from .common import add_machine_state, check_json_target, machine_state

    for name in ("n", "d", "H"):   # add_size_arguments' sizes, before a fresh process would trace back
        value = getattr(args, name, None)
        if isinstance(value, int) and value < 1:
            raise ValueError(f"--{name}: expected an integer >= 1, got {value}")
    # the JSON a benchmark writes: --out, or what a benchmark with an output directory names
    out = getattr(args, "out", None) or (module.output_json(args) if hasattr(module, "output_json") else None)
    if out:
        check_json_target(out)
    stamp = _written(out)
    before = machine_state()
    print(f"load average {before['load_average'][0]:.2f} (1 min) on {before['cpus']} cores", flush=True)
    with profile.collecting() as spent:
        rc = module.main(args)
    after = machine_state()
    print(f"load average {after['load_average'][0]:.2f} (1 min) at the end", flush=True)
    print(profile_line(spent), flush=True)
    # a benchmark that found failures (exit 1) still measured: its JSON gets the load too, where
    # this run wrote it (an older file left by a run that stopped early is not stamped)
    if out and str(out).endswith(".json") and (rc == 0 or _written(out) not in (None, stamp)):
        add_machine_state(out, before, after, profile=spent)
    return rc


def _written(path) -> int | None:
    """The modification time (ns) of file ``path``, ``None`` where there is none."""
    import os

    try:
        return os.stat(path).st_mtime_ns if path else None
    except OSError:
        return None


def profile_line(spent: dict) -> str:
    """One line of where the time went (:mod:`ctmhsa.sims.profile`)."""
    parts = ", ".join(f"{k} {spent[k]:.1f} s" for k in (*profile.PARTS, "outside"))
    return f"profile: {spent['simulations']} simulations in this process; {parts} of {spent['wall']:.1f} s"
