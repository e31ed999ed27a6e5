"""Configurations, results directories and the command line."""

import json
import os

import numpy as np
import pytest

from ctmhsa.sims.cli import main
from ctmhsa.sims.config import dumps_toml, load_config, make_inputs, resolve_config


TINY = ("[problem]\nn = 3\nH = 2\ndk = 2\ndv = 2\nde = 3\n"
        "[circuit]\nneuron = 'escape'\n[run]\nduration = 0.3\nwarmup = 0.1\ncodegen = 'numpy'\n"
        "record_spikes = true\ncheckpoints = [0.1, 0.2]\n")
"""A tiny spiking configuration: the CLI path of the default run, in a second."""


@pytest.mark.codegen_independent
def test_default_config_is_a_meaningful_spiking_run():
    cfg = load_config()
    p, c, r = cfg["problem"], cfg["circuit"], cfg["run"]
    assert p["m"] == p["n"] and c["neuron"] == "escape"
    assert (p["n"], p["H"], p["dk"], p["dv"], p["de"]) == (8, 2, 8, 8, 8)
    assert r["codegen"] == "numpy" and r["record_spikes"] is True and r["duration"] >= 5


@pytest.mark.codegen_independent
@pytest.mark.parametrize("raw, match", [
    ({"problme": {}}, r"unknown table \[problme\]"),
    ({"problem": {"nn": 3}}, "unknown key problem.nn"),
    ({"problem": {"n": 0}}, "problem.n must be a positive integer"),
    ({"problem": {"weight_scale": -1}}, "problem.weight_scale must be > 0"),
])
@pytest.mark.smoke
def test_config_errors(raw, match):
    with pytest.raises(ValueError, match=match):
        resolve_config(raw)


@pytest.mark.codegen_independent
def test_config_file_errors(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[problem\nn=")
    with pytest.raises(ValueError, match="not valid TOML"):
        load_config(bad)


@pytest.mark.codegen_independent
def test_toml_round_trip(tmp_path):
    import tomllib

    cfg = resolve_config({"problem": {"n": 3, "m": 5}})
    text = dumps_toml(cfg)
    again = resolve_config(tomllib.loads(text))
    assert again == cfg and again["problem"]["cross"] is True


@pytest.mark.codegen_independent
def test_inputs_from_npz(tmp_path):
    rng = np.random.default_rng(0)
    arrays = dict(X=rng.normal(size=(3, 2)), WQ=rng.normal(size=(1, 2, 2)),
                  WK=rng.normal(size=(1, 2, 2)), WV=rng.normal(size=(1, 2, 2)), WO=rng.normal(size=(1, 2, 2)))
    np.savez(tmp_path / "in.npz", **arrays)
    p = resolve_config({"problem": {"inputs": "in.npz"}})["problem"]
    got = make_inputs(p, base_dir=str(tmp_path))
    np.testing.assert_array_equal(got["X"], arrays["X"])
    assert got["Y"] is None
    np.savez(tmp_path / "bad.npz", X=arrays["X"])
    with pytest.raises(ValueError, match=r"lacks arrays \['WK', 'WO', 'WQ', 'WV'\]"):
        make_inputs(dict(p, inputs="bad.npz"), base_dir=str(tmp_path))


@pytest.mark.brian2
def test_cli_run_writes_a_complete_results_directory(tmp_path, capsys):
    import tomllib

    import matplotlib.image as mpimg

    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    out = tmp_path / "res"
    old = os.umask(0o022)
    try:
        assert main(["run", str(cfg), "--out", str(out)]) == 0
    finally:
        os.umask(old)
    printed = capsys.readouterr().out
    assert "x_tilde" in printed and "floor" in printed and f"results in {out}" in printed
    assert sorted(os.listdir(out)) == [".ctmhsa-results", "config.toml", "metrics.json", "noise.npz",
                                      "provenance.json", "rates.npz", "reference.npz", "spikes.npz", "spikes.nwb",
                                      "stages.npz", "summary.png"]
    assert os.stat(out).st_mode & 0o777 == 0o755                       # not mkdtemp's 0700
    assert os.stat(out / "metrics.json").st_mode & 0o777 == 0o644
    met = json.loads((out / "metrics.json").read_text())
    assert met["x_tilde"]["noise_floor"] > 0 and np.isfinite(met["x_tilde"]["nrmse"])
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["versions"]["brian2"] and prov["versions"]["pynwb"] and prov["counts"]["neurons"] > 0
    if os.path.isdir(os.path.join(os.path.dirname(__file__), "..", "..", ".git")):
        assert len(prov["git"]["commit"]) == 40 and isinstance(prov["git"]["dirty"], bool)
    # checkpoints from [run] reached the run
    assert [c["T"] for c in prov["diagnostics"]["checkpoints"]] == pytest.approx([0.1, 0.2, 0.3])
    saved = tomllib.loads((out / "config.toml").read_text())
    assert saved["output"]["dir"] == str(out)
    assert {k: saved["problem"][k] for k in ("n", "m", "H", "dk", "dv", "de")} == dict(n=3, m=3, H=2, dk=2, dv=2, de=3)
    assert saved["run"]["record_spikes"] is True and saved["run"]["checkpoints"] == [0.1, 0.2]
    img = mpimg.imread(str(out / "summary.png"))
    assert img.shape[0] > 1500 and img.shape[1] > 2000 and np.std(img) > 0.05
    # a second run replaces the directory atomically; no temporary directories are left over
    assert main(["run", str(cfg), "--out", str(out), "--quiet", "--duration", "0.25",
                 "--record-spikes", "l5pt", "--no-summary"]) == 0
    assert capsys.readouterr().out == ""
    assert [p for p in os.listdir(tmp_path) if p.startswith(".")] == []
    saved = tomllib.loads((out / "config.toml").read_text())
    assert saved["run"]["duration"] == 0.25 and saved["run"]["record_spikes"] == ["l5pt"]
    assert "summary.png" not in os.listdir(out)
    with np.load(out / "spikes.npz") as sp:
        assert sorted(sp.files) == ["l5pt.i", "l5pt.t"]


@pytest.mark.codegen_independent
@pytest.mark.smoke
def test_version(capsys):
    from importlib import metadata

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"ctmhsa {metadata.version('ctmhsa')}"


def _npz_inputs(path, n=3, H=1, dk=2, dv=2, de=4, seed=0):
    rng = np.random.default_rng(seed)
    arrays = dict(X=rng.normal(size=(n, de)), WQ=rng.normal(size=(H, dk, de)) / 2,
                  WK=rng.normal(size=(H, dk, de)) / 2, WV=rng.normal(size=(H, dv, de)) / 2,
                  WO=rng.normal(size=(H, de, dv)) / 2)
    np.savez(path, **arrays)
    return arrays


@pytest.mark.codegen_independent
def test_inputs_that_disagree_with_the_sizes_are_refused_before_building(tmp_path, capsys):
    _npz_inputs(tmp_path / "in.npz", de=4)
    cfg = tmp_path / "c.toml"
    cfg.write_text("[problem]\ninputs = 'in.npz'\nde = 6\n")
    assert main(["run", str(cfg), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "problem.de = 6 but the inputs have de = 4" in err and "X has shape (3, 4)" in err
    assert not (tmp_path / "o").exists()
    with pytest.raises(ValueError, match=r"problem.H = 2 but the inputs have H = 1 \(WQ has shape \(1, 2, 4\)\)"):
        make_inputs(resolve_config({"problem": {"inputs": "in.npz", "H": 2}})["problem"], base_dir=str(tmp_path))


@pytest.mark.brian2
def test_sizes_not_stated_come_from_the_inputs_and_are_saved(tmp_path, capsys):
    import tomllib

    _npz_inputs(tmp_path / "in.npz", n=3, H=1, dk=2, dv=2, de=4)
    cfg = tmp_path / "c.toml"
    cfg.write_text("[problem]\ninputs = 'in.npz'\n[circuit]\nneuron = 'rate'\n[run]\nduration = 1.0\n")
    assert main(["run", str(cfg), "--out", str(tmp_path / "o"), "--quiet", "--no-summary"]) == 0
    saved = tomllib.loads((tmp_path / "o" / "config.toml").read_text())
    assert {k: saved["problem"][k] for k in ("n", "H", "dk", "dv", "de")} == dict(n=3, H=1, dk=2, dv=2, de=4)
    assert saved["problem"]["inputs"] == str(tmp_path / "in.npz")       # absolute: runs from anywhere
    assert "spikes.nwb" not in os.listdir(tmp_path / "o")                # rate level: no spikes
    # the saved configuration runs again as it is, from another directory
    assert main(["run", str(tmp_path / "o" / "config.toml"), "--out", str(tmp_path / "o2"), "--quiet",
                 "--no-summary"]) == 0
    with np.load(tmp_path / "o" / "stages.npz") as a, np.load(tmp_path / "o2" / "stages.npz") as b:
        np.testing.assert_array_equal(a["x_tilde"], b["x_tilde"])


@pytest.mark.codegen_independent
@pytest.mark.smoke
def test_cli_errors_are_clean(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[simulation]\nphi = 'tanh'\n")
    assert main(["run", str(cfg), "--out", str(tmp_path / "o")]) == 2
    assert "phi: unknown feature map 'tanh'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.codegen_independent
@pytest.mark.parametrize("raw, match", [
    ({"run": {"record_spikes": "l5pt"}}, "record_spikes: expected True, False or a sequence"),
    ({"run": {"checkpoints": [2.0]}}, r"checkpoints: every time must lie in \(0, duration = 1.0\)"),
    ({"run": {"report": "bar"}}, "unknown key run.report"),
    ({"problem": {"heads": [0]}}, "set problem.weights"),
    ({"problem": {"weights": "m.safetensors", "heads": "0"}}, "problem.heads must be a list"),
])
def test_run_table_keys_are_validated(raw, match):
    with pytest.raises((ValueError, TypeError), match=match):
        resolve_config(raw)


@pytest.mark.codegen_independent
def test_cli_circuit(capsys):
    assert main(["circuit"]) == 0
    assert "l23" in capsys.readouterr().out
    assert main(["circuit", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["n_neurons"] == sum(p["N"] for p in d["populations"])


@pytest.mark.brian2
def test_cli_run_spiking_level(tmp_path, capsys):
    cfg = tmp_path / "esc.toml"
    cfg.write_text("[problem]\nn = 2\nH = 1\ndk = 2\ndv = 2\nde = 2\n"
                   "[circuit]\nneuron = 'escape'\n[run]\nduration = 0.3\nwarmup = 0.1\n")
    assert main(["run", str(cfg), "--out", str(tmp_path / "o"), "--quiet", "--no-summary"]) == 0
    met = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert met["x_tilde"]["noise_floor"] > 0
    import tomllib
    written = tomllib.loads((tmp_path / "o" / "config.toml").read_text())
    assert written["circuit"]["neuron"] == "escape" and written["run"]["warmup"] == 0.1


@pytest.mark.brian2
def test_cli_run_fold_switch(tmp_path, capsys):
    # [simulation] fold = false reaches the simulation; the printed counts say what was folded
    base = ("[problem]\nn = 2\nH = 1\ndk = 2\ndv = 2\nde = 2\n"
            "[simulation]\nneuron = 'escape'\nduration = 0.2\nwarmup = 0.1\n")
    outs = {}
    for fold in ("true", "false"):
        cfg = tmp_path / f"f_{fold}.toml"
        cfg.write_text(base + f"fold = {fold}\n")
        assert main(["run", str(cfg), "--out", str(tmp_path / fold), "--no-summary"]) == 0
        outs[fold] = capsys.readouterr().out
    assert "simulated after folding" in outs["true"] and "simulated after folding" not in outs["false"]
    met = {f: json.loads((tmp_path / f / "metrics.json").read_text()) for f in outs}
    assert met["true"]["x_tilde"]["nrmse"] == met["false"]["x_tilde"]["nrmse"]   # same spikes


BENCHMARK_NAMES = ("rate", "cells", "accuracy", "speed", "heads", "cortex", "circuits", "robustness", "train",
                   "threads", "timescale", "depth", "digits", "levels", "dale", "memory", "stream", "language",
                   "theories")


@pytest.mark.codegen_independent
def test_bench_help_lists_every_benchmark(capsys):
    from ctmhsa.sims.benchmarks import BENCHMARKS

    assert tuple(BENCHMARKS) == BENCHMARK_NAMES
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for name in BENCHMARK_NAMES:
        assert f"\n    {name}" in out, name
    with pytest.raises(SystemExit) as exc:       # a benchmark must be named
        main(["bench"])
    assert exc.value.code == 2


@pytest.mark.codegen_independent
@pytest.mark.parametrize("argv, flag", [
    (["bench", "robustness", "--sizes", "8"], "--sizes"),          # circuits/speed flag
    (["bench", "speed", "--instances", "3"], "--instances"),       # robustness flag
    (["bench", "rate", "--cases", "cross"], "--cases"),            # accuracy flag
    (["bench", "cells", "--repeats", "2"], "--repeats"),           # rate/speed flag
    (["bench", "heads", "--levels", "escape"], "--levels"),        # accuracy/cells flag
])
def test_bench_rejects_another_benchmarks_flag(argv, flag, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert f"unrecognized arguments: {flag}" in capsys.readouterr().err


@pytest.mark.codegen_independent
@pytest.mark.parametrize("argv, expect", [   # the invocations the README documents
    (["bench", "rate", "--n", "33", "--d", "33", "--H", "1", "--repeats", "3"],
     dict(n=33, d=33, H=1, repeats=3, duration=1.0, codegen="auto", out="bench_results/rate.json")),
    (["bench", "speed", "--sizes", "8", "16", "33", "--devices", "runtime", "cpp_standalone",
      "--threads", "4", "--fold", "on", "off"],
     dict(sizes=[8, 16, 33], devices=["runtime", "cpp_standalone"], threads=4, fold=["on", "off"],
          d=33, H=1, repeats=3, out="bench_results/speed.json")),
    (["bench", "heads", "--H", "8", "--scheduler", "local"],
     dict(H=8, n=33, d=33, scheduler="local", duration=1.0, out="bench_results/heads.json")),
    (["bench", "circuits", "--sizes", "8", "16", "33", "--d", "33", "--duration", "1"],
     dict(sizes=[8, 16, 33], d=33, duration=1.0, codegen="auto", out="bench_results/circuits.json")),
    (["bench", "accuracy", "--cases", "cross", "skip", "--levels", "escape", "--P", "1", "4", "10",
      "--copies", "all", "--times", "1", "2"],
     dict(cases=["cross", "skip"], levels=["escape"], P=[1, 4, 10], copies="all", times=[1.0, 2.0],
          allow_slow=False, out="bench_results/accuracy.json")),
    (["bench", "robustness", "--instances", "500", "--seed", "0", "--wide"],
     dict(instances=500, seed=0, wide=True, duration=None, level="rate", out="bench_results/robustness.json")),
    (["bench", "robustness", "--level", "lif", "--instances", "40", "--duration", "3"],
     dict(instances=40, wide=False, duration=3.0, level="lif")),
    (["bench", "cells", "--levels", "escape", "lif", "--out-dir", "somewhere"],
     dict(levels=["escape", "lif"], out_dir="somewhere", skip_fig2=False)),
])
def test_bench_subcommands_parse_their_flags(argv, expect):
    from ctmhsa.sims.benchmarks import benchmark, run_benchmark
    from ctmhsa.sims.cli import build_parser

    args = build_parser().parse_args(argv)
    assert args.func.func is run_benchmark and args.func.args == (benchmark(argv[1]),)
    assert {k: getattr(args, k) for k in expect} == expect


@pytest.mark.brian2
def test_cli_bench_robustness_runs(tmp_path, capsys):
    out = tmp_path / "rob.json"
    assert main(["bench", "robustness", "--instances", "1", "--seed", "1", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["instances"] == 1 and doc["seed"] == 1 and doc["wide"] is False
    # its own JSON is a benchmark's: a second run replaces it
    assert main(["bench", "robustness", "--instances", "1", "--seed", "2", "--out", str(out)]) == 0
    assert doc["counts"].get("failure", 0) == 0 and len(doc["rows"]) == 1
    second = json.loads(out.read_text())
    assert second["seed"] == 2
    # where the time went: the simulations of this process, their parts and the rest
    prof = second["profile"]
    assert prof["simulations"] >= 1 and prof["run"] > 0 and prof["build"] > 0
    assert sum(prof[k] for k in ("build", "compile", "run", "decode", "outside")) == pytest.approx(prof["wall"])
    text = capsys.readouterr().out
    assert "random instances" in text and "profile: " in text


@pytest.mark.codegen_independent
def test_config_tables_follow_the_option_objects():
    from ctmhsa.sims.options import CircuitOptions, RunOptions
    from ctmhsa.sims.config import DEFAULTS, options

    assert DEFAULTS["circuit"]["n_inh"] == CircuitOptions().n_inh          # defaults written once
    assert DEFAULTS["run"]["duration"] == RunOptions().duration
    # an earlier [simulation] table is spread over [circuit] and [run]
    cfg = resolve_config({"simulation": {"neuron": "escape", "duration": 0.3, "fold": False}})
    assert cfg["circuit"]["neuron"] == "escape" and cfg["circuit"]["fold"] is False
    assert cfg["run"]["duration"] == 0.3
    co, ro = options(cfg)
    assert (co.neuron, co.fold, ro.duration) == ("escape", False, 0.3)
    with pytest.raises(ValueError, match="unknown key run.phi"):
        resolve_config({"run": {"phi": "elu1"}})
    with pytest.raises(ValueError, match="duration: expected a positive finite time"):
        resolve_config({"run": {"duration": -1.0}})
