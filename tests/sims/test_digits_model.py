"""The shipped model ``digits`` (a vision transformer for scikit-learn's 8×8 digits): its file
has the documented shapes, the package's reference reproduces the float test accuracy its JSON
records (from the shipped test images, no scikit-learn), the JSON's sha256 is the file's, and
images become tokens of 2×2 patches in the documented order."""

import hashlib
import json
import sys

import numpy as np
import pytest

import ctmhsa
from ctmhsa.maths.model import _models_dir
from ctmhsa.sims import digits

pytestmark = pytest.mark.codegen_independent

MODELS = _models_dir()


@pytest.fixture(scope="module")
def record():
    return json.loads((MODELS / "digits.json").read_text())


@pytest.fixture(scope="module")
def model():
    return ctmhsa.load_model("digits")


@pytest.mark.smoke
def test_shipped_model_has_the_documented_shapes(model):
    assert model.name == "digits" and 1 <= model.n_blocks <= 2
    assert (model.de, model.H, model.dk, model.dv) == (16, 2, 8, 8)
    for b in model.blocks:
        assert b.WQ.shape == b.WK.shape == b.WV.shape == (2, 8, 16) and b.WO.shape == (2, 16, 8)
        assert b.mlp is not None and b.mlp.W1.shape == (32, 16) and b.mlp.W2.shape == (16, 32)
        assert b.WS is None
        assert not any(np.any(getattr(b.attn, k)) for k in ("bq", "bk", "bv", "bo"))
    assert model.readout_W.shape == (10, 16) and model.readout_b.shape == (10,)
    assert model.embed_W.shape == (16, 4) and model.embed_pos.shape == (16, 16)
    # moderate weights (the circuit's codes prefer entries of order 1/sqrt(fan-in))
    assert max(np.abs(a).max() for a in model.state_dict().values()) < 5


@pytest.mark.smoke
def test_reference_reproduces_the_recorded_test_accuracy(model, record):
    U, y = digits.test_set()
    assert U.shape == (digits.DIGITS_TEST, 16, 4) and y.shape == (digits.DIGITS_TEST,)
    pred = ctmhsa.transformer_forward(U, model)["logits"].argmax(axis=1)
    correct = int((pred == y).sum())
    assert correct == record["test_correct"] and record["test_images"] == len(y) == 497
    assert (pred == y).mean() == pytest.approx(record["test_accuracy"], abs=1e-12)
    assert record["test_accuracy"] >= 0.94
    # one image at a time gives the same class as the stack
    assert ctmhsa.transformer_forward(U[7], model)["logits"].argmax() == pred[7]


@pytest.mark.smoke
def test_json_records_the_file_and_how_it_was_made(record):
    assert record["sha256"] == hashlib.sha256((MODELS / "digits.npz").read_bytes()).hexdigest()
    assert record["architecture"]["blocks"] in (1, 2) and record["train_images"] == digits.DIGITS_TRAIN
    for key in ("seed", "steps", "lr"):
        assert key in record["training"]
    assert record["data"]["sklearn_version"] and record["command"].startswith("python")
    assert "CC BY 4.0" in record["data"]["attribution"]
    assert 0.94 <= record["test_accuracy"] <= record["train_accuracy"] <= 1


def test_shipped_test_images_are_uint8_digits():
    with np.load(digits.TEST_FILE) as f:
        images, labels = f["images"], f["labels"]
    assert images.shape == (497, 8, 8) and images.dtype == np.uint8 and images.max() <= 16
    assert labels.shape == (497,) and set(np.unique(labels)) == set(range(10))
    U, y = digits.test_set()
    assert np.array_equal(U, digits.patches(images)) and np.array_equal(y, labels)
    assert U.min() >= 0 and U.max() <= 1


def test_shipped_test_images_are_the_last_497_of_scikit_learn():
    pytest.importorskip("sklearn")
    images, labels = digits.load_images()
    with np.load(digits.TEST_FILE) as f:
        assert np.array_equal(f["images"], images[digits.DIGITS_TRAIN:])
        assert np.array_equal(f["labels"], labels[digits.DIGITS_TRAIN:])


def test_patches_put_pixel_r_c_at_its_token_and_position():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 17, size=(3, 8, 8))
    U = digits.patches(images)
    assert U.shape == (3, 16, 4)
    for r in range(8):
        for c in range(8):
            assert np.array_equal(U[:, 4 * (r // 2) + (c // 2), 2 * (r % 2) + (c % 2)], images[:, r, c] / 16)
    assert np.array_equal(digits.patches(images.reshape(3, 64)), U)
    assert np.array_equal(digits.patches(images[1]), U[1])


@pytest.mark.parametrize("bad, error", [(np.zeros((2, 8, 7)), ValueError), (np.full((1, 8, 8), 17), ValueError),
                                        (np.full((1, 64), -1), ValueError), (np.full((1, 8, 8), np.nan), ValueError),
                                        (np.array([["a"] * 8] * 8), TypeError)])
def test_patches_refuse_other_shapes_and_pixels(bad, error):
    with pytest.raises(error, match="images"):
        digits.patches(bad)


def test_train_set_without_scikit_learn_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(ImportError, match="pip install scikit-learn"):
        digits.train_set()


@pytest.mark.codegen_independent
def test_digits_device_auto_compiles_where_it_was_measured_faster(monkeypatch):
    import shutil

    from ctmhsa.sims.digits import AUTO_COMPILED_IMAGES, AUTO_COMPILED_IMAGES_LIF, digits_device

    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/" + name)      # a compiler is found
    assert digits_device("auto", 497) == "cpp_standalone"
    assert digits_device("auto", AUTO_COMPILED_IMAGES - 1) == "runtime"
    assert digits_device("auto", 20, threads=2) == "cpp_standalone"
    assert digits_device("auto", 497, neuron="rate") == "cpp_standalone"       # measured faster there too
    assert digits_device("auto", AUTO_COMPILED_IMAGES_LIF, neuron="lif") == "cpp_standalone"   # vectorised somata
    assert digits_device("auto", AUTO_COMPILED_IMAGES_LIF - 1, neuron="lif") == "runtime"
    assert digits_device("runtime", 497) == "runtime" and digits_device("cpp_standalone", 3) == "cpp_standalone"
    monkeypatch.setattr(shutil, "which", lambda name: None)                    # no compiler
    assert digits_device("auto", 497) == "runtime"
