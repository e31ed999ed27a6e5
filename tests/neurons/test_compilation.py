"""Compilation announced, counted apart and cut (issue 47): synapses created without a compiler,
spike pushers without Cython modules, the missing modules compiled in parallel before Brian2
would compile them one by one, and a later run that compiles nothing."""

import contextlib
import os
import signal
import subprocess
import sys
import time

import brian2 as b2
import numpy as np
import pytest
from conftest import processes_in

from ctmhsa.neurons import compilation as C
from ctmhsa.neurons.backend import building, configure_brian2


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty cache: every Cython module is missing (a first run on a new machine)."""
    monkeypatch.setenv("CTMHSA_CACHE", str(tmp_path / "cache"))
    yield tmp_path / "cache"
    configure_brian2("numpy")


def _network(n_syn: int = 2):
    """A small network of the kinds of object a circuit has: cells with a threshold and a reset,
    synapses with their pathways, a spike monitor."""
    G = b2.NeuronGroup(20, "dv/dt = (1.2 - v) / (10*ms) : 1", threshold="v > 1", reset="v = 0",
                       method="exact", name="cells")
    G.v = np.linspace(0, 1, 20)
    syn = []
    for k in range(n_syn):
        S = b2.Synapses(G, G, "w : 1", on_pre="v_post += w", name=f"syn{k}")
        S.connect(i=np.arange(19, dtype=np.int32), j=np.arange(1, 20, dtype=np.int32))
        S.w = 0.1 * (k + 1)
        syn.append(S)
    M = b2.SpikeMonitor(G, name="spikes")
    return b2.Network(G, *syn, M), M


@pytest.mark.brian2
def test_building_creates_synapses_without_compiling(fresh_cache):
    """Creating synapses and writing values under the Cython target compile nothing (numpy code),
    and leave the run's target Cython."""
    with C.watch() as log, building("cython"):
        _network()
    assert log.compiled == 0
    assert b2.prefs.codegen.target == "cython"


@pytest.mark.brian2
def test_blocks_that_only_call_python_need_no_module_and_collecting_changes_nothing(fresh_cache):
    """With the lean Cython class, a pathway's spike pusher (both blocks call the pathway) and a
    threshold's after-run block (one entry cleared) are not modules; asking for the code
    (nothing compiled, nothing run) leaves every object as it was."""
    with building("cython"):
        net, _ = _network(n_syn=2)
    before = C._missing_modules(net, {})
    pathways = [o for o in net.sorted_objects if isinstance(o, b2.synapses.synapses.SynapticPathway)]
    assert all(p._pushspikes_codeobj is None for p in pathways)     # restored after collecting
    assert not any((fresh_cache / "cython").glob("*.so"))           # nothing compiled
    assert C.lean_cython(net) > 0
    after = C._missing_modules(net, {})
    # the two pathways share one source, so one pusher's two blocks; and one threshold's after-run
    assert len(before) - len(after) == 3, (len(before), len(after))
    assert not any("push_spikes()" in j["code"] or "[N] = 0" in j["code"] for j in after)


@pytest.mark.codegen_independent
@pytest.mark.parametrize("statement, kind", [("_owner.push_spikes()", "call"), ("_owner.initialise_queue()", "call"),
                                             ("_array_g__spikespace[N] = 0  # a note", "reset"),
                                             ("_owner.other()", None), ("_array_g_v[N] = 1", None),
                                             ("_array_g_v[_idx] = 0", None)])
def test_only_a_call_of_the_owner_or_a_cleared_count_runs_as_python(statement, kind):
    code = ("def main(_namespace):\n    _var_N = _namespace[\"_var_N\"]\n    cdef int64_t N = _namespace[\"N\"]\n"
            "    if '_owner' in _namespace:\n        _owner = _namespace['_owner']\n    " + statement + "\n")
    block = C._python_block(code)
    assert (block and block.kind) == kind
    assert C._python_block(code + "    x = 1\n") is None                 # a second statement: compiled


@pytest.mark.brian2
@pytest.mark.long   # 20 s of Cython compiles; building without compiling is checked above
def test_missing_modules_compile_in_parallel_and_a_later_run_compiles_none(fresh_cache, tmp_path):
    """A first run: the announcement names the count, a bar counts every module, the network's
    own preparation then compiles none; the spikes are those of numpy code."""
    shown = []

    class Bar:
        def __init__(self, total):
            self.total, self.n = total, 0

        def update(self, k):
            self.n += k

        def close(self):
            pass

    def bar(total, message):
        shown.append((total, message, Bar(total)))
        return shown[-1][2]

    with building("cython"):
        net, mon = _network(n_syn=0)      # cells and a monitor: 4 modules (synapses: the test above)
    C.lean_cython(net)
    first = C.precompile(net, {}, workers=2, bar=bar)
    [(total, message, b)] = shown
    assert first.compiled == total == b.n > 0
    assert not list((fresh_cache / "cython").glob("ctmhsa-compile-*"))   # the workers' directories removed
    assert f"compiling {total} Cython modules" in message and "first run" in message
    with C.watch() as rest:
        net.run(20 * b2.ms, namespace={})
    assert rest.compiled == 0 and rest.loaded >= total
    spikes_cython = np.array(mon.i[:]), np.array(mon.t_[:])
    # the same network with numpy code: the same spikes
    with building("numpy"):
        net2, mon2 = _network(n_syn=0)
    net2.run(20 * b2.ms, namespace={})
    np.testing.assert_array_equal(spikes_cython[0], mon2.i[:])
    np.testing.assert_allclose(spikes_cython[1], mon2.t_[:])
    # a second first-run check of the same code: all cached, nothing announced
    with building("cython"):
        net3, _ = _network(n_syn=0)
    C.lean_cython(net3)
    assert C.precompile(net3, {}, bar=bar).compiled == 0 and len(shown) == 1


@pytest.mark.codegen_independent
def test_estimate_reads_this_machines_record(fresh_cache):
    assert C.seconds_per_module() == C.DEFAULT_SECONDS
    C._remember([2.0, 3.0, 9.0])
    assert C.seconds_per_module() == 3.0
    (fresh_cache / C._TIMES).write_text("[]")                          # damaged: only an estimate
    assert C.seconds_per_module() == C.DEFAULT_SECONDS


@pytest.mark.codegen_independent
def test_cli_states_a_first_runs_compilation_apart():
    from ctmhsa.sims.cli import _compile_text

    assert _compile_text(dict(compile=0.8, compiled=0)) == "compile 0.8 s"
    assert "71 Cython modules compiled: a first run's cost" in _compile_text(dict(compile=150.0, compiled=71))


@pytest.mark.brian2
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_a_killed_run_leaves_no_compile_worker_running(tmp_path):
    """A run killed (SIGKILL) while its workers compile: the workers and their compilers die
    with it (parent-death signal, own process group)."""
    code = ("import brian2 as b2\n"
            "from ctmhsa.neurons.backend import building\n"
            "from ctmhsa.neurons import compilation as C\n"
            "with building('cython'):\n"
            "    G = b2.NeuronGroup(5, 'dv/dt = -v / (10*ms) : 1', threshold='v > 1', reset='v = 0', name='g')\n"
            "    net = b2.Network(G, b2.SpikeMonitor(G))\n"
            "C.precompile(net, {}, workers=2)\n")
    env = dict(os.environ, CTMHSA_CACHE=str(tmp_path / "cache"))
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    root = str(tmp_path)
    try:
        workers, deadline = [], time.monotonic() + 120
        while not workers and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
            workers = [c for _, c in processes_in(root) if "ctmhsa-compile-" in c]
        assert workers, "no compile worker seen"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        left, deadline = processes_in(root), time.monotonic() + 10
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = processes_in(root)
        assert left == [], left[:3]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid, _ in processes_in(root):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.brian2
@pytest.mark.parametrize("neuron", ["rate", "escape"])
def test_a_run_prepares_its_code_once(neuron, monkeypatch):
    """Brian2 re-creates every code object at each ``Network.run``: warm-up, window (and the
    rate level's early read) are one run, and numpy code is not prepared ahead; the preparation
    is still timed apart (``compile``), outside ``run``."""
    from conftest import random_problem
    from ctmhsa.sims import simulate_mhsa

    calls = []
    before_run = b2.Network.before_run
    monkeypatch.setattr(b2.Network, "before_run", lambda self, ns: calls.append(1) or before_run(self, ns))
    X, _, WQ, WK, WV, WO = random_problem(seed=1, n=2, H=1, dk=2, dv=2, de=2)
    timing = dict(duration=0.6) if neuron == "rate" else dict(duration=0.1, warmup=0.02)
    res = simulate_mhsa(X, WQ, WK, WV, WO, neuron=neuron, **timing, seed=0, codegen="numpy")
    assert len(calls) == 1
    assert res.timings["compile"] > 0 and res.timings["run"] > 0


@pytest.mark.codegen_independent
def test_a_run_leaves_the_garbage_collector_as_it_found_it():
    """``run_network`` freezes the heap for one run only, also when the run fails."""
    import gc

    from ctmhsa.neurons.backend import run_network

    class Failing:
        def run(self, duration, **kw):
            assert gc.get_freeze_count() > 0        # the heap is frozen during the run
            raise RuntimeError("stop")

    before = gc.get_freeze_count()
    with pytest.raises(RuntimeError, match="stop"):
        run_network(Failing(), 1.0)
    assert gc.get_freeze_count() == before


@pytest.mark.codegen_independent
def test_a_heap_frozen_by_the_caller_stays_frozen():
    import gc

    from ctmhsa.neurons.backend import run_network

    class Quiet:
        def run(self, duration, **kw):
            pass

    gc.freeze()
    try:
        assert gc.get_freeze_count() > 0
        run_network(Quiet(), 1.0)
        # still frozen (an unfreeze would empty the permanent generation); not the same count,
        # since frozen objects that die meanwhile (another thread's) leave it
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


@pytest.mark.brian2
def test_a_large_dead_network_is_freed_before_the_next_is_built(monkeypatch):
    """Runs skip Brian2's full collection; a large network's garbage is collected once, before
    the next network is built (a small one's is left to Python's own collections)."""
    import gc

    from ctmhsa.circuits import instantiate as inst
    from ctmhsa.circuits.builders import build

    calls = []
    monkeypatch.setattr(gc, "collect", lambda *a: calls.append(a) or 0)
    monkeypatch.setattr(inst, "COLLECT_OBJECTS", 10 ** 9)    # the object count is the next test's
    small = build(2, 1, 1, 2, H=1)
    monkeypatch.setattr(inst, "_last_size", [0])
    inst._collect_dead_networks(small)
    inst._collect_dead_networks(small)
    assert calls == [] and 0 < inst._last_size[0] < inst.COLLECT_BYTES
    inst._last_size[0] = inst.COLLECT_BYTES                 # the previous one was large
    inst._collect_dead_networks(small)
    assert calls == [()]


@pytest.mark.brian2
def test_dead_small_networks_are_collected_once_brian2_tracks_many_objects(monkeypatch):
    """Brian2 names each new object against every object it tracks, dead ones included: small
    dead networks are collected once their objects pass ``COLLECT_OBJECTS``, so that a loop of
    small runs (one network per recall question) does not slow down as it goes."""
    import numpy as np
    from brian2.core.names import Nameable

    from ctmhsa import simulate_mhsa
    from ctmhsa.circuits import instantiate as inst

    rng = np.random.default_rng(0)
    X, W = rng.normal(size=(2, 2)), [rng.normal(size=(1, 2, 2)) for _ in range(4)]
    monkeypatch.setattr(inst, "COLLECT_OBJECTS", 40)
    monkeypatch.setattr(inst, "_objects_kept", [len(Nameable.__instances__())])
    start, counts = len(Nameable.__instances__()), []
    for _ in range(12):      # each run leaves ~10-50 dead objects: 120 or more uncollected
        simulate_mhsa(X, *W, neuron="rate", duration=0.3)
        counts.append(len(Nameable.__instances__()))
    assert max(counts) < start + 2 * 40 + 60, counts      # collected, not growing by a network each run
    # the objects a collection leaves are live (it cannot free them): they never trigger the next one
    import gc

    from ctmhsa.circuits.builders import build

    calls, small = [], build(2, 1, 1, 2, H=1)
    monkeypatch.setattr(gc, "collect", lambda *a: calls.append(a) or 0)
    monkeypatch.setattr(inst, "_last_size", [0])
    monkeypatch.setattr(inst, "COLLECT_OBJECTS", 10)
    tracked = len(Nameable.__instances__())
    monkeypatch.setattr(inst, "_objects_kept", [tracked])
    inst._collect_dead_networks(small)
    assert calls == []
    monkeypatch.setattr(inst, "_objects_kept", [tracked - 10])
    inst._collect_dead_networks(small)
    assert calls == [()]
