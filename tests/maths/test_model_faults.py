"""Faults of model files and of training limits (issue 46): a bad argument, a damaged file, a
directory or a data set in place of a model is refused naming it; a save never touches a
directory; huge tokens are named, not answered with the map already in use; a training that
cannot finish or has a non-finite rate is refused before anything is built."""

import os

import numpy as np
import pytest

import ctmhsa
from ctmhsa.maths.model import Model, _shipped_models, load_model
from ctmhsa.maths.reference import linear_mhsa

pytestmark = pytest.mark.codegen_independent


@pytest.fixture
def problem():
    r = np.random.default_rng(0)
    X = r.normal(size=(3, 3)) * .6
    r.normal(size=(2, 3, 3))              # the stream of the setup, drawn for the same W
    W = [r.normal(size=s) / 2 for s in [(1, 2, 3)] * 3 + [(1, 3, 2)]]
    return X, W


@pytest.fixture
def good(tmp_path, problem):
    return Model.from_arrays(*problem[1]).save(tmp_path / "good.npz")


@pytest.mark.parametrize("arg, kind", [(None, "NoneType"), (123, "int"), (1.5, "float")])   # M06, M07
def test_load_model_refuses_what_is_not_a_path(arg, kind):
    with pytest.raises(TypeError, match=rf"^model: expected a model file's path or a shipped model's name "
                                        rf"\(str or path-like\), got {kind}$"):
        load_model(arg)


def _corrupt_crc(data: bytes) -> bytes:
    """The archive with one byte of a member's data flipped (its CRC no longer matches)."""
    out = bytearray(data)
    out[data.index(b"NUMPY", data.index(b"blocks.0.attn.WQ.npy")) + 150] ^= 0xFF
    return bytes(out)


def _corrupt_header(data: bytes) -> bytes:
    """A member's local header name overwritten (the directory and the header disagree)."""
    out = bytearray(data)
    i = data.index(b"blocks.0.attn.WK.npy")
    out[i:i + 3] = b"\xff\xff\xff"
    return bytes(out)


@pytest.mark.parametrize("case, damage, reason", [
    ("M10", lambda b: b[:len(b) // 2], "BadZipFile: File is not a zip file"),
    ("M11", _corrupt_crc, "Bad CRC-32 for file 'blocks.0.attn.WQ.npy'"),
    ("M11b", _corrupt_header, "BadZipFile: File name in directory"),
])
def test_a_truncated_or_damaged_npz_is_named(good, tmp_path, case, damage, reason):
    bad = tmp_path / f"{case}.npz"
    with open(good, "rb") as fh:
        bad.write_bytes(damage(fh.read()))
    with pytest.raises(ValueError, match=rf"^model: '{bad}' is not a readable \.npz: the archive is truncated "
                                         rf"or damaged \(.*{reason}") as err:
        load_model(bad)
    assert len(str(err.value)) < 400                 # not kilobytes of the archive's bytes


def test_a_directory_is_named_as_one(tmp_path):                                  # M27
    with pytest.raises(FileNotFoundError, match=rf"^model: '{tmp_path}' is a directory, not a model file"):
        load_model(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"^model: '\.\.' is a directory"):
        load_model("..")


def test_a_directory_named_like_a_shipped_model_does_not_hide_it(tmp_path, monkeypatch):
    (tmp_path / "digits").mkdir()
    monkeypatch.chdir(tmp_path)
    assert load_model("digits").name == "digits"


@pytest.mark.parametrize("name", ["digits_test", "digits_train"])                # C29
def test_shipped_data_sets_are_not_models(name):
    assert _shipped_models() == ["digits", "digits_co4", "recall", "recall_co4", "shakespeare"]
    with pytest.raises(ValueError, match=rf"^model: '{name}' is a data set shipped beside the models, not a "
                                         r"model; shipped models: digits, digits_co4, recall, recall_co4, shakespeare \("):
        load_model(name)


def test_save_into_a_missing_folder_names_it(good, tmp_path):                    # M57
    target = tmp_path / "sub" / "missing" / "x.npz"
    with pytest.raises(FileNotFoundError, match=rf"^path: the folder '{target.parent}' of '{target}' does not "
                                                "exist; create it first"):
        load_model(good).save(target)
    assert not (tmp_path / "sub").exists()
    with pytest.raises(ValueError, match=rf"^path: '{good}' \(the folder of '{good}/x.npz'\) is not a directory"):
        load_model(good).save(f"{good}/x.npz")


def test_save_onto_a_directory_is_refused_and_leaves_it(good, tmp_path):          # M58
    target = tmp_path / "dir.npz"
    target.mkdir()
    (target / "keep").write_text("x")
    with pytest.raises(ValueError, match=rf"^path: '{target}' is an existing directory, not a model file"):
        load_model(good).save(target)
    assert os.listdir(target) == ["keep"] and (target / "keep").read_text() == "x"
    assert sorted(os.listdir(tmp_path)) == ["dir.npz", "good.npz"]      # no temporary file left


# huge tokens (M20, I06) ----------------------------------------------------------------------

@pytest.mark.parametrize("method", ["vectorized", "loops", "linear"])
def test_features_that_underflow_name_the_tokens_not_another_map(problem, method):     # I06
    X, W = problem
    with pytest.raises(ValueError, match=r"^phi: the normaliser Z underflowed to 0 for 1 \(batch, head, query\) "
                                         r"triple\(s\), first at batch 0, head 0, query 2: the feature map 'elu1' "
                                         r"is positive.*The tokens \(X: largest \|x\| 7\.82e\+07\) or the weights "
                                         r"\(WQ: largest \|w\| 0\.505, WK: 0\.392\) are far too large") as err:
        linear_mhsa(X * 1e8, *W, method=method)
    assert "such as 'elu1'" not in str(err.value)


def test_huge_weights_are_named(problem):                                        # M20
    X, W = problem
    with pytest.raises(ValueError, match=r"underflowed.*WQ: largest \|w\| 5\.05e\+199") as err:
        linear_mhsa(X, W[0] * 1e200, *W[1:])
    assert "such as 'elu1'" not in str(err.value)


def test_the_simulator_names_huge_tokens_before_building(problem, monkeypatch):
    X, W = problem
    monkeypatch.setattr("ctmhsa.sims.runners.instantiate", lambda *a, **k: pytest.fail("built a network"))
    with pytest.raises(ValueError, match=r"underflowed to 0.*X: largest \|x\| 7\.82e\+07"):
        ctmhsa.simulate_mhsa(X * 1e8, *W, neuron="rate")


def test_a_map_that_is_zero_still_suggests_a_positive_one(problem):
    X, W = problem
    with pytest.raises(ValueError, match=r"vanished \(feature map 'relu'\)\. Use a strictly positive map"):
        linear_mhsa(np.zeros_like(X), *W, phi="relu")


# training limits (T05, C44) ------------------------------------------------------------------

def test_a_training_that_cannot_finish_is_refused_before_building(problem, monkeypatch):    # T05
    from ctmhsa.sims.train import train_mhsa

    X, W = problem
    monkeypatch.setattr("ctmhsa.sims.runners.instantiate", lambda *a, **k: pytest.fail("built a network"))
    with pytest.raises(ValueError, match=r"^max_runtime: the training is estimated to take \S+ s \(\S+ days\) of "
                                         r"wall time, past max_runtime = 3600 s: steps = 1,000,000,000 gradient "
                                         r"steps x 1 run\(s\) \(batch\) of about .* each"):
        train_mhsa(X, X, *W, neuron="escape", steps=10**9)
    with pytest.raises(ValueError, match=r"^max_runtime: the training .* past max_runtime = 10 s: steps = 100 "):
        train_mhsa(X, X, *W, neuron="rate", steps=100, max_runtime=10)


def test_a_training_config_with_a_non_finite_rate_is_refused():                  # C44
    from ctmhsa.sims.train import resolve_train_config

    for lr in (float("nan"), float("inf"), -1.0):
        with pytest.raises(ValueError, match=rf"^config: train\.lr must be a positive finite number "
                                             rf"\(or omitted\), got {lr!r}$"):
            resolve_train_config({"train": {"lr": lr}})
