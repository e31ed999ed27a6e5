"""Streams on cpp_standalone: the relays' rate table a run argument, every presentation's window
read after the run from monitors as the runtime device reads it during the run."""

import os

import brian2 as b2
import numpy as np
import pytest

from ctmhsa.devices.standalone import padded_stream, stream_rows
from ctmhsa.neurons.backend import cache_dir
from ctmhsa.neurons.window import (Probe, counts_before, fano_sums, measure_stream, stream_steps, stream_windows,
                                   window_counts)
from ctmhsa.sims import simulate_mhsa
from ctmhsa.sims.options import CircuitOptions, RunOptions
from ctmhsa.sims.runners import SplitRunner

KW = dict(neuron="escape", presentation=0.2, warmup=0.25, seed=3, P=10, record_spikes=("l5pt",))


def _problem(T, seed):
    """T token sets of 2 tokens (de = 2) and one head's weights (dk = dv = 2), the same for every seed."""
    X = np.random.default_rng(seed).normal(size=(T, 2, 2)) * 0.6
    rng = np.random.default_rng(0)
    rng.normal(size=(3, 2, 2))   # (the tokens of seed 0)
    W = [rng.normal(size=(1, 2, 2)) * 0.6 for _ in range(4)]
    return X, W


class _numpy_target:
    def __enter__(self):
        self.old = b2.prefs.codegen.target
        b2.prefs.codegen.target = "numpy"

    def __exit__(self, *exc):
        b2.prefs.codegen.target = self.old


@pytest.mark.brian2
def test_windows_read_after_the_run_are_the_windows_read_during_it():
    """stream_steps + counts_before + stream_windows on the spikes and sampled integrals of a run
    give exactly what measure_stream reads at its marks (chunk ends off the step grid included)."""
    b2.start_scope()
    with _numpy_target():
        dt, warmup, period, count, lag, n_chunks = 1e-3, 0.03, 0.02, 3, 0.005, 4
        clock = b2.Clock(dt=dt * b2.second)
        G = b2.NeuronGroup(3, "r : Hz\nacc_r : 1", threshold="rand() < r*dt", clock=clock)
        G.r = [100, 200, 400] * b2.Hz
        G.run_regularly("acc_r += r*dt", when="end", clock=clock)
        spikes = b2.SpikeMonitor(G)
        steps = stream_steps(period, count, lag, n_chunks, dt)
        t0 = round(warmup / dt)
        every = int(np.gcd.reduce([t0, *(t0 + steps[:, [0, -1]]).ravel()]))
        samples = b2.StateMonitor(G, "acc_r", record=True, dt=every * dt * b2.second, when="start", order=-100)
        net = b2.Network(G, spikes, samples)
        b2.seed(5)
        during = measure_stream(net, {"g": Probe(spikes, lambda v: getattr(G, v + "_")[:], ("r",))}, clock,
                                lambda d, report: net.run(d * b2.second) or 0.0, warmup, period, count, lag,
                                n_chunks)
    cum = counts_before(spikes.i[:], np.rint(spikes.t_[:] / dt).astype(int) - t0, 3, steps)
    acc = samples.acc_r[:].T
    idx = (t0 + steps[:, [0, -1]]) // every
    at = np.where((idx < len(acc))[..., None], acc[np.minimum(idx, len(acc) - 1)], G.acc_r[:])
    after = stream_windows({"g": cum}, {"g": {"r": at}}, period - lag)
    assert cum[-1, -1].sum() > 10   # spikes in the windows
    np.testing.assert_array_equal(after["chunks"]["g"], during["chunks"]["g"])
    # the compiled read (window_counts): the same windows' counts and chunk spread, without cumulating
    totals, sums = window_counts(spikes.i[:], np.rint(spikes.t_[:] / dt).astype(int) - t0, 3, steps, block=4)
    np.testing.assert_array_equal(totals, [s["g"]["count"] for _, s in during["snapshots"]])
    assert sums == pytest.approx(fano_sums({"g": during["chunks"]["g"]})["g"], rel=1e-12)
    for (T1, s1), (T2, s2) in zip(after["snapshots"], during["snapshots"], strict=True):
        assert T1 == T2
        for key in ("count", "rate", "r"):
            np.testing.assert_allclose(s1["g"][key], s2["g"][key], rtol=1e-12)


@pytest.mark.codegen_independent
def test_tables_are_padded_to_a_power_of_two_with_their_last_row():
    assert [stream_rows(r) for r in (1, 8, 9, 16, 17, 1000)] == [8, 8, 16, 16, 32, 1024]
    rates = np.arange(10.0).reshape(5, 2)
    (padded, period, shift), = padded_stream({"nucleus1": (rates, 0.2, 0.15)}).values()
    assert padded.shape == (8, 2) and (period, shift) == (0.2, 0.15)
    np.testing.assert_array_equal(padded[:5], rates)
    np.testing.assert_array_equal(padded[5:], np.repeat(rates[-1:], 3, axis=0))


@pytest.mark.codegen_independent
def test_a_split_run_refuses_a_stream():
    ro = RunOptions(presentation=0.2, duration=0.4, scheduler="serial")
    with pytest.raises(ValueError, match="presentation: a stream runs as one network, .*scheduler=None"):
        SplitRunner.check(CircuitOptions(neuron="escape"), ro)


@pytest.fixture(scope="module")
def first():
    """One stream of 3 presentations on cpp_standalone (compiles its project once: ~1-3 min)."""
    X, W = _problem(3, 0)
    return X, W, simulate_mhsa(X, *W, device="cpp_standalone", **KW)


@pytest.mark.long
@pytest.mark.standalone
def test_a_compiled_stream_reads_as_the_runtime_stream(first):
    X, W, sa = first
    rt = simulate_mhsa(X, *W, **KW)
    assert sa.x_tilde.shape == rt.x_tilde.shape == X.shape and sa.stream == rt.stream
    assert {k: v.shape for k, v in sa.stages.items()} == {k: v.shape for k, v in rt.stages.items()}
    assert sa.diagnostics["fano"].keys() == rt.diagnostics["fano"].keys()
    (_, t_sa), (_, t_rt) = sa.spikes["l5pt"], rt.spikes["l5pt"]
    assert t_sa.max() < 0.85 and abs(len(t_sa) - len(t_rt)) <= 0.2 * len(t_rt)   # the stream's spikes only
    # the same seed draws the same numbers on both devices here: the same spikes, the same x̃; a
    # spike changed (compiler, machine) leaves the difference within the count noise
    sd = np.sqrt(sa.noise_variance["x_tilde"] + rt.noise_variance["x_tilde"])
    assert np.all(np.abs(sa.x_tilde - rt.x_tilde) <= 4 * sd + 1e-12)
    if np.array_equal(sa.x_tilde, rt.x_tilde):   # the same spikes: the same chunk spread, read in blocks
        for name, f in rt.diagnostics["fano"].items():
            assert sa.diagnostics["fano"][name] == pytest.approx(f, rel=1e-9), name
    for m_sa, m_rt in zip(sa.presentation_metrics(), rt.presentation_metrics(), strict=True):
        assert m_sa["x_tilde"]["r"] > 0.8 and abs(m_sa["x_tilde"]["r"] - m_rt["x_tilde"]["r"]) < 0.1


@pytest.mark.long
@pytest.mark.standalone
def test_one_project_runs_streams_of_other_tokens_and_lengths(first):
    X, W, sa = first
    root = os.path.join(cache_dir(), "standalone")
    projects = set(os.listdir(root))
    built = {p: os.stat(os.path.join(root, p, "main")).st_mtime_ns for p in projects
             if os.path.isfile(os.path.join(root, p, "main"))}
    for T, seed in ((3, 1), (5, 2)):   # 2 warm-up rows + 3 or 5 presentations: one table of 8 rows
        Xo, _ = _problem(T, seed)
        res = simulate_mhsa(Xo, *W, device="cpp_standalone", **KW)
        assert res.x_tilde.shape == Xo.shape and res.stream["count"] == T
        assert np.corrcoef(res.x_tilde.ravel(), res.reference.ravel())[0, 1] > 0.6
        assert not np.allclose(res.x_tilde[:3], sa.x_tilde)
    assert set(os.listdir(root)) == projects   # no new project
    assert {p: os.stat(os.path.join(root, p, "main")).st_mtime_ns for p in built} == built   # none linked again


@pytest.mark.long
@pytest.mark.standalone
def test_a_compiled_rate_level_stream_is_the_runtime_stream():
    """The rate level is deterministic: every presentation's state at its end and at 90 % of it
    (the settling check) as on the runtime device, the relays' rates from the run-time table."""
    X, W = _problem(3, 0)
    kw = dict(neuron="rate", presentation=0.2)
    sa, rt = simulate_mhsa(X, *W, device="cpp_standalone", **kw), simulate_mhsa(X, *W, **kw)
    np.testing.assert_allclose(sa.x_tilde, rt.x_tilde, rtol=0, atol=1e-12 * np.abs(rt.x_tilde).max())
    np.testing.assert_allclose(sa.stream["settled"], rt.stream["settled"], rtol=1e-6)
    for name, r in rt.rates.items():
        np.testing.assert_allclose(sa.rates[name], r, rtol=1e-9, atol=1e-9, err_msg=name)
