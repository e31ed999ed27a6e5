"""simulate_mhsa refuses bad input with a message naming the argument, before building."""

import numpy as np
import pytest

import ctmhsa.circuits.memory as inst
from ctmhsa.sims import simulate_mhsa
from conftest import random_problem

pytestmark = pytest.mark.codegen_independent


@pytest.fixture
def args():
    X, _, WQ, WK, WV, WO = random_problem(n=3, H=1, dk=2, dv=2, de=3)
    return dict(X=X, WQ=WQ, WK=WK, WV=WV, WO=WO, neuron="rate")


@pytest.fixture(autouse=True)
def no_build(monkeypatch):
    """Any attempt to build a network during these tests is a failure."""
    def boom(*a, **k):
        raise AssertionError("a network was built before validation failed")
    monkeypatch.setattr("ctmhsa.sims.runners.instantiate", boom)


@pytest.mark.parametrize("change, exc, match", [
    (dict(X=np.zeros((2, 2, 3, 3))), ValueError, r"X: expected shape \(n, de\)"),
    (dict(X=np.zeros((3, 4))), ValueError, "WQ: last axis must equal de"),
    (dict(WV=np.zeros((2, 2, 3))), ValueError, "WV: has 2 heads"),
    (dict(WO=np.full((1, 3, 2), np.nan)), ValueError, "WO: contains 6 NaN"),
    (dict(phi="tanh"), ValueError, "phi: unknown feature map 'tanh'"),
    (dict(phi=(np.exp, np.exp)), TypeError, "phi: the circuit implements named feature maps"),
    (dict(neuron="hh"), ValueError, "neuron: expected one of"),
    (dict(duration=0.0), ValueError, "duration: expected a positive finite time"),
    (dict(duration=-1), ValueError, "duration: expected a positive"),
    (dict(duration=np.inf), ValueError, "duration: expected a positive finite"),
    (dict(duration="1s"), TypeError, "duration: expected a number of seconds"),
    (dict(dt=0.0), ValueError, "dt: expected a positive"),
    (dict(dt=2.0), ValueError, "dt: 2.0 s is longer than duration"),
    (dict(seed=-1), ValueError, "seed: expected a non-negative integer"),
    (dict(seed=1.5), ValueError, "seed: expected a non-negative integer"),
    (dict(codegen="gpu"), ValueError, "codegen: expected one of"),
    (dict(causal=1), TypeError, "causal: expected True or False"),
    (dict(Y=np.zeros((4, 2))), ValueError, "Y: embedding dimension 2 differs"),
    (dict(params=dict(tau_m=0.01)), TypeError, "params: expected ctmhsa.neurons.params.CellParams"),
])
@pytest.mark.smoke
def test_bad_arguments(args, change, exc, match):
    args.update(change)
    with pytest.raises(exc, match=match):
        simulate_mhsa(**args)


@pytest.mark.parametrize("change, exc, match", [
    (dict(neuron="escape", checkpoints=(0.5, 2.0)), ValueError, r"checkpoints: every time must lie in \(0, duration"),
    (dict(neuron="escape", checkpoints=(0.0,)), ValueError, "checkpoints: every time"),
    (dict(neuron="escape", checkpoints="abc"), TypeError, "checkpoints: expected a sequence"),
    (dict(neuron="rate", checkpoints=(0.5,)), ValueError, "checkpoints: the rate level"),
    (dict(P=0), ValueError, "P: expected an integer >= 1"),
    (dict(P={"l7": 2}), ValueError, "P: unknown population"),
    (dict(signed="twos"), ValueError, "signed: expected 'offset' or 'onoff'"),
    (dict(n_inh=0), ValueError, "n_inh: expected an integer >= 1"),
])
def test_bad_circuit_options(args, change, exc, match):
    args.update(change)
    with pytest.raises(exc, match=match):
        simulate_mhsa(**args)


@pytest.mark.parametrize("warmup", [-1.0, np.nan, "1"])
def test_warmup_validation(args, warmup):
    args.update(neuron="escape", warmup=warmup)
    with pytest.raises(ValueError, match="warmup: expected a non-negative finite time"):
        simulate_mhsa(**args)


def test_memory_estimate_refuses_networks_that_do_not_fit(args):
    X, _, WQ, WK, WV, WO = random_problem(n=200, H=8, dk=64, dv=64, de=64)
    with pytest.raises(ValueError, match=r"max_memory: the network needs an estimated [\d.]+ GiB"):
        simulate_mhsa(X, WQ, WK, WV, WO, neuron="rate")
    with pytest.raises(ValueError, match="limit is 0.00 GiB"):
        simulate_mhsa(**args, max_memory=1000)


def test_memory_estimate_is_monotone_and_counts_synapses():
    from ctmhsa.circuits import pathway

    small, big = pathway(4, 4, 4, 4), pathway(8, 4, 4, 4)
    assert inst.estimate_memory(big) > inst.estimate_memory(small)
    assert inst.estimate_memory(small) >= inst.BYTES_PER_SYNAPSE * small.n_synapses()


def test_params_validation():
    from ctmhsa.neurons.params import CellParams

    with pytest.raises(ValueError, match="params.tau_m: expected a positive number"):
        CellParams(tau_m=-1)
    with pytest.raises(ValueError, match="params: unknown parameter"):
        CellParams().replace(tau_x=1)


def test_skip_weights_are_validated_before_building():
    from conftest import random_problem
    from ctmhsa.sims import simulate_mhsa

    X, _, WQ, WK, WV, WO = random_problem(seed=1, n=3, H=1, dk=2, dv=2, de=3)
    with pytest.raises(ValueError, match=r"WS: expected shape \(H, dv, de\)"):
        simulate_mhsa(X, WQ, WK, WV, WO, WS=np.ones((1, 3, 3)))
    with pytest.raises(ValueError, match="WS: contains 6 NaN or infinite"):
        simulate_mhsa(X, WQ, WK, WV, WO, WS=np.full((1, 2, 3), np.nan))
    with pytest.raises(TypeError, match="WS: expected a real numeric array"):
        simulate_mhsa(X, WQ, WK, WV, WO, WS="identity")


def test_memory_refusal_counts_the_synapses_brian2_would_hold(args):
    # room for the neurons but not for the synapses: refused from the folded synapse count
    from ctmhsa.circuits.builders import pathway
    from ctmhsa.circuits.fold import fold_plan, simulated_synapse_count

    c = pathway(3, 2, 2, 3, H=1)
    floor = inst.estimate_memory(c, 0)
    need = inst.estimate_memory(c, simulated_synapse_count(c, fold_plan(c, "escape")))
    assert need > floor
    with pytest.raises(ValueError, match=r"max_memory: the network needs an estimated .* synapses\) but"):
        simulate_mhsa(**dict(args, neuron="escape", max_memory=floor + 1))
    with pytest.raises(ValueError, match=r"for its [\d,]+ neurons alone"):
        simulate_mhsa(**dict(args, neuron="escape", max_memory=floor - 1))
