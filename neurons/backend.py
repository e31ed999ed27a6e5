"""Brian2 runtime settings shared by every part of the project (code-generation target, caches)."""

from __future__ import annotations

import json
import os

__all__ = ["cache_dir", "configure_brian2", "cached_json", "SHIPPED_CALIBRATIONS"]


def cache_dir() -> str:
    """Directory for Brian2's compiled code (``$CTMHSA_CACHE`` or ``~/.cache/ctmhsa``)."""
    base = os.environ.get("CTMHSA_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "ctmhsa")
    os.makedirs(base, exist_ok=True)
    return base


def configure_brian2(target: str) -> None:
    """Select Brian2's code-generation target and keep its Cython cache in :func:`cache_dir`."""
    from brian2 import prefs

    if target not in ("numpy", "cython"):
        raise ValueError(f"codegen: expected 'numpy', 'cython' or 'auto'; got {target!r}")
    prefs.codegen.target = target
    prefs.codegen.runtime.cython.cache_dir = os.path.join(cache_dir(), "cython")
    prefs.codegen.runtime.cython.multiprocess_safe = True


SHIPPED_CALIBRATIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calibrations")
"""Calibrations measured at release and shipped with the package (the lif somata's f–I curves at
the level's steps, 0.5 and 0.1 ms): a fresh machine reads them instead of spending 10-150 s on
each measurement. They are keyed like the cache, so a changed parameter, step or procedure
measures anew."""


def cached_json(name: str, key: str, compute) -> dict:
    """``compute()`` (a JSON-able dict), cached in ``cache_dir()/calibration/<name>-<key>.json``.

    A cached file is used only if it loads and stores the same ``key`` (anything else is
    recomputed, never trusted); then a shipped one (:data:`SHIPPED_CALIBRATIONS`) under the same
    rule; a new file is written atomically.
    """
    path = os.path.join(cache_dir(), "calibration", f"{name}-{key}.json")
    for candidate in (path, os.path.join(SHIPPED_CALIBRATIONS, f"{name}-{key}.json")):
        try:
            with open(candidate) as fh:
                out = json.load(fh)
            if out.get("key") == key:
                return out
        except (OSError, ValueError):
            pass
    out = dict(compute(), key=key)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        json.dump(out, fh)
    os.replace(tmp, path)
    return out
