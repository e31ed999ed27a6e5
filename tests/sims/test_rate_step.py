"""The rate level at its largest step (``max_dt``: the fastest cell time constant over 2,
``Level.steps_per_tau``): its linear compartments integrate by exponential Euler and are read at
their fixed point, which is the ODE's at any stable step. Hypothesis-random single layers (every
circuit kind, cross-attention, causal, weight scales 1e-2 to 1e1, every phi) agree with the
reference at that step as at the default 1 ms, and a step past it is refused before building."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctmhsa.mapping.operating import OperatingRangeError
from ctmhsa.sims import simulate_mhsa
from ctmhsa.sims.options import CircuitOptions, max_dt
from conftest import random_problem

pytestmark = pytest.mark.brian2


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(circuit=st.sampled_from(["quadratic", "linear"]), n=st.integers(1, 4), m=st.one_of(st.none(), st.integers(1, 3)),
       H=st.integers(1, 2), dk=st.integers(1, 3), dv=st.integers(1, 3), de=st.integers(1, 4),
       scale=st.sampled_from([1e-2, 0.3, 1.0, 10.0]), phi=st.sampled_from(["elu1", "softplus", "exp"]),
       causal=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_the_largest_rate_step_keeps_every_stage_exact(circuit, n, m, H, dk, dv, de, scale, phi, causal, seed):
    X, Y, WQ, WK, WV, WO = random_problem(seed=seed, n=n, m=m, H=H, dk=dk, dv=dv, de=de)
    WQ, WK = scale * WQ, scale * WK
    dt, _ = max_dt(CircuitOptions(neuron="rate"))
    assert dt == pytest.approx(5e-3)                    # 10 ms cells over 2
    kw = dict(Y=Y, neuron="rate", phi=phi, circuit=circuit, causal=causal and m is None, duration=1.0)
    try:
        fine = simulate_mhsa(X, WQ, WK, WV, WO, **kw)
    except (OperatingRangeError, ValueError) as e:      # refused at 1 ms: refused alike at the largest step
        with pytest.raises(type(e)):
            simulate_mhsa(X, WQ, WK, WV, WO, dt=dt, **kw)
        return
    coarse = simulate_mhsa(X, WQ, WK, WV, WO, dt=dt, **kw)
    for stage, want in coarse.reference_stages.items():
        if stage not in coarse.stages:
            continue
        tol = 1e-6 * max(float(np.nanmax(np.abs(want))), 1e-12)
        np.testing.assert_allclose(coarse.stages[stage], want, rtol=0, atol=tol, err_msg=stage)
        np.testing.assert_allclose(coarse.stages[stage], fine.stages[stage], rtol=0, atol=tol, err_msg=stage)


def test_a_step_past_the_largest_is_refused_before_building():
    X, _, WQ, WK, WV, WO = random_problem(seed=3, n=2, H=1, dk=2, dv=2, de=2)
    with pytest.raises(ValueError, match=r"^dt: 0\.0051 s is too coarse for the rate level's cells: at most 0\.005 s "
                                         r"\(tau_m = 0\.01 s / 2\)"):
        simulate_mhsa(X, WQ, WK, WV, WO, neuron="rate", dt=5.1e-3)
