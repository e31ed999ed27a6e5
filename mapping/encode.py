"""Tokens and weights -> input rates, synaptic weights and biases of a circuit.

The output is a :class:`ctmhsa.circuits.instantiate.CircuitValues` (what Brian2 needs) and the codes
needed to decode (what :mod:`ctmhsa.mapping.decode` needs). Only the tokens, the weights and the
circuit's structure enter; no stage of the reference is computed here.

Derivations (u: volts per unit; see :mod:`ctmhsa.maths.codes`):

- core/matrix synapses carry ``w = u W / rho_in`` (V·s), so a dendrite integrating the relay
  rates ``rho_in (x_b + x)`` sits at ``u (W x + x_b Σ_e W)``; a bias ``-u x_b Σ_e W`` (plus
  ``u v_0`` for values) leaves ``u q``, ``u k`` and ``u (v_0 + v)``.
- interneurons of macrocolumn i hold the pooled L2/3 rate at ``R_set,i = r_l23 N_i`` (at least
  ``r_pool_min``, so small pools still fire enough spikes for the feedback)
  (integral feedback: pool weight ``1/(g_sh R_set,i)``, set point ``1/g_sh``), hence
  ``r_L23 = R_set,i s``; the loop gain is then independent of the macrocolumn's size. The L2/3
  gain ``rho_h`` of each head is the operating point of :mod:`ctmhsa.mapping.operating`: the default
  ``rho_l23`` where every macrocolumn's division ``rho_h Z_i / R_set,i`` lies within the
  interneurons' range, else a gain that puts them all there (or a refusal, before building).
- L2/3 -> apical L5 IT weights ``u a_i / R_set,i`` give an apical potential ``u a_i κ_ij`` with
  ``a_i`` the number of keys of macrocolumn i (so the apical gain is ~1 on average).
- L5 IT -> PT weights ``u / (rho_it a_i)`` give a PT potential ``u (v_0 + ṽ_i)``.
- PT -> nucleus 2 weights ``u WO / rho_pt`` and a bias ``u (x_0 - Σ_hc WO v_0,h)`` give
  ``u (x_0 + x̃)``.

That is the offset code (``signed="offset"``). With ON/OFF pairs (the default) nucleus 1 relays
``rho_in [±x]_+`` through synapses ``±u W / rho_in`` (no ``x_b``, no dendritic bias), the L5 IT
basal dendrites see ``±u v`` (no ``v_0``), the PT cells ``±u ṽ`` (weights ``±u / (rho_it a_i)`` from
the ON and OFF IT cells) and nucleus 2 ``±u x̃``: no offset anywhere after the dendrites, so
every cell fires for signal only. The gains in :class:`ctmhsa.maths.codes.CodeGains` are those of the
ON/OFF code; the offset code halves them (the same worst-case rate: rho' v_0 = (rho'/2) 2 v_0).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ctmhsa.circuits.graph import Circuit
from ctmhsa.circuits.builders import CIRCUITS  # noqa: F401 - registers the attention areas' parts
from ctmhsa.circuits.parts import get_part, register_values
from ctmhsa.circuits.values import CircuitValues
from ctmhsa.neurons.params import DEFAULT_PARAMS, CellParams

from ctmhsa.maths.codes import DEFAULT_GAINS, AffineCode, CodeGains
from ctmhsa.maths.inputs import as_input_range
from ctmhsa.maths.model import Block
from .operating import (check_division, copies, expected_drive, l23_cells, operating_point, pooled_drive,
                        recentre, sampled_drive, set_points)

__all__ = ["Encoding", "encode", "check_tokens", "relay_rates", "cell_weights", "value_offset", "output_offset", "copies",
           "SIGNS"]

SIGNS = np.array([1.0, -1.0])
"""Sign of the ON (index 0) and OFF (index 1) cell of a pair along a ``sign`` axis."""


@dataclass
class Encoding:
    """Everything the mapping layer hands to the simulator and keeps for decoding.

    Attributes
    ----------
    values : CircuitValues
        Weights, biases and input rates for :func:`ctmhsa.circuits.instantiate.instantiate`.
    codes : dict of str -> AffineCode
        ``tokens``, ``q``, ``k``, ``v``, ``v_tilde``, ``x_tilde`` codes.
    consts : dict
        Other decoding constants: ``R_set (H, n)`` (L2/3 rate per unit of s: the set point, or
        rho_l23 without interneurons), ``a (H, n)``, ``u``, ``v0 (H,)``, ``x0``, ``gains`` (a
        dict; its ``rho_l23`` is the per-head operating gain, shape (H, 1)) and ``operating``
        (the :class:`ctmhsa.mapping.operating.OperatingPoint`, or None without interneurons),
        ``loop`` (the interneurons' loop constants in s: ``tau_int``, the loop's time constant in
        ln D, ``tau_syn``, ``tau_m``; :func:`ctmhsa.mapping.noise.loop_residual_time`).
    """

    values: CircuitValues
    codes: dict
    consts: dict
    stream: dict = field(default_factory=dict)
    """A stream of token sets: relay population -> ``(rates (rows, N) Hz, period s, shift s)``,
    the relays' rates over time (:func:`ctmhsa.circuits.instantiate.instantiate`); empty for one set."""


def cell_weights(circuit, proj, w) -> np.ndarray:
    """The weight array of projection ``proj`` over its cells' indices, from one over the
    signal's (``u W / gain``): ON/OFF pairs get one more axis per sign index of the weight, which
    flips it for OFF cells (pre and post: both); population coding divides by the source's copies
    (every projection averages over them)."""
    w = np.asarray(w, float)
    for _ in (k for k in proj.weight_index if k.endswith(".sign")):
        w = w[..., None] * SIGNS
    return w / copies(circuit.population(proj.source))


def value_offset(WV: np.ndarray, norm: float, margin: float = 1.0) -> np.ndarray:
    """Per-head offset ``v_0,h = margin * norm * max_c ||WV[h,c,:]||`` (>= every |v| of a token of
    norm <= ``norm``, Cauchy-Schwarz): from the weights and the declared range only."""
    return margin * float(norm) * np.linalg.norm(np.asarray(WV, float), axis=2).max(axis=1)


def output_offset(WO: np.ndarray, v0: np.ndarray, margin: float = 1.0) -> float:
    """``x_0 = margin * max_e Σ_{h,c} |WO[h,e,c]| v_0,h`` (>= every |x̃| when κ is normalised)."""
    return float(margin * np.einsum("hec,h->e", np.abs(WO), v0).max())


def relay_rates(circuit: Circuit, tokens: AffineCode, X, Y=None, onoff: bool = True) -> dict:
    """The thalamic relays' rates for tokens ``X`` (and keys/values ``Y``): the only values of
    the encoding that depend on the tokens shown (``{population: {"r_in": rates (Hz)}}``).

    Per cell, so that population-coding copies share their token's rate; ON/OFF relays fire
    ``rho_in [±x]_+``, single relays ``rho_in (x_b + x)``.
    """
    X = np.asarray(X, float)
    Yk = X if Y is None else np.asarray(Y, float)
    out = {}
    for name, toks in (("nucleus1", X), ("nucleus1_kv", Yk), ("nucleus1_v", Yk)):
        if name in circuit.populations:
            nuc = circuit.populations[name]
            x = toks[nuc.axis("token"), nuc.axis("e")]
            if onoff:
                x = np.maximum(SIGNS[nuc.axis("sign")] * x, 0.0)
            out[name] = {"r_in": tokens.encode(x)}
    return out


def check_tokens(circuit: Circuit, rng, op, R_set, X, Y, weights, phi: str, remedy: str | None = None) -> None:
    """Refuse tokens the circuit built for ``rng`` does not take: outside the declared range
    (``ValueError``), or needing a division its interneurons cannot exert at the fixed gain
    (:class:`ctmhsa.mapping.operating.OperatingRangeError`; ``op`` None: no interneurons; ``remedy``
    as :func:`ctmhsa.mapping.operating.check_division`'s). A check, never a setting."""
    rng.check(X, "X")
    if Y is not None:
        rng.check(Y, "Y")
    if op is not None:
        Yk = X if Y is None else Y
        check_division(op, pooled_drive(circuit, X, Yk, weights, phi) / R_set, "X, WQ, WK", remedy)


def encode(
    circuit: Circuit,
    X,
    weights: Block,
    Y=None,
    gains: CodeGains = DEFAULT_GAINS,
    params: CellParams = DEFAULT_PARAMS,
    phi: str = "elu1",
    input_range=None,
    drive=None,
    timing: dict | None = None,
    remedy: str | None = None,
) -> Encoding:
    """Compute input rates, synaptic weights and biases for ``circuit``.

    Every value except the relays' rates (:func:`relay_rates`) comes from the weights and the
    declared ``input_range`` alone, so two token sets of the range give the same circuit.

    Parameters
    ----------
    circuit : Circuit
        A pathway/area/macrocolumn description whose sizes match the arrays.
    X, Y : ndarray
        Validated tokens (see :func:`ctmhsa.maths.reference.check_attention_inputs`), unbatched.
    weights : ctmhsa.maths.model.Block
        The block's attention weights (:meth:`ctmhsa.maths.model.Block.from_arrays` from plain
        arrays) and, where the circuit has the skip path (``core_skip``), its ``WS``: the PT
        potential gains ``u WS x_i`` (synapses ``±u WS / rho_in`` from the ON/OFF relays).
    gains : CodeGains
        Gains of the codes.
    params : CellParams
        Physiological constants (``u``).
    input_range : InputRange, float or None
        The tokens the circuit is built for (:mod:`ctmhsa.maths.inputs`); ``None``: the range
        of ``X`` (and ``Y``). Tokens outside it are refused.
    drive : ndarray (H, k), optional
        Pooled drives per Hz of set point of macrocolumns of tokens drawn from the declared range
        (:func:`ctmhsa.mapping.operating.pooled_drive` / set points, any number ``k`` of them per
        head) that the normalisation's operating point is centred on, instead of the drive the
        range's statistics predict (:func:`ctmhsa.mapping.operating.expected_drive`). Never the
        tokens shown.
    timing : dict, optional
        A stream circuit's timing (``presentation``, ``dt``, ``forget``, ``tokens``: declared, never the
        tokens'), handed to its part's values (:mod:`ctmhsa.mapping.kvmemory`).
    remedy : str, optional
        What a refusal of these tokens proposes (:func:`ctmhsa.mapping.operating.check_division`;
        a model's: its calibration set).

    Raises
    ------
    ValueError
        Tokens outside the declared range; :class:`ctmhsa.mapping.operating.OperatingRangeError`
        where the circuit built for the range cannot divide these tokens.
    """
    meta = circuit.meta
    if not isinstance(weights, Block):
        raise TypeError(f"weights: expected a ctmhsa.maths.model.Block (Block.from_arrays(WQ, WK, WV, WO, WS)), "
                        f"got {type(weights).__name__}")
    X = np.asarray(X, float)
    Yk = X if Y is None else np.asarray(Y, float)
    H, n, m = meta.H, meta.n, meta.m
    WQ, WK, WV, WO, WS = weights.WQ, weights.WK, weights.WV, weights.WO, weights.WS
    if X.shape != (n, meta.de) or Yk.shape != (m, meta.de) or weights.H != H:
        raise ValueError(
            f"encode: arrays (X {X.shape}, Y {Yk.shape}, H={weights.H}) do not match circuit "
            f"{circuit.name} (n={n}, m={m}, de={meta.de}, H={H})")
    rng = as_input_range(input_range, X, Y)
    u = params.u
    pops = circuit.populations
    onoff = meta.signed == "onoff"
    if not onoff and "interneuron" not in pops:
        # the offset v0 passes through the attention only because Σ_j κ_ij = 1 (normalised)
        raise ValueError("signed: the unnormalised variant needs ON/OFF pairs (signed='onoff'); with the "
                         "offset code its read-out would carry v0 Σ_j κ_ij (the linear circuit's v0 Z_i), "
                         "which varies per query and cannot be removed at decoding")
    if not onoff:
        # equal worst-case rate: an ON/OFF cell reaches rho' b, an offset cell (rho'/2) (2 b)
        gains = replace(gains, rho_in=gains.rho_in / 2, rho_it=gains.rho_it / 2,
                        rho_pt=gains.rho_pt / 2, rho_out=gains.rho_out / 2,
                        rho_outer=gains.rho_outer / 2, rho_memory=gains.rho_memory / 2)
    # ON/OFF relays fire rho_in [±x]_+ (no offset); single relays rho_in (x_b + x), x_b >= |x_e|
    xb = 0.0 if onoff else rng.norm
    tokens = AffineCode(gain=gains.rho_in, offset=xb)
    v0 = value_offset(WV, rng.norm, gains.margin)
    # offset code with a skip path: the PT cells also carry WS x_i, which the value offset v0
    # does not bound (found by `ctmhsa bench robustness`: PT cells rectified); they get an extra
    # offset s0 >= every |WS x_i|, removed at decoding like v0
    s0 = np.zeros(H)
    if not onoff and "core_skip" in circuit.projections and WS is not None:
        s0 = value_offset(WS, rng.norm, gains.margin)
    x0 = output_offset(WO, v0 + s0, gains.margin)

    vals = CircuitValues()
    vals.params.update(relay_rates(circuit, tokens, X, Y, onoff))
    for pname, W in (("core_q", WQ), ("core_qz", WQ), ("matrix_k", WK), ("matrix_kz", WK), ("matrix_v", WV)):
        if pname in circuit.projections:
            vals.weights[pname] = u * W / gains.rho_in
    # the normalisation's operating point: one L2/3 gain per head, centred on the drive the
    # declared range predicts (weights and range only); these tokens are then checked against it
    # (refused here, before building, where the built circuit could not divide them)
    R_set = set_points(circuit, gains) if "interneuron" in pops else None
    if R_set is None:
        op = None
    elif drive is not None:
        op = operating_point(np.asarray(drive, float), gains, apical=meta.apical)
    else:
        op = operating_point(expected_drive(circuit, weights, rng, phi) / R_set, gains, apical=meta.apical)
        # where the range's token sets lie far from its mean drive (heavy tails), a gain that
        # divides more of them (sets drawn from the range's statistics, never these tokens)
        op = recentre(op, sampled_drive(circuit, weights, rng, phi) / R_set, gains)
    check_tokens(circuit, rng, op, R_set, X, Y, weights, phi, remedy)
    rho_h = np.full(H, gains.rho_l23) if op is None else op.rho
    ctx = dict(u=u, xb=xb, v0=v0, onoff=onoff, weights=weights, rho_l23=rho_h, tau_syn=params.tau_syn,
               tau_int=params.tau_int,
               R_set=R_set, timing=timing, phi=phi, input_range=rng)
    # the head's attention area (a registered part, ctmhsa.circuits.parts): also the weights onto L5 PT
    gains, R_set = get_part(meta.circuit).values(circuit, vals, gains, ctx)

    if "l5pt" in pops:   # ON/OFF: ON PT sums u ṽ from its source pairs, OFF PT its negative
        vals.params["l5pt"] = {"b": 0.0, "rho": gains.rho_pt}
    if "core_skip" in circuit.projections:
        if WS is None:
            raise ValueError("weights: the circuit has a skip connection (core_skip); give the block its WS")
        vals.weights["core_skip"] = u * WS / gains.rho_in
        if not onoff:   # the single relays carry x_b + x: remove x_b WS through the PT bias
            pt = pops["l5pt"]
            vals.params["l5pt"]["b"] = (u * (s0[:, None] - xb * WS.sum(axis=2)))[pt.axis("head"), pt.axis("c")]
    if "nucleus2" in pops:   # ON/OFF: ṽ = (r_on - r_off)/rho_pt, x̃ = Σ WO ṽ, no offset
        vals.weights["pt_out"] = u * WO / gains.rho_pt
        b = 0.0 if onoff else u * (x0 - np.einsum("hec,h->e", WO, v0 + s0))[pops["nucleus2"].axis("e")]
        vals.params["nucleus2"] = {"b": b, "rho": gains.rho_out}

    ctx.update(gains=gains, R_set=R_set, params=params, phi=phi, input_range=rng)
    for name in meta.parts[1:]:   # further registered parts
        get_part(name).values(circuit, vals, gains, ctx)

    for pname, proj in circuit.projections.items():
        vals.weights[pname] = cell_weights(circuit, proj, vals.weights[pname])

    codes = {
        "tokens": tokens,
        "q": AffineCode(gain=u),
        "k": AffineCode(gain=u),
        "v": AffineCode(gain=u, offset=0.0 if onoff else v0[:, None, None]),
        "v_tilde": AffineCode(gain=gains.rho_pt, offset=0.0 if onoff else (v0 + s0)[:, None, None]),
        "x_tilde": AffineCode(gain=gains.rho_out, offset=0.0 if onoff else x0),
    }
    consts = dict(u=u, R_set=R_set, a=ctx.get("n_keys"), v0=v0, s0=s0, x0=x0, xb=xb,
                  gains={**gains.to_dict(), "rho_l23": rho_h[:, None]},
                  onoff=onoff, normalize="interneuron" in pops, phi=phi, operating=op, input_range=rng,
                  loop=dict(tau_int=params.tau_int, tau_syn=params.tau_syn, tau_m=params.tau_m))
    if timing is not None:   # (a stream part may add what its decoding needs: the memory's scale)
        consts["timing"] = dict(ctx["timing"])
    return Encoding(vals, codes, consts)


def _normalisation(vals, gains, R_set, n_inh, tau_syn, inh, shunts=("shunt",), apical=False, tau_int=None):
    """Interneurons holding each macrocolumn's pooled rate at ``R_set`` (integral feedback):
    pool weight ``1/(g_sh R_set)``, set point ``1/g_sh``, the pool sharing the shunt. The
    relative error's bound ``e_max`` clears five single-spike jumps ``1/(tau_syn R_set)`` of the
    pooled input above 9, so spike noise stays inside the loop's linear range (small pools)."""
    vals.weights["pool"] = 1.0 / (gains.g_sh * R_set)
    for name in shunts:
        vals.weights[name] = gains.g_sh / n_inh
        if apical:   # the second division stage (circuit.meta.apical): the same cells' apical dendrites
            vals.weights[name + "_apical"] = gains.g_apical / n_inh
    e_max = 9.0 + 5.0 / (tau_syn * R_set)
    vals.params["interneuron"] = {"I_set": 1.0 / gains.g_sh, "e_max": e_max[inh.axis("head"), inh.axis("i")],
                                  "tau_inh": tau_int * (2.0 if apical else 1.0)}


@register_values("quadratic")
def _microcolumns(circuit, vals, gains, ctx):
    """Algorithm 1's cortical values (L2/3, interneurons, L5 IT, IT -> PT weights); returns the
    (possibly rescaled) gains and the set points ``R_set (H, n)``."""
    meta, pops, w = circuit.meta, circuit.populations, ctx["weights"]
    H, n, m = meta.H, meta.n, meta.m
    u, xb, v0 = (ctx[k] for k in ("u", "xb", "v0"))
    l23, it = pops["l23"], pops["l5it"]
    # keys attended by macrocolumn (h, i) and its number of L2/3 dimensions (copies excluded)
    present = l23_cells(circuit)
    if "interneuron" in pops:
        n_keys = present / meta.dk
        R_set = ctx["R_set"]
    else:
        # unnormalised: L2/3 fire rho_l23 s; the apical input is scaled by 1/dk, and since ṽ now
        # sums m unnormalised weights of size ~dk, the read-out gains by 1/(m dk) — structural
        # scales, nothing computed from the attention itself
        n_keys = np.full((H, n), 1.0 / meta.dk)
        R_set = np.full((H, n), gains.rho_l23)
        scale = 1.0 / (m * meta.dk)
        gains = replace(gains, rho_pt=gains.rho_pt * scale, rho_out=gains.rho_out * scale)
    ctx["n_keys"] = n_keys
    h23, c23 = l23.axis("head"), l23.axis("c")
    vals.params["l23"] = {
        "b_b": -u * xb * w.WQ.sum(axis=2)[h23, c23],
        "b_a": -u * xb * w.WK.sum(axis=2)[h23, c23],
        "rho": ctx["rho_l23"][h23],
    }
    hit, cit = it.axis("head"), it.axis("c")
    if ctx["onoff"]:   # ON sees u v, OFF -u v: the rectified pair carries v without an offset
        vals.params["l5it"] = {"b_b": 0.0, "rho": gains.rho_it}
    else:
        vals.params["l5it"] = {"b_b": u * (v0[hit] - xb * w.WV.sum(axis=2)[hit, cit]), "rho": gains.rho_it}
    if "interneuron" in pops:
        _normalisation(vals, gains, R_set, meta.n_inh, ctx["tau_syn"], pops["interneuron"], apical=meta.apical,
                       tau_int=ctx["tau_int"])
    # apical potential u a_i κ_ij (normalised: a_i = keys of macrocolumn i; else 1/dk)
    vals.weights["attention"] = u * n_keys / R_set
    if "l5pt" in pops:   # PT potential u ṽ
        vals.weights["it_pt"] = u / (gains.rho_it * n_keys)
    return gains, R_set


@register_values("linear")
def _key_value_memory(circuit, vals, gains, ctx):
    """Values of the linear circuit (see ctmhsa.circuits.builders): outer-product cells fire
    ``rho_outer phi(k_jf) [±v_jc]_+``; memory cells hold ``u S_fc / m`` and ``u z_f / m`` (mean over
    tokens, so their rates do not grow with m); read-out cells fire
    ``rho_l23 phi(q_if) [±S_fc]_+ / (m (1 + g_i))``, and the interneurons hold each macrocolumn's
    ``readout_z`` total at ``R_set = max(r_l23 dk, r_pool_min)``, hence ``1 + g_i = rho_l23 Z_i / (m R_set)`` and
    ``Σ_f readout = R_set ṽ_i``, hence read-out -> PT weights ``u / R_set``. Returns gains and
    ``R_set (H, n)``."""
    meta, pops, w = circuit.meta, circuit.populations, ctx["weights"]
    H, n, m, dk = meta.H, meta.n, meta.m, meta.dk
    u, xb, v0 = (ctx[k] for k in ("u", "xb", "v0"))
    outer, read = pops["outer"], pops["readout"]
    ho, fo, co = outer.axis("head"), outer.axis("f"), outer.axis("c")
    b_a = -u * xb * w.WK.sum(axis=2)         # removes the relays' offset x_b (offset code only)
    vals.params["outer"] = {"b_b": 0.0 if ctx["onoff"] else u * (v0[ho] - xb * w.WV.sum(axis=2)[ho, co]),
                            "b_a": b_a[ho, fo], "rho": gains.rho_outer}
    # memory potentials u S/m: outer rate differences rho_outer phi(k) v, averaged over the m tokens
    vals.weights["write"] = u / (gains.rho_outer * m)
    vals.params["memory"] = {"b": 0.0, "rho": gains.rho_memory}
    vals.weights["recall"] = u / gains.rho_memory
    b_b = -u * xb * w.WQ.sum(axis=2)
    rho = ctx["rho_l23"]
    vals.params["readout"] = {"b_b": b_b[read.axis("head"), read.axis("f")], "rho": rho[read.axis("head")]}
    if "interneuron" in pops:
        oz, rz = pops["outer_z"], pops["readout_z"]
        vals.params["outer_z"] = {"b_b": u, "b_a": b_a[oz.axis("head"), oz.axis("f")], "rho": gains.rho_outer}
        vals.weights["write_z"] = u / (gains.rho_outer * m)
        vals.params["memory_z"] = {"b": 0.0, "rho": gains.rho_memory}
        vals.weights["recall_z"] = u / gains.rho_memory
        vals.params["readout_z"] = {"b_b": b_b[rz.axis("head"), rz.axis("f")], "rho": rho[rz.axis("head")]}
        R_set = ctx["R_set"]
        _normalisation(vals, gains, R_set, meta.n_inh, ctx["tau_syn"], pops["interneuron"],
                       shunts=("shunt", "shunt_z"), apical=meta.apical, tau_int=ctx["tau_int"])
    else:
        # unnormalised: Σ_f readout = rho_l23 ṽ / m; read-out gains scaled by 1/(m dk) as in
        # the quadratic circuit (ṽ sums m weights of size ~dk)
        R_set = np.full((H, n), gains.rho_l23 / m)
        scale = 1.0 / (m * dk)
        gains = replace(gains, rho_pt=gains.rho_pt * scale, rho_out=gains.rho_out * scale)
    if "l5pt" in pops:   # PT potential u ṽ (unnormalised: R_set = rho_l23 / m)
        vals.weights["readout_pt"] = u / R_set
    return gains, R_set
