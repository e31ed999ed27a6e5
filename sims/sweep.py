"""Sweeps: many :func:`ctmhsa.sims.simulate_mhsa` runs on dask, resumable from results directories."""

from __future__ import annotations

import os

from .distributed import client_for
from .io import is_complete, write_result
from .progress import progress
from .simulate import simulate_mhsa

__all__ = ["sweep"]


def _simulate_item(kwargs: dict):
    return simulate_mhsa(**kwargs)


def sweep(items, scheduler="local", out_dir: str | None = None):
    """Run :func:`ctmhsa.sims.simulate_mhsa` for every keyword dict of ``items`` on dask.

    Parameters
    ----------
    items : sequence of dict
        Keyword arguments of ``simulate_mhsa`` (inputs, seeds, levels, ...).
    scheduler : "local", "serial", an address or a ``distributed.Client``
        Where to run (``"serial"``: in this process, in order).
    out_dir : str, optional
        If given, item k is written to ``out_dir/item_<k>`` (atomically); items whose results
        directory is already complete are skipped (their paths returned), so a killed sweep
        resumes where it stopped.

    Returns
    -------
    list of SimulationResult (or of results-directory paths when ``out_dir`` is given)
    """
    items = list(items)
    for k, it in enumerate(items):
        if not isinstance(it, dict):
            raise TypeError(f"items[{k}]: expected a dict of simulate_mhsa arguments, got {type(it).__name__}")
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
    todo = [k for k, p in enumerate(paths) if not is_complete(p)]
    if todo:
        with client_for(scheduler) as client, progress(total=len(items), initial=len(items) - len(todo),
                                                       desc="sweep", unit="run") as bar:
            if client is None:
                for k in todo:
                    _write_item(items[k], paths[k])
                    bar.update()
            else:
                futures = client.map(_write_item, [items[k] for k in todo], [paths[k] for k in todo], pure=False)
                _follow(futures, bar)
                client.gather(futures)
    return paths


def _follow(futures, bar) -> None:
    """Advance ``bar`` as the dask ``futures`` finish (errors are raised by the gather after)."""
    from distributed import as_completed

    for _ in as_completed(futures):
        bar.update()


def _write_item(kwargs: dict, path: str) -> str:
    write_result(_simulate_item(kwargs), path)
    return path
