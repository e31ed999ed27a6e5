"""Results directories, written atomically (temporary name, then rename).

Layout of one run's directory::

    config.toml        the configuration as resolved
    metrics.json       per-stage accuracy (SimulationResult.metrics())
    stages.npz         decoded stages  (keys: stage names)
    reference.npz      exact stages    (keys: stage names)
    rates.npz          rates (Hz) per population on its index grid (NaN = absent cell)
    spikes.npz         recorded spike trains: ``<population>.i`` (cell), ``<population>.t`` (s)
    noise.npz          per-entry noise-floor variance of every stage (spiking levels)
    spikes.nwb         spiking levels: every cell labelled by population and index axes, its
                       rate and its spike train, in Neurodata Without Borders (:mod:`ctmhsa.sims.nwb`)
    provenance.json    versions, git commit, level, seed, device, timings, counts, diagnostics
    .ctmhsa-results    marker: this is a results directory of ctmhsa (:data:`MARKER`)

A directory that exists is complete: it appears only through the final rename. Directories
and files get the permissions the umask allows (0755 and 0644 under the usual umask 022), not
the owner-only ones of temporary files.

Nothing the project did not write is ever deleted. A target that exists is replaced only when it
is a results directory of this project (:func:`is_results_dir`: the marker lists every file in
it) or an empty directory; anything else (a file, a directory with other files, the working
directory) is refused with an :class:`OutputError` naming it. :func:`check_output` checks this,
that the location is writable and that it has room for the results (:func:`estimate_result_bytes`)
before anything is simulated.

JSON is strict (``allow_nan=False``): NaN and ±inf are written as ``null``; ``provenance.json``
lists where they were (key ``nonfinite``) and :func:`load` puts them back.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata

import numpy as np

from .config import dumps_toml, tables_of
from .jsonfile import dumps_json, restore_nonfinite, to_json  # noqa: F401 - re-exported
from .result import SimulationResult

__all__ = ["write_result", "atomic_path", "atomic_write_text", "atomic_write_json", "atomic_savez", "versions", "git_commit",
           "is_complete", "load", "MARKER", "OutputError", "is_results_dir", "check_target", "check_output",
           "estimate_result_bytes", "results_directory", "to_json", "dumps_json"]

log = logging.getLogger(__name__)

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _public(path: str, directory: bool = False) -> None:
    """Give ``path`` the permissions the umask allows (temporary files and directories are
    created owner-only)."""
    os.chmod(path, (0o777 if directory else 0o666) & ~_umask())


@functools.lru_cache(maxsize=1)
def git_commit() -> dict | None:
    """The git commit of the source tree this package runs from, and whether it has
    uncommitted changes; ``None`` when it is not a git checkout (e.g. installed from a wheel)."""
    if not os.path.exists(os.path.join(_ROOT, ".git")):
        return None
    try:
        rev = subprocess.run(["git", "-C", _ROOT, "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10)
        if rev.returncode != 0:
            return None
        st = subprocess.run(["git", "-C", _ROOT, "status", "--porcelain", "--untracked-files=no"],
                            capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return dict(commit=rev.stdout.strip(), dirty=bool(st.stdout.strip()) if st.returncode == 0 else None)


def versions() -> dict:
    """Versions of Python and of the packages a result depends on."""
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for pkg in ("ctmhsa", "brian2", "numpy", "networkx", "matplotlib", "cython", "pynwb"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


@contextlib.contextmanager
def atomic_path(path: str, suffix: str):
    """A temporary path beside ``path`` to write; renamed onto ``path`` (world-readable) only when
    the block completes, removed otherwise: a file at ``path`` is always complete."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=suffix)
    os.close(fd)
    try:
        yield tmp
        _public(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and ``os.replace``."""
    with atomic_path(path, os.path.basename(path)) as tmp, open(tmp, "w") as fh:
        fh.write(text)


def atomic_write_json(path: str, obj) -> None:
    """Write ``obj`` as strict JSON (:func:`dumps_json`: NaN and ±inf as ``null``) to ``path``
    through a temporary file and ``os.replace``."""
    atomic_write_text(path, dumps_json(obj))


def atomic_savez(path: str, **arrays) -> None:
    """``np.savez_compressed(path, **arrays)`` through a temporary file and ``os.replace``: a file
    at ``path`` is always complete."""
    with atomic_path(path, ".npz") as tmp:
        np.savez_compressed(tmp, **arrays)


MARKER = ".ctmhsa-results"
"""Name of the marker file in every results directory this project writes: JSON with ``format``
(:data:`MARKER_FORMAT`), ``ctmhsa`` (the package version), ``kind`` (``"run"``, ``"train"``) and
``files`` (every other entry of the directory, written last)."""
MARKER_FORMAT = 1

_LEGACY = (("provenance.json", frozenset({"config.toml", "metrics.json", "stages.npz", "reference.npz", "rates.npz",
                                          "spikes.npz", "noise.npz", "spikes.nwb", "provenance.json", "summary.png"})),
           ("training.npz", frozenset({"config.toml", "training.npz", "summary.json", "training.png"})))
"""Results directories written before the marker existed (``ctmhsa run``, ``ctmhsa train``): one
holding the first file and nothing but the others is still recognised (and replaced)."""

PLANNING_RATE = 20.0
"""Mean spike rate per cell (Hz) that :func:`estimate_result_bytes` plans for: the shipped default
run measures 5-65 Hz per population, 11 Hz over all its cells."""


class OutputError(ValueError):
    """An output location that cannot take the results: something there that is not a results
    directory of this project, not writable, or too little free space. A ``ValueError``, so the
    command line reports it in one line."""


def _package_version() -> str | None:
    try:
        return metadata.version("ctmhsa")
    except metadata.PackageNotFoundError:
        return None


def _marker(path: str) -> dict | None:
    """The marker of directory ``path``, or ``None`` when it has none (or not a valid one)."""
    try:
        with open(os.path.join(path, MARKER)) as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("format"), int) else None


def _write_marker(directory: str, kind: str, files=()) -> None:
    doc = dict(format=MARKER_FORMAT, ctmhsa=_package_version(), kind=kind, files=sorted(files))
    with open(os.path.join(directory, MARKER), "w") as fh:
        fh.write(dumps_json(doc))


def is_results_dir(path: str) -> bool:
    """Whether ``path`` is a results directory of this project, which a new result may replace:
    a directory whose marker (:data:`MARKER`) lists every other entry in it (a file someone added
    makes it not one), or one written before the marker existed (``provenance.json`` and only the
    files such a directory had)."""
    if os.path.islink(path) or not os.path.isdir(path):
        return False
    entries = set(os.listdir(path))
    marker = _marker(path)
    if marker is not None:
        files = marker.get("files")
        return isinstance(files, list) and entries - {MARKER} <= set(map(str, files))
    return any(key in entries and entries <= files for key, files in _LEGACY)


def is_complete(path: str) -> bool:
    """Whether ``path`` is a complete results directory (it is renamed into place only after
    every file is written, so existence means completeness)."""
    return os.path.isfile(os.path.join(path, "provenance.json"))


def _target(path, what: str) -> str:
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{what}: expected a directory path (a string), got {path!r}")
    if not os.fspath(path):
        raise ValueError(f"{what}: expected a directory path, got an empty string")
    target = os.path.abspath(os.path.expanduser(os.fspath(path)))
    # a link at the target is followed: the directory it points to is written, the link stays
    return os.path.realpath(target) if os.path.islink(target) else target


def check_target(path, what: str = "path") -> str:
    """The absolute path of results directory ``path`` if a result may be written there: it does
    not exist, or is an empty directory, or is a results directory of this project
    (:func:`is_results_dir`). Nothing else is ever replaced.

    Raises
    ------
    OutputError
        ``path`` is a file, a directory with files this project did not write (or that it
        cannot list), or the working directory (or contains it); the message names ``what``
        (the argument or setting) and the path.
    TypeError
        ``path`` is not a path.
    """
    target = _target(path, what)
    if not os.path.lexists(target):
        return target
    if not os.path.isdir(target):
        raise OutputError(f"{what}: {os.fspath(path)!r} is an existing file, not a results directory; ctmhsa does "
                          f"not replace what it did not write: choose a new directory name")
    cwd, real = os.path.realpath(os.getcwd()), os.path.realpath(target)
    if cwd == real or cwd.startswith(real.rstrip(os.sep) + os.sep):
        inside = os.path.join(os.fspath(path), "results")
        raise OutputError(f"{what}: {os.fspath(path)!r} is the working directory or contains it; a results "
                          f"directory replaces its target: choose a new directory, e.g. {inside!r}")
    try:
        entries = sorted(os.listdir(target))
    except OSError as exc:
        raise OutputError(f"{what}: cannot list the existing directory {os.fspath(path)!r} "
                          f"({exc.strerror or exc})") from None
    if entries and not is_results_dir(target):
        shown = ", ".join(entries[:5]) + (f", ... ({len(entries)} entries)" if len(entries) > 5 else "")
        raise OutputError(f"{what}: {os.fspath(path)!r} exists and is not a results directory of ctmhsa (it holds "
                          f"{shown} and no {MARKER} listing them); ctmhsa replaces only its own results "
                          f"directories: choose a new or empty directory")
    return target


def _existing_ancestor(path: str) -> str:
    while not os.path.lexists(path):
        path = os.path.dirname(path)
    return path


def _mb(nbytes: float) -> str:
    return f"{nbytes / 1e6:.1f} MB"


def check_output(path, estimate_bytes: int = 0, what: str = "path") -> str:
    """Check, before anything is simulated, that results of about ``estimate_bytes`` can be
    written to the results directory ``path``; return its absolute path.

    Three checks: the target rule of :func:`check_target`; that the directory where it will be
    created (its parent, or the nearest ancestor that exists) is writable, by creating and
    removing a probe file there; and that this file system has ``estimate_bytes`` free
    (``shutil.disk_usage``; the old results directory is removed only after the new one is
    complete, so a replacement needs the full size).

    Parameters
    ----------
    path : str or path-like
        The results directory.
    estimate_bytes : int
        Size of the results (bytes), e.g. :func:`estimate_result_bytes`.
    what : str
        The argument or setting ``path`` came from (``"--out"``, ``"output.dir"``), for messages.

    Raises
    ------
    OutputError
        Naming ``what``, the path and what is wrong: not a results directory, read-only (or not
        permitted), or too little free space (needed and available MB).
    """
    target = check_target(path, what)
    where = _existing_ancestor(os.path.dirname(target))
    if not os.path.isdir(where):
        raise OutputError(f"{what}: cannot create {os.fspath(path)!r}: {where!r} is a file, not a directory")
    try:
        fd, probe = tempfile.mkstemp(dir=where, prefix=".ctmhsa-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputError(f"{what}: cannot write in {where!r} ({exc.strerror or exc}): the location of "
                          f"{os.fspath(path)!r} is read-only or not permitted; choose another one") from None
    free = shutil.disk_usage(where).free
    if estimate_bytes > free:
        raise OutputError(f"{what}: the results in {os.fspath(path)!r} need about {_mb(estimate_bytes)} but "
                          f"{where!r} has {_mb(free)} free; free some space or choose another location")
    return target


def estimate_result_bytes(circuit, level: str, duration: float, warmup: float = 0.0, record_spikes=False,
                          nwb: bool | None = None, summary: bool = True) -> int:
    """Size (bytes) of the results directory of one run, for :func:`check_output`.

    With the sizes ``H, n, m, dk, dv, de`` of ``circuit.meta``, ``S = H (n dk + m dk + m dv +
    n m dk + n m + n + n m dv + n dv) + n de`` entries in all stages, ``G`` cells on the
    populations' index grids, ``N`` cells of the recorded populations and ``N_all`` cells::

        8 (3 S + G)                               stages, reference, noise, rates (float64)
        + spikes * (12 + 8 [NWB])                 spikes.npz (int32 cell, float64 time), spikes.nwb
        + [NWB] 8 N_all (8 + axes) + 512 kB       its units table and HDF5 overhead
        + 256 kB + [summary] 2 MB                 text files; summary.png

    with ``spikes = N * PLANNING_RATE * (warmup + duration)`` (:data:`PLANNING_RATE` = 20 Hz).
    Compression makes the files smaller (the default run writes 6.2 MB for an estimate of 19 MB).

    Parameters
    ----------
    circuit : ctmhsa.circuits.graph.Circuit
        The description of what is built (``CircuitOptions.describe``).
    level : str
        ``"rate"``, ``"escape"`` or ``"lif"`` (spikes and NWB at the spiking levels).
    duration, warmup : float
        Window and warm-up (s).
    record_spikes : bool or sequence of str
        The populations whose spike times are kept.
    nwb : bool, optional
        Whether ``spikes.nwb`` is written (default: at the spiking levels).
    summary : bool
        Whether ``summary.png`` is drawn.
    """
    c = circuit.meta
    H, n, m, dk, dv, de = (int(getattr(c, k) or c.n) for k in ("H", "n", "m", "dk", "dv", "de"))
    S = H * (n * dk + m * dk + m * dv + n * m * dk + n * m + n + n * m * dv + n * dv) + n * de
    pops = circuit.populations
    grid = sum(int(np.prod(p.sizes)) for p in pops.values())
    spiking = level != "rate"
    nwb = spiking if nwb is None else bool(nwb)
    recorded = [] if not spiking or record_spikes is False else (
        list(pops) if record_spikes is True else [p for p in record_spikes if p in pops])
    spikes = sum(pops[p].N for p in recorded) * PLANNING_RATE * (float(warmup or 0.0) + float(duration))
    axes = len({a for p in pops.values() for a in p.axes})
    n_all = sum(p.N for p in pops.values())
    total = 8 * (3 * S + grid) + 12 * spikes + 256e3 + (2e6 if summary else 0)
    if nwb:
        total += 8 * spikes + 8 * n_all * (8 + axes) + 512e3
    return int(total)


def _remove_stale(parent: str, base: str) -> None:
    """Remove leftovers of a writer of ``parent/base`` that was killed: hidden temporary
    directories this project made (empty, or holding its marker; an old directory holding only
    the replaced results directory). Anything else with such a name is left alone."""
    for name in os.listdir(parent):
        stale = os.path.join(parent, name)
        if os.path.islink(stale) or not os.path.isdir(stale):
            continue
        if name.startswith(f".{base}.tmp-"):
            ours = _marker(stale) is not None or not os.listdir(stale)
        elif name.startswith(f".{base}.old-"):
            inside = os.listdir(stale)
            ours = not inside or (inside == ["x"] and (is_results_dir(os.path.join(stale, "x"))
                                                        or not os.listdir(os.path.join(stale, "x"))))
        else:
            continue
        if ours:
            shutil.rmtree(stale, ignore_errors=True)
        else:
            log.warning("left %s alone: named like a temporary directory of ctmhsa but not one", stale)


def _replace(tmp: str, path: str) -> None:
    """Move the complete directory ``tmp`` onto ``path`` (an existing one, checked to be ours,
    is moved aside first and removed after)."""
    parent, base = os.path.dirname(path), os.path.basename(path)
    if os.path.lexists(path):
        old = tempfile.mkdtemp(dir=parent, prefix=f".{base}.old-")
        os.rename(path, os.path.join(old, "x"))
        os.rename(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, path)


@contextlib.contextmanager
def results_directory(path, what: str = "path", kind: str = "run"):
    """Write a results directory atomically: yields a temporary directory beside ``path`` (with
    the marker), which replaces ``path`` when the block completes and is removed otherwise.

    ``path`` is checked with :func:`check_target` before and again just before the rename; if
    something that is not a results directory appeared there meanwhile, the complete results
    are kept beside it (``path.1``, ...) and an :class:`OutputError` says where.
    """
    path = check_target(path, what)
    parent, base = os.path.dirname(path), os.path.basename(path)
    os.makedirs(parent, exist_ok=True)
    _remove_stale(parent, base)   # one writer per results directory is assumed
    tmp = tempfile.mkdtemp(dir=parent, prefix=f".{base}.tmp-")
    try:
        _public(tmp, directory=True)
        _write_marker(tmp, kind)          # first: a killed writer's directory is recognisably ours
        yield tmp
        _write_marker(tmp, kind, files=[f for f in os.listdir(tmp) if f != MARKER])
        try:
            check_target(path, what)
        except OutputError as exc:
            k = 1
            while os.path.lexists(f"{path}.{k}"):
                k += 1
            os.rename(tmp, f"{path}.{k}")     # the computed results are not lost
            raise OutputError(f"{exc}; the results were written to {path}.{k} instead") from None
        _replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("results written to %s", path)


def write_result(result: SimulationResult, path: str, config: dict | None = None, extra=None,
                 nwb: bool | None = None) -> str:
    """Write ``result`` into directory ``path`` atomically; return the absolute path.

    Parameters
    ----------
    result : SimulationResult
    path : str
        The results directory. It must not exist, or be empty, or be a results directory of this
        project (:func:`check_target`), which is replaced only after the new one is complete.
    config : dict, optional
        The configuration tables to save as ``config.toml`` (default: from ``result.config``).
    extra : callable, optional
        ``extra(directory)`` writes further files (a summary figure) into the directory before
        it is renamed into place; it reads the files already written there.
    nwb : bool, optional
        Write ``spikes.nwb`` (:mod:`ctmhsa.sims.nwb`); default: at the spiking levels.

    Raises
    ------
    OutputError
        ``path`` holds something this project did not write (checked before writing anything).
    """
    path = _target(path, "path")       # checked by results_directory
    with results_directory(path, "path") as tmp:
        cfg = config if config is not None else tables_of(result.config)
        cfg = {k: v for k, v in cfg.items() if not k.startswith("_")}
        with open(os.path.join(tmp, "config.toml"), "w") as fh:
            fh.write(dumps_toml(cfg))
        with open(os.path.join(tmp, "metrics.json"), "w") as fh:
            fh.write(dumps_json(result.metrics()))
        np.savez_compressed(os.path.join(tmp, "stages.npz"), **result.stages)
        np.savez_compressed(os.path.join(tmp, "reference.npz"), **result.reference_stages)
        np.savez_compressed(os.path.join(tmp, "rates.npz"), **result.rates)
        trains = {}
        for pop, (i, t) in result.spikes.items():
            trains[f"{pop}.i"], trains[f"{pop}.t"] = np.asarray(i, np.int32), np.asarray(t, float)
        np.savez_compressed(os.path.join(tmp, "spikes.npz"), **trains)
        np.savez_compressed(os.path.join(tmp, "noise.npz"), **result.noise_variance)
        if nwb if nwb is not None else result.level != "rate":
            from .nwb import write_nwb

            write_nwb(result, os.path.join(tmp, "spikes.nwb"))
        prov = dict(versions=versions(), git=git_commit(), level=result.level, config=result.config,
                    timings=result.timings, counts=result.counts, diagnostics=result.diagnostics,
                    argv=sys.argv, device=result.config.get("device", "runtime"))
        nonfinite = {}
        text = dumps_json(prov, nonfinite)
        if nonfinite:     # where NaN/inf stood (null in strict JSON), for load
            prov["nonfinite"] = nonfinite
            text = dumps_json(prov)
        with open(os.path.join(tmp, "provenance.json"), "w") as fh:
            fh.write(text)
        if extra is not None:
            extra(tmp)
    return path


def load(path: str) -> SimulationResult:
    """Read a results directory written by :func:`write_result` back into the
    :class:`SimulationResult` that :func:`ctmhsa.sims.simulate_mhsa` returned (metrics recomputed from
    the stored stages, reference and noise variances give the same numbers; the NaN and ±inf that
    strict JSON wrote as ``null`` in ``provenance.json`` come back, from its ``nonfinite`` list)."""
    if not is_complete(path):
        raise ValueError(f"path: {path!r} is not a complete results directory (no provenance.json)")

    def npz(name):
        f = os.path.join(path, name)
        if not os.path.exists(f):      # written by an older version
            return {}
        with np.load(f) as data:
            return {k: np.array(data[k]) for k in data.files}

    with open(os.path.join(path, "provenance.json")) as fh:
        prov = json.load(fh)
    prov = restore_nonfinite(prov, prov.pop("nonfinite", {}))
    stages, ref = npz("stages.npz"), npz("reference.npz")
    trains = npz("spikes.npz")
    spikes = {k[:-2]: (trains[k], trains[k[:-2] + ".t"]) for k in trains if k.endswith(".i")}
    return SimulationResult(
        x_tilde=stages["x_tilde"], reference=ref["x_tilde"], stages=stages, reference_stages=ref,
        rates=npz("rates.npz"), spikes=spikes, level=prov["level"], config=prov["config"],
        diagnostics=prov.get("diagnostics", {}), timings=prov.get("timings", {}),
        counts=prov.get("counts", {}), noise_variance=npz("noise.npz"))
