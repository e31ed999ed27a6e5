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

Devices. The two thalamic stages are small (one nucleus each) and always run on the runtime
device. The heads run on ``device``: ``"runtime"``, or a standalone device (``"cpp_standalone"``,
``"cuda_standalone"``), where every head of the run uses one compiled project
(:mod:`ctmhsa.devices.standalone`): its key is the head's shape and threads plus the length of
the nucleus-1 table it replays (a run argument whose shape is compiled in; past
:data:`REPLAY_TABLE_BYTES`, or on ``cuda_standalone``, the spikes themselves, compiled into a
``SpikeGeneratorGroup``; they are the same for every head), and each head's tokens, weights,
biases and seed are run arguments.
The first head to take the project's lock compiles it; every other worker process runs in its
own copy of the compiled project (:func:`ctmhsa.devices.standalone.worker_copy`), so heads run in
parallel and nothing compiles twice.

Memory. Each head is encoded and run on its worker and reduced there before it is gathered:
the per-cell window observables, the sums behind its populations' Fano factors (instead of
per-chunk counts), its L5 PT spikes (all that nucleus 2 needs) and only the other spike trains
that were asked for (``record``). The client holds the tokens, the weights and the merged
observables, never every population's spikes.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os

import numpy as np



from ctmhsa.circuits.builders import build
from ctmhsa.devices.registry import get_device
from ctmhsa.circuits.graph import Circuit
from ctmhsa.circuits.instantiate import assign, instantiate, replay_columns
from ctmhsa.devices.standalone import project_key, release, run_project
from ctmhsa.circuits.values import CircuitValues
from ctmhsa.mapping.baseline import add_lif_drive
from ctmhsa.mapping.encode import encode
from ctmhsa.neurons.window import fano_from_sums, fano_sums

__all__ = ["client_for", "run_split", "run_stage", "run_head", "stage_seeds"]


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
    importlib.import_module("brian2")   # installs its SIGINT handler on this thread
    return True


def _prepare(client):
    # brian2 installs a SIGINT handler on import, which only the main thread may do; tasks run
    # in worker threads, so import it first on each worker's event-loop (main) thread
    client.run(_import_brian2)


def run_stage(circuit: Circuit, level: str, values: CircuitValues, phi, params, dt, codegen, seed,
              warmup: float, T: float, n_chunks: int, replay=None, record=(), law="product",
              fold=True) -> dict:
    """Run one stage network on the runtime device.

    Returns
    -------
    dict
        ``obs`` (window observables per population), ``fano`` (:func:`ctmhsa.neurons.window.fano_sums`), ``spikes``
        (``(cell, time_s)`` of the populations in ``record``) and ``compile``/``run`` wall times (s).
    """
    built = instantiate(circuit, level, values, phi=phi, params=params, dt=dt, codegen=codegen,
                        seed=seed, record_spikes=tuple(record), replay=replay, law=law, fold=fold)
    built.prepare()
    m = built.measure(warmup, T, n_chunks)
    return dict(obs=m["snapshots"][-1][1], fano=fano_sums(m["chunks"]),
                spikes={p: built.spike_trains(p) for p in record if p in built.monitors},
                compile=built.preparation, run=m["run"])


REPLAY_TABLE_BYTES = 256 * 2 ** 20
"""Largest replay table (steps x columns of 48 replayed cells x 8 bytes,
:func:`ctmhsa.circuits.instantiate.replay_table`) a head takes as a run argument; a longer run
compiles the replayed spikes into its head project instead."""


def _run_standalone_stage(circuit, level, values, phi, params, dt, seed, warmup, T, n_chunks, replay,
                          record, law, fold, device, threads) -> dict:
    """:func:`run_stage` on a standalone ``device``: one project per head shape and schedule,
    compiled by the first caller, run by every other process in its own copy
    (:func:`ctmhsa.devices.standalone.run_project`). The nucleus-1 spikes are a run argument (a table
    of each step's spikes, 48 relays to an entry, :func:`ctmhsa.circuits.instantiate.replay_table`), so new seeds and
    tokens compile nothing; past :data:`REPLAY_TABLE_BYTES` (or on ``cuda_standalone``) they
    are compiled in, one project per replayed spike train."""
    steps = int(round((warmup + T) / dt))
    table = get_device(device).run_args and bool(replay) and \
        steps * sum(replay_columns(circuit.population(p).N) for p in replay) * 8 <= REPLAY_TABLE_BYTES
    # the table's shape is compiled in: its steps, not the schedule, separate the projects
    key = project_key(circuit, level, phi, params, dt, (warmup, T, n_chunks), threads, law=law, fold=fold,
                      replay=None if table else replay, replayed={p: steps for p in replay} if table else (),
                      device=device, seed=seed, record=tuple(record))
    _, sa = run_project(key, lambda: instantiate(circuit, level, values, phi=phi, params=params, dt=dt, seed=seed,
                                                 record_spikes=tuple(record), run_args={}, replay=replay, law=law,
                                                 fold=fold, replay_steps=steps if table else None),
                        warmup, T, threads, n_chunks, device, parallel=True,
                        # a kept network (an earlier head of this process, of this run or an earlier one)
                        rebind=lambda built, run_args: assign(built, values, seed, run_args, replay=replay))
    return dict(obs=sa["obs"], fano=sa["fano"], spikes=sa["spikes"], compile=sa["compile"], run=sa["run"])


def run_head(spec: dict) -> dict:
    """Encode and run head ``spec["h"]`` (a task: runs on a worker) and reduce it.

    ``spec`` holds the head's description (``head``), the tokens ``X``, ``Y`` and the whole
    block's weights (``block``, a :class:`ctmhsa.maths.model.Block`), the code ``gains``, ``phi``, ``params``, ``level``, ``dt``,
    ``codegen``, ``seed``, ``warmup``/``T`` (s), ``n_chunks``, the nucleus-1 spikes
    (``replay``), the populations whose spikes are returned (``record``), ``law``, ``fold``,
    ``device`` and ``threads``. Returns what :func:`run_stage` returns, for this head only.
    """
    s = spec
    head, h, level, dt = s["head"], s["h"], s["level"], s["dt"]
    # the same encoder as the whole pathway's, for this head's weights and the whole run's range
    e = encode(head, s["X"], s["block"].head(h), Y=s["Y"], gains=s["gains"], params=s["params"], phi=s["phi"],
               input_range=s["input_range"])
    add_lif_drive(head, e.values, level, dt)                    # lif drive and baselines (no-op otherwise)
    # the replayed relays keep their rates in the values: the dendrites' phi correction reads them
    if not get_device(s["device"]).compiles:
        return run_stage(head, level, e.values, s["phi"], s["params"], dt, s["codegen"], s["seed"], s["warmup"],
                         s["T"], s["n_chunks"], s["replay"], s["record"], s["law"], s["fold"])
    return _run_standalone_stage(head, level, e.values, s["phi"], s["params"], dt, s["seed"], s["warmup"],
                                 s["T"], s["n_chunks"], s["replay"], s["record"], s["law"], s["fold"],
                                 s["device"], s["threads"])


def _sub(full: Circuit, name: str, pops, projs) -> Circuit:
    c = Circuit(name, meta=full.meta)
    for p in pops:
        c.add_population(full.population(p))
    for q in projs:
        c.add_projection(full.projections[q])
    return c


@contextlib.contextmanager
def _collect_young():
    """Brian2's ``Network.run`` calls ``gc.collect()``, which visits every object of the process:
    the client of a split run holds the whole pathway's description and values (six collections
    per run, 0.7 s of an 8-head run's 7.2 s, profiled). Collect once, then freeze what exists, so
    those collections visit only what the run creates (garbage from before is collected first,
    so no stale Brian2 object survives to rename a new one)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@_collect_young()
def _one(circuit, role: str) -> str:
    """The one population of ``circuit`` that carries ``role`` (``ValueError`` naming it otherwise:
    a split run cuts the circuit at one set of head outputs and one of output relays)."""
    names = circuit.by_role(role)
    if len(names) != 1:
        raise ValueError(f"scheduler: a split run needs one population of role {role!r} in circuit "
                         f"{circuit.name!r}, found {list(names)}")
    return names[0]


def run_split(full: Circuit, enc, inputs, options, run_options, n_chunks: int, record=None) -> dict:
    """Run ``full`` split at its nuclei (see the module docstring); merge every population's
    observables back into the full circuit's cell order.

    Parameters
    ----------
    full : Circuit
        The whole pathway, as built.
    enc : ctmhsa.mapping.encode.Encoding
        Its encoding (the nuclei's values come from it; every head is encoded on its worker
        by the same :func:`ctmhsa.mapping.encode.encode`, for the whole run's input range).
    inputs : ctmhsa.sims.validate.Inputs
        Tokens and the block's weights.
    options, run_options : ctmhsa.sims.options.CircuitOptions, ctmhsa.sims.options.RunOptions
        What was built and how it runs: heads on ``run_options.device`` (the thalamic stages on
        the runtime device), ``threads`` OpenMP threads per head binary, ``scheduler``.
    n_chunks : int
        Chunks of the window (Fano factors).
    record : None or iterable of str
        Populations whose spike trains are returned (``None``: every population). L5 PT
        spikes always travel to nucleus 2, but are returned only when recorded.

    Returns
    -------
    dict
        ``obs`` (per population, full cell order), ``fano`` (pooled Fano factor per
        population), ``spikes`` (the recorded populations), ``compile``/``run`` (s, summed over
        stages).
    """
    m, o, ro = full.meta, options, run_options
    level, phi, params, law, fold = o.neuron, o.phi, o.params, o.law, o.fold
    dt, codegen, warmup, T = ro.dt, ro.codegen, ro.warmup, ro.duration
    H = m.H
    seeds = stage_seeds(ro.seed, H + 2)
    wanted = (lambda p: True) if record is None else (lambda p, r=frozenset(record): p in r)
    nuclei = [p for p, pop in full.populations.items() if pop.cell_type == "relay"]   # the input relays
    # the split's seams, asked of the circuit by role (any circuit's names): the heads' output
    # cells and the relays they drive through W_O
    pt, out_relay = (_one(full, role) for role in ("head_output", "output_relay"))
    [wo] = [k for k, proj in full.projections.items() if (proj.source, proj.target) == (pt, out_relay)]
    src = _sub(full, "thalamus_in", nuclei, [])
    vin = CircuitValues(params={p: enc.values.params[p] for p in nuclei})
    first = run_stage(src, level, vin, phi, params, dt, codegen, seeds[0], warmup, T, n_chunks,
                      record=nuclei)
    P = {k: v for k, v in m.P.items() if k != out_relay}
    head = build(**m.build_args(H=1, with_nucleus2=False, name="head", P=P or 1))   # one area of ``full``
    rec_head = [p for p in head.populations if p not in nuclei]
    keep = tuple(p for p in rec_head if p == pt or wanted(p))
    common = dict(head=head, X=inputs.X, Y=inputs.Y, block=inputs.block, gains=o.code_gains, phi=phi,
                  params=params, level=level, dt=dt, codegen=codegen, warmup=warmup, T=T, n_chunks=n_chunks,
                  replay=first["spikes"], record=keep, law=law, fold=fold, device=ro.device, threads=ro.threads,
                  input_range=enc.consts["input_range"])   # every head encoded for the range of the whole
    with client_for(ro.scheduler) as client:
        # on a standalone device each process keeps its head network between heads (only the
        # binary runs for its second head on). This process releases it when the heads are
        # done; a dask worker keeps it for the next run of the same head shape (its nucleus-1
        # table made again, ctmhsa.circuits.instantiate.assign) until it builds another network, and
        # releases it when a head fails
        if client is None:
            try:
                heads = [run_head(dict(common, h=h, seed=seeds[1 + h])) for h in range(H)]
            finally:
                release()
        else:
            # what every head shares travels to each worker once
            [shared] = client.scatter([common], broadcast=True)
            futures = [client.submit(_head_task, shared, h, seeds[1 + h], pure=False) for h in range(H)]
            try:
                heads = client.gather(futures)
            except BaseException:
                with contextlib.suppress(Exception):   # (a lost worker must not hide the head's error)
                    client.run(release)
                raise
    # merge the heads in head order (head is the leading axis of every cortical population)
    merged = dict(obs=dict(first["obs"]), fano=dict(first["fano"]), spikes={})
    for p in rec_head:
        n_h = head.populations[p].N
        # each head's arrays are dropped as soon as they are merged (peak: one population twice)
        per_head = [hd["obs"].pop(p) for hd in heads]
        merged["obs"][p] = {k: (np.concatenate([o.pop(k) for o in per_head]) if k != "T"
                                else per_head[0][k]) for k in list(per_head[0])}
        merged["fano"][p] = tuple(sum(hd["fano"][p][k] for hd in heads) for k in (0, 1))
        if p in keep:
            sp = [hd["spikes"].pop(p) for hd in heads]
            merged["spikes"][p] = (np.concatenate([s[0] + h * n_h for h, s in enumerate(sp)]),
                                   np.concatenate([s[1] for s in sp]))
            del sp
    out = _sub(full, "thalamus_out", [pt, out_relay], [wo])
    vout = CircuitValues(weights={wo: enc.values.weights[wo]}, params={out_relay: enc.values.params[out_relay]})
    last = run_stage(out, level, vout, phi, params, dt, codegen, seeds[-1], warmup, T, n_chunks,
                     replay={pt: merged["spikes"][pt]}, record=(out_relay,))
    if not wanted(pt):
        del merged["spikes"][pt]
    merged["obs"][out_relay] = last["obs"][out_relay]
    merged["fano"][out_relay] = last["fano"][out_relay]
    merged["fano"] = fano_from_sums(merged["fano"])
    merged["spikes"].update({p: v for p, v in first["spikes"].items() if wanted(p)})
    if wanted(out_relay):
        merged["spikes"][out_relay] = last["spikes"][out_relay]
    stages = [first, *heads, last]
    merged["compile"] = sum(s["compile"] for s in stages)
    merged["run"] = sum(s["run"] for s in stages)
    return merged


def _head_task(common: dict, h: int, seed: int) -> dict:
    return run_head(dict(common, h=h, seed=seed))
