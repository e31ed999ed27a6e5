"""A Co4 model through the circuit (``simulate_model`` of a :class:`ctmhsa.maths.co4.Co4Model`):
the latents' relays, the normalising relays, the Co4 area, the residual to the latents and the
transformer's read-out, against ``co4_forward`` at the rate level."""

from __future__ import annotations

import numpy as np
import pytest

import ctmhsa
from ctmhsa.maths.co4 import Co4Model, co4_forward

pytestmark = pytest.mark.codegen_independent


def _model(L=2, H=1, d=2, de=3, classes=3, seed=3):
    rng = np.random.default_rng(seed)
    return Co4Model(latents=rng.normal(size=(L, de)), WQ=rng.normal(size=(H, d, de)) / np.sqrt(de),
                    WK=rng.normal(size=(H, d, de)) / np.sqrt(de), WV=rng.normal(size=(H, d, de)) / np.sqrt(de),
                    WO=rng.normal(size=(H, de, d)) / np.sqrt(d), readout_W=rng.normal(size=(classes, de)),
                    readout_b=rng.normal(size=classes), name="toy_co4")


def test_a_co4_model_at_the_rate_level_equals_co4_forward():
    m = _model()
    X = np.random.default_rng(9).normal(size=(4, 3))
    # the rate level's largest step (10 ms cells over 2): its fixed point is the one at the
    # default 1 ms (measured at 2 ms: the same error, 2e-11), in a fifth of the steps
    res = ctmhsa.simulate_model(m, X, neuron="rate", dt=5e-3)
    ref = co4_forward(X, m)
    np.testing.assert_allclose(res.reference, ref["out"], rtol=1e-12)       # the run's reference is co4_forward's
    np.testing.assert_allclose(res.reference_logits, ref["logits"], rtol=1e-12)
    np.testing.assert_allclose(res.output, ref["out"], atol=1e-6 * np.abs(ref["out"]).max())
    np.testing.assert_allclose(res.logits, ref["logits"], atol=1e-6 * np.abs(ref["logits"]).max())
    stages = res.metrics["blocks"][0]
    for k in ("latents_norm", "x_norm", "q", "k", "v", "q_m", "k_m", "v_m", "S", "z", "Z", "v_tilde", "h"):
        assert stages[k]["nrmse"] < 1e-6, (k, stages[k])
    assert res.config["n_neurons"] == res.counts["total"]


def test_a_co4_model_refuses_what_its_area_does_not_build():
    m = _model()
    X = np.zeros((4, 3)) + 0.5
    with pytest.raises(ValueError, match="neuron: a Co4 model's block is the Co4 area; the co4 circuit is built "
                                         "at the rate and escape levels"):
        ctmhsa.simulate_model(m, X, neuron="lif")


def test_a_co4_model_under_dale_computes_the_same_logits():
    """``dale=True``: the followers carry every signed projection's negative half (200 more cells
    here); the rate level's logits are the plain circuit's."""
    m = _model()
    X = np.random.default_rng(1).normal(size=(4, 3))
    plain = ctmhsa.simulate_model(m, X, neuron="rate", dt=5e-3)
    dale = ctmhsa.simulate_model(m, X, neuron="rate", dt=5e-3, dale=True)
    assert dale.counts["total"] > plain.counts["total"]
    np.testing.assert_allclose(dale.logits, plain.logits, rtol=0, atol=1e-9 * np.abs(plain.logits).max())


def test_the_shipped_co4_model_is_run_not_refused():
    """``load_model("digits_co4")`` is a Co4 model that ``simulate_model`` takes (checked up to the
    build: the run itself is the benchmark's); the transformer-only closed loop names it."""
    from ctmhsa.sims.model import as_model

    m = as_model("digits_co4")
    assert isinstance(m, Co4Model) and m.sizes == [dict(H=2, dk=8, dv=8, dh=0)]
    with pytest.raises(ValueError, match="model: digits_co4 is a Co4 model"):
        as_model("digits_co4", co4=False)


@pytest.mark.long   # 8 s on 2 busy cores; the one-set test above stays in the default suite
def test_a_stream_of_sets_with_copies_follows_each_set():
    """The stream path (``classify``, the benchmarks) with two copies per value: every
    presentation's output and logits those of ``co4_forward`` on its own set, in order."""
    m = _model()
    X = np.random.default_rng(10).normal(size=(2, 4, 3))
    res = ctmhsa.simulate_model(m, X, neuron="rate", presentation=1.0, P=2)   # (its read-out settles in ~1 s)
    for t in range(2):
        ref = co4_forward(X[t], m)
        np.testing.assert_allclose(res.output[t], ref["out"], atol=1e-5 * np.abs(ref["out"]).max())
        np.testing.assert_allclose(res.logits[t], ref["logits"], atol=1e-5 * np.abs(ref["logits"]).max())
