"""The normalised microcolumns' floors summed from each stage's few source rows
(:func:`ctmhsa.mapping.noise.microcolumn_floor`) equal the same first-order floors built densely on
every relay (the formulas of version 0.14, kept here as the reference), in chunks of heads or all
at once: a 100-head cortex's floors took 19 GB and 85 s that way."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ctmhsa.mapping import noise
from ctmhsa.mapping.noise import _head_chunks, microcolumn_floor


def dense_floor(D, kvsrc, vsrc, *, s, kap, lq, lk, WQ, WK, WV, WO, v, Zst, cnt, b, Nb, present, var_it):
    """Every coefficient vector built on all ``(source, e)`` relays, then squared (0.14's code)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return _dense(D, kvsrc, vsrc, s, kap, lq, lk, WQ, WK, WV, WO, v, Zst, cnt, b, Nb, present, var_it)


def _dense(D, kvsrc, vsrc, s, kap, lq, lk, WQ, WK, WV, WO, v, Zst, cnt, b, Nb, present, var_it):
    H, n, m, dk = s.shape
    ns, ne = D.shape
    qco = np.einsum("hic,hce->hice", lq, WQ)
    kco = np.einsum("hjc,hce->hjce", lk, WK)
    epsq = np.einsum("hijc,hice->hije", s, qco)
    epsk = np.einsum("hijc,hjce->hije", s, kco)
    eps = np.zeros((H, n, m, ns, ne))
    for i in range(n):
        eps[:, i, :, i] += epsq[:, i]
    for j in range(m):
        eps[:, :, j, kvsrc[j]] += epsk[:, :, j]
    E = eps.sum(axis=2)
    out = dict(Z=Zst ** 2 * (np.einsum("hite,te->hi", E * E, D) + cnt * (1 + Nb)))
    var_s = np.zeros((H, n, m, dk))
    for i in range(n):
        cs = -np.broadcast_to(E[:, i, None, None], (H, m, dk, ns, ne)).copy()
        cs[:, :, :, i] += qco[:, i, None]
        for j in range(m):
            cs[:, j, :, kvsrc[j]] += kco[:, j]
        var_s[:, i] = s[:, i] ** 2 * np.einsum("hjcte,te->hjc", cs * cs, D)
    b3 = b[..., None]
    sb = s + b3[..., None] * present
    kb = kap + b3 * present.sum(axis=-1)
    pool3 = kb.sum(axis=-1, keepdims=True)
    out["s"] = var_s + cnt[:, :, None, None] * np.nan_to_num(sb * (1 - sb / pool3[..., None]))
    ck = eps - kap[..., None, None] * E[:, :, None]
    var_kc = cnt[..., None] * np.nan_to_num(kb * (1 - kb / pool3))
    out["kappa"] = np.einsum("hijte,te->hij", ck * ck, D) + var_kc
    var_y = np.zeros(var_it.shape)
    for j in range(m):
        cy = v[:, None, j, :, None, None] * ck[:, :, j, None]
        cy[:, :, :, vsrc[j]] += kap[:, :, j, None, None] * WV[:, None]
        var_y[:, :, j] = np.einsum("hicte,te->hic", cy * cy, D)
    out["y"] = var_y + var_it + v[:, None] ** 2 * var_kc[..., None]
    vt = np.einsum("hij,hjc->hic", kap, v)
    dv = v[:, None] - vt[:, :, None]
    cv = np.einsum("hijc,hijte->hicte", dv, eps)
    for j in range(m):
        cv[:, :, :, vsrc[j]] += kap[:, :, j, None, None] * WV[:, None]

    def pinned(a):
        return cnt[..., None] * np.nan_to_num(np.einsum("hij,hijo->hio", kb, a ** 2)
                                              - np.einsum("hij,hijo->hio", kb, a) ** 2 / pool3)
    indep = var_it.sum(axis=2)
    out["v_tilde"] = np.einsum("hicte,te->hic", cv * cv, D) + pinned(dv) + indep
    cx = np.einsum("hoc,hicte->iote", WO, cv)
    dx = np.einsum("hoc,hijc->hijo", WO, dv)
    out["x_shared"] = np.einsum("iote,te->io", cx * cx, D) + pinned(dx).sum(axis=0)
    return out


def _instance(rng, H, n, m, dk, dv, de, relays):
    """Random arrays of the floors' shapes; ``relays``: "self" (keys and values on the queries'
    relays, n = m), "kv" (keys and values on their own) or "kv_v" (values on a third set)."""
    kvsrc = np.arange(m) + (0 if relays == "self" else n)
    vsrc = kvsrc if relays != "kv_v" else np.arange(m) + n + m
    ns = n + (0 if relays == "self" else m) + (m if relays == "kv_v" else 0)
    present = rng.random((H, n, m, dk)) < 0.8
    s = rng.random((H, n, m, dk)) * present
    return (rng.random((ns, de)) + 0.01, kvsrc, vsrc, dict(
        s=s, kap=s.sum(axis=-1), lq=rng.normal(size=(H, n, dk)), lk=rng.normal(size=(H, m, dk)),
        WQ=rng.normal(size=(H, dk, de)), WK=rng.normal(size=(H, dk, de)), WV=rng.normal(size=(H, dv, de)),
        WO=rng.normal(size=(H, de, dv)), v=rng.normal(size=(H, m, dv)), Zst=rng.random((H, n)) + 0.1,
        cnt=rng.random((H, n)) * 0.1, b=rng.random((H, n)) * 0.2, Nb=rng.random((H, n)),
        present=present, var_it=rng.random((H, n, m, dv)) * 0.01))


@pytest.mark.codegen_independent
@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3), st.integers(1, 4), st.integers(1, 4), st.integers(1, 3), st.integers(1, 3),
       st.integers(1, 4), st.sampled_from(["self", "kv", "kv_v"]), st.integers(0, 2 ** 31 - 1))
def test_source_rows_floor_equals_the_dense_floor(H, n, m, dk, dv, de, relays, seed):
    if relays == "self":
        m = n     # self-attention on one set of relays: key token j is query token j
    D, kvsrc, vsrc, a = _instance(np.random.default_rng(seed), H, n, m, dk, dv, de, relays)
    ref = dense_floor(D, kvsrc, vsrc, **a)
    got = microcolumn_floor(D, kvsrc, vsrc, **a)
    for key in ("Z", "s", "kappa", "y", "v_tilde"):
        np.testing.assert_allclose(got[key], ref[key], rtol=1e-9, atol=1e-12 * np.abs(ref[key]).max(), err_msg=key)
    shared = np.einsum("iote,te->io", got["_cx"] ** 2, D) + got["_x_pinned"]
    np.testing.assert_allclose(shared, ref["x_shared"], rtol=1e-9, atol=1e-12 * np.abs(ref["x_shared"]).max())
    # head by head: the per-head parts concatenate, x̃'s coefficients add before they are squared
    parts = [microcolumn_floor(D, kvsrc, vsrc, **{k: x[h:h + 1] for k, x in a.items()}) for h in range(H)]
    np.testing.assert_allclose(np.concatenate([p["s"] for p in parts]), got["s"], rtol=1e-12, atol=0)
    cx = sum(p["_cx"] for p in parts)
    np.testing.assert_allclose(np.einsum("iote,te->io", cx ** 2, D) + sum(p["_x_pinned"] for p in parts),
                               shared, rtol=1e-9)
    # only Z where the circuit has no ON/OFF value cells (full=False)
    assert set(microcolumn_floor(D, kvsrc, vsrc, full=False, **a)) == {"Z"}


@pytest.mark.codegen_independent
def test_head_chunks_bound_the_arrays(monkeypatch):
    monkeypatch.setattr(noise, "CHUNK_VALUES", 100)
    assert _head_chunks(5, 30) == [slice(0, 3), slice(3, 5)]
    assert _head_chunks(3, 1000) == [slice(0, 1), slice(1, 2), slice(2, 3)]   # at least one head
    assert noise._head_chunks(2, 1) == [slice(0, 2)]
