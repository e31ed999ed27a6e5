"""Heads on separate processes or machines (dask.distributed).

A multihead pathway splits exactly at its two thalamic nuclei. Areas share nothing but their
input, nucleus 1, and meet only in nucleus 2, which sums their L5 PT output. The split run
therefore has three stages, each a Brian2 network of its own:

1. nucleus 1 alone (its relays are Poisson at the token rates) — its spike trains are kept;
2. one task per head: the area of head h, driven by a *replay* of those nucleus-1 spikes
   (``SpikeGeneratorGroup``: every head sees the very same thalamic spikes, as in one network);
3. nucleus 2, driven by a replay of every head's L5 PT spikes. Nucleus 2 only sums PT spikes
   through WO, so given the PT spikes it computes exactly what it computes inside the full
   network: each replayed spike reaches it in the step it was emitted.

Every stage draws from its own seed (``SeedSequence(seed)`` spawned per stage), so the result
does not depend on where or in which order the heads run: the same seed gives the same spikes
serially (``scheduler="serial"``), on a ``LocalCluster`` (``"local"``) or on a cluster at an
address. The one-network run (``scheduler=None``) draws every cell from one random stream and
is statistically, not spike-for-spike, equal to the split run.
"""

from __future__ import annotations

import contextlib
import os

import numpy as np

from circuits.builders import build
from circuits.graph import Circuit
from circuits.instantiate import instantiate
from circuits.values import CircuitValues
from mapping.baseline import add_lif_drive
from mapping.dendrites import add_phi_variances
from mapping.encode import encode

__all__ = ["client_for", "run_split", "run_stage", "stage_seeds"]


def stage_seeds(seed: int, n: int) -> list[int]:
    """``n`` independent 31-bit seeds derived from ``seed``."""
    return [int(s.generate_state(1)[0] & 0x7FFFFFFF) for s in np.random.SeedSequence(seed).spawn(n)]


@contextlib.contextmanager
def client_for(scheduler):
    """A ``distributed.Client`` for ``scheduler`` ("local", an address, or a Client), or None
    for ``"serial"``; a LocalCluster made here is closed on exit."""
    if scheduler == "serial":
        yield None
        return
    try:
        from distributed import Client, LocalCluster
    except ImportError:  # pragma: no cover
        raise ValueError("scheduler: dask.distributed is not installed; pip install 'ctmhsa[dask]'") from None
    if isinstance(scheduler, Client):
        _prepare(scheduler)
        yield scheduler
        return
    if scheduler == "local":
        workers = max(1, min(2, os.cpu_count() or 1))
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            _prepare(client)
            yield client
        return
    with Client(scheduler) as client:
        _prepare(client)
        yield client


def _import_brian2():
    import brian2  # noqa: F401

    return True


def _prepare(client):
    # brian2 installs a SIGINT handler on import, which only the main thread may do; tasks run
    # in worker threads, so import it first on each worker's event-loop (main) thread
    client.run(_import_brian2)


def run_stage(circuit: Circuit, level: str, values: CircuitValues, phi, params, dt, codegen, seed,
              warmup: float, T: float, n_chunks: int, replay=None, record=(), law="product",
              fold=True) -> dict:
    """Run one stage network; return window observables, per-chunk counts and recorded spikes."""
    built = instantiate(circuit, level, values, phi=phi, params=params, dt=dt, codegen=codegen,
                        seed=seed, record_spikes=tuple(record), replay=replay, law=law, fold=fold)
    t_compile = built.prepare()
    m = built.measure(warmup, T, n_chunks)
    return dict(obs=m["snapshots"][-1][1], chunks=m["chunks"],
                spikes={p: built.spike_trains(p) for p in record if p in built.monitors},
                compile=t_compile, run=m["run"])


def _sub(full: Circuit, name: str, pops, projs) -> Circuit:
    c = Circuit(name, meta=dict(full.meta))
    for p in pops:
        c.add_population(full.population(p))
    for q in projs:
        c.add_projection(full.projections[q])
    return c


def run_split(full: Circuit, enc, X, WQ, WK, WV, WO, Y, gains, phi, params, level, dt, codegen,
              seed, warmup, T, n_chunks, scheduler, WS=None, law="product",
              fold=True) -> dict:
    """Run ``full`` split at its nuclei (see the module docstring); merge every population's
    observables back into the full circuit's cell order."""
    m = full.meta
    H = m["H"]
    seeds = stage_seeds(seed, H + 2)
    inputs = [p for p in ("nucleus1", "nucleus1_kv") if p in full.populations]
    src = _sub(full, "thalamus_in", inputs, [])
    vin = CircuitValues(params={p: enc.values.params[p] for p in inputs})
    first = run_stage(src, level, vin, phi, params, dt, codegen, seeds[0], warmup, T, n_chunks,
                      record=inputs)
    P = dict(m.get("P", {}))
    P.pop("nucleus2", None)
    head = build(m["n"], m["dk"], m["dv"], m["de"], H=1, m=m["m"], cross=m["cross"], causal=m["causal"],
                 with_nucleus2=False, name="head", n_inh=m["n_inh"], P=P or 1, signed=m["signed"],
                 normalize=m["normalize"], skip=m.get("skip", False), circuit=m.get("circuit", "quadratic"))
    rec_head = [p for p in head.populations if p not in inputs]
    tasks = []
    for h in range(H):
        e = encode(head, X, WQ[h:h + 1], WK[h:h + 1], WV[h:h + 1], WO[h:h + 1], Y=Y, gains=gains,
                   params=params, phi=phi, WS=None if WS is None else WS[h:h + 1])
        add_phi_variances(head, e.values, params, dt, level)   # escape phi-bias correction (no-op otherwise)
        add_lif_drive(head, e.values, level, dt)               # lif drive and baselines (no-op otherwise)
        for p in inputs:
            e.values.params.pop(p, None)
        tasks.append((head, level, e.values, phi, params, dt, codegen, seeds[1 + h], warmup, T, n_chunks,
                      first["spikes"], rec_head, law, fold))
    with client_for(scheduler) as client:
        if client is None:
            heads = [run_stage(*t) for t in tasks]
        else:
            heads = client.gather(client.map(lambda t: run_stage(*t), tasks, pure=False))
    # merge the heads in head order (head is the leading axis of every cortical population)
    merged = dict(obs=dict(first["obs"]), chunks=dict(first["chunks"]), spikes={})
    for p in rec_head:
        n_h = head.populations[p].N
        merged["obs"][p] = {k: (np.concatenate([hd["obs"][p][k] for hd in heads]) if k != "T"
                                else heads[0]["obs"][p][k]) for k in heads[0]["obs"][p]}
        merged["chunks"][p] = np.concatenate([hd["chunks"][p] for hd in heads], axis=1)
        merged["spikes"][p] = (np.concatenate([hd["spikes"][p][0] + h * n_h for h, hd in enumerate(heads)]),
                               np.concatenate([hd["spikes"][p][1] for hd in heads]))
    out = _sub(full, "thalamus_out", ["l5pt", "nucleus2"], ["pt_out"])
    vout = CircuitValues(weights={"pt_out": enc.values.weights["pt_out"]},
                         params={"nucleus2": enc.values.params["nucleus2"]})
    last = run_stage(out, level, vout, phi, params, dt, codegen, seeds[-1], warmup, T, n_chunks,
                     replay={"l5pt": merged["spikes"]["l5pt"]}, record=("nucleus2",))
    merged["obs"]["nucleus2"] = last["obs"]["nucleus2"]
    merged["chunks"]["nucleus2"] = last["chunks"]["nucleus2"]
    merged["spikes"].update(first["spikes"], nucleus2=last["spikes"]["nucleus2"])
    stages = [first, *heads, last]
    merged["compile"] = sum(s["compile"] for s in stages)
    merged["run"] = sum(s["run"] for s in stages)
    return merged

