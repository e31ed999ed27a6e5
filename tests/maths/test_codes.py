"""Affine codes have exact inverses; the encoding keeps every rate non-negative by construction."""

import numpy as np
import pytest

from ctmhsa.maths.model import Block
from ctmhsa.circuits import pathway
from ctmhsa.maths.codes import AffineCode, CodeGains
from ctmhsa.mapping.encode import encode, output_offset, value_offset
from conftest import random_problem

pytestmark = pytest.mark.codegen_independent


@pytest.mark.parametrize("gain, offset", [(10.0, 2.5), (1e-3, 0.0), (np.array([1.0, 2.0]), np.array([0.5, 3.0]))])
def test_affine_code_round_trip(gain, offset):
    x = np.random.default_rng(0).normal(size=(7, 2))
    code = AffineCode(gain=gain, offset=offset)
    np.testing.assert_allclose(code.decode(code.encode(x)), x, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(code.encode(code.decode(x)), x, rtol=1e-13, atol=1e-13)


def test_offsets_bound_every_value():
    X, _, WQ, WK, WV, WO = random_problem(seed=2, n=6, H=3, dk=2, dv=5, de=4)
    v = np.einsum("hce,me->hmc", WV, X)
    v0 = value_offset(WV, np.linalg.norm(X, axis=1).max())   # the range of these tokens
    assert np.all(np.abs(v) <= v0[:, None, None] + 1e-12)
    assert np.all(v0[:, None, None] + v >= 0)
    x0 = output_offset(WO, v0)
    # any convex combination of values, mapped through WO, stays within x0
    kappa = np.random.default_rng(1).dirichlet(np.ones(6), size=(3, 6))
    xt = np.einsum("hec,hnc->ne", WO, np.einsum("hnm,hmc->hnc", kappa, v))
    assert np.all(np.abs(xt) <= x0 + 1e-12)


def test_encoding_input_rates_are_the_token_code():
    X, _, WQ, WK, WV, WO = random_problem(seed=3, n=3, H=2, dk=2, dv=2, de=3)
    c = pathway(3, 2, 2, 3, H=2)
    enc = encode(c, X, Block.from_arrays(WQ, WK, WV, WO))
    r = enc.values.params["nucleus1"]["r_in"]
    assert np.all(r >= 0)
    on_off = enc.codes["tokens"].decode(r).reshape(3, 3, 2)      # ON/OFF relays: [x]_+, [-x]_+
    np.testing.assert_allclose(on_off[..., 0] - on_off[..., 1], X, atol=1e-13)
    assert np.all(np.minimum(on_off[..., 0], on_off[..., 1]) == 0)   # one of each pair is silent
    off = encode(pathway(3, 2, 2, 3, H=2, signed="offset"), X, Block.from_arrays(WQ, WK, WV, WO))
    r = off.values.params["nucleus1"]["r_in"]
    assert np.all(r >= 0)
    np.testing.assert_allclose(off.codes["tokens"].decode(r).reshape(3, 3), X, atol=1e-13)


def test_gains_validation():
    with pytest.raises(ValueError, match="gains.rho_in: expected a positive finite number"):
        CodeGains(rho_in=-1.0)
    with pytest.raises(ValueError, match="gains.margin: must be >= 1"):
        CodeGains(margin=0.5)


def test_encode_rejects_mismatched_circuit():
    X, _, WQ, WK, WV, WO = random_problem(seed=4, n=3, H=2, dk=2, dv=2, de=3)
    with pytest.raises(ValueError, match="do not match circuit"):
        encode(pathway(4, 2, 2, 3, H=2), X, Block.from_arrays(WQ, WK, WV, WO))
