"""Neural observables -> every stage of SPEC §1 (inverse of :mod:`ctmhsa.mapping.encode`).

``obs`` holds, per population, per-cell values of the model's observables (final values at the
rate level, window averages at spiking levels). Copies of a quantity carried by several cells
(q_i in every microcolumn of macrocolumn i, k_j and v_j in microcolumn j of every macrocolumn)
are averaged over their copies.
"""

from __future__ import annotations

import numpy as np

from ctmhsa.circuits.builders import CIRCUITS  # noqa: F401 - registers the area parts hooked below
from ctmhsa.circuits.graph import Circuit
from ctmhsa.circuits.parts import area_hook, register_hook

from ctmhsa.maths.reference import FEATURE_MAPS

__all__ = ["decode", "range_report", "per_dimension", "count_noise_floor", "nrmse_scale"]


def per_dimension(pop, values, fill=np.nan) -> np.ndarray:
    """Per-cell values on the population's grid, averaged over population-coding copies."""
    d = pop.to_dense(np.asarray(values, float), fill=fill)
    if "p" in pop.axes:
        with np.errstate(invalid="ignore"):
            d = np.nanmean(d, axis=-1) if np.isnan(fill) else d.mean(axis=-1)
    return d


def signed_rate(pop, values) -> np.ndarray:
    """Per-dimension rate; for ON/OFF pairs (axis ``sign``) the difference ON - OFF."""
    d = per_dimension(pop, values)
    if "sign" in pop.axes:
        d = d[..., 0] - d[..., 1]
    return d


def _copies_mean(dense, axis):
    with np.errstate(invalid="ignore"):
        return np.nanmean(dense, axis=axis) if np.any(np.isfinite(dense)) else dense.mean(axis=axis)


def decode(circuit: Circuit, encoding, obs: dict) -> dict[str, np.ndarray]:
    """Decode every stage from observables.

    Returns
    -------
    dict
        ``q (H, n, dk)``, ``k (H, m, dk)``, ``v (H, m, dv)``, ``Z (H, n)`` and where the
        populations exist ``v_tilde (H, n, dv)`` and ``x_tilde (n, de)``; Algorithm 1's circuit
        adds ``s (H, n, m, dk)``, ``kappa (H, n, m)``, ``y (H, n, m, dv)``, the linear circuit
        the memory ``S (H, dk, dv)`` and ``z (H, dk)``. Absent cells (causal mask) decode to 0
        in ``s``, ``kappa``, ``y``, like the reference.
    """
    pops, codes = circuit.populations, encoding.codes
    with np.errstate(invalid="ignore", divide="ignore"):
        st = area_hook(circuit, "decode")(circuit, encoding, obs)   # the area's own stages
        # the pathway's read-out, by role (whatever the area names its cells): L5 PT, nucleus 2
        for stage, role in (("v_tilde", "head_output"), ("x_tilde", "output_relay")):
            for name in circuit.by_role(role):
                st[stage] = codes[stage].decode(signed_rate(pops[name], obs[name]["r"]))
    return st


def _pooled_ratio(num, den, axes):
    """Σ num / Σ den over ``axes``, over the cells present (NaN in ``num``: absent)."""
    with np.errstate(invalid="ignore"):
        return np.nansum(num, axis=axes) / np.nansum(np.where(np.isnan(num), np.nan, den), axis=axes)


def _rate_division(c, obs_pop, pop, axes, apical=None):
    """The division the interneurons produce, measured on the rates it divides: each L2/3 cell
    fires rho phi(V_b/u) phi(V_a/u) / (1 + g), so D = Σ rho phi(V_b/u) phi(V_a/u) / Σ r = 1 + g,
    pooled over the macrocolumn's cells (``axes``), with the window means of the potentials and
    of the rate intensity (``expected_r`` at the spiking levels: free of count noise).
    ``apical``: the apical dendrite's gain as a function of V_a/u (default phi, L2/3's; the
    linear circuit's read-out cells take the memory entry linear-rectified).

    Why the rates and not the shunted somata they divide (Σ u phi(V_b/u) / Σ U, the estimator
    until version 0.15): the loop answers the pooled apical noise of the keys' relays, so the
    shunt rises when the apical gains do, and the window mean of U phi_a falls below that of U
    times that of phi_a. The somata's mean then reads the division low (escape, default problem,
    20 s, 12 spike seeds: Z -0.72 % ± 0.15 %) while the rates, hence the attention, carry the
    division that normalises them (+0.27 % ± 0.14 %). In the linear circuit, whose read-out-z
    cells' apical gain is the memory z, the somata read it 5-9 % low and the rates within 2 %
    (escape, n = d = 6, H = 2, 5 s, held-out seeds 41-46)."""
    phi = FEATURE_MAPS[c["phi"]][0]
    apical = phi if apical is None else apical
    u = c["u"]
    unshunted = per_dimension(pop, phi(np.asarray(obs_pop["V_b"], float) / u) * apical(np.asarray(obs_pop["V_a"], float) / u))
    rho = np.asarray(c["gains"]["rho_l23"], float)          # (H, 1): per head
    rho = rho.reshape(rho.shape[0], *([1] * (unshunted.ndim - 1)))
    rate = np.asarray(obs_pop.get("expected_r", obs_pop["r"]), float)
    return _pooled_ratio(unshunted * rho, per_dimension(pop, rate), axes)


def _rectified(x):
    return np.clip(x, 0.0, None)


def key_value_potentials(circuit, obs) -> tuple[np.ndarray, np.ndarray]:
    """The dendritic potentials that carry k and v in every macrocolumn's own copy: L2/3 apical
    ``(H, n, m, dk)`` and L5 IT basal ``(H, n, m, dv)`` (an ON/OFF pair combined: ON sees
    +u v, OFF -u v), NaN where a cell is absent."""
    l23, it = circuit.populations["l23"], circuit.populations["l5it"]
    va = per_dimension(l23, obs["l23"]["V_a"])
    vb = per_dimension(it, obs["l5it"]["V_b"])
    if "sign" in it.axes:
        vb = 0.5 * (vb[..., 0] - vb[..., 1])
    return va, vb


@register_hook("quadratic", "decode")
def _decode_microcolumns(circuit, encoding, obs):
    """q, k, v, s, κ, y and Z of Algorithm 1's circuit (L2/3, L5 IT, interneurons)."""
    pops, codes, c = circuit.populations, encoding.codes, encoding.consts
    l23, it = pops["l23"], pops["l5it"]
    st = {}
    st["q"] = codes["q"].decode(_copies_mean(per_dimension(l23, obs["l23"]["V_b"]), axis=2))
    va, vb = key_value_potentials(circuit, obs)
    st["k"] = codes["k"].decode(_copies_mean(va, axis=1))
    st["v"] = codes["v"].decode(_copies_mean(vb, axis=1))
    R = c["R_set"][l23.axis("head"), l23.axis("i")]
    st["s"] = per_dimension(l23, obs["l23"]["r"] / R, fill=0.0)
    st["kappa"] = st["s"].sum(axis=-1)
    a = c["a"][:, :, None, None]
    y = signed_rate(it, obs["l5it"]["r"]) / (c["gains"]["rho_it"] * a)
    if "sign" not in it.axes:   # offset code: the IT rate carries (v0 + v) kappa
        y = y - c["v0"][:, None, None, None] * st["kappa"][..., None]
    st["y"] = np.nan_to_num(y, nan=0.0)     # absent microcolumns (causal mask) decode to 0
    if "interneuron" in pops:    # Z = R_set D / rho_l23
        st["Z"] = c["R_set"] * _rate_division(c, obs["l23"], l23, (2, 3)) / c["gains"]["rho_l23"]
    return st


@register_hook("linear", "decode")
def _decode_key_value_memory(circuit, encoding, obs):
    """q, k, v, the memory S (H, dk, dv) and z (H, dk), and Z of the linear circuit."""
    pops, codes, c = circuit.populations, encoding.codes, encoding.consts
    m, g = circuit.meta.m, c["gains"]
    outer, read = pops["outer"], pops["readout"]
    st = {}
    vb = per_dimension(outer, obs["outer"]["V_b"])        # (H, m, dk, dv[, sign])
    va = per_dimension(outer, obs["outer"]["V_a"])
    qb = per_dimension(read, obs["readout"]["V_b"])       # (H, n, dk, dv[, sign])
    if "sign" in outer.axes:
        vb = 0.5 * (vb[..., 0] - vb[..., 1])
        va, qb = va.mean(axis=-1), qb.mean(axis=-1)
    st["q"] = codes["q"].decode(_copies_mean(qb, axis=3))
    st["k"] = codes["k"].decode(_copies_mean(va, axis=3))
    st["v"] = codes["v"].decode(_copies_mean(vb, axis=2))
    # memory rates rho_memory S/m (ON - OFF; offset code: S + v0 z)
    S = signed_rate(pops["memory"], obs["memory"]["r"]) * m / g["rho_memory"]
    if "interneuron" in pops:
        st["z"] = per_dimension(pops["memory_z"], obs["memory_z"]["r"]) * m / g["rho_memory"]
        # 1 + g_i = rho_l23 Z_i / (m R_set), measured on the read-out-z rates it divides (with
        # apical inhibition, times the apical stage's 1 + g_ap: the rates carry both divisions)
        D = _rate_division(c, obs["readout_z"], pops["readout_z"], 2, apical=_rectified)
        st["Z"] = c["R_set"] * m * D / g["rho_l23"]
        if "sign" not in outer.axes:
            S = S - c["v0"][:, None, None] * st["z"][..., None]
    st["S"] = S
    return st


def range_report(circuit: Circuit, obs: dict, max_rate: float | None = None) -> dict[str, dict]:
    """Cells driven outside their working range, per population (nothing is clipped silently).

    ``rectified``: cells whose somatic drive ``U`` is below rest, so their rate is clipped at 0
    (not counted for ON/OFF pairs, whose rate difference stays linear through rectification).
    ``silent_interneurons``: macrocolumns whose interneurons fell silent — the set point is
    unreachable and the division by Z did not happen there.
    ``saturated`` (when ``max_rate`` is given, Hz): cells whose mean intensity exceeds it — an
    escape cell spikes at most once per step, so ``max_rate = 1/dt`` there; lower the gains of
    :class:`ctmhsa.maths.codes.CodeGains` or ``dt``.
    """
    out = {}
    for name, pop in circuit.populations.items():
        o = obs.get(name, {})
        rep = {}
        if "U" in o and "sign" not in pop.axes:   # an ON/OFF pair is rectified by design
            rep["rectified"] = int(np.count_nonzero(np.asarray(o["U"]) < 0))
        if pop.cell_type == "interneuron":
            rep["silent_interneurons"] = int(np.count_nonzero(np.asarray(o["r"]) <= 0))
        if "r" in o:
            rep["max_rate_hz"] = float(np.max(o["r"])) if np.size(o["r"]) else 0.0
            if max_rate is not None:
                inten = np.asarray(o.get("expected_r", o["r"]), float)
                rep["saturated"] = int(np.count_nonzero(inten > max_rate))
        out[name] = rep
    return out


def nrmse_scale(reference) -> float:
    """The scale an NRMSE divides by: the spread (standard deviation) of the exact values, their
    RMS where they do not vary, 1 where they are all 0."""
    ref = np.asarray(reference, float)
    return float(np.std(ref)) or float(np.sqrt(np.mean(ref ** 2))) or 1.0


def count_noise_floor(variance, decoded, reference) -> float:
    """The NRMSE that spike-count noise alone would give a decoded stage: the RMS of its expected
    noise (``variance`` per entry) over the spread of its exact values (``reference``; its RMS
    where it does not vary), over the entries decoded finite (``decoded``; every entry when
    ``None``). NaN where no variance informs it (none given, or 0 everywhere). What
    ``SimulationResult.metrics`` reports as ``noise_floor`` and the noise-floor warning reads."""
    ref = np.asarray(reference, float).ravel()
    ok = np.ones(ref.size, bool) if decoded is None else np.isfinite(np.asarray(decoded, float).ravel())
    v = None if variance is None else np.asarray(variance, float).ravel()[ok]
    if v is None or not np.any(v > 0):
        return float("nan")
    return float(np.sqrt(np.nanmean(v)) / nrmse_scale(ref[ok]))
