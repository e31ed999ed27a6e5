"""Faults of the simulator's API (issue 27 item 3, issue 28 item 4): every bad argument is a
``ValueError``/``TypeError`` naming it, raised before a network is built; what a run simulates
and the clock of its spike times are stated."""

import os

import brian2 as b2
import numpy as np
import pytest

from conftest import random_problem
from ctmhsa.neurons.params import CellParams
from ctmhsa.sims import RunOptions, build_mhsa, simulate_mhsa
from ctmhsa.sims.result import SimulationResult
from ctmhsa.sims.sweep import sweep


@pytest.fixture
def tiny():
    X, _, WQ, WK, WV, WO = random_problem(n=3, H=1, dk=2, dv=2, de=3)
    return dict(X=X, WQ=WQ, WK=WK, WV=WV, WO=WO)


def accepted(tiny, **kw):
    """Validate and encode without building a network (the standalone runner builds in ``run``)."""
    return build_mhsa(**dict(tiny, device="cpp_standalone", **kw))


# 1. units -------------------------------------------------------------------------------------

@pytest.mark.codegen_independent
@pytest.mark.parametrize("name", ["X", "WQ", "WO"])
def test_tokens_and_weights_with_a_unit_are_refused(tiny, no_build, name):
    tiny[name] = tiny[name] * b2.mV
    with pytest.raises(ValueError, match=rf"^{name}: expected dimensionless numbers.*units of V$"):
        simulate_mhsa(**tiny, neuron="rate")


@pytest.mark.codegen_independent
def test_the_reference_refuses_tokens_with_a_unit_too(tiny):
    """``ctmhsa.linear_mhsa(X * mV, ...)`` used to read the tokens 1000 times too small."""
    import ctmhsa

    X, WQ, WK, WV, WO = (tiny[k] for k in ("X", "WQ", "WK", "WV", "WO"))
    with pytest.raises(ValueError, match=r"^X: expected dimensionless"):
        ctmhsa.linear_mhsa(X * b2.mV, WQ, WK, WV, WO)
    with pytest.raises(ValueError, match=r"^X: a masked array with 1 masked entry"):
        ctmhsa.linear_mhsa(np.ma.masked_array(X, mask=np.eye(*X.shape) * (np.arange(X.shape[1]) == 0)),
                           WQ, WK, WV, WO)


@pytest.mark.codegen_independent
def test_dimensionless_quantities_are_plain_numbers(tiny, no_build):
    sim = accepted(tiny, X=tiny["X"] * b2.Quantity(1.0), WV=b2.Quantity(tiny["WV"]), neuron="rate")
    np.testing.assert_array_equal(sim.inputs["X"], tiny["X"])
    np.testing.assert_array_equal(sim.inputs["WV"], tiny["WV"])


@pytest.mark.codegen_independent
@pytest.mark.parametrize("name, value", [("duration", 1 * b2.mV), ("dt", 1 * b2.Hz), ("warmup", 0.1 * b2.mV)])
def test_times_with_another_unit_are_refused(tiny, no_build, name, value):
    with pytest.raises(ValueError, match=rf"^{name}: "):
        simulate_mhsa(**tiny, neuron="escape", **{name: value})


# 2. masked arrays -----------------------------------------------------------------------------

@pytest.mark.codegen_independent
@pytest.mark.parametrize("name", ["X", "WK"])
def test_masked_arrays_are_refused(tiny, no_build, name):
    a = np.ma.masked_array(tiny[name], mask=np.zeros(np.shape(tiny[name]), bool))
    a[(0,) * a.ndim] = np.ma.masked
    tiny[name] = a
    with pytest.raises(ValueError, match=rf"^{name}: a masked array with 1 masked entr.*\.filled\(.*causal"):
        simulate_mhsa(**tiny, neuron="rate")


@pytest.mark.codegen_independent
def test_a_masked_array_with_nothing_masked_is_its_data(tiny, no_build):
    sim = accepted(tiny, X=np.ma.masked_array(tiny["X"]), neuron="rate")
    np.testing.assert_array_equal(sim.inputs["X"], tiny["X"])
    assert not isinstance(sim.inputs["X"], np.ma.MaskedArray)


# 3. record_spikes -----------------------------------------------------------------------------

@pytest.mark.codegen_independent
def test_unknown_population_in_record_spikes_is_refused(tiny, no_build):
    with pytest.raises(ValueError, match=r"^record_spikes: .*'nope'.*'l23'.*'nucleus2'"):
        simulate_mhsa(**tiny, neuron="escape", record_spikes=["nope"])


@pytest.mark.codegen_independent
@pytest.mark.parametrize("record", [True, ("l23",)])
def test_record_spikes_at_the_rate_level_is_refused(tiny, no_build, record):
    with pytest.raises(ValueError, match="^record_spikes: the rate level has no spikes"):
        simulate_mhsa(**tiny, neuron="rate", record_spikes=record)


# 4. minimum measurement window ----------------------------------------------------------------

@pytest.mark.codegen_independent
def test_a_window_shorter_than_the_minimum_is_refused(tiny, no_build):
    with pytest.raises(ValueError, match=r"^duration: 0.0015 s .*minimum measurement window of 0.1 s"):
        simulate_mhsa(**tiny, neuron="escape", duration=0.0015)
    accepted(tiny, neuron="escape", duration=0.1)          # the minimum itself is fine


@pytest.mark.codegen_independent
def test_a_noise_floor_without_counts_is_unknown_not_zero():
    z = np.zeros((1, 3, 2))
    res = SimulationResult(x_tilde=z, reference=z, stages={"q": z + 1}, reference_stages={"q": z + np.arange(2)},
                           rates={}, spikes={}, level="escape", config={}, noise_variance={"q": z})
    assert np.isnan(res.metrics()["q"]["noise_floor"])
    rate = SimulationResult(x_tilde=z, reference=z, stages={"q": z}, reference_stages={"q": z}, rates={},
                            spikes={}, level="rate", config={})
    assert rate.metrics()["q"]["noise_floor"] == 0.0      # the rate level has no spike-count noise


# 5. dt bounded by the cells' time constants ---------------------------------------------------

@pytest.mark.codegen_independent
@pytest.mark.parametrize("neuron, dt, bound", [("escape", 0.1, "0.001"), ("escape", 2e-3, "0.001"),
                                               ("rate", 6e-3, "0.005"), ("lif", 2e-3, "0.001")])
def test_dt_beyond_the_cells_time_constants_is_refused(tiny, no_build, neuron, dt, bound):
    with pytest.raises(ValueError, match=rf"^dt: {dt:g} s .*{bound} s"):
        simulate_mhsa(**tiny, neuron=neuron, dt=dt)


@pytest.mark.codegen_independent
def test_dt_bound_follows_the_cell_parameters(tiny, no_build):
    accepted(tiny, neuron="rate", dt=5e-3)                  # 10 ms cells over the rate level's 2 steps
    with pytest.raises(ValueError, match=r"^dt: 0.003 s .*0.0025 s .*tau_m"):
        simulate_mhsa(**tiny, neuron="rate", dt=3e-3, params=CellParams(tau_m=5e-3))
    with pytest.raises(ValueError, match=r"^dt: 0.001 s .*0.0002 s .*tau_syn"):
        simulate_mhsa(**tiny, neuron="escape", params=CellParams(tau_syn=1e-3))


# 6. run-time estimate -------------------------------------------------------------------------

@pytest.mark.codegen_independent
@pytest.mark.parametrize("change", [dict(dt=1e-9), dict(duration=1e7)])
def test_runs_estimated_past_max_runtime_are_refused(tiny, no_build, change):
    with pytest.raises(ValueError, match=r"^max_runtime: .*estimated .* steps .*max_runtime=None"):
        simulate_mhsa(**tiny, neuron="escape", **change)


@pytest.mark.codegen_independent
def test_max_runtime_can_be_raised_or_disabled(tiny, no_build):
    sim = accepted(tiny, neuron="escape", duration=1e6, max_runtime=None)
    assert sim.runtime_estimate > 3600
    accepted(tiny, neuron="escape", duration=1e6, max_runtime=np.inf)
    with pytest.raises(ValueError, match="^max_runtime: .* past max_runtime = 60 s"):
        accepted(tiny, neuron="escape", duration=1e5, max_runtime=60)
    for bad in (0, -1.0, np.nan, "1h", True):
        with pytest.raises((ValueError, TypeError), match="^max_runtime: "):
            RunOptions(max_runtime=bad)


# 7. seeds -------------------------------------------------------------------------------------

@pytest.mark.codegen_independent
@pytest.mark.parametrize("device", ["runtime", "cpp_standalone"])
@pytest.mark.parametrize("seed", [2**32, 2**40, True, -1, 1.0])
def test_seeds_are_checked_once_for_every_device(tiny, no_build, device, seed):
    with pytest.raises((ValueError, TypeError), match=r"^seed: .*2\*\*32"):
        simulate_mhsa(**tiny, neuron="escape", seed=seed, device=device)


@pytest.mark.codegen_independent
def test_largest_seed_is_accepted(tiny, no_build):
    assert accepted(tiny, neuron="escape", seed=np.uint64(2**32 - 1)).run_options.seed == 2**32 - 1


# 8. max_memory --------------------------------------------------------------------------------

@pytest.mark.codegen_independent
def test_max_memory_nan_is_refused_and_inf_means_no_limit(tiny, no_build):
    with pytest.raises(ValueError, match="^max_memory: expected a positive number of bytes"):
        simulate_mhsa(**tiny, neuron="rate", max_memory=np.nan)
    assert accepted(tiny, neuron="rate", max_memory=np.inf).run_options.max_memory == np.inf


@pytest.mark.codegen_independent
def test_max_memory_counts_what_a_stream_keeps(tiny, no_build):
    # a stream's window values stay until its run ends: a long stream of a small network is
    # refused before anything is built, naming the stream (the network alone fits)
    stream = dict(tiny, X=np.stack([tiny["X"]] * 5000))
    with pytest.raises(ValueError, match=r"^max_memory: .*and a stream of 5000 presentations keeps .* or the stream"):
        build_mhsa(**stream, neuron="escape", presentation=0.2, max_memory=0.27 * 2**30)
    with pytest.raises(AssertionError, match="a network was built"):   # (no_build): one presentation fits
        build_mhsa(**dict(stream, X=stream["X"][:1]), neuron="escape", presentation=0.2, max_memory=0.27 * 2**30)


# 9. sweep: results keyed by the items' parameters ---------------------------------------------

@pytest.mark.brian2
def test_sweep_reuses_unchanged_items_and_recomputes_changed_ones(tiny, tmp_path):
    from ctmhsa.sims.io import load

    items = [dict(tiny, neuron="rate", duration=1.0), dict(tiny, neuron="rate", duration=1.0, phi="softplus")]
    paths = sweep(items, scheduler="serial", out_dir=str(tmp_path))
    stamp = [os.path.getmtime(os.path.join(p, "provenance.json")) for p in paths]
    changed = [items[0], dict(items[1], X=tiny["X"][::-1].copy())]     # same shapes, other tokens
    again = sweep(changed, scheduler="serial", out_dir=str(tmp_path))
    assert again == paths
    assert os.path.getmtime(os.path.join(again[0], "provenance.json")) == stamp[0]    # reused
    np.testing.assert_allclose(load(again[1]).reference, load(again[1]).x_tilde, atol=1e-8)
    np.testing.assert_allclose(load(again[1]).stages["q"][0], tiny["X"][::-1] @ tiny["WQ"][0].T, atol=1e-8)
    stamp1 = os.path.getmtime(os.path.join(again[1], "provenance.json"))
    sweep(changed, scheduler="serial", out_dir=str(tmp_path))                         # nothing changed
    assert os.path.getmtime(os.path.join(again[1], "provenance.json")) == stamp1


@pytest.mark.codegen_independent
def test_sweep_refuses_an_item_path_it_did_not_write_before_running(tiny, tmp_path, monkeypatch):
    from ctmhsa.sims.io import OutputError

    def boom(*a, **k):
        raise AssertionError("a sweep item ran before its output path was checked")
    monkeypatch.setattr("ctmhsa.sims.sweep._simulate_item", boom)
    (tmp_path / "item_1").mkdir()
    (tmp_path / "item_1" / "thesis.tex").write_text("mine")
    items = [dict(tiny, neuron="rate"), dict(tiny, neuron="rate")]
    with pytest.raises(OutputError, match=r"out_dir \(item 1\).*item_1"):
        sweep(items, scheduler="serial", out_dir=str(tmp_path))
    assert (tmp_path / "item_1" / "thesis.tex").read_text() == "mine" and not (tmp_path / "item_0").exists()


# 10. scheduler --------------------------------------------------------------------------------

@pytest.mark.codegen_independent
def test_unknown_scheduler_is_refused(tiny, no_build, monkeypatch):
    with pytest.raises(ValueError, match=r"^scheduler: .*'serial'.*'local'.*'nonsense'"):
        RunOptions(scheduler="nonsense")

    def boom(*a, **k):
        raise AssertionError("a sweep item ran before the scheduler was checked")
    monkeypatch.setattr("ctmhsa.sims.sweep._simulate_item", boom)
    with pytest.raises(ValueError, match=r"^scheduler: .*'serial'.*'local'.*'nonsense'"):
        sweep([dict(tiny, neuron="rate")], scheduler="nonsense")
    RunOptions(scheduler="tcp://127.0.0.1:8786")        # an address is a scheduler


# 11. warm-up explicit, one clock --------------------------------------------------------------

@pytest.mark.brian2
def test_warmup_is_explicit_and_spike_times_give_the_rates(tiny):
    sim = build_mhsa(**tiny, neuron="escape", record_spikes=True, codegen="numpy", seed=5)
    res = sim.run(200 * b2.ms, warmup=100 * b2.ms)
    assert (res.warmup, res.duration, res.t_start, res.t_stop) == (0.1, 0.2, 0.1, pytest.approx(0.3))
    assert float(sim.network.t_) == pytest.approx(res.t_stop)          # simulated: warm-up + window
    assert res.config["warmup"] == 0.1 and res.config["duration"] == 0.2
    early = 0
    for name, (i, t) in res.spikes.items():
        pop = sim.circuit.populations[name]
        early += int(np.sum(t < res.t_start))
        wi, wt = res.window_spikes(name)
        assert np.all((wt >= res.t_start - 1e-9) & (wt < res.t_stop))
        rate = np.bincount(wi, minlength=pop.N) / res.duration
        np.testing.assert_allclose(pop.to_dense(rate, fill=np.nan), res.rates[name], rtol=0, atol=1e-9)
    assert early > 0                                    # warm-up spikes are kept, before t_start


@pytest.mark.codegen_independent
def test_warmup_at_the_rate_level_is_refused(tiny, no_build):
    with pytest.raises(ValueError, match="^warmup: the rate level has no measurement window"):
        simulate_mhsa(**tiny, neuron="rate", warmup=0.5)
    assert accepted(tiny, neuron="rate", warmup=0.0).run_options.warmup == 0.0


@pytest.mark.codegen_independent
def test_run_checks_its_duration_and_warmup_before_running(tiny, no_build):
    sim = accepted(tiny, neuron="escape")
    with pytest.raises(ValueError, match="^duration: 0.01 s .*minimum measurement window"):
        sim.run(10 * b2.ms)
    with pytest.raises(ValueError, match="^warmup: "):
        sim.run(warmup=-1.0)
