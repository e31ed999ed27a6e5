"""Brian2 runtime settings shared by every part of the project (code-generation target, caches)."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import warnings

__all__ = ["cache_dir", "configure_brian2", "building", "run_network", "cached_json", "json_checksum",
           "SHIPPED_CALIBRATIONS"]


def cache_dir() -> str:
    """Directory for Brian2's compiled code and the calibrations (``$CTMHSA_CACHE`` or
    ``~/.cache/ctmhsa``), created if missing.

    An unusable location is refused, not worked around: a cache that silently moved elsewhere
    would recompile and re-measure on every run without saying why.

    Raises
    ------
    ValueError
        The location exists and is not a directory, cannot be created (a missing or read-only
        parent) or is not writable; the message names ``CTMHSA_CACHE`` and the path.
    """
    env = os.environ.get("CTMHSA_CACHE")
    base = env or os.path.join(os.path.expanduser("~"), ".cache", "ctmhsa")
    what = f"CTMHSA_CACHE: {base!r}" if env else (f"the cache directory {base!r} (CTMHSA_CACHE is not set; "
                                                  "set it to choose another)")
    fix = "point CTMHSA_CACHE at a writable directory (it is created if missing)"
    if os.path.exists(base) and not os.path.isdir(base):
        raise ValueError(f"{what} is a file, not a directory; {fix}")
    try:
        os.makedirs(base, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"{what} cannot be created ({exc.strerror or exc}); {fix}") from None
    if not os.access(base, os.W_OK | os.X_OK):
        raise ValueError(f"{what} is not writable; {fix}")
    return base


def configure_brian2(target: str) -> None:
    """Select Brian2's code-generation target and keep its Cython cache in :func:`cache_dir`."""
    from brian2 import prefs

    if target not in ("numpy", "cython"):
        raise ValueError(f"codegen: expected 'numpy', 'cython' or 'auto'; got {target!r}")
    prefs.codegen.target = target
    prefs.codegen.runtime.cython.cache_dir = os.path.join(cache_dir(), "cython")
    prefs.codegen.runtime.cython.multiprocess_safe = True


@contextlib.contextmanager
def building(target: str):
    """Configure Brian2 for ``target`` (:func:`configure_brian2`), with numpy code while the block
    creates the network.

    Creating synapses (``Synapses.connect``) and writing values by index run each of their code
    objects once, at build time. As Cython, every one of them is a module compiled on a machine's
    first run (10-13 s each on 2 cores at load 2: 88 s of the default circuit's 312 s cold
    build) and then executed once; numpy code runs them at once and creates the same synapses in
    the same order. The code objects of the run itself, created when the network is prepared,
    are ``target``'s."""
    configure_brian2(target)
    from brian2 import prefs

    prefs.codegen.target = "numpy"
    try:
        yield
    finally:
        prefs.codegen.target = target


def run_network(network, duration, **kwargs) -> None:
    """``network.run(duration, **kwargs)`` without a full garbage collection of the whole heap.

    Brian2's ``Network.run`` starts with ``gc.collect()`` (so that its magic network forgets dead
    objects); an explicit network has no use for it, yet it walks every object of the process:
    0.12 s per run in a bare script, 0.27 s in a test process (measured). The objects alive
    before the run are frozen (``gc.freeze``: moved aside, not copied) for its duration, so the
    collection examines only what the run itself creates. A heap its caller froze already is
    left frozen. A large dead network is collected before the next is built instead
    (:func:`ctmhsa.circuits.instantiate.instantiate`).
    """
    if gc.get_freeze_count():          # the caller froze the heap (a split run): leave it so
        network.run(duration, **kwargs)
        return
    gc.freeze()
    try:
        network.run(duration, **kwargs)
    finally:
        gc.unfreeze()


SHIPPED_CALIBRATIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calibrations")
"""Calibrations measured at release and shipped with the package (the lif somata's f–I curves at
the level's steps, 1, 0.5 and 0.1 ms): a fresh machine reads them instead of spending 10-150 s on
each measurement. They are keyed like the cache, so a changed parameter, step or procedure
measures anew, and carry a checksum of their values like every cache file."""


def json_checksum(values: dict) -> str:
    """SHA-256 of a JSON-able dict's values (``checksum`` itself left out), as JSON stores them:
    the same for the dict written and the dict read back (floats round-trip exactly)."""
    blob = json.dumps({k: v for k, v in values.items() if k != "checksum"}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _read_verified(path: str, key: str):
    """``(values, None)`` for a sound file at ``path``; ``(None, why)`` for an unusable one;
    ``(None, None)`` for none at all."""
    try:
        with open(path) as fh:
            out = json.load(fh)
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:     # unreadable, truncated, not JSON
        return None, f"not readable JSON: {exc}"
    if not isinstance(out, dict):
        return None, f"holds a JSON {type(out).__name__}, not an object of values"
    if out.get("key") != key:
        return None, f"stores the key {out.get('key')!r}, not {key!r}"
    if "checksum" not in out:
        return None, "has no checksum of its values (incomplete, or written by an older version)"
    if out["checksum"] != json_checksum(out):
        return None, "its values do not match their checksum (altered or damaged after it was written)"
    return {k: v for k, v in out.items() if k != "checksum"}, None


def cached_json(name: str, key: str, compute) -> dict:
    """``compute()`` (a JSON-able dict), cached in ``cache_dir()/calibration/<name>-<key>.json``.

    Every file stores ``key`` and a SHA-256 of its values (``checksum``, :func:`json_checksum`).
    The cache file is used only if it loads as a JSON object with the same ``key`` and values
    that match their checksum; then the shipped one (:data:`SHIPPED_CALIBRATIONS`) under the
    same rule; else ``compute()`` is measured and written atomically. An unusable file (not
    JSON, not an object, another key, fields missing, values altered: NaN or tampered) is never
    trusted: a ``RuntimeWarning`` names it, a bad cache file is discarded (so the warning comes
    once) and the shipped calibration or a new measurement takes its place.

    Returns
    -------
    dict
        ``compute()``'s values and ``key`` (the checksum is not returned).
    """
    path = os.path.join(cache_dir(), "calibration", f"{name}-{key}.json")
    shipped = os.path.join(SHIPPED_CALIBRATIONS, f"{name}-{key}.json")
    out, why = _read_verified(path, key)
    if out is not None:
        return out
    ship, ship_why = _read_verified(shipped, key)
    if why is not None:
        warnings.warn(f"calibration cache {path!r} is unusable ({why}); discarded, "
                      + ("the shipped calibration is used" if ship is not None else "measuring it anew"),
                      RuntimeWarning, stacklevel=2)
        try:
            os.unlink(path)
        except OSError:
            pass
    if ship is not None:
        return ship
    if ship_why is not None:
        warnings.warn(f"shipped calibration {shipped!r} is unusable ({ship_why}); measuring it anew",
                      RuntimeWarning, stacklevel=2)
    out = dict(compute(), key=key)
    out = json.loads(json.dumps(out))           # the values as read back, for the checksum
    out["checksum"] = json_checksum(out)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        json.dump(out, fh)
    os.replace(tmp, path)
    return {k: v for k, v in out.items() if k != "checksum"}
