"""Brian2's ``cpp_standalone`` device: compile a network shape once, run it many times.

Everything compiled into a standalone project — the circuit's structure, the equations, dt, the
run schedule, OpenMP threads — is hashed into a key (:func:`ctmhsa.circuits.instantiate.project_key`);
the project lives in ``<cache>/standalone/<key>`` and is compiled the first time that key is
seen. Tokens, weights, biases, rates and the seed are *run arguments* (Brian2 ``run_args``):
they are written to files and read by the compiled binary when it starts, so a new input on a
cached shape invokes no compiler (``make`` finds every object up to date). Each run writes its
results into its own subdirectory, and the run-argument files it read are removed after it.

The binary writes back only the arrays read after the run (:func:`_write_back_code`), not
every array of the network as Brian2's end of ``main`` does.

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
from brian2.codegen.translation import get_identifiers_recursively
from brian2.core.variables import ArrayVariable, DynamicArrayVariable, Subexpression
from brian2.devices.cpp_standalone.device import CPPStandaloneDevice
from filelock import FileLock

from ctmhsa.neurons.backend import cache_dir
from ctmhsa.neurons.models import get_model
from ctmhsa.neurons.params import CellParams
from ctmhsa.neurons.window import counted_observables, counter_run_args, window_observables

__all__ = ["standalone_device", "project_dir", "project_key", "run_standalone", "run_project", "worker_copy",
           "replay_digest", "release", "STANDALONE_DEVICES", "check_device"]

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
                seed: int | None = None, record=(), replayed=()) -> str:
    """SHA-256 key of everything compiled into a standalone project: the circuit's structure,
    the level's cell models (equations, spike condition, reset, every per-step code), phi, the
    physiological constants, dt, the run schedule (warm-up, window), OpenMP threads, the package
    and Brian2 versions and the Python environment. Tokens, weights, biases, rates and seeds are
    run arguments and not part of it. ``record``: the populations whose spike trains are
    recorded (``True``: all), each a monitor compiled in; ``replayed``: populations replayed
    from a table, a run argument (:func:`ctmhsa.circuits.instantiate.replay_table`; their spikes are not
    in the key).

    ``replay``: spike trains replayed into the network (:func:`replay_digest` enters the key,
    their sizes being compiled in); ``device``: the standalone device; ``seed``: only on
    ``cuda_standalone``, which compiles the seed in (``None`` elsewhere)."""
    try:
        version = metadata.version("ctmhsa")
    except metadata.PackageNotFoundError:   # running from a source tree
        version = "source"
    models = {p.cell_type: asdict(get_model(level, p.cell_type)) for p in circuit.populations.values()}
    record = True if record is True else sorted(record or ())
    blob = json.dumps(dict(circuit=circuit.to_dict(), level=level, phi=phi, law=law, fold=bool(fold), record=record,
                           params=params.to_dict(),
                           dt=dt, schedule=list(schedule), threads=max(int(threads), 1), models=models,
                           version=version, brian2=b2.__version__,
                           **({} if replay is None else dict(replay=replay_digest(replay))),
                           **({} if not replayed else dict(replayed=sorted(replayed))),
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


_KEPT: dict = {}
"""The network this process keeps for reruns (:func:`run_project` with ``rebind``): project key
-> ``dict(where=directory, built=..., lock=path, device=the device instance)``; at most one entry."""


def release() -> None:
    """Drop the network kept for reruns and reset the standalone device's state (run by
    :func:`ctmhsa.sims.distributed.run_split` after the heads of a serial split run, and on every
    worker when a head fails; a worker otherwise keeps its network for the next run of its
    shape)."""
    if _KEPT:
        _KEPT.clear()
        from brian2.devices.device import all_devices   # (``b2.devices.device`` is the active-device proxy)

        for name in STANDALONE_DEVICES:
            if name in all_devices:
                all_devices[name].reinit()
        gc.collect()


@contextlib.contextmanager
def standalone_device(directory: str, threads: int, device: str = "cpp_standalone"):
    """Activate a fresh standalone ``device`` for one build/run; restore runtime after (the
    device's state is kept when the network built in ``directory`` is kept for reruns)."""
    release()   # a fresh device forgets every kept network
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
    # one thread is no OpenMP at all: libgomp's one-thread regions still synchronise (70,000
    # futex calls in a barrel head's 1.2 s run, measured with strace)
    pref.openmp_threads = int(threads) if int(threads) > 1 else 0
    # Brian2's default ``make -j`` starts one compiler per source file at once (a load of ~50
    # on a 2-core machine, gigabytes of memory): one job per core compiles as fast
    pref.extra_make_args_unix = [a if a != "-j" else f"-j{os.cpu_count() or 1}" for a in old_make]
    try:
        yield b2.device
    finally:
        pref.openmp_threads, pref.extra_make_args_unix = old_threads, old_make
        if not any(k["where"] == directory for k in _KEPT.values()):
            b2.device.reinit()
        b2.set_device("runtime")


def run_project(key: str, build, warmup: float, duration: float, threads: int, n_chunks: int,
                device: str = "cpp_standalone", report=None, parallel: bool = False, rebind=None) -> tuple:
    """Build, compile if needed and run the cached project ``key``; return ``(built, results)``
    (``results`` as :func:`run_standalone` returns them).

    ``build()`` instantiates the network (with ``run_args={}``) inside the activated device.
    By default the whole build and run holds the project's lock (one process at a time). With
    ``parallel`` (heads on dask workers) the first caller compiles and runs in the project under
    its lock and marks it compiled; every later caller runs in its own copy of the compiled
    project (:func:`worker_copy`), so processes run in parallel and nothing compiles twice.

    ``rebind(built, run_args)``, given, records a new task's values as run arguments of a built
    network (:func:`ctmhsa.circuits.instantiate.assign`). The process then keeps its network and the
    device's state after the run, and its next call with the same key neither builds nor
    generates code: it only runs the binary with the new run arguments (a dask worker's heads
    after its first). :func:`release` drops the kept network.
    """
    kept = _KEPT.get(key)
    if rebind is not None and kept is not None:
        with FileLock(kept["lock"]):
            built = kept["built"]
            built.run_args = {}
            try:
                rebind(built, built.run_args)
                out = _execute(kept["device"], built, warmup, duration, kept["where"], n_chunks, report)
            except BaseException:
                release()   # never rerun a network whose last run failed
                raise
            out.update(compile=0.0)
            return built, out
    canon = project_dir(key)

    def once(where, lock):
        with standalone_device(where, threads, device):
            built = build()
            out = run_standalone(built, warmup, duration, where, threads, n_chunks, report)
            if rebind is not None:
                _KEPT[key] = dict(where=where, built=built, lock=lock, device=b2.get_device())
            return built, out

    marker = os.path.join(canon, ".compiled")
    with FileLock(canon + ".lock"):
        if not parallel or not os.path.isfile(marker):
            out = once(canon, canon + ".lock")
            if parallel:
                open(marker, "w").close()
            return out
        where = worker_copy(canon)
    lock = os.path.join(where, ".run.lock")   # inside the copy: removed with it
    with FileLock(lock):
        return once(where, lock)


def run_standalone(built, warmup: float, duration: float, directory: str, threads: int,
                   n_chunks: int, report=None) -> dict:
    """Compile (if needed) and run ``built`` on the active standalone device.

    Call inside :func:`standalone_device` right after :func:`ctmhsa.circuits.instantiate.instantiate`
    with a ``run_args`` dict (every value becomes a run argument of the binary).

    Returns
    -------
    dict
        ``compile`` and ``run`` wall times (s), ``obs`` (per population: window means of the
        observables, ``count``, ``rate``, ``T``; rate level: final values), ``fano`` (per
        spiking population, :func:`ctmhsa.neurons.window.fano_sums` of its counts in ``n_chunks``
        equal parts of the window) and ``spikes`` (per recorded population ``(cell, time_s)``).
    """
    dev = b2.device
    spiking = built.spiking
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
    # Brian2's own end writes every array (and the profile, when profiling)
    if type(b2.get_device()) is CPPStandaloneDevice and not dev.enable_profiling:   # (b2.device: a proxy)
        dev.insert_code("before_end", _write_back_code(dev, built))
    t0 = time.perf_counter()
    dev.build(directory=directory, compile=True, run=False, clean=False, with_output=bool(report))
    t_compile = time.perf_counter() - t0
    out = _execute(b2.get_device(), built, warmup, duration, directory, n_chunks, report)
    out.update(compile=t_compile)
    return out


def _execute(dev, built, warmup: float, duration: float, directory: str, n_chunks: int, report=None) -> dict:
    """Run the compiled binary of ``built`` on the standalone device instance ``dev`` that
    generated it, with its run arguments (and the window's, set here), and read the results
    back; the results and run-argument files are removed after."""
    for ta, table in built.replay_tables.values():   # the same for every head of a run
        built.run_args[ta] = table
    if built.spiking:
        for g in built.all_groups():
            if "t_win" in g.variables:
                built.run_args[g.t_win] = warmup * b2.second
        for name in built.counted:
            g = built.groups[name]
            for var, value in counter_run_args(duration, n_chunks).items():
                built.run_args[getattr(g, var)] = b2.Quantity(value, dim=getattr(g, var).dim)
    results = os.path.join("results", uuid.uuid4().hex)
    t0 = time.perf_counter()
    try:
        dev.run(directory=directory, results_directory=results, with_output=bool(report),
                run_args=built.run_args)
        t_run = time.perf_counter() - t0
        out = _collect(built, duration, n_chunks)
    finally:
        shutil.rmtree(os.path.join(directory, results), ignore_errors=True)
        # the run arguments' files (weights, biases: megabytes per run at barrel size) would
        # otherwise pile up in the project, one set per input ever run
        for name in list(dev.run_args_arrays):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(directory, "static_arrays", name))
            with contextlib.suppress(OSError):
                os.remove(os.path.join(directory, "static_arrays", name + ".lock"))
    out.update(run=t_run)
    return out


COUNTERS = ("n_win", "n_chunk", "s2_chunk")
"""The spike counters read after a run (:data:`ctmhsa.neurons.window.COUNTER_EQUATIONS`)."""


def _read_back(built) -> dict:
    """Per population, the variables read after a run: a rate population's observables, a
    counted spiking population's counters and window integrals (:data:`COUNTERS`)."""
    out = {}
    for name in built.groups:
        model = get_model(built.level, built.circuit.population(name).cell_type)
        if not model.spiking:
            out[name] = tuple(model.observables)
        elif name in built.counted:
            out[name] = COUNTERS + tuple(f"acc_{v}" for v in model.observables)
    return out


def _collect(built, T: float, n_chunks: int) -> dict:
    """Window observables, Fano sums and recorded spike trains, read back after a standalone run
    (observables integrated from ``t_win`` on; counts kept by the cells, see
    :data:`ctmhsa.neurons.window.COUNTER_EQUATIONS`)."""
    obs, fano = {}, {}
    for name, names in _read_back(built).items():
        model = get_model(built.level, built.circuit.population(name).cell_type)
        values = {v: built.values(name, v) for v in names}
        if not model.spiking:
            obs[name] = values
        else:
            count, fano[name] = counted_observables(*(values[v] for v in COUNTERS), n_chunks)
            obs[name] = window_observables({v: values[f"acc_{v}"] / T for v in model.observables}, count, T)
    spikes = {name: built.spike_trains(name) for name in built.monitors}
    return dict(obs=obs, fano=fano, spikes=spikes)


def _arrays(group, name: str) -> list:
    """The arrays that reading ``group.name`` reads: the variable's own, or for a subexpression
    (a rate ``r``) those of every variable it uses, linked ones and their index arrays included."""
    var = group.variables[name]
    if not isinstance(var, Subexpression):
        return [var]
    out = []
    for ident in get_identifiers_recursively([var.expr], group.variables):
        dep, index = group.variables.get(ident), group.variables.indices[ident]
        if isinstance(dep, ArrayVariable):
            out.append(dep)
            if index not in ("_idx", "0"):
                out.append(group.variables[index])
    return out


def _write_back_code(dev, built) -> str:
    """C++ run at the end of ``main`` instead of Brian2's ``brian_end``: write the arrays read
    after the run (:func:`_read_back`, the monitors' spike trains, and the variables of
    differential equations, which Brian2 checks for NaN) and the run's duration, then return.

    ``brian_end`` writes every array of the network and frees it: 41 MB per barrel head run,
    mostly synapse indices, taking 0.022 s on tmpfs and 0.07-0.085 s on disk (measured); the
    arrays read are 4 MB. A file that cannot be written ends the binary with an error; a
    variable not written cannot be read back (``FileNotFoundError``), never stale."""
    variables = []
    for name, names in _read_back(built).items():
        for v in names:
            variables += _arrays(built.holder(name, v)[0], v)
    for mon in built.monitors.values():
        variables += [mon.variables["i"], mon.variables["t"]]
    # Brian2 checks these for NaN after a run: every owner of a device array (device.run,
    # Group._check_for_invalid_states)
    owners = {}
    for var in list(dev.arrays):
        with contextlib.suppress(ReferenceError):
            if isinstance(getattr(var.owner, "equations", None), b2.Equations):
                owners[var.owner.name] = var.owner
    for _, obj in sorted(owners.items()):
        variables += [obj.variables[v] for v in obj.equations.diff_eq_names]
    lines = ["{  // ctmhsa (ctmhsa.circuits.standalone): write back only what is read",
             "    auto _write_back = [](const std::string& name, const void* data, size_t bytes) {",
             "        std::ofstream out(brian::results_dir + name, std::ios::binary | std::ios::out);",
             "        out.write(static_cast<const char*>(data), bytes);",
             "        out.close();   // flushed: a full disk shows here",
             "        if (out.fail()) { std::cerr << \"cannot write \" << brian::results_dir << name << std::endl; std::exit(1); }",
             "    };"]
    # in the order of their file names: the code must not change from one build to the next
    # (Brian2's collections of objects have no fixed order), or every build would recompile main.cpp
    for fname, var in sorted({dev.get_array_filename(v): v for v in variables}.items()):
        if isinstance(var, DynamicArrayVariable):
            a = "brian::" + dev.get_array_name(var, access_data=False)
            lines.append(f'    _write_back("{fname}", {a}.data(), {a}.size()*sizeof({a}[0]));')
        else:
            a = "brian::" + dev.get_array_name(var)
            lines.append(f'    _write_back("{fname}", {a}, {int(var.size)}*sizeof({a}[0]));')
    lines += ['    std::ofstream info(brian::results_dir + "last_run_info.txt", std::ios::out);',
              "    info << Network::_last_run_time << \" \" << Network::_last_run_completed_fraction << std::endl;",
              "    info.close();",
              '    if (info.fail()) { std::cerr << "cannot write last_run_info.txt" << std::endl; return 1; }',
              "    return 0;",
              "}"]
    return "\n".join(lines)
