"""Expected spike-count noise of every decoded stage (the "noise floor").

From the measured rates, the measured Fano factors and the window T only — never from the
reference — each decoded stage gets the variance it would have if spike-count noise were its
only error. First-order propagation through the decoding relations of :mod:`mapping.decode`,
treating different cells as independent:

- q, k, v (window-mean dendritic potentials): ``Σ_e (W_ce / rho_in)² F_in r_e / T``;
- s (L2/3 counts): own count noise ``F r / (T R²)`` plus the q and k noise through phi
  (``s² [(phi'/phi)(q)² var q + (phi'/phi)(k)² var k]``);
- κ = Σ_c s; y: own L5 IT count noise plus ``v² var κ + κ² var v`` (``(v_0 + v)² var κ``
  in the offset code, whose L5 IT rate carries the offset);
- Z (read from the L2/3 somata): the query noise through phi;
- ṽ: own L5 PT count noise plus the sum over microcolumns of the L5 IT noise that feeds it,
  with the attention noise weighted by ``(v_j - ṽ_i)²`` (normalisation makes it sum to ~0);
- x̃: own nucleus-2 noise plus ``Σ_hc WO² var ṽ``.

A stage whose error is near its floor is limited by counting noise; an error well above it is
bias (nonlinear distortion, saturation) that more simulated time will not remove.
"""

from __future__ import annotations

import numpy as np

from mapping.decode import per_dimension
from mapping.encode import copies
from mapping.reference import FEATURE_MAPS

__all__ = ["stage_noise_variance", "spike_generation_fano"]


def spike_generation_fano(circuit, level: str, measured: dict) -> dict:
    """Fano factor of each population's own spike generation, for :func:`stage_noise_variance`.

    Each floor adds a cell's own spike-generation noise to the propagated noise of its inputs.
    An escape cell is Poisson given its intensity (Fano 1); its measured Fano also contains the
    input fluctuations, which the propagation already counts (with ON/OFF pairs, which fire
    mostly on fluctuations, using it double-counted them: floors 3x the errors). LIF spike
    generation has no such split: its measured Fano is used (an upper bound). Relays and
    interneurons are escape cells at every spiking level.
    """
    return {p: (measured[p] if level == "lif" and pop.cell_type not in ("relay", "interneuron") else 1.0)
            for p, pop in circuit.populations.items()}


def _rate_var(pop, obs, fano, T):
    """Variance (Hz²) of each dimension's rate estimate (mean over its P copies) on the grid;
    for ON/OFF pairs, of the difference ON - OFF (independent counts: variances add)."""
    P = copies(pop)
    v = per_dimension(pop, fano * np.asarray(obs["rate"], float) / T, fill=0.0) / P
    return v.sum(axis=-1) if "sign" in pop.axes else v


def stage_noise_variance(circuit, encoding, obs: dict, fano: dict, T: float, stages: dict,
                         WQ, WK, WV, WO, phi: str, WS=None) -> dict:
    """Per-entry variance of each decoded stage from spike-count noise alone.

    Parameters
    ----------
    obs : dict
        Window observables per population (``rate`` in Hz).
    fano : dict
        Measured Fano factor per population (1 for Poisson counts).
    T : float
        Measurement window (s).
    stages : dict
        Decoded stages (used for the propagation derivatives).
    """
    pops, c = circuit.populations, encoding.consts
    g = c["gains"]
    f, df = FEATURE_MAPS[phi]
    out = {}
    rin = _rate_var(pops["nucleus1"], obs["nucleus1"], fano["nucleus1"], T)            # (n, de)
    rkv = (_rate_var(pops["nucleus1_kv"], obs["nucleus1_kv"], fano["nucleus1_kv"], T)
           if "nucleus1_kv" in pops else rin)
    rho_in = g["rho_in"]
    out["q"] = np.einsum("hce,ne->hnc", (WQ / rho_in) ** 2, rin)
    out["k"] = np.einsum("hce,me->hmc", (WK / rho_in) ** 2, rkv)
    out["v"] = np.einsum("hce,me->hmc", (WV / rho_in) ** 2, rkv)

    l23, it = pops["l23"], pops["l5it"]
    R = c["R_set"][:, :, None, None]
    q, k, s = stages["q"], stages["k"], stages["s"]
    with np.errstate(divide="ignore", invalid="ignore"):
        lq = np.nan_to_num(df(q) / f(q))[:, :, None, :]
        lk = np.nan_to_num(df(k) / f(k))[:, None, :, :]
    var_s = _rate_var(l23, obs["l23"], fano["l23"], T) / R ** 2
    var_s = var_s + s ** 2 * (lq ** 2 * out["q"][:, :, None, :] + lk ** 2 * out["k"][:, None, :, :])
    out["s"] = var_s
    out["kappa"] = var_s.sum(axis=-1)
    a = c["a"][:, :, None, None]
    var_it = _rate_var(it, obs["l5it"], fano["l5it"], T) / (g["rho_it"] * a) ** 2
    v = stages["v"][:, None, :, :]
    if "sign" not in it.axes:   # offset code: the IT rate carries (v0 + v) kappa
        v = v + c["v0"][:, None, None, None]
    kap = stages["kappa"][..., None]
    var_kv = kap ** 2 * out["v"][:, None, :, :]
    out["y"] = var_it + v ** 2 * out["kappa"][..., None] + var_kv
    if "interneuron" in pops and "Z" in stages:
        # Z is read from the L2/3 somata (see mapping.decode): the query noise enters every
        # cell of macrocolumn i alike through phi(q_i); averaged over the dk features
        out["Z"] = stages["Z"] ** 2 * np.mean(lq[:, :, 0, :] ** 2 * out["q"], axis=-1)
    if "l5pt" in pops:
        own = _rate_var(pops["l5pt"], obs["l5pt"], fano["l5pt"], T) / g["rho_pt"] ** 2
        # The interneurons hold each macrocolumn's pooled L2/3 count at its set point (integral
        # feedback on spikes), so the attention errors sum to ~0 over j: δκ_j = ε_j - κ_j Σ ε,
        # and Σ_j δκ_j v_j = Σ_j ε_j (v_j - ṽ_i) — only deviations from ṽ_i carry κ noise.
        dv2 = (stages["v"][:, None, :, :] - stages["v_tilde"][:, :, None, :]) ** 2 \
            if "v_tilde" in stages else v ** 2
        if "sign" not in it.axes or not c["normalize"]:
            dv2 = v ** 2    # offset code (v0 not renormalised) or no interneurons at all
        out["v_tilde"] = own + np.nansum(var_it + dv2 * out["kappa"][..., None] + var_kv, axis=2)
        if WS is not None and "core_skip" in circuit.projections:   # the skip path's relay noise
            out["v_tilde"] = out["v_tilde"] + np.einsum("hce,ne->hnc", (np.asarray(WS) / rho_in) ** 2, rin)
    if "nucleus2" in pops:
        own = _rate_var(pops["nucleus2"], obs["nucleus2"], fano["nucleus2"], T) / g["rho_out"] ** 2
        out["x_tilde"] = own + np.einsum("hec,hnc->ne", WO ** 2, out["v_tilde"])
    return out
