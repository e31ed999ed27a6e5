"""The shipped Co4 recall model (``recall_co4``, trained by sims/models/train_recall_co4.py): its
file, its record (re-measured from the file on the held-out questions) and its tokens as a set."""

import hashlib
import json

import numpy as np
import pytest

from ctmhsa.maths.co4 import Co4Model, co4_forward
from ctmhsa.maths.model import _models_dir, _shipped_models, load_model
from ctmhsa.sims.models.train_recall_co4 import EVAL_SEED, co4_accuracy, gs_accuracy, majority, questions

pytestmark = pytest.mark.codegen_independent

MODELS = _models_dir()


@pytest.fixture(scope="module")
def co4():
    return load_model("recall_co4")


@pytest.fixture(scope="module")
def record():
    return json.loads((MODELS / "recall_co4.json").read_text())


def test_shipped_file_loads_as_a_co4_model_without_a_positional_code(co4, record):
    assert isinstance(co4, Co4Model) and co4.name == "recall_co4" and "recall_co4" in _shipped_models()
    assert co4.embed_pos is None and co4.embed_W.shape == (16, 17)
    assert co4.shape == dict(L=4, de=16, H=2, d=8, classes=8)
    assert record["sha256"] == hashlib.sha256((MODELS / "recall_co4.npz").read_bytes()).hexdigest()


def test_the_record_is_what_the_file_gives_on_the_held_out_questions(co4, record):
    # a smaller batch would draw other sequences: the record's 2,000 per load, re-measured at two loads
    for pairs in (2, 8):
        assert co4_accuracy(co4, pairs) == record["accuracy_by_pairs"][str(pairs)]
    assert record["accuracy"] == record["accuracy_by_pairs"]["8"]
    assert gs_accuracy(load_model("recall"), 8) == record["recall_model_by_pairs"]["8"] == 1.0
    assert majority(8) == record["majority_by_pairs"]["8"]
    # Co4 retrieves above guessing the commonest value, below the memory model
    assert record["majority_by_pairs"]["8"] + 0.05 < record["accuracy"] < 0.9


def test_the_batched_training_maths_is_co4_forward(co4):
    from ctmhsa.sims.models.train_co4 import forward

    U, _ = questions(30, 5, EVAL_SEED)
    with np.load(MODELS / "recall_co4.npz") as f:
        P = {k: f[k] for k in f.files if k != "kind"}
    ref = np.stack([co4_forward(x, co4)["logits"] for x in co4.embed(U)])
    np.testing.assert_allclose(forward(P, U), ref, rtol=1e-12, atol=1e-12)


def test_a_set_answers_alike_in_any_order(co4):
    U, _ = questions(5, 6, EVAL_SEED)
    rng = np.random.default_rng(3)
    for x in co4.embed(U):
        z = co4_forward(x, co4)["logits"]
        np.testing.assert_allclose(co4_forward(x[rng.permutation(len(x))], co4)["logits"], z, rtol=1e-12, atol=1e-12)


def test_any_number_of_tokens_is_read(co4):
    # no positional code: one fact or eight, the same model answers (a one-fact question always right)
    for pairs in (1, 3, 8):
        U, y = questions(20, pairs, EVAL_SEED)
        z = np.stack([co4_forward(x, co4)["logits"] for x in co4.embed(U)])
        assert co4.embed(U).shape == (20, pairs + 1, 16) and z.shape == (20, 8) and np.isfinite(z).all()
        if pairs == 1:
            assert np.array_equal(z.argmax(axis=1), y)


@pytest.mark.long
def test_train_recall_co4_runs(tmp_path):
    pytest.importorskip("autograd")
    from ctmhsa.sims.models import train_recall_co4

    record = train_recall_co4.main(["--out", str(tmp_path), "--steps", "3", "--seed", "5"])
    assert json.loads((tmp_path / "recall_co4.json").read_text()) == record
    assert isinstance(load_model(tmp_path / "recall_co4.npz"), Co4Model)
    assert set(record["accuracy_by_pairs"]) == set(map(str, range(1, 9))) and record["training"]["seed"] == 5
    with pytest.raises(SystemExit):
        train_recall_co4.main(["--steps", "0"])
