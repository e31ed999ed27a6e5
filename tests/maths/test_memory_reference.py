"""The key-value memory over a stream (issue 49, the maths): ``ctmhsa.memory_attention`` against
causal linear attention at λ = 1, against the memory summed in closed form at λ < 1, and its
refusals."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctmhsa
from ctmhsa.maths.reference import linear_mhsa, memory_attention

pytestmark = pytest.mark.codegen_independent


def _problem(seed, T, H, dk, dv, de, scale, cross, batch=None):
    r = np.random.default_rng(seed)
    lead = () if batch is None else (batch,)
    X = r.normal(size=(*lead, T, de))
    Y = r.normal(size=(*lead, T, de)) if cross else None
    W = [r.normal(size=s) * scale for s in [(H, dk, de), (H, dk, de), (H, dv, de), (H, de, dv)]]
    return X, Y, W


sizes = dict(seed=st.integers(0, 2**16), T=st.integers(1, 64), H=st.integers(1, 3), dk=st.integers(1, 8),
             dv=st.integers(1, 8), de=st.integers(1, 6), scale=st.sampled_from([1e-2, 0.1, 0.5, 1.0]),
             cross=st.booleans(), normalize=st.booleans(), phi=st.sampled_from(["elu1", "softplus", "exp", "relu"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**sizes)
def test_without_forgetting_it_is_causal_linear_attention(seed, T, H, dk, dv, de, scale, cross, normalize, phi):
    X, Y, W = _problem(seed, T, H, dk, dv, de, scale, cross)
    try:
        ref = linear_mhsa(X, *W, Y=Y, phi=phi, causal=True, normalize=normalize, method="linear")
    except ValueError:       # Z = 0 (relu): refused by both
        with pytest.raises(ValueError, match="normaliser Z"):
            memory_attention(X, *W, Y=Y, phi=phi, normalize=normalize)
        return
    out = memory_attention(X, *W, Y=Y, phi=phi, normalize=normalize)
    for key in ("q", "k", "v", "v_tilde", "x_tilde"):
        np.testing.assert_allclose(out[key], ref[key], rtol=1e-10, atol=1e-12 * (1 + np.abs(ref[key]).max()),
                                   err_msg=key)
    # the memory is the linear method's prefix sum S (dk x dv), transposed
    np.testing.assert_allclose(out["M"], np.swapaxes(ref["S"], -1, -2), rtol=1e-10, atol=1e-12)
    if normalize:
        np.testing.assert_allclose(out["Z"], ref["Z"], rtol=1e-10, atol=1e-300)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lam=st.floats(0.5, 1.0, exclude_min=True), **sizes)
def test_forgetting_weighs_token_j_by_lambda_to_the_t_minus_j(lam, seed, T, H, dk, dv, de, scale, cross, normalize,
                                                             phi):
    """ṽ_t = Σ_{j<=t} λ^(t-j) v_j φ(k_j)ᵀφ(q_t) (divided by Σ_j λ^(t-j) φ(k_j)ᵀφ(q_t)), summed
    directly from the features, not by the recurrence."""
    X, Y, W = _problem(seed, T, H, dk, dv, de, scale, cross)
    _, f, _ = ctmhsa.maths.reference.resolve_phi(phi)
    Yx = X if Y is None else Y
    fq = f(np.einsum("hce,te->htc", W[0], X))
    fk = f(np.einsum("hce,te->htc", W[1], Yx))
    v = np.einsum("hce,te->htc", W[2], Yx)
    t = np.arange(T)
    decay = np.where(t[None, :] <= t[:, None], lam ** np.clip(t[:, None] - t[None, :], 0, None), 0.0)  # (t, j)
    kappa = np.einsum("htc,hjc->htj", fq, fk) * decay                                            # (H, t, j)
    num = np.einsum("htj,hjd->htd", kappa, v)
    Z = kappa.sum(axis=2)
    if normalize and np.any(Z <= 0):
        with pytest.raises(ValueError, match="normaliser Z"):
            memory_attention(X, *W, forget=lam, Y=Y, phi=phi, normalize=True)
        return
    out = memory_attention(X, *W, forget=lam, Y=Y, phi=phi, normalize=normalize)
    v_tilde = num / Z[..., None] if normalize else num
    np.testing.assert_allclose(out["v_tilde"], v_tilde, rtol=1e-9, atol=1e-12 * (1 + np.abs(v_tilde).max()))
    np.testing.assert_allclose(out["x_tilde"], np.einsum("hec,htc->te", W[3], v_tilde), rtol=1e-9,
                               atol=1e-12 * (1 + np.abs(v_tilde).max()))


def test_a_batch_is_each_stream_alone():
    X, Y, W = _problem(3, 7, 2, 3, 2, 4, 0.5, True, batch=3)
    out = memory_attention(X, *W, forget=0.8, Y=Y, normalize=True)
    for b in range(3):
        one = memory_attention(X[b], *W, forget=0.8, Y=Y[b], normalize=True)
        for key, val in one.items():
            np.testing.assert_allclose(out[key][b], val, rtol=1e-12, atol=1e-15, err_msg=key)


def test_memory_forgets_at_its_rate():
    """One token written (cross-attention: the writing stream is silent afterwards, so every later
    value is 0): the memory after token t is λ^t times the first write, whatever the queries."""
    X, _, W = _problem(5, 6, 2, 2, 3, 3, 0.5, False)
    Y = np.zeros_like(X)
    Y[0] = X[0]
    out = memory_attention(X, *W, forget=0.7, Y=Y)
    first = out["M"][:, 0]
    assert np.abs(first).max() > 0
    for t in range(6):
        np.testing.assert_allclose(out["M"][:, t], 0.7 ** t * first, rtol=1e-12, atol=0)


@pytest.mark.parametrize("forget, err", [(0.0, ValueError), (1.5, ValueError), (-0.2, ValueError),
                                         (float("nan"), ValueError), (True, TypeError), ("0.9", TypeError),
                                         (None, TypeError)])
def test_forget_outside_its_range_is_refused_naming_it(forget, err):
    X, _, W = _problem(0, 3, 1, 2, 2, 3, 0.5, False)
    with pytest.raises(err, match="forget"):
        memory_attention(X, *W, forget=forget)


def test_a_writing_stream_of_another_length_is_refused():
    X, _, W = _problem(0, 3, 1, 2, 2, 3, 0.5, False)
    with pytest.raises(ValueError, match="Y: the stream writing the memory needs one token per token of X"):
        memory_attention(X, *W, Y=np.ones((4, 3)))


def test_the_front_door_exports_it():
    assert ctmhsa.memory_attention is memory_attention
