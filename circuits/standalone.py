"""Brian2's ``cpp_standalone`` device: compile a network shape once, run it many times.

Everything compiled into a standalone project — the circuit's structure, the equations, dt, the
run schedule, OpenMP threads — is hashed into a key (:func:`circuits.instantiate.project_key`);
the project lives in ``<cache>/standalone/<key>`` and is compiled the first time that key is
seen. Tokens, weights, biases, rates and the seed are *run arguments* (Brian2 ``run_args``):
they are written to files and read by the compiled binary when it starts, so a new input on a
cached shape invokes no compiler (``make`` finds every object up to date). Each run writes its
results into its own subdirectory, and the run-argument files it read are removed after it.

The project directory is protected by a file lock while code is generated and compiled. Runs
that must go in parallel on one machine (dask workers running heads of one shape) each run in
their own copy of the compiled project (:func:`worker_copy`): generating code rewrites the
project's static arrays, which a binary starting in the same directory may be reading.

A population replayed from recorded spikes (``SpikeGeneratorGroup``) holds its spikes in
static arrays whose sizes are compiled in, so the spikes are part of the key (``replay`` of
:func:`project_key`): a split run compiles its head project once for its nucleus-1 spikes,
which every head of the run shares.

``device`` is ``"cpp_standalone"`` or, where brian2cuda is installed, ``"cuda_standalone"``
(GPU; the seed is then compiled into the project, see :func:`run_standalone`).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import hashlib
import importlib
import json
import os
import shutil
import sys
import time
import uuid
from dataclasses import asdict
from importlib import metadata

import brian2 as b2
import numpy as np
from filelock import FileLock

from neurons.backend import cache_dir
from neurons.models import get_model
from neurons.params import CellParams
from neurons.window import counts_from_spikes, window_observables

__all__ = ["standalone_device", "project_dir", "project_key", "run_standalone", "run_project", "worker_copy",
           "replay_digest", "STANDALONE_DEVICES", "check_device"]

STANDALONE_DEVICES = ("cpp_standalone", "cuda_standalone")
"""Brian2 devices that compile a project (``cuda_standalone`` needs the brian2cuda package)."""


def check_device(device: str) -> None:
    """Raise ``ValueError`` naming ``device`` if it cannot be used here (before any build):
    ``"cuda_standalone"`` needs brian2cuda (and, to run, a CUDA GPU and toolkit)."""
    if device == "cuda_standalone":
        try:
            importlib.import_module("brian2cuda")
        except Exception as exc:   # ImportError, or brian2cuda failing to find CUDA
            raise ValueError(
                "device: 'cuda_standalone' needs the brian2cuda package and a CUDA GPU "
                f"(pip install brian2cuda); importing it failed: {exc}") from None


def replay_digest(replay: dict | None) -> str | None:
    """SHA-256 (16 hex digits) of replayed spike trains ``{population: (cells, times_s)}``."""
    if not replay:
        return None
    h = hashlib.sha256()
    for name in sorted(replay):
        i, t = replay[name]
        h.update(name.encode())
        h.update(np.ascontiguousarray(i, dtype=np.int64).tobytes())
        h.update(np.ascontiguousarray(t, dtype=np.float64).tobytes())
    return h.hexdigest()[:16]


def project_key(circuit, level: str, phi: str, params: CellParams, dt: float,
                schedule: tuple, threads: int, law: str = "product", fold: bool = True,
                replay: dict | None = None, device: str = "cpp_standalone",
                seed: int | None = None) -> str:
    """SHA-256 key of everything compiled into a standalone project: the circuit's structure,
    the level's cell models (equations, spike condition, reset, every per-step code), phi, the
    physiological constants, dt, the run schedule (warm-up, window), OpenMP threads, the package
    and Brian2 versions and the Python environment. Tokens, weights, biases, rates and seeds are
    run arguments and not part of it; spikes are always recorded on this device.

    ``replay``: spike trains replayed into the network (:func:`replay_digest` enters the key,
    their sizes being compiled in); ``device``: the standalone device; ``seed``: only on
    ``cuda_standalone``, which compiles the seed in (``None`` elsewhere)."""
    try:
        version = metadata.version("ctmhsa")
    except metadata.PackageNotFoundError:   # running from a source tree
        version = "source"
    models = {p.cell_type: asdict(get_model(level, p.cell_type)) for p in circuit.populations.values()}
    blob = json.dumps(dict(circuit=circuit.to_dict(), level=level, phi=phi, law=law, fold=bool(fold),
                           params=params.to_dict(),
                           dt=dt, schedule=list(schedule), threads=threads, models=models,
                           version=version, brian2=b2.__version__,
                           **({} if replay is None else dict(replay=replay_digest(replay))),
                           **({} if device == "cpp_standalone" else dict(device=device, seed=seed)),
                           # the compiler flags name the environment's include paths: two
                           # environments sharing a cache would otherwise rebuild each other's project
                           env=sys.prefix), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def project_dir(key: str) -> str:
    """Directory of the standalone project with key ``key`` (created on demand)."""
    d = os.path.join(cache_dir(), "standalone", key)
    os.makedirs(d, exist_ok=True)
    return d


def worker_copy(directory: str) -> str:
    """This process's own copy of the compiled project ``directory`` (made on first use).

    Call with the project's lock held and the project compiled. The copy keeps the files'
    times, so building the same network in it finds every object up to date (no compiler
    call); it lives next to the project (``<directory>.copies/<host>-<pid>``) and is removed
    when this process exits normally.
    """
    import socket

    copy = os.path.join(directory + ".copies", f"{socket.gethostname()}-{os.getpid()}")
    if not os.path.isfile(os.path.join(copy, ".complete")):
        shutil.rmtree(copy, ignore_errors=True)
        tmp = f"{copy}.tmp{uuid.uuid4().hex[:8]}"
        shutil.copytree(directory, tmp, ignore=shutil.ignore_patterns("results"), symlinks=True)
        open(os.path.join(tmp, ".complete"), "w").close()
        os.replace(tmp, copy)
        atexit.register(shutil.rmtree, copy, True)
    return copy


@contextlib.contextmanager
def standalone_device(directory: str, threads: int, device: str = "cpp_standalone"):
    """Activate a fresh standalone ``device`` for one build/run; restore runtime after."""
    # Brian2 suffixes names already taken by live objects (``..._codeobject_1``), so objects
    # left from earlier networks of this process would change the generated code and force a
    # recompilation of an unchanged shape: collect them first.
    gc.collect()
    if device == "cuda_standalone":
        check_device(device)
        importlib.import_module("brian2cuda")   # registers the device
    b2.set_device(device, build_on_run=False, directory=directory)
    b2.device.reinit()
    b2.device.activate(build_on_run=False, directory=directory)
    pref = b2.prefs.devices.cpp_standalone
    old_threads, old_make = pref.openmp_threads, pref.extra_make_args_unix
    pref.openmp_threads = int(threads)
    # Brian2's default ``make -j`` starts one compiler per source file at once (a load of ~50
    # on a 2-core machine, gigabytes of memory): one job per core compiles as fast
    pref.extra_make_args_unix = [a if a != "-j" else f"-j{os.cpu_count() or 1}" for a in old_make]
    try:
        yield b2.device
    finally:
        pref.openmp_threads, pref.extra_make_args_unix = old_threads, old_make
        b2.device.reinit()
        b2.set_device("runtime")


def run_project(key: str, build, warmup: float, duration: float, threads: int, n_chunks: int,
                device: str = "cpp_standalone", report=None, parallel: bool = False) -> tuple:
    """Build, compile if needed and run the cached project ``key``; return ``(built, results)``
    (``results`` as :func:`run_standalone` returns them).

    ``build()`` instantiates the network (with ``run_args={}``) inside the activated device.
    By default the whole build and run holds the project's lock (one process at a time). With
    ``parallel`` (heads on dask workers) the first caller compiles and runs in the project under
    its lock and marks it compiled; every later caller runs in its own copy of the compiled
    project (:func:`worker_copy`), so processes run in parallel and nothing compiles twice.
    """
    canon = project_dir(key)

    def once(where):
        with standalone_device(where, threads, device):
            built = build()
            return built, run_standalone(built, warmup, duration, where, threads, n_chunks, report)

    marker = os.path.join(canon, ".compiled")
    with FileLock(canon + ".lock"):
        if not parallel or not os.path.isfile(marker):
            out = once(canon)
            if parallel:
                open(marker, "w").close()
            return out
        where = worker_copy(canon)
    with FileLock(os.path.join(where, ".run.lock")):   # inside the copy: removed with it
        return once(where)


def run_standalone(built, warmup: float, duration: float, directory: str, threads: int,
                   n_chunks: int, report=None) -> dict:
    """Compile (if needed) and run ``built`` on the active standalone device.

    Call inside :func:`standalone_device` right after :func:`circuits.instantiate.instantiate`
    with a ``run_args`` dict (every value becomes a run argument of the binary).

    Returns
    -------
    dict
        ``compile`` and ``run`` wall times (s), ``obs`` (per population: window means of the
        observables, ``count``, ``rate``, ``T``; rate level: final values), ``chunks`` (per
        spiking population: spike counts per cell in ``n_chunks`` equal parts of the window)
        and ``spikes`` (per population ``(cell, time_s)``).
    """
    dev = b2.device
    spiking = built.spiking
    if spiking:
        for g in built.all_groups():
            if "t_win" in g.variables:
                built.run_args[g.t_win] = warmup * b2.second
    # run arguments are applied here (after connect, before the first step); then reseed
    dev.apply_run_args()
    if type(dev).__name__.startswith("CUDA"):   # brian2cuda (curand): the seed is compiled in
        dev.seed(0 if built.seed is None else int(built.seed))
    else:
        n_gen = max(int(threads), 1)
        rng = dev.get_array_name(built.network["rng"].variables["seed_value"])
        dev.insert_code("main", f"for (int _i=0; _i<{n_gen}; _i++) "
                                f"brian::_random_generators[_i].seed((unsigned long) brian::{rng}[0] + _i);")
    total = (warmup + duration) if spiking else duration
    built.network.run(total * b2.second, namespace={}, report="text" if report else None)
    t0 = time.perf_counter()
    dev.build(directory=directory, compile=True, run=False, clean=False, with_output=bool(report))
    t_compile = time.perf_counter() - t0
    results = os.path.join("results", uuid.uuid4().hex)
    t0 = time.perf_counter()
    try:
        dev.run(directory=directory, results_directory=results, with_output=bool(report),
                run_args=built.run_args)
        t_run = time.perf_counter() - t0
        out = _collect(built, warmup if spiking else 0.0, duration, n_chunks)
    finally:
        shutil.rmtree(os.path.join(directory, results), ignore_errors=True)
        # the run arguments' files (weights, biases: megabytes per run at barrel size) would
        # otherwise pile up in the project, one set per input ever run
        for name in list(dev.run_args_arrays):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(directory, "static_arrays", name))
            with contextlib.suppress(OSError):
                os.remove(os.path.join(directory, "static_arrays", name + ".lock"))
    out.update(compile=t_compile, run=t_run)
    return out


def _collect(built, t0: float, T: float, n_chunks: int) -> dict:
    """Window observables, chunk counts and spike trains, read back after a standalone run
    (observables integrated from ``t_win`` = ``t0`` on; counts from the spike times)."""
    obs, chunks, spikes = {}, {}, {}
    for name, g in built.groups.items():
        model = get_model(built.level, built.circuit.population(name).cell_type)
        if model.spiking and name not in built.monitors:   # replayed spikes: nothing measured
            continue
        if not model.spiking:
            obs[name] = {v: built.values(name, v) for v in model.observables}
            continue
        mon = built.monitors[name]
        i, t = np.array(mon.i[:]), np.array(mon.t_[:])
        spikes[name] = (i, t)
        count, chunks[name] = counts_from_spikes(i, t, len(g), t0, T, n_chunks)
        obs[name] = window_observables({v: built.values(name, f"acc_{v}") / T for v in model.observables},
                                       count, T)
    return dict(obs=obs, chunks=chunks, spikes=spikes)
