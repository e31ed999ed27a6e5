"""Causal models: every block's attention the key-value memory over a sequence, one token per
step, and logits per token (the maths of a language model; :mod:`ctmhsa.maths.transformer`)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctmhsa.maths.model import Block, MLPWeights, Model, load_model
from ctmhsa.maths.reference import linear_mhsa
from ctmhsa.maths.transformer import normalise, transformer_forward

pytestmark = pytest.mark.codegen_independent


def _model(seed=0, blocks=2, H=2, dk=3, dv=3, de=5, dh=4, classes=4, p=None, **kw):
    r = np.random.default_rng(seed)
    out = []
    for _ in range(blocks):
        b = Block.from_arrays(*(r.normal(size=s) / np.sqrt(de) for s in ((H, dk, de), (H, dk, de), (H, dv, de))),
                              r.normal(size=(H, de, dv)) / np.sqrt(dv))
        mlp = MLPWeights(r.normal(size=(dh, de)) / np.sqrt(de), r.normal(size=dh) * 0.1,
                         r.normal(size=(de, dh)) / np.sqrt(dh), r.normal(size=de) * 0.1)
        out.append(Block(attn=b.attn, mlp=mlp))
    extra = {} if p is None else dict(embed_W=r.normal(size=(de, p)))
    return Model(blocks=tuple(out), readout_W=r.normal(size=(classes, de)), readout_b=r.normal(size=classes),
                 **extra, **kw)


def _by_hand(X, model):
    """Each block by causal linear attention (λ = 1), the MLP per token, logits per token."""
    x = X
    for b in model.blocks:
        xn = normalise(x)
        h = x + linear_mhsa(xn, b.WQ, b.WK, b.WV, b.WO, causal=True, normalize=model.memory_normalised)["x_tilde"]
        hn = normalise(h)
        x = h + np.maximum(hn @ b.mlp.W1.T + b.mlp.b1, 0) @ b.mlp.W2.T + b.mlp.b2
    return normalise(x) @ model.readout_W.T + model.readout_b


@pytest.mark.parametrize("normalize", [False, True])
def test_causal_model_is_causal_linear_attention_per_block_at_lambda_1(normalize):
    model = _model(causal=True, normalize=normalize)
    X = np.random.default_rng(1).normal(size=(7, 5))
    out = transformer_forward(X, model)
    assert out["logits"].shape == (7, 4) and out["pooled"] is None
    np.testing.assert_allclose(out["logits"], _by_hand(X, model), rtol=1e-10, atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), T=st.integers(2, 12), cut=st.integers(0, 10),
       lam=st.floats(0.3, 1.0), normalize=st.booleans())
def test_a_token_reads_only_the_tokens_before_it(seed, T, cut, lam, normalize):
    """Changing tokens after t leaves the logits of tokens <= t as they were."""
    cut = min(cut, T - 2)
    model = _model(seed, causal=True, forget=lam, normalize=normalize)
    r = np.random.default_rng(seed + 1)
    X = r.normal(size=(T, 5))
    Z = X.copy()
    Z[cut + 1:] = r.normal(size=(T - cut - 1, 5))
    a, b = transformer_forward(X, model)["logits"], transformer_forward(Z, model)["logits"]
    np.testing.assert_allclose(a[:cut + 1], b[:cut + 1], rtol=1e-12, atol=1e-12)
    assert not np.allclose(a[cut + 1:], b[cut + 1:])


def test_a_language_model_round_trips_its_file(tmp_path):
    vocab = "ab c"
    model = _model(3, classes=len(vocab), p=len(vocab), causal=True, forget=0.9, vocab=vocab)
    path = model.save(tmp_path / "lm.npz")
    back = load_model(path)
    assert back.causal and back.forget == 0.9 and back.memory_normalised is False and back.vocab == vocab
    onehot = np.eye(len(vocab))[[0, 2, 1, 3, 0]]
    np.testing.assert_array_equal(transformer_forward(onehot, back)["logits"],
                                  transformer_forward(onehot, model)["logits"])
    assert "causal=True" in repr(back) and "vocab=4 characters" in repr(back)
    plain = load_model(_model(3).save(tmp_path / "set.npz"))
    assert not plain.causal and plain.memory_normalised is True and plain.vocab is None


@pytest.mark.parametrize("kw, match", [
    (dict(forget=0.5), "forget: 0.5 applies to a causal model"),
    (dict(normalize=False), "normalize: a token set's attention is normalised"),
    (dict(causal=True, forget=0.0), r"forget: expected λ in \(0, 1\]"),
    (dict(causal=True, forget=1.5), r"forget: expected λ in \(0, 1\]"),
    (dict(causal=True, vocab="abcde"), "vocab: 5 characters need a readout of as many classes; got 4 classes"),
    (dict(causal=True, vocab="aab "), "vocab: a character appears twice"),
])
def test_memory_and_vocab_fields_are_checked(kw, match):
    with pytest.raises(ValueError, match=match):
        _model(**kw)


def test_causal_refusals():
    with pytest.raises(TypeError, match="causal: expected True or False"):
        _model(causal="yes")
    with pytest.raises(ValueError, match="embed_pos: a causal model reads a sequence of any length"):
        m = _model(p=3)
        Model(blocks=m.blocks, embed_W=m.embed_W, embed_pos=np.zeros((4, 5)), causal=True)
    with pytest.raises(ValueError, match=r"X: expected a sequence \(T, de=5\) or a batch of them"):
        transformer_forward(np.zeros((2, 2, 3, 5)) + 1, _model(causal=True))


def test_a_batch_of_sequences_is_each_sequence():
    model = _model(5, causal=True, forget=0.8)
    X = np.random.default_rng(6).normal(size=(3, 4, 5))
    batch = transformer_forward(X, model)["logits"]
    for b in range(3):
        np.testing.assert_allclose(batch[b], transformer_forward(X[b], model)["logits"], rtol=1e-12, atol=1e-12)


def test_file_keys_of_the_memory_are_checked(tmp_path):
    state = _model(4).state_dict()
    with pytest.raises(ValueError, match=r"memory.forget: applies to a causal model \(memory.causal = 1\)"):
        Model.from_state_dict({**state, "memory.forget": np.array(0.5)})
    with pytest.raises(ValueError, match="memory.causal: expected 0 or 1"):
        Model.from_state_dict({**state, "memory.causal": np.array(2.0)})
    with pytest.raises(ValueError, match=r"memory.causal: expected a scalar"):
        Model.from_state_dict({**state, "memory.causal": np.ones(2)})
    with pytest.raises(ValueError, match="vocab: expected a vector of Unicode code points"):
        Model.from_state_dict({**state, "vocab": np.array([97.5, 98, 99, 100])})
    m = Model.from_state_dict({**state, "memory.causal": np.array(1.0), "vocab": np.array([97., 98, 99, 100])})
    assert m.causal and m.vocab == "abcd"


def test_replace_keeps_the_default_of_the_models_kind():
    import dataclasses

    plain = _model(7)
    assert plain.normalize is None and plain.memory_normalised
    causal = dataclasses.replace(plain, causal=True)
    assert causal.causal and not causal.memory_normalised
    assert dataclasses.replace(causal, causal=False).memory_normalised
