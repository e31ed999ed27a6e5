"""Results directories, written atomically (temporary name, then rename).

Layout of one run's directory::

    config.toml        the configuration as resolved
    metrics.json       per-stage accuracy (SimulationResult.metrics())
    stages.npz         decoded stages  (keys: stage names)
    reference.npz      exact stages    (keys: stage names)
    rates.npz          rates (Hz) per population on its index grid (NaN = absent cell)
    spikes.npz         recorded spike trains: ``<population>.i`` (cell), ``<population>.t`` (s)
    noise.npz          per-entry noise-floor variance of every stage (spiking levels)
    provenance.json    versions, level, seed, device, timings, counts, diagnostics

A directory that exists is complete: it appears only through the final rename.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import tempfile
from importlib import metadata

import numpy as np

from .config import dumps_toml, tables_of
from .result import SimulationResult

__all__ = ["write_result", "atomic_write_text", "atomic_write_json", "atomic_savez", "versions", "is_complete",
           "load"]


def versions() -> dict:
    """Versions of Python and of the packages a result depends on."""
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for pkg in ("ctmhsa", "brian2", "numpy", "networkx", "matplotlib", "cython"):
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


def atomic_write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and ``os.replace``."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_json(path: str, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, default=_json_default, allow_nan=True) + "\n")


def atomic_savez(path: str, **arrays) -> None:
    """``np.savez_compressed(path, **arrays)`` through a temporary file and ``os.replace``: a file
    at ``path`` is always complete."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=".npz")
    os.close(fd)
    try:
        np.savez_compressed(tmp, **arrays)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def is_complete(path: str) -> bool:
    """Whether ``path`` is a complete results directory (it is renamed into place only after
    every file is written, so existence means completeness)."""
    return os.path.isfile(os.path.join(path, "provenance.json"))


def write_result(result: SimulationResult, path: str, config: dict | None = None) -> str:
    """Write ``result`` into directory ``path`` atomically; return the absolute path.

    An existing directory at ``path`` is replaced only after the new one is complete.
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
        prov = dict(versions=versions(), level=result.level, config=result.config,
                    timings=result.timings, counts=result.counts, diagnostics=result.diagnostics,
                    argv=sys.argv, device=result.config.get("device", "runtime"))
        with open(os.path.join(tmp, "provenance.json"), "w") as fh:
            json.dump(prov, fh, indent=2, default=_json_default)
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
    return path


def load(path: str) -> SimulationResult:
    """Read a results directory written by :func:`write_result` back into the
    :class:`SimulationResult` that :func:`sims.simulate_mhsa` returned (metrics recomputed from
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
