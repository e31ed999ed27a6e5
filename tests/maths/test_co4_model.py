"""The shipped Co4 digits model (``digits_co4``, trained by sims/models/train_co4.py): its file,
its record, its input embedding, and how ``load_model`` tells a Co4 file from a transformer's."""

import hashlib
import json

import numpy as np
import pytest

import ctmhsa
from ctmhsa.maths.co4 import Co4Model, co4_forward
from ctmhsa.maths.model import Model, _models_dir, _shipped_models, load_model
from ctmhsa.sims.digits import test_set

pytestmark = pytest.mark.codegen_independent

MODELS = _models_dir()


@pytest.fixture(scope="module")
def co4():
    return load_model("digits_co4")


@pytest.fixture(scope="module")
def record():
    return json.loads((MODELS / "digits_co4.json").read_text())


def _small(**kw):
    r = np.random.default_rng(0)
    return Co4Model(r.normal(size=(2, 3)), *(r.normal(size=(1, 2, 3)) for _ in range(3)), r.normal(size=(1, 3, 2)),
                    **kw)


def test_shipped_file_loads_as_a_co4_model_with_its_embedding(co4, record):
    assert isinstance(co4, Co4Model) and not isinstance(co4, Model)
    assert co4.name == "digits_co4" and co4.source == str(MODELS / "digits_co4.npz")
    assert co4.shape == dict(L=record["architecture"]["L"], de=16, H=2, d=8, classes=10)
    assert co4.embed_W.shape == (16, 4) and co4.embed_pos.shape == (16, 16)
    assert "digits_co4" in _shipped_models() and "digits" in _shipped_models()
    assert ctmhsa.load_model is load_model and ctmhsa.co4_forward is co4_forward


def test_shipped_file_matches_its_record(record):
    assert record["sha256"] == hashlib.sha256((MODELS / "digits_co4.npz").read_bytes()).hexdigest()
    assert record["test_images"] == 497 and record["test_correct"] == round(record["test_accuracy"] * 497)


def test_co4_forward_reproduces_the_trained_predictions_on_50_test_images(co4, record):
    from ctmhsa.sims.models.train_co4 import forward

    U, y = test_set()
    pred = np.array([np.argmax(co4_forward(x, co4)["logits"]) for x in co4.embed(U[:50])])
    assert int((pred == y[:50]).sum()) == record["test_correct_first_50"]
    # and the batched training maths classifies them alike
    with np.load(MODELS / "digits_co4.npz") as f:
        P = {k: f[k] for k in f.files if k != "kind"}
    assert np.array_equal(pred, forward(P, U[:50]).argmax(axis=1))


def test_embed_is_the_transformers(co4):
    U = test_set()[0][:3]
    assert np.array_equal(co4.embed(U), U @ co4.embed_W.T + co4.embed_pos)
    assert np.array_equal(co4.embed(U[0]), co4.embed(U)[0])


@pytest.mark.parametrize("kw, message", [
    (dict(embed_W=np.ones((4, 2))), r"^embed_W: expected shape \(de=3, p\) like latents, got \(4, 2\)"),
    (dict(embed_pos=np.ones((5, 3))), r"^embed_pos: given without embed_W"),
    (dict(embed_W=np.ones((3, 2)), embed_pos=np.ones((5, 4))),
     r"^embed_pos: expected shape \(n, de=3\) like latents, got \(5, 4\)"),
    (dict(embed_W=np.full((3, 2), np.nan)), r"^embed_W: contains 6 NaN"),
])
def test_embed_validation_names_the_argument(kw, message):
    with pytest.raises(ValueError, match=message):
        _small(**kw)


def test_embed_inputs_and_a_missing_embedding_are_named():
    m = _small(embed_W=np.ones((3, 2)), embed_pos=np.ones((5, 3)), name="tiny")
    assert m.embed(np.ones((5, 2))).shape == (5, 3)
    with pytest.raises(ValueError, match=r"^inputs: expected shape \(n=5, p=2\) or \(B, n=5, p=2\)"):
        m.embed(np.ones((4, 2)))
    with pytest.raises(ValueError, match=r"^embed: model tiny has no input embedding"):
        _small(name="tiny").embed(np.ones((5, 2)))
    with pytest.raises(TypeError, match=r"^name: expected a str"):
        _small(name=3)
    with pytest.raises(ValueError, match=r"^X: expected tokens \(n, de=3\).*go through model\.embed\(inputs\) first$"):
        co4_forward(np.ones((5, 2)), m)


def test_a_co4_file_is_decided_by_its_keys_never_by_its_name(co4, tmp_path):
    state = co4.state_dict()
    np.savez(tmp_path / "digits.npz", **state)                       # a transformer's name
    assert isinstance(load_model(tmp_path / "digits.npz"), Co4Model)
    np.savez(tmp_path / "nokind.npz", **{k: a for k, a in state.items() if k != "kind"})
    again = load_model(tmp_path / "nokind.npz")
    assert isinstance(again, Co4Model) and np.array_equal(again.WO, co4.WO) and again.name == "nokind"
    transformer = load_model("digits").state_dict()
    np.savez(tmp_path / "mixed.npz", **{**transformer, **state})
    with pytest.raises(ValueError, match=r"^state: unknown key\(s\) \['blocks\.0\.attn\.WK'"):
        load_model(tmp_path / "mixed.npz")
    np.savez(tmp_path / "kindonly.npz", **transformer, kind=np.array("co4"))
    with pytest.raises(ValueError, match=r"^state: unknown key\(s\) \['kind'\]"):
        load_model(tmp_path / "kindonly.npz")                           # never a transformer Model
    np.savez(tmp_path / "badkind.npz", **dict(state, kind=np.array("transformer")))
    with pytest.raises(ValueError, match=r"^kind: a Co4 model file's kind is the string 'co4'"):
        load_model(tmp_path / "badkind.npz")
    np.savez(tmp_path / "nowq.npz", **{k: a for k, a in state.items() if k != "co4.WQ"})
    with pytest.raises(ValueError, match=r"^state: missing required key\(s\) \['co4\.WQ'\]"):
        load_model(tmp_path / "nowq.npz")
    assert isinstance(load_model("digits"), Model)
