"""The interneurons' integral loop pins a macrocolumn's pooled L2/3 count up to a residual the
floors now carry (:func:`ctmhsa.mapping.noise.loop_residual_time`)."""

import warnings

import numpy as np
import pytest

from ctmhsa.mapping.noise import loop_residual_time


@pytest.mark.codegen_independent
def test_without_lags_the_residual_is_the_loop_and_pool_time_constants():
    # first order: the count deviation is an OU process of variance F R (tau_loop + tau_pool) / 2
    assert loop_residual_time(0.01, 0.005, ()) == pytest.approx(0.015, rel=1e-12)
    assert loop_residual_time(0.06, 0.005, ()) == pytest.approx(0.065, rel=1e-12)


@pytest.mark.codegen_independent
def test_the_residual_grows_with_the_plants_lag_and_broadcasts():
    tau = loop_residual_time(np.array([0.01, 0.06]), 0.005, (0.005, np.array([[1e-4], [5e-3]])))
    assert tau.shape == (2, 2)
    assert np.all(tau[1] > tau[0]) and np.all(tau[:, 1] > tau[:, 0])
    assert np.all(tau > np.array([0.015, 0.065]))


@pytest.mark.codegen_independent
def test_the_residual_matches_a_simulated_linear_loop():
    """The Lyapunov solution against the loop it linearises, simulated: Poisson pool counts
    (R = 200 Hz) through a 5 ms pool filter into ln D (10 ms), D reaching the intensity through a
    5 ms lag; the count's deviation over 2 s windows (after 1 s) over 4,000 runs."""
    rng = np.random.default_rng(3)
    R, dt, t_loop, t_pool, lag, n = 200.0, 2e-4, 0.01, 0.005, 0.005, 4000
    y, i, u, cnt = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
    for k in range(int(3.0 / dt)):
        sp = rng.poisson(np.maximum(R * (1 + u), 0) * dt)
        if k * dt >= 1.0:
            cnt += sp
        u += dt / lag * (-y - u)
        i += (sp / (R * dt) - 1 - i) * dt / t_pool
        y += dt / t_loop * i
    measured = cnt.var() / R                                   # F = 1
    assert measured == pytest.approx(loop_residual_time(t_loop, t_pool, (lag,)), rel=0.1)


@pytest.mark.brian2
def test_a_single_keys_pinned_kappa_sits_at_its_floor():
    """One query, one key (the held-out escape sweep's instance 3: κ = 1 exactly): its decoded κ
    departs from 1 by the loop's residual, a few spikes of 400, which the floor without it put at
    22 times a floor of 1e-4. Pooled over four spike seeds it is now within 2 of its floor."""
    from ctmhsa.sims import simulate_mhsa
    from ctmhsa.sims.benchmarks.accuracy import pooled_ratios
    from ctmhsa.sims.benchmarks.robustness import draw_instance

    rng = np.random.default_rng(1)
    kw = [draw_instance(rng) for _ in range(4)][3]["kwargs"]
    assert kw["X"].shape[0] == 1 and kw["Y"] is None
    runs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for seed in (1, 2, 3, 4):
            m = simulate_mhsa(neuron="escape", duration=2.0, seed=seed, codegen="numpy", **kw).metrics()
            runs.append({st: dict(nrmse=x["nrmse"], noise_floor=x["noise_floor"]) for st, x in m.items()})
    ratios = pooled_ratios(runs)
    assert 0.2 < ratios["kappa"] < 2.0
