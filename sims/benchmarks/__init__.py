"""Benchmarks: each prints a table and writes JSON (``ctmhsa bench NAME``).

Every benchmark module exposes ``HELP`` (one line), ``add_arguments(parser)`` (its own flags
only) and ``main(args) -> int``; :data:`BENCHMARKS` registers them for the command line, which
builds one ``argparse`` subcommand per entry. Repetitions that need their own peak memory run in
a fresh process (:func:`ctmhsa.sims.benchmarks.common.fresh_process`).
"""

from __future__ import annotations

from importlib import import_module

__all__ = ["BENCHMARKS", "benchmark"]

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
}


def benchmark(name: str):
    """The module of benchmark ``name`` (a key of :data:`BENCHMARKS`)."""
    if name not in BENCHMARKS:
        raise ValueError(f"benchmark: unknown {name!r}; expected one of {sorted(BENCHMARKS)}")
    return import_module(BENCHMARKS[name])
