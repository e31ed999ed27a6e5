"""Build, then run: the Brian2 network is reachable; options are frozen, validated objects;
times accept Brian2 quantities; every runner returns the same observations."""

import dataclasses

import brian2 as b2
import numpy as np
import pytest

from conftest import random_problem
from ctmhsa.sims import CircuitOptions, RunOptions, build_mhsa, simulate_mhsa
from ctmhsa.sims.options import seconds, split_options
from ctmhsa.sims.runners import RuntimeRunner, SplitRunner, StandaloneRunner, runner_for


@pytest.fixture
def small():
    X, _, WQ, WK, WV, WO = random_problem(seed=3, n=2, H=1, dk=2, dv=2, de=2)
    return X, WQ, WK, WV, WO


@pytest.mark.brian2
def test_user_monitor_on_built_network_and_same_spikes_as_simulate(small):
    kw = dict(neuron="escape", duration=0.2, warmup=0.1, seed=4, record_spikes=("l5pt",))
    sim = build_mhsa(*small, **kw)
    assert isinstance(sim.network, b2.Network) and sim.circuit.n_neurons() == sum(
        len(g) for g in sim.groups.values())
    mon = b2.StateMonitor(sim.groups["l5pt"], "r", record=[0])
    sim.network.add(mon)
    res = sim.run()
    assert mon.r_.shape[1] == round(0.3 / 1e-3)       # recorded over warm-up + window, every step
    ref = simulate_mhsa(*small, **kw)                   # the monitor changed no spike
    np.testing.assert_array_equal(res.spikes["l5pt"][1], ref.spikes["l5pt"][1])
    np.testing.assert_array_equal(res.x_tilde, ref.x_tilde)
    with pytest.raises(RuntimeError, match="already run"):
        sim.run()


@pytest.mark.brian2
def test_brian2_quantities_equal_seconds(small):
    a = simulate_mhsa(*small, neuron="escape", duration=0.2, warmup=0.1, dt=1e-3, checkpoints=(0.1,), seed=2)
    b = simulate_mhsa(*small, neuron="escape", duration=200 * b2.ms, warmup=0.1 * b2.second, dt=1 * b2.ms,
                      checkpoints=(100 * b2.ms,), seed=2)
    np.testing.assert_array_equal(a.x_tilde, b.x_tilde)
    assert b.config["duration"] == 0.2 and b.config["warmup"] == 0.1 and b.config["dt"] == 1e-3
    assert [c["T"] for c in b.diagnostics["checkpoints"]] == [0.1, 0.2]


@pytest.mark.brian2
def test_option_objects_equal_keywords(small):
    co = CircuitOptions(neuron="rate", phi="softplus")
    ro = RunOptions(duration=0.5)
    a = simulate_mhsa(*small, circuit_options=co, run_options=ro)
    b = simulate_mhsa(*small, neuron="rate", phi="softplus", duration=0.5)
    np.testing.assert_array_equal(a.x_tilde, b.x_tilde)
    assert a.config["phi"] == "softplus" and a.level == "rate"
    # keywords override the objects' fields
    c = simulate_mhsa(*small, circuit_options=co, run_options=ro, phi="elu1")
    assert c.config["phi"] == "elu1"


@pytest.mark.codegen_independent
def test_options_are_frozen_and_validated():
    co = CircuitOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        co.phi = "relu"
    assert co.replace(phi="relu").phi == "relu" and co.phi == "elu1"
    with pytest.raises(ValueError, match="phi: unknown feature map"):
        co.replace(phi="tanh")
    with pytest.raises(ValueError, match="duration: expected a positive finite time"):
        RunOptions(duration=-1 * b2.ms)
    with pytest.raises(ValueError, match="duration: .*not a time"):
        RunOptions(duration=1 * b2.volt)
    with pytest.raises(TypeError, match="unexpected keyword argument 'durration'"):
        split_options(durration=1.0)
    with pytest.raises(TypeError, match="run_options: expected ctmhsa.sims.options.RunOptions"):
        split_options(run_options=dict(duration=1.0))
    assert seconds("dt", 100 * b2.usecond) == pytest.approx(1e-4)
    r = RunOptions(duration=2.0, checkpoints=[500 * b2.ms, 1.0], record_spikes=["l5pt"])
    assert r.checkpoints == (0.5, 1.0) and r.record_spikes == ("l5pt",)
    assert r.resolved("escape").dt == 1e-3 and r.resolved("escape").warmup == 0.5
    assert RunOptions().resolved("rate").warmup == 0.0
    with pytest.raises(ValueError, match="checkpoints: the rate level"):
        RunOptions(duration=1.0, checkpoints=(0.5,)).resolved("rate")


@pytest.mark.codegen_independent
def test_one_runner_per_way_of_running():
    assert runner_for(RunOptions()) is RuntimeRunner
    assert runner_for(RunOptions(device="cpp_standalone")) is StandaloneRunner
    assert runner_for(RunOptions(scheduler="serial")) is SplitRunner


@pytest.mark.brian2
def test_network_of_deferred_runners_is_explained(small):
    sim = build_mhsa(*small, neuron="escape", scheduler="serial", duration=0.1)
    with pytest.raises(RuntimeError, match="use device='runtime' and scheduler=None"):
        sim.network
