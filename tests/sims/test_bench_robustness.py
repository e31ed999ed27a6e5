"""``ctmhsa bench robustness`` at a spiking level: a silent wrong answer is told from one run's
scatter and from a run whose diagnostics said it was wrong."""

import argparse

import numpy as np
import pytest

from ctmhsa.mapping.operating import OperatingRangeWarning
from ctmhsa.maths.codes import default_gains
from ctmhsa.sims.benchmarks import robustness
from ctmhsa.sims.benchmarks.robustness import REPEATS, SILENT, classify_spiking, draw_instance


def _instance(seed=3):
    return draw_instance(np.random.default_rng(seed))["kwargs"]


def _fake_runs(monkeypatch, ratios, said=()):
    """``_spiking_run`` returning stage ``x_tilde`` at ``ratios[k]`` times its floor in its k-th
    call (the last one repeated), with diagnostics ``said``; returns the seeds it was called with."""
    seeds = []

    def run(kw, neuron, duration, seed):
        r = ratios[min(len(seeds), len(ratios) - 1)]
        seeds.append(seed)
        return {"x_tilde": dict(nrmse=0.1 * r, noise_floor=0.1), "q": dict(nrmse=0.05, noise_floor=0.1)}, list(said)

    monkeypatch.setattr(robustness, "_spiking_run", run)
    return seeds


@pytest.mark.codegen_independent
def test_a_bias_without_a_diagnostic_is_a_failure(monkeypatch):
    seeds = _fake_runs(monkeypatch, [3.0])
    out = classify_spiking(_instance(), "escape", default_gains("escape"), 1.0, seed=7)
    assert out["outcome"] == "failure" and out["stage"] == "x_tilde" and out["runs"] == REPEATS + 1
    assert out["error"] == pytest.approx(3.0) and "no diagnostic" in out["message"]
    assert seeds == [7 + 10000 * r for r in range(REPEATS + 1)]   # distinct spike seeds


@pytest.mark.codegen_independent
def test_a_bias_the_circuit_flagged_is_not_a_failure(monkeypatch):
    _fake_runs(monkeypatch, [3.0], said=["OperatingRangeWarning: escape run outside its working range"])
    out = classify_spiking(_instance(), "escape", default_gains("escape"), 1.0, seed=7)
    assert out["outcome"] == "flagged" and out["flagged"] and out["message"].startswith("OperatingRangeWarning")


@pytest.mark.codegen_independent
def test_one_runs_scatter_is_pooled_away(monkeypatch):
    # the first run crosses, four more spike seeds at the floor: pooled sqrt((9 + 4) / 5) = 1.61
    _fake_runs(monkeypatch, [3.0, 1.0])
    out = classify_spiking(_instance(), "escape", default_gains("escape"), 1.0, seed=7)
    assert out["outcome"] == "at_floor" and out["first"] == pytest.approx(3.0)
    assert out["error"] == pytest.approx(np.sqrt((9 + REPEATS) / (REPEATS + 1)))
    # a run within SILENT is not repeated
    seeds = _fake_runs(monkeypatch, [0.9 * SILENT])
    assert classify_spiking(_instance(), "escape", default_gains("escape"), 1.0, seed=7)["runs"] == 1
    assert seeds == [7]


@pytest.mark.brian2
def test_a_real_escape_instance_is_sorted():
    # a small instance of the sweep (seed 3's first draw), one short escape run, its diagnostics caught
    kw = _instance()
    out = classify_spiking(kw, "escape", default_gains("escape"), 0.3, seed=1, repeats=1)
    assert out["outcome"] in ("at_floor", "flagged", "refused", "invalid"), out
    if out["outcome"] in ("at_floor", "flagged"):
        assert np.isfinite(out["error"]) and out["stage"] and out["runs"] in (1, 2)
        assert all(d.split(":")[0] in ("OperatingRangeWarning", "NoiseFloorWarning") for d in out["diagnostics"])


@pytest.mark.codegen_independent
def test_wide_is_refused_at_a_spiking_level():
    args = argparse.Namespace(level="lif", wide=True, duration=None, instances=1, seed=0, out=None)
    with pytest.raises(ValueError, match="--wide: lifts the interneurons' rate bound"):
        robustness.main(args)
    args = argparse.Namespace(level="escape", wide=False, duration=-1.0, instances=1, seed=0, out=None)
    with pytest.raises(ValueError, match="--duration: expected a positive time"):
        robustness.main(args)
    assert OperatingRangeWarning in robustness.DIAGNOSTICS


@pytest.mark.codegen_independent
def test_a_benchmark_that_found_failures_still_records_its_load(tmp_path):
    """A sweep that reports failures exits 1 and its JSON still carries the machine's load; a file
    the run did not write (a benchmark that stopped early) is not stamped."""
    import json
    import types

    from ctmhsa.sims.benchmarks import run_benchmark

    out = tmp_path / "sweep.json"

    def wrote(args):
        out.write_text(json.dumps({"benchmark": "fake", "counts": {"failure": 1}}))
        return 1

    assert run_benchmark(types.SimpleNamespace(main=wrote), argparse.Namespace(out=str(out))) == 1
    assert "machine" in json.loads(out.read_text())
    out.write_text(json.dumps({"benchmark": "fake", "old": True}))
    assert run_benchmark(types.SimpleNamespace(main=lambda args: 1), argparse.Namespace(out=str(out))) == 1
    assert json.loads(out.read_text()) == {"benchmark": "fake", "old": True}


@pytest.mark.codegen_independent
def test_a_stage_decoded_non_finite_is_never_at_its_floor(monkeypatch):
    import math

    def run(kw, neuron, duration, seed):
        return {"x_tilde": dict(nrmse=math.inf, noise_floor=0.1), "q": dict(nrmse=0.05, noise_floor=0.1)}, []

    monkeypatch.setattr(robustness, "_spiking_run", run)
    out = classify_spiking(_instance(), "lif", default_gains("lif"), 1.0, seed=3)
    assert out["outcome"] == "failure" and out["stage"] == "x_tilde"

    calls = []

    def crash_on_repeat(kw, neuron, duration, seed):
        calls.append(seed)
        if len(calls) > 1:
            raise RuntimeError("binary died")
        return {"x_tilde": dict(nrmse=0.3, noise_floor=0.1)}, []

    monkeypatch.setattr(robustness, "_spiking_run", crash_on_repeat)
    out = classify_spiking(_instance(), "lif", default_gains("lif"), 1.0, seed=3)
    assert out["outcome"] == "failure" and "binary died" in out["message"] and out["runs"] == 1
