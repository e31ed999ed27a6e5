"""``ctmhsa bench dale`` and ``ctmhsa run --dale``: Dale's law from the command line."""

import json

import pytest

import ctmhsa
from ctmhsa.sims.cli import main

pytestmark = pytest.mark.brian2


@pytest.mark.long   # 9 s: the suite's budget on 2 cores; `ctmhsa bench dale` runs it in full
def test_bench_dale_writes_costs_and_paired_ratios(tmp_path, capsys):
    out = tmp_path / "dale.json"
    assert main(["bench", "dale", "--n", "2", "--d", "2", "--duration", "0.2", "--seeds", "1", "2",
                 "--neuron", "escape", "--out", str(out)]) == 0
    doc = json.load(open(out))
    plain, dale = ({(r["neuron"], r["dale"]): r for r in doc["rows"]}[("escape", d)] for d in (False, True))
    # the followers, one per cell: three relay sets (n de 2), L5 IT (H n m dv 2), L5 PT (H n dv 2); H = 2
    assert dale["neurons"] == plain["neurons"] + 3 * (2 * 2 * 2) + 2 * (2 * 2 * 2 * 2) + 2 * (2 * 2 * 2)
    assert set(dale["nrmse_vs_plain"]) == set(plain["error_over_floor"]) and "nrmse_vs_plain" not in plain
    assert dale["rates"]["l5it_ffi"] == pytest.approx(dale["rates"]["l5it"], rel=0.05)
    assert len(dale["repetitions"]) == 2 and "Dale/plain NRMSE" in capsys.readouterr().out
    assert main(["bench", "dale", "--duration", "0", "--out", str(tmp_path / "x.json")]) != 0
    assert "--duration: expected a positive window" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_cli_run_dale_builds_followers_and_loads_back(tmp_path, capsys):
    cfg = tmp_path / "d.toml"
    cfg.write_text("[problem]\nn = 2\nH = 1\ndk = 2\ndv = 2\nde = 2\n"
                   "[circuit]\nneuron = 'escape'\n[run]\nduration = 0.2\nwarmup = 0.1\n")
    assert main(["run", str(cfg), "--dale", "--out", str(tmp_path / "o"), "--no-summary"]) == 0
    printed = capsys.readouterr().out
    assert "l5it_ffi" in printed and "ffi" in printed
    res = ctmhsa.load(tmp_path / "o")
    assert res.config["dale"] is True and "nucleus1_ffi" in res.counts["populations"]
