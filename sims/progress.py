"""Progress bars (tqdm) for runs, sweeps, figures and benchmarks.

A run's bar counts *biological* seconds (warm-up and window). :class:`RunProgress` is a Brian2
``report`` callable (``report(elapsed, completed, start, duration)``, called by
``Network.run``); the runtime runner also ticks it from a network operation, since Brian2 calls a
report only every 10 s of wall time. On the ``cpp_standalone`` device the compiled binary prints
Brian2's text report, which :func:`binary_progress` reads from its standard output.

Bars are drawn on standard error when it is a terminal; :func:`set_quiet` (``--quiet``) turns
every bar off.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading

from tqdm.auto import tqdm

__all__ = ["RunProgress", "progress", "set_quiet", "is_quiet", "binary_progress", "compile_bar", "compile_note",
           "compile_announcer"]

log = logging.getLogger(__name__)

_QUIET = False


def set_quiet(quiet: bool = True) -> None:
    """Turn every progress bar off (``True``) or back to automatic (shown on a terminal)."""
    global _QUIET
    _QUIET = bool(quiet)


def is_quiet() -> bool:
    """Whether :func:`set_quiet` turned the bars off."""
    return _QUIET


def progress(iterable=None, total=None, desc: str = "", unit: str = "it", **kw):
    """A tqdm bar, off under :func:`set_quiet` and when standard error is not a terminal."""
    return tqdm(iterable, total=total, desc=desc, unit=unit, disable=True if _QUIET else None,
                dynamic_ncols=True, **kw)


def compile_bar(total, message: str):
    """The bar over Cython modules compiled on a first run (:func:`ctmhsa.neurons.compilation.watch`):
    ``message`` (what compiles, how many, about how long) is printed on standard error at once,
    also when standard error is not a terminal (a log file then says why the run is silent), unless
    :func:`set_quiet`; the bar itself is drawn on a terminal only."""
    if not _QUIET:
        tqdm.write(message, file=sys.stderr)
    return progress(total=total, desc="compiling", unit="module")


def compile_note(total, message: str):
    """The announcement of :func:`compile_bar` without a bar (Brian2's text reports)."""
    if not _QUIET:
        print(message, file=sys.stderr, flush=True)


def compile_announcer(report):
    """How a run with ``report`` announces a first run's compilation: a bar (``"progress"``), a
    line on standard error (Brian2's text reports, a callable), or only the log (``None``)."""
    if report == "progress":
        return compile_bar
    return None if report is None else compile_note


def _seconds(q) -> float:
    """A Brian2 time (or a float in seconds) as a float in seconds."""
    return float(q)     # Brian2 quantities convert to their SI value


class RunProgress:
    """A tqdm bar over a run's biological time, usable as a Brian2 ``report`` callable.

    Parameters
    ----------
    total : float
        Biological time the bar spans (s): warm-up plus window at the spiking levels.
    desc : str
        Label of the bar.

    Notes
    -----
    Brian2 calls ``report(elapsed, completed, start, duration)`` at the start and the end of
    every ``Network.run`` and every ``report_period`` of wall time in between; ``start`` and
    ``duration`` are the run's, so a warm-up followed by a window moves one bar from 0 to
    ``total``. :meth:`update_to` sets the bar from a network time directly.
    """

    def __init__(self, total: float, desc: str = "simulating"):
        self.total = float(total)
        self.t = 0.0            # biological time reached (s), also when the bar is not drawn
        self.bar = progress(total=round(self.total, 6), desc=desc, unit="bio s",
                            bar_format="{l_bar}{bar}| {n:.2f}/{total:.2f} bio s [{elapsed}<{remaining}]")

    def __call__(self, elapsed, completed, start, duration) -> None:
        self.update_to(_seconds(start) + float(completed) * _seconds(duration))

    def update_to(self, t: float) -> None:
        """Move the bar to network time ``t`` (s)."""
        t = min(max(float(t), 0.0), self.total)
        if t > self.t:
            self.bar.update(t - self.t)
            self.t = t

    def close(self) -> None:
        self.bar.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_START = re.compile(r"Starting simulation at t=([-+0-9.e]+) s for duration ([-+0-9.e]+) s")
_DONE = re.compile(r"^([-+0-9.e]+) s \(\d+%\) simulated in")


@contextlib.contextmanager
def binary_progress(report):
    """Read Brian2's text report from a child process's standard output (the standalone binary,
    run with ``with_output=True``) and drive ``report`` (a :class:`RunProgress`) with it.

    File descriptor 1 is redirected into a pipe for the duration of the block; lines that are not
    progress reports (the compiler's output) go to the debug log.
    """
    if not isinstance(report, RunProgress):
        yield
        return
    sys.stdout.flush()
    r, w = os.pipe()
    saved = os.dup(1)
    state = {"start": 0.0}

    def reader():
        with os.fdopen(r, "r", errors="replace") as fh:
            for line in fh:
                line = line.strip()
                m = _START.search(line)
                if m:
                    state["start"] = float(m.group(1))
                    report.update_to(state["start"])
                    continue
                m = _DONE.search(line)
                if m:
                    report.update_to(state["start"] + float(m.group(1)))
                elif line:
                    log.debug("standalone: %s", line)

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    os.dup2(w, 1)
    os.close(w)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)      # closes the pipe's last write end: the reader sees EOF
        os.close(saved)
        th.join(timeout=5)
