"""``bench accuracy``'s summary over seeds: each stage's error pooled against its floor."""

import numpy as np
import pytest

from ctmhsa.sims.benchmarks.accuracy import T95, pooled, t95, worst_stage


def _run(case, level, seed, nrmse, floor):
    metrics = {st: dict(nrmse=e, noise_floor=f) for st, e, f in zip(("q", "Z", "x_tilde"), nrmse, floor)}
    return dict(case=case, level=level, P=1, copies="readout", seed=seed,
                checkpoints=[dict(T=1.0, metrics={}), dict(T=5.0, metrics=metrics)])


@pytest.mark.codegen_independent
def test_pooled_ratio_is_the_rms_error_over_the_rms_floor_per_case_and_level():
    runs = [_run("cross", "lif", 1, (0.1, 0.3, 0.2), (0.1, 0.1, 0.2)),
            _run("cross", "lif", 2, (0.2, 0.1, 0.2), (0.1, 0.1, 0.1)),
            _run("cross", "escape", 1, (0.1, 0.1, 0.1), (0.1, 0.2, 0.1))]
    groups = pooled(runs)
    assert [(g["case"], g["level"], g["device"], g["seeds"], g["T"]) for g in groups] == [
        ("cross", "lif", "runtime", [1, 2], 5.0), ("cross", "escape", "runtime", [1], 5.0)]
    compiled = dict(_run("cross", "lif", 3, (0.1, 0.1, 0.1), (0.1, 0.1, 0.1)), device="cpp_standalone")
    assert len(pooled(runs + [compiled])) == 3    # another device's draws: a group of its own
    lif = groups[0]["ratio"]
    np.testing.assert_allclose(lif["q"], np.sqrt((0.01 + 0.04) / 0.02))
    np.testing.assert_allclose(lif["Z"], np.sqrt((0.09 + 0.01) / 0.02))
    np.testing.assert_allclose(lif["x_tilde"], np.sqrt(0.08 / 0.05))
    assert groups[1]["ratio"]["Z"] == pytest.approx(0.5)


@pytest.mark.codegen_independent
def test_worst_stage_skips_unknown_floors():
    run = _run("linear", "lif", 3, (0.1, 0.5, 0.3), (0.1, float("nan"), 0.2))
    assert worst_stage(run) == ("x_tilde", pytest.approx(1.5))
    unknown = _run("linear", "lif", 3, (0.1, 0.5, 0.3), (float("nan"),) * 3)
    stage, ratio = worst_stage(unknown)
    assert stage == "" and np.isnan(ratio)
    assert np.isnan(pooled([run])[0]["ratio"]["Z"])


@pytest.mark.codegen_independent
def test_pooled_interval_is_a_jackknife_over_inputs():
    same = [_run("cross", "lif", s, (0.1, 0.2, 0.3), (0.1, 0.1, 0.1)) for s in (1, 2, 3, 4)]
    g = pooled(same)[0]
    for st, r in g["ratio"].items():                        # every input alike: no scatter
        assert g["interval"][st] == pytest.approx([r, r])
    spread = [_run("cross", "lif", s, (0.1 * s, 0.1, 0.1), (0.1, 0.1, 0.1)) for s in (1, 2, 3, 4, 5)]
    g = pooled(spread)[0]
    r2 = np.arange(1, 6) ** 2.0                             # each input's ratio², equal floors: the
    half = t95(4) * np.std(r2, ddof=1) / np.sqrt(5)         # jackknife of a mean is its standard error
    np.testing.assert_allclose(g["interval"]["q"], np.sqrt([max(r2.mean() - half, 0), r2.mean() + half]))
    assert g["ratio"]["q"] == pytest.approx(np.sqrt(r2.mean()))
    assert all(np.isnan(v).all() for v in pooled(spread[:2])[0]["interval"].values())   # under 3 inputs
    # two spike seeds of one input are left out together: three inputs, not six runs
    twice = spread[:3] + [dict(r, spike_seed=r["seed"] + 10000) for r in spread[:3]]
    g2 = pooled(twice)[0]
    assert g2["spike_seeds"] == [1, 2, 3, 10001, 10002, 10003]
    np.testing.assert_allclose(g2["interval"]["q"], pooled(spread[:3])[0]["interval"]["q"])


@pytest.mark.codegen_independent
def test_t95_matches_its_table_and_refuses_no_degrees_of_freedom():
    assert t95(5) == 2.015 and t95(1000) == 1.645
    assert T95[10] > t95(11) > T95[12]
    with pytest.raises(ValueError, match="df"):
        t95(0)


@pytest.mark.codegen_independent
def test_decompose_splits_a_known_bias_from_a_known_spread():
    from ctmhsa.sims.benchmarks.accuracy import decompose
    rng = np.random.default_rng(3)
    ref = {"y": rng.normal(size=(40, 50)), "s": rng.normal(size=2000)}
    scale = {k: float(np.std(v)) for k, v in ref.items()}
    K, sigma, bias = 8, 0.2, 0.1
    decoded = [{"y": ref["y"] + sigma * rng.normal(size=(40, 50)),                     # noise only
                "s": ref["s"] + bias + sigma * rng.normal(size=2000)} for _ in range(K)]   # and a bias
    floors = [{"y": 0.1, "s": sigma / scale["s"]} for _ in range(K)]
    out = decompose(decoded, ref, floors)
    assert out["y"]["spread"] == pytest.approx(sigma / scale["y"], rel=0.03)
    assert out["y"]["bias"] < 0.3 * out["y"]["resolution"]
    assert out["y"]["noise"] == pytest.approx(sigma / scale["y"] / 0.1, rel=0.03)
    assert out["s"]["bias"] == pytest.approx(bias / scale["s"], rel=0.05)
    assert out["s"]["noise"] == pytest.approx(1.0, rel=0.03)
    assert out["s"]["resolution"] == pytest.approx(out["s"]["spread"] / np.sqrt(K))
    with pytest.raises(ValueError, match="decoded"):
        decompose(decoded[:1], ref, floors[:1])


@pytest.mark.codegen_independent
def test_decompose_leaves_out_entries_not_decoded_in_every_seed():
    from ctmhsa.sims.benchmarks.accuracy import decompose
    ref = {"kappa": np.array([1.0, 2.0, 3.0, 4.0])}
    decoded = [{"kappa": np.array([1.0, 2.0, 3.0, np.nan])}, {"kappa": np.array([1.0, 2.0, 3.0, 4.0])}]
    out = decompose(decoded, ref, [{"kappa": 0.1, "Z": 0.1}] * 2)
    assert set(out) == {"kappa"} and out["kappa"]["spread"] == 0 and out["kappa"]["bias"] == 0


@pytest.mark.codegen_independent
def test_bench_accuracy_spike_seeds_run_each_input_k_times_and_split_its_error(tmp_path, monkeypatch, capsys):
    import json

    import ctmhsa.sims.benchmarks.accuracy as A
    from ctmhsa.sims.cli import main

    seen = []

    def fake(case, level, P, times, seed=0, spike_seed=None, stages_out=None, **kw):
        seen.append((seed, spike_seed))
        err = 0.1 if spike_seed < 10000 else -0.1           # two seeds 0.2 apart
        stages_out.update(decoded={"q": np.full(4, 1.0 + err)}, reference={"q": np.array([0.0, 1.0, 2.0, 3.0])})
        m = dict(nrmse=0.1, r=0.99, noise_floor=0.1)
        return dict(case=case, level=level, P=P, seed=seed, spike_seed=spike_seed, neurons=10, synapses=20,
                    wall_s=0.1, timings=dict(compile=0.0, run=0.1), checkpoints=[dict(T=1.0, metrics=dict(q=m))])

    monkeypatch.setattr(A, "run_case", fake)
    out = tmp_path / "acc.json"
    assert main(["bench", "accuracy", "--cases", "cross", "--levels", "lif", "--P", "1", "--times", "1",
                 "--seeds", "3", "4", "--spike-seeds", "2", "--out", str(out)]) == 0
    assert seen == [(3, 3), (3, 10003), (4, 4), (4, 10004)]
    doc = json.loads(out.read_text())
    assert [(p["seed"], p["spike_seeds"]) for p in doc["decomposition"]] == [(3, [3, 10003]), (4, [4, 10004])]
    q = doc["decomposition"][0]["stages"]["q"]
    assert q["noise"] == pytest.approx(np.sqrt(0.02) / np.std([0.0, 1.0, 2.0, 3.0]) / 0.1)
    assert "Bias and noise over spike seeds" in capsys.readouterr().out


@pytest.mark.codegen_independent
def test_split_pools_each_inputs_bias_and_noise_in_units_of_its_floor():
    from ctmhsa.sims.benchmarks.accuracy import split
    part = lambda seed, b2, noise, floor: dict(case="causal", level="lif", P=1, device="runtime", seed=seed,
                                               stages={"y": dict(bias_sq=b2, noise=noise, floor=floor)})
    g, = split([part(1, 0.01 * 0.04, 1.0, 0.2), part(2, -0.01 * 0.01, 1.2, 0.1)])
    assert g["seeds"] == [1, 2]
    assert g["stages"]["y"]["bias_sq"] == pytest.approx((0.01 - 0.01) / 2)
    assert g["stages"]["y"]["noise_sq"] == pytest.approx((1.0 + 1.44) / 2) and g["stages"]["y"]["inputs"] == 2
