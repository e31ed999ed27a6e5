"""Streams: T token sets shown one after another to one built circuit, each decoded from its own
window (issue 30). The same scenarios at the rate and escape levels."""

import numpy as np
import pytest

from ctmhsa.maths.inputs import InputRange
from ctmhsa.maths.reference import linear_mhsa
from ctmhsa.sims import build_mhsa, simulate_mhsa


def _problem(T=3, n=3, de=3, H=2, dk=2, dv=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(T, n, de)) * 0.6
    W = [rng.normal(size=s) * 0.6 for s in [(H, dk, de), (H, dk, de), (H, dv, de), (H, de, dv)]]
    return X, W


@pytest.mark.brian2
def test_rate_stream_equals_the_reference_of_every_presentation():
    X, W = _problem()
    res = simulate_mhsa(X, *W, neuron="rate", presentation=0.2)
    assert res.x_tilde.shape == res.reference.shape == X.shape
    assert res.stream["count"] == 3 and res.stream["window"] == [0.05, 0.2]
    assert res.config["duration"] == pytest.approx(0.6)
    for k, m in enumerate(res.presentation_metrics()):
        ref = linear_mhsa(X[k], *W)
        np.testing.assert_allclose(res.reference[k], ref["x_tilde"])
        assert m["x_tilde"]["max_rel_error"] < 1e-3, (k, m["x_tilde"])
        assert m["Z"]["max_rel_error"] < 1e-3
    # one circuit: its relays follow one table, the first set covering the warm-up (none here)
    rates, period, shift = build_mhsa(X, *W, neuron="rate", presentation=0.2).encoding.stream["nucleus1"]
    assert rates.shape[0] == 3 and period == 0.2 and shift == 0.0


@pytest.mark.brian2
def test_stream_decodes_what_a_fresh_circuit_for_each_set_decodes():
    """Each presentation's state is the fixed point of that token set: the same as a circuit built
    for the same declared range and shown that set alone."""
    X, W = _problem(T=2, seed=1)
    rng = InputRange.from_tokens(X)
    res = simulate_mhsa(X, *W, neuron="rate", presentation=0.3)
    for k in range(2):
        alone = simulate_mhsa(X[k], *W, neuron="rate", duration=0.3, input_range=rng)
        np.testing.assert_allclose(res.x_tilde[k], alone.x_tilde, atol=1e-6 * np.abs(alone.x_tilde).max())


@pytest.mark.brian2
def test_escape_stream_per_presentation_metrics_and_determinism():
    X, W = _problem(T=3)
    kw = dict(neuron="escape", presentation=0.2, warmup=0.25, seed=3, P=10)
    res = simulate_mhsa(X, *W, **kw)
    again = simulate_mhsa(X, *W, **kw)
    np.testing.assert_array_equal(res.x_tilde, again.x_tilde)
    per = res.presentation_metrics()
    assert len(per) == 3
    for m in per:
        assert np.isfinite(m["x_tilde"]["noise_floor"]) and m["x_tilde"]["noise_floor"] > 0
        assert m["x_tilde"]["r"] > 0.3
    assert res.stream["starts"] == [0.25, 0.45, 0.65]
    assert res.stages["q"].shape == (3, 2, 3, 2) and res.noise_variance["x_tilde"].shape == X.shape
    assert res.rates["nucleus2"].shape[0] == 3
    # the stream's presentations differ: the decoded outputs follow the token sets
    assert np.corrcoef(res.x_tilde.ravel(), res.reference.ravel())[0, 1] > 0.6


@pytest.mark.codegen_independent
@pytest.mark.parametrize("kw, match", [
    (dict(duration=1.0), "duration: .*a stream lasts"),
    (dict(scheduler="serial"), "scheduler: does not apply to a stream"),
    (dict(presentation=0.0003), "presentation:"),
])
def test_stream_refusals(kw, match):
    X, W = _problem(T=2)
    with pytest.raises(ValueError, match=match):
        build_mhsa(X, *W, neuron="escape", **kw)


@pytest.mark.brian2
def test_presentation_needs_a_stream_and_a_stream_needs_its_sets_in_range():
    X, W = _problem(T=2)
    with pytest.raises(ValueError, match="presentation: .*a presentation period needs a stream"):
        build_mhsa(X[0], *W, neuron="rate", presentation=0.2)
    with pytest.raises(ValueError, match=r"X\[1\] \(presentation 1\)"):
        build_mhsa(X * np.array([1.0, 10.0])[:, None, None], *W, neuron="rate", presentation=0.2,
                   input_range=float(np.linalg.norm(X, axis=-1).max()))
    with pytest.raises(ValueError, match="Y: expected shape"):
        build_mhsa(X, *W, Y=X[0], neuron="rate", presentation=0.2)
    sim = build_mhsa(X, *W, neuron="rate", presentation=0.2)
    with pytest.raises(ValueError, match="set_tokens: this circuit was built for a stream"):
        sim.set_tokens(X[0])
    with pytest.raises(ValueError, match="presentation_metrics: this result is one token set"):
        simulate_mhsa(X[0], *W, neuron="rate", duration=0.2).presentation_metrics()
