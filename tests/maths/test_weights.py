"""Real transformer weights: the three key layouts, split into heads in the project's convention,
checked against an independent forward pass of the original module's projections."""

import json
import sys

import numpy as np
import pytest

from ctmhsa.maths.reference import linear_mhsa
from ctmhsa.maths.weights import attention_layers, load_attention, read_state_dict, read_tokens, split_heads

pytestmark = pytest.mark.codegen_independent
safetensors_numpy = pytest.importorskip("safetensors.numpy")

E, NH, N = 12, 3, 5      # embedding, heads, tokens


def _elu1(z):
    return np.where(z > 0, z + 1.0, np.exp(np.minimum(z, 0.0)))


def module_forward(X, Q, K, V, Wo, bo, n_heads, heads):
    """Linear attention computed the way the transformer lays it out: full projections ``Q, K, V``
    (n, E) (biases included), heads as contiguous feature blocks, concatenation, ``Wo`` (E, E) in
    nn.Linear layout; heads outside ``heads`` contribute nothing."""
    n, dh = X.shape[0], Q.shape[1] // n_heads
    out = np.zeros((n, Wo.shape[0]))
    for h in heads:
        sl = slice(h * dh, (h + 1) * dh)
        fq, fk = _elu1(Q[:, sl]), _elu1(K[:, sl])
        s = fq @ fk.T                                    # (n, n)
        vt = (s / s.sum(1, keepdims=True)) @ V[:, sl]    # (n, dh)
        out += vt @ Wo[:, sl].T
    return out + bo


def _model(rng, layers=2, bias=True):
    """Per layer the nn.Linear-layout matrices of a small attention model."""
    out = []
    for _ in range(layers):
        m = {k: rng.normal(size=(E, E)) / np.sqrt(E) for k in ("q", "k", "v", "o")}
        m.update({k + "_b": (rng.normal(size=E) * 0.3 if bias else np.zeros(E)) for k in ("q", "k", "v", "o")})
        out.append(m)
    return out


def _save(path, tensors):
    safetensors_numpy.save_file({k: np.ascontiguousarray(v, np.float32) for k, v in tensors.items()}, str(path))


def mha_state(model, prefix="layers.{}.self_attn."):
    sd = {}
    for L, m in enumerate(model):
        p = prefix.format(L)
        sd[p + "in_proj_weight"] = np.concatenate([m["q"], m["k"], m["v"]])
        sd[p + "in_proj_bias"] = np.concatenate([m["q_b"], m["k_b"], m["v_b"]])
        sd[p + "out_proj.weight"], sd[p + "out_proj.bias"] = m["o"], m["o_b"]
        sd[p.replace("self_attn.", "linear1.weight")] = np.zeros((4, E))      # other tensors are ignored
    return sd


def bert_state(model):
    sd = {"bert.embeddings.word_embeddings.weight": np.zeros((7, E))}
    for L, m in enumerate(model):
        p = f"bert.encoder.layer.{L}.attention."
        for k, name in (("q", "self.query"), ("k", "self.key"), ("v", "self.value"), ("o", "output.dense")):
            sd[f"{p}{name}.weight"], sd[f"{p}{name}.bias"] = m[k], m[k + "_b"]
        sd[p + "output.LayerNorm.weight"] = np.ones(E)
    return sd


def gpt2_state(model):
    sd = {"transformer.wte.weight": np.zeros((7, E))}
    for L, m in enumerate(model):
        p = f"transformer.h.{L}.attn."
        # Conv1D stores (in, out): y = x @ W + b
        sd[p + "c_attn.weight"] = np.concatenate([m["q"], m["k"], m["v"]]).T
        sd[p + "c_attn.bias"] = np.concatenate([m["q_b"], m["k_b"], m["v_b"]])
        sd[p + "c_proj.weight"], sd[p + "c_proj.bias"] = m["o"].T, m["o_b"]
        sd[p + "bias"] = np.tril(np.ones((1, 1, 4, 4)))        # GPT-2's causal-mask buffer
    return sd


@pytest.mark.parametrize("layout, make", [("mha", mha_state), ("bert", bert_state), ("gpt2", gpt2_state)])
@pytest.mark.parametrize("heads", [None, (2, 0)])
def test_layouts_split_into_heads_like_the_module(tmp_path, layout, make, heads):
    rng = np.random.default_rng(1)
    model = _model(rng)
    f = tmp_path / "model.safetensors"
    _save(f, make(model))
    X = rng.normal(size=(N, E))
    m = {k: np.asarray(v, np.float32).astype(float) for k, v in model[1].items()}   # as stored
    w = load_attention(f, layer=1, heads=heads, n_heads=NH)
    keep = tuple(range(NH)) if heads is None else heads
    assert (w.layout, w.layer, w.heads, w.n_heads) == (layout, 1, keep, NH)
    assert w.WQ.shape == (len(keep), E // NH, E) and w.WO.shape == (len(keep), E, E // NH)
    # per-head blocks, project convention: q_i = WQ[h] @ x_i
    for a, h in enumerate(keep):
        sl = slice(h * (E // NH), (h + 1) * (E // NH))
        np.testing.assert_array_equal(w.WQ[a], m["q"][sl])
        np.testing.assert_array_equal(w.WV[a], m["v"][sl])
        np.testing.assert_array_equal(w.WO[a], m["o"][:, sl])
        np.testing.assert_array_equal(w.bk[a], m["k_b"][sl])
    # end to end: the folded biases make the circuit's reference equal the module's forward pass
    Q, K, V = (X @ m[k].T + m[k + "_b"] for k in ("q", "k", "v"))
    expect = module_forward(X, Q, K, V, m["o"], m["o_b"], NH, keep)
    folded = w.fold_biases(X)
    got = linear_mhsa(**folded)["x_tilde"]
    np.testing.assert_allclose(got[:, -1], 0.0, atol=0)          # the constant coordinate carries no output
    np.testing.assert_allclose(got[:, :-1] + w.bo, expect, rtol=1e-10, atol=1e-10)


def test_layers_are_found_in_order_and_chosen_by_number(tmp_path):
    model = _model(np.random.default_rng(2), layers=3)
    f = tmp_path / "enc.safetensors"
    _save(f, bert_state(model))
    layers = attention_layers(read_state_dict(f))
    assert [(lay, n) for lay, n, _ in layers] == [("bert", 0), ("bert", 1), ("bert", 2)]
    with pytest.raises(ValueError, match=r"layer: .* has 3 attention layers \[0, 1, 2\]; choose one"):
        load_attention(f, n_heads=NH)
    with pytest.raises(ValueError, match=r"not 7"):
        load_attention(f, layer=7, n_heads=NH)
    w2 = load_attention(f, layer=2, n_heads=NH)
    np.testing.assert_array_equal(w2.WK[1], np.float32(model[2]["k"][4:8]))
    # a prefix picks a layer where numbers repeat (encoder and decoder stacks)
    sd = mha_state(model[:1], "encoder.layers.{}.self_attn.")
    sd.update(mha_state(model[1:2], "decoder.layers.{}.self_attn."))
    _save(tmp_path / "t.safetensors", sd)
    with pytest.raises(ValueError, match="pass the key prefix"):
        load_attention(tmp_path / "t.safetensors", layer=0, n_heads=NH)
    dec = load_attention(tmp_path / "t.safetensors", layer="decoder.layers.0.self_attn.", n_heads=NH)
    np.testing.assert_array_equal(dec.WQ[0], np.float32(model[1]["q"][:4]))


def test_bare_module_without_biases_and_config_json(tmp_path):
    model = _model(np.random.default_rng(3), layers=1, bias=False)
    sd = mha_state(model, "")
    del sd["in_proj_bias"], sd["out_proj.bias"]
    sd = {k: v for k, v in sd.items() if "linear1" not in k}
    _save(tmp_path / "m.safetensors", sd)
    with pytest.raises(ValueError, match="n_heads: a state dict does not record the number of heads"):
        load_attention(tmp_path / "m.safetensors")
    (tmp_path / "config.json").write_text(json.dumps({"num_attention_heads": 4}))
    w = load_attention(tmp_path / "m.safetensors", layer=0)
    assert w.layer is None and w.n_heads == 4 and w.WQ.shape == (4, 3, E) and not w.has_bias
    assert np.all(w.bo == 0)


def test_bad_requests_are_named(tmp_path):
    model = _model(np.random.default_rng(4), layers=1)
    f = tmp_path / "g.safetensors"
    _save(f, gpt2_state(model))
    with pytest.raises(ValueError, match="n_heads: 5 heads do not divide the 12 query/key features"):
        load_attention(f, n_heads=5)
    with pytest.raises(ValueError, match=r"heads: expected indices in 0 ... 2, got \[3\]"):
        load_attention(f, n_heads=3, heads=[3])
    with pytest.raises(ValueError, match="repeats a head"):
        load_attention(f, n_heads=3, heads=[1, 1])
    with pytest.raises(ValueError, match="layout: expected 'auto' or one of"):
        load_attention(f, n_heads=3, layout="t5")
    with pytest.raises(ValueError, match="holds no attention layer of a known layout"):
        load_attention(f, n_heads=3, layout="bert")
    with pytest.raises(ValueError, match="does not exist"):
        load_attention(tmp_path / "nope.safetensors", n_heads=3)
    (tmp_path / "w.h5").write_text("x")
    with pytest.raises(ValueError, match="unknown file type '.h5'"):
        read_state_dict(tmp_path / "w.h5")
    (tmp_path / "broken.safetensors").write_bytes(b"\x00\x01garbage")
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        read_state_dict(tmp_path / "broken.safetensors")
    w = load_attention(f, n_heads=3)
    with pytest.raises(ValueError, match=r"X: expected token embeddings of shape \(n, 12\)"):
        w.fold_biases(np.zeros((4, 5)))
    with pytest.raises(ValueError, match="inconsistent projection shapes"):
        split_heads(np.zeros((6, 4)), np.zeros((6, 4)), np.zeros((6, 4)), np.zeros((5, 6)), 2)


def test_pytorch_file_without_torch_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)       # as if torch were not installed
    f = tmp_path / "model.pt"
    f.write_bytes(b"PK")
    with pytest.raises(ImportError, match=r"PyTorch file; reading it needs torch \(pip install torch\)"):
        load_attention(f, n_heads=2)


def test_tokens_npz(tmp_path):
    np.savez(tmp_path / "t.npz", X=np.ones((3, 4)))
    got = read_tokens(tmp_path / "t.npz")
    assert got["X"].shape == (3, 4) and got["Y"] is None
    np.savez(tmp_path / "bad.npz", tokens=np.ones((3, 4)))
    with pytest.raises(ValueError, match="has no array 'X'"):
        read_tokens(tmp_path / "bad.npz")
    with pytest.raises(ValueError, match="does not exist"):
        read_tokens(tmp_path / "none.npz")


def test_torch_state_dicts(tmp_path):
    torch = pytest.importorskip("torch")
    nn = torch.nn
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(E, NH, bias=True)
    torch.save(mha.state_dict(), tmp_path / "mha.pt")
    w = load_attention(tmp_path / "mha.pt", n_heads=NH)
    Wi = mha.in_proj_weight.detach().numpy().astype(float)
    np.testing.assert_allclose(w.WK[2], Wi[E + 8:E + 12], rtol=0, atol=0)
    np.testing.assert_allclose(w.WO[1], mha.out_proj.weight.detach().numpy()[:, 4:8].astype(float))
    # a whole encoder, wrapped in a checkpoint dict
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(E, NH, dim_feedforward=8), num_layers=2)
    torch.save({"state_dict": enc.state_dict(), "epoch": 3}, tmp_path / "enc.bin")
    w1 = load_attention(tmp_path / "enc.bin", layer=1, heads=[0], n_heads=NH)
    ref = enc.layers[1].self_attn.in_proj_weight.detach().numpy().astype(float)
    np.testing.assert_allclose(w1.WQ[0], ref[:4])
    assert w1.layout == "mha" and w1.layer == 1
