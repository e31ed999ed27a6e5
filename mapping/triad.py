"""Values, decoding and drive of the Co4 area (``circuit="co4"``, :mod:`ctmhsa.circuits.co4`).

Derivations (u: volts per unit, as in :mod:`ctmhsa.mapping.encode`):

- each triad cell's basal dendrite integrates its receptive field's relays through ``±u W / rho_in``
  (``u q``, ``u k`` or ``u v``), its apical dendrite the two context halves through ``±u W / (2
  rho_in)`` each (``u (k + v)/2`` and so on): ``R`` and ``C`` in the code's units, signed (ON/OFF
  relays);
- it fires ``rho_coop cooperation(R, C)`` (:attr:`ctmhsa.maths.codes.CodeGains.rho_coop`; at most
  ``6 rho_coop``, the ReLU6);
- the linear circuit's cells sum them through ``u / (rho_coop L)`` (clues, hypotheses: the mean
  over the L latents) and ``u / (rho_coop n)`` (questions: the mean over the n tokens), so the
  outer-product and read-out dendrites sit at ``u k_m``, ``±u v_m`` and ``u q_m``; the rest is the
  linear circuit's encoding (:func:`ctmhsa.mapping.encode._key_value_memory`).

The normalisation's operating point is the linear circuit's, on the modulated questions and
clues: the pooled drive of latent l is ``φ(q_m,l) · mean_j φ(k_m,j)``; the expected drive is its
mean over token sets drawn from the declared range (weights and range only, never the tokens
shown).
"""

from __future__ import annotations

import numpy as np

from ctmhsa.circuits.co4 import CELL_TYPE, TRIAD, triad_weights
from ctmhsa.circuits.parts import get_part, register_hook, register_values
from ctmhsa.circuits.transformer import attention_circuit, block_prefix, relay_sets
from ctmhsa.circuits.values import CircuitValues
from ctmhsa.maths.co4 import co4_attention, co4_forward
from ctmhsa.maths.codes import DEFAULT_GAINS, CodeGains
from ctmhsa.maths.inputs import InputRange, as_input_range
from ctmhsa.maths.model import Block
from ctmhsa.maths.reference import FEATURE_MAPS
from ctmhsa.maths.transformer import normalise
from ctmhsa.neurons.params import DEFAULT_PARAMS, CellParams

from . import noise, operating  # noqa: F401 - register the linear circuit's hooks reused below
from .blocks import (CALIBRATION_MARGIN, STREAM_RATE, ModelEncoding, _central_drive, _rms, _weights, add_block_values,
                     drawn_tokens, encode_readout, input_rates, normalising_relays)
from .decode import _copies_mean, _decode_key_value_memory, per_dimension
from .encode import _key_value_memory, check_tokens, copies, encode
from .noise import _rate_var
from .kvmemory import MEMORY_PEAK_RATE
from .operating import (RECTIFIED_BY_LAW, SAMPLES, OperatingRangeError, division_bounds, pooled_drive, sampled_drive,
                        sampled_sets, set_points)

__all__ = ["triad_features", "co4_scales", "encode_co4_model", "memory_gains"]

RECTIFIED_BY_LAW.add(CELL_TYPE)    # the Cooperation Equation's ReLU6 clips at 0 by design

_MODULATED = {"q": "q_m", "k": "k_m", "v": "v_m"}


def memory_gains(circuit, weights, input_range, phi: str, gains: CodeGains, k: int = SAMPLES) -> CodeGains:
    """``gains`` with ``rho_outer`` and ``rho_memory`` lowered where the triad's outputs would drive
    the outer-product cells (``rho_outer φ(k_m) [±v_m]_+``, their z twins ``rho_outer φ(k_m)``) or
    the memory cells (``rho_memory |S| / m``, ``rho_memory z / m``) past
    :data:`ctmhsa.mapping.kvmemory.MEMORY_PEAK_RATE` (500 Hz, as the memory circuit's read path) on
    the ``k`` token sets drawn from the declared range (:func:`ctmhsa.mapping.operating.sampled_sets`,
    the operating check's): the weights and the range, never the tokens shown. The triad's outputs reach 6 (its ReLU6), so
    φ(k_m) v_m reaches 42 units with elu1, 840 Hz at the default ``rho_outer`` and 4,200 Hz at
    ``rho_memory`` (a held-out instance's memory fired 1,734 Hz and saturated). The weights that
    read those cells divide by the same gains, so the rate level is unchanged; the spiking levels
    trade count noise for staying in range."""
    from dataclasses import replace

    m = circuit.meta
    X, Y = sampled_sets(circuit, input_range, k)
    f = FEATURE_MAPS[phi][0]
    outer = memory = 0.0
    for s in range(k):
        st = co4_attention(X[s], weights.WQ, weights.WK, weights.WV, weights.WO, Y=Y[s], phi=phi, normalize=False)
        fk = f(st["k_m"])                                                          # (H, n, d)
        prod = fk[:, :, :, None] * np.abs(st["v_m"])[:, :, None, :]                # (H, n, d, d): φ(k_m) |v_m|
        # the cells and their z twins: outer φ(k_m)|v_m| and φ(k_m), memory |S|/m and z/m
        outer = max(outer, float(prod.max()), float(fk.max()))
        memory = max(memory, float(np.abs(np.einsum("hjf,hjc->hfc", fk, st["v_m"])).max()) / m.m,
                     float(fk.sum(axis=1).max()) / m.m)
    return replace(gains, rho_outer=min(gains.rho_outer, MEMORY_PEAK_RATE / outer) if outer > 0 else gains.rho_outer,
                   rho_memory=min(gains.rho_memory, MEMORY_PEAK_RATE / memory) if memory > 0 else gains.rho_memory)


@register_values("co4")
def _values(circuit, vals, gains, ctx):
    """The triad's relay weights and gains, the linear circuit's values (outer-product and memory
    gains capped by :func:`memory_gains`), and the averages that feed it (module docstring).
    Returns the gains and ``R_set (H, L)``."""
    meta, w, u = circuit.meta, ctx["weights"], ctx["u"]
    for pname, W in triad_weights(w.WQ, w.WK, w.WV).items():
        vals.weights[pname] = u * W / gains.rho_in
    for name in TRIAD:
        vals.params[name] = {"b_b": 0.0, "rho": gains.rho_coop}
    gains = memory_gains(circuit, w, ctx["input_range"], ctx["phi"], gains)
    gains, R_set = _key_value_memory(circuit, vals, gains, ctx)
    latents, tokens = meta.n, meta.m
    for pname, over in (("km_write", latents), ("km_write_z", latents), ("vm_write", latents),
                        ("qm_read", tokens), ("qm_read_z", tokens)):
        if pname in circuit.projections:
            vals.weights[pname] = u / (gains.rho_coop * over)
    return gains, R_set


@register_hook("co4", "decode")
def _decode(circuit, encoding, obs):
    """The triad's inputs ``q, k, v`` (its cells' basal potentials), the modulated ``q_m, k_m,
    v_m`` (the linear circuit's dendrites, which sum the triad) and the linear circuit's S, z, Z."""
    st = _decode_key_value_memory(circuit, encoding, obs)
    for plain, modulated in _MODULATED.items():
        st[modulated] = st.pop(plain)
    codes = encoding.codes
    for name, stage, other in (("coop_q", "q", 2), ("coop_k", "k", 1), ("coop_v", "v", 1)):
        pop = circuit.populations[name]      # (H, L, n, d): the field is the same along the other index
        st[stage] = codes[stage].decode(_copies_mean(per_dimension(pop, obs[name]["V_b"]), axis=other))
    return st


def triad_features(X, Yk, weights, phi: str) -> tuple:
    """``φ(q_m) (H, L, d)`` and ``φ(k_m) (H, n, d)`` of latents ``X`` and tokens ``Yk`` under
    ``weights`` (anything with ``WQ``, ``WK``, ``WV``, ``WO``): what the read-out and outer-product
    cells' φ sees."""
    st = co4_attention(X, weights.WQ, weights.WK, weights.WV, weights.WO, Y=Yk, phi=phi, normalize=False)
    f = FEATURE_MAPS[phi][0]
    return f(st["q_m"]), f(st["k_m"])


@register_hook("co4", "features")
def _features(circuit, X, Yk, weights, phi):
    return triad_features(X, Yk, weights, phi)


@register_hook("co4", "expected_drive")
def _expected_drive(circuit, weights, input_range, phi):
    """The mean pooled drive over token sets drawn from the declared range: the triad's features
    have no closed-form moments (weights and range only)."""
    return sampled_drive(circuit, weights, input_range, phi).mean(axis=0)


# the read-out's division is the linear circuit's: dk read-out-z cells pooled per latent
for _hook in ("pool_cells", "pooled_drive"):
    register_hook("co4", _hook)(get_part("linear").hooks[_hook])



def _cooperation_slopes(R, C):
    """``∂g/∂R`` and ``∂g/∂C`` of the Cooperation Equation ``g = ReLU6(R² + 2R + C(1 + |R|))``
    (0 where it is clipped)."""
    x = R * R + 2.0 * R + C * (1.0 + np.abs(R))
    live = (x > 0.0) & (x < 6.0)
    return np.where(live, 2.0 * R + 2.0 + C * np.sign(R), 0.0), np.where(live, 1.0 + np.abs(R), 0.0)


@register_hook("co4", "noise")
def _noise(circuit, c, obs, fano, T, stages, f, df, out, weights=None):
    """Count-noise variances of the modulated ``q_m, k_m, v_m`` (first order in the triad cells'
    inputs, whose relay noise ``out`` holds for ``q, k, v``), then the linear circuit's S, z, Z
    and ṽ on them (in place into ``out``).

    A triad cell ``g(R, C)`` passes ``g_R² Var R + g_C² Var C`` and adds its own count variance
    ``F r / (T rho_coop²)``. Within an average the receptive field is one relay set's (common to
    every cell averaged, its slopes summed before squaring), and so is one half of the clue's and
    the hypothesis's contexts (the token's own ``v`` or ``k``); the other half (the latent's
    ``q``) and the question's context (each token's ``k`` and ``v``) differ per cell averaged,
    their variances add. The cross-covariance of ``k_m`` and ``v_m`` (both read token j's
    relays) is not counted: an estimate, like the rest, of the floor's size.
    """
    pops, g = circuit.populations, c["gains"]
    L, n = circuit.meta.n, circuit.meta.m
    q, k, v = stages["q"], stages["k"], stages["v"]                     # (H, L, d), (H, n, d), (H, n, d)
    vq, vk, vv = out["q"], out["k"], out["v"]
    own = {name: _rate_var(pops[name], obs[name], fano[name], T) / g["rho_coop"] ** 2 for name in TRIAD}
    # questions: R = q_l (common over j), C = (k_j + v_j)/2 (one per j)
    gR, gC = _cooperation_slopes(q[:, :, None], 0.5 * (k + v)[:, None])              # (H, L, n, d)
    var_qm = (gR.mean(axis=2) ** 2 * vq + (gC ** 2 * 0.25 * (vk + vv)[:, None]).sum(axis=2) / n ** 2
              + own["coop_q"].sum(axis=2) / n ** 2)
    # clues: R = k_j (common over l), C = (q_l + v_j)/2 (v_j common, q_l one per l)
    gR, gC = _cooperation_slopes(k[:, None], 0.5 * (q[:, :, None] + v[:, None]))
    var_km = (gR.mean(axis=1) ** 2 * vk + gC.mean(axis=1) ** 2 * 0.25 * vv
              + (gC ** 2 * 0.25 * vq[:, :, None]).sum(axis=1) / L ** 2 + own["coop_k"].sum(axis=1) / L ** 2)
    # hypotheses: R = v_j (common over l), C = (q_l + k_j)/2
    gR, gC = _cooperation_slopes(v[:, None], 0.5 * (q[:, :, None] + k[:, None]))
    var_vm = (gR.mean(axis=1) ** 2 * vv + gC.mean(axis=1) ** 2 * 0.25 * vk
              + (gC ** 2 * 0.25 * vq[:, :, None]).sum(axis=1) / L ** 2 + own["coop_v"].sum(axis=1) / L ** 2)
    modulated = dict(stages, q=stages["q_m"], k=stages["k_m"], v=stages["v_m"])
    out.update(q=var_qm, k=var_km, v=var_vm)
    get_part("linear").hooks["noise"](circuit, c, obs, fano, T, modulated, f, df, out, weights)
    out.update(q_m=var_qm, k_m=var_km, v_m=var_vm, q=vq, k=vk, v=vv)


def co4_scales(model, sets, phi: str) -> dict:
    """Typical scales of a Co4 model's streams over token sets ``sets`` ``(S, n, de)`` (the
    calibration's, never the tokens shown): ``x_rms``, ``x_mean_abs`` (median over tokens of
    ``mean |x|``), ``latents_rms``, ``latents_mean_abs``, ``h_rms`` (the residual ``latents + x̃``),
    ``pooled_rms``, ``pooled_mean_abs``, ``logits_rms`` and ``xn`` (the normalised tokens,
    ``(S, n, de)``), as :func:`ctmhsa.mapping.blocks.calibrate` gives a transformer's."""
    runs = [co4_forward(x, model, phi=phi) for x in sets]
    x = np.asarray(sets, float)
    lat = model.latents
    out = dict(x_rms=_rms(x), x_mean_abs=float(np.median(np.abs(x).mean(axis=-1))), latents_rms=_rms(lat),
               latents_mean_abs=float(np.median(np.abs(lat).mean(axis=-1))),
               h_rms=_rms([r["out"] for r in runs]), xn=np.stack([r["x_norm"] for r in runs]))
    if model.readout_W is not None:
        pooled = np.stack([r["pooled"] for r in runs])
        out.update(pooled_rms=_rms(pooled), pooled_mean_abs=float(np.median(np.abs(pooled).mean(axis=-1))),
                   logits_rms=_rms([r["logits"] for r in runs]))
    return out


def encode_co4_model(circuit, model, tokens, gains: CodeGains = DEFAULT_GAINS, params: CellParams = DEFAULT_PARAMS,
                     phi: str = "elu1", input_range=None, calibration=None) -> ModelEncoding:
    """Every value of a Co4 model's circuit (:func:`ctmhsa.circuits.transformer.model_circuit`
    with ``latents``), as :func:`ctmhsa.mapping.blocks.encode_model` gives a transformer's: the
    latents' relays fire at constant rates ``rho_l [±latent]_+``, normalising relays carry
    ``N(latents)`` to the triad's questions and ``N(X)`` to its clues and hypotheses, the Co4 area
    is encoded for normalised tokens (its operating point centred on the calibration sets' own
    drives), nucleus 2 holds ``latents + x̃`` and the read-out is the transformer's. Every gain
    from the weights, the latents and the declared range or calibration set; the tokens shown
    set the input relays' rates and are checked against every division.

    Parameters
    ----------
    circuit : Circuit
    model : ctmhsa.maths.co4.Co4Model
    tokens : ndarray (n, de) or (T, n, de)
        The tokens shown (embedded).
    gains, params, phi, input_range, calibration
        As :func:`ctmhsa.mapping.blocks.encode_model`.

    Raises
    ------
    ValueError
        Tokens outside the declared range.
    OperatingRangeError
        A division these tokens need that the circuit built for the range cannot exert.
    """
    sets = np.asarray(tokens, float)
    sets = sets[None] if sets.ndim == 2 else sets
    T, n, de = sets.shape
    if calibration is not None:
        calibration = np.asarray(calibration, float)
        if calibration.ndim != 3 or calibration.shape[1:] != (n, de):
            raise ValueError(f"calibration: expected token sets (S, n={n}, de={de}), got shape {calibration.shape}")
        if input_range is None:
            input_range = InputRange.from_tokens(calibration, margin=CALIBRATION_MARGIN)
    rng = as_input_range(input_range, sets.reshape(-1, de))
    rng.check(sets.reshape(-1, de), "X")
    if calibration is not None:
        rng.check(calibration.reshape(-1, de), "calibration")
    cal = co4_scales(model, calibration if calibration is not None else drawn_tokens(rng, de, n), phi)
    shown = [co4_forward(x, model, phi=phi) for x in sets]          # for the checks only
    u, n_inh, bounds = params.u, circuit.meta.n_inh, division_bounds(gains)
    shape = model.shape
    p = block_prefix(0)
    sub = attention_circuit(n, de, shape["H"], shape["d"], shape["d"], n_inh, P=copies(circuit.population(p + "nucleus2")),
                            latents=shape["L"])
    blk = Block.from_arrays(model.WQ, model.WK, model.WV, model.WO)
    ln = normalise(model.latents, "latents")
    xn = cal["xn"]
    rng_l = InputRange(norm=float(de), mean=xn.reshape(-1, de).mean(axis=0), std=xn.reshape(-1, de).std(axis=0))
    R_set = set_points(sub, gains)
    t = 0
    try:
        drive = _central_drive(np.concatenate([pooled_drive(sub, ln, x, blk, phi) / R_set for x in xn], axis=1), gains)
        enc = encode(sub, ln, blk, Y=shown[0]["x_norm"], gains=gains, params=params, phi=phi, input_range=rng_l,
                     drive=drive)
        c = enc.consts
        for t in range(1, T):
            check_tokens(sub, c["input_range"], c["operating"], c["R_set"], ln, shown[t]["x_norm"], blk, phi)
    except OperatingRangeError as exc:
        raise OperatingRangeError(f"Co4 attention (N(X) of {'these tokens' if T == 1 else f'token set {t}'}): "
                                  f"{exc}") from None
    vals = CircuitValues()
    add_block_values(vals, circuit, sub, enc, p)
    rho = {"input": STREAM_RATE / cal["x_rms"], "latents": STREAM_RATE / cal["latents_rms"],
           p + "nucleus2": STREAM_RATE / cal["h_rms"]}
    vals.params[p + "nucleus2"] = {"b": 0.0, "rho": rho[p + "nucleus2"]}
    vals.params["latents"] = {"r_in": input_rates(circuit, rho["latents"], model.latents, population="latents")}
    divisions = {}
    for what, relays in relay_sets(sub).items():   # the questions' relays normalise the latents, the others X
        src, typical, shown_abs = (("latents", cal["latents_mean_abs"], np.abs(model.latents).mean(axis=-1))
                                   if what == "q" else ("input", cal["x_mean_abs"], np.abs(sets).mean(axis=-1)))
        normalising_relays(vals, circuit, p + relays, p + f"trn_{what}", p + f"drive_{what}", rho[src], typical,
                           shown_abs, f"{'latents' if what == 'q' else 'X'} ({what} relays, TRN)", gains, params, rho,
                           divisions)
    _weights(vals, circuit, p + "residual", u / rho["latents"])   # nucleus 2 at u (latents + x̃)
    if model.readout_W is not None:
        encode_readout(vals, circuit, model, cal, np.stack([r["pooled"] for r in shown]), rho[p + "nucleus2"],
                       shape["L"], gains, params, rho, divisions)
    rates = input_rates(circuit, rho["input"], sets)
    vals.params["input"] = {"r_in": rates[0]}
    consts = dict(gains=gains.to_dict(), input_range=rng, u=u, phi=phi, bounds=bounds,
                  calibration={k: v for k, v in cal.items() if k != "xn"})
    return ModelEncoding(vals, [enc], rho, divisions, consts, rates)
