"""A stream's read-out latency: a population's windows delayed by its response latency
(``simulate_model(..., latency=...)``), read during the run on the runtime device and after it on
cpp_standalone; the other populations' windows as without it; every bad latency refused."""

import brian2 as b2
import numpy as np
import pytest

import ctmhsa
from ctmhsa.devices.standalone import StreamRead
from ctmhsa.neurons.window import (Probe, fano_from_sums, measure_stream, stream_delays, stream_steps,
                                   window_counts)
from ctmhsa.sims.model import prepare_model_run

from test_model_standalone import KW, _model, _tokens


def _group_run(latency, lag=0.005, seed=5):
    """Two probes of one group's spikes (the same cells), ``"late"`` delayed by ``latency``."""
    b2.start_scope()
    old, b2.prefs.codegen.target = b2.prefs.codegen.target, "numpy"
    try:
        dt, warmup, period, count, n_chunks = 1e-3, 0.03, 0.02, 3, 2
        clock = b2.Clock(dt=dt * b2.second)
        G = b2.NeuronGroup(3, "r : Hz\nacc_r : 1", threshold="rand() < r*dt", clock=clock)
        G.r = [100, 200, 400] * b2.Hz
        G.run_regularly("acc_r += r*dt", when="end", clock=clock)
        spikes = b2.SpikeMonitor(G)
        net = b2.Network(G, spikes)
        b2.seed(seed)
        probe = Probe(spikes, lambda v: getattr(G, v + "_")[:], ("r",))
        m = measure_stream(net, {"now": probe, "late": probe}, clock, lambda d, report: net.run(d * b2.second) or 0.0,
                           warmup, period, count, lag, n_chunks, latency=latency)
        return m, spikes.i[:].copy(), spikes.t_[:].copy(), float(net.t_), (dt, warmup, period, count, lag, n_chunks)
    finally:
        b2.prefs.codegen.target = old


def _counts_in(i, t, lo, hi, dt, N=3):
    """Spikes per cell at step times in [lo, hi) (s)."""
    sel = (t >= lo - 0.5 * dt) & (t < hi - 0.5 * dt)
    return np.bincount(i[sel], minlength=N)


@pytest.mark.brian2
@pytest.mark.parametrize("lag", [0.005, 0.0])
def test_a_delayed_population_is_read_in_its_delayed_windows(lag):
    """The delayed probe counts the spikes of ``[lag + d, period + d)`` after each presentation's
    start, the other those of ``[lag, period)``; the run goes on for ``d`` after the stream; the
    compiled read (the same marks shifted) counts the same. A window opening at 0 lag (the previous
    one's end) is read too (until version 0.15 the runtime read crashed there)."""
    d = 0.007
    m, i, t, end, (dt, warmup, period, count, lag, n_chunks) = _group_run({"late": d}, lag=lag)
    assert end == pytest.approx(warmup + count * period + d)
    assert len(m["snapshots"]) == count
    for k, (T, snap) in enumerate(m["snapshots"]):
        assert T == pytest.approx(period - lag)
        start = warmup + k * period
        np.testing.assert_array_equal(snap["now"]["count"], _counts_in(i, t, start + lag, start + period, dt))
        np.testing.assert_array_equal(snap["late"]["count"], _counts_in(i, t, start + lag + d, start + period + d, dt))
        np.testing.assert_allclose(snap["late"]["r"], [100, 200, 400])   # the integrals over the same window
    assert sum(s["late"]["count"].sum() for _, s in m["snapshots"]) > 10
    # after the run (cpp_standalone's read): the marks shifted by the delay's steps
    read = StreamRead(round(warmup / dt), stream_steps(period, count, lag, n_chunks, dt), period - lag, {},
                      delays={"late": round(d / dt)})
    steps = np.rint(t / dt).astype(int) - read.t0
    for name in ("now", "late"):
        totals, _ = window_counts(i, steps, 3, read._marks(name))
        np.testing.assert_array_equal(totals, [s[name]["count"] for _, s in m["snapshots"]])
    assert read.every == 1 and read.key()["delays"] == {"late": 7}


@pytest.mark.brian2
def test_no_latency_reads_as_before():
    """Without a delay (or an empty one) the windows and the run are those of no latency."""
    m0, i0, t0, end0, _ = _group_run(None)
    m1, i1, t1, end1, _ = _group_run({"late": 0.0})
    assert end0 == end1
    np.testing.assert_array_equal(i0, i1)
    for (_, a), (_, b) in zip(m0["snapshots"], m1["snapshots"], strict=True):
        for name in ("now", "late"):
            np.testing.assert_array_equal(a[name]["count"], b[name]["count"])


@pytest.mark.codegen_independent
def test_a_compiled_read_samples_each_group_at_its_own_boundaries():
    """The compiled read samples a group's integrals at the steps its own populations' window
    boundaries share: a latency of one population (the digits' class cells, 0.15 s at 0.5 s per
    image) no longer makes every group's samples 5x denser. Without delays the key is as before;
    the cells' chunk tables (run arguments) reach as far as the relays' table."""
    dt, period, lag = 1e-3, 0.5, 0.25
    marks = stream_steps(period, 4, lag, 10, dt)
    read = StreamRead(500, marks, period - lag, {}, delays={"classes": 150})
    assert read.every == 50 and read._every({0}) == 250 and read._every({150}) == 50
    assert read.key()["every_by_delay"] == {"0": 250, "150": 50}
    plain = StreamRead(500, marks, period - lag, {})
    assert plain.every == 250 and set(plain.key()) == {"tables", "every"}
    # the chunk of each step: window w's chunk k numbered w * 10 + k + 1, 0 outside the windows;
    # as long as the relays' table of 8 rows of 0.5 s reaches, the longest delay and 2 steps more
    read.tables = {"input": (np.zeros((8, 3)), period, 0.0)}
    delays, tables = read.chunks(dt)
    assert delays == {"classes": 150} and set(tables) == {0, 150} and len(tables[0]) == 4000 + 150 + 2
    ids = tables[0]
    assert ids[:500 + 250].max() == 0 and ids[500 + 250] == 1 and ids[500 + 499] == 10 and ids[500 + 500] == 0
    assert ids[500 + 750] == 11 and ids[-1] == 0 and tables[150][500 + 400] == 1


@pytest.mark.codegen_independent
@pytest.mark.parametrize("latency, match", [
    ({"nope": 0.01}, r"^latency: 'nope' is not a measured population"),
    ({"late": 0.02}, r"^latency: the delay of 'late' must be seconds in \[0, 0.02\)"),
    ({"late": -1e-3}, r"^latency: the delay of 'late' must be seconds"),
    ({"late": True}, r"^latency: the delay of 'late' must be seconds"),
    ({"late": "0.01"}, r"^latency: the delay of 'late' must be seconds"),
])
def test_stream_delays_refuse_what_they_cannot_read(latency, match):
    with pytest.raises(ValueError, match=match):
        stream_delays(latency, 0.02, ("now", "late"))


@pytest.mark.brian2
def test_a_closed_loop_refuses_a_latency():
    with pytest.raises(ValueError, match=r"^latency: a closed loop \(on_read\)"):
        measure_stream(b2.Network(), {"late": None}, b2.Clock(dt=1e-3 * b2.second), None, 0.0, 0.02, 1, 0.005,
                       on_read=lambda k, o: None, latency={"late": 0.005})


@pytest.mark.codegen_independent
@pytest.mark.parametrize("kw, match", [
    (dict(latency={"classes": 0.05}), r"^latency: the decoding delays of a stream's presentations; X is one token"),
    (dict(latency={"classes": 0.05}, presentation=0.2, neuron="rate"), r"^latency: the rate level reads"),
    (dict(latency={"nope": 0.05}, presentation=0.2), r"^latency: 'nope' is not a population of this model's circuit"),
    (dict(latency={"classes": 0.2}, presentation=0.2), r"^latency: the delay of 'classes' must be seconds in "
                                                       r"\[0, 0.2\)"),
    (dict(latency=0.05, presentation=0.2), r"^latency: expected a mapping"),
    (dict(latency={"classes": 0.0505}, presentation=0.2), r"^latency: the delay of 'classes' must be a whole number "
                                                          r"of steps \(dt = 0.001 s\)"),
])
def test_simulate_model_refuses_a_bad_latency_before_building(kw, match):
    X = _tokens(2, (3, 2, 3)) if "presentation" in kw else _tokens(2)
    opts = dict(seed=3, **kw) if kw.get("neuron") == "rate" else dict(KW, **kw)
    with pytest.raises((ValueError, TypeError), match=match):
        ctmhsa.simulate_model(_model(), X, **opts)


@pytest.mark.codegen_independent
def test_a_pathway_refuses_a_latency():
    rng = np.random.default_rng(0)
    W = [rng.normal(size=(1, 2, 2)) for _ in range(4)]
    with pytest.raises(ValueError, match=r"latency"):
        ctmhsa.simulate_mhsa(rng.normal(size=(3, 2, 2)), *W, presentation=0.2, latency={"l5pt": 0.05})


def _observed(device, latency, **kw):
    """A model stream's observations (every presentation's window per population) and the run."""
    X = _tokens(2, (3, 2, 3))
    opts = {k: v for k, v in KW.items() if k != "neuron"}
    run = prepare_model_run(_model(), X, "escape", 0.2, None, None,
                            dict(opts, device=device, record_spikes=("classes", "b0_l5pt"), **kw), latency=latency)
    return run, run.runner.run(run.run_ro)


def _check_delayed(run, obs, d_classes, d_l5pt):
    ro, lag = run.ro, run.runner.lag
    assert lag == pytest.approx(0.1)
    for name, d in (("classes", d_classes), ("b0_l5pt", d_l5pt)):
        i, t = obs.spikes[name]
        N = run.circuit.population(name).N
        for k, (_, snap) in enumerate(obs.snapshots):
            start = ro.warmup + k * ro.presentation
            np.testing.assert_array_equal(snap[name]["count"],
                                          _counts_in(np.asarray(i), np.asarray(t), start + lag + d,
                                                     start + ro.presentation + d, ro.dt, N))


@pytest.mark.brian2
def test_a_model_stream_reads_each_population_with_its_latency():
    """A block's role names its population in every block; the delayed windows count the spikes
    of their delayed spans, the others as without latency (the same spikes: the run only goes on)."""
    run, obs = _observed("runtime", {"classes": 0.06, "l5pt": 0.03}, codegen="numpy")
    assert run.runner.latency == {"classes": 0.06, "b0_l5pt": 0.03}
    _check_delayed(run, obs, 0.06, 0.03)
    base, plain = _observed("runtime", None, codegen="numpy")
    for (_, a), (_, b) in zip(obs.snapshots, plain.snapshots, strict=True):
        for name in a:
            if name not in ("classes", "b0_l5pt"):
                np.testing.assert_array_equal(a[name]["count"], b[name]["count"], err_msg=name)
    res = ctmhsa.simulate_model(_model(), _tokens(2, (3, 2, 3)), presentation=0.2, codegen="numpy",
                                latency={"classes": 0.06}, **KW)
    assert res.config["latency"] == {"classes": 0.06} and res.config["lag"] == pytest.approx(0.1)
    assert res.logits.shape == (3, 2)


@pytest.mark.long
@pytest.mark.standalone
def test_a_compiled_model_stream_reads_each_population_with_its_latency():
    run, obs = _observed("cpp_standalone", {"classes": 0.06, "l5pt": 0.03})
    _check_delayed(run, obs, 0.06, 0.03)
    i, t = obs.spikes["classes"]
    assert np.max(t) > run.ro.warmup + 3 * run.ro.presentation   # the tail's spikes are kept
    # the cells count their own windows (no spike kept): their Fano sums are the recorded spikes'
    ro, lag = run.ro, run.runner.lag
    for name, d in (("classes", 0.06), ("b0_l5pt", 0.03)):
        i, t = map(np.asarray, obs.spikes[name])
        marks = stream_steps(ro.presentation, len(obs.snapshots), lag, run.runner._stream_timing(run.run_ro)[2], ro.dt) + round(d / ro.dt)
        _, sums = window_counts(i, np.rint(t / ro.dt).astype(np.int64) - round(ro.warmup / ro.dt),
                                run.circuit.population(name).N, marks)
        assert obs.fano[name] == pytest.approx(fano_from_sums({name: sums})[name], rel=1e-12), name
    # the undelayed populations, sampled on their own (sparser) clocks, read as without latency
    _, plain = _observed("cpp_standalone", None)
    for (_, a), (_, b) in zip(obs.snapshots, plain.snapshots, strict=True):
        for name in a:
            if name not in ("classes", "b0_l5pt"):
                assert a[name].keys() == b[name].keys()
                for v in a[name]:
                    np.testing.assert_array_equal(a[name][v], b[name][v], err_msg=f"{name}.{v}")
