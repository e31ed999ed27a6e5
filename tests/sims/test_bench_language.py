"""``ctmhsa bench language --quick``: recall and characters through the causal models' circuits."""

import json

import pytest

from ctmhsa.sims.cli import main


@pytest.mark.brian2
@pytest.mark.long   # 9 s alone, 19-35 s on 2 busy cores (two models' circuits); the tests below stay
def test_bench_language_quick_rate_writes_table_json_and_figure(tmp_path, capsys):
    out = tmp_path / "language.json"
    assert main(["bench", "language", "--quick", "--levels", "rate", "float", "--codegen", "numpy",
                 "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "language" and doc["quick"] is True and "machine" in doc and "profile" in doc
    assert doc["levels"] == ["float", "rate"] and doc["presentations"] == [0.2] and doc["pairs"] == [2]
    assert doc["P"] is None and doc["recall_values"] == 8
    assert doc["device"] == "auto"
    assert doc["vocabulary"] == 62   # newline, space, 52 letters, 8 marks
    common = {"level", "presentation", "nrmse", "r", "neurons", "device", "codegen", "tokens", "wall_s",
              "wall_per_token", "timings", "run_per_token", "warnings", "refused"}
    fl, rate = doc["recall"]
    assert set(fl) == common | {"pairs", "queries", "sequences", "accuracy", "float_accuracy"}
    assert (fl["level"], fl["presentation"], fl["neurons"], fl["nrmse"]) == ("float", None, 0, 0.0)
    assert fl["device"] is None and (rate["device"], rate["codegen"]) == ("runtime", "numpy")
    assert (rate["level"], rate["presentation"], rate["tokens"]) == ("rate", 0.2, 4)
    # the rate level at 0.2 s per token follows the float model: every query recalled as it does
    assert rate["accuracy"] == rate["float_accuracy"] == fl["accuracy"] and rate["nrmse"] < 0.05
    assert rate["neurons"] > 0 and rate["wall_per_token"] > rate["run_per_token"] > 0
    fc, rc = doc["characters"]
    assert set(rc) == common | {"windows", "length", "bpc", "float_bpc", "ratio_pct", "agreement", "top1",
                                "per_window"}
    assert [w["bpc"] for w in rc["per_window"]] == pytest.approx([rc["bpc"]])   # one window
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
    (["--levels", "float", "--presentations", "0.2"], "--presentations: seconds per token at the rate"),
    (["--length", "10000000"], "length: at most"),
    (["--levels", "float", "--cells", "brief"], "--cells: the circuit's cells"),
    (["--levels", "float", "--device", "cpp_standalone"], "--device: the circuit's device"),
    (["--device", "cpp_standalone", "--codegen", "numpy"], "--codegen: the runtime device's code"),
])
def test_bench_language_refuses_bad_flags_before_running(tmp_path, capsys, flags, match):
    assert main(["bench", "language", "--quick", "--out", str(tmp_path / "l.json"), *flags]) == 2
    assert match in capsys.readouterr().err and not (tmp_path / "l.json").exists()


@pytest.mark.codegen_independent
def test_language_figure_is_drawn_from_the_json_alone(tmp_path):
    """Every level and presentation of the JSON drawn: a recall line per spiking level and
    presentation plus float's, a bar per spiking level and presentation, the caption beside it."""
    from ctmhsa.figures.language import draw

    press, pairs = [0.1, 0.2], [2, 4]

    def row(level, p, **kw):
        return dict(level=level, presentation=p, nrmse=0.1, r=0.99, neurons=0 if level == "float" else 100,
                    tokens=8, wall_s=1.0, wall_per_token=0.125, timings=dict(run=0.5), run_per_token=0.06,
                    warnings=[], **kw)

    points = [("float", None)] + [(lv, p) for lv in ("rate", "escape") for p in press]
    doc = dict(benchmark="language", quick=False, levels=["float", "rate", "escape"], presentations=press,
               pairs=pairs, sequences=2, windows=1, length=8, P=None, seed=1, recall_values=8, vocabulary=62,
               recall=[row(lv, p, pairs=k, queries=k, sequences=2, accuracy=0.5 + 0.1 * k, float_accuracy=1.0)
                       for lv, p in points for k in pairs],
               characters=[row(lv, p, windows=1, length=8, bpc=3.0 + (p or 0), float_bpc=3.0,
                               ratio_pct=100 * (p or 0) / 3, agreement=0.9, top1=0.3) for lv, p in points])
    path = tmp_path / "language.json"
    path.write_text(json.dumps(doc))
    png = draw(str(path))
    assert png == str(tmp_path / "language.png") and (tmp_path / "language.png").stat().st_size > 10_000
    assert (tmp_path / "language.pdf").exists() and "the default copies" in (tmp_path / "language.txt").read_text()
    import matplotlib.pyplot as plt
    from ctmhsa.figures.language import draw_language

    fig = draw_language(doc)
    a, b = fig.axes
    assert len(a.get_lines()) == 1 + 2 * len(press) + 1   # float, each spiking line, chance
    assert len(b.patches) == 2 * len(press) and [t.get_text() for t in b.texts] == ["+3%", "+7%"] * 2
    plt.close(fig)


@pytest.mark.codegen_independent
def test_a_refused_window_is_listed_and_the_others_run_on(monkeypatch):
    """A window with a token outside the circuit's range is refused before building; the row
    keeps the other windows (their BPC against the float model's on the same windows)."""
    import argparse
    from types import SimpleNamespace

    import numpy as np

    from ctmhsa.mapping.operating import OperatingRangeError
    from ctmhsa.maths.model import load_model
    from ctmhsa.sims.benchmarks import language as bench

    model = load_model("shakespeare")
    windows = np.array([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]])

    def fake(m, U, level, presentation, calibration, args):
        if U[0].argmax() == 5:
            raise OperatingRangeError("H (block 0, MLP relays, TRN): token (1, 0) needs a division of 1.2")
        z = np.zeros((U.shape[0], len(m.vocab)))
        z[:, 0] = float(U[0].argmax())   # another BPC per window
        res = SimpleNamespace(logits=z, reference_logits=z + 0.1, config=dict(n_neurons=7, n_synapses=9),
                              timings=dict(build=0.0, compile=0.0, compiled=0, run=1.0, decode=0.0),
                              diagnostics=dict(spikes_per_input=30.0))
        return res, 1.0, []

    monkeypatch.setattr(bench, "_simulate", fake)
    row = bench.character_row(model, windows, "escape", 0.2, None, argparse.Namespace())
    assert row["windows"] == 2 and row["tokens"] == 6
    assert [r["index"] for r in row["refused"]] == [1] and "needs a division" in row["refused"][0]["error"]
    # each kept window's own BPC (windows of equal length: their mean is the pooled BPC)
    assert [w["index"] for w in row["per_window"]] == [0, 2]
    assert row["per_window"][0]["bpc"] != pytest.approx(row["per_window"][1]["bpc"])
    assert np.mean([w["bpc"] for w in row["per_window"]]) == pytest.approx(row["bpc"])
    assert np.mean([w["float_bpc"] for w in row["per_window"]]) == pytest.approx(row["float_bpc"])
    monkeypatch.setattr(bench, "_simulate", lambda *a: (_ for _ in ()).throw(OperatingRangeError("out")))
    with pytest.raises(OperatingRangeError, match="every sequence refused at the escape level: out"):
        bench.character_row(model, windows, "escape", 0.2, None, argparse.Namespace())


@pytest.mark.codegen_independent
def test_language_device_auto_compiles_only_long_character_runs(monkeypatch):
    """``--device auto``: the character model at the escape level on ``cpp_standalone`` from
    AUTO_COMPILED_CHARACTERS characters on (measured faster there, counting its first compile),
    where a compiler is found; recall and the rate level on the runtime device."""
    import shutil

    from ctmhsa.sims.benchmarks.language import AUTO_COMPILED_CHARACTERS as N, language_device

    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/" + name)      # a compiler is found
    assert language_device("auto", "characters", "escape", N) == "cpp_standalone"        # N per window
    assert language_device("auto", "characters", "escape", N - 1) == "runtime"
    assert language_device("auto", "characters", "rate", 10 * N) == "runtime"
    assert language_device("auto", "recall", "escape", 10 * N) == "runtime"
    assert language_device("cpp_standalone", "recall", "rate") == "cpp_standalone"
    assert language_device("runtime", "characters", "escape", 10 * N) == "runtime"
    monkeypatch.setattr(shutil, "which", lambda name: None)                    # no compiler
    assert language_device("auto", "characters", "escape", 10 * N) == "runtime"


@pytest.mark.codegen_independent
def test_the_bench_runs_each_window_on_its_device(monkeypatch):
    """The wiring of ``--device auto``: each call of ``simulate_model`` gets the device its task
    and window length call for (a window of AUTO_COMPILED_CHARACTERS characters compiled, a
    shorter one and recall on the runtime device), its row naming no code target where it compiles; an
    explicit ``cpp_standalone`` without a compiler is refused before running."""
    import argparse
    import shutil
    from types import SimpleNamespace

    import numpy as np

    import ctmhsa.sims.model as sm
    from ctmhsa.maths.model import load_model
    from ctmhsa.sims.benchmarks import language as bench

    got = []

    def fake(model, U, **kw):
        got.append((model.vocab is not None, U.shape[0], kw.get("device"), kw.get("codegen")))
        z = np.zeros((U.shape[0], model.readout_W.shape[0]))
        compiled = kw["device"] == "cpp_standalone"   # simulate_model records no code target there
        return SimpleNamespace(logits=z, reference_logits=z, config=dict(n_neurons=7, n_synapses=9, device=kw["device"],
                                                                          codegen=None if compiled else kw.get("codegen")),
                               timings=dict(build=0.0, compile=0.0, compiled=0, run=1.0, decode=0.0),
                               diagnostics=dict(spikes_per_input=30.0))

    monkeypatch.setattr(sm, "simulate_model", fake)
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/" + name)      # a compiler is found
    chars, recall = load_model("shakespeare"), load_model("recall")
    args = argparse.Namespace(device="auto", P=None, cells="causal", firing="poisson", seed=1, codegen=None)
    N = bench.AUTO_COMPILED_CHARACTERS
    long_, short = np.zeros((1, N + 1), int), np.zeros((2, 9), int)
    row = bench.character_row(chars, long_, "escape", 0.2, None, args)
    assert got[-1] == (True, N, "cpp_standalone", "cython") and (row["device"], row["codegen"]) == ("cpp_standalone", None)
    bench.character_row(chars, short, "escape", 0.2, None, args)
    assert got[-1][1:3] == (8, "runtime")
    U = np.zeros((1, 4, recall.embed_W.shape[1] if recall.embed_W is not None else recall.de))
    bench._simulate(recall, U[0], "escape", 0.2, None, args)
    assert got[-1][0] is False and got[-1][2] == "runtime"
    monkeypatch.setattr(shutil, "which", lambda name: None)                    # no compiler
    with pytest.raises(ValueError, match="--device: cpp_standalone needs a C\\+\\+ compiler"):
        bench.settings(argparse.Namespace(**{**vars(args), "device": "cpp_standalone", "levels": ["escape"],
                                             "presentations": None, "pairs": None, "sequences": None,
                                             "windows": None, "length": None, "quick": True}))
