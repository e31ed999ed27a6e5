"""Drive and baselines of the ``lif`` somata: the affine spike generator in the circuit.

A lif soma (:mod:`ctmhsa.neurons.conductance`) fires ``r_base + rho P`` on its calibrated affine branch
when driven by ``I_rh + I_gain rho P + I_quad (rho P)²`` (:func:`ctmhsa.neurons.conductance.soma_calibration`). The
baseline ``r_base`` must not reach the attention:

- a projection from lif cells adds ``r_base Σ_i w_ij`` to the mean input of every target cell
  ``j``. ON/OFF pairs cancel it by themselves (their weights have opposite signs). Everywhere else
  it is removed through the target compartment's bias: ``b_b``/``b``, ``b_a`` (the L5 IT
  attention dendrite has one at this level for this reason), or the interneurons' set point
  ``I_set``, raised so that they hold the *excess* pooled rate at the intended set point, and
  the division stays exact;
- the decoders read rates above the baseline (:func:`remove_baselines`). The spike counts and
  ``rate`` keep every spike, so the noise estimates see the baseline's counting noise.

At the other levels both functions do nothing.
"""

from __future__ import annotations

import numpy as np

from ctmhsa.circuits.fold import fold_classes
from ctmhsa.neurons.conductance import lif_drive
from ctmhsa.neurons.models import get_model

__all__ = ["add_lif_drive", "remove_baselines", "BIAS_OF", "LIF_BIASES"]

BIAS_OF = {"basal": ("b_b", "b"), "apical": ("b_a",), "soma": ("b", "I_set", "b_w")}
"""Parameters through which a compartment's extra mean input is cancelled (the first the target
model has; ``I_set`` is the interneurons' set point, raised instead of lowered). Subtracting the
baseline from the pooled input instead (set point unchanged) left the loop's relative error with
the baselines' full spike noise: it hit its bounds and the pooled rate settled 15-40 % low
(measured), against 2-8 % with the raised set point."""
LIF_BIASES = ("b_a", "b_w")
"""Biases only the lif cells have (the L5 IT attention dendrite's and read-out's ``b_a``, the
memory integrators' write bias ``b_w``): 0 where no baseline arrives."""


def add_lif_drive(circuit, values, level: str, dt: float) -> None:
    """Write the lif somata's drive (``I_rh``, ``I_gain``, ``I_quad``, ``r_base``) into ``values.params`` and
    cancel the baselines' input to every target (in place). No-op at other levels."""
    somata = {name for name, pop in circuit.populations.items()
              if get_model(level, pop.cell_type).lif_soma}
    if not somata:
        return
    types = {name: circuit.population(name).cell_type for name in somata}
    drives = {ct: lif_drive(dt, ct) for ct in set(types.values())}             # one per soma type
    cal = {name: drives[ct] for name, ct in types.items()}
    for name, pop in circuit.populations.items():
        params = get_model(level, pop.cell_type).parameters
        p = values.params.setdefault(name, {})
        if name in somata:
            p.update(cal[name])
        for bias in LIF_BIASES:   # biases only this level has: 0 until a baseline arrives
            if bias in params:
                p.setdefault(bias, 0.0)
    for pname, proj in circuit.projections.items():
        if proj.source not in somata:
            continue
        # cells with identical synapses on the compartment get identical baseline input: sum it
        # for one cell per class (ctmhsa.circuits.fold), on the representatives' synapses only
        cls, reps = fold_classes(circuit, proj.target, (proj.compartment,), [pname])
        i, j = circuit.pairs(proj, post_cells=reps)
        w = circuit.synapse_weights(proj, values.weights[pname], i, j)
        target = circuit.population(proj.target)
        r_base = cal[proj.source]["r_base"]
        extra = r_base * np.bincount(np.searchsorted(reps, j), weights=w, minlength=len(reps))[cls]
        # ON/OFF sources: the baselines cancel (to rounding)
        if np.allclose(extra, 0.0, atol=1e-12 * r_base * (np.abs(w).sum() + 1.0)):
            continue
        model = get_model(level, target.cell_type)
        bias = next((b for b in BIAS_OF.get(proj.compartment, ()) if b in model.parameters), None)
        if bias is None:
            raise ValueError(f"lif: projection {pname!r} carries the baseline of {proj.source} into "
                             f"{proj.target}.{proj.compartment}, which has no bias to cancel it")
        tp = values.params.setdefault(proj.target, {})
        sign = 1.0 if bias == "I_set" else -1.0
        tp[bias] = np.broadcast_to(np.asarray(tp.get(bias, 0.0), float), (target.N,)) + sign * extra


def remove_baselines(circuit, values, obs: dict) -> dict:
    """Rates above the baseline: ``r`` and ``expected_r`` of every lif population minus its
    ``r_base`` (in place; ``rate`` and ``count`` keep every spike). Returns ``obs``."""
    for name, o in obs.items():
        base = values.params.get(name, {}).get("r_base")
        if base is None:
            continue
        for k in ("r", "expected_r"):
            if k in o:
                o[k] = np.asarray(o[k], float) - base
    return obs
