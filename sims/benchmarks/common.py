"""Helpers shared by the benchmarks: the square test problem, peak memory, fresh processes and
the ``--out`` flag."""

from __future__ import annotations

import contextlib
import json
import os
import textwrap
import time
import warnings
import resource
import subprocess
import sys

import numpy as np

import ctmhsa
from ctmhsa.sims.config import problem_inputs

__all__ = ["square_problem", "peak_rss_mb", "reset_peak_rss", "part_peak_rss_mb", "fresh_process", "one_shot_main",
           "add_out_argument", "add_size_arguments", "load_average", "machine_state", "add_machine_state", "check_json_target",
           "held_out_weights"]

# the folder that holds the ctmhsa package (a source checkout or site-packages): a fresh process
# imports the same ctmhsa as this one
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(ctmhsa.__file__)))


def held_out_weights(rng, H: int, dk: int, dv: int, de: int) -> list:
    """``[WQ, WK, WV, WO]`` drawn from ``rng``: unit-variance projections of unit-variance tokens
    (the memory benchmarks' held-out weights)."""
    shapes = [(H, dk, de), (H, dk, de), (H, dv, de)]
    return [rng.normal(size=s) / np.sqrt(de) for s in shapes] + [rng.normal(size=(H, de, dv)) / np.sqrt(dv)]


def square_problem(n: int, d: int, H: int = 1, seed: int = 0) -> dict:
    """Tokens and weights of an ``n``-token problem with ``dk = dv = de = d`` and ``H`` heads
    (random, from input seed ``seed``; see :func:`ctmhsa.sims.config.problem_inputs`)."""
    return problem_inputs(n=n, H=H, dk=d, dv=d, de=d, input_seed=seed)


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (``ru_maxrss``), MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_peak_rss() -> bool:
    """Start this process's peak resident memory anew (Linux: ``/proc/self/clear_refs``, "5"
    resets ``VmHWM``), so that a benchmark part reports its own peak, not an earlier part's;
    ``False`` where the system cannot (:func:`part_peak_rss_mb` then gives the lifetime peak)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def part_peak_rss_mb() -> float:
    """Peak resident memory (MB) since :func:`reset_peak_rss` (``VmHWM``), or of the process's
    lifetime (``ru_maxrss``) where ``/proc`` does not give it."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return peak_rss_mb()


def fresh_process(module: str, spec: dict, env_extra: dict | None = None) -> dict:
    """Run ``python -m module --one JSON(spec)`` in a fresh process (so that its peak memory
    is its own) and return the JSON object it prints last (see :func:`one_shot_main`)."""
    cmd = [sys.executable, "-m", module, "--one", json.dumps(spec)]
    env = dict(os.environ, **(env_extra or {}))
    env["PYTHONPATH"] = _ROOT + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"benchmark repetition failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def one_shot_main(module: str, run_once, argv=None) -> None:
    """``python -m module --one JSON``: call ``run_once(**JSON)`` and print its result as JSON
    (the other end of :func:`fresh_process`)."""
    argv = sys.argv[1:] if argv is None else argv
    name = module.rsplit(".", 1)[-1]
    if len(argv) == 2 and argv[0] == "--one":
        print(json.dumps(run_once(**json.loads(argv[1]))))
    else:
        sys.exit(f"usage: python -m {module} --one JSON (internal); use `ctmhsa bench {name}`")


def count(text: str) -> int:
    """An argparse type: an integer >= 1 (sizes, repetitions), refused at the command line
    (a bad size used to surface as a traceback from a benchmark's fresh process)."""
    import argparse

    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {v}")
    return v


def add_out_argument(parser, default: str) -> None:
    """The ``--out`` flag: the JSON file a benchmark writes (atomically)."""
    parser.add_argument("--out", default=default, help=f"JSON output file (default {default})")


def add_size_arguments(parser, H: int = 1, H_help: str = "heads") -> None:
    """The ``--n``, ``--d`` and ``--H`` flags of a :func:`square_problem` (barrel size by default)."""
    parser.add_argument("--n", type=int, default=33, help="tokens = macrocolumns (default 33)")
    parser.add_argument("--d", type=int, default=33, help="dk = dv = de (default 33)")
    parser.add_argument("--H", type=int, default=H, help=f"{H_help} (default {H})")


def load_average() -> list:
    """The 1-, 5- and 15-minute load averages now, rounded to 0.01."""
    return [round(x, 2) for x in os.getloadavg()]


def machine_state() -> dict:
    """The load average (1, 5, 15 min), core count and wall-clock time now."""
    return dict(load_average=load_average(), cpus=os.cpu_count(),
                time=time.strftime("%Y-%m-%dT%H:%M:%S%z"))


def add_machine_state(path: str, before: dict, after: dict, profile: dict | None = None) -> None:
    """Record the machine's state before and after a benchmark in its JSON file, and where its
    time went (``profile``: :func:`ctmhsa.sims.profile.collecting`'s sums) when given (rewritten
    atomically; a file that is not a JSON object is left alone)."""
    from ctmhsa.sims.io import atomic_write_json

    try:
        with open(path) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return
    if isinstance(data, dict):
        data["machine"] = dict(before=before, after=after)
        if profile is not None:
            data["profile"] = profile
        atomic_write_json(path, data)


def check_json_target(path) -> None:
    """Refuse, before a benchmark runs, an ``--out`` that is a directory or a file that is not a
    benchmark's JSON (an object with a ``"benchmark"`` key): only those are ever replaced.

    Raises
    ------
    ctmhsa.sims.io.OutputError
        Naming ``--out`` and the path.
    """
    from ctmhsa.sims.io import OutputError

    path = os.path.abspath(os.fspath(path))
    if os.path.isdir(path):
        raise OutputError(f"--out: {path} is a directory; expected a JSON file path")
    if not os.path.lexists(path):
        return
    try:
        with open(path) as fh:
            doc = json.load(fh)
        ours = isinstance(doc, dict) and "benchmark" in doc
    except (OSError, ValueError):
        ours = False
    if not ours:
        raise OutputError(f"--out: {path} exists and is not a benchmark's JSON file; "
                          "choose another path or remove it yourself")


@contextlib.contextmanager
def warnings_into(record: list):
    """Collect the warnings of a block (the operating-range warnings of short presentations: the
    first presentation of a stream is not counted) into ``record`` as text, once each."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        if issubclass(w.category, (DeprecationWarning, PendingDeprecationWarning)):
            continue
        text = f"{w.category.__name__}: {w.message}"   # whole: the JSON keeps what the user can act on
        if text not in record:
            record.append(text)


def shorten(text: str, width: int = 300) -> str:
    """``text`` on one line, cut at a word boundary to at most ``width`` characters (``" ..."``
    marks a cut): a warning quoted in a summary line, never cut mid-word (300: a one-violation
    operating warning whole, its remedy included)."""
    return textwrap.shorten(text, width=width, placeholder=" ...")


def write_table_and_json(doc: dict, out: str, t0: float, table) -> None:
    """The end of a benchmark that prints its table: the wall time since ``t0``
    (``time.perf_counter()``) into ``doc["wall_s"]``, ``table(doc)`` printed, the JSON written
    atomically to ``out``."""
    from ctmhsa.sims.io import atomic_write_json

    doc["wall_s"] = time.perf_counter() - t0
    table(doc)
    atomic_write_json(out, doc)
    print(f"wrote {out}")


def finish(doc: dict, measured: list, out: str, what: str = "measurements") -> None:
    """The end of a benchmark that collected warnings per measurement (``warnings``: a list of
    texts in each of ``measured``): how many warned, with the first quoted, the wall time
    (``doc["wall_s"]``), and the JSON written atomically to ``out``."""
    from ctmhsa.sims.io import atomic_write_json

    warned = [r for r in measured if r["warnings"]]
    if warned:
        print(f"  {len(warned)} of {len(measured)} {what} warned (kept in the JSON, 'warnings'), e.g. "
              f"{shorten(warned[0]['warnings'][0])}")
    print(f"wall time {doc['wall_s']:.0f} s")
    atomic_write_json(out, doc)
    print(f"written {os.path.abspath(out)}")
