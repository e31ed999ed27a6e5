"""``ctmhsa bench theories``: the two theories' digits circuits side by side (its JSON and figure
from a small run; the accuracy numbers are the benchmark's)."""

import json

import pytest

from ctmhsa.sims.benchmarks.theories import MODELS, matched_copies
from ctmhsa.sims.cli import main


@pytest.mark.codegen_independent
def test_matched_copies_put_co4_nearest_the_transformers_neurons():
    from ctmhsa.sims.benchmarks.theories import _circuit_size
    from ctmhsa.sims.model import as_model

    gs, co4 = (as_model(name) for _, name in MODELS)
    target = _circuit_size(gs, 4)[0]
    P = matched_copies(co4, target)
    sizes = {p: _circuit_size(co4, p)[0] for p in (P - 1, P, P + 1)}
    assert all(abs(sizes[P] - target) <= abs(n - target) for n in sizes.values())
    assert sizes[P] != target and P > 4        # Co4's circuit is smaller per copy


@pytest.mark.brian2
@pytest.mark.long   # two digits circuits at the escape level, 10 images each: ~60 s on 2 cores
def test_bench_theories_quick_writes_table_json_and_figure(tmp_path):
    out = tmp_path / "theories.json"
    assert main(["bench", "theories", "--quick", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "theories" and doc["images"] == 10 and "machine" in doc and "profile" in doc
    assert [r["model"] for r in doc["rows"]] == ["digits", "digits_co4"]
    for r in doc["rows"]:
        assert r["spikes_per_input"] > 0 and r["neurons"] > 0 and 0 <= r["accuracy"] <= 1
        assert len(r["predictions"]) == 10
    assert (tmp_path / "theories.png").exists()


@pytest.mark.codegen_independent
def test_bench_theories_refuses_a_bad_image_count():
    with pytest.raises(SystemExit):
        main(["bench", "theories", "--images", "0"])


@pytest.mark.codegen_independent
@pytest.mark.parametrize("argv, message", [
    (["--task", "recall", "--images", "5"], r"^--images: test digits, but --task is recall"),
    (["--pairs", "4"], r"^--pairs, --sequences: recall questions, but --task is digits"),
    (["--task", "recall", "--pairs", "9"], r"^--pairs: at most 8"),
    (["--task", "recall", "--seed", "12345"], r"^--seed: 12345 draws the calibration questions"),
    (["--task", "recall", "--presentations", "0"], r"^--presentations: expected seconds > 0"),
    (["--task", "recall", "--presentations", "0.2", "0.01"], r"^--presentations: whole steps of 0.001 s and at least"),
    (["--task", "recall", "--presentations", "0.2005"], r"^--presentations: whole steps of 0.001 s"),
])
def test_bench_theories_recall_refuses_before_building(argv, message):
    from argparse import ArgumentParser

    from ctmhsa.sims.benchmarks.theories import add_arguments
    from ctmhsa.sims.benchmarks.theories import main as bench_main

    parser = ArgumentParser()
    add_arguments(parser)
    with pytest.raises(ValueError, match=message):
        bench_main(parser.parse_args(argv))


@pytest.mark.brian2
@pytest.mark.long   # the memory circuit streams 4 questions, the Co4 circuit reads 4 sets: ~80 s on 2 cores
# (3 facts: the calibration questions follow --pairs, which the default 8 hid)
def test_bench_theories_recall_quick_writes_table_json_and_figure(tmp_path):
    out = tmp_path / "theories.json"
    assert main(["bench", "theories", "--task", "recall", "--quick", "--pairs", "3", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["task"] == "recall" and doc["sequences"] == 4 and doc["pairs"] == 3     # both built for 3 facts
    assert doc["calibration"]["pairs"] == 3
    assert [r["model"] for r in doc["rows"]] == ["recall", "recall_co4"]
    for r in doc["rows"]:
        assert r["spikes_per_input"] > 0 and r["neurons"] > 0 and r["synapses"] > 0 and len(r["predictions"]) == 4
    assert doc["rows"][0]["float_accuracy"] == 1.0          # the memory model answers every question
    assert (tmp_path / "theories.png").exists()
