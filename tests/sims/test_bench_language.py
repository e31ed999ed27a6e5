"""``ctmhsa bench language --quick``: recall and characters through the causal models' circuits."""

import json

import pytest

from ctmhsa.sims.cli import main


@pytest.mark.brian2
def test_bench_language_quick_rate_writes_table_json_and_figure(tmp_path, capsys):
    out = tmp_path / "language.json"
    assert main(["bench", "language", "--quick", "--levels", "rate", "float", "--codegen", "numpy",
                 "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "language" and doc["quick"] is True and "machine" in doc and "profile" in doc
    assert doc["levels"] == ["float", "rate"] and doc["presentations"] == [0.2] and doc["pairs"] == [2]
    assert doc["P"] is None and doc["recall_values"] == 8 and doc["vocabulary"] == 61
    common = {"level", "presentation", "nrmse", "r", "neurons", "tokens", "wall_s", "wall_per_token", "warnings"}
    fl, rate = doc["recall"]
    assert set(fl) == common | {"pairs", "queries", "sequences", "accuracy", "float_accuracy"}
    assert (fl["level"], fl["presentation"], fl["neurons"], fl["nrmse"]) == ("float", None, 0, 0.0)
    assert (rate["level"], rate["presentation"], rate["tokens"]) == ("rate", 0.2, 4)
    # the rate level at 0.2 s per token follows the float model: every query recalled as it does
    assert rate["accuracy"] == rate["float_accuracy"] == fl["accuracy"] and rate["nrmse"] < 0.05
    assert rate["neurons"] > 0 and rate["wall_per_token"] > 0
    fc, rc = doc["characters"]
    assert set(rc) == common | {"windows", "length", "bpc", "float_bpc", "ratio_pct", "agreement", "top1"}
    assert fc["bpc"] == fc["float_bpc"] == rc["float_bpc"] and fc["ratio_pct"] == 0 and fc["agreement"] == 1
    assert rc["ratio_pct"] == pytest.approx(100 * (rc["bpc"] / rc["float_bpc"] - 1)) and rc["tokens"] == 3
    assert abs(rc["ratio_pct"]) < 5 and rc["agreement"] == 1
    assert (tmp_path / "language.png").stat().st_size > 10_000
    text = capsys.readouterr().out
    assert "recall:" in text and "characters:" in text and "figure" in text


@pytest.mark.codegen_independent
@pytest.mark.parametrize("flags, match", [
    (["--presentations", "0.02"], "--presentations: at least"),
    (["--pairs", "9"], "--pairs: at most 8"),
    (["--seed", "12345"], "--seed: 12345"),
    (["--levels", "rate", "--P", "4"], "--P: copies per value at the escape level"),
    (["--length", "10000000"], "length: at most"),
])
def test_bench_language_refuses_bad_flags_before_running(tmp_path, capsys, flags, match):
    assert main(["bench", "language", "--quick", "--out", str(tmp_path / "l.json"), *flags]) == 2
    assert match in capsys.readouterr().err and not (tmp_path / "l.json").exists()
