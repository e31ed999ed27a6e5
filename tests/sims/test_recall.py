"""In-context recall (:mod:`ctmhsa.sims.recall`): the sequences have the documented layout and are
seeded, bad arguments are refused by name, and the shipped causal model ``recall`` recalls held-out
sequences by :func:`ctmhsa.transformer_forward`, which the training forward equals on its weights."""

import json

import numpy as np
import pytest

import ctmhsa
from ctmhsa.maths.model import _models_dir
from ctmhsa.sims.recall import KEYS, VALUES, input_size, recall_accuracy, recall_sequences

pytestmark = pytest.mark.codegen_independent

HELD_OUT_SEED = 7    # < 2**32: never a training minibatch's seed (train_recall draws those in [2**32, 2**62))


def _parts(s):
    """Key, value and flag parts of the inputs."""
    return s.inputs[..., :s.keys], s.inputs[..., s.keys:s.keys + s.values], s.inputs[..., -1]


def test_sequences_have_the_documented_layout():
    s = recall_sequences(50, pairs=5, queries=3, seed=2)
    assert s.T == 8 and s.inputs.shape == (50, 8, input_size()) == (50, 8, KEYS + VALUES + 1)
    assert s.targets.shape == s.mask.shape == (50, 8) and s.mask.dtype == bool
    key, val, flag = _parts(s)
    np.testing.assert_array_equal(key.sum(axis=-1), 1)                       # one key per token
    np.testing.assert_array_equal(val[:, :5].sum(axis=-1), 1)                # a fact: its value ...
    np.testing.assert_array_equal(flag[:, :5], 0)                            # ... and no flag
    np.testing.assert_array_equal(val[:, 5:], 0)                             # a query: no value ...
    np.testing.assert_array_equal(flag[:, 5:], 1)                            # ... and the flag
    np.testing.assert_array_equal(s.mask, np.broadcast_to(np.arange(8) >= 5, (50, 8)))
    np.testing.assert_array_equal(s.targets[:, :5], -1)
    stored = key[:, :5].argmax(-1)
    assert all(len(set(row)) == 5 for row in stored)                        # distinct keys
    for i in range(50):
        value_of = dict(zip(stored[i], val[i, :5].argmax(-1)))
        asked = key[i, 5:].argmax(-1)
        assert len(set(asked)) == 3 and set(asked) <= set(stored[i])          # stored keys, each once
        assert [value_of[k] for k in asked] == list(s.targets[i, 5:])


def test_more_queries_than_pairs_go_round_the_stored_keys():
    s = recall_sequences(20, pairs=3, queries=7, keys=4, values=2, seed=0)
    key = _parts(s)[0]
    for i in range(20):
        stored, asked = set(key[i, :3].argmax(-1)), key[i, 3:].argmax(-1)
        assert set(asked[:3]) == set(asked[3:6]) == stored and asked[6] in stored
    assert recall_sequences(4, pairs=2).queries == 2                          # default: queries = pairs


def test_sequences_are_seeded():
    a, b = recall_sequences(10, 4, seed=3), recall_sequences(10, 4, seed=3)
    np.testing.assert_array_equal(a.inputs, b.inputs)
    np.testing.assert_array_equal(a.targets, b.targets)
    assert not np.array_equal(a.inputs, recall_sequences(10, 4, seed=4).inputs)


@pytest.mark.parametrize("kwargs, error, name", [
    (dict(n=0, pairs=2), ValueError, "n"),
    (dict(n=2.0, pairs=2), TypeError, "n"),
    (dict(n=2, pairs=0), ValueError, "pairs"),
    (dict(n=2, pairs=9), ValueError, "pairs"),
    (dict(n=2, pairs=3, keys=2), ValueError, "pairs"),
    (dict(n=2, pairs=True), TypeError, "pairs"),
    (dict(n=2, pairs=2, queries=0), ValueError, "queries"),
    (dict(n=2, pairs=2, keys="8"), TypeError, "keys"),
    (dict(n=2, pairs=2, values=0), ValueError, "values"),
    (dict(n=2, pairs=2, seed=1.5), TypeError, "seed"),
])
def test_bad_arguments_are_refused_by_name(kwargs, error, name):
    with pytest.raises(error, match=f"^{name}:"):
        recall_sequences(**kwargs)


def test_recall_accuracy_scores_the_masked_positions_only():
    logits = np.eye(3)[[0, 1, 2, 0]] * 5.0                     # argmax 0, 1, 2, 0
    targets, mask = np.array([0, 2, 2, 1]), np.array([True, True, True, False])
    assert recall_accuracy(logits, targets, mask) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="^mask:"):
        recall_accuracy(logits, targets, np.zeros(4, bool))
    with pytest.raises(ValueError, match="^logits:"):
        recall_accuracy(logits[:3], targets, mask)


@pytest.fixture(scope="module")
def model():
    return ctmhsa.load_model("recall")


def test_shipped_model_recalls_held_out_sequences(model):
    record = json.loads((_models_dir() / "recall.json").read_text())
    assert model.causal and model.forget == 1.0 and not model.memory_normalised and model.vocab is None
    assert model.H * model.dk * model.dv <= 128 and model.de <= 32          # a small circuit
    assert model.embed_W.shape == (model.de, input_size()) and model.readout_W.shape[0] == VALUES
    assert record["training"]["seed"] != HELD_OUT_SEED and record["training"]["eval_seed"] != HELD_OUT_SEED
    s = recall_sequences(500, pairs=record["trained_pairs"], seed=HELD_OUT_SEED)
    logits = ctmhsa.transformer_forward(s.inputs, model)["logits"]
    assert logits.shape == (500, s.T, VALUES)
    assert recall_accuracy(logits, s.targets, s.mask) >= 0.99
    # one sequence at a time gives the stack's logits
    np.testing.assert_allclose(ctmhsa.transformer_forward(s.inputs[3], model)["logits"], logits[3], rtol=1e-12)


def test_record_is_the_shipped_files(model):
    from ctmhsa.sims.models.train_causal import sha256
    from ctmhsa.sims.models.train_recall import EVAL_SEQUENCES

    record = json.loads((_models_dir() / "recall.json").read_text())
    assert record["sha256"] == sha256(_models_dir() / "recall.npz")
    pairs, seed = record["trained_pairs"], record["training"]["eval_seed"]
    s = recall_sequences(EVAL_SEQUENCES, pairs, seed=seed)
    acc = recall_accuracy(ctmhsa.transformer_forward(s.inputs, model)["logits"], s.targets, s.mask)
    assert acc == record["accuracy"] == record["accuracy_by_pairs"][str(pairs)] >= 0.99


def test_training_forward_equals_transformer_forward_on_the_shipped_weights(model):
    from ctmhsa.sims.models.train_causal import check_against_reference

    arch = dict(blocks=model.n_blocks, forget=model.forget, normalize=model.memory_normalised)
    s = recall_sequences(20, pairs=6, queries=10, seed=HELD_OUT_SEED)
    assert check_against_reference(model.state_dict(), arch, s.inputs, vocab=None) < 1e-9


@pytest.mark.long
def test_train_recall_runs(tmp_path):
    pytest.importorskip("autograd")
    from ctmhsa.maths.model import load_model
    from ctmhsa.sims.models import train_recall

    record = train_recall.main(["--out", str(tmp_path), "--steps", "3"])
    assert (tmp_path / "recall.npz").exists() and json.loads((tmp_path / "recall.json").read_text()) == record
    assert load_model(tmp_path / "recall.npz").causal and set(record["accuracy_by_pairs"]) == set(map(str, range(1, 9)))
