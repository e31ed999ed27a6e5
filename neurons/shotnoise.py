"""Shot-noise gains of the simulated dendrites (discrete time, as Brian2 integrates them).

The escape and lif cells that pass a dendrite through phi correct it for the dendrite's
spike-noise variance (:data:`ctmhsa.neurons.models.PHI_VARIANCE`). The circuit computes that
variance itself, every step, from the intensities of the presynaptic cells (a summed variable of
the projection, :func:`ctmhsa.neurons.models.synapse_model`), so nothing about the tokens is set
before the run; these gains are its constants (in the namespace as ``G_shot`` and ``G_cross``,
:func:`ctmhsa.neurons.params.with_units`). Derivation: :mod:`ctmhsa.mapping.dendrites`.
"""

from __future__ import annotations

import math


__all__ = ["shot_noise_gain", "soma_cross_gain"]


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
