"""A causal model through the circuit: every block's attention the key-value memory over the
sequence (one token per presentation, L2/3 integrators carrying the context), logits per token
from the read-out's class cells, against :func:`ctmhsa.transformer_forward` (issue 51, item 1)."""

import sys
from pathlib import Path

import numpy as np
import pytest

from ctmhsa.sims.model import simulate_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "maths"))
from test_causal_model import _model  # noqa: E402


@pytest.mark.brian2
@pytest.mark.parametrize("normalize", [False, True])
def test_rate_level_gives_the_causal_models_logits_per_token(normalize):
    model = _model(0, blocks=1, H=1, dk=2, dv=2, de=4, dh=3, classes=3, causal=True, normalize=normalize,
                   forget=0.9)
    X = np.random.default_rng(1).normal(size=(3, 4))
    # 0.5 s per token: the same logits as 1 s to 1e-15 (settled), in half the steps
    res = simulate_model(model, X, neuron="rate", presentation=0.5, codegen="numpy")
    assert res.logits.shape == res.reference_logits.shape == (3, 3)
    assert res.output.shape == res.reference.shape == (3, 4)
    np.testing.assert_allclose(res.logits, res.reference_logits, atol=1e-5 * np.abs(res.reference_logits).max())
    assert res.metrics["logits"]["nrmse"] < 1e-6
    for stage in ("q", "k", "v", "v_tilde", "h", "hidden", "out"):
        assert res.metrics["blocks"][0][stage]["nrmse"] < 1e-6, stage
    assert res.config["causal"] and res.circuit().meta.causal
    gates = res.circuit().by_role("write_gate")
    assert gates == ("b0_nucleus_gate",)


@pytest.mark.codegen_independent
def test_a_causal_model_takes_one_sequence():
    model = _model(0, blocks=1, H=1, dk=2, dv=2, de=4, dh=3, classes=3, causal=True)
    with pytest.raises(ValueError, match=r"X: expected a sequence \(T, de=4\)"):
        simulate_model(model, np.ones((2, 3, 1, 4)), neuron="rate", presentation=1.0)
    with pytest.raises(ValueError, match="X: a causal model reads one sequence"):
        simulate_model(model, np.ones((2, 3, 4)), neuron="rate", presentation=1.0)


@pytest.mark.codegen_independent
def test_a_causal_models_memory_blocks_take_population_firing(monkeypatch):
    """Integrating firing modes apply to a causal model's memory blocks (refused before, naming
    the memory circuit): the model is encoded (the recall model at escape, P = 4: 100 % at 2-8
    pairs, logits NRMSE 0.05-0.08, against 75 % and 0.47-0.49 with Poisson cells;
    docs/language.md)."""
    import ctmhsa.sims.model as sm

    class Encoded(Exception):
        pass

    def encode(circuit, *a, **k):   # stop before any Brian2 object exists
        seen["circuit"] = circuit
        raise Encoded

    seen = {}
    monkeypatch.setattr(sm, "encode_model", encode)
    model = _model(0, blocks=1, H=1, dk=2, dv=2, de=4, dh=3, classes=3, causal=True)
    for firing in ("population", "regular"):   # accepted: the blocks are encoded, nothing refused
        with pytest.raises(Encoded):
            simulate_model(model, np.ones((3, 4)) + np.arange(12).reshape(3, 4), neuron="escape",
                           presentation=0.3, firing=firing, P=2)
        assert seen.pop("circuit").meta.causal


@pytest.mark.codegen_independent
@pytest.mark.parametrize("kw, match", [
    (dict(lag=0.01), "lag: a causal model's token reaches its relays 0.02 s into each presentation"),
    (dict(dale=True), "dale: a causal model's blocks are memory circuits"),
])
def test_what_a_causal_models_memory_blocks_do_not_build_is_refused(kw, match, monkeypatch):
    import ctmhsa.sims.model as sm

    monkeypatch.setattr(sm, "encode_model", lambda *a, **k: pytest.fail("encoded before the refusal"))
    model = _model(0, blocks=1, H=1, dk=2, dv=2, de=4, dh=3, classes=3, causal=True)
    with pytest.raises(ValueError, match=match):
        simulate_model(model, np.ones((3, 4)) + np.arange(12).reshape(3, 4), neuron="escape", presentation=0.3, **kw)
