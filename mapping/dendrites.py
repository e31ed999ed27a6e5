"""Spike-noise variance of the dendrites that pass phi, for the escape cells' phi-bias correction.

At the escape level a dendrite integrates spikes, so its potential ``V`` fluctuates around the
mean the encoder set (``u`` times the encoded q or k) and a cell passing it through a curved
phi sees ``E[phi(V/u)] != phi(E[V]/u)``: the *phi-bias* (README, "The φ-bias"). The escape cells
that pass a dendrite through phi (:data:`ctmhsa.neurons.models.PHI_VARIANCE`) correct it to second order
with the variance of ``V/u``. The circuit computes that variance itself, every step, from its
presynaptic cells' intensities (summed variables, :func:`ctmhsa.neurons.models.synapse_model`;
covariance synapses, :func:`ctmhsa.circuits.covariance.covariance_pairs`); this module derives it
and predicts it from the weights and the relays' rates (:func:`phi_variances`, what the tests
compare the circuit with). Nothing of the reference enters.

Derivation (discrete time, as simulated; ``dt`` the step). A presynaptic escape cell of rate
``r`` spikes in a step with probability ``p = r dt`` (clipped at 1), a count of variance
``p (1 - p)`` per step, independently of every other cell and step (a relay's intensity is
constant). Each spike adds ``A = w k_syn`` (``k_syn = (1 - exp(-dt/tau_syn))/dt``, see
:func:`ctmhsa.neurons.params.with_units`) to the exponential current ``I``, which decays by
``a = exp(-dt/tau_syn)`` per step; the dendrite is advanced by exponential Euler with the
current of the step's start, ``V <- c V + (1 - c) (b + I)``, ``c = exp(-dt/tau_d)``. A spike
in step 0 therefore moves ``V`` by ``h_m = (1 - c) A (c^m - a^m)/(c - a)`` ``m`` steps later
(``m >= 1``), and the stationary variance is (Campbell's theorem for a sum of independent shot
noises)

    Var(V) = Σ_e p_e (1 - p_e) w_e² k_syn² G,
    G = Σ_{m>=1} ((1 - c)(c^m - a^m)/(c - a))²
      = ((1 - c)/(c - a))² [c²/(1 - c²) - 2ac/(1 - ac) + a²/(1 - a²)].

For ``dt -> 0`` this is Campbell's continuous form ``Σ_e r_e w_e² k_syn² tau_syn²/(2 (tau_syn +
tau_d))`` (at the default ``dt = 1 ms``, ``tau_syn = 5 ms``, ``tau_d = 10 ms`` the discrete ``G``
is 22 % above it, and ``p (1 - p)`` is below ``r dt`` by the Fano factor ``1 - r dt``). The
formula is checked against a simulated dendrite in ``tests/test_dendritic_bias.py``.

The linear circuit's outer-product cells also get the covariance of their soma (value, a filter
of the basal dendrite) and apical dendrite (key), which integrate the same relays: the same sum
with ``w_b w_a`` in place of ``w²`` and the cross gain :func:`soma_cross_gain` in place of ``G``
(parameter :data:`ctmhsa.neurons.models.PHI_COVARIANCE`). Derivation and measurements: docs/phi_bias.md.
"""

from __future__ import annotations

import numpy as np

from ctmhsa.circuits.fold import fold_classes
from ctmhsa.circuits.graph import copies
from ctmhsa.circuits.covariance import covariance_coefficients, covariance_pairs, shared_dendrite_inputs
from ctmhsa.neurons.firing import get_firing
from ctmhsa.neurons.models import PHI_COVARIANCE, PHI_VARIANCE, get_model
from ctmhsa.neurons.params import DEFAULT_PARAMS, CellParams, k_syn
from ctmhsa.neurons.shotnoise import regular_ratio, shot_noise_gain, soma_cross_gain

__all__ = ["shot_noise_gain", "soma_cross_gain", "dendrite_variance", "phi_variances"]


def dendrite_variance(rates, weights, params: CellParams = DEFAULT_PARAMS, dt: float = 1e-3) -> float:
    """Stationary variance of one dendrite driven by independent escape (Bernoulli) spike trains.

    Parameters
    ----------
    rates : array_like
        Presynaptic intensities (Hz), constant in time; one per synapse.
    weights : array_like
        Synaptic weights ``w`` (V s; the mean input of a synapse is ``w`` times its rate).
    params : CellParams
        ``tau_syn``, ``tau_d`` (s).
    dt : float
        Integration step (s).

    Returns
    -------
    float
        ``Var(V)`` (V²).
    """
    p = np.clip(np.asarray(rates, float) * dt, 0.0, 1.0)
    return float(np.sum(_count_variance_terms(p, weights, k_syn(params, dt))) * shot_noise_gain(params, dt))


def _count_variance_terms(p, w, ksyn):
    """Per synapse: spike-count variance per step ``p (1 - p)`` times the squared current jump
    ``(w k_syn)²`` (V²)."""
    return p * (1 - p) * (np.asarray(w, float) * ksyn) ** 2


def _source_rates(circuit, values, source: str) -> np.ndarray:
    """Per-cell intensities (Hz) of a presynaptic population whose rate the encoder set."""
    pop = circuit.populations[source]
    given = values.params.get(source, {})
    if pop.cell_type != "relay" or "r_in" not in given:
        raise ValueError(f"phi_variances: {source!r} ({pop.cell_type}) drives a dendrite that passes "
                         f"phi, but only relays' rates are known before the run")
    return np.broadcast_to(np.asarray(given["r_in"], float), (pop.N,))


def phi_variances(circuit, values, params: CellParams = DEFAULT_PARAMS, dt: float = 1e-3,
                  level: str = "escape") -> dict:
    """Variance of ``V/u`` of every dendrite that passes phi at ``level``, per cell.

    Parameters
    ----------
    circuit : Circuit
        The description.
    values : CircuitValues
        What the encoder set (:func:`ctmhsa.mapping.encode.encode`): the weights and the relays'
        rates ``r_in`` are read.
    params : CellParams
        ``u`` (V per unit), ``tau_syn``, ``tau_d`` (s).
    dt : float
        Integration step (s).
    level : str
        Fidelity level; only its models that correct phi (``CellModel.corrected``) get values.

    Returns
    -------
    dict
        Population -> {variance parameter (:data:`ctmhsa.neurons.models.PHI_VARIANCE`): per-cell
        variance of ``V/u`` (dimensionless, units of u²)}. Empty where no model corrects phi.

    Raises
    ------
    ValueError
        A corrected dendrite has an input whose rate is unknown before the run (not a relay).
    """
    ks = k_syn(params, dt)
    G = shot_noise_gain(params, dt)
    incoming: dict = {}
    for pname, proj in circuit.projections.items():
        incoming.setdefault((proj.target, proj.compartment), []).append(pname)
    out: dict = {}
    for name, pop in circuit.populations.items():
        model = get_model(level, pop.cell_type)
        for comp in getattr(model, "corrected", ()):
            projs = incoming.get((name, comp), [])
            # cells with identical synapses on the compartment have identical variance: compute it
            # for one cell per class (ctmhsa.circuits.fold), on the representatives' synapses only
            cls, reps = fold_classes(circuit, name, (comp,), projs)
            var = np.zeros(len(reps))
            for pname in projs:
                proj = circuit.projections[pname]
                i, j = circuit.pairs(proj, post_cells=reps)
                rate = _source_rates(circuit, values, proj.source)[i]
                p = np.clip(rate * dt, 0.0, 1.0)
                w = circuit.synapse_weights(proj, values.weights[pname], i, j)
                terms = _count_variance_terms(p, w, ks) * _periodic(circuit, level, proj.source, rate, params)
                var += np.bincount(np.searchsorted(reps, j), weights=terms, minlength=len(reps))
            out.setdefault(name, {})[PHI_VARIANCE[comp]] = var[cls] * G / params.u ** 2
        if getattr(model, "covariance", False):
            out.setdefault(name, {})[PHI_COVARIANCE] = _covariance(circuit, values, name, incoming, params, dt)
    return out


def _periodic(circuit, level: str, source: str, rate, params: CellParams):
    """1 for a Poisson source; for a perfect integrator (``meta.firing``) the fraction of the
    Poisson variance its periodic train makes (:func:`ctmhsa.neurons.shotnoise.regular_ratio`):
    at its own rate (``"regular"``), or at its dimension's summed rate (``"population"``)."""
    pop = circuit.populations[source]
    firing = get_firing(get_model(level, pop.cell_type, circuit.meta.firing).firing)
    if firing.poisson:
        return 1.0
    n = copies(pop) if firing.in_turn else 1
    return regular_ratio(n * np.asarray(rate, float), params)


def _covariance(circuit, values, name, incoming, params, dt) -> np.ndarray:
    """Cov(U/u, V_a/u) of every cell of ``name`` (soma following the basal dendrite): the
    relays that contact both compartments contribute ``p (1 - p) k_syn² w_b w_a`` each, over
    the pairs and coefficients the circuit's covariance synapses hold
    (:func:`ctmhsa.circuits.covariance.covariance_pairs`)."""
    src = shared_dendrite_inputs(circuit, name)[0]
    if src is None:
        return np.zeros(circuit.populations[name].N)
    i, j = covariance_pairs(circuit, values, name)
    p = np.clip(_source_rates(circuit, values, src)[i] * dt, 0.0, 1.0)
    terms = p * (1 - p) * k_syn(params, dt) ** 2 * covariance_coefficients(circuit, values, name, i, j)
    cov = np.bincount(j, weights=terms, minlength=circuit.populations[name].N)
    return cov * soma_cross_gain(params, dt) / params.u ** 2
