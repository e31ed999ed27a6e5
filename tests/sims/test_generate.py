"""Text written through a language model's circuit (:mod:`ctmhsa.sims.generate`): the loop is
closed inside one run, each drawn character shown next; bad arguments refused before any network."""

import os

import numpy as np
import pytest

from ctmhsa import simulate_model
from ctmhsa.sims.generate import generate
from ctmhsa.sims.language import sample
from ctmhsa.sims.models import train_causal as tc

VOCAB = "abcde"


def toy(forget=0.9, seed=0):
    """A random one-block causal language model of five characters."""
    arch = dict(blocks=1, H=1, dk=3, dv=3, de=6, dh=8, classes=5, p=5, forget=forget, normalize=False)
    return tc.to_model(tc.init_params(np.random.default_rng(seed), arch), arch, "toy", VOCAB)


@pytest.mark.codegen_independent
def test_float_generation_is_the_samplers_text():
    model = toy()
    for T in (0.0, 0.7):
        g = generate(model, "abca", 12, neuron="float", temperature=T, seed=3)
        assert g.generated == sample(model, "abca", 12, temperature=T, seed=3)
        assert g.scores.shape == (12, 5) and g.agreement == 1.0 and g.result is None


@pytest.mark.codegen_independent
@pytest.mark.parametrize("kw, match", [
    (dict(prompt="abz"), "^prompt: characters not in the model's vocabulary: 'z'"),
    (dict(prompt=""), "^prompt: "),
    (dict(chars=0), "^chars: "),
    (dict(temperature=-1.0), "^temperature: "),
    (dict(temperature=float("nan")), "^temperature: "),
    (dict(neuron="lif"), "^neuron: "),
    (dict(seed=-2), "^seed: "),
    (dict(device="cpp_standalone"), "^device: "),
    (dict(neuron="float", presentation=0.2), "^presentation: "),
    (dict(neuron="float", lag=0.1), "^lag: "),
    (dict(run_options=__import__("ctmhsa").RunOptions(device="cpp_standalone")), "^device: "),
])
def test_bad_arguments_are_refused_before_any_network(kw, match, no_build):
    args = dict(prompt="ab", chars=3, neuron="rate") | kw
    with pytest.raises((ValueError, TypeError), match=match):
        generate(toy(), **args)


@pytest.mark.codegen_independent
def test_a_model_without_a_vocabulary_is_refused(no_build):
    with pytest.raises(ValueError, match="^model: .* not a language model"):
        generate("digits", "ab", 2, neuron="rate")


@pytest.mark.brian2
def test_the_rate_circuit_writes_what_the_float_model_writes(tmp_path):
    """Greedy writing at the rate level, each drawn character fed back inside the run: the text
    is the float model's and the scores are its logits. The placeholders the table starts with
    (the prompt's last character repeated) would have given another text."""
    model = toy()
    prompt, n = "ab", 4
    want = sample(model, prompt, n, temperature=0.0)
    assert want != prompt[-1] * n
    g = generate(model, prompt, n, neuron="rate", temperature=0.0, codegen="numpy")
    assert g.generated == want and g.agreement == 1.0
    # each character was drawn from the window of the presentation before it
    np.testing.assert_array_equal(g.scores, g.result.logits[len(prompt) - 1:])
    np.testing.assert_allclose(g.scores, g.reference_scores, rtol=0, atol=1e-3 * np.abs(g.reference_scores).max())
    assert g.result.logits.shape == (len(prompt) + n - 1, 5)
    path = g.save(str(tmp_path / "out"))
    assert open(os.path.join(path, "text.txt")).read() == prompt + want
    with np.load(os.path.join(path, "scores.npz")) as z:
        assert z["scores"].shape == (n, 5) and int(z["prompt_length"]) == len(prompt)


@pytest.mark.brian2
@pytest.mark.long
def test_escape_generation_records_the_class_cells_and_draws_the_figure(tmp_path):
    from ctmhsa.figures.generate import draw

    g = generate(toy(), "abc", 3, neuron="escape", temperature=0.5, seed=1, record_spikes=("classes",))
    assert len(g.generated) == 3 and set(g.generated) <= set(VOCAB)
    np.testing.assert_array_equal(g.scores, g.result.logits[2:])
    assert g.result.spikes["classes"][0].size > 0
    N = {p["name"]: p["N"] for p in g.result.config["circuit"]["populations"]}["classes"]
    assert g.cell_class.shape == g.cell_sign.shape == (N,) and set(g.cell_sign) == {0, 1}
    path = g.save(str(tmp_path / "out"))
    assert os.path.getsize(draw(path)) > 0


@pytest.mark.brian2
def test_the_reference_is_the_exact_model_with_the_circuits_phi():
    """The scores compared with are the exact model's with the circuit's feature map (not the
    default): at the rate level they equal the circuit's."""
    g = generate(toy(), "ab", 3, neuron="rate", temperature=0.0, codegen="numpy", phi="relu")
    np.testing.assert_allclose(g.reference_scores, g.result.reference_logits[1:])
    np.testing.assert_allclose(g.scores, g.reference_scores, atol=1e-3 * np.abs(g.reference_scores).max())
    assert g.agreement == 1.0


@pytest.mark.brian2
def test_an_unsettled_rate_stream_is_reported_per_presentation():
    """A causal model's stream at the rate level, 0.1 s per token: the read-out has not settled,
    and the result says so (a warning naming the presentation), rather than passing as exact."""
    model = toy()
    U = np.eye(5)[[0, 3, 1, 4]]
    with pytest.warns(UserWarning, match=r"^presentation: the rate-level output still changed by .* of presentation"):
        res = simulate_model(model, U, neuron="rate", presentation=0.05, codegen="numpy")
    per = res.diagnostics["settled_per_presentation"]
    assert len(per) == 4 and max(per) == res.diagnostics["settled"] > 1e-4


@pytest.mark.codegen_independent
def test_causal_cells_name_their_params_and_the_step_they_need():
    from ctmhsa.sims.model import BRIEF_PARAMS, CAUSAL_PARAMS, causal_cells

    assert causal_cells("causal", "escape") == dict(params=CAUSAL_PARAMS)          # the level's 1 ms step
    brief = causal_cells("brief", "escape")
    assert brief["params"] is BRIEF_PARAMS and brief["dt"] == pytest.approx(BRIEF_PARAMS.tau_m / 5)
    with pytest.raises(ValueError, match="^cells: expected one of"):
        causal_cells("slow", "escape")


@pytest.mark.codegen_independent
def test_generate_refuses_cells_without_a_circuit(tmp_path, capsys):
    from ctmhsa.sims.cli import main

    assert main(["generate", "--neuron", "float", "--cells", "brief", "--chars", "2",
                 "--out", str(tmp_path / "g")]) == 2
    assert "--cells: --neuron float" in capsys.readouterr().err and not (tmp_path / "g").exists()


@pytest.mark.brian2
def test_brief_cells_run_the_escape_circuit_on_their_finer_step():
    from ctmhsa.sims.model import causal_cells

    g = generate(toy(), "ab", 2, neuron="escape", seed=1, **causal_cells("brief", "escape"))
    assert g.result.config["dt"] == pytest.approx(5e-4) and len(g.generated) == 2


@pytest.mark.codegen_independent
def test_the_cells_flags_offer_every_named_cell():
    import argparse

    from ctmhsa.sims.benchmarks import language as bench
    from ctmhsa.sims.cli import build_parser
    from ctmhsa.sims.model import CAUSAL_CELLS

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    gen = next(a for a in sub.choices["generate"]._actions if a.dest == "cells")
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    lang = next(a for a in parser._actions if a.dest == "cells")
    assert list(gen.choices) == list(lang.choices) == list(CAUSAL_CELLS)
