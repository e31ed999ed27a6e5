"""The typed model and its file format: round trips through .npz and .safetensors, every shape
error naming its key, unknown/missing keys and gaps refused, atomic saves, shipped-model lookup."""

import os
import re
import sys
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctmhsa.maths import model as model_mod
from ctmhsa.maths.model import LAYOUT, Block, MLPWeights, Model, load_model
from ctmhsa.maths.reference import linear_mhsa
from ctmhsa.maths.weights import AttentionWeights

pytestmark = pytest.mark.codegen_independent

try:
    import safetensors.numpy  # noqa: F401
    HAVE_SAFETENSORS = True
except ImportError:
    HAVE_SAFETENSORS = False

FORMATS = [".npz", pytest.param(".safetensors", marks=pytest.mark.skipif(
    not HAVE_SAFETENSORS, reason="safetensors is not installed"))]


def make_state(rng, L=1, H=2, dk=8, dv=4, de=16, mlp=(), ws=(), bias=(), dh=5, classes=None, p=None, n=None):
    """A valid state dict; ``mlp``, ``ws``, ``bias``: the blocks that have them."""
    sd = {}
    for l in range(L):
        b = f"blocks.{l}."
        sd[b + "attn.WQ"] = rng.normal(size=(H, dk, de))
        sd[b + "attn.WK"] = rng.normal(size=(H, dk, de))
        sd[b + "attn.WV"] = rng.normal(size=(H, dv, de))
        sd[b + "attn.WO"] = rng.normal(size=(H, de, dv))
        if l in ws:
            sd[b + "attn.WS"] = rng.normal(size=(H, dv, de))
        if l in bias:
            sd.update({b + "attn.bq": rng.normal(size=(H, dk)), b + "attn.bk": rng.normal(size=(H, dk)),
                       b + "attn.bv": rng.normal(size=(H, dv)), b + "attn.bo": rng.normal(size=de)})
        if l in mlp:
            sd.update({b + "mlp.W1": rng.normal(size=(dh, de)), b + "mlp.b1": rng.normal(size=dh),
                       b + "mlp.W2": rng.normal(size=(de, dh)), b + "mlp.b2": rng.normal(size=de)})
    if classes:
        sd["readout.W"], sd["readout.b"] = rng.normal(size=(classes, de)), rng.normal(size=classes)
    if p:
        sd["embed.W"] = rng.normal(size=(de, p))
        if n:
            sd["embed.pos"] = rng.normal(size=(n, de))
    return sd


def assert_same_state(a, b):
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].shape == b[k].shape, k
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@st.composite
def states(draw):
    L = draw(st.integers(1, 3))
    blocks = st.sets(st.integers(0, L - 1))
    kw = dict(L=L, H=draw(st.integers(1, 3)), dk=draw(st.integers(1, 3)), dv=draw(st.integers(1, 3)),
              de=draw(st.integers(1, 4)), dh=draw(st.integers(1, 3)), mlp=draw(blocks), ws=draw(blocks),
              bias=draw(blocks), classes=draw(st.sampled_from([None, 1, 3])), p=draw(st.sampled_from([None, 2])),
              n=draw(st.sampled_from([None, 3])))
    return make_state(np.random.default_rng(draw(st.integers(0, 2**32 - 1))), **kw)


@pytest.mark.parametrize("suffix", FORMATS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(state=states())
def test_round_trip(suffix, state):
    m = Model.from_state_dict(state)
    assert_same_state(m.state_dict(), state)           # the layout is exactly the documented one
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "net" + suffix)
        assert m.save(path) == path
        back = load_model(path)
        assert os.listdir(folder) == ["net" + suffix]
    assert_same_state(back.state_dict(), state)
    assert (back.name, back.source, back.n_blocks) == ("net", path, m.n_blocks)
    assert (back.de, back.H, back.dk, back.dv) == (m.de, m.H, m.dk, m.dv)
    for l, b in enumerate(back.blocks):
        assert (b.attn.layout, b.attn.layer, b.attn.heads, b.attn.n_heads) == (LAYOUT, l, tuple(range(b.attn.H)),
                                                                             b.attn.H)
        assert b.attn.source == path and b.attn.keys["WQ"] == f"blocks.{l}.attn.WQ"
        assert (b.mlp is None) == (f"blocks.{l}.mlp.W1" not in state)
        assert (b.WS is None) == (f"blocks.{l}.attn.WS" not in state)


def test_state_dict_layout_and_zero_biases():
    rng = np.random.default_rng(1)
    m = Model.from_state_dict(make_state(rng, L=2, mlp={1}, ws={0}, classes=3, p=2, n=5))
    shapes = {k: v.shape for k, v in m.state_dict().items()}
    assert shapes == {
        "blocks.0.attn.WQ": (2, 8, 16), "blocks.0.attn.WK": (2, 8, 16), "blocks.0.attn.WV": (2, 4, 16),
        "blocks.0.attn.WO": (2, 16, 4), "blocks.0.attn.WS": (2, 4, 16),
        "blocks.1.attn.WQ": (2, 8, 16), "blocks.1.attn.WK": (2, 8, 16), "blocks.1.attn.WV": (2, 4, 16),
        "blocks.1.attn.WO": (2, 16, 4),
        "blocks.1.mlp.W1": (5, 16), "blocks.1.mlp.b1": (5,), "blocks.1.mlp.W2": (16, 5), "blocks.1.mlp.b2": (16,),
        "readout.W": (3, 16), "readout.b": (3,), "embed.W": (16, 2), "embed.pos": (5, 16)}
    # absent biases are zeros in the model, and zero biases are not written
    a = m.blocks[0].attn
    assert a.bq.shape == (2, 8) and a.bv.shape == (2, 4) and a.bo.shape == (16,) and not a.has_bias
    sd = make_state(rng, bias={0})
    sd["blocks.0.attn.bk"] = np.zeros((2, 8))
    written = Model.from_state_dict(sd).state_dict()
    assert {"blocks.0.attn.bq", "blocks.0.attn.bv", "blocks.0.attn.bo"} <= set(written)
    assert "blocks.0.attn.bk" not in written


def test_the_documented_message():
    sd = make_state(np.random.default_rng(0))
    sd["blocks.0.attn.WK"] = sd["blocks.0.attn.WK"][:, :, :15]
    with pytest.raises(ValueError) as err:
        Model.from_state_dict(sd)
    assert str(err.value) == ("blocks.0.attn.WK: expected shape (H=2, dk=8, de=16) like blocks.0.attn.WQ, "
                              "got (2, 8, 15)")


BAD_SHAPES = [
    ("blocks.0.attn.WQ", (2, 8)),
    ("blocks.0.attn.WQ", (0, 8, 16)),
    ("blocks.0.attn.WK", (3, 8, 16)),
    ("blocks.0.attn.WV", (2, 4, 15)),
    ("blocks.0.attn.WO", (2, 16, 5)),
    ("blocks.0.attn.WO", (2, 15, 4)),
    ("blocks.0.attn.WS", (2, 4, 16, 1)),
    ("blocks.0.attn.WS", (2, 5, 16)),
    ("blocks.0.attn.bq", (2, 7)),
    ("blocks.0.attn.bk", (8,)),
    ("blocks.0.attn.bv", (2, 8)),
    ("blocks.0.attn.bo", (15,)),
    ("blocks.1.attn.WQ", (2, 8, 15)),        # a later block must keep de
    ("blocks.1.attn.WK", (2, 3, 16)),
    ("blocks.1.mlp.W1", (5, 15)),
    ("blocks.1.mlp.b1", (4,)),
    ("blocks.1.mlp.W2", (16, 4)),
    ("blocks.1.mlp.b2", (15,)),
    ("readout.W", (3, 15)),
    ("readout.b", (4,)),
    ("embed.W", (15, 2)),
    ("embed.pos", (5, 15)),
    ("embed.pos", (5,)),
]


@pytest.mark.parametrize("key, shape", BAD_SHAPES, ids=[f"{k}{s}" for k, s in BAD_SHAPES])
def test_every_shape_error_names_the_key(key, shape):
    sd = make_state(np.random.default_rng(2), L=2, mlp={1}, ws={0}, bias={0}, classes=3, p=2, n=5)
    sd[key] = np.ones(shape)
    with pytest.raises(ValueError, match=rf"^{re.escape(key)}: (expected shape \(|every axis)") as err:
        Model.from_state_dict(sd)
    assert str(shape) in str(err.value)


def test_non_finite_and_non_numeric_values_name_the_key():
    sd = make_state(np.random.default_rng(3), L=2, mlp={1})
    sd["blocks.1.mlp.b2"] = sd["blocks.1.mlp.b2"].copy()
    sd["blocks.1.mlp.b2"][3] = np.nan
    with pytest.raises(ValueError, match=r"^blocks\.1\.mlp\.b2: contains 1 NaN"):
        Model.from_state_dict(sd)
    sd = make_state(np.random.default_rng(3))
    sd["blocks.0.attn.WV"] = np.full((2, 4, 16), np.inf)
    with pytest.raises(ValueError, match=r"^blocks\.0\.attn\.WV: contains 128 NaN or infinite"):
        Model.from_state_dict(sd)
    sd["blocks.0.attn.WV"] = np.full((2, 4, 16), "x")
    with pytest.raises(TypeError, match=r"^blocks\.0\.attn\.WV: expected a real numeric array"):
        Model.from_state_dict(sd)


def test_unknown_keys_are_listed():
    sd = make_state(np.random.default_rng(4), L=2)
    sd.update({"blocks.0.attn.W_Q": 1, "blocks.01.attn.WQ": 1, "blocks.0.mlp.WQ": 1, "lm_head.weight": 1})
    with pytest.raises(ValueError, match="unknown key") as err:
        Model.from_state_dict(sd)
    assert str(sorted(["blocks.0.attn.W_Q", "blocks.01.attn.WQ", "blocks.0.mlp.WQ", "lm_head.weight"])) \
        in str(err.value)


@pytest.mark.parametrize("drop, add, missing", [
    (["blocks.0.attn.WO"], {}, ["blocks.0.attn.WO"]),
    (["blocks.1.attn.WK", "blocks.1.attn.WV"], {}, ["blocks.1.attn.WK", "blocks.1.attn.WV"]),
    (["blocks.1.mlp.b1"], {}, ["blocks.1.mlp.b1"]),
    (["embed.W"], {}, ["embed.W"]),
    (["readout.W"], {}, ["readout.W"]),
])
def test_missing_keys_are_listed(drop, add, missing):
    sd = make_state(np.random.default_rng(5), L=2, mlp={1}, classes=2, p=2, n=3)
    for k in drop:
        del sd[k]
    with pytest.raises(ValueError, match="missing required key") as err:
        Model.from_state_dict(sd)
    assert str(missing) in str(err.value)


def test_block_numbering_and_empty_state():
    sd = make_state(np.random.default_rng(6), L=3)
    with pytest.raises(ValueError, match=r"non-contiguous block numbering \[0, 2\].*missing \[1\]"):
        Model.from_state_dict({k: v for k, v in sd.items() if not k.startswith("blocks.1.")})
    with pytest.raises(ValueError, match=r"non-contiguous block numbering \[1, 2\]"):
        Model.from_state_dict({k: v for k, v in sd.items() if not k.startswith("blocks.0.")})
    with pytest.raises(ValueError, match="no block"):
        Model.from_state_dict({})
    with pytest.raises(TypeError, match="mapping"):
        Model.from_state_dict([("blocks.0.attn.WQ", 1)])
    # readout and embedding alone are no model
    with pytest.raises(ValueError, match="no block"):
        Model.from_state_dict({"readout.W": np.ones((2, 3))})


@pytest.mark.parametrize("suffix", FORMATS)
def test_atomic_save_replaces_and_leaves_no_temporary_file(tmp_path, suffix):
    rng = np.random.default_rng(7)
    path = tmp_path / ("m" + suffix)
    path.write_bytes(b"an older, unreadable file")
    os.chmod(path, 0o640)
    m = Model.from_state_dict(make_state(rng, L=2, mlp={0}))
    m.save(path)
    assert os.listdir(tmp_path) == [path.name]
    assert os.stat(path).st_mode & 0o777 == 0o640            # the replaced file keeps its mode
    assert_same_state(load_model(path).state_dict(), m.state_dict())
    m2 = Model.from_state_dict(make_state(rng))
    m2.save(str(path))
    assert os.listdir(tmp_path) == [path.name]
    assert_same_state(load_model(str(path)).state_dict(), m2.state_dict())


def test_failed_save_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "m.npz"
    m = Model.from_state_dict(make_state(np.random.default_rng(8)))
    m.save(path)
    before = path.read_bytes()

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(model_mod.np, "savez", broken)
    with pytest.raises(OSError, match="disk full"):
        Model.from_arrays(*(np.ones((1, 1, 1)),) * 4).save(path)
    assert os.listdir(tmp_path) == ["m.npz"] and path.read_bytes() == before


def test_save_refuses_other_suffixes_and_names_the_extra(tmp_path, monkeypatch):
    m = Model.from_state_dict(make_state(np.random.default_rng(9)))
    for name in ("m.pt", "m", "m.npy"):
        with pytest.raises(ValueError, match=r"\.npz or \.safetensors"):
            m.save(tmp_path / name)
    monkeypatch.setitem(sys.modules, "safetensors", None)      # as if it were not installed
    monkeypatch.setitem(sys.modules, "safetensors.numpy", None)
    with pytest.raises(ImportError, match=r"safetensors package.*ctmhsa\[weights\]"):
        m.save(tmp_path / "m.safetensors")
    assert os.listdir(tmp_path) == []


def test_from_arrays_matches_attention_weights():
    rng = np.random.default_rng(10)
    H, dk, dv, de = 3, 2, 4, 5
    WQ, WK = rng.normal(size=(H, dk, de)), rng.normal(size=(H, dk, de))
    WV, WO, WS = rng.normal(size=(H, dv, de)), rng.normal(size=(H, de, dv)), rng.normal(size=(H, dv, de))
    m = Model.from_arrays(WQ, WK, WV, WO, WS=WS, name="toy")
    assert (m.name, m.n_blocks, m.de, m.H, m.dk, m.dv) == ("toy", 1, de, H, dk, dv)
    a = m.blocks[0].attn
    assert isinstance(a, AttentionWeights)
    for k, w in dict(WQ=WQ, WK=WK, WV=WV, WO=WO).items():
        np.testing.assert_array_equal(a.arrays()[k], w)
    np.testing.assert_array_equal(m.blocks[0].WS, WS)
    assert (a.layout, a.layer, a.heads, a.n_heads) == ("ctmhsa", 0, (0, 1, 2), H)
    assert a.bq.shape == (H, dk) and a.bk.shape == (H, dk) and a.bv.shape == (H, dv) and a.bo.shape == (de,)
    assert not (a.has_bias or np.any(a.bo))
    assert m.blocks[0].mlp is None and m.readout_W is None and m.embed_W is None
    # the block's arrays are linear_mhsa's keywords
    X = rng.normal(size=(4, de))
    ref = linear_mhsa(X, WQ, WK, WV, WO, WS=WS)["x_tilde"]
    np.testing.assert_array_equal(linear_mhsa(X, **m.blocks[0].arrays())["x_tilde"], ref)
    # integer input is converted; a shape error names the array and what fixed the sizes
    assert Model.from_arrays(*(np.ones((1, 1, 1), int),) * 4).blocks[0].attn.WQ.dtype == float
    with pytest.raises(ValueError, match=r"^WK: expected shape \(H=3, dk=2, de=5\) like WQ, got \(3, 2, 4\)"):
        Model.from_arrays(WQ, WK[:, :, :4], WV, WO)
    with pytest.raises(ValueError, match=r"^WS: expected shape \(H=3, dv=4, de=5\) like WQ and WV, got \(3, 5, 5\)"):
        Model.from_arrays(WQ, WK, WV, WO, WS=np.ones((3, 5, 5)))
    with pytest.raises(ValueError, match=r"^WQ: contains 1 NaN"):
        Model.from_arrays(np.where(np.arange(H * dk * de).reshape(H, dk, de) == 0, np.nan, WQ), WK, WV, WO)


def test_dataclasses_validate_their_fields():
    rng = np.random.default_rng(11)
    with pytest.raises(ValueError, match=r"^W2: expected shape \(de=4, dh=3\) like W1, got \(4, 2\)"):
        MLPWeights(W1=np.ones((3, 4)), b1=np.ones(3), W2=np.ones((4, 2)), b2=np.ones(4))
    with pytest.raises(ValueError, match=r"^b1: expected shape \(dh=3,\) like W1, got \(4,\)"):
        MLPWeights(W1=np.ones((3, 4)), b1=np.ones(4), W2=np.ones((4, 3)), b2=np.ones(4))
    mlp = MLPWeights(W1=np.ones((3, 4)), b1=np.ones(3), W2=np.ones((4, 3)), b2=np.ones(4))
    assert (mlp.de, mlp.dh) == (4, 3)
    attn = Model.from_arrays(*(rng.normal(size=(2, 3, 5)),) * 2, rng.normal(size=(2, 3, 5)),
                             rng.normal(size=(2, 5, 3))).blocks[0].attn
    with pytest.raises(ValueError, match=r"^mlp: embedding dimension de=4 .* attn's de=5"):
        Block(attn=attn, mlp=mlp)
    with pytest.raises(ValueError, match=r"^WS: expected shape \(H=2, dv=3, de=5\)"):
        Block(attn=attn, WS=np.ones((2, 3, 4)))
    with pytest.raises(TypeError, match="attn: expected AttentionWeights"):
        Block(attn={"WQ": 1})
    b = Block(attn=attn)
    with pytest.raises(TypeError, match=r"blocks: expected a tuple of Block"):
        Model(blocks=b)
    with pytest.raises(ValueError, match="at least one block"):
        Model(blocks=())
    with pytest.raises(ValueError, match=r"^readout_W: expected shape \(classes, de=5\) like blocks\[0\]"):
        Model(blocks=[b], readout_W=np.ones((2, 4)))
    with pytest.raises(ValueError, match="readout_b: given without readout_W"):
        Model(blocks=[b], readout_b=np.ones(2))
    with pytest.raises(ValueError, match="embed_pos: given without embed_W"):
        Model(blocks=[b], embed_pos=np.ones((3, 5)))
    other = Model.from_arrays(*(np.ones((1, 1, 4)),) * 3, np.ones((1, 4, 1))).blocks[0]
    with pytest.raises(ValueError, match=r"^blocks\[1\]: embedding dimension de=4 differs"):
        Model(blocks=(b, other))
    m = Model(blocks=[b], readout_W=np.ones((2, 5)))
    assert isinstance(m.blocks, tuple) and m.readout_b.tolist() == [0.0, 0.0]
    assert "readout.b" in m.state_dict()
    assert repr(m).startswith("Model(name='', blocks=1, de=5, H=2") and "classes=2" in repr(m)


def test_a_block_keeps_the_metadata_of_trained_weights():
    rng = np.random.default_rng(12)
    z = np.zeros
    attn = AttentionWeights(WQ=rng.normal(size=(1, 2, 3)), WK=rng.normal(size=(1, 2, 3)), WV=rng.normal(size=(1, 2, 3)),
                            WO=rng.normal(size=(1, 3, 2)), bq=z((1, 2)), bk=z((1, 2)), bv=z((1, 2)), bo=z(3),
                            layout="bert", layer=4, heads=(7,), n_heads=12, source="/x.safetensors")
    assert Block(attn=attn).attn is attn
    converted = Block(attn=AttentionWeights(**{**attn.__dict__, "bo": [0, 0, 0]})).attn
    assert converted.bo.dtype == float and (converted.layout, converted.heads) == ("bert", (7,))


def test_embed():
    rng = np.random.default_rng(13)
    m = Model.from_state_dict(make_state(rng, de=4, p=3, n=5))
    u = rng.normal(size=(5, 3))
    np.testing.assert_allclose(m.embed(u), u @ m.embed_W.T + m.embed_pos)
    np.testing.assert_allclose(m.embed(np.stack([u, 2 * u]))[1], 2 * u @ m.embed_W.T + m.embed_pos)
    with pytest.raises(ValueError, match=r"inputs: expected shape \(n=5, p=3\)"):
        m.embed(u[:4])
    with pytest.raises(ValueError, match=r"inputs: expected shape \(n=5, p=3\)"):
        m.embed(u[:, :2])
    no_pos = Model.from_state_dict(make_state(rng, de=4, p=3))
    np.testing.assert_allclose(no_pos.embed(u[:2]), u[:2] @ no_pos.embed_W.T)
    with pytest.raises(ValueError, match="no input embedding"):
        Model.from_state_dict(make_state(rng)).embed(u)


@pytest.mark.smoke
def test_load_model_by_name_and_missing(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="not_a_shipped_model_xyz.*shipped models"):
        load_model("not_a_shipped_model_xyz")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_model(tmp_path / "absent.npz")
    monkeypatch.setattr(model_mod, "_models_dir", lambda: tmp_path / "models")
    with pytest.raises(FileNotFoundError, match="shipped models: none"):
        load_model("tiny")                                     # the folder need not exist
    (tmp_path / "models").mkdir()
    m = Model.from_state_dict(make_state(np.random.default_rng(14), L=2))
    m.save(tmp_path / "models" / "tiny.npz")
    with pytest.raises(FileNotFoundError, match="shipped models: tiny"):
        load_model("tine")
    back = load_model("tiny")
    assert back.name == "tiny" and back.source == str(tmp_path / "models" / "tiny.npz")
    assert_same_state(back.state_dict(), m.state_dict())
    # a file that is not a model file
    np.savez(tmp_path / "other.npz", X=np.ones((2, 2)))
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['X'\]"):
        load_model(tmp_path / "other.npz")
    (tmp_path / "m.pt").write_bytes(b"")
    with pytest.raises(ValueError, match="not a model file"):
        load_model(tmp_path / "m.pt")


def test_models_dir_is_inside_the_package_without_importing_brian2():
    import subprocess

    code = ("import sys; from ctmhsa.maths.model import _models_dir; d = _models_dir(); "
            "assert 'brian2' not in sys.modules and 'ctmhsa.sims' not in sys.modules; "
            "assert d.name == 'models' and (d.parent / 'cli.py').is_file(), d")
    subprocess.run([sys.executable, "-c", code], check=True)
