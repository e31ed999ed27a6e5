"""The circuit's spike thresholder: per-step code in the thresholder's loop, and on
cpp_standalone that loop in blocks over the OpenMP threads, giving the spikes of one serial loop."""

import numpy as np
import pytest
import brian2 as b2

from ctmhsa.devices.standalone import standalone_device
from ctmhsa.neurons.threshold import BlockThresholdCodeObject, CellThresholder

# every cell climbs at its own speed and spikes above 1; the pre-code integrates what the
# condition reads (as the escape cells' survival does), and a refractory period holds some
# cells after a spike: all deterministic, so every device and thread count must agree
N = 1001   # odd: the blocks split unevenly


def _cells():
    g = b2.NeuronGroup(N, "speed : 1\nx : 1\nacc : 1", threshold="x > 1", reset="x = 0",
                       refractory="2*dt*int(i % 3 == 0)", name="cells")
    g.speed = np.linspace(0.01, 0.9, N)[np.random.default_rng(1).permutation(N)]
    thr = CellThresholder.install(g, "x += speed\nacc += x")
    mon = b2.SpikeMonitor(g, name="spikes")
    return g, thr, mon


def _runtime():
    target = b2.prefs.codegen.target
    b2.prefs.codegen.target = "numpy"
    try:
        g, _, mon = _cells()
        b2.Network(g, mon).run(60 * b2.defaultclock.dt)
    finally:
        b2.prefs.codegen.target = target
    return np.asarray(mon.i[:]), np.asarray(mon.t_[:]), np.asarray(g.acc[:])


@pytest.mark.brian2
def test_the_code_runs_in_the_thresholders_loop_before_the_condition():
    g, thr, mon = _cells()
    assert g.thresholder["spike"] is thr and thr in g.contained_objects
    assert sum(isinstance(o, b2.groups.neurongroup.Thresholder) for o in g.contained_objects) == 1
    i, t, acc = _runtime()
    dt = float(b2.defaultclock.dt)
    # cell k climbs by speed_k per step from the step after its spike (or after its refractory
    # steps) and spikes in the step where x first exceeds 1
    k = int(np.flatnonzero(np.asarray(g.speed[:]) == np.asarray(g.speed[:]).max())[0])
    first = t[i == k].min()
    assert first == pytest.approx(np.ceil(1.0 / g.speed[k]) * dt - dt)
    assert acc.min() > 0 and i.size > N


@pytest.mark.standalone
@pytest.mark.parametrize("threads", [pytest.param(0, marks=pytest.mark.long), 2])   # [0]: 8 s, a second compile
def test_blocks_over_threads_give_the_serial_loops_spikes(tmp_path, threads, monkeypatch):
    """Against numpy (one serial loop): the same spikes, in the same steps, and the same
    integrated pre-code state, with OpenMP blocks (2 threads) and without (one block); with
    two blocks on a team of one thread (OMP_THREAD_LIMIT=1) as well."""
    i0, t0, acc0 = _runtime()
    with standalone_device(str(tmp_path), threads):
        g, thr, mon = _cells()
        net = b2.Network(g, mon)
        net.run(60 * b2.defaultclock.dt)
        dev = b2.get_device()
        dev.build(directory=str(tmp_path), compile=True, run=True, with_output=False)
        assert isinstance(thr.codeobj, BlockThresholdCodeObject)
        code = open(tmp_path / "code_objects" / f"{thr.codeobj.name}.cpp").read()
        assert ("#pragma omp parallel" in code) == (threads > 1)
        runs = [(np.asarray(mon.i[:]), np.asarray(mon.t_[:]), np.asarray(g.acc[:]))]
        if threads > 1:
            monkeypatch.setenv("OMP_THREAD_LIMIT", "1")   # the binary inherits it; undone after the test
            dev.run(directory=str(tmp_path), results_directory="results_team1", with_output=False)
            runs.append((np.asarray(mon.i[:]), np.asarray(mon.t_[:]), np.asarray(g.acc[:])))
    for i, t, acc in runs:
        np.testing.assert_array_equal(i, i0)
        np.testing.assert_allclose(t, t0, rtol=0, atol=1e-12)
        np.testing.assert_allclose(acc, acc0, rtol=1e-12)


@pytest.mark.standalone
def test_a_condition_drawing_random_numbers_keeps_brians_serial_loop(tmp_path):
    """In blocks, random numbers would come from each thread's generator: such a thresholder
    keeps Brian2's template (one loop, one generator), the others use the blocks."""
    with standalone_device(str(tmp_path), 2):
        g = b2.NeuronGroup(10, "p : 1", threshold="rand() < p", reset="", name="drawing")
        h = b2.NeuronGroup(10, "x : 1", threshold="x > 1", reset="x = 0", name="climbing")
        drawing, climbing = CellThresholder.install(g), CellThresholder.install(h, "x += 0.3")
        b2.Network(g, h).run(b2.defaultclock.dt)   # generates the code objects, compiles nothing
        assert not isinstance(drawing.codeobj, BlockThresholdCodeObject)
        assert isinstance(climbing.codeobj, BlockThresholdCodeObject)
