"""``ctmhsa bench timescale --quick``: streams of token sets, static comparison and latency, one small run."""

import json

import numpy as np
import pytest

from ctmhsa.sims import CircuitOptions
from ctmhsa.sims.cli import main


@pytest.mark.brian2
@pytest.mark.long   # 26 s on 2 busy cores; `ctmhsa bench timescale` runs it in full
def test_bench_timescale_quick_writes_table_json_and_figure(tmp_path, capsys):
    out = tmp_path / "timescale.json"
    assert main(["bench", "timescale", "--quick", "--codegen", "numpy", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "timescale" and doc["quick"] is True and "machine" in doc
    assert doc["T"] == 2 and doc["presentations"] == [0.05, 0.1] and doc["P"] == [1]
    assert {(r["mode"], r["presentation"]) for r in doc["rows"]} == {
        (m, p) for m in ("streamed", "static") for p in (0.05, 0.1)}
    neurons = CircuitOptions(neuron="escape").describe(8, 8, 8, 8, H=2).n_neurons()   # the default problem
    for r in doc["rows"]:
        assert r["neurons"] == neurons and len(r["per_presentation"]) == 2
        assert r["window"] == [pytest.approx(min(0.05, r["presentation"] / 2)), pytest.approx(r["presentation"])]
        assert 0 < r["nrmse_median"] < 5 and -1 <= r["r_median"] <= 1
        assert (r["paired_ratio_median"] > 0) if r["mode"] == "streamed" else "paired_ratio_median" not in r
    rate, esc = doc["latency"]["rate"], doc["latency"]["escape"]
    # the rate level is deterministic: it settles on both plateaus and crosses 50 % before 90 %
    f = np.asarray(rate["fraction"])
    assert abs(f[np.asarray(rate["t"]) < 0][-1]) < 0.02 and abs(f[-1] - 1) < 0.02
    assert 0 < rate["t50"] < rate["t90"] < 0.2
    assert esc["nucleus2_spikes"] > 0 and len(esc["t"]) == len(esc["fraction"]) == 80
    assert (tmp_path / "timescale.png").stat().st_size > 10_000
    text = capsys.readouterr().out
    assert "streamed NRMSE" in text and "latency from the switch" in text


@pytest.mark.long   # 12 s: the suite's budget on 2 cores (the quick benchmark above stays)
@pytest.mark.brian2
def test_bench_timescale_runs_integrators_with_several_latency_seeds(tmp_path):
    """--firing and --high-conductance reach every run, the latency's seeds included (each
    seed's run rebuilt with the same cells)."""
    out = tmp_path / "t.json"
    assert main(["bench", "timescale", "--quick", "--codegen", "numpy", "--firing", "population",
                 "--high-conductance", "--presentations", "0.05", "--static", "none", "--latency-seeds", "2",
                 "--no-figure",
                 "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["firing"] == "population" and doc["params"]["tau_m"] == 0.005
    assert doc["latency"]["escape"]["seeds"] == 2 and len(doc["latency"]["escape"]["per_seed_t90"]) == 2
    assert [r["mode"] for r in doc["rows"]] == ["streamed"]
    for r in doc["rows"]:
        assert r["nrmse_max"] >= r["nrmse_median"] and r["r_min"] <= r["r_median"]
