"""The covariance synapses' structure and coefficients (numpy only, no Brian2).

The linear circuit's outer-product cells remove the covariance of their soma (value) and apical
dendrite (key), which integrate the same relays (:data:`ctmhsa.neurons.models.PHI_COVARIANCE`).
The instantiation gives them one synapse per presynaptic cell contacting both dendrites
(:func:`covariance_pairs`), with coefficient ``w_b w_a`` from the weights
(:func:`covariance_coefficients`); :mod:`ctmhsa.mapping.dendrites` predicts the same sum.
"""

from __future__ import annotations

import numpy as np

from .graph import Circuit
from .values import CircuitValues

__all__ = ["shared_dendrite_inputs", "covariance_pairs", "covariance_coefficients"]


def shared_dendrite_inputs(circuit: Circuit, name: str) -> tuple[str, dict]:
    """The one source population contacting both the basal and apical dendrite of ``name``,
    and ``{compartment: [projections from it]}``."""
    projs = {c: [p for p, pr in circuit.projections.items() if pr.target == name and pr.compartment == c]
             for c in ("basal", "apical")}
    sources = ({circuit.projections[p].source for p in projs["basal"]}
               & {circuit.projections[p].source for p in projs["apical"]})
    if len(sources) > 1:
        raise ValueError(f"{name}: the covariance correction needs one population contacting both its basal "
                         f"and apical dendrites, found {sorted(sources)}")
    if not sources:   # no input shared by the dendrites: no covariance (the parameter stays 0)
        return None, {}
    src = sources.pop()
    return src, {c: [p for p in ps if circuit.projections[p].source == src] for c, ps in projs.items()}


def _weights_per_pair(circuit: Circuit, values: CircuitValues, projs: list, n_pre: int) -> tuple:
    """``(keys, w)``: the summed weight of every (post, pre) pair of ``projs``, keys ``post * n_pre
    + pre`` sorted."""
    keys, ws = [], []
    for pname in projs:
        proj = circuit.projections[pname]
        i, j = circuit.pairs(proj)
        keys.append(j.astype(np.int64) * n_pre + i)
        ws.append(circuit.synapse_weights(proj, values.weights[pname], i, j))
    key, inv = np.unique(np.concatenate(keys), return_inverse=True)
    return key, np.bincount(inv.ravel(), weights=np.concatenate(ws))


def covariance_coefficients(circuit: Circuit, values: CircuitValues, name: str, i=None, j=None) -> np.ndarray:
    """``w_b w_a (k_syn)²``-free coefficient of every covariance synapse of ``name``: the product of
    the summed basal and apical weights of each presynaptic cell contacting both (V² s²), in the
    order of :func:`covariance_pairs` (or of the given pairs ``i``, ``j``)."""
    src, projs = shared_dendrite_inputs(circuit, name)
    n_pre = circuit.populations[src].N
    (kb, wb), (ka, wa) = (_weights_per_pair(circuit, values, projs[c], n_pre) for c in ("basal", "apical"))
    common, ib, ia = np.intersect1d(kb, ka, assume_unique=True, return_indices=True)
    coef = wb[ib] * wa[ia]
    if i is None:
        return coef
    want = np.asarray(j, np.int64) * n_pre + np.asarray(i, np.int64)
    return coef[np.searchsorted(common, want)]


def covariance_pairs(circuit: Circuit, values: CircuitValues, name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(pre, post)`` of the cells of ``name``'s shared source contacting both its dendrites."""
    src, projs = shared_dendrite_inputs(circuit, name)
    n_pre = circuit.populations[src].N
    kb, ka = (_weights_per_pair(circuit, values, projs[c], n_pre)[0] for c in ("basal", "apical"))
    common = np.intersect1d(kb, ka, assume_unique=True)
    return common % n_pre, common // n_pre
