"""The same circuit on Brian2's runtime and cpp_standalone devices; compile once per shape."""

import os
import stat

import numpy as np
import pytest

from ctmhsa.sims import simulate_mhsa
from conftest import random_problem

pytestmark = pytest.mark.standalone

STAGES = ("q", "k", "v", "s", "kappa", "Z", "y", "v_tilde", "x_tilde")


@pytest.mark.long   # a C++ project compiled cold: 19-31 s on 2 cores (ctmhsa bench speed runs the standalone device)
def test_rate_level_agrees_across_devices(problem2):
    a = simulate_mhsa(*problem2, neuron="rate", duration=0.5)
    b = simulate_mhsa(*problem2, neuron="rate", duration=0.5, device="cpp_standalone", threads=0)
    assert b.config["device"] == "cpp_standalone"
    for st in STAGES:
        np.testing.assert_allclose(b.stages[st], a.stages[st], rtol=0, atol=1e-9, err_msg=st)


@pytest.mark.long   # 59 s with a cold cache: a C++ project compiled (the rate-level case stays default)
def test_escape_same_seed_same_spikes_on_either_device(problem2):
    # escape cells draw one random number per spike, in the same order on every target
    # (ctmhsa.neurons.models.ESCAPE): numpy, which compiles nothing, stands for the runtime device
    kw = dict(neuron="escape", duration=0.5, warmup=0.2, seed=4, record_spikes=True, codegen="numpy")
    rt = simulate_mhsa(*problem2, **kw)
    sa = simulate_mhsa(*problem2, device="cpp_standalone", threads=0, **kw)
    again = simulate_mhsa(*problem2, device="cpp_standalone", threads=0, **kw)
    other = simulate_mhsa(*problem2, device="cpp_standalone", threads=0, **dict(kw, seed=5))
    assert set(sa.spikes) == set(rt.spikes)
    for pop in rt.spikes:
        for k in (0, 1):   # cell indices and times
            np.testing.assert_array_equal(sa.spikes[pop][k], rt.spikes[pop][k])
            np.testing.assert_array_equal(again.spikes[pop][k], sa.spikes[pop][k])
    assert any(other.spikes[p][1].size != sa.spikes[p][1].size or np.any(other.spikes[p][1] != sa.spikes[p][1])
               for p in sa.spikes)
    for st in STAGES:   # decoded from the same spikes and window integrals
        np.testing.assert_allclose(sa.stages[st], rt.stages[st], rtol=1e-9, atol=1e-12, err_msg=st)


def _compiler_spy(directory):
    """g++/gcc/cc wrappers that log every call and then run the real compiler."""
    log = os.path.join(directory, "calls.log")
    for name in ("g++", "gcc", "cc", "c++"):
        real = next((os.path.join(d, name) for d in os.environ["PATH"].split(os.pathsep)
                     if os.path.isfile(os.path.join(d, name))), None)
        if real is None:
            continue
        path = os.path.join(directory, name)
        with open(path, "w") as f:
            f.write(f'#!/bin/sh\necho "$@" >> "{log}"\nexec "{real}" "$@"\n')
        os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
    return log


@pytest.mark.long   # compiles a standalone project (26-36 s)
def test_new_inputs_on_a_cached_shape_do_not_compile(problem2, tmp_path, monkeypatch):
    kw = dict(neuron="escape", duration=0.5, warmup=0.2, device="cpp_standalone", threads=0)
    first = simulate_mhsa(*problem2, seed=1, **kw)            # compiles unless cached
    X, _, WQ, WK, WV, WO = random_problem(seed=99, n=3, H=2, dk=3, dv=3, de=4)   # same shape
    log = _compiler_spy(str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + os.environ["PATH"])
    second = simulate_mhsa(X, WQ, WK, WV, WO, seed=2, **kw)
    calls = open(log).read().splitlines() if os.path.exists(log) else []
    project = [c for c in calls if "brian_flag_test" not in c]   # Brian2 probes flags per process
    assert project == [], project[:3]
    # the new inputs did reach the binary: a different reference and a decoded answer near it
    assert not np.allclose(second.reference, first.reference)
    assert second.metrics()["q"]["nrmse"] < 3 * second.metrics()["q"]["noise_floor"] + 0.05


@pytest.mark.long   # compiles the escape-level project (59 s with a cold cache on 2 cores; the rate-level one stays)
def test_cells_count_their_spikes_like_the_runtime_monitors(problem2):
    """Without recorded spike trains a compiled run has no monitor: its cells count their spikes
    (window and chunks). The counts decode to the runtime run's stages and give its Fano factors."""
    kw = dict(neuron="escape", duration=0.5, warmup=0.2, seed=1)
    sa = simulate_mhsa(*problem2, device="cpp_standalone", threads=0, **kw)   # the project of the test above
    rt = simulate_mhsa(*problem2, codegen="numpy", **kw)
    assert sa.spikes == {}
    for st in STAGES:
        np.testing.assert_allclose(sa.stages[st], rt.stages[st], rtol=1e-9, atol=1e-12, err_msg=st)
    assert sa.diagnostics["fano"] == pytest.approx(rt.diagnostics["fano"], rel=1e-12)
    assert set(sa.diagnostics["fano"]) == {"nucleus1", "nucleus1_kv", "nucleus1_v", "l23", "interneuron", "l5it", "l5pt", "nucleus2"}


@pytest.mark.long   # the escape-level project of the test above
def test_a_compiled_run_writes_back_only_what_it_reads(problem2, monkeypatch):
    """Brian2 ends a standalone run by writing every array; the binary writes the counters,
    window integrals and the NaN-checked state instead (ctmhsa.devices.standalone._write_back_code)."""
    import shutil

    listed, rmtree = [], shutil.rmtree

    def spy(path, *a, **k):   # the run's results directory, listed before it is removed
        if os.sep + "results" + os.sep in str(path) and os.path.isdir(path):
            listed.append(sorted(os.listdir(path)))
        return rmtree(path, *a, **k)

    monkeypatch.setattr(shutil, "rmtree", spy)
    res = simulate_mhsa(*problem2, neuron="escape", duration=0.5, warmup=0.2, seed=1, device="cpp_standalone",
                        threads=0)   # the project of the tests above
    [files] = listed
    assert "last_run_info.txt" in files
    for pop in ("l23", "l5it", "l5pt", "nucleus2"):
        for var in ("n_win", "n_chunk", "s2_chunk", "acc_r"):
            assert any(f.startswith(f"_array_{pop}_{var}_") for f in files), (pop, var)
    assert not [f for f in files if "_synaptic_" in f or "_delay" in f or "_u_next_" in f]
    assert res.metrics()["x_tilde"]["nrmse"] < 3 * res.metrics()["x_tilde"]["noise_floor"] + 0.05


def test_standalone_argument_errors(problem2):
    with pytest.raises(ValueError, match="device: expected 'runtime', 'cpp_standalone' or 'cuda_standalone'"):
        simulate_mhsa(*problem2, device="gpu")
    with pytest.raises(ValueError, match="checkpoints: only the runtime device"):
        simulate_mhsa(*problem2, neuron="escape", duration=1.0, checkpoints=(0.5,), device="cpp_standalone")
    with pytest.raises(ValueError, match="threads: expected an integer >= 0"):
        simulate_mhsa(*problem2, device="cpp_standalone", threads=-1)


def test_cuda_standalone_without_brian2cuda_is_a_clear_error(problem2, monkeypatch):
    """No GPU in CI: ``device="cuda_standalone"`` names ``device`` when the run options are
    made, before anything is described or built."""
    import sys

    from ctmhsa.sims.options import RunOptions

    monkeypatch.setitem(sys.modules, "brian2cuda", None)     # as if not installed
    with pytest.raises(ValueError, match="device: 'cuda_standalone' needs the brian2cuda package"):
        RunOptions(device="cuda_standalone")
    for sched in (None, "serial"):
        with pytest.raises(ValueError, match="device: 'cuda_standalone' needs"):
            simulate_mhsa(*problem2, neuron="escape", device="cuda_standalone", scheduler=sched)
