"""Sweeps: many :func:`ctmhsa.sims.simulate_mhsa` runs on dask, resumable from results directories."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import os

import numpy as np

from .build import check_call
from .distributed import client_for
from .figure_data import param_key
from .io import check_output, check_target, is_complete, write_result
from .options import check_scheduler, split_options
from .progress import progress
from .simulate import simulate_mhsa

__all__ = ["sweep", "item_key"]

KEY_FILE = "sweep_item.json"
"""The file of an item's results directory that holds the key of its parameters (:func:`item_key`)."""


def _simulate_item(kwargs: dict):
    return simulate_mhsa(**kwargs)


def item_key(kwargs: dict) -> str:
    """A key of the ``simulate_mhsa`` arguments ``kwargs``: arrays by shape, dtype and contents
    at any depth (in lists, dicts, perturbations), everything else by value
    (:func:`ctmhsa.sims.figure_data.param_key`). ``report`` is left out (it changes nothing a run
    computes) and a ``distributed.Client`` scheduler counts as one."""
    kw = {k: v if isinstance(v, np.ndarray) else _nested(v) for k, v in kwargs.items() if k != "report"}
    if "scheduler" in kw and type(kwargs["scheduler"]).__name__ == "Client":
        kw["scheduler"] = "client"
    return param_key(**kw)


def _nested(v):
    """``v`` with every array inside it (in lists, tuples, dicts, dataclasses such as a
    perturbation) replaced by a digest of its type, shape, dtype and every byte: JSON's
    ``repr`` of an array elides the middle of a large one, and two such arrays must differ."""
    if isinstance(v, np.ndarray):
        a = np.ascontiguousarray(v)
        if a.dtype.hasobject:         # the bytes of object arrays are addresses: their entries instead
            return {"ndarray": [type(v).__name__, list(np.shape(v)), "object", [_nested(x) for x in a.ravel().tolist()]]}
        digest = hashlib.sha256(a.tobytes()).hexdigest()
        return {"ndarray": [type(v).__name__, list(np.shape(v)), a.dtype.str, digest, repr(getattr(v, "dim", ""))]}
    if isinstance(v, dict):
        return {k: _nested(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_nested(x) for x in v]
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {"dataclass": type(v).__qualname__, **{f.name: _nested(getattr(v, f.name)) for f in dataclasses.fields(v)}}
    return v


def _stored_key(path: str) -> str | None:
    """The key an item's complete results directory was computed for (None: none stored)."""
    try:
        with open(os.path.join(path, KEY_FILE)) as fh:
            return json.load(fh).get("key")
    except (OSError, ValueError, AttributeError):
        return None


def sweep(items, scheduler="local", out_dir: str | None = None):
    """Run :func:`ctmhsa.sims.simulate_mhsa` for every keyword dict of ``items`` on dask.

    Parameters
    ----------
    items : sequence of dict
        Keyword arguments of ``simulate_mhsa`` (inputs, seeds, levels, ...).
    scheduler : "local", "serial", an address or a ``distributed.Client``
        Where to run (``"serial"``: in this process, in order).
    out_dir : str, optional
        If given, item k is written to ``out_dir/item_<k>`` (atomically) with the key of its
        arguments (:func:`item_key`, in ``item_<k>/sweep_item.json``). An item whose results
        directory is complete and holds the same key is not recomputed (its path is returned),
        so a killed sweep resumes where it stopped; an item whose arguments changed (any value,
        array contents included) or whose directory has no key is computed again and replaces it.

    Returns
    -------
    list of SimulationResult (or of results-directory paths when ``out_dir`` is given)

    Raises
    ------
    TypeError, ValueError
        An item that is not a dict or whose arguments ``simulate_mhsa`` refuses before building
        (named ``items[k]``), or an unknown ``scheduler`` — before anything runs.
    ctmhsa.sims.io.OutputError
        An item's path holds something that is not a results directory of this project, or
        ``out_dir`` is not writable — before anything runs.
    """
    if isinstance(items, (dict, str, bytes)):
        raise TypeError(f"items: expected a sequence of dicts of simulate_mhsa arguments, got {type(items).__name__}")
    items = list(items)
    for k, it in enumerate(items):
        _check_item(k, it)
    check_scheduler(scheduler, allow_none=False)
    if out_dir is not None and (isinstance(out_dir, bool) or not isinstance(out_dir, (str, os.PathLike))):
        raise TypeError(f"out_dir: expected a directory path (a string), got {out_dir!r}")
    if out_dir is None:
        with client_for(scheduler) as client, progress(total=len(items), desc="sweep", unit="run") as bar:
            if client is None:
                out = []
                for it in items:
                    out.append(_simulate_item(it))
                    bar.update()
                return out
            futures = client.map(_simulate_item, items, pure=False)
            _follow(futures, bar)
            return client.gather(futures)
    paths = [os.path.join(out_dir, f"item_{k}") for k in range(len(items))]
    keys = [item_key(it) for it in items]
    todo = [k for k, p in enumerate(paths) if not (is_complete(p) and _stored_key(p) == keys[k])]
    if todo:           # before anything runs: never replace what this project did not write
        for k in todo:
            check_target(paths[k], what=f"out_dir (item {k})")
        check_output(paths[todo[0]], what="out_dir")       # writable (one probe for all items)
    if todo:
        with client_for(scheduler) as client, progress(total=len(items), initial=len(items) - len(todo),
                                                       desc="sweep", unit="run") as bar:
            if client is None:
                for k in todo:
                    _write_item(items[k], paths[k], keys[k])
                    bar.update()
            else:
                futures = client.map(_write_item, [items[k] for k in todo], [paths[k] for k in todo],
                                     [keys[k] for k in todo], pure=False)
                _follow(futures, bar)
                client.gather(futures)
    return paths


def _check_item(k: int, item) -> None:
    """Refuse item ``k`` whose arguments ``simulate_mhsa`` would refuse before building
    (:func:`ctmhsa.sims.build.check_call`), naming it, before any item runs: a bad item found
    after the others ran would lose their results (no ``out_dir``) or their time."""
    if not isinstance(item, dict):
        raise TypeError(f"items[{k}]: expected a dict of simulate_mhsa arguments, got {type(item).__name__}")
    params = inspect.signature(simulate_mhsa).parameters
    # simulate_mhsa's own keywords left at None take their defaults (as it passes them on)
    kw = {n: v for n, v in item.items() if not (v is None and n in params and n not in _CALL_DATA)}
    try:
        if all(n in kw for n in _CALL_DATA[:5]):
            check_call(**kw)
        else:   # (simulate_mhsa names the missing tokens or weights): the options alone
            split_options(kw.get("circuit_options"), kw.get("run_options"),
                          **{n: v for n, v in kw.items() if n not in _CALL_DATA})
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"items[{k}]: {exc}") from None


_CALL_DATA = ("X", "WQ", "WK", "WV", "WO", "Y", "WS", "circuit_options", "run_options", "perturbations")


def _follow(futures, bar) -> None:
    """Advance ``bar`` as the dask ``futures`` finish (errors are raised by the gather after)."""
    from distributed import as_completed

    for _ in as_completed(futures):
        bar.update()


def _write_item(kwargs: dict, path: str, key: str) -> str:
    def stamp(directory):    # inside the directory before it is renamed into place
        with open(os.path.join(directory, KEY_FILE), "w") as fh:
            json.dump({"key": key}, fh)

    write_result(_simulate_item(kwargs), path, extra=stamp)
    return path
