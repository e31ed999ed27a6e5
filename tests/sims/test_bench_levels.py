"""``ctmhsa bench levels``: escape and lif interleaved, the ratio and the accuracy of each."""

import json

import pytest

from ctmhsa.sims.cli import main


@pytest.mark.brian2
@pytest.mark.long   # 9 s on 2 busy cores; `ctmhsa bench levels` runs it in full
def test_bench_levels_writes_ratio_and_accuracy(tmp_path, capsys):
    out = tmp_path / "levels.json"
    rc = main(["bench", "levels", "--n", "2", "--d", "2", "--duration", "0.2", "--repeats", "1",
               "--device", "runtime", "--lif-dt", "5e-4", "--out", str(out)])
    assert rc == 0
    doc = json.load(open(out))
    rows = {r["neuron"]: r for r in doc["rows"]}
    assert set(rows) == {"escape", "lif"} and rows["escape"]["vs_escape"] == 1.0
    assert rows["lif"]["dt"] == 5e-4 and rows["lif"]["vs_escape"] > 0
    assert rows["lif"]["vs_escape"] == rows["lif"]["run_per_bio_s"] / rows["escape"]["run_per_bio_s"]
    assert "x_tilde" in rows["lif"]["error_over_floor"] and rows["lif"]["x_tilde_floor"] > 0
    assert "x escape" in capsys.readouterr().out


@pytest.mark.codegen_independent
def test_bench_accuracy_records_a_refused_input_and_runs_the_rest(tmp_path, monkeypatch):
    """An input the encoder refuses (OperatingRangeError, before anything is built) is recorded
    with its reason; the other runs go on and are written."""
    import json

    import ctmhsa.sims.benchmarks.accuracy as A
    from ctmhsa.mapping.operating import OperatingRangeError
    from ctmhsa.sims.cli import main

    def fake(case, level, P, times, seed=0, **kw):
        if seed == 1:
            raise OperatingRangeError("macrocolumn (head 0, query 0) needs a division of 2.5")
        m = dict(nrmse=0.1, r=0.99, noise_floor=0.1)
        return dict(case=case, level=level, P=P, seed=seed, neurons=10, synapses=20, wall_s=0.1,
                    timings=dict(compile=0.0, run=0.1), checkpoints=[dict(T=1.0, metrics=dict(q=m))])

    monkeypatch.setattr(A, "run_case", fake)
    out = tmp_path / "acc.json"
    assert main(["bench", "accuracy", "--cases", "causal", "--levels", "escape", "--P", "1", "--times", "1",
                 "--seeds", "1", "2", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [r["seed"] for r in doc["runs"]] == [2]
    assert doc["refused"] == [dict(case="causal", level="escape", P=1, seed=1,
                                   reason="macrocolumn (head 0, query 0) needs a division of 2.5")]
