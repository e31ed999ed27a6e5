"""Brian2 runtime settings shared by every part of the project (code-generation target, caches)."""

from __future__ import annotations

import os

__all__ = ["cache_dir", "configure_brian2"]


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
