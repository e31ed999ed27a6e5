"""A newcomer's first hour (issue 47): the numbers the README and docs/cli.md quote agree with the
code, the command line's help says what the code does, and a run on one's own weights says where
they came from and what was done to their biases. Nothing here builds a Brian2 network."""

import pathlib
import re

import numpy as np
import pytest

from ctmhsa.sims.benchmarks import BENCHMARKS
from ctmhsa.sims.cli import FIGURES_DRAWN, main
from ctmhsa.sims.config import load_config, options

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
CLI_DOC = (ROOT / "docs" / "cli.md").read_text()

pytestmark = pytest.mark.codegen_independent


class Simulated(Exception):
    """Raised by the stand-in of the simulation: the command got that far."""


@pytest.fixture
def stop_at_simulate(monkeypatch):
    """``ctmhsa run`` stops where it would simulate (everything before it is printed)."""
    def stop(*a, **k):
        raise Simulated
    monkeypatch.setattr("ctmhsa.sims.cli.simulate_mhsa", stop)


def _help(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--help"])
    assert exc.value.code == 0
    return " ".join(capsys.readouterr().out.split())     # argparse's line breaks undone


# numbers the README and docs/cli.md quote ------------------------------------------------------

def _default_circuit():
    cfg = load_config()
    co, ro = options(cfg)
    p = cfg["problem"]
    return co, ro, co.as_built(co.describe(p["n"], p["dk"], p["dv"], p["de"], H=p["H"], m=p["m"]))


def test_readme_neuron_counts_are_the_circuits():
    """The README said 4,000 neurons for the default run (it has 4,320) and its tutorial's
    result 1224 (it prints 1608)."""
    from ctmhsa.sims.options import CircuitOptions

    _, _, circ = _default_circuit()
    assert f"{circ.n_neurons():,} escape-noise neurons" in " ".join(README.split())
    # the tutorial: 6 tokens of width 6, two heads of dk = dv = 4, escape level
    n, H, dk, dv, de = map(int, re.search(r"n, H, dk, dv, de = (\d+), (\d+), (\d+), (\d+), (\d+)\n"
                                          r"X = rng.normal\(size=\(n, de\)\)\nWQ, WK, WV = .*\n.*\n\n# 2\. the "
                                          r"spiking circuit", README).groups())
    co = CircuitOptions(neuron="escape")
    tutorial = co.as_built(co.describe(n, dk, dv, de, H=H)).n_neurons()
    assert re.search(r"<SimulationResult level=escape neurons=(\d+) ", README).group(1) == str(tutorial)


def test_cli_doc_quotes_the_default_runs_size_estimate():
    """docs/cli.md said 19 MB; the estimate of the default run is 21.6 MB."""
    from ctmhsa.sims.io import estimate_result_bytes

    co, ro, circ = _default_circuit()
    rr = ro.resolved(co.neuron)
    mb = estimate_result_bytes(circ, co.neuron, rr.duration, rr.warmup, ro.record_spikes, summary=True) / 1e6
    quoted = float(re.search(r"default run's estimate is\s+([\d.]+) MB", CLI_DOC).group(1))
    assert quoted == pytest.approx(mb, abs=0.05)


# what the help says ----------------------------------------------------------------------------

def test_run_help_states_the_threads_default_the_code_uses(capsys):
    """``--threads`` said "default all cores"; the code uses one thread unless asked."""
    from ctmhsa.sims.options import RunOptions

    assert RunOptions().resolved("escape").threads == 1
    text = _help(capsys, "run")
    threads = text[text.index("--threads N "):]
    assert threads.split("--n N")[0].count("default 1;") == 1 and "all cores" not in text


def test_bench_lists_every_registered_benchmark(capsys):
    """The README's list of benchmarks omitted ``threads``: the help lists the registry, and
    the README and docs/cli.md list it whole."""
    names = list(BENCHMARKS)
    assert "threads" in names
    top = _help(capsys)
    assert ", ".join(names) in top                          # `ctmhsa --help`: the bench line
    assert f"({', '.join(names)})" in _help(capsys, "bench")
    row = re.search(r"\| `ctmhsa bench NAME` \| benchmarks: (.*) \|", README).group(1)
    assert re.findall(r"`(\w+)`", row) == names
    for name in names:
        assert f"`ctmhsa bench {name}" in CLI_DOC, name


def test_figures_help_names_exactly_the_figures_it_draws(capsys):
    """``ctmhsa figures`` said it "draws every figure"; it draws 12 of the gallery's 22 and the
    others are drawn by the commands that make their data."""
    from ctmhsa.figures.make import FIGURES

    assert FIGURES_DRAWN == FIGURES
    text = _help(capsys, "figures")
    assert f"these {len(FIGURES)} figures" in text and ", ".join(FIGURES) in text
    gallery = sorted(p.stem for p in (ROOT / "figures" / "gallery").glob("*.png"))
    others = [g for g in gallery if g not in FIGURES]
    for name in others:     # each named with the command that draws it
        stem = "experiment_NAME" if name.startswith("experiment_") else name
        assert stem in text, name
    assert f"draw {len(FIGURES)} of the gallery's {len(gallery)} figures" in README
    for doc in (README, CLI_DOC, text):
        assert "draw every figure" not in doc and "draws every figure" not in doc


# own weights -----------------------------------------------------------------------------------

@pytest.fixture
def layer(tmp_path):
    """A BERT-layout state dict (.npz) of two layers of 3 heads of width 2, with biases, and tokens."""
    rng = np.random.default_rng(0)
    E, sd = 6, {}
    for L in range(2):
        p = f"encoder.layer.{L}.attention."
        for name in ("self.query", "self.key", "self.value", "output.dense"):
            sd[f"{p}{name}.weight"] = rng.normal(size=(E, E)) / np.sqrt(E)
            sd[f"{p}{name}.bias"] = 0.1 * rng.normal(size=E)
    np.savez(tmp_path / "model.npz", **sd)
    np.savez(tmp_path / "tokens.npz", X=rng.normal(size=(3, E)))
    return tmp_path


def _run(capsys, tmp_path, *flags):
    with pytest.raises(Simulated):
        main(["run", *flags, "--neuron", "rate", "--duration", "1", "--out", str(tmp_path / "o"), "--no-summary"])
    return capsys.readouterr().out


def test_own_weights_name_their_file_layer_and_heads(layer, capsys, stop_at_simulate):
    """The run printed "(shipped default)" as its source; it names the weights file and layer."""
    out = _run(capsys, layer, "--weights", str(layer / "model.npz"), "--layer", "1", "--heads", "2", "0",
               "--n-heads", "3", "--tokens", str(layer / "tokens.npz"))
    lines = out.splitlines()
    assert lines[0] == "ctmhsa run: configuration: the shipped default (sims/configs/default.toml)"
    assert f"  weights: layer 1 of {layer / 'model.npz'} (bert layout), heads 2, 0 of 3" in lines
    assert f"  tokens: {layer / 'tokens.npz'}" in lines
    assert "(shipped default)" not in out
    out = _run(capsys, layer, "--weights", str(layer / "model.npz"), "--layer", "0", "--n-heads", "3")
    assert f"  weights: layer 0 of {layer / 'model.npz'} (bert layout), heads all of 3" in out
    assert "  tokens: random, 8 of the weights' width 6 (problem.input_seed = 0)" in out
    assert "  tokens and weights: random (" in _run(capsys, layer)


def test_folded_biases_are_stated(layer, capsys, stop_at_simulate):
    """``de=7`` appeared with nothing saying that the biases were folded into a constant coordinate."""
    flags = ["--weights", str(layer / "model.npz"), "--layer", "1", "--n-heads", "3"]
    out = _run(capsys, layer, *flags)
    assert "  biases folded into a constant coordinate: de = 6 + 1 (" in out and " de=7;" in out
    assert "nucleus-2 cells silent" in out and "the output bias is left out" in out
    cfg = layer / "nofold.toml"
    cfg.write_text("[problem]\nfold_bias = false\n")
    out = _run(capsys, layer, str(cfg), *flags)
    assert "biases folded" not in out and "biases left out (problem.fold_bias = false)" in out and " de=6;" in out


def test_tokens_alone_say_what_is_missing_and_how_to_give_it(layer, capsys, no_build, tmp_path):
    """``--tokens`` with X only was refused naming the arrays but not the ways to give them."""
    assert main(["run", "--tokens", str(layer / "tokens.npz"), "--neuron", "rate", "--out", str(tmp_path / "o"),
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ctmhsa: error: --tokens: ") and err.count("\n") == 1
    for words in ("tokens.npz", "lacks arrays ['WK', 'WO', 'WQ', 'WV']", "--weights FILE",
                  "WQ (H, dk, de), WK (H, dk, de), WV (H, dv, de) and WO (H, de, dv) saved in the .npz beside X"):
        assert words in err, words
    # the same file named by a configuration: the setting and its way
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[problem]\ninputs = '{layer / 'tokens.npz'}'\n[circuit]\nneuron = 'rate'\n")
    assert main(["run", str(cfg), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "config: problem.inputs: " in err and "problem.weights = FILE" in err and "--weights" not in err
