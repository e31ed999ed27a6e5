"""Shot-noise gains of the simulated dendrites (discrete time, as Brian2 integrates them).

The escape and lif cells that pass a dendrite through phi correct it for the dendrite's
spike-noise variance (:data:`ctmhsa.neurons.models.PHI_VARIANCE`). The circuit computes that
variance itself, every step, from the intensities of the presynaptic cells (each cell's count
variance once, :func:`ctmhsa.neurons.models.source_variance_code`, summed by the projection,
:func:`ctmhsa.neurons.models.synapse_model`), so nothing about the tokens is set
before the run; these gains are its constants (in the namespace as ``G_shot`` and ``G_cross``,
:func:`ctmhsa.neurons.params.with_units`). Derivation: :mod:`ctmhsa.mapping.dendrites`.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["shot_noise_gain", "soma_cross_gain", "regular_ratio", "regular_ratio_expression"]


def shot_noise_gain(params, dt: float = 1e-3) -> float:
    """Stationary variance of a dendrite per unit of presynaptic spike-count variance.

    Parameters
    ----------
    params : CellParams
        ``tau_syn`` (s, exponential synaptic current) and ``tau_d`` (s, leaky dendrite).
    dt : float
        Integration step (s).

    Returns
    -------
    float
        ``G`` (dimensionless): ``Var(V) = Σ_e Var(n_e) A_e² G`` with ``Var(n_e)`` the spike-count
        variance of synapse ``e`` per step and ``A_e = w_e k_syn`` (V) the current's jump per
        spike (see the module docstring).
    """
    a = math.exp(-dt / params.tau_syn)
    c = math.exp(-dt / params.tau_d)
    if abs(c - a) < 1e-9:   # tau_syn == tau_d: h_m = (1 - c) A m c^(m-1)
        return (1 - c) ** 2 * (1 + c * c) / (1 - c * c) ** 3
    return ((1 - c) / (c - a)) ** 2 * (c * c / (1 - c * c) - 2 * a * c / (1 - a * c) + a * a / (1 - a * a))


def soma_cross_gain(params, dt: float = 1e-3, steps: int | None = None) -> float:
    """Covariance of a soma that follows its basal dendrite (``dU/dt = (V_b - U)/tau_m``) with
    an apical dendrite, per unit of shared spike-count variance and per unit jump of each
    dendrite's current: ``Σ_m hU_m ha_m`` over the discrete impulse responses (both sampled
    after the step's state update, where the rate is evaluated).

    Parameters
    ----------
    params : CellParams
        ``tau_syn``, ``tau_d``, ``tau_m`` (s).
    dt : float
        Integration step (s).
    steps : int, optional
        Length of the impulse responses (default: 40 of the slowest time constant).

    Returns
    -------
    float
        Dimensionless gain (cf. :func:`shot_noise_gain`).
    """
    a, c, e = (math.exp(-dt / t) for t in (params.tau_syn, params.tau_d, params.tau_m))
    steps = steps or int(40 * max(params.tau_syn, params.tau_d, params.tau_m) / dt) + 10
    I, V, U, total = 1.0, 0.0, 0.0, 0.0
    for _ in range(steps):
        V, U, I = c * V + (1 - c) * I, e * U + (1 - e) * V, a * I
        total += U * V
    return total


# A cell with a perfect integrate-and-fire soma (``firing="regular"``/``"population"``, see
# ctmhsa.neurons.models.integrator_model) driven at a constant rate R fires a periodic train of
# random phase, not a Poisson one: the shot noise it makes in a dendrite is the variance of
# its harmonics k R alone (the power spectrum of a periodic impulse train is R^2 at every
# nonzero harmonic, against R at every frequency for Poisson). With the dendrite's response
# |h(f)|^2 = 1/((1 + (2 pi f tau_d)^2)(1 + (2 pi f tau_syn)^2)), the ratio to the Poisson
# variance is, with y_x = 1/(2 R tau_x) and the series sum of 1/(1 + c^2 k^2) = (pi/c) coth(pi/c),
#     F = 2 R (tau_d + tau_syn) (S - 1),  S = [coth(y_d)/y_d - coth(y_s)/y_s] / (1/y_d^2 - 1/y_s^2)
# (tau_d != tau_syn), and F = coth(y) + y csch(y)^2 - 2/y for tau_d = tau_syn = tau. F -> 1 as
# R -> 0 (isolated spikes are Poisson-like) and falls as 1/R^3 once R tau >> 1. Continuous time:
# against the discrete train on the 1 ms grid F is within 0.02 (absolute) at every R
# (tests/neurons/test_firing.py), where it matters (F > 0.05) within 5 %.

_RATE_FLOOR = 1e-3
"""Hz: rates are clipped from below here in the ratio (R = 0 would give 0/0; F(1e-3 Hz) = 1)."""


def _coth(y: str) -> str:
    return f"((1 + exp(-2*{y}))/(1 - exp(-2*{y})))"


def regular_ratio_expression(rate: str, params) -> str:
    """Brian2 expression of :func:`regular_ratio` for a rate expression ``rate`` (Hz), with the
    constants of ``params`` (``tau_d``, ``tau_syn``) written in as numbers (s)."""
    R = f"clip({rate}/Hz, {_RATE_FLOOR!r}, inf)"
    td, ts = float(params.tau_d), float(params.tau_syn)
    if abs(td - ts) <= 1e-6 * max(td, ts):
        y = f"(1/(2*{R}*{td!r}))"
        return f"({_coth(y)} + {y}*4*exp(-2*{y})/(1 - exp(-2*{y}))**2 - 2/{y})"
    yd, ys = f"(1/(2*{R}*{td!r}))", f"(1/(2*{R}*{ts!r}))"
    S = f"(({_coth(yd)}/{yd} - {_coth(ys)}/{ys})/(1/{yd}**2 - 1/{ys}**2))"
    return f"(2*{R}*{td + ts!r}*({S} - 1))"


def regular_ratio(rate, params):
    """Shot-noise variance of a periodic spike train of rate ``rate`` (Hz) in a dendrite
    (``tau_d``) behind an exponential synaptic current (``tau_syn``), as a fraction of a Poisson
    train's of the same rate (dimensionless, in (0, 1]; see the comment above).

    Parameters
    ----------
    rate : array_like
        Rate of the periodic train (Hz): a cell's rate (independent phases), or a population's
        (``P`` copies of evenly spread phases fire as one train of ``P`` times the rate).
    params : CellParams
        ``tau_d``, ``tau_syn`` (s).
    """
    R = np.maximum(np.asarray(rate, float), _RATE_FLOOR)
    td, ts = float(params.tau_d), float(params.tau_syn)

    def coth(y):
        return (1 + np.exp(-2 * y)) / (1 - np.exp(-2 * y))

    if abs(td - ts) <= 1e-6 * max(td, ts):
        y = 1 / (2 * R * td)
        return coth(y) + y * 4 * np.exp(-2 * y) / (1 - np.exp(-2 * y)) ** 2 - 2 / y
    yd, ys = 1 / (2 * R * td), 1 / (2 * R * ts)
    S = (coth(yd) / yd - coth(ys) / ys) / (1 / yd ** 2 - 1 / ys ** 2)
    return 2 * R * (td + ts) * (S - 1)
