"""Where a benchmark's time goes (:mod:`ctmhsa.sims.profile`): sums of every simulation's parts."""

import numpy as np
import pytest

from ctmhsa.sims import profile


@pytest.mark.codegen_independent
def test_blocks_sum_the_simulations_inside_them_only():
    profile.record(dict(build=9.0, run=9.0))                 # no block open: counted nowhere
    with profile.collecting() as outer:
        profile.record(dict(build=1.0, compile=2.0, run=3.0, decode=0.5, total=7.0))
        with profile.collecting() as inner:
            profile.record(dict(build=0.25, compile=float("nan"), run=1.0))   # nan: not measured
    assert inner["simulations"] == 1 and outer["simulations"] == 2
    assert (inner["build"], inner["compile"], inner["run"], inner["decode"]) == (0.25, 0.0, 1.0, 0.0)
    assert (outer["build"], outer["compile"], outer["run"], outer["decode"]) == (1.25, 2.0, 4.0, 0.5)
    # the recorded parts exceed the block's real wall time here: nothing is left outside
    assert outer["outside"] == 0.0 and outer["wall"] > 0
    assert set(outer["shares"]) == {"build", "compile", "run", "decode", "outside"}


@pytest.mark.brian2
def test_a_simulation_and_a_model_are_recorded_with_their_decoding():
    from ctmhsa import simulate_mhsa, simulate_model
    from ctmhsa.maths.model import Model

    r = np.random.default_rng(0)
    W = [r.normal(size=s) * 0.5 for s in [(1, 2, 3), (1, 2, 3), (1, 2, 3), (1, 3, 2)]]
    X = r.normal(size=(2, 3))
    model = Model.from_state_dict({f"blocks.0.attn.{k}": w for k, w in zip(("WQ", "WK", "WV", "WO"), W)})
    with profile.collecting() as spent:
        a = simulate_mhsa(X, *W, neuron="rate", duration=0.5)
        m = simulate_model(model, X, neuron="rate", duration=0.7)
    assert spent["simulations"] == 2
    assert m.timings["decode"] > 0
    for k in ("build", "compile", "run", "decode"):
        assert spent[k] == pytest.approx(a.timings[k] + m.timings[k])
