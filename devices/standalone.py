"""Brian2's ``cpp_standalone`` device: compile a network shape once, run it many times.

Everything compiled into a standalone project — the circuit's structure, the equations, dt,
OpenMP threads — is hashed into a key (:func:`project_key`); the project lives in
``<cache>/standalone/<key>`` and is compiled the first time that key is seen. Tokens, weights,
biases, rates, the seed and the run's schedule (warm-up, window, chunks: the length of the
network's run is read by the binary, :func:`_run_length_from_argument`) are *run arguments*
(Brian2 ``run_args``): they are written to files and read by the compiled binary when it starts,
so a new input or duration on a cached shape invokes no compiler (``make`` finds every object up
to date). Each run writes its results into its own subdirectory, and the run-argument files it
read are removed after it.

A cached project checks itself before it is reused (:func:`_compile`): the digests of its
binary, objects and dependency file are recorded after every successful ``make``, and a file
that no longer matches (a truncated binary or object, a build killed half-way) is removed and
built again, with a :class:`StandaloneCacheWarning`; a ``make`` that still fails on a cached
project rebuilds it from scratch once, and a second failure is an error naming the project.
``make`` runs in its own process group, killed as a group when the build is interrupted or
times out, or when this process dies (a parent-death signal), so no compiler outlives its
build. Copies of processes that have died (:func:`worker_copy`) are removed at the next start.

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

A stream of token sets (the relays' rates from a table, one row per presentation) runs on
``cpp_standalone`` at every level: the table's rates are a run argument (Brian2 >= 2.6
sets a ``TimedArray`` from ``run_args``), its shape, period and shift are compiled in. Its rows
are padded to :func:`stream_rows` (the last row repeated, what the table gives past its end
anyway), so streams of every length up to that share one project. The binary records what the
presentations are read from (:class:`StreamRead`), and each is read after the run as the runtime
device reads it during the run.

``device`` is a registered device that compiles (:mod:`ctmhsa.devices.registry`):
``"cpp_standalone"`` or, where brian2cuda is installed, ``"cuda_standalone"`` (GPU; the seed is
then compiled into the project, see :func:`run_standalone`).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
import warnings
from dataclasses import asdict, dataclass, field
from importlib import metadata

import brian2 as b2
import numpy as np
from brian2.codegen.translation import get_identifiers_recursively
from brian2.core.variables import ArrayVariable, DynamicArrayVariable, Subexpression
from brian2.devices.cpp_standalone.device import CPPStandaloneDevice
from filelock import FileLock

from ctmhsa.devices.cuda import (NONDETERMINISM, NondeterministicRunWarning, is_cuda, lowercase_run_arg_files,
                                  network_flags)
from ctmhsa.devices.registry import check_device, compiled_devices, get_device
from ctmhsa.neurons.backend import cache_dir
from ctmhsa.neurons.models import get_model
from ctmhsa.neurons.compilation import DIE_WITH_PARENT
from ctmhsa.neurons.params import CellParams
from ctmhsa.neurons.window import (chunk_ids, counted_observables, counter_run_args, fano_from_sums, stream_counted,
                                   window_observables, window_snapshots)

__all__ = ["standalone_device", "project_dir", "project_key", "run_standalone", "run_project", "worker_copy",
           "replay_digest", "release", "STANDALONE_DEVICES", "check_device", "StandaloneCacheWarning",
           "COMPILE_TIMEOUT_S", "StreamRead", "stream_rows", "padded_stream"]

def __getattr__(name):
    # STANDALONE_DEVICES, read from the registry when asked (a device registered later is in it)
    if name == "STANDALONE_DEVICES":
        return compiled_devices()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


STREAM_ROWS = 8
"""Fewest rows of a compiled stream table (:func:`stream_rows`)."""


def stream_rows(rows: int) -> int:
    """Rows of the compiled table of a stream table of ``rows`` rows: the next power of two, at
    least :data:`STREAM_ROWS`. Streams of up to 8 rows share a project, of 9 to 16 the next, and
    so on: a table is at most twice its stream, and a longer stream compiles one more project
    each time its length doubles."""
    return max(STREAM_ROWS, 1 << (int(rows) - 1).bit_length())


def padded_stream(stream: dict) -> dict:
    """``stream`` (population -> ``(rates (rows, N), period, shift)``, see
    :func:`ctmhsa.circuits.instantiate.instantiate`) with every table padded to :func:`stream_rows`
    rows by its last row, which a table gives past its end anyway: the same rates at every time."""
    out = {}
    for pop, (rates, period, shift) in stream.items():
        rates = np.asarray(rates, float)
        pad = np.repeat(rates[-1:], stream_rows(len(rates)) - len(rates), axis=0)
        out[pop] = (np.concatenate([rates, pad]), period, shift)
    return out


COUNT = "n_win"
"""The sample a compiled stream takes of its counting cells' window count (:class:`StreamRead`)."""


@dataclass
class StreamRead:
    """How a stream run on a compiled device is read once the binary has ended, as
    :func:`ctmhsa.neurons.window.measure_stream` reads it during a runtime run.

    At the spiking levels every presentation has a window: its spike counts from the cells' own
    counters (:meth:`chunks`: a table of each step's window chunk, a run argument; the window
    count sampled at each window's opening and end, the chunk sums behind the Fano factor read at
    the run's end; until version 0.15 every spike was kept, 2.35 million per image of the lif
    digits circuit), its means from the cells' integrals ``acc_<v>``. At the rate level the
    observables are read at 90 % and at the end of every presentation. What is read at a step
    boundary is sampled by state monitors every :attr:`every` steps (every boundary read falls on
    one) at the start of a step: the state after the step before, what a runtime read at that
    boundary sees. The run lasts one step more than the stream (:attr:`EXTRA_STEPS`), so its last
    boundary has a sample too. A streamed relay's rate at the rate level is the table's row at the
    step before the boundary (a function of the time, which a sample at the boundary would read at
    the next step): it is looked up in the table, as the runtime device's code does.

    Attributes
    ----------
    t0 : int
        Steps of the warm-up (the stream's first step).
    marks : ndarray
        Step boundaries from the stream's start, one row per presentation: spiking levels, its
        window's opening and chunk ends (:func:`ctmhsa.neurons.window.stream_steps`); rate level,
        its 90 % and its end (:func:`ctmhsa.neurons.window.stream_state_steps`).
    window : float
        Window length (s; rate level: the presentation).
    tables : dict
        The stream's tables as compiled (padded): population -> ``(rates, period, shift)``.
    spiking : bool
        A spiking level.
    delays : dict
        Population -> steps its windows are read after the others' (a read-out latency,
        :func:`ctmhsa.neurons.window.measure_stream`'s ``latency``); populations not named: 0.
    samples : dict
        Set by :meth:`attach`: ``(population, observable)`` -> ``(StateMonitor, variable, fold
        classes or None)`` of the variable sampled for it (the observable :data:`COUNT`: the
        cells' window count ``n_win``).
    """

    t0: int
    marks: np.ndarray
    window: float
    tables: dict
    spiking: bool = True
    delays: dict = field(default_factory=dict)
    samples: dict = field(default_factory=dict)

    EXTRA_STEPS = 1

    def _marks(self, name: str | None = None) -> np.ndarray:
        """The window marks of population ``name`` (delayed by its :attr:`delays`)."""
        return self.marks + int(self.delays.get(name, 0))

    def _bounds(self, name: str | None = None) -> np.ndarray:
        """The boundaries (steps from the run's start) the sampled variables of ``name`` are read at."""
        return self.t0 + self._marks(name)[:, [0, -1]]

    def _every(self, delays) -> int:
        """Steps between samples of populations read with ``delays`` (steps): each of their
        boundaries falls on one."""
        return int(np.gcd.reduce(np.concatenate([[self.t0], *(self._bounds().ravel() + d for d in sorted(delays))])))

    @property
    def every(self) -> int:
        """Steps between samples where every population's boundaries fall on one."""
        return self._every(set(self.delays.values()) | {0})

    def key(self) -> dict:
        """What is compiled in (:func:`project_key`): the tables' shapes, periods and shifts, the
        sampling steps."""
        delayed = {} if not self.delays else dict(
            delays=dict(sorted(self.delays.items())),
            every_by_delay={str(d): self._every({d}) for d in sorted(set(self.delays.values()) | {0})})
        return dict(tables={p: [*np.shape(r), float(P), float(sh)] for p, (r, P, sh) in sorted(self.tables.items())},
                    every=self.every, **delayed)

    def chunks(self, dt: float) -> tuple:
        """``instantiate(chunks=...)``: every population's delay and, per delay, the chunk of each
        step (:func:`ctmhsa.neurons.window.chunk_ids`), so that the cells count each window's
        spikes themselves and no spike is kept. The tables are as long as the padded relay tables
        reach (and the longest delay): their length is compiled in, so one project runs streams
        of any length its relays' tables hold; their values are run arguments."""
        reach = max(len(r) * P for r, P, _ in self.tables.values())
        steps = int(np.ceil(reach / dt)) + max(self.delays.values(), default=0) + self.EXTRA_STEPS + 1
        delays = {0, *self.delays.values()}
        return dict(self.delays), {d: chunk_ids(self._marks() + d, self.t0, steps) for d in sorted(delays)}

    def attach(self, built) -> None:
        """Add the monitors to ``built``'s network, in the active device before it runs: per group
        holding a sampled variable (the window integrals, and at the spiking levels the counting
        cells' window count), one state monitor of them."""
        held = {}
        for name, pop in built.circuit.populations.items():
            model = get_model(built.level, pop.cell_type)
            if self.spiking and name not in built.counted or not self.spiking and name in built.replayed:
                continue
            if self.spiking:   # its cells count each window's spikes (instantiate's chunks): sampled
                group, cls = built.holder(name, "n_win")
                held.setdefault(group.name, (group, []))[1].append((name, COUNT, "n_win", cls))
            for v in model.observables:
                var = f"acc_{v}" if self.spiking else v
                group, cls = built.holder(name, var)
                if name in self.tables and not self.spiking and _follows_table(group, var):
                    continue   # looked up in the table (read)
                held.setdefault(group.name, (group, []))[1].append((name, v, var, cls))
        # each group sampled at the steps its own populations' boundaries share: a read-out latency
        # of one small population (the digits' class cells, 0.15 s) made every group's step 50 ms
        # instead of 250 (5x the samples of 274,590 cells kept until the run ends)
        clocks = {}
        for gname, (group, wanted) in sorted(held.items()):
            every = self._every({self.delays.get(name, 0) for name, *_ in wanted})
            if every not in clocks:
                clocks[every] = b2.Clock(dt=every * built.dt * b2.second, name="stream_samples" if every == self.every
                                         else f"stream_samples_{every}")
            mon = b2.StateMonitor(group, sorted({var for _, _, var, _ in wanted}), record=True, clock=clocks[every],
                                  when="start", order=-100, name=f"{gname}_stream_samples")
            built.network.add(mon)
            for name, v, var, cls in wanted:
                self.samples[name, v] = (mon, var, cls)

    def monitors(self) -> list:
        """Every monitor this read adds or uses."""
        return list({id(m): m for m, _, _ in self.samples.values()}.values())

    def read(self, built) -> dict:
        """The run just ended as :func:`ctmhsa.neurons.window.measure_stream` returns it
        (``snapshots``, ``early``), at the spiking levels with the pooled Fano factor per population
        (``fano``, from :func:`ctmhsa.neurons.window.stream_counted`) in place of the chunk counts
        (``chunks`` empty: held per window and cell, they took 3 GB on the digits stream)."""
        idx = self._bounds() // self.every
        at = {}   # population -> {observable: (presentations, 2, N)}, at the two boundaries read
        for (name, v), (mon, var, cls) in self.samples.items():
            every = int(round(float(mon.clock.dt_) / built.dt))
            sampled = _recorded_rows(mon.variables[var], self._bounds(name) // every)   # (presentations, 2, cells)
            at.setdefault(name, {})[v] = sampled if cls is None else sampled[..., cls]
        if not self.spiking:
            for name, table in self.tables.items():   # the step before the boundary
                for v in get_model(built.level, built.circuit.population(name).cell_type).observables:
                    if (name, v) not in self.samples:
                        at.setdefault(name, {})[v] = _table_rows(*table, (self._bounds() - 1) * built.dt, built.dt)
            state = [{p: {v: a[k] for v, a in obs.items()} for p, obs in at.items()} for k in range(len(idx))]
            return dict(snapshots=[(self.window, {p: {v: a[1] for v, a in o.items()} for p, o in st.items()})
                                   for st in state],
                        chunks={}, early=[{p: {v: a[0] for v, a in o.items()} for p, o in st.items()} for st in state])
        totals, sums, C = {}, {}, self.marks.shape[1] - 1
        for name in built.counted:
            totals[name], sums[name] = stream_counted(at[name].pop(COUNT), built.values(name, "s2_chunk"),
                                                      built.values(name, "n_chunk"), C)
        return dict(snapshots=window_snapshots(totals, at, self.window), chunks={}, fano=fano_from_sums(sums),
                    early=[])


def _recorded_rows(var, rows: np.ndarray) -> np.ndarray:
    """Rows ``rows`` (any shape of indices) of a state monitor's samples (samples x cells) after a
    compiled run, as floats: read from its results file where it lies on disk, so that only those
    rows are loaded (the digits stream samples 4x the rows it reads: 1.8 GB, 4.5 s loaded whole)."""
    dev = b2.get_device()
    ncols = var.size[1] if isinstance(var.size, tuple) and len(var.size) == 2 else 0
    path = os.path.join(dev.results_dir, dev.get_array_filename(var)) if getattr(dev, "has_been_run", False) else ""
    if ncols and dev.array_cache.get(var) is None and os.path.isfile(path) and os.path.getsize(path):
        return np.asarray(np.memmap(path, dtype=var.dtype, mode="r").reshape(-1, ncols)[rows], float)
    return np.asarray(var.get_value(), float)[rows]


def _follows_table(group, var: str) -> bool:
    """Whether ``var`` of a streamed ``group`` is its input rate from the table (``r_in``, or a
    subexpression that is ``r_in``); another function of the table cannot be read."""
    v = group.variables[var]
    if var == "r_in" or isinstance(v, Subexpression) and v.expr.strip() == "r_in":
        return True
    if isinstance(v, Subexpression) and "r_in" in get_identifiers_recursively([v.expr], group.variables):
        raise NotImplementedError(f"stream: {group.name}.{var} is a function of its stream table; only its rate "
                                  "r_in can be read after a compiled run")
    return False


def _table_rows(rates: np.ndarray, period: float, shift: float, t: np.ndarray, dt: float) -> np.ndarray:
    """``rates[row]`` where Brian2's numpy code reads a stream table (rows every ``period`` s, read
    at ``t + shift``) at times ``t`` (s, any shape) of a clock of step ``dt``: ``t.shape + (N,)``."""
    K = max(int(2 ** np.ceil(np.log2(8 / dt * period))), 1)   # brian2.input.timedarray's upsampling
    row = np.clip((np.round((np.asarray(t) + shift) / (period / K)) / K).astype(int), 0, len(rates) - 1)
    return rates[row]


def project_key(circuit, level: str, phi: str, params: CellParams, dt: float,
                schedule: tuple, threads: int, law: str = "product", fold: bool = True,
                replay: dict | None = None, device: str = "cpp_standalone",
                seed: int | None = None, record=(), replayed=(), stream: dict | None = None,
                coupling: dict | None = None) -> str:
    """SHA-256 key of everything compiled into a standalone project: the circuit's structure,
    the level's cell models (equations, spike condition, reset, every per-step code), phi, the
    physiological constants, dt, OpenMP threads, the package and Brian2 versions and the Python
    environment. Tokens, weights, biases, rates and seeds are run arguments and not part of it.
    ``record``: the populations whose spike trains are recorded (``True``: all), each a monitor
    compiled in.

    ``schedule``: the run's ``(warm-up, window, chunks)`` (s, s, count). On ``cpp_standalone``
    they are run arguments (the binary reads the length of its run, see
    :func:`_run_length_from_argument`) and do not enter the key: a new duration reuses the
    project. Other devices compile the run's length in, and the schedule enters their key.

    ``replayed``: populations replayed from a table, a run argument
    (:func:`ctmhsa.circuits.instantiate.replay_table`; their spikes are not in the key), given as
    names or as a mapping name -> the table's steps (its shape is compiled in, so a table of
    another length, i.e. another warm-up + window, is another project).
    ``replay``: spike trains replayed into the network (:func:`replay_digest` enters the key,
    their sizes being compiled in); ``device``: the standalone device; ``seed``: only on
    ``cuda_standalone``, which compiles the seed in (``None`` elsewhere). ``stream``: what a stream
    compiles in (:meth:`StreamRead.key`: its tables' shapes, periods and shifts, the sampling
    step), not its rates. ``coupling``: the lif somata's couplings given in place of their soma
    types' (compiled-in constants)."""
    try:
        version = metadata.version("ctmhsa")
    except metadata.PackageNotFoundError:   # running from a source tree
        version = "source"
    models = {p.cell_type: asdict(get_model(level, p.cell_type)) for p in circuit.populations.values()}
    record = True if record is True else sorted(record or ())
    replayed = sorted(replayed.items()) if isinstance(replayed, dict) else sorted(replayed or ())
    blob = json.dumps(dict(circuit=circuit.to_dict(), level=level, phi=phi, law=law, fold=bool(fold), record=record,
                           params=params.to_dict(),
                           dt=dt, threads=max(int(threads), 1), models=models,
                           version=version, brian2=b2.__version__,
                           **({} if replay is None else dict(replay=replay_digest(replay))),
                           **({} if not replayed else dict(replayed=replayed)),
                           **({} if stream is None else dict(stream=stream)),
                           **({} if not coupling else dict(coupling=dict(sorted(coupling.items())))),
                           **({} if get_device(device).run_args else dict(device=device, seed=seed,
                                                                               schedule=list(schedule))),
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
    when this process exits normally, or else by the next process that starts a run of the
    project (:func:`_remove_dead_copies`); it records its process's identity (``.owner``) for that.
    """
    copy = os.path.join(directory + ".copies", f"{socket.gethostname()}-{os.getpid()}")
    if not os.path.isfile(os.path.join(copy, ".complete")):
        shutil.rmtree(copy, ignore_errors=True)
        tmp = f"{copy}.tmp{uuid.uuid4().hex[:8]}"
        shutil.copytree(directory, tmp, ignore=shutil.ignore_patterns("results"), symlinks=True)
        with open(os.path.join(tmp, ".owner"), "w") as fh:
            fh.write(_process_identity(os.getpid()) or "")
        open(os.path.join(tmp, ".complete"), "w").close()
        os.replace(tmp, copy)
        atexit.register(shutil.rmtree, copy, True)
    return copy


def _process_identity(pid: int) -> str | None:
    """``"<boot id>:<start time>"`` of the live process ``pid`` (Linux ``/proc``; ``None``
    where it cannot be read or the process is gone): a pid reused by another process, or after a
    reboot, has another identity."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
        with open("/proc/sys/kernel/random/boot_id") as fh:
            boot = fh.read().strip()
    except OSError:
        return None
    # the command name (2nd field) may hold spaces and parentheses: count from its closing one
    return f"{boot}:{stat[stat.rindex(')') + 2:].split()[19]}"   # field 22, starttime


def _alive(pid: int, identity: str | None) -> bool:
    """Whether process ``pid`` exists and, where its ``identity`` was recorded
    (:func:`_process_identity`), is still that process (not a later one given the same pid)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # another user's process: alive
        pass
    now = _process_identity(pid)
    return not identity or now is None or now == identity


def _remove_dead_copies(directory: str) -> list:
    """Remove the copies of ``directory`` (:func:`worker_copy`), finished or half-made, of this
    host's processes that no longer run (killed: their ``atexit`` never ran); return their
    paths. Copies of other hosts sharing the cache are left alone: their pids mean nothing here.
    Call with the project's lock held."""
    copies = directory + ".copies"
    try:
        names = os.listdir(copies)
    except OSError:
        return []
    pattern = re.compile(rf"{re.escape(socket.gethostname())}-(\d+)(?:\.tmp[0-9a-f]+)?")
    removed = []
    for name in names:
        m = pattern.fullmatch(name)
        if m is None or int(m[1]) == os.getpid():
            continue
        path = os.path.join(copies, name)
        try:
            with open(os.path.join(path, ".owner")) as fh:
                identity = fh.read().strip()
        except OSError:
            identity = None
        if not _alive(int(m[1]), identity):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


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

        for name in compiled_devices():
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
    check_device(device)   # imports the device's package, which registers it with Brian2
    b2.set_device(device, build_on_run=False, directory=directory)
    b2.device.reinit()
    b2.device.activate(build_on_run=False, directory=directory)
    own = get_device(device).prefs
    own = own() if own is not None else {}
    old_own = {name: b2.prefs[name] for name in own}
    for name, value in own.items():
        b2.prefs[name] = value
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
        for name, value in old_own.items():
            b2.prefs[name] = value
        if not any(k["where"] == directory for k in _KEPT.values()):
            b2.device.reinit()
        b2.set_device("runtime")


def run_project(key: str, build, warmup: float, duration: float, threads: int, n_chunks: int,
                device: str = "cpp_standalone", report=None, parallel: bool = False, rebind=None,
                stream: StreamRead | None = None) -> tuple:
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

    ``stream``: a stream's read (:class:`StreamRead`), attached to the network after ``build()``;
    the results then hold its windows (``stream``, see :func:`run_standalone`).
    """
    if stream is not None and rebind is not None:
        raise ValueError("stream: a kept network (rebind) reruns one token set; build a stream's network afresh")
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
            if stream is not None:
                stream.attach(built)
            out = run_standalone(built, warmup, duration, where, threads, n_chunks, report, stream)
            if rebind is not None:
                _KEPT[key] = dict(where=where, built=built, lock=lock, device=b2.get_device())
            return built, out

    marker = os.path.join(canon, ".compiled")
    with FileLock(canon + ".lock"):
        _remove_dead_copies(canon)
        # a damaged project is repaired where it lives, not copied to every process (the
        # record is kept where make runs here, _compile: cpp_standalone on POSIX)
        if not parallel or not os.path.isfile(marker) or \
                (device == "cpp_standalone" and os.name == "posix" and not _intact(canon)):
            out = once(canon, canon + ".lock")
            if parallel:
                open(marker, "w").close()
            return out
        where = worker_copy(canon)
    lock = os.path.join(where, ".run.lock")   # inside the copy: removed with it
    with FileLock(lock):
        return once(where, lock)


def run_standalone(built, warmup: float, duration: float, directory: str, threads: int,
                   n_chunks: int, report=None, stream: StreamRead | None = None) -> dict:
    """Compile (if needed) and run ``built`` on the active standalone device.

    Call inside :func:`standalone_device` right after :func:`ctmhsa.circuits.instantiate.instantiate`
    with a ``run_args`` dict (every value becomes a run argument of the binary).

    Returns
    -------
    dict
        ``compile`` and ``run`` wall times (s), ``obs`` (per population: window means of the
        observables, ``count``, ``rate``, ``T``; rate level: final values), ``fano`` (per
        spiking population, :func:`ctmhsa.neurons.window.fano_sums` of its counts in ``n_chunks``
        equal parts of the window) and ``spikes`` (per recorded population ``(cell, time_s)``);
        with ``stream`` (attached to ``built``), ``stream`` (:meth:`StreamRead.read`) and
        ``spikes`` instead of ``obs`` and ``fano``.
    """
    dev = b2.device
    spiking = built.spiking
    # run arguments are applied here (after connect, before the first step); then reseed
    dev.apply_run_args()
    # (the device instance: b2.device is a proxy, whose class is never brian2cuda's)
    if is_cuda(b2.get_device()):   # brian2cuda (curand): the seed is compiled in
        dev.seed(0 if built.seed is None else int(built.seed))
        warnings.warn(NONDETERMINISM, NondeterministicRunWarning, stacklevel=2)
    else:
        n_gen = max(int(threads), 1)
        rng = dev.get_array_name(built.network["rng"].variables["seed_value"])
        dev.insert_code("main", f"for (int _i=0; _i<{n_gen}; _i++) "
                                f"brian::_random_generators[_i].seed((unsigned long) brian::{rng}[0] + _i);")
    total = (warmup + duration) if spiking else duration
    queued = len(dev.main_queue)
    built.network.run(total * b2.second, namespace={}, report="text" if report else None)
    _sort_clock_starts(dev, built.network, queued)
    cpp = type(b2.get_device()) is CPPStandaloneDevice   # (b2.device: a proxy)
    if cpp:
        _run_length_from_argument(dev, built)
    # Brian2's own end writes every array (and the profile, when profiling)
    if cpp and not dev.enable_profiling:
        dev.insert_code("before_end", _write_back_code(dev, built, stream))
    t0 = time.perf_counter()
    # the code is generated by Brian2 and compiled here (make, on POSIX): verified, in a process
    # group of its own
    own_make = cpp and os.name == "posix"
    with network_flags(b2.get_device(), built.network):
        dev.build(directory=directory, compile=not own_make, run=False, clean=False, with_output=bool(report))
    if own_make:
        _compile(directory)
    t_compile = time.perf_counter() - t0
    out = _execute(b2.get_device(), built, warmup, duration, directory, n_chunks, report, stream)
    out.update(compile=t_compile)
    return out


def _execute(dev, built, warmup: float, duration: float, directory: str, n_chunks: int, report=None,
             stream: StreamRead | None = None) -> dict:
    """Run the compiled binary of ``built`` on the standalone device instance ``dev`` that
    generated it, with its run arguments (and the window's, set here), and read the results
    back; the results and run-argument files are removed after."""
    for ta, table in built.replay_tables.values():   # the same for every head of a run
        built.run_args[ta] = table
    for ta, rates in built.stream_tables.values():     # the stream's rates (its shape is compiled in)
        built.run_args[ta] = rates * b2.Hz
    for ta, ids in built.chunk_tables.values():        # its windows' chunks, step by step (the same)
        built.run_args[ta] = ids
    # the length of the network's run (read by the binary, see _run_length_from_argument)
    built.run_args[built.network["rng"].run_duration] = ((warmup + duration) if built.spiking else duration) * b2.second
    if built.spiking:
        for g in built.all_groups():
            if "t_win" in g.variables:
                built.run_args[g.t_win] = warmup * b2.second
        for name in built.counted:
            g = built.groups[name]
            for var, value in counter_run_args(duration, n_chunks).items():
                built.run_args[getattr(g, var)] = b2.Quantity(value, dim=getattr(g, var).dim)
    results = os.path.join("results", uuid.uuid4().hex)
    # run-argument files left by a run that was killed (each run removes its own below): Brian2
    # writes a file only where none of its name exists, and a truncated one would fail every
    # later run of the same values. No other run uses this directory now (its lock is held).
    with contextlib.suppress(OSError):
        for name in os.listdir(os.path.join(directory, "static_arrays")):
            if name.startswith("init_"):
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(directory, "static_arrays", name))
    lowered = lowercase_run_arg_files(dev, built.run_args, directory) if is_cuda(dev) else []
    t0 = time.perf_counter()
    try:
        dev.run(directory=directory, results_directory=results, with_output=bool(report),
                run_args=built.run_args)
        t_run = time.perf_counter() - t0
        if stream is None:
            out = _collect(built, duration, n_chunks)
        else:   # (a relay's final rate, a function of the table, cannot be read back)
            out = dict(stream=stream.read(built), spikes={name: built.spike_trains(name) for name in built.monitors})
    finally:
        shutil.rmtree(os.path.join(directory, results), ignore_errors=True)
        # the run arguments' files (weights, biases: megabytes per run at barrel size) would
        # otherwise pile up in the project, one set per input ever run
        for name in [*dev.run_args_arrays, *lowered]:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(directory, "static_arrays", name))
            with contextlib.suppress(OSError):
                os.remove(os.path.join(directory, "static_arrays", name + ".lock"))
    out.update(run=t_run)
    return out


def _sort_clock_starts(dev, net, since: int) -> None:
    """Put the lines that set the clocks' start (``<clock>_timestep``, ``<clock>_t``), queued by
    the network's run from entry ``since`` of Brian2's main queue on, in the order of their clocks' names.

    Brian2 queues them in the order of a set of clocks, which changes from one process to the
    next: with more than one clock (a stream's samples) ``main.cpp`` would differ at every build
    and be compiled again. The values are independent, so their order changes nothing else."""
    names = {dev.get_array_name(c.variables[v]) for c in net._clocks for v in ("timestep", "t")}
    queue = dev.main_queue
    at = [k for k in range(since, len(queue)) if queue[k][0] == "set_by_single_value" and queue[k][1][0] in names]
    # by clock (a stable sort: each clock's own lines keep Brian2's order; one clock changes nothing)
    for k, entry in zip(at, sorted((queue[k] for k in at), key=lambda e: e[1][0].rsplit("_", 1)[0])):
        queue[k] = entry


def _run_length_from_argument(dev, built) -> None:
    """Make the binary read the length of the network's run from the run argument
    ``rng.run_duration`` (s; set by :func:`_execute`) instead of the number Brian2 writes into
    ``main``: the schedule is then not compiled in, and a new duration reuses the project.

    Call right after ``built.network.run(...)`` on the ``cpp_standalone`` device. Brian2 queues
    the run as ``<network>.run(<duration>, <report>, <period>);`` (``network_run``), after the
    line that applies the run arguments; that number is replaced by the variable. The
    generated ``main.cpp`` is then the same for every duration, so ``make`` finds it up to date.
    """
    net = built.network
    value = "brian::" + dev.get_array_name(net["rng"].variables["run_duration"]) + "[0]"
    head = f"{net.name}.run("
    for what, args in reversed(dev.main_queue):
        if what == "run_network" and args[0] is net:
            lines = args[1]
            for k, line in enumerate(lines):
                if line.startswith(head) and "," in line:
                    lines[k] = head + value + "," + line[len(head):].split(",", 1)[1]
                    return
    # the key of a project leaves the schedule out on this device: never compile a duration in
    raise RuntimeError(f"standalone: the network's run was not found in Brian2 {b2.__version__}'s main "
                       "queue; the run's duration cannot be a run argument")


class StandaloneCacheWarning(RuntimeWarning):
    """A cached standalone project was found damaged and is being built again."""


COMPILE_TIMEOUT_S = 3600.0
"""Longest ``make`` of a standalone project (s); a longer one is stopped, its compilers with it."""

MANIFEST = ".build.json"
"""File of a project recording the size and modification time of its compiled files after a
successful ``make``."""

# Runs ``make`` (the arguments after the parent's pid) as the leader of a new process group that
# dies with this process (ctmhsa.neurons.compilation.DIE_WITH_PARENT).
_SUPERVISOR = DIE_WITH_PARENT + """
import subprocess
sys.exit(subprocess.call(sys.argv[2:]))
"""


def _outputs(directory: str) -> list:
    """What ``make`` writes in ``directory`` (relative paths): the binary, the objects and the
    dependency file."""
    out = [f for f in ("main", "make.deps") if os.path.isfile(os.path.join(directory, f))]
    for sub in ("", "code_objects", "brianlib"):
        with contextlib.suppress(OSError):
            out += [os.path.join(sub, f) for f in os.listdir(os.path.join(directory, sub)) if f.endswith(".o")]
    return sorted(out)


def _stamp(path: str) -> list:
    """Size and modification time (ns) of a file: what a truncated, rewritten or half-written
    compiled file changes (the damage to find; a killed build leaves no record at all)."""
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns]


def _sources_newer(directory: str) -> bool:
    """Whether Brian2 wrote a generated source or the makefile after the record (Brian2 rewrites
    only a file whose content changed): then ``make`` has work to do."""
    since = os.stat(os.path.join(directory, MANIFEST)).st_mtime_ns
    for sub in ("", "code_objects", "brianlib"):
        with contextlib.suppress(OSError), os.scandir(os.path.join(directory, sub)) as it:
            for e in it:
                if (e.name == "makefile" or e.name.endswith((".cpp", ".h"))) and e.stat().st_mtime_ns > since:
                    return True
    return False


def _manifest(directory: str) -> dict | None:
    """The stamps recorded after the project's last successful ``make`` (``None``: none)."""
    try:
        with open(os.path.join(directory, MANIFEST)) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def _damaged(directory: str) -> list | None:
    """Compiled files of ``directory`` that differ from its record (``None``: no record)."""
    manifest = _manifest(directory)
    if manifest is None:
        return None
    bad = []
    for rel, stamp in manifest.items():
        path = os.path.join(directory, rel)
        if os.path.exists(path) and _stamp(path) != stamp:
            bad.append(rel)
    return bad


def _intact(directory: str) -> bool:
    """Whether ``directory`` holds every file of its record, unchanged."""
    manifest = _manifest(directory)
    return manifest is not None and all(os.path.isfile(os.path.join(directory, rel)) for rel in manifest) \
        and not _damaged(directory)


def _remove(directory: str, files) -> None:
    for rel in files:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(directory, rel))


class _MakeFailed(Exception):
    pass


def _make(directory: str, timeout: float | None = None) -> None:
    """Run Brian2's ``make`` command in ``directory`` in a process group of its own, its output in
    ``make.log``; the whole group is killed if this call is interrupted, times out (``timeout``
    s, default :data:`COMPILE_TIMEOUT_S`: then a ``RuntimeError``) or this process dies.
    ``_MakeFailed`` if make fails."""
    pref = b2.prefs.devices.cpp_standalone
    cmd = [*shlex.split(pref.make_cmd_unix), *pref.extra_make_args_unix]
    log = os.path.join(directory, "make.log")
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _SUPERVISOR, str(os.getpid()), *cmd],
                                cwd=directory, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=COMPILE_TIMEOUT_S if timeout is None else timeout)
        except BaseException as exc:   # interrupted, timed out, the task cancelled
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            if isinstance(exc, subprocess.TimeoutExpired):   # hung: not worth a second try
                raise RuntimeError(f"standalone project {directory}: make stopped after {exc.timeout:g} s "
                                   "(ctmhsa.devices.standalone.COMPILE_TIMEOUT_S)") from None
            raise
    if rc != 0:
        with open(log, errors="replace") as fh:
            tail = fh.read()[-2000:]
        raise _MakeFailed(f"exit status {rc}; the end of {log}:\n{tail}")


def _compile(directory: str) -> None:
    """Bring the compiled files of the project ``directory`` (its code generated) up to date.

    Before ``make``, files that differ from the record of the last successful build (a
    truncated binary or object) are removed, as is everything compiled when there is no record
    (a build that did not finish): ``make`` builds them again, with a
    :class:`StandaloneCacheWarning`. If ``make`` then fails on a project that held compiled
    files, the project is built from scratch once, with a warning; a second failure (or a failure
    of a first build) is a ``RuntimeError`` naming the project. A successful build records the
    size and modification time of what it compiled (:data:`MANIFEST`). An intact project whose
    sources did not change since is left alone: no ``make`` on a cached run.
    """
    if _intact(directory) and not _sources_newer(directory):
        return
    damaged = _damaged(directory)
    present = _outputs(directory)
    if damaged is None and present:
        damaged = present
        warnings.warn(f"standalone project {directory}: an earlier build did not finish (no record of its "
                      "compiled files); compiling it again", StandaloneCacheWarning, stacklevel=2)
    elif damaged:
        warnings.warn(f"standalone project {directory}: {len(damaged)} compiled file(s) changed since the "
                      f"project was built ({', '.join(damaged[:3])}{', ...' if len(damaged) > 3 else ''}); "
                      "building them again", StandaloneCacheWarning, stacklevel=2)
        damaged = [*damaged, "main"]   # linked from the damaged objects
    _remove(directory, damaged or ())
    _remove(directory, [MANIFEST])     # no record while make runs: a killed build is not trusted
    kept = set(present) - set(damaged or ())
    try:
        _make(directory)
    except _MakeFailed as exc:
        if not kept:   # everything was compiled afresh: an error in the code or the compiler
            raise RuntimeError(f"standalone project {directory}: compilation failed ({exc})") from None
        warnings.warn(f"standalone project {directory}: make failed on the cached project ({str(exc)[:200]}); "
                      "building it from scratch", StandaloneCacheWarning, stacklevel=2)
        _remove(directory, _outputs(directory))
        try:
            _make(directory)
        except _MakeFailed as again:
            raise RuntimeError(f"standalone project {directory}: compilation failed again after a clean "
                               f"rebuild ({again}); remove the directory to start afresh") from None
    record = {rel: _stamp(os.path.join(directory, rel)) for rel in _outputs(directory)}
    tmp = os.path.join(directory, f"{MANIFEST}.{uuid.uuid4().hex[:8]}")
    with open(tmp, "w") as fh:
        json.dump(record, fh, indent=0, sort_keys=True)
    os.replace(tmp, os.path.join(directory, MANIFEST))


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


def _write_back_code(dev, built, stream: StreamRead | None = None) -> str:
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
    for mon in {id(m): m for m in [*built.monitors.values(), *(stream.monitors() if stream else ())]}.values():
        recorded = mon.record_variables if isinstance(mon, b2.StateMonitor) else ("i", "t")
        variables += [mon.variables[v] for v in recorded]
    # Brian2 checks these for NaN after a run: every owner of a device array (device.run,
    # Group._check_for_invalid_states)
    owners = {}
    for var in list(dev.arrays):
        with contextlib.suppress(ReferenceError):
            if isinstance(getattr(var.owner, "equations", None), b2.Equations):
                owners[var.owner.name] = var.owner
    for _, obj in sorted(owners.items()):
        variables += [obj.variables[v] for v in obj.equations.diff_eq_names]
    lines = ["{  // ctmhsa (ctmhsa.devices.standalone): write back only what is read",
             "    auto _write_back = [](const std::string& name, const void* data, size_t bytes) {",
             "        std::ofstream out(brian::results_dir + name, std::ios::binary | std::ios::out);",
             "        out.write(static_cast<const char*>(data), bytes);",
             "        out.close();   // flushed: a full disk shows here",
             "        if (out.fail()) { std::cerr << \"cannot write \" << brian::results_dir << name << std::endl; std::exit(1); }",
             "    };"]
    # in the order of their file names: the code must not change from one build to the next
    # (Brian2's collections of objects have no fixed order), or every build would recompile main.cpp
    for fname, var in sorted({dev.get_array_filename(v): v for v in variables}.items()):
        if isinstance(var, DynamicArrayVariable) and var.ndim == 2:   # a state monitor's, row by row (Brian2's)
            a = "brian::" + dev.get_array_name(var, access_data=False)
            lines += ["    {",
                      f'        std::ofstream out(brian::results_dir + "{fname}", std::ios::binary | std::ios::out);',
                      f"        for (int _n = 0; _n < {a}.n; _n++)",
                      f"            if (!{a}(_n).empty()) out.write(reinterpret_cast<char*>(&{a}(_n, 0)), "
                      f"{a}.m*sizeof({a}(0, 0)));",
                      "        out.close();",
                      f'        if (out.fail()) {{ std::cerr << "cannot write " << brian::results_dir << "{fname}" '
                      "<< std::endl; std::exit(1); }",
                      "    }"]
        elif isinstance(var, DynamicArrayVariable):
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
