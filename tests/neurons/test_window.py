"""Spike counters kept by the cells (compiled devices) against counts from recorded spike times."""

import brian2 as b2
import numpy as np
import pytest

from ctmhsa.neurons.window import (COUNTER_EQUATIONS, COUNTER_RESET, COUNTER_STEP, counted_observables, counter_run_args,
                            fano_sums)

pytestmark = pytest.mark.brian2


@pytest.mark.parametrize("warmup, T, n_chunks, dt", [(0.2, 1.0, 10, 1e-3), (0.05, 0.3, 3, 1e-4),
                                                     (0.0, 0.7, 7, 1e-3), (0.013, 0.5, 2, 1e-4)])
def test_counters_equal_the_counts_of_the_spike_times(warmup, T, n_chunks, dt):
    """Window counts and Fano sums from the counters equal those of the recorded spike times,
    for rates from sparse (most chunks empty) to one spike in most steps, at window starts and
    chunk lengths that are and are not round numbers of steps."""
    b2.prefs.codegen.target = "numpy"
    rates = np.array([0.0, 3.0, 40.0, 300.0, 0.9 / dt])
    g = b2.NeuronGroup(len(rates), "rr : Hz\nt_win : second (shared)\n" + COUNTER_EQUATIONS,
                       threshold="rand() < rr*dt", reset=COUNTER_RESET, dt=dt * b2.second)
    g.run_regularly(COUNTER_STEP, when="start")
    g.rr = rates * b2.Hz
    g.t_win = warmup * b2.second
    for var, value in counter_run_args(T, n_chunks).items():
        setattr(g, var + "_", value)
    mon = b2.SpikeMonitor(g)
    b2.seed(3)
    b2.Network(g, mon).run((warmup + T) * b2.second)
    # the reference from step numbers (every window start and chunk here is a whole number of steps)
    step, first, per = np.round(mon.t_[:] / dt), round(warmup / dt), round(T / n_chunks / dt)
    keep = step >= first
    chunks = np.zeros((n_chunks, len(rates)))
    np.add.at(chunks, (((step[keep] - first) // per).astype(int), np.array(mon.i[:])[keep]), 1.0)
    count = chunks.sum(axis=0)
    got, sums = counted_observables(g.n_win[:], g.n_chunk[:], g.s2_chunk[:], n_chunks)
    np.testing.assert_array_equal(got, count)
    assert count[-1] > 0.5 * T / dt and count[0] == 0
    assert sums == pytest.approx(fano_sums({"p": chunks})["p"], rel=1e-12, abs=1e-12)
