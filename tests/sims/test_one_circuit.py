"""One circuit for every input: gains, offsets, set points and corrections come from the weights and
the declared input range, never from the tokens shown (issue 29)."""

import numpy as np
import pytest

from ctmhsa.maths.inputs import InputRange
from ctmhsa.mapping.operating import OperatingRangeError
from ctmhsa.sims import build_mhsa, simulate_mhsa

RELAYS = ("nucleus1", "nucleus1_kv", "nucleus1_v")


def _problem(seed=0, n=3, de=4, H=2, dk=2, dv=3):
    rng = np.random.default_rng(seed)
    W = dict(WQ=rng.normal(size=(H, dk, de)) / 2, WK=rng.normal(size=(H, dk, de)) / 2,
             WV=rng.normal(size=(H, dv, de)), WO=rng.normal(size=(H, de, dv)))
    return rng, W


def _tokens(rng, n, de, norm):
    X = rng.normal(size=(n, de))
    return X * (0.9 * norm / np.linalg.norm(X, axis=1, keepdims=True).max())


def _state(sim):
    """Every variable of every simulated group and every synaptic weight, as numpy."""
    built = sim.runner.built
    out = {}
    for g in built.all_groups():
        for var, val in g.get_states(units=False).items():
            if var not in ("t", "dt", "t_in_timesteps", "N", "i", "lastspike", "not_refractory"):
                out[f"{g.name}.{var}"] = np.asarray(val, float)
    for name, S in built.synapses.items():
        out[f"{name}.w"] = np.asarray(S.w_[:], float)
    return out


@pytest.mark.brian2
@pytest.mark.parametrize("kw", [dict(neuron="rate"), dict(neuron="escape", seed=3),
                                dict(neuron="escape", seed=3, circuit="linear"),
                                dict(neuron="rate", signed="offset"), dict(neuron="lif", seed=1)])
def test_two_token_sets_build_the_same_circuit(kw):
    rng, W = _problem()
    rng_in = InputRange(norm=2.0, std=0.8)
    sims = [build_mhsa(_tokens(rng, 3, 4, 2.0), **W, input_range=rng_in, **kw) for _ in range(2)]
    a, b = (_state(s) for s in sims)
    assert a.keys() == b.keys()
    differ = sorted(k for k in a if not np.array_equal(a[k], b[k]))
    # only the relays' rates (and what the rate level's relays compute from them: r = r_in)
    assert differ and all(k.split(".")[0] in RELAYS and k.split(".")[1] in ("r_in", "r") for k in differ), differ


@pytest.mark.brian2
def test_set_tokens_equals_a_fresh_build():
    rng, W = _problem(1)
    X1, X2 = _tokens(rng, 3, 4, 2.0), _tokens(rng, 3, 4, 2.0)
    sim = build_mhsa(X1, **W, neuron="rate", input_range=2.0, duration=0.5)
    sim.set_tokens(X2)
    res = sim.run()
    ref = simulate_mhsa(X2, **W, neuron="rate", input_range=2.0, duration=0.5)
    np.testing.assert_allclose(res.x_tilde, ref.x_tilde, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(res.reference, ref.reference)
    assert np.max(np.abs(res.x_tilde - res.reference)) < 1e-3 * np.max(np.abs(res.reference))


@pytest.mark.brian2
def test_tokens_outside_the_declared_range_are_refused():
    rng, W = _problem(2)
    X = _tokens(rng, 3, 4, 2.0)
    with pytest.raises(ValueError, match=r"X: token \d+ has norm .* outside the declared input range"):
        build_mhsa(X * 2, **W, neuron="rate", input_range=2.0)
    sim = build_mhsa(X, **W, neuron="rate", input_range=2.0)
    with pytest.raises(ValueError, match="outside the declared input range"):
        sim.set_tokens(X * 2)
    with pytest.raises(ValueError, match=r"X: expected shape \(3, 4\)"):
        sim.set_tokens(X[:2])


@pytest.mark.codegen_independent
def test_undividable_tokens_are_refused_before_building():
    # weights large enough that some tokens of the range need more division than the
    # interneurons can exert at the gain fixed from the range's statistics
    rng, W = _problem(3)
    W = {k: v * (4.0 if k in ("WQ", "WK") else 1.0) for k, v in W.items()}
    X = _tokens(rng, 3, 4, 3.0)
    with pytest.raises(OperatingRangeError, match=r"needs a division of .* at the gain fixed from the weights"):
        build_mhsa(X, **W, neuron="rate", input_range=InputRange(norm=3.0, std=0.01))


@pytest.mark.codegen_independent
def test_input_range_option_is_validated():
    rng, W = _problem(4)
    X = _tokens(rng, 3, 4, 1.0)
    for bad, err in ((-1.0, ValueError), ("big", TypeError), (dict(size=1), ValueError)):
        with pytest.raises(err, match="input_range"):
            build_mhsa(X, **W, neuron="rate", input_range=bad)
