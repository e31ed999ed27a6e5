"""The standalone cache (``ctmhsa.devices.standalone``): a damaged project repairs itself, a killed
build or split run leaves nothing behind, and a new duration compiles nothing.

The project is the one tests/sims/test_devices.py runs (same shape and options; compiled once, in
the shared cache, for both modules), copied into a cache of this module's own so that damaging it
cannot disturb other tests; the tests then damage it in turn and run it again. Runs record no
spike trains (as there), so "the same spikes" is the same spike counts: every decoded stage equal.
"""

import os
import signal
import socket
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

from conftest import processes_in as _processes_in, random_problem
from ctmhsa.sims import simulate_mhsa

pytestmark = pytest.mark.standalone

PROBLEM = random_problem(seed=3, n=3, H=2, dk=3, dv=3, de=4)     # conftest's problem2
KW = dict(neuron="escape", duration=0.5, warmup=0.2, seed=1, device="cpp_standalone", threads=0)
# a tiny project for the compile that is killed (it must be a fresh one)
TINY = dict(seed=3, n=1, H=1, dk=1, dv=1, de=1)
TINY_KW = dict(KW, duration=0.2, warmup=0.1)
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(**kw):
    X, _, WQ, WK, WV, WO = PROBLEM
    return simulate_mhsa(X, WQ, WK, WV, WO, **dict(KW, **kw))


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """The compiled project's directory in this module's cache, and its first run's result."""
    import shutil

    from ctmhsa.devices import standalone
    from ctmhsa.sims import runners

    keys = []
    real = runners.run_project
    with pytest.MonkeyPatch.context() as mp:     # compiled (or reused) in the shared cache
        mp.setattr(runners, "run_project", lambda key, *a, **k: keys.append(key) or real(key, *a, **k))
        _run()
    shared = standalone.project_dir(keys[0])
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CTMHSA_CACHE", str(cache))
        own = standalone.project_dir(keys[0])
        shutil.copytree(shared, own, symlinks=True, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("results", "*.lock"))
        yield dict(dir=own, result=_quiet_run())   # the copy is intact: nothing is rebuilt


def _same_spikes(res, first):
    """The same spike counts: every stage decoded from them, and the Fano factors, equal."""
    assert set(res.stages) == set(first.stages)
    for st in first.stages:
        np.testing.assert_array_equal(res.stages[st], first.stages[st], err_msg=st)
    assert res.diagnostics["fano"] == first.diagnostics["fano"]


def _truncate(path):
    size = os.path.getsize(path)
    with open(path, "r+b") as fh:
        fh.truncate(size // 2)


def _quiet_run():
    """A run that must not warn about the cache (it is intact)."""
    from ctmhsa.devices.standalone import StandaloneCacheWarning

    with warnings.catch_warnings():
        warnings.simplefilter("error", StandaloneCacheWarning)
        return _run()


@pytest.mark.long   # compiles a standalone project (65-70 s cold on 2 cores)
def test_a_truncated_binary_is_rebuilt_with_a_warning(project):
    from ctmhsa.devices.standalone import StandaloneCacheWarning

    _truncate(os.path.join(project["dir"], "main"))
    with pytest.warns(StandaloneCacheWarning, match=r"changed since the project was built \(main\)"):
        res = _run()
    _same_spikes(res, project["result"])
    _same_spikes(_quiet_run(), project["result"])   # repaired once, for good


@pytest.mark.long   # compiles a standalone project (65-70 s cold on 2 cores)
def test_a_truncated_object_file_is_rebuilt_with_a_warning(project):
    from ctmhsa.devices.standalone import StandaloneCacheWarning

    objects = os.path.join(project["dir"], "code_objects")
    smallest = min((f for f in os.listdir(objects) if f.endswith(".o")),
                   key=lambda f: os.path.getsize(os.path.join(objects, f)))   # the quickest to compile again
    _truncate(os.path.join(objects, smallest))
    with pytest.warns(StandaloneCacheWarning, match=smallest):
        res = _run()
    _same_spikes(res, project["result"])
    _same_spikes(_quiet_run(), project["result"])


@pytest.mark.long   # compiles a standalone project (65-70 s cold on 2 cores)
def test_a_new_duration_on_a_cached_shape_compiles_nothing(project, tmp_path, monkeypatch):
    """The run's length is a run argument: the same project, the new duration simulated (the
    relays' window rates stay those of the compiled length: a binary that stopped at its old end
    would halve them), also a shorter one and another warm-up."""
    log = tmp_path / "calls.log"
    for name in ("g++", "gcc", "cc", "c++"):   # every compiler call is logged
        real = next((os.path.join(d, name) for d in os.environ["PATH"].split(os.pathsep)
                     if os.path.isfile(os.path.join(d, name))), None)
        if real is not None:
            (tmp_path / name).write_text(f'#!/bin/sh\necho "$@" >> "{log}"\nexec "{real}" "$@"\n')
            os.chmod(tmp_path / name, 0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    binary = os.path.join(project["dir"], "main")
    built = os.stat(binary).st_mtime_ns
    longer, shorter = _run(duration=1.0), _run(duration=0.25, warmup=0.1)
    calls = [c for c in (log.read_text().splitlines() if log.exists() else []) if "brian_flag_test" not in c]
    assert calls == [], calls[:3]
    assert os.stat(binary).st_mtime_ns == built
    first = project["result"].rates["nucleus1"]
    assert (longer.duration, shorter.duration, shorter.warmup) == (1.0, 0.25, 0.1)
    for res in (longer, shorter):       # the whole window simulated: the same relay rates
        assert np.nanmean(res.rates["nucleus1"]) == pytest.approx(np.nanmean(first), rel=0.15)


@pytest.mark.long   # compiles a standalone project (65-70 s cold on 2 cores)
def test_copies_of_dead_processes_are_removed_at_the_next_start(project, tmp_path):
    from ctmhsa.devices.standalone import _process_identity

    host = socket.gethostname()
    dead = subprocess.Popen(["true"])
    dead.wait()
    live = subprocess.Popen(["sleep", "60"])
    try:
        copies = project["dir"] + ".copies"
        made = {}
        for name, owner in [(f"{host}-{dead.pid}", ""),                        # killed
                            (f"{host}-{dead.pid}.tmp0123abcd", None),            # killed while copying
                            (f"{host}-{live.pid}", "0:0"),                       # its pid since reused
                            (f"{host}-{live.pid}.tmp4567ef01", _process_identity(live.pid)),   # alive
                            (f"elsewhere-{dead.pid}", "")]:                      # another host's
            made[name] = os.path.join(copies, name)
            os.makedirs(made[name])
            open(os.path.join(made[name], ".complete"), "w").close()
            if owner is not None:
                with open(os.path.join(made[name], ".owner"), "w") as fh:
                    fh.write(owner)
        _run()
        left = sorted(os.listdir(copies))
    finally:
        live.kill()
        live.wait()
    assert left == sorted([f"{host}-{live.pid}.tmp4567ef01", f"elsewhere-{dead.pid}"])


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_a_killed_compile_leaves_no_compiler_running(tmp_path):
    """A process killed (SIGKILL: nothing of it runs after) while it compiles: make and its
    compilers die with it, and the project keeps no record of a finished build."""
    cache = str(tmp_path / "cache")
    code = (f"import sys; sys.path.insert(0, {TESTS!r})\n"
            "from conftest import processes_in as _processes_in, random_problem\n"
            "from ctmhsa.sims import simulate_mhsa\n"
            f"X, _, WQ, WK, WV, WO = random_problem(**{TINY!r})\n"
            f"simulate_mhsa(X, WQ, WK, WV, WO, **{TINY_KW!r})\n")
    proc = subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ, CTMHSA_CACHE=cache),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    compiling = []
    try:
        deadline = time.monotonic() + 240
        while not compiling and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
            compiling = [c for _, c in _processes_in(cache) if "make" in c or "++" in c or "cc1" in c]
        assert compiling, "no compiler seen"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        left = _processes_in(cache)
        deadline = time.monotonic() + 10
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = _processes_in(cache)
        assert left == [], left[:3]
        [project] = [os.path.join(cache, "standalone", d) for d in os.listdir(os.path.join(cache, "standalone"))
                     if "." not in d]
        assert not os.path.exists(os.path.join(project, ".build.json"))   # not trusted next time
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid, _ in _processes_in(cache):   # what the killed process started (before the fix)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


@pytest.mark.long   # compiles a standalone project (65-70 s cold on 2 cores)
def test_a_second_failure_of_make_names_the_project(project, tmp_path, monkeypatch):
    """A cached project whose ``make`` fails is built from scratch once (with a warning); if that
    fails too, the error names the project. (On a copy of the project, with a failing compiler.)"""
    import shutil

    from ctmhsa.devices import standalone

    where = str(tmp_path / "project")
    shutil.copytree(project["dir"], where, symlinks=True, ignore=shutil.ignore_patterns("results"))
    for name in ("g++", "c++"):
        (tmp_path / name).write_text("#!/bin/sh\nexit 1\n")
        os.chmod(tmp_path / name, 0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    _truncate(os.path.join(where, "main.o"))
    with pytest.warns(standalone.StandaloneCacheWarning) as caught, \
            pytest.raises(RuntimeError, match=f"standalone project {where}: compilation failed again"):
        standalone._compile(where)
    messages = [str(w.message) for w in caught]
    assert any("main.o" in m for m in messages) and any("from scratch" in m for m in messages)
