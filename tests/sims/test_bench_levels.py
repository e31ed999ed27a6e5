"""``ctmhsa bench levels``: escape and lif interleaved, the ratio and the accuracy of each."""

import json

from ctmhsa.sims.cli import main


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
