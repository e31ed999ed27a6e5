"""The data every figure of ``ctmhsa figures`` reads: small shipped simulations, cell protocols and
circuit counts, written under one data directory. :mod:`figures.make` only reads these files.

Resumable: every item is written atomically (results directories by :func:`sims.io.write_result`,
files by :func:`sims.io.atomic_savez` / :func:`sims.io.atomic_write_json`), so an item that exists
is complete and is never recomputed.

=======================  ===============================================================
``accuracy_<level>``     n = 8, H = 1, d = 8 head; rate 1 s, escape 2 s, lif 1 s windows
``time_escape``          n = 6, H = 2, d = 6 pathway, escape, 4 s window, checkpoints
``readout_P<P>``         the same pathway, 2 s, P = 1, 4, 10 copies of L5 PT and nucleus 2
``fig2_escape.npz``      escape cells, fig. 2 protocols (3 s per point)
``circuit_<c>_n<n>``     quadratic / linear circuit, d = 6, H = 1, n = 3, 6, 12, escape, 1 s
``law_<law>``            the accuracy head at the rate level with each two-point-neuron law
``circuit_counts.json``  neurons and synapses of one head (d = 33) of each circuit vs n, from
                         the circuit descriptions (nothing simulated)
``manifest.json``        which file holds what (paths relative to the data directory)
=======================  ===============================================================

``quick`` shortens every window and shrinks the problems (for tests: noisier figures).
"""

from __future__ import annotations

import os
import time

from neurons.laws import LAWS

from sims import simulate_mhsa
from sims.benchmarks.cells import fig2_data
from sims.benchmarks.circuits import counts
from sims.benchmarks.common import square_problem
from sims.io import atomic_savez, atomic_write_json, is_complete, write_result

__all__ = ["MANIFEST", "COUNTS_D", "make_data"]

MANIFEST = "manifest.json"
COUNTS_D = 33     # dk = dv = de of the circuit counts (barrel dimensions)


def _problem(n: int, H: int, d: int, seed: int = 0) -> dict:
    x = square_problem(n, d, H, seed=seed)
    return {k: x[k] for k in ("X", "WQ", "WK", "WV", "WO")}


def _simulate(data_dir: str, name: str, **kw) -> str:
    """Run ``simulate_mhsa(**kw)`` into ``data_dir/name`` unless it is complete; return ``name``."""
    path = os.path.join(data_dir, name)
    if not is_complete(path):
        t0 = time.perf_counter()
        # small networks: Brian2's numpy target needs no compiler (a cold Cython cache cost
        # 316 s for the P = 10 run alone on a fresh clone)
        write_result(simulate_mhsa(codegen="numpy", **kw), path)
        print(f"  simulated {name} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return name


def make_data(data_dir: str, quick: bool = False) -> dict:
    """Produce (or reuse) every data file the figures read under ``data_dir`` and write its
    manifest (``data_dir/manifest.json``); return the manifest (paths relative to ``data_dir``)."""
    s = 0.1 if quick else 1.0
    man = dict(quick=bool(quick), accuracy={})
    small = _problem(8, 1, 8) if not quick else _problem(3, 1, 3)
    for level, T in (("rate", 1.0), ("escape", 2.0), ("lif", 1.0)):
        man["accuracy"][level] = _simulate(
            data_dir, f"accuracy_{level}", **small, neuron=level,
            duration=T if level == "rate" else T * s, warmup=None if level == "rate" else 0.5 * s,
            record_spikes=level == "escape")
    multi = _problem(6, 2, 6) if not quick else _problem(3, 2, 3)
    T = 4.0 * s
    man["time_escape"] = _simulate(data_dir, "time_escape", **multi, neuron="escape", duration=T,
                                   warmup=0.5 * s, checkpoints=[T / 8, T / 4, T / 2])
    man["readout"] = [dict(P=P, path=_simulate(data_dir, f"readout_P{P}", **multi, neuron="escape",
                                               duration=2.0 * s, warmup=0.5 * s, seed=1,
                                               P={"l5pt": P, "nucleus2": P}))
                      for P in ((1, 3) if quick else (1, 4, 10))]
    man["circuits"] = [dict(circuit=kind, n=n,
                            path=_simulate(data_dir, f"circuit_{kind}_n{n}", **_problem(n, 1, 6 if not quick else 3),
                                           neuron="escape", circuit=kind, duration=1.0 * s, warmup=0.5 * s))
                       for kind in ("quadratic", "linear") for n in ((2, 3) if quick else (3, 6, 12))]
    man["laws"] = {law: man["accuracy"]["rate"] if law == "product" else
                   _simulate(data_dir, f"law_{law}", **small, neuron="rate", law=law)
                   for law in LAWS}
    man["fig2"] = "fig2_escape.npz"
    f2 = os.path.join(data_dir, man["fig2"])
    if not os.path.exists(f2):
        atomic_savez(f2, **fig2_data("escape", T=3.0 * s))
    man["circuit_counts"] = "circuit_counts.json"
    cc = os.path.join(data_dir, man["circuit_counts"])
    if not os.path.exists(cc):
        atomic_write_json(cc, dict(d=COUNTS_D, rows=counts(COUNTS_D)))
    atomic_write_json(os.path.join(data_dir, MANIFEST), man)
    return man
