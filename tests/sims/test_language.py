"""The shipped Shakespeare text and language model ``shakespeare``: the text loads in its fixed,
disjoint split, characters encode and decode, bad input is refused by name, bits per character
is right on a uniform model, the model reads one-hot characters of its vocabulary and predicts
held-out text well below a unigram model, and sampling is deterministic per seed."""

import json

import numpy as np
import pytest

import ctmhsa
from ctmhsa.maths.model import _models_dir
from ctmhsa.sims import language

pytestmark = pytest.mark.codegen_independent

# the shipped model scores 2.818 bits/char on the test's 16 windows (2.763 on the json's 256); a
# unigram model of the training text scores 4.83 on the validation play, a trigram 3.12
BPC_MAX = 2.95


@pytest.fixture(scope="module")
def model():
    return ctmhsa.load_model("shakespeare")


@pytest.fixture(scope="module")
def record():
    return json.loads((_models_dir() / "shakespeare.json").read_text())


def test_text_loads_in_a_fixed_disjoint_split():
    plays = language.load_plays()
    assert tuple(plays) == language.PLAYS and not set(language.TRAIN_PLAYS) & set(language.VALIDATION_PLAYS)
    train, val = language.load_text("train"), language.load_text("validation")
    assert val.startswith("TWELFTH NIGHT") and "TWELFTH NIGHT" not in train
    assert train.startswith("HAMLET") and 1_000_000 < len(train) < 1_100_000 and 100_000 < len(val) < 120_000
    assert set(train + val) == set(language.VOCAB) and len(language.VOCAB) == 62
    # no window of the validation play appears in the training text
    for s in (1000, 50_000, 100_000):
        assert val[s:s + 200] not in train
    assert "Gutenberg" not in train + val and "\n\n\n" not in train


def test_clean_strips_a_licence_and_maps_characters_as_documented():
    raw = ("licence\r\n*** START OF THIS PROJECT GUTENBERG EBOOK X ***\r\n  HAM.\t\"Hi\" & [bye]  1 Clown. \n"
           "\n\n\n\nEnd\n*** END OF THIS PROJECT GUTENBERG EBOOK X ***\nlicence")
    assert language.clean(raw) == "HAM. 'Hi' and bye Clown.\n\nEnd\n"
    with pytest.raises(TypeError, match="raw"):
        language.clean(b"x")


def test_encode_decode_round_trip_and_one_hot():
    text = "ROMEO:\nBut soft, what light?"
    ids = language.encode(text)
    assert ids.dtype == np.int64 and language.decode(ids) == text
    assert language.decode(language.encode("cab", "abc"), "abc") == "cab"
    U = language.one_hot(ids, len(language.VOCAB))
    assert U.shape == (len(text), 62) and np.array_equal(U.argmax(axis=1), ids) and U.sum() == len(text)
    assert language.encode("").shape == (0,)


@pytest.mark.parametrize("call, match", [
    (lambda: language.encode("a[b]&", "ab"), r"not in the vocabulary: '&\[\]'"),
    (lambda: language.encode(b"ab"), "text"),
    (lambda: language.encode("ab", "aab"), "vocab"),
    (lambda: language.decode([0, 62]), "ids"),
    (lambda: language.decode([0.5]), "ids"),
    (lambda: language.one_hot([0], 0), "V"),
    (lambda: language.load_text("test"), "split"),
    (lambda: language.bits_per_char(np.zeros((3, 4)), np.zeros(2, int)), "logits, targets"),
    (lambda: language.bits_per_char(np.zeros((2, 4)), np.array([0, 4])), "targets"),
    (lambda: language.validation_windows(0, 10), "n"),
    (lambda: language.validation_windows(2, 10, -1), "seed"),
    (lambda: language.validation_windows(2, 10**7), "length"),
])
def test_bad_input_is_refused_by_name(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


def test_bits_per_char_of_a_uniform_and_a_certain_model():
    V = 62
    y = np.arange(10) % V
    assert language.bits_per_char(np.zeros((10, V)), y) == pytest.approx(np.log2(V), abs=1e-12)
    sure = 50.0 * np.eye(V)[y]
    assert language.bits_per_char(sure[None], y[None]) == pytest.approx(0.0, abs=1e-18)   # a batch axis
    assert language.bits_per_char(sure, y) == pytest.approx(0.0, abs=1e-18)
    two = np.log([[3.0, 1.0]])
    assert language.bits_per_char(two, np.array([1])) == pytest.approx(2.0)


def test_validation_windows_are_fixed_per_seed():
    W = language.validation_windows(8, 64, seed=3)
    assert W.shape == (8, 65) and np.array_equal(W, language.validation_windows(8, 64, seed=3))
    assert not np.array_equal(W, language.validation_windows(8, 64, seed=4))
    val = language.load_text("validation")
    assert all(language.decode(w) in val for w in W)


def test_shipped_model_reads_one_hot_characters(model, record):
    V = len(language.VOCAB)
    assert model.vocab == language.VOCAB == record["vocab"] and model.causal and not model.normalize
    assert 0 < model.forget < 1 and model.forget == record["architecture"]["forget"]
    assert model.embed_W.shape == (model.de, V) and model.readout_W.shape == (V, model.de)
    assert model.embed_pos is None and model.n_blocks <= 2 and model.H <= 2 and model.de <= 32
    assert model.dk <= 8 and model.dv <= 8 and all(b.mlp.W1.shape[0] <= 64 for b in model.blocks)
    logits = ctmhsa.transformer_forward(language.one_hot(language.encode("ROMEO:"), V), model)["logits"]
    assert logits.shape == (6, V)


def test_shipped_model_predicts_held_out_text(model, record):
    # 16 fixed validation windows of 160 characters, the last 96 predictions of each scored
    W = language.validation_windows(16, 160, seed=0)
    U = np.eye(len(language.VOCAB))[W[:, :-1]]
    logits = ctmhsa.transformer_forward(U, model)["logits"]
    bpc = language.bits_per_char(logits[:, -96:], W[:, -96:])
    assert bpc < BPC_MAX
    assert record["validation_bpc"] < BPC_MAX and record["train_bpc"] < BPC_MAX


def test_json_records_the_shipped_files():
    record = json.loads((_models_dir() / "shakespeare.json").read_text())
    from ctmhsa.sims.models.train_causal import sha256

    assert record["sha256"] == sha256(_models_dir() / "shakespeare.npz")
    assert record["data"]["sha256"] == sha256(language.TEXT_FILE)
    assert record["data"]["validation_plays"] == list(language.VALIDATION_PLAYS)
    assert "public domain" in record["data"]["attribution"] and "Gutenberg" in record["data"]["attribution"]


def test_sample_is_deterministic_per_seed(model):
    a = language.sample(model, "ROMEO:", 20, temperature=0.8, seed=0)
    assert len(a) == 20 and set(a) <= set(language.VOCAB)
    assert a == language.sample(model, "ROMEO:", 20, temperature=0.8, seed=0)
    assert a != language.sample(model, "ROMEO:", 20, temperature=0.8, seed=1)
    greedy = language.sample(model, "ROMEO:", 12, temperature=0, seed=0)
    assert greedy == language.sample(model, "ROMEO:", 12, temperature=0, seed=5)
    # greedy: each character is the argmax of the model's scores on the text so far
    text = "ROMEO:" + greedy[:-1]
    z = ctmhsa.transformer_forward(language.one_hot(language.encode(text), len(language.VOCAB)), model)["logits"]
    assert language.VOCAB[int(z[-1].argmax())] == greedy[-1]
    assert language.sample(model, "ab", 0) == ""


def test_sample_context_bound_loses_nothing(model):
    # sample() reads the last K characters, lambda^K < 1e-18: the logits equal the whole text's
    K = int(np.ceil(np.log(1e-18) / np.log(model.forget)))
    ids = language.validation_windows(1, K + 40, seed=2)[0]
    U = language.one_hot(ids, len(language.VOCAB))
    whole = ctmhsa.transformer_forward(U, model)["logits"][-1]
    assert np.allclose(ctmhsa.transformer_forward(U[-K:], model)["logits"][-1], whole, rtol=0, atol=1e-12)
    assert not np.allclose(ctmhsa.transformer_forward(U[-3:], model)["logits"][-1], whole, rtol=0, atol=1e-3)


@pytest.mark.parametrize("kwargs, match", [
    (dict(temperature=-0.1), "temperature"), (dict(temperature=float("nan")), "temperature"),
    (dict(prompt=""), "prompt"), (dict(prompt="#"), "not in the vocabulary"), (dict(chars=-1), "chars"),
    (dict(seed=-1), "seed"), (dict(model="shakespeare"), "model"),
])
def test_sample_refuses_bad_arguments(model, kwargs, match):
    args = dict(model=model, prompt="ROMEO:", chars=3, temperature=1.0, seed=0)
    args.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=match):
        language.sample(**args)


@pytest.mark.long
def test_a_few_training_steps_lower_the_loss():
    pytest.importorskip("autograd")
    from ctmhsa.sims.models import train_shakespeare as ts

    arch = dict(ts.ARCH, blocks=1, de=16, dh=16)
    P, history, _ = ts.fit(arch, dict(ts.SETTINGS, steps=40, batch=8, window=64, log_every=1000), log=lambda s: None)
    assert np.mean([l for _, l in history[-5:]]) < np.mean([l for _, l in history[:5]]) - 0.3
    assert ts.tc.check_against_reference(P, arch, np.eye(62)[language.validation_windows(2, 64)[:, :-1]],
                                         language.VOCAB) < 1e-9
