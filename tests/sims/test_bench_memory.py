"""``ctmhsa bench memory``: the key-value memory's decay, capacity and latency (rate level), a
tiny run through the command line; its parts and its figure from a JSON alone."""

import argparse
import json

import numpy as np
import pytest

from ctmhsa.maths.reference import memory_attention
from ctmhsa.sims.benchmarks import memory as bench


def _args(**kw):
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args([f"--{k.replace('_', '-')}={v}" for k, v in kw.items()])


@pytest.mark.codegen_independent
def test_only_the_measured_levels_are_accepted_naming_the_flag():
    assert bench.settings(_args())["dk"] == [4, 8]
    with pytest.raises(ValueError, match="--neuron: the memory benchmark measures the rate and escape levels.*'lif'"):
        bench.settings(_args(neuron="lif"))
    with pytest.raises(ValueError, match="--dk"):
        bench.settings(_args(dk=17))
    with pytest.raises(ValueError, match="--prediction-seeds: expected an integer >= 0"):
        bench.settings(_args(prediction_seeds=-1))
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    assert bench.settings(parser.parse_args(["--quick"]))["prediction_seeds"] == 0


@pytest.mark.codegen_independent
def test_the_escape_level_takes_its_options_and_refuses_the_rate_levels_parts():
    s = bench.settings(_args(neuron="escape", firing="population", cells="fast"))
    assert s["circuit"]["P"] == bench.SPIKING["P"] and s["circuit"]["firing"] == "population"
    assert s["circuit"]["params"].tau_m == 5e-3 and s["prediction_seeds"] == 0 and not s["latency"]
    assert bench.settings(_args())["circuit"] == {} and bench.settings(_args())["latency"]
    with pytest.raises(ValueError, match="--P: an escape-level option; --neuron is 'rate'"):
        bench.settings(_args(P=4))
    with pytest.raises(ValueError, match="--firing: an escape-level option"):
        bench.settings(_args(firing="population"))
    for flag in ("prediction_seeds", "latency_T", "repeats", "set_size"):
        with pytest.raises(ValueError, match=f"--{flag.replace('_', '-')}: the predictions and the latency"):
            bench.settings(_args(neuron="escape", **{flag: 2}))


@pytest.mark.codegen_independent
def test_queries_are_the_stored_keys_and_the_silent_tokens_write_nothing():
    X, Y, W, values = bench.pair_streams(3, 4, np.random.default_rng(0))
    ref = memory_attention(X, *W, Y=Y)
    np.testing.assert_allclose(ref["q"][0, 3:], ref["k"][0, :3], atol=1e-12)   # q = k_i
    np.testing.assert_allclose(ref["v"][0, :3], values)
    assert np.all(ref["M"][0, 3:] == ref["M"][0, 2])                             # nothing more written
    assert bench.recall_fraction(values, values) == 1.0
    assert bench.recall_fraction(values[::-1], values) == pytest.approx(1 / 3)
    assert bench.recalled(values[[0, 2, 1]], values).tolist() == [True, False, False]
    assert bench.fit_forget(0.8 ** np.arange(5)) == pytest.approx(0.8, rel=1e-12)
    assert bench.point90([1, 2, 4], [1.0, 0.95, 0.5]) == 4 and bench.point90([1, 2], [1.0, 1.0]) is None


@pytest.mark.brian2
@pytest.mark.long   # 8 s: every part of the quick bench; its parts' rows and the figure are tested below
def test_bench_memory_writes_table_json_and_figure(tmp_path, capsys):
    from ctmhsa.sims.cli import main

    out = tmp_path / "memory.json"
    assert main(["bench", "memory", "--quick", "--tau-mem", "0.5", "--lags", "2", "--dk", "2", "--pairs", "1",
                 "--reference-trials", "5", "--lag-pairs", "2", "--latency-T", "1", "--set-size", "2", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "memory" and doc["quick"] is True and doc["neuron"] == "rate" and "machine" in doc
    for r in doc["decay"]:
        assert abs(r["tau_measured"] / r["tau_mem"] - 1) < 0.10 and len(r["component"]) == 3
    assert [r["tau_mem"] for r in doc["decay"]] == [0.5]
    assert [(r["N"], r["dk"], r["recall"]) for r in doc["capacity"]] == [(1, 2, 1.0)]   # one pair: always recalled
    assert doc["reference_capacity"][0]["recall"][0] == 1.0
    assert [(r["tau_mem"], r["lags"]) for r in doc["lag"]] == [(None, [1, 2]), (0.5, [1, 2])]
    assert all(r["recalled"] == r["recalled_reference"] for r in doc["lag"])   # the circuit as the reference
    ref = {r["tau_mem"]: r for r in doc["lag_reference"]}
    assert set(ref) == {None, 0.5} and ref[0.5]["forget"] == pytest.approx(np.exp(-0.3 / 0.5))
    lat = {r["circuit"]: r for r in doc["latency"]}
    assert set(lat) == {"memory", "quadratic"} and lat["quadratic"]["set_size"] == 2
    assert lat["memory"]["neurons_per_head"] == 3 * 2 * 8 * 8 + 2 * 8   # write, memory, read-out; L5 PT
    assert all(r["s_per_token"] > 0 and r["x_tilde_rel_error"] < 1e-3 for r in lat.values())
    assert (tmp_path / "memory.png").stat().st_size > 10_000
    text = capsys.readouterr().out
    assert "tau measured" in text and "capacity" in text and "recall vs lag" in text and "s/token" in text


@pytest.mark.codegen_independent
def test_recall_by_lag_favours_recent_pairs_only_with_forgetting():
    """The reference over instances: without forgetting every lag is alike (the pairs weigh
    the same); with forgetting the last pair written (lag 1) is recalled best."""
    flat = bench.reference_lag(4, 4, None, 60, 0.3, seed=2)
    fading = bench.reference_lag(4, 4, 0.5, 60, 0.3, seed=2)
    assert flat["lags"] == [1, 2, 3, 4] and flat["forget"] == 1.0
    assert fading["recall"][0] > fading["recall"][-1] + 0.4
    assert max(flat["recall"]) - min(flat["recall"]) < 0.25


@pytest.mark.brian2
def test_delay_activity_holds_between_writes_and_fades_by_lambda_per_token():
    """The predictions' delay part: after the writes the integrators' rates hold still between
    two gate windows, and fall by λ per zero token."""
    r = bench.delay_row(0, 0.5, 0.3, seed=1, K=1, D=3)
    assert r["hold_change"] < 1e-9 and 0.3 < r["active"] <= 0.5   # one of each ON/OFF pair at most
    assert r["mean_rate"][-1] / r["mean_rate"][1] == pytest.approx(np.exp(-0.3 / 0.5) ** 2, rel=1e-6)


@pytest.mark.codegen_independent
def test_the_figure_draws_from_a_json_alone(tmp_path):
    from ctmhsa.figures.memory import draw

    decay = dict(tau_mem=1.0, forget=0.74, lags=[0, 1, 2], component=[1.0, 0.74, 0.5476], tau_measured=1.0)
    capacity = [dict(N=N, dk=4, recall=r, recall_reference=r) for N, r in ((1, 1.0), (2, 0.5))]
    latency = [dict(circuit=c, neurons=100, neurons_per_head=40, s_per_token=0.1) for c in ("memory", "quadratic")]
    doc = dict(benchmark="memory", quick=True, neuron="rate", presentation=0.3, seed=1, recall_level=0.9,
               decay=[decay], capacity=capacity, latency=latency,
               reference_capacity=[dict(dk=4, pairs=[1, 2, 4], trials=5, recall=[1.0, 0.6, None], n90=2)],
               lag=[dict(tau_mem=t, recalled=[True, False], recalled_reference=[True, False]) for t in (None, 1.0)],
               lag_reference=[dict(N=2, dk=4, tau_mem=t, forget=f, trials=5, lags=[1, 2], recall=[0.7, r])
                              for t, f, r in ((None, 1.0, 0.7), (1.0, 0.74, 0.4))])
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))
    png = draw(str(path))
    assert png == str(tmp_path / "m.png") and (tmp_path / "m.png").stat().st_size > 10_000
    assert "QUICK" in (tmp_path / "m.txt").read_text()


@pytest.mark.brian2
def test_bench_stream_writes_its_rows(tmp_path, capsys):
    """``ctmhsa bench stream`` at the rate level on a short stream: one row per copies x write
    gain, x̃ exact, the per-token errors and rates in the JSON."""
    import json

    from ctmhsa.sims.cli import main

    out = tmp_path / "stream.json"
    assert main(["bench", "stream", "--neuron", "rate", "--T", "3", "--P", "1", "--rho-outer", "20", "40",
                 "--presentation", "0.3", "--codegen", "numpy", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [(r["P"], r["rho_outer"], r["firing"]) for r in doc["rows"]] == [(1, 20.0, "poisson"), (1, 40.0, "poisson")]
    assert doc["cells"] == "default"
    for r in doc["rows"]:
        assert r["nrmse"] < 1e-5 and len(r["per_token"]) == 3 and r["floor"] == 0.0 and r["neurons"] > 0
        assert set(r["rates"]) == {"outer", "memory", "readout", "l5pt", "nucleus2"}
    assert "target: x̃ NRMSE <= 0.1" in capsys.readouterr().out


@pytest.mark.codegen_independent
def test_bench_stream_refuses_a_firing_mode_without_spikes(tmp_path, capsys):
    from ctmhsa.sims.benchmarks import stream

    from ctmhsa.sims.cli import main

    assert stream.cell_params("fast").tau_m == 5e-3 and stream.cell_params("default").tau_m > 5e-3
    assert main(["bench", "stream", "--neuron", "rate", "--firing", "population", "--out", str(tmp_path / "s.json")]) != 0
    assert "--firing: how the escape level's cells fire; --neuron is 'rate'" in capsys.readouterr().err
    assert not (tmp_path / "s.json").exists()


@pytest.mark.codegen_independent
@pytest.mark.parametrize("flags, match", [
    (["--neuron", "lif", "--firing", "population", "--presentation", "0.5"], "--firing: firing: 'population'"),
    (["--neuron", "lif"], "--presentation: 0.2 s is shorter than the lif level's shortest, 0.42 s"),
])
def test_bench_stream_refuses_at_lif_naming_the_flag_before_a_run(flags, match, tmp_path, capsys, monkeypatch):
    from ctmhsa.sims.benchmarks import stream
    from ctmhsa.sims.cli import main

    monkeypatch.setattr(stream, "row", lambda *a, **k: pytest.fail("a run started"))
    assert main(["bench", "stream", *flags, "--out", str(tmp_path / "s.json")]) != 0
    assert match in capsys.readouterr().err and not (tmp_path / "s.json").exists()
