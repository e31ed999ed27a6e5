"""The data every figure of ``ctmhsa figures`` reads: small shipped simulations, cell protocols and
circuit counts, written under one data directory. :mod:`ctmhsa.figures.make` only reads these files.

Resumable: every item is written atomically (results directories by :func:`ctmhsa.sims.io.write_result`,
files by :func:`ctmhsa.sims.io.atomic_savez` / :func:`ctmhsa.sims.io.atomic_write_json`), so an item that exists
is complete and is never recomputed.

Every item lives under a name keyed by its parameters (``accuracy_escape-<hash>``: a SHA-256
of the tokens, weights and options that produced it, see :func:`param_key`, and of the
package's version), so a data directory shared by runs of other sizes or windows (``--quick``
and full) never hands one's data to the other, and a new version of the models simulates
afresh instead of redrawing an older version's data; the manifest names the items of the
last call.

=======================  ===============================================================
``accuracy_<level>``     n = 8, H = 1, d = 8 head; rate 1 s, escape and lif 2 s windows
``time_escape``          n = 6, H = 2, d = 6 pathway, escape, 4 s window, checkpoints
``readout_P<P>``         the same pathway, 2 s, P = 1, 4, 10 copies of L5 PT and nucleus 2
``fig2_<level>.npz``     escape and lif cells, fig. 2 protocols (3 s per point)
``circuit_<c>_n<n>``     quadratic / linear circuit, d = 6, H = 1, n = 3, 6, 12, escape, 1 s
``law_<law>``            the accuracy head at the rate level with each two-point-neuron law
``circuit_counts.json``  neurons and synapses of one head (d = 33) of each circuit vs n, from
                         the circuit descriptions (nothing simulated)
``manifest.json``        which file holds what (paths relative to the data directory)
=======================  ===============================================================

``quick`` shortens every window and shrinks the problems (for tests: noisier figures).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time

import numpy as np

from ctmhsa import __version__
from ctmhsa.neurons.law_registry import get_law
from ctmhsa.neurons.laws import LAWS
from ctmhsa.neurons.levels import get_level

from ctmhsa.sims import simulate_mhsa
from ctmhsa.sims.benchmarks.cells import fig2_data
from ctmhsa.sims.benchmarks.circuits import counts
from ctmhsa.sims.benchmarks.common import square_problem
from ctmhsa.sims.io import atomic_savez, atomic_write_json, is_complete, write_result
from ctmhsa.sims.progress import progress

__all__ = ["MANIFEST", "COUNTS_D", "make_data", "param_key"]

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
COUNTS_D = 33     # dk = dv = de of the circuit counts (barrel dimensions)


def _problem(n: int, H: int, d: int, seed: int = 0) -> dict:
    x = square_problem(n, d, H, seed=seed)
    return {k: x[k] for k in ("X", "WQ", "WK", "WV", "WO")}


def param_key(**params) -> str:
    """A short SHA-256 key of parameters: arrays by shape, dtype and bytes, everything else by
    its JSON form (the key changes with any size, value, window or option)."""
    h = hashlib.sha256()
    for k in sorted(params):
        v = params[k]
        h.update(k.encode())
        if isinstance(v, np.ndarray):
            a = np.ascontiguousarray(v)
            h.update(f"{a.shape}{a.dtype}".encode())
            h.update(a.tobytes())
        else:
            h.update(json.dumps(v, sort_keys=True, default=repr).encode())
    return h.hexdigest()[:12]


def _simulate(data_dir: str, name: str, bar=None, **kw) -> str:
    """Run ``simulate_mhsa(**kw)`` into ``data_dir/<name>-<key of kw>`` unless it is complete;
    return that directory's name (relative to ``data_dir``)."""
    kw = dict(codegen="numpy", **kw)
    rel = f"{name}-{param_key(ctmhsa_version=__version__, **kw)}"
    path = os.path.join(data_dir, rel)
    if bar is not None:
        bar.set_postfix_str(name)
    if not is_complete(path):
        t0 = time.perf_counter()
        # small networks: Brian2's numpy target needs no compiler (a cold Cython cache cost
        # 316 s for the P = 10 run alone on a fresh clone)
        write_result(simulate_mhsa(**kw), path)
        log.info("simulated %s (%.0f s)", rel, time.perf_counter() - t0)
    if bar is not None:
        bar.update()
    return rel


def make_data(data_dir: str, quick: bool = False) -> dict:
    """Produce (or reuse) every data file the figures read under ``data_dir`` and write its
    manifest (``data_dir/manifest.json``); return the manifest (paths relative to ``data_dir``).

    Items are keyed by their parameters (:func:`param_key`): one computed for other sizes or
    windows is never reused."""
    s = 0.1 if quick else 1.0
    man = dict(quick=bool(quick), accuracy={})
    Ps, ns = ((1, 3), (2, 3)) if quick else ((1, 4, 10), (3, 6, 12))
    windows, fig2_levels = {"rate": 1.0, "escape": 2.0, "lif": 2.0}, ("escape", "lif")
    n_items = len(windows) + 1 + len(Ps) + 2 * len(ns) + (len(LAWS) - 1) + len(fig2_levels) + 1
    with progress(total=n_items, desc="figure data", unit="item") as bar:
        small = _problem(8, 1, 8) if not quick else _problem(3, 1, 3)
        for level, T in windows.items():
            lv = get_level(level)
            man["accuracy"][level] = _simulate(
                data_dir, f"accuracy_{level}", bar, **small, neuron=level,
                duration=T * s if lv.spiking else T, warmup=0.5 * s if lv.spiking else None,
                record_spikes=lv.escape)
        multi = _problem(6, 2, 6) if not quick else _problem(3, 2, 3)
        T = 4.0 * s
        man["time_escape"] = _simulate(data_dir, "time_escape", bar, **multi, neuron="escape", duration=T,
                                       warmup=0.5 * s, checkpoints=[T / 8, T / 4, T / 2])
        man["readout"] = [dict(P=P, path=_simulate(data_dir, f"readout_P{P}", bar, **multi, neuron="escape",
                                                   duration=2.0 * s, warmup=0.5 * s, seed=1,
                                                   P={"l5pt": P, "nucleus2": P}))
                          for P in Ps]
        man["circuits"] = [dict(circuit=kind, n=n,
                                path=_simulate(data_dir, f"circuit_{kind}_n{n}", bar,
                                               **_problem(n, 1, 6 if not quick else 3),
                                               neuron="escape", circuit=kind, duration=1.0 * s, warmup=0.5 * s))
                           for kind in ("quadratic", "linear") for n in ns]
        man["laws"] = {law: man["accuracy"]["rate"] if get_law(law).product else
                       _simulate(data_dir, f"law_{law}", bar, **small, neuron="rate", law=law)
                       for law in LAWS}
        T2 = 3.0 * s
        man["fig2"] = {}
        for level in fig2_levels:
            man["fig2"][level] = f"fig2_{level}-{param_key(level=level, T=T2, ctmhsa_version=__version__)}.npz"
            f2 = os.path.join(data_dir, man["fig2"][level])
            if not os.path.exists(f2):
                atomic_savez(f2, **fig2_data(level, T=T2))
            bar.update()
        man["circuit_counts"] = f"circuit_counts-{param_key(d=COUNTS_D)}.json"
        cc = os.path.join(data_dir, man["circuit_counts"])
        if not os.path.exists(cc):
            atomic_write_json(cc, dict(d=COUNTS_D, rows=counts(COUNTS_D)))
        bar.update()
    atomic_write_json(os.path.join(data_dir, MANIFEST), man)
    return man
