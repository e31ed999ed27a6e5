"""Brian2's Cython compilation, watched: which code objects compile and which load from the
cache, how long compiling took, announced when it starts.

Brian2's runtime device turns every code object into a Cython extension module, compiled once
per machine and cached (:func:`ctmhsa.neurons.backend.cache_dir`); later runs only load it. The
first run of a circuit on a machine therefore spends minutes in the C compiler (the digits
circuit: several hundred modules) before its first simulated millisecond. :func:`watch` wraps
Brian2's extension manager for the duration of a build and its preparation, so that

* the user is told, when the first module misses the cache, that compiling starts, how many
  code objects are to come and about how long they take on this machine;
* a progress bar (``report="progress"``) counts them;
* the result states compile time apart from simulation time (:attr:`CompileLog.seconds`).

Per-module compile times measured here are kept in ``compile_times.json`` of the cache
directory (the median of the last :data:`KEEP`), so the next announcement's estimate is this
machine's, not a guess; before any measurement :data:`DEFAULT_SECONDS` is used.

The wrapper changes no generated code and no module: it only looks whether the module file
exists before Brian2 loads or builds it.

Brian2 compiles a network's modules one after another. :func:`precompile` first asks every
code-running object of the network for its code (nothing is run: the modules it is handed back
are placeholders, discarded), then compiles the modules missing from the cache in parallel, in
worker processes (one per core), each writing its module atomically into the cache; Brian2's
own preparation that follows finds them there and only loads them. It saves wall time in
proportion to the cores (the default circuit, 71 modules, on 2 cores: see docs/results.md), and
a failure there costs nothing but the time: Brian2 then compiles what is missing itself and
reports its own error.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
from dataclasses import dataclass, field

__all__ = ["CompileLog", "watch", "precompile", "lean_cython", "DIE_WITH_PARENT", "seconds_per_module", "DEFAULT_SECONDS", "KEEP"]

log = logging.getLogger(__name__)

DEFAULT_SECONDS = 4.0
"""Seconds of one core per Cython module assumed before this machine has compiled any (measured
on 2 shared cores at load 2: 3.5 s per module over the digits circuit's 192; the Cython step and
gcc about half each)."""

KEEP = 200
"""Per-module compile times kept in ``compile_times.json`` (the estimate is their median)."""

_TIMES = "compile_times.json"


@dataclass
class CompileLog:
    """What one build and its preparation compiled.

    Attributes
    ----------
    compiled : int
        Extension modules compiled (missed the cache).
    loaded : int
        Modules loaded from the cache without compiling.
    seconds : float
        Wall time (s) spent compiling the missed modules (loading excluded).
    expected : int or None
        Modules found missing before a parallel compile (:func:`precompile`).
    times : list of float
        Each compiled module's wall time (s).
    """

    compiled: int = 0
    loaded: int = 0
    seconds: float = 0.0
    expected: int | None = None
    times: list = field(default_factory=list)

    def to_dict(self) -> dict:
        """Plain data (JSON) for a result's timings."""
        return dict(compiled=self.compiled, loaded=self.loaded, seconds=round(self.seconds, 3))


def _times_path() -> str:
    from .backend import cache_dir

    return os.path.join(cache_dir(), _TIMES)


def seconds_per_module() -> float:
    """This machine's median compile time per Cython module (s), :data:`DEFAULT_SECONDS` before
    any was measured (or when the record is unreadable: it is only an estimate)."""
    try:
        with open(_times_path()) as fh:
            times = [float(t) for t in json.load(fh)["seconds"] if t > 0]
    except (OSError, ValueError, KeyError, TypeError):
        return DEFAULT_SECONDS
    return float(sorted(times)[len(times) // 2]) if times else DEFAULT_SECONDS


def _remember(times: list) -> None:
    """Append measured per-module times to the record (atomic; a failure costs only the estimate)."""
    if not times:
        return
    try:
        path = _times_path()
        try:
            with open(path) as fh:
                old = [float(t) for t in json.load(fh)["seconds"]]
        except (OSError, ValueError, KeyError, TypeError):
            old = []
        tmp = f"{path}.{os.getpid()}.tmp"       # a reader sees the old record or the new, never half
        with open(tmp, "w") as fh:
            json.dump({"seconds": [round(t, 3) for t in (old + list(times))[-KEEP:]]}, fh)
        os.replace(tmp, path)
    except (OSError, ValueError) as exc:
        log.debug("compile times not recorded: %s", exc)


def _announce(per: float) -> str:
    from .backend import cache_dir

    return (f"compiling code objects with Cython, one by one (first run of this circuit on this machine, "
            f"about {per:.0f} s each); cached in {cache_dir()} for later runs")


@contextlib.contextmanager
def watch(bar=None):
    """Watch Brian2's Cython extension manager: count, time and announce compilation.

    Parameters
    ----------
    bar : callable, optional
        ``bar(total, message)`` returning a tqdm-like bar (``update``, ``close``, ``n``,
        ``total``), called at the first cache miss: the API's ``report="progress"`` and the CLI
        draw one over the compiled modules with the announcement above it
        (:func:`ctmhsa.sims.progress.compile_bar`). Without it the announcement is logged (INFO).

    Yields
    ------
    CompileLog
        Filled while the block runs.
    """
    try:
        from brian2.codegen.runtime.cython_rt.extension_manager import cython_extension_manager as mgr
    except ImportError:      # no Cython: nothing compiles
        yield CompileLog()
        return
    rec = CompileLog()
    state = {"bar": None, "announced": False}
    original = mgr._load_module

    def load(module_path, *args, **kw):
        if os.path.isfile(module_path):
            rec.loaded += 1
            return original(module_path, *args, **kw)
        if not state["announced"]:      # the first miss: announced once
            state["announced"] = True
            msg = _announce(seconds_per_module())
            if bar is not None:
                state["bar"] = bar(None, msg)     # how many are left is not known here
            else:
                log.info(msg)
        t0 = time.perf_counter()
        out = original(module_path, *args, **kw)
        dt = time.perf_counter() - t0
        rec.compiled += 1
        rec.seconds += dt
        rec.times.append(dt)
        if state["bar"] is not None:
            state["bar"].update(1)
        return out

    mgr._load_module = load        # an instance attribute shadows the method for this block only
    try:
        yield rec
    finally:
        del mgr._load_module
        if state["bar"] is not None:
            state["bar"].close()
        _remember(rec.times)
        if rec.compiled:
            log.info("compiled %d Cython modules in %.1f s (%d loaded from the cache)", rec.compiled, rec.seconds,
                     rec.loaded)


class _Placeholder:
    """Stands for a module while :func:`precompile` only collects code; never run."""

    def __getattr__(self, name):
        raise RuntimeError("ctmhsa.neurons.compilation: a placeholder module was run (a bug: report it)")


def _missing_modules(network, namespace) -> list:
    """``_load_module`` arguments of every module ``network``'s code objects need that is not in the
    cache (each once), collected without compiling, loading or running anything."""
    from brian2.codegen.runtime.cython_rt.extension_manager import cython_extension_manager as mgr
    from brian2.groups.group import CodeRunner

    jobs = {}

    def record(module_path, **kw):
        if not os.path.isfile(module_path):
            # the key (code, versions) only names the module in the worker's own memory cache
            jobs.setdefault(module_path, dict(kw, module_path=module_path, key=str(kw.get("key"))))
        return _Placeholder()

    mgr._load_module = record
    try:
        for obj in network.sorted_objects:
            if isinstance(obj, CodeRunner) and obj.active:
                # every attribute back as it was after asking: an object may keep a code object
                # it made once (a pathway's spike pusher), and lists are filled in place
                saved = {k: (v, list(v) if isinstance(v, list) else None) for k, v in vars(obj).items()}
                try:
                    obj.create_code_objects(namespace)
                finally:
                    for k in [k for k in vars(obj) if k not in saved]:
                        delattr(obj, k)
                    for k, (v, items) in saved.items():
                        if items is not None:
                            v[:] = items
                        obj.__dict__[k] = v
    finally:
        del mgr._load_module
    return list(jobs.values())


DIE_WITH_PARENT = """
import ctypes, os, signal, sys
def stop(*_):
    os.killpg(0, signal.SIGKILL)
signal.signal(signal.SIGTERM, stop)
try:
    ctypes.CDLL(None).prctl(1, int(signal.SIGTERM))   # PR_SET_PDEATHSIG
except (AttributeError, OSError):                      # not Linux
    pass
if os.getppid() != int(sys.argv[1]):                   # the parent died before prctl
    stop()
"""
"""The start of a child script (``python -c``, started with ``start_new_session=True`` and the
parent's pid as its first argument) that kills its own process group — itself and every compiler
it started — when the Python process that started it dies (Linux parent-death signal) or sends it
SIGTERM; the parent kills the group itself on interrupt or timeout. Used by the Cython workers
here and by the standalone projects' ``make`` (:mod:`ctmhsa.devices.standalone`)."""

# A worker: compiles the modules of a job file into a private directory, then moves each into the
# cache at once (a module file is never seen half-written); dies with its parent.
_WORKER = DIE_WITH_PARENT + """
import pickle, traceback
from brian2.codegen.runtime.cython_rt.extension_manager import cython_extension_manager as mgr
with open(sys.argv[2], "rb") as fh:
    jobs = pickle.load(fh)
private = sys.argv[3]
mgr._simplify_paths()
for line in sys.stdin:                 # one job index per line, sent when the last one is done
    job = dict(jobs[int(line)])
    final = job.pop("module_path")
    name = os.path.basename(final)
    try:
        if not os.path.isfile(final):
            mgr._load_module(os.path.join(private, name), **dict(job, lib_dir=private))
            os.replace(os.path.join(private, name), final)
        print("ok", line.strip(), flush=True)
    except Exception:
        traceback.print_exc()
        print("failed", line.strip(), flush=True)
"""


def precompile(network, namespace=None, workers: int | None = None, bar=None) -> CompileLog:
    """Compile the Cython modules ``network`` needs and the cache lacks, in parallel.

    Parameters
    ----------
    network : brian2.Network
        Built on the runtime device with the Cython target, not yet prepared.
    namespace : dict, optional
        The run namespace the network will be prepared with (default ``{}``).
    workers : int, optional
        Worker processes (default: the cores this process may run on, at most one per module).
    bar : callable, optional
        ``bar(total, message)`` as in :func:`watch`; called once, if anything is missing.

    Returns
    -------
    CompileLog
        ``compiled``: modules compiled here; ``seconds``: wall time of the parallel compile
        (``times`` holds it spread over the modules, for the estimate of a later announcement).
    """
    import pickle
    import shutil
    import signal
    import subprocess
    import sys
    import tempfile

    rec = CompileLog()
    try:
        jobs = _missing_modules(network, {} if namespace is None else namespace)
    except Exception as exc:      # Brian2's own preparation will meet (and report) the problem
        log.debug("precompile: collecting the code failed (%s); Brian2 compiles sequentially", exc)
        return rec
    if not jobs:
        return rec
    rec.expected = len(jobs)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = max(1, min(len(jobs), workers or cores))
    per = seconds_per_module()
    from .backend import cache_dir

    msg = (f"compiling {len(jobs)} Cython modules for this circuit (first run on this machine), {workers} at a time: "
           f"about {max(1, round(len(jobs) * per / workers / 60))} min at {per:.0f} s each; cached in {cache_dir()} "
           "for later runs")
    shown = bar(len(jobs), msg) if bar is not None else None     # a bar, or None (a message only)
    if bar is None:
        log.info(msg)
    t0 = time.perf_counter()
    # the workers' private directories beside the cache: a module is moved into it by a rename,
    # which a system temporary directory on another file system (a tmpfs /tmp) would refuse
    jobs_dir = os.path.dirname(jobs[0]["module_path"])
    os.makedirs(jobs_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="ctmhsa-compile-", dir=jobs_dir)
    procs = []
    try:
        # longest code first, each worker handed the next module when it finishes one: no worker
        # idles at the end while another compiles a long tail
        jobs.sort(key=lambda j: -len(j["code"]))
        job_file = os.path.join(tmp, "jobs.pkl")
        with open(job_file, "wb") as fh:
            pickle.dump(jobs, fh)
        for w in range(workers):
            private = os.path.join(tmp, f"w{w}")
            os.makedirs(private)
            with open(os.path.join(tmp, f"err{w}"), "w") as err:    # the child holds its own copy
                procs.append(subprocess.Popen([sys.executable, "-c", _WORKER, str(os.getpid()), job_file, private],
                                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                              start_new_session=True, text=True))
        import selectors

        sel = selectors.DefaultSelector()
        following = iter(range(len(jobs)))

        def hand_next(p):
            k = next(following, None)
            if k is None:
                p.stdin.close()               # no more: the worker ends
            else:
                try:
                    p.stdin.write(f"{k}\n")
                    p.stdin.flush()
                except BrokenPipeError:      # the worker died: Brian2 compiles what it left
                    with contextlib.suppress(OSError):
                        p.stdin.close()

        for p in procs:
            sel.register(p.stdout, selectors.EVENT_READ, p)
            hand_next(p)
        done, failed, open_pipes = 0, 0, len(procs)
        while open_pipes:
            for key, _ in sel.select():
                line = key.fileobj.readline()
                if not line:
                    sel.unregister(key.fileobj)
                    open_pipes -= 1
                    continue
                if line.startswith("ok"):
                    done += 1
                    if shown is not None:
                        shown.update(1)
                else:
                    failed += 1
                if not key.data.stdin.closed:
                    hand_next(key.data)
        for w, p in enumerate(procs):
            if p.wait() != 0 or failed:
                with open(os.path.join(tmp, f"err{w}"), errors="replace") as fh:
                    log.debug("precompile: %d modules failed (%s); Brian2 compiles what is missing and reports "
                              "its error", failed, fh.read()[-2000:])
    except BaseException:       # interrupted: no compiler outlives the run
        for p in procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if hasattr(os, "killpg"):
                    os.killpg(p.pid, signal.SIGKILL)     # the worker and its compilers
                else:
                    p.kill()
        raise
    finally:
        for p in procs:
            p.wait()
            for f in (p.stdin, p.stdout):
                with contextlib.suppress(OSError):
                    f.close()
        if shown is not None:
            shown.close()
        shutil.rmtree(tmp, ignore_errors=True)
    rec.compiled = done
    rec.seconds = time.perf_counter() - t0
    if done:      # per module and core, what a later announcement estimates with
        rec.times = [rec.seconds * workers / done] * done
        _remember(rec.times)
    log.info("compiled %d Cython modules in %.1f s with %d workers", done, rec.seconds, workers)
    return rec


# The lines Brian2's Cython templates put before a block's statements: reading the namespace
# (constants, arrays and their pointers) and the owner. Nothing here computes anything.
_PREAMBLE = re.compile("|".join([
    r"cdef size_t _idx", r"cdef size_t _vectorisation_idx",
    r"_var_\w+ = _namespace\[\"_var_\w+\"\]",
    r"cdef [\w ]+ \w+ = _namespace\[\"\w+\"\]",
    r"cdef _numpy\.ndarray\[[^\]]*\] _buf_\w+ = _namespace\['\w+'\]",
    r"cdef [\w ]+ \* \w+ = <[\w ]+ \*> _buf_\w+\.data",
    r"cdef size_t _num_\w+ = len\(_namespace\['\w+'\]\)",
    r"cdef [\w ]+ \w+",
    r"if '_owner' in _namespace:", r"_owner = _namespace\['_owner'\]",
]))
_OWNER_CALL = re.compile(r"_owner\.(initialise_queue|push_spikes)\(\)")
_RESET_COUNT = re.compile(r"(_array_\w+)\[N\] = 0")


class _PythonBlock:
    """A code block of one statement that only calls Python or resets one entry, run as Python
    (see :class:`LeanCythonCodeObject`)."""

    def __init__(self, kind: str, name: str):
        self.kind, self.name = kind, name

    def main(self, namespace):
        if self.kind == "call":
            getattr(namespace["_owner"], self.name)()
        else:
            namespace[self.name][namespace["N"]] = 0


def _python_block(code: str):
    """The :class:`_PythonBlock` of a Cython block whose only statement, after reading its
    namespace, is a method call on the owner (a pathway's ``initialise_queue()`` or
    ``push_spikes()``) or ``array[N] = 0`` (a threshold's event count cleared after a run);
    ``None`` for every other block (compiled as Brian2 does)."""
    lines = code.splitlines()
    try:
        start = next(k for k, l in enumerate(lines) if l.strip() == "def main(_namespace):")
    except StopIteration:
        return None
    body = [l.split("#")[0].strip() for l in lines[start + 1:]]
    body = [l for l in body if l and not _PREAMBLE.fullmatch(l)]
    if len(body) != 1:
        return None
    m = _OWNER_CALL.fullmatch(body[0])
    if m:
        return _PythonBlock("call", m.group(1))
    m = _RESET_COUNT.fullmatch(body[0])
    return _PythonBlock("reset", m.group(1)) if m else None


def _lean_class():
    from brian2.codegen.runtime.cython_rt.cython_rt import CythonCodeObject

    class LeanCythonCodeObject(CythonCodeObject):
        """Brian2's Cython code object, except that a block whose one statement calls Python or
        clears one entry (:func:`_python_block`) runs as Python instead of as a module compiled
        for it: a pathway's spike pusher (both blocks only call the pathway, whose queue is
        Brian2's compiled ``SpikeQueue``) and a threshold's after-run block. The digits circuit
        needs 114 modules instead of 192; the same code runs at every step."""

        def compile_block(self, block):
            code = getattr(self.code, block, "").strip()
            if code and "EMPTY_CODE_BLOCK" not in code:
                py = _python_block(code)
                if py is not None:
                    return py
            return super().compile_block(block)

    return LeanCythonCodeObject


_LEAN = []


def lean_cython(network) -> int:
    """Make every code-running object of ``network`` that follows the Cython target use
    :class:`LeanCythonCodeObject` (before the network is prepared); return how many."""
    from brian2.groups.group import CodeRunner

    if not _LEAN:
        _LEAN.append(_lean_class())
    n = 0
    for obj in network.sorted_objects:
        if isinstance(obj, CodeRunner) and obj.codeobj_class is None:
            obj.codeobj_class = _LEAN[0]
            n += 1
    return n
