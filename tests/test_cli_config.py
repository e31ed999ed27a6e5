"""Configurations, results directories and the command line."""

import json
import os

import numpy as np
import pytest

from sims.cli import main
from sims.config import dumps_toml, load_config, make_inputs, resolve_config


@pytest.mark.codegen_independent
def test_default_config_resolves():
    cfg = load_config()
    assert cfg["problem"]["m"] == cfg["problem"]["n"] and cfg["simulation"]["neuron"] == "rate"


@pytest.mark.codegen_independent
@pytest.mark.parametrize("raw, match", [
    ({"problme": {}}, r"unknown table \[problme\]"),
    ({"problem": {"nn": 3}}, "unknown key problem.nn"),
    ({"problem": {"n": 0}}, "problem.n must be a positive integer"),
    ({"problem": {"weight_scale": -1}}, "problem.weight_scale must be > 0"),
])
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
    out = tmp_path / "res"
    assert main(["run", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "x_tilde" in printed and "results written to" in printed
    assert sorted(os.listdir(out)) == ["config.toml", "metrics.json", "noise.npz", "provenance.json",
                                      "rates.npz", "reference.npz", "spikes.npz", "stages.npz"]
    met = json.loads((out / "metrics.json").read_text())
    assert met["x_tilde"]["max_rel_error"] <= 1e-3
    with np.load(out / "stages.npz") as st, np.load(out / "reference.npz") as ref:
        np.testing.assert_allclose(st["x_tilde"], ref["x_tilde"], atol=1e-3 * np.abs(ref["x_tilde"]).max())
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["versions"]["brian2"] and prov["counts"]["neurons"] > 0
    # a second run replaces the directory atomically; no temporary directories are left over
    assert main(["run", "--out", str(out), "--quiet", "--duration", "0.5"]) == 0
    assert capsys.readouterr().out == ""
    assert [p for p in os.listdir(tmp_path) if p.startswith(".")] == []
    import tomllib
    assert tomllib.loads((out / "config.toml").read_text())["simulation"]["duration"] == 0.5


@pytest.mark.codegen_independent
def test_cli_errors_are_clean(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[simulation]\nphi = 'tanh'\n")
    assert main(["run", str(cfg), "--out", str(tmp_path / "o")]) == 2
    assert "phi: unknown feature map 'tanh'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


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
                   "[simulation]\nneuron = 'escape'\nduration = 0.3\nwarmup = 0.1\n")
    assert main(["run", str(cfg), "--out", str(tmp_path / "o"), "--quiet"]) == 0
    met = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert met["x_tilde"]["noise_floor"] > 0
    import tomllib
    sim = tomllib.loads((tmp_path / "o" / "config.toml").read_text())["simulation"]
    assert sim["neuron"] == "escape" and sim["warmup"] == 0.1


@pytest.mark.brian2
def test_cli_run_fold_switch(tmp_path, capsys):
    # [simulation] fold = false reaches the simulation; the printed counts say what was folded
    base = ("[problem]\nn = 2\nH = 1\ndk = 2\ndv = 2\nde = 2\n"
            "[simulation]\nneuron = 'escape'\nduration = 0.2\nwarmup = 0.1\n")
    outs = {}
    for fold in ("true", "false"):
        cfg = tmp_path / f"f_{fold}.toml"
        cfg.write_text(base + f"fold = {fold}\n")
        assert main(["run", str(cfg), "--out", str(tmp_path / fold)]) == 0
        outs[fold] = capsys.readouterr().out
    assert "simulated after folding" in outs["true"] and "simulated after folding" not in outs["false"]
    met = {f: json.loads((tmp_path / f / "metrics.json").read_text()) for f in outs}
    assert met["true"]["x_tilde"]["nrmse"] == met["false"]["x_tilde"]["nrmse"]   # same spikes
