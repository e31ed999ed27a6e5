"""Sums that cannot change during a run are summed once (circuits.instantiate._hold_constant_sums):
the same spikes and states as summing them every step, and only those sums are held."""

import gc

import numpy as np
import pytest

from ctmhsa.circuits import instantiate as inst
from ctmhsa.circuits.builders import pathway
from ctmhsa.circuits import perturb
from ctmhsa.circuits.perturb import Silence
from ctmhsa.mapping.encode import encode
from ctmhsa.maths.model import Block
from ctmhsa.sims import simulate_mhsa
from conftest import random_problem


def _held(built) -> set:
    """``(synapses, summed variable)`` of the built network's held sums (after one step: Brian2
    warns of objects deleted unrun, in whichever later test collects them)."""
    built.run(built.dt)
    return {(S.name, var.removesuffix("_post")) for S in built.synapses.values() for var, u in S.summed_updaters.items()
            if u.clock is built.held_clock}


def _built(level, **kw):
    X, _, WQ, WK, WV, WO = random_problem(seed=4, n=2, H=1, dk=2, dv=2, de=3)
    c = pathway(2, 2, 2, 3, **kw)
    return inst.instantiate(c, level, encode(c, X, Block.from_arrays(WQ, WK, WV, WO)).values)


@pytest.mark.brian2
def test_only_the_relays_sums_are_held():
    # escape: the relays' spike-noise variances onto the query and key dendrites; the rate level:
    # the relays' inputs too (a rate source writes w r_pre every step); nothing fed by a cell
    # whose intensity moves
    esc = _held(_built("escape"))
    assert esc == {("core_q", "sig2_b"), ("matrix_k", "sig2_a")}
    rate = _held(_built("rate"))
    assert {("core_q", "in_core_q"), ("matrix_k", "in_matrix_k"), ("matrix_v", "in_matrix_v")} <= rate
    assert not any(S in ("pool", "attention", "it_pt", "shunt", "pt_out") for S, _ in rate)


@pytest.mark.brian2
def test_a_silenced_relay_is_summed_every_step():
    c = pathway(2, 2, 2, 3)
    X, _, WQ, WK, WV, WO = random_problem(seed=4, n=2, H=1, dk=2, dv=2, de=3)
    values = encode(c, X, Block.from_arrays(WQ, WK, WV, WO)).values
    silenced = perturb.apply(c, (Silence("nucleus1", start=0.05, stop=0.1),))
    held = _held(inst.instantiate(silenced, "escape", values))
    assert held == {("matrix_k", "sig2_a")}


@pytest.mark.brian2
def test_constant_intensity_reads_the_group():
    b = _built("escape")
    b.run(b.dt)
    relay = inst.get_model("escape", "relay")
    assert inst.constant_intensity(b.groups["nucleus1"], relay)
    l23 = inst.get_model("escape", "l23")
    assert not inst.constant_intensity(b.groups["l23"], l23)


@pytest.mark.brian2
@pytest.mark.parametrize("neuron, circuit", [("escape", "quadratic"), ("escape", "linear"), ("rate", "quadratic"),
                                             pytest.param("lif", "quadratic", marks=pytest.mark.long)])
def test_held_sums_give_the_same_run(monkeypatch, neuron, circuit):
    X, _, WQ, WK, WV, WO = random_problem(seed=6, n=3, H=2, dk=2, dv=3, de=3)
    kw = dict(neuron=neuron, duration=0.3, seed=2, codegen="numpy", circuit=circuit)
    if neuron != "rate":
        kw.update(warmup=0.1, record_spikes=True)
    a = simulate_mhsa(X, WQ, WK, WV, WO, **kw)
    monkeypatch.setattr(inst, "_hold_constant_sums", lambda *args, **kwargs: None)
    b = simulate_mhsa(X, WQ, WK, WV, WO, **kw)
    for st in a.stages:
        np.testing.assert_array_equal(a.stages[st], b.stages[st], err_msg=st)
    if neuron != "rate":
        assert sum(len(a.spikes[p][0]) for p in a.spikes) > 100
        for p in a.spikes:
            for x, y in zip(a.spikes[p], b.spikes[p]):
                np.testing.assert_array_equal(x, y, err_msg=p)


@pytest.mark.brian2
def test_held_sums_are_summed_at_the_first_step_and_not_again():
    b = _built("escape")
    assert float(b.held_clock.dt_) == inst.HELD_SUMS_RUNTIME_DT
    b.prepare()
    tgt = b.synapses["core_q"].summed_updaters["sig2_b_post"].target
    assert not np.any(tgt.sig2_b[:])
    b.run(0.001)   # one step: Brian2's Python clock ticks in the shortest run
    first = np.array(tgt.sig2_b[:])
    assert np.all(first > 0)
    tgt.sig2_b[:] = 0.0   # a sum run every step would write it again
    b.run(0.05)
    assert not np.any(tgt.sig2_b[:])


@pytest.mark.brian2
def test_a_compiled_build_holds_its_sums_for_the_whole_run():
    # the standalone binary's clock ticks once in a run of any length (C++ rounds up the run's end)
    X, _, WQ, WK, WV, WO = random_problem(seed=4, n=2, H=1, dk=2, dv=2, de=3)
    c = pathway(2, 2, 2, 3)
    b = inst.instantiate(c, "escape", encode(c, X, Block.from_arrays(WQ, WK, WV, WO)).values, run_args={})
    assert float(b.held_clock.dt_) == inst.HELD_SUMS_DT
    del b
    gc.collect()   # (its unrun objects are warned of here, not in a later test)


@pytest.mark.brian2
def test_nothing_is_held_on_brian2cuda(monkeypatch):
    # brian2cuda compiles a network on one clock only (ctmhsa.devices.cuda.clock_flags)
    import ctmhsa.devices.cuda as cuda

    monkeypatch.setattr(cuda, "is_cuda", lambda dev: True)
    assert _held(_built("escape")) == set()
