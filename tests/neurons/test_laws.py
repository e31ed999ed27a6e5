"""Two-point-neuron laws on the L5 IT soma (ctmhsa.neurons.laws): simulated = predicted, product = attention."""

import numpy as np
import pytest

from ctmhsa.maths.reference import linear_mhsa
from ctmhsa.neurons.laws import LAWS, attention_under_law, law_numpy
from ctmhsa.sims import simulate_mhsa
from conftest import random_problem


@pytest.mark.codegen_independent
def test_laws_follow_the_equations_of_the_seed():
    R, C = np.array([-1.5, -0.5, 0.0, 0.7, 2.0]), np.array([0.0, 0.5, 1.0, 2.0, 3.0])
    R, C = np.meshgrid(R, C)
    relu = lambda x: np.maximum(x, 0.0)   # noqa: E731  (rates are rectified)
    expected = {
        "product": relu(R) * C,
        "co4": np.clip(R ** 2 + 2 * R + C * (1 + np.abs(R)), 0, 6),
        "tm1": relu(0.5 * R * (1 + np.exp(R * C))),
        "tm2": relu(R + R * C),
        "tm3": relu(R * (1 + np.tanh(R * C))),
        "tm4": relu(R * 2.0 ** (R * C)),
    }
    assert set(expected) == set(LAWS)
    for law, val in expected.items():
        np.testing.assert_allclose(law_numpy(law)(R, C), val, rtol=1e-12, err_msg=law)
    assert law_numpy("co4")(np.array(5.0), np.array(5.0)) == 6.0           # ReLU6 saturates


@pytest.mark.brian2
@pytest.mark.parametrize("law", sorted(LAWS))
def test_rate_level_computes_what_the_law_predicts(law):
    X, _, WQ, WK, WV, WO = random_problem(seed=5, n=4, H=2, dk=3, dv=3, de=4)
    res = simulate_mhsa(X, WQ, WK, WV, WO, neuron="rate", law=law)
    ref = linear_mhsa(X, WQ, WK, WV, WO)
    pred = attention_under_law(ref["kappa"], ref["v"], WO, law, a=np.full((2, 4), 4.0))
    for stage in ("y", "v_tilde", "x_tilde"):
        err = np.abs(res.stages[stage] - pred[stage]).max() / np.abs(pred[stage]).max()
        assert err < 1e-9, (law, stage, err)
    departure = res.metrics()["x_tilde"]["nrmse"]
    assert (departure < 1e-9) if law == "product" else (departure > 0.1), (law, departure)
    assert res.config["law"] == law
    assert res.metrics()["s"]["max_rel_error"] < 1e-9       # L2/3 does not depend on the law


@pytest.mark.brian2
def test_law_with_offset_code_and_causal_mask():
    X, _, WQ, WK, WV, WO = random_problem(seed=6, n=4, H=1, dk=3, dv=3, de=4)
    res = simulate_mhsa(X, WQ, WK, WV, WO, neuron="rate", law="co4", signed="offset", causal=True)
    ref = linear_mhsa(X, WQ, WK, WV, WO, causal=True)
    a = np.arange(1, 5, dtype=float)[None, :]              # keys attended by macrocolumn i
    pred = attention_under_law(ref["kappa"], ref["v"], WO, "co4", a=a,
                               v0=np.array(res.diagnostics["encoding"]["v0"]), causal=True)
    err = np.abs(res.stages["x_tilde"] - pred["x_tilde"]).max() / np.abs(pred["x_tilde"]).max()
    assert err < 1e-9


@pytest.mark.codegen_independent
def test_bad_law_is_refused_before_building():
    X, _, WQ, WK, WV, WO = random_problem(n=3)
    with pytest.raises(ValueError, match="law"):
        simulate_mhsa(X, WQ, WK, WV, WO, neuron="rate", law="sigmoid")
    with pytest.raises(TypeError, match="law"):
        simulate_mhsa(X, WQ, WK, WV, WO, neuron="rate", law=3)
    with pytest.raises(ValueError, match="law"):
        simulate_mhsa(X, WQ, WK, WV, WO, neuron="rate", law="co4", circuit="linear")
