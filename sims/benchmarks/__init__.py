"""Benchmarks: each prints a table and writes JSON (``ctmhsa bench NAME``).

Every benchmark module exposes ``HELP`` (one line), ``add_arguments(parser)`` (its own flags
only) and ``main(args) -> int``; :data:`BENCHMARKS` registers them for the command line, which
builds one ``argparse`` subcommand per entry. Repetitions that need their own peak memory run in
a fresh process (:func:`sims.benchmarks.common.fresh_process`).
"""

from __future__ import annotations

from importlib import import_module

__all__ = ["BENCHMARKS", "benchmark"]

#: subcommand name -> module (imported on demand by :func:`benchmark`)
BENCHMARKS = {
    "rate": "sims.benchmarks.rate",
    "cells": "sims.benchmarks.cells",
    "accuracy": "sims.benchmarks.accuracy",
    "speed": "sims.benchmarks.speed",
    "heads": "sims.benchmarks.heads",
    "cortex": "sims.benchmarks.cortex",
    "circuits": "sims.benchmarks.circuits",
    "robustness": "sims.benchmarks.robustness",
    "train": "sims.benchmarks.train",
}


def benchmark(name: str):
    """The module of benchmark ``name`` (a key of :data:`BENCHMARKS`)."""
    if name not in BENCHMARKS:
        raise ValueError(f"benchmark: unknown {name!r}; expected one of {sorted(BENCHMARKS)}")
    return import_module(BENCHMARKS[name])
