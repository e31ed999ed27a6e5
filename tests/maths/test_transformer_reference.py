"""The numpy transformer reference (:mod:`ctmhsa.maths.transformer`) against an independent
transcription of its maths written here with explicit loops over tokens and heads: random models
of 1-3 blocks (with and without MLPs, read-out, embedding), streams, the per-block stages, the
model file layout read by ``load_model``, and the errors."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import ctmhsa
from ctmhsa.maths.model import Block, MLPWeights, Model
from ctmhsa.maths.transformer import BLOCK_STAGES, normalise, transformer_forward

pytestmark = pytest.mark.codegen_independent

RTOL = 1e-9
MLP_STAGES = ("h_norm", "hidden")


# ------------------------------------------------------------------------------------------
# the independent transcription: loops over tokens and heads, nothing from the package
# ------------------------------------------------------------------------------------------

class Undefined(Exception):
    """A draw where the maths is undefined: a token with mean |x| = 0 or Z = 0 inside the model
    (reached by cancellation, so rounding decides whether another implementation sees it)."""


class Degenerate(Undefined):
    """An input token with mean |x| = 0: every implementation must refuse it."""


def elu1(z):
    """elu(z) + 1 elementwise, one scalar at a time."""
    return np.array([z_ + 1.0 if z_ > 0 else math.exp(z_) for z_ in np.ravel(z)]).reshape(np.shape(z))


def norm_token(x, error=Undefined):
    """N(x) = x / mean_e |x_e| of one token."""
    scale = sum(abs(float(v)) for v in x) / len(x)
    if scale == 0:
        raise error("mean |x| = 0")
    return np.asarray(x, float) / scale


def loop_attention(xn, WQ, WK, WV, WO):
    """x̃_i = Σ_h WO[h] Σ_j (φ(q_i)·φ(k_j) / Z_i) v_j of normalised tokens ``xn`` (n, de)."""
    n, de = xn.shape
    out = np.zeros((n, de))
    for i in range(n):
        for h in range(WQ.shape[0]):
            fq = elu1(WQ[h] @ xn[i])
            kappa = [float(fq @ elu1(WK[h] @ xn[j])) for j in range(n)]
            Z = sum(kappa)
            if Z == 0:
                raise Undefined("Z = 0")
            v_tilde = np.zeros(WV.shape[1])
            for j in range(n):
                v_tilde += (kappa[j] / Z) * (WV[h] @ xn[j])
            out[i] += WO[h] @ v_tilde
    return out


def loop_forward(X, blocks, readout=None, embed=None):
    """The transformer of the module docstring, one token set at a time.

    Parameters
    ----------
    X : (n, de) tokens, or (n, p) raw inputs with ``embed = (W, pos)``.
    blocks : list of dict with ``WQ, WK, WV, WO`` and, for a block with an MLP, ``W1, b1, W2, b2``.
    readout : (R, c) or None.

    Returns
    -------
    (output (n, de), logits or None)
    """
    X = np.asarray(X, float)
    if embed is not None:
        W, pos = embed
        X = np.array([W @ X[i] + (0.0 if pos is None else pos[i]) for i in range(X.shape[0])])
    n = X.shape[0]
    for l, b in enumerate(blocks):
        xn = np.array([norm_token(X[i], Degenerate if l == 0 else Undefined) for i in range(n)])
        H = X + loop_attention(xn, b["WQ"], b["WK"], b["WV"], b["WO"])
        if "W1" in b:
            X = np.array([H[i] + b["W2"] @ np.maximum(b["W1"] @ norm_token(H[i]) + b["b1"], 0.0) + b["b2"]
                          for i in range(n)])
        else:
            X = H
    logits = None
    if readout is not None:
        R, c = readout
        pooled = sum(X[i] for i in range(n)) / n
        logits = R @ norm_token(pooled) + c
    return X, logits


def assert_close(got, want, what=""):
    """``got == want`` to RTOL of the largest entry of ``want``."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, what
    tol = RTOL * max(float(np.abs(want).max()), np.finfo(float).tiny)
    err = float(np.abs(got - want).max())
    assert err <= tol, f"{what}: max |error| {err:.3g} > {tol:.3g} (largest entry {np.abs(want).max():.3g})"


# ------------------------------------------------------------------------------------------
# random models
# ------------------------------------------------------------------------------------------

def random_blocks(rng, L, H, dk, dv, de, dh, mlp, scale, integer=False):
    """``L`` blocks as dicts of arrays; ``mlp``: the blocks with an MLP; ``scale``: per block;
    ``integer``: small integer entries (times the scale), so that exact zeros and ties occur."""
    draw = (lambda size: rng.integers(-2, 3, size=size).astype(float)) if integer else \
        (lambda size: rng.normal(size=size))
    out = []
    for l in range(L):
        s = scale[l]
        b = dict(WQ=draw((H[l], dk[l], de)) * s, WK=draw((H[l], dk[l], de)) * s,
                 WV=draw((H[l], dv[l], de)) * s, WO=draw((H[l], de, dv[l])) * s)
        if l in mlp:
            b.update(W1=draw((dh[l], de)) * s, b1=draw(dh[l]) * s, W2=draw((de, dh[l])) * s, b2=draw(de) * s)
        out.append(b)
    return out


def to_model(blocks, readout=None, embed=None) -> Model:
    out = []
    for b in blocks:
        blk = Block.from_arrays(b["WQ"], b["WK"], b["WV"], b["WO"])
        if "W1" in b:
            blk = Block(attn=blk.attn, mlp=MLPWeights(W1=b["W1"], b1=b["b1"], W2=b["W2"], b2=b["b2"]))
        out.append(blk)
    kw = {}
    if readout is not None:
        kw.update(readout_W=readout[0], readout_b=readout[1])
    if embed is not None:
        kw.update(embed_W=embed[0], embed_pos=embed[1])
    return Model(blocks=tuple(out), **kw)


scales = st.floats(1e-2, 1e1).map(float)
log_scales = st.floats(-2.0, 1.0).map(lambda e: 10.0 ** e)


@st.composite
def problems(draw):
    L = draw(st.integers(1, 3))
    per_block = lambda s: [draw(s) for _ in range(L)]  # noqa: E731
    de = draw(st.integers(1, 5))
    n = draw(st.integers(1, 5))
    kw = dict(L=L, H=per_block(st.integers(1, 3)), dk=per_block(st.integers(1, 4)),
              dv=per_block(st.integers(1, 4)), de=de, dh=per_block(st.integers(1, 6)),
              mlp=draw(st.sets(st.integers(0, L - 1))), scale=per_block(st.one_of(scales, log_scales)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    integer = draw(st.booleans())
    blocks = random_blocks(rng, **kw, integer=integer)
    readout = None
    if draw(st.booleans()):
        classes = draw(st.integers(1, 4))
        s = draw(log_scales)
        readout = (rng.normal(size=(classes, de)) * s, rng.normal(size=classes) * s)
    X = (rng.integers(-2, 3, size=(n, de)).astype(float) if integer else rng.normal(size=(n, de)))
    return X * draw(log_scales), blocks, readout


def _perturbed(a, rng, eps):
    return None if a is None else a * (1.0 + eps * rng.standard_normal(np.shape(a)))


def expected(X, blocks, readout=None, embed=None, kappa_max=1e5):
    """The loops' (output, logits).

    A draw where they are undefined is skipped; where an input token is all zero, after checking
    that the reference refuses it too. So is an ill-conditioned draw, where a relative change of
    1e-12 in every token and weight moves the output or the logits by more than ``kappa_max``
    times that (relative to their largest entries): there rounding alone, in whatever order an
    implementation sums, moves the result by more than the tolerance (a normalisation of a token
    that nearly cancels, H = X + x̃ ≈ 0 or a pooled mean ≈ 0, blows rounding errors up).
    """
    try:
        want = loop_forward(X, blocks, readout, embed)
    except Degenerate:
        with pytest.raises(ValueError, match=r"mean \|x\| = 0"):
            transformer_forward(X, to_model(blocks, readout, embed))
        assume(False)
    except Undefined:
        assume(False)
    eps, rng = 1e-12, np.random.default_rng(0)
    try:
        moved = loop_forward(_perturbed(X, rng, eps), [{k: _perturbed(v, rng, eps) for k, v in b.items()}
                                                      for b in blocks],
                             None if readout is None else tuple(_perturbed(a, rng, eps) for a in readout),
                             None if embed is None else tuple(_perturbed(a, rng, eps) for a in embed))
    except Undefined:
        assume(False)
    for a, b in zip(want, moved):
        if a is not None:
            assume(np.abs(a - b).max() <= kappa_max * eps * np.abs(a).max())
    return want


# ------------------------------------------------------------------------------------------
# 1. random models against the loops
# ------------------------------------------------------------------------------------------

@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=problems())
def test_forward_matches_loops(problem):
    X, blocks, readout = problem
    want, want_logits = expected(X, blocks, readout)
    got = transformer_forward(X, to_model(blocks, readout))
    assert_close(got["output"], want, "output")
    if readout is None:
        assert got["logits"] is None and got["pooled"] is None
    else:
        assert_close(got["logits"], want_logits, "logits")
        assert_close(got["pooled"], want.mean(axis=0), "pooled")


def test_normalise():
    x = np.array([[1.0, -3.0], [0.5, 0.5]])
    np.testing.assert_allclose(normalise(x), [[0.5, -1.5], [1.0, 1.0]], rtol=1e-15)
    np.testing.assert_allclose(np.abs(normalise(np.random.default_rng(0).normal(size=(3, 4, 5)))).mean(axis=-1),
                               1.0, rtol=1e-14)


# ------------------------------------------------------------------------------------------
# 2. a stream of token sets
# ------------------------------------------------------------------------------------------

def _model_2(seed=0, de=4, readout=True, embed_p=None, n=3):
    rng = np.random.default_rng(seed)
    blocks = random_blocks(rng, L=2, H=[2, 3], dk=[3, 2], dv=[2, 4], de=de, dh=[5, 3], mlp={0},
                           scale=[0.7, 0.5])
    ro = (rng.normal(size=(3, de)), rng.normal(size=3)) if readout else None
    emb = (rng.normal(size=(de, embed_p)), rng.normal(size=(n, de))) if embed_p else None
    return blocks, ro, emb, rng


@pytest.mark.parametrize("embed_p", [None, 2])
def test_stream_equals_each_set(embed_p):
    blocks, ro, emb, rng = _model_2(seed=1, embed_p=embed_p, n=3)
    model = to_model(blocks, ro, emb)
    T, n = 4, 3
    stream = rng.normal(size=(T, n, embed_p or model.de))
    got = transformer_forward(stream, model, stages=True)
    assert got["output"].shape == (T, n, model.de) and got["logits"].shape == (T, 3)
    for t in range(T):
        alone = transformer_forward(stream[t], model, stages=True)
        np.testing.assert_allclose(got["output"][t], alone["output"], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got["logits"][t], alone["logits"], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got["pooled"][t], alone["pooled"], rtol=1e-12, atol=1e-12)
        for l, (bs, ba) in enumerate(zip(got["blocks"], alone["blocks"])):
            assert set(bs) == set(ba)
            for key in ba:
                np.testing.assert_allclose(bs[key][t], ba[key], rtol=1e-12, atol=1e-12, err_msg=f"{l}.{key}")
        want, want_logits = loop_forward(stream[t], blocks, ro, emb)
        assert_close(alone["output"], want, "output")
        assert_close(alone["logits"], want_logits, "logits")


# ------------------------------------------------------------------------------------------
# 3. the stages of every block
# ------------------------------------------------------------------------------------------

def test_stages():
    rng = np.random.default_rng(2)
    de, n = 4, 3
    blocks = random_blocks(rng, L=3, H=[2, 1, 3], dk=[3, 2, 1], dv=[2, 4, 3], de=de, dh=[5, 3, 2],
                           mlp={0, 2}, scale=[0.8, 0.6, 0.5])
    model = to_model(blocks)
    X = rng.normal(size=(n, de))
    plain = transformer_forward(X, model)
    assert "blocks" not in plain
    out = transformer_forward(X, model, stages=True)
    assert len(out["blocks"]) == 3
    for l, (st_, b) in enumerate(zip(out["blocks"], blocks)):
        if "W1" in b:
            assert set(BLOCK_STAGES) <= set(st_), (l, set(BLOCK_STAGES) - set(st_))
        else:
            assert set(BLOCK_STAGES) - set(MLP_STAGES) <= set(st_), l
            assert not set(MLP_STAGES) & set(st_), l
        H_, dk, dv = b["WQ"].shape[0], b["WQ"].shape[1], b["WV"].shape[1]
        assert st_["q"].shape == (H_, n, dk) and st_["k"].shape == (H_, n, dk) and st_["v"].shape == (H_, n, dv)
        assert st_["Z"].shape == (H_, n) and st_["v_tilde"].shape == (H_, n, dv)
        # the stages, one against another and against the loops
        x = st_["x"]
        xn = np.array([norm_token(x[i]) for i in range(n)])
        assert_close(st_["x_norm"], xn, f"{l}.x_norm")
        for h in range(H_):
            for i in range(n):
                assert_close(st_["q"][h, i], b["WQ"][h] @ xn[i], f"{l}.q")
                assert_close(st_["k"][h, i], b["WK"][h] @ xn[i], f"{l}.k")
                assert_close(st_["v"][h, i], b["WV"][h] @ xn[i], f"{l}.v")
                Z = sum(float(elu1(st_["q"][h, i]) @ elu1(st_["k"][h, j])) for j in range(n))
                assert_close(st_["Z"][h, i], Z, f"{l}.Z")
        assert_close(st_["x_tilde"], loop_attention(xn, b["WQ"], b["WK"], b["WV"], b["WO"]), f"{l}.x_tilde")
        assert_close(st_["h"], x + st_["x_tilde"], f"{l}.h")
        if "W1" in b:
            hn = np.array([norm_token(st_["h"][i]) for i in range(n)])
            assert_close(st_["h_norm"], hn, f"{l}.h_norm")
            hidden = np.array([np.maximum(b["W1"] @ hn[i] + b["b1"], 0.0) for i in range(n)])
            assert_close(st_["hidden"], hidden, f"{l}.hidden")
            assert_close(st_["out"], st_["h"] + hidden @ b["W2"].T + b["b2"], f"{l}.out")
        else:
            np.testing.assert_array_equal(st_["out"], st_["h"])
        if l + 1 < len(blocks):
            np.testing.assert_array_equal(st_["out"], out["blocks"][l + 1]["x"])
    np.testing.assert_array_equal(out["blocks"][0]["x"], X)
    np.testing.assert_array_equal(out["blocks"][-1]["out"], out["output"])
    np.testing.assert_array_equal(plain["output"], out["output"])
    assert_close(out["output"], loop_forward(X, blocks)[0], "output")


# ------------------------------------------------------------------------------------------
# 4. the model file layout, written by hand and read by load_model
# ------------------------------------------------------------------------------------------

def _state(blocks, readout, embed):
    sd = {}
    for l, b in enumerate(blocks):
        for k in ("WQ", "WK", "WV", "WO"):
            sd[f"blocks.{l}.attn.{k}"] = b[k]
        for k in ("W1", "b1", "W2", "b2"):
            if k in b:
                sd[f"blocks.{l}.mlp.{k}"] = b[k]
    sd["readout.W"], sd["readout.b"] = readout
    sd["embed.W"], sd["embed.pos"] = embed
    return sd


def test_model_file_layout(tmp_path):
    rng = np.random.default_rng(3)
    H, dk, dv, de, dh, p, n, classes = 2, 3, 2, 4, 5, 3, 4, 3
    blocks = random_blocks(rng, L=2, H=[H, H], dk=[dk, dk], dv=[dv, dv], de=de, dh=[dh, dh], mlp={0, 1},
                           scale=[0.6, 0.6])
    readout = (rng.normal(size=(classes, de)), rng.normal(size=classes))
    embed = (rng.normal(size=(de, p)), rng.normal(size=(n, de)))
    sd = _state(blocks, readout, embed)
    shapes = {"attn.WQ": (H, dk, de), "attn.WK": (H, dk, de), "attn.WV": (H, dv, de), "attn.WO": (H, de, dv),
              "mlp.W1": (dh, de), "mlp.b1": (dh,), "mlp.W2": (de, dh), "mlp.b2": (de,)}
    want_shapes = {f"blocks.{l}.{k}": s for l in range(2) for k, s in shapes.items()}
    want_shapes.update({"readout.W": (classes, de), "readout.b": (classes,), "embed.W": (de, p),
                        "embed.pos": (n, de)})
    assert {k: v.shape for k, v in sd.items()} == want_shapes
    path = tmp_path / "two_blocks.npz"
    np.savez(path, **sd)
    model = ctmhsa.load_model(path)
    assert model.n_blocks == 2 and all(b.mlp is not None for b in model.blocks)
    inputs = rng.normal(size=(n, p))
    got = transformer_forward(inputs, model)
    want, want_logits = loop_forward(inputs, blocks, readout, embed)
    assert_close(got["output"], want, "output")
    assert_close(got["logits"], want_logits, "logits")
    # a stream of raw inputs
    stream = rng.normal(size=(2, n, p))
    got = transformer_forward(stream, model)
    for t in range(2):
        want, want_logits = loop_forward(stream[t], blocks, readout, embed)
        assert_close(got["output"][t], want, "output")
        assert_close(got["logits"][t], want_logits, "logits")
    # a wrong shape is refused, naming the key
    bad = dict(sd)
    bad["blocks.1.mlp.W2"] = rng.normal(size=(de + 1, dh))
    np.savez(tmp_path / "bad.npz", **bad)
    with pytest.raises(ValueError, match=r"blocks\.1\.mlp\.W2"):
        ctmhsa.load_model(tmp_path / "bad.npz")
    # raw inputs of the wrong width or token count
    with pytest.raises(ValueError):
        transformer_forward(rng.normal(size=(n, p + 1)), model)
    with pytest.raises(ValueError):
        transformer_forward(rng.normal(size=(n + 1, p)), model)


# ------------------------------------------------------------------------------------------
# 5. errors
# ------------------------------------------------------------------------------------------

def _model_1(rng, de=3, **block):
    WQ, WK = rng.normal(size=(2, 2, de)), rng.normal(size=(2, 2, de))
    WV, WO = rng.normal(size=(2, 2, de)), rng.normal(size=(2, de, 2))
    return Model(blocks=(Block.from_arrays(WQ, WK, WV, WO, **block),))


def test_zero_token_is_named():
    rng = np.random.default_rng(4)
    model = _model_1(rng)
    X = rng.normal(size=(4, 3))
    X[2] = 0.0
    with pytest.raises(ValueError, match=r"token 2\b"):
        transformer_forward(X, model)
    stream = rng.normal(size=(3, 4, 3))
    stream[1, 3] = 0.0
    with pytest.raises(ValueError, match=r"token \(1, 3\)"):
        transformer_forward(stream, model)
    with pytest.raises(ValueError, match=r"token 1\b"):
        normalise(np.array([[1.0, 2.0], [0.0, 0.0]]))


def test_zero_pooled_output_is_refused():
    # two opposite tokens and WV = 0 (so x̃ = 0 and no MLP): the pooled token mean is exactly 0
    de = 2
    blk = Block.from_arrays(np.ones((1, 1, de)), np.ones((1, 1, de)), np.zeros((1, 1, de)), np.ones((1, de, 1)))
    model = Model(blocks=(blk,), readout_W=np.ones((1, de)))
    with pytest.raises(ValueError, match="pooled"):
        transformer_forward(np.array([[1.0, -2.0], [-1.0, 2.0]]), model)


def test_skip_path_and_biases_are_refused():
    rng = np.random.default_rng(5)
    with pytest.raises(ValueError, match=r"blocks\.0\.attn\.WS"):
        transformer_forward(rng.normal(size=(3, 3)), _model_1(rng, WS=rng.normal(size=(2, 2, 3))))
    sd = {"blocks.0.attn.WQ": rng.normal(size=(2, 2, 3)), "blocks.0.attn.WK": rng.normal(size=(2, 2, 3)),
          "blocks.0.attn.WV": rng.normal(size=(2, 2, 3)), "blocks.0.attn.WO": rng.normal(size=(2, 3, 2))}
    X = rng.normal(size=(3, 3))
    zero = {"bq": np.zeros((2, 2)), "bk": np.zeros((2, 2)), "bv": np.zeros((2, 2)), "bo": np.zeros(3)}
    # explicit zero biases are no biases
    ok = transformer_forward(X, Model.from_state_dict({**sd, **{f"blocks.0.attn.{k}": v for k, v in zero.items()}}))
    np.testing.assert_array_equal(ok["output"], transformer_forward(X, Model.from_state_dict(sd))["output"])
    for k, v in zero.items():
        v = v.copy()
        v.flat[-1] = 0.5
        model = Model.from_state_dict({**sd, f"blocks.0.attn.{k}": v})
        with pytest.raises(ValueError, match=rf"blocks\.0\.attn\.{k}"):
            transformer_forward(X, model)


@pytest.mark.parametrize("bad", [None, {"blocks.0.attn.WQ": np.ones((1, 1, 1))}, "model.npz"])
def test_non_model_is_refused(bad):
    with pytest.raises(TypeError, match="Model"):
        transformer_forward(np.ones((2, 1)), bad)


def test_block_is_not_a_model():
    rng = np.random.default_rng(6)
    with pytest.raises(TypeError):
        transformer_forward(rng.normal(size=(3, 3)), _model_1(rng).blocks[0])


@pytest.mark.parametrize("shape", [(3, 4), (3, 2), (3,), (2, 2, 3, 3), (2, 3, 4)])
def test_token_shape_is_checked(shape):
    rng = np.random.default_rng(7)
    with pytest.raises(ValueError, match=r"de=3"):
        transformer_forward(rng.normal(size=shape), _model_1(rng))
