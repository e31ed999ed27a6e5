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

A directory that exists is complete: it appears only through the final rename. Directories
and files get the permissions the umask allows (0755 and 0644 under the usual umask 022), not
the owner-only ones of temporary files.
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
from .result import SimulationResult

__all__ = ["write_result", "atomic_path", "atomic_write_text", "atomic_write_json", "atomic_savez", "versions", "git_commit",
           "is_complete", "load"]

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


def _json_default(o):
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (np.floating, np.integer, np.bool_)):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


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
    atomic_write_text(path, json.dumps(obj, indent=2, default=_json_default, allow_nan=True) + "\n")


def atomic_savez(path: str, **arrays) -> None:
    """``np.savez_compressed(path, **arrays)`` through a temporary file and ``os.replace``: a file
    at ``path`` is always complete."""
    with atomic_path(path, ".npz") as tmp:
        np.savez_compressed(tmp, **arrays)


def is_complete(path: str) -> bool:
    """Whether ``path`` is a complete results directory (it is renamed into place only after
    every file is written, so existence means completeness)."""
    return os.path.isfile(os.path.join(path, "provenance.json"))


def write_result(result: SimulationResult, path: str, config: dict | None = None, extra=None,
                 nwb: bool | None = None) -> str:
    """Write ``result`` into directory ``path`` atomically; return the absolute path.

    Parameters
    ----------
    result : SimulationResult
    path : str
        The results directory. An existing one is replaced only after the new one is complete.
    config : dict, optional
        The configuration tables to save as ``config.toml`` (default: from ``result.config``).
    extra : callable, optional
        ``extra(directory)`` writes further files (a summary figure) into the directory before
        it is renamed into place; it reads the files already written there.
    nwb : bool, optional
        Write ``spikes.nwb`` (:mod:`ctmhsa.sims.nwb`); default: at the spiking levels.
    """
    path = os.path.abspath(path)
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    # leftovers of a writer that was killed (one writer per results directory is assumed)
    for stale in os.listdir(parent):
        if stale.startswith(f".{os.path.basename(path)}.tmp-") or stale.startswith(f".{os.path.basename(path)}.old-"):
            shutil.rmtree(os.path.join(parent, stale), ignore_errors=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(path)}.tmp-")
    try:
        _public(tmp, directory=True)
        cfg = config if config is not None else tables_of(result.config)
        cfg = {k: v for k, v in cfg.items() if not k.startswith("_")}
        with open(os.path.join(tmp, "config.toml"), "w") as fh:
            fh.write(dumps_toml(cfg))
        with open(os.path.join(tmp, "metrics.json"), "w") as fh:
            json.dump(result.metrics(), fh, indent=2, default=_json_default)
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
        with open(os.path.join(tmp, "provenance.json"), "w") as fh:
            json.dump(prov, fh, indent=2, default=_json_default)
        if extra is not None:
            extra(tmp)
        if os.path.exists(path):
            old = tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(path)}.old-")
            os.rename(path, os.path.join(old, "x"))
            os.rename(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("results written to %s", path)
    return path


def load(path: str) -> SimulationResult:
    """Read a results directory written by :func:`write_result` back into the
    :class:`SimulationResult` that :func:`ctmhsa.sims.simulate_mhsa` returned (metrics recomputed from
    the stored stages, reference and noise variances give the same numbers)."""
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
    stages, ref = npz("stages.npz"), npz("reference.npz")
    trains = npz("spikes.npz")
    spikes = {k[:-2]: (trains[k], trains[k[:-2] + ".t"]) for k in trains if k.endswith(".i")}
    return SimulationResult(
        x_tilde=stages["x_tilde"], reference=ref["x_tilde"], stages=stages, reference_stages=ref,
        rates=npz("rates.npz"), spikes=spikes, level=prov["level"], config=prov["config"],
        diagnostics=prov.get("diagnostics", {}), timings=prov.get("timings", {}),
        counts=prov.get("counts", {}), noise_variance=npz("noise.npz"))
