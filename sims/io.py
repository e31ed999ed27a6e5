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

A writer killed at any instant leaves the old or the new results at the path: on Linux the
complete new directory and the old one are swapped in one step (``renameat2`` with
``RENAME_EXCHANGE``); elsewhere the old one is moved aside first, and if the writer dies before
the new one is moved in, :func:`load` and the next writer put the complete one back. Several
writers of one path at once all succeed, the last to finish wins: each owns its temporary
directory (a lock that ends with its process), so that clearing a killed writer's leftovers never
removes a live writer's, and the final move holds the path's lock (``.<name>.lock`` beside it).

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
import ctypes
import errno
import functools
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata

try:
    import fcntl
except ImportError:      # not POSIX: filelock for the target's lock, no ownership of temporaries
    fcntl = None

import numpy as np

from ctmhsa.neurons.models import FIDELITY_LEVELS
from ctmhsa.neurons.levels import get_level

from .atomic import OutputError, _public, atomic_path  # noqa: F401 - OutputError, atomic_path re-exported
from .config import dumps_toml, tables_of
from .jsonfile import dumps_json, restore_nonfinite, to_json  # noqa: F401 - re-exported
from .result import STAGE_ORDER, SimulationResult

__all__ = ["write_result", "atomic_path", "atomic_write_text", "atomic_write_json", "atomic_savez", "versions", "git_commit",
           "is_complete", "load", "read_member", "MARKER", "OutputError", "is_results_dir", "check_target", "check_output",
           "estimate_result_bytes", "results_directory", "to_json", "dumps_json"]

log = logging.getLogger(__name__)

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
    # atomically: a writer killed while rewriting it leaves the previous, valid one
    atomic_write_text(os.path.join(directory, MARKER), dumps_json(doc))


def _finished(path: str) -> bool:
    """Whether directory ``path`` holds a finished write: its marker lists files (the final
    marker, written after all of them) and every one of them is there."""
    files = (_marker(path) or {}).get("files")
    return (isinstance(files, list) and bool(files)
            and all(os.path.isfile(os.path.join(path, str(f))) for f in files))


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
    spiking = get_level(level).spiking
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


@contextlib.contextmanager
def _target_lock(parent: str, base: str):
    """Hold the lock of results directory ``parent/base`` across processes: ``flock`` on the file
    ``.base.lock`` beside it, which is removed on release (a waiter that then holds the lock of a
    removed file sees so and takes the new one). Held only while temporaries are cleaned up or
    created and while the complete directory is moved into place, never while results are written."""
    lock = os.path.join(parent, f".{base}.lock")
    if fcntl is None:
        import filelock

        with filelock.FileLock(lock):
            yield
        return
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:      # a file system without locks: go on unlocked, as before locks existed
            log.debug("no lock on %s (%s)", lock, exc)
            os.close(fd)
            yield
            return
        try:
            st, now = os.fstat(fd), os.stat(lock)
            if (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino):
                break
        except FileNotFoundError:
            pass
        os.close(fd)                # removed by the holder we waited for: lock the new one
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(fd)


def _own(directory: str) -> int | None:
    """Mark ``directory`` as a live writer's (``flock`` on it, kept until :func:`_disown`): others
    then never remove it as a killed writer's leftover. The lock goes with the process."""
    if fcntl is None:
        return None
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:                 # a file system without locks: unowned, as before locks existed
        os.close(fd)
        return None
    return fd


def _disown(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def _live(directory: str) -> bool:
    """Whether a live writer owns ``directory`` (:func:`_own`)."""
    if fcntl is None:
        return False
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return True                 # cannot tell: leave it alone
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)    # released by the close
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


def _leftovers(parent: str, base: str, kind: str):
    """The directories ``.base.<kind>-*`` beside ``parent/base`` that no live writer owns."""
    for name in sorted(os.listdir(parent)):
        d = os.path.join(parent, name)
        if name.startswith(f".{base}.{kind}-") and not os.path.islink(d) and os.path.isdir(d) and not _live(d):
            yield d


def _orphan(parent: str, base: str) -> str | None:
    """A complete results directory that a writer killed while moving it into place left beside
    the absent ``parent/base``: the new one (a finished temporary, :func:`_finished`; the latest
    if several) or else the old one it had moved aside (``.base.old-*/x``)."""
    done = [d for d in _leftovers(parent, base, "tmp") if _finished(d)]
    if done:
        return max(done, key=lambda d: os.stat(os.path.join(d, MARKER)).st_mtime)
    for d in _leftovers(parent, base, "old"):
        x = os.path.join(d, "x")
        if os.path.isdir(x) and not os.path.islink(x) and os.listdir(x) and is_results_dir(x):
            return x
    return None


def _recover(path: str) -> bool:
    """Put back the results directory ``path`` from the orphan (:func:`_orphan`) of a writer killed
    between the two renames of the fallback in :func:`_replace`; call it holding the target lock.
    Whether one was put back."""
    parent, base = os.path.dirname(path), os.path.basename(path)
    if os.path.lexists(path) or not os.path.isdir(parent):
        return False
    orphan = _orphan(parent, base)
    if orphan is None:
        return False
    os.rename(orphan, path)
    log.warning("restored %s from %s, left by a writer killed while replacing it", path, orphan)
    return True


def _remove_stale(parent: str, base: str) -> None:
    """Remove leftovers of a writer of ``parent/base`` that was killed: hidden temporary
    directories this project made (empty, or holding its marker or the marker's temporary file
    only; an old directory holding only
    the replaced results directory) that no live writer owns (:func:`_live`). Anything else with
    such a name is left alone. Call it holding the target lock, after :func:`_recover`."""
    for stale in _leftovers(parent, base, "tmp"):
        # killed before its marker was complete, it holds nothing but the marker's temporary
        if _marker(stale) is not None or all(f == MARKER or f.startswith(".tmp-") for f in os.listdir(stale)):
            shutil.rmtree(stale, ignore_errors=True)
        else:
            log.warning("left %s alone: named like a temporary directory of ctmhsa but not one", stale)
    for stale in _leftovers(parent, base, "old"):
        inside = os.listdir(stale)
        x = os.path.join(stale, "x")
        if not inside or (inside == ["x"] and (is_results_dir(x) or not os.listdir(x))):
            shutil.rmtree(stale, ignore_errors=True)
        else:
            log.warning("left %s alone: named like a temporary directory of ctmhsa but not one", stale)


_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


@functools.lru_cache(maxsize=1)
def _renameat2():
    """Linux's ``renameat2`` (glibc 2.28 and later), or ``None``."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def _exchange(a: str, b: str) -> bool:
    """Swap the directories ``a`` and ``b`` in one atomic step (``renameat2(RENAME_EXCHANGE)``);
    ``False`` where the system or the file system cannot."""
    fn = _renameat2()
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), a, None, b)


def _replace(tmp: str, path: str) -> None:
    """Move the complete directory ``tmp`` onto ``path`` (an existing one, checked to be ours, is
    removed after) so that ``path`` holds the old or the new results at every instant: swapped in
    one step where the system can (:func:`_exchange`). Elsewhere the old one is moved aside first,
    and a writer killed between the two renames leaves both complete, which :func:`load` and the
    next writer put back (:func:`_recover`). Call it holding the target lock."""
    parent, base = os.path.dirname(path), os.path.basename(path)
    if not os.path.lexists(path):
        os.rename(tmp, path)
    elif _exchange(tmp, path):
        shutil.rmtree(tmp, ignore_errors=True)       # now the old results
    else:
        old = tempfile.mkdtemp(dir=parent, prefix=f".{base}.old-")
        os.rename(path, os.path.join(old, "x"))
        try:
            os.rename(tmp, path)
        except BaseException:
            os.rename(os.path.join(old, "x"), path)      # the old results stay in place
            os.rmdir(old)
            raise
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def results_directory(path, what: str = "path", kind: str = "run"):
    """Write a results directory atomically: yields a temporary directory beside ``path`` (with
    the marker), which replaces ``path`` when the block completes and is removed otherwise.

    ``path`` is checked with :func:`check_target` before and again just before the rename; if
    something that is not a results directory appeared there meanwhile, the complete results
    are kept beside it (``path.1``, ...) and an :class:`OutputError` says where.

    Writers of one ``path`` in several processes at once all succeed, the last to finish wins:
    each owns its temporary directory (a lock that ends with its process), which the others'
    clean-up of killed writers' leftovers never removes, and the final move holds a lock of
    ``path`` (the file ``.<name>.lock`` beside it while held).
    """
    path = check_target(path, what)
    parent, base = os.path.dirname(path), os.path.basename(path)
    os.makedirs(parent, exist_ok=True)
    with _target_lock(parent, base):
        _recover(path)
        _remove_stale(parent, base)
        tmp = tempfile.mkdtemp(dir=parent, prefix=f".{base}.tmp-")
        owner = _own(tmp)
    try:
        _public(tmp, directory=True)
        _write_marker(tmp, kind)          # first: a killed writer's directory is recognisably ours
        yield tmp
        _write_marker(tmp, kind, files=[f for f in os.listdir(tmp) if f != MARKER])
        with _target_lock(parent, base):
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
    finally:
        _disown(owner)
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
    if not isinstance(result, SimulationResult):   # before the target is touched
        raise TypeError(f"result: expected a ctmhsa.sims.SimulationResult (simulate_mhsa's), got "
                        f"{type(result).__name__}" + (" (a model's result: use its .save(path))"
                                                      if type(result).__name__ == "ModelResult" else ""))
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
        if nwb if nwb is not None else get_level(result.level).spiking:
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


def read_member(directory, name: str, what: str = "path", expect: type | None = None):
    """The contents of file ``name`` of the results directory ``directory``, read safely: an
    ``.npz`` archive as a dict of arrays (never unpickled), a ``.json`` file as the document
    (``expect``: the type it must have, e.g. ``dict``).

    Raises
    ------
    ValueError
        Naming ``what``, the directory and the file and what is wrong with it: missing, not a
        regular file, empty, not a zip archive of arrays, an object (pickled) array, not valid
        JSON or not of the type expected.
    """
    f = os.path.join(os.fspath(directory), name)
    where = f"{what}: {os.fspath(directory)!r}: {name}"
    if not os.path.lexists(f):
        raise ValueError(f"{where} is missing; the results directory is incomplete or damaged")
    if not os.path.isfile(f):
        raise ValueError(f"{where} is not a regular file" + (" (a dangling link)" if os.path.islink(f) else ""))
    if os.path.getsize(f) == 0:
        raise ValueError(f"{where} is empty (0 bytes): truncated")
    if name.endswith(".npz"):
        if not zipfile.is_zipfile(f):
            raise ValueError(f"{where} is not an npz archive (not a zip file): truncated or replaced")
        try:
            with np.load(f, allow_pickle=False) as data:
                return {k: np.array(data[k]) for k in data.files}
        except ValueError as exc:
            if "allow_pickle" in str(exc):
                raise ValueError(f"{where} holds an object array (pickled Python objects), which ctmhsa never "
                                 f"writes and does not unpickle") from None
            raise ValueError(f"{where} cannot be read as arrays ({exc})") from None
        except Exception as exc:        # a damaged member: BadZipFile, EOFError, zlib.error, OSError, ...
            raise ValueError(f"{where} cannot be read as arrays ({type(exc).__name__}: {exc}): truncated or "
                             f"damaged") from None
    try:
        with open(f, encoding="utf-8") as fh:
            doc = json.load(fh)
    except UnicodeDecodeError as exc:
        raise ValueError(f"{where} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where} is not valid JSON ({exc.msg}: line {exc.lineno} column {exc.colno})") from None
    except OSError as exc:
        raise ValueError(f"{where} cannot be read ({exc.strerror or exc})") from None
    if expect is not None and not isinstance(doc, expect):
        names = {dict: "a JSON object", list: "a JSON array"}
        raise ValueError(f"{where}: expected {names.get(expect, expect.__name__)}, got {_json_type(doc)}")
    return doc


def _json_type(doc) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(doc), "a number")


def load(path) -> SimulationResult:
    """Read a results directory written by :func:`write_result` back into the
    :class:`SimulationResult` that :func:`ctmhsa.sims.simulate_mhsa` returned (metrics recomputed from
    the stored stages, reference and noise variances give the same numbers; the NaN and ±inf that
    strict JSON wrote as ``null`` in ``provenance.json`` come back, from its ``nonfinite`` list).

    A directory that a writer killed while replacing it left beside ``path`` (possible only where
    the two directories cannot be swapped in one step) is put back first, or read where it is.

    Raises
    ------
    TypeError
        ``path`` is not a path.
    ValueError
        ``path`` is not a complete results directory of a run, or one of its files is missing or
        damaged (:func:`read_member`: the message names the directory, the file and what is wrong).
    """
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path: expected a results directory path (a string), got {path!r}")
    path = os.fspath(path)
    if not os.path.lexists(path) and path:
        path = _put_back(path)
    if not is_complete(path):
        kind = (_marker(path) or {}).get("kind") if os.path.isdir(path) else None
        hint = {"model": " (a model's results: read it with ctmhsa.sims.ModelResult.load)"}.get(kind, "")
        raise ValueError(f"path: {path!r} is not a complete results directory of a run (no provenance.json){hint}")
    listed = (_marker(path) or {}).get("files")
    listed = set(map(str, listed)) if isinstance(listed, list) else set()

    def npz(name, required=False):
        if not required and name not in listed and not os.path.lexists(os.path.join(path, name)):
            return {}           # written by an older version
        return read_member(path, name)

    prov = read_member(path, "provenance.json", expect=dict)
    for key, typ in (("level", str), ("config", dict)):
        if not isinstance(prov.get(key), typ):
            got = "nothing" if key not in prov else _json_type(prov[key])
            raise ValueError(f"path: {path!r}: provenance.json: {key!r} must be "
                             f"{'a string' if typ is str else 'an object'}, got {got}")
    if prov["level"] not in FIDELITY_LEVELS:
        raise ValueError(f"path: {path!r}: provenance.json: 'level' must be one of {sorted(FIDELITY_LEVELS)}, "
                         f"got {prov['level']!r}")
    nonfinite = prov.pop("nonfinite", {})
    prov = restore_nonfinite(prov, nonfinite if isinstance(nonfinite, dict) else {})
    stages, ref = npz("stages.npz", True), npz("reference.npz", True)
    for name, d in (("stages.npz", stages), ("reference.npz", ref)):
        if "x_tilde" not in d:
            raise ValueError(f"path: {path!r}: {name} has no array 'x_tilde' (holds {sorted(d)})")
    for stage in STAGE_ORDER:      # the metrics compare them: a damaged file is named here, not there
        if stage in stages and stage in ref and np.shape(stages[stage]) != np.shape(ref[stage]):
            raise ValueError(f"path: {path!r}: stages.npz: {stage!r} has shape {np.shape(stages[stage])} but "
                             f"reference.npz holds {np.shape(ref[stage])}: damaged or mixed from two results")
    trains = npz("spikes.npz")
    for k in trains:
        pair = k[:-2] + (".t" if k.endswith(".i") else ".i")
        if not k.endswith((".i", ".t")) or pair not in trains:
            raise ValueError(f"path: {path!r}: spikes.npz: {k!r} has no matching {pair!r} "
                             f"(expected '<population>.i' and '<population>.t' pairs)")
    spikes = {k[:-2]: (trains[k], trains[k[:-2] + ".t"]) for k in trains if k.endswith(".i")}
    return SimulationResult(
        x_tilde=stages["x_tilde"], reference=ref["x_tilde"], stages=stages, reference_stages=ref,
        rates=npz("rates.npz"), spikes=spikes, level=prov["level"], config=prov["config"],
        diagnostics=_dict(prov, "diagnostics", path), timings=_dict(prov, "timings", path),
        counts=_dict(prov, "counts", path), noise_variance=npz("noise.npz"))


def _dict(prov: dict, key: str, path: str) -> dict:
    v = prov.get(key, {})
    if not isinstance(v, dict):
        raise ValueError(f"path: {path!r}: provenance.json: {key!r} must be an object, got {_json_type(v)}")
    return v


def _put_back(path: str) -> str:
    """``path``, or where its results are: the absent ``path`` is put back from a killed writer's
    orphan (:func:`_recover`), or the orphan is read where it is when that cannot be moved."""
    target = os.path.abspath(path)
    parent, base = os.path.dirname(target), os.path.basename(target)
    if not os.path.isdir(parent) or _orphan(parent, base) is None:
        return path
    try:
        with _target_lock(parent, base):
            if _recover(target):
                return path
    except OSError as exc:          # read-only: read the orphan in place
        log.debug("cannot put back %s (%s)", target, exc)
    orphan = _orphan(parent, base)
    if orphan is not None:
        log.warning("reading %s from %s, left by a writer killed while replacing it", path, orphan)
        return orphan
    return path
