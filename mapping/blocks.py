"""A transformer model -> the values of its circuit (:mod:`ctmhsa.circuits.transformer`), and back.

Codes (ON/OFF pairs everywhere; ``ρ`` in Hz per unit):

=====================  ===============================  =====================================
quantity               cells                            rate
=====================  ===============================  =====================================
stream X of block l    ``input`` / ``b{l-1}_out``       ``ρ_x,l [±x]_+``
N(X) (three sets)      ``b{l}_nucleus1, _kv, _v``       ``rho_in [±N(x)]_+`` (TRN-held total)
attention stages       the block's pathway              as :mod:`ctmhsa.mapping.encode`
H = X + x̃              ``b{l}_nucleus2``                ``ρ_h,l [±H]_+``
N(H)                   ``b{l}_mlp_relay``               ``rho_in [±N(H)]_+``
hidden units           ``b{l}_hidden``                  ``ρ_a,l [W1 N(H) + b1]_+``
X' (next stream)       ``b{l}_out``                     ``ρ_x,l+1 [±x']_+``
mean of last stream    ``readout_pool``                 ``ρ_m [±mean_i x_i]_+``
N(mean)                ``readout_relay``                ``rho_in [±N(mean)]_+``
logits                 ``classes``                      ``ρ_c [±(R N(mean) + c)]_+``
=====================  ===============================  =====================================

Every gain comes from the weights and the declared input range only (:func:`calibrate`): tokens
drawn from the range's statistics (seeded, never the tokens shown) are run through the model,
and each stream's ``ρ`` puts its RMS at :data:`STREAM_RATE`; each normalising relay set gets an
unshunted gain that centres the division its TRN pool exerts for the median calibration token in
the interneurons' range. The tokens shown only set the input relays' rates, and are *checked*
(never used as a setting) against every division of the circuit before anything is built.

The normalisation makes the attention's input range known a priori: a normalised token has
``mean |x| = 1``, so ``||N(x)||_2 <= de``, and every block's attention area is encoded for the
range ``InputRange(norm=de)`` with the calibration's per-dimension statistics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ctmhsa.circuits.graph import Circuit
from ctmhsa.circuits.transformer import RELAY_SETS, attention_circuit, block_prefix, relay_sets, stream_source
from ctmhsa.circuits.values import CircuitValues
from ctmhsa.neurons.params import DEFAULT_PARAMS, CellParams

from ctmhsa.maths.codes import DEFAULT_GAINS, CodeGains
from . import kvmemory
from .decode import decode, per_dimension, signed_rate
from .encode import SIGNS, Encoding, cell_weights, check_tokens, encode
from ctmhsa.maths.inputs import InputRange, as_input_range
from ctmhsa.maths.model import Block, Model
from .operating import (OperatingRangeError, copies, division_bounds, operating_point, pooled_drive, set_points,
                        trn_division_bounds)
from ctmhsa.maths.transformer import plain_model, transformer_forward

__all__ = ["ModelEncoding", "calibrate", "encode_model", "decode_model", "encode_readout", "normalising_relays", "add_block_values", "drawn_tokens", "model_sizes", "STREAM_RATE",
           "HIDDEN_MEAN_RATE", "HIDDEN_PEAK_RATE", "CALIBRATION_SAMPLES", "CALIBRATION_MARGIN"]

STREAM_RATE = 60.0
"""Rate (Hz) of a stream's cells per RMS unit of the stream (as ``rho_in`` per unit token)."""
HIDDEN_MEAN_RATE = 8.0
"""Mean rate (Hz, above any baseline) of the MLP's hidden cells (L6 CT) over the calibration set:
their gain is this over the mean of their relu activity there (at most :data:`HIDDEN_PEAK_RATE`
over its active cells' 99th percentile). Sparse, as L6 CT cells fire in vivo
(bound 10 Hz, docs/physiology.md). Until version 0.15 the gain put their RMS at 60 Hz, which made
the digits model's hidden cells fire 27 Hz and the character model's 21 and 30 Hz (blocks 0 and
1, over a stream): a mean fixes the rate itself, the same in every block."""
HIDDEN_PEAK_RATE = 100.0
"""Largest rate (Hz) of an active hidden cell at the 99th percentile of the calibration set: the
hidden gain is at most this over that percentile of the positive relu activity. It bites only
on a nearly dead MLP, whose few active units :data:`HIDDEN_MEAN_RATE` alone would drive far
beyond the cells' working range (the lif somata follow their law up to ~140 Hz); the shipped
models' active cells reach 86 (digits), 52 and 61 Hz (Shakespeare, blocks 0 and 1) there."""
CALIBRATION_SAMPLES = 64
"""Token sets drawn from the declared range to fix the gains (:func:`calibrate`)."""
CALIBRATION_MARGIN = 1.5
"""Factor on a calibration set's largest token norm: the declared range's bound when the range
is declared by a calibration set alone."""
CALIBRATION_SEED = 20250101
"""Seed of those draws: the same model and range give the same circuit."""


def model_sizes(model: Model) -> list[dict]:
    """Per block ``{"H", "dk", "dv", "dh"}`` (``dh`` 0 without an MLP), for
    :func:`ctmhsa.circuits.transformer.model_circuit`."""
    return [dict(H=b.H, dk=int(b.WQ.shape[1]), dv=int(b.WV.shape[1]), dh=0 if b.mlp is None else b.mlp.dh)
            for b in model.blocks]


def _rms(a) -> float:
    v = float(np.sqrt(np.mean(np.square(a))))
    return v if v > 0 else 1.0


def _mean(a) -> float:
    v = float(np.mean(a))
    return v if v > 0 else 1.0


def calibrate(model: Model, rng: InputRange, n: int, phi: str = "elu1", samples: int = CALIBRATION_SAMPLES,
              seed: int = CALIBRATION_SEED, tokens=None, length: int | None = None) -> dict:
    """Typical scales of every stage of ``model`` for tokens of the declared range.

    ``samples`` sets of ``n`` tokens are drawn with the range's per-dimension mean and standard
    deviation (Gaussian, rescaled to the range's norm where above it), or ``tokens`` (sets
    ``(S, n, de)`` declared as the inputs the circuit is built for, e.g. a training set) are
    taken, and run through :func:`ctmhsa.maths.transformer.transformer_forward`. Nothing of the
    tokens shown enters. A causal model: ``samples`` sequences of ``length`` tokens (the stream's
    length, which its memory's scale depends on), each token's output read as its pooled one.

    Returns
    -------
    dict
        ``blocks``: per block ``x_rms``, ``x_mean_abs`` (median over tokens of ``mean |x|``),
        ``h_rms``, ``h_mean_abs``, ``hidden_mean`` (the mean of the MLP's relu activity), ``hidden_peak``
        (the 99th percentile of its positive values), ``xn``
        (the normalised calibration tokens, ``(samples * n, de)``); ``out_rms`` of the last stream;
        ``pooled_rms``, ``pooled_mean_abs`` and ``logits_rms`` where the model has a read-out.
    """
    de = model.de
    if model.causal and tokens is None and not (isinstance(length, int) and length >= 1):
        raise ValueError(f"length: a causal model is calibrated on sequences of the stream's length; got {length!r}")
    X = (np.asarray(tokens, float) if tokens is not None
         else drawn_tokens(rng, de, length if model.causal else n, samples, seed))
    ref = transformer_forward(X, plain_model(model), phi=phi, stages=True)
    blocks = []
    for st in ref["blocks"]:
        b = dict(x_rms=_rms(st["x"]), x_mean_abs=float(np.median(np.abs(st["x"]).mean(axis=-1))),
                 h_rms=_rms(st["h"]), h_mean_abs=float(np.median(np.abs(st["h"]).mean(axis=-1))),
                 xn=st["x_norm"].reshape(-1, de))
        if "hidden" in st:
            active = st["hidden"][st["hidden"] > 0]
            b["hidden_mean"] = _mean(st["hidden"])
            b["hidden_peak"] = float(np.quantile(active, 0.99)) if active.size else 1.0
        blocks.append(b)
    out = dict(blocks=blocks, out_rms=_rms(ref["output"]))
    if ref["logits"] is not None:
        pooled = ref["output"] if model.causal else ref["pooled"]     # a causal read-out: every token's own
        out.update(pooled_rms=_rms(pooled),
                   pooled_mean_abs=float(np.median(np.abs(pooled).mean(axis=-1))),
                   logits_rms=_rms(ref["logits"]))
    return out


def drawn_tokens(rng: InputRange, de: int, n: int, samples: int = CALIBRATION_SAMPLES,
                 seed: int = CALIBRATION_SEED) -> np.ndarray:
    """``samples`` sets of ``n`` tokens ``(samples, n, de)`` drawn with the declared range's
    per-dimension mean and standard deviation (Gaussian, rescaled to the range's norm where
    above it): the calibration's default inputs, never the tokens shown."""
    mean, std = rng.statistics(de)
    X = mean + std * np.random.default_rng(seed).standard_normal((samples, n, de))
    norms = np.linalg.norm(X, axis=-1, keepdims=True)
    return X * np.minimum(1.0, rng.norm / np.maximum(norms, 1e-300))


@dataclass
class ModelEncoding:
    """What the mapping layer hands to the simulator for a model, and keeps for decoding.

    Attributes
    ----------
    values : CircuitValues
        Every weight, bias and input rate of the circuit.
    blocks : list of Encoding
        Each block's attention encoding (unprefixed, for :func:`ctmhsa.mapping.decode.decode`).
    rho : dict
        Population -> Hz per unit of its code (stream, relay, hidden and read-out cells).
    divisions : dict
        Normalising relay set -> ``(rho_unshunted, rho_held)``: its cells' gain before the shunt
        and the rate per unit of N(x) its TRN pool holds.
    consts : dict
        ``gains`` (a dict), ``input_range``, ``calibration`` (the scales, without the tokens),
        ``u``, ``phi``, ``bounds`` (the divisions the interneurons can exert).
    input_rates : ndarray, shape (T, N)
        The input relays' rates (Hz) of every token set shown.
    stream : dict
        ``{"input": (rates (rows, N), period, shift)}`` for a stream of token sets (set by the
        simulator, which knows the warm-up).
    """

    values: CircuitValues
    blocks: list
    rho: dict
    divisions: dict
    consts: dict
    input_rates: np.ndarray
    stream: dict = field(default_factory=dict)


def input_rates(circuit: Circuit, rho: float, tokens, population: str = "input") -> np.ndarray:
    """The input relays' rates ``rho [±x]_+`` (Hz, per cell) of tokens ``(n, de)`` or ``(T, n, de)``
    (then ``(T, N)``); ``population``: the relays (a Co4 model's constant ``latents`` too)."""
    pop = circuit.population(population)
    x = np.asarray(tokens, float)[..., pop.axis("token"), pop.axis("e")]
    return rho * np.maximum(SIGNS[pop.axis("sign")] * x, 0.0)


DRIVE_QUANTILES = (0.01, 0.99)
"""Quantiles of the calibration tokens' pooled drives (per head) that the attention's operating
point is centred on: the tails beyond are left to the check of the tokens shown, unless the
centre would leave some of the calibration's own drives undivided (:func:`_central_drive`)."""


def _central_drive(drive: np.ndarray, gains: CodeGains) -> np.ndarray:
    """The drives ``(H, 2)`` an attention area's operating point is centred on, per head: its
    :data:`DRIVE_QUANTILES` of the calibration drives ``(H, k)``; where they span more than the
    interneurons can divide, their median. Where the quantiles' centre leaves a calibration drive
    outside the divisions but some gain divides them all (their full range fits), the gain moved
    the least that does (the quantiles scaled): the circuit divides every token set it is built
    for, with its interneurons' rates changed no more than that needs (the digits model at the
    lif level: 4 of its 1,300 training images were left below the divisions). The shown tokens'
    divisions are checked either way."""
    q = np.quantile(drive, DRIVE_QUANTILES, axis=1).T              # (H, 2)
    lo, hi = division_bounds(gains)
    wide = q[:, 1] / q[:, 0] > hi / lo
    q[wide] = np.median(drive[wide], axis=1)[:, None]
    rho = operating_point(q, gains).rho
    low, high = drive.min(axis=1), drive.max(axis=1)
    fits = (low > 0) & (high <= low * hi / lo)
    # the factor on the gain that brings the smallest drive up to D_min or the largest down to D_max
    # (rho scales as 1/q: both ends of the feasible gains scale with q)
    f = np.clip(1.0, lo / np.where(fits, rho * low, 1.0), hi / np.where(fits, rho * high, 1.0))
    q[fits] /= f[fits, None]
    return q


def _divide(vals, c: Circuit, relays: str, trn: str, gains: CodeGains, tau_syn: float, tau_int: float, held: float,
            unshunted: float, n_inh: int) -> None:
    """Values of a normalising relay set and its TRN pool: the pool holds the summed ON + OFF
    rate of a token's cells (copies included) at ``held * de * P``, so each relay fires
    ``held [±N(x)]_+``."""
    R_set = held * c.meta.de * copies(c.population(relays))
    vals.params[relays] = {"rho": unshunted}
    vals.weights[trn + "_pool"] = 1.0 / (gains.g_trn * R_set)
    vals.weights[trn + "_shunt"] = gains.g_trn / n_inh
    vals.params[trn] = {"I_set": 1.0 / gains.g_trn, "e_max": 9.0 + 5.0 / (tau_syn * R_set), "tau_inh": tau_int}


def normalising_relays(vals, circuit: Circuit, relays: str, trn: str, drive: str, source_rho: float, typical: float,
                       shown, where: str, gains: CodeGains, params: CellParams, rho: dict, divisions: dict) -> None:
    """Values of one normalising relay set (its drive from a stream coded at ``source_rho`` Hz per
    unit, its unshunted gain centring the division its TRN pool exerts for a calibration token of
    ``mean |x|`` = ``typical``, the pool) after checking the shown tokens' ``mean |x|`` (``shown``)
    against that division (``where`` names them); into ``vals``, ``rho`` and ``divisions``."""
    bounds = trn_division_bounds(gains)
    unshunted = gains.rho_in * math.sqrt(bounds[0] * bounds[1]) / typical
    _check_divisions(where, shown, unshunted, gains.rho_in, bounds)
    _weights(vals, circuit, drive, params.u / source_rho)
    _divide(vals, circuit, relays, trn, gains, params.tau_syn, params.tau_int, gains.rho_in, unshunted,
            circuit.meta.n_inh)
    rho[relays] = gains.rho_in
    divisions[relays] = (unshunted, gains.rho_in)


def _signed_bias(pop, b) -> np.ndarray:
    """Per-cell bias ``±b`` of an ON/OFF population over axis ``e`` or ``class``."""
    ax = "e" if "e" in pop.axes else "class"
    return np.asarray(b, float)[pop.axis(ax)] * SIGNS[pop.axis("sign")]


def _check_divisions(where: str, mean_abs: np.ndarray, unshunted: float, held: float, bounds) -> None:
    """Refuse tokens whose normalisation needs a division outside the interneurons' range (a
    check of the tokens shown, never a setting)."""
    d = unshunted / held * np.asarray(mean_abs, float)
    lo, hi = bounds
    bad = (d < lo * (1 - 1e-9)) | (d > hi * (1 + 1e-9))
    if np.any(bad):
        k = tuple(int(v) for v in np.argwhere(bad)[0])
        raise OperatingRangeError(
            f"{where}: token {k[-1] if len(k) == 1 else k} needs a normalising division of {d[k]:.4g}, outside "
            f"what its TRN interneurons can exert ({lo:.4g}-{hi:.4g}) at the gain fixed from the weights and "
            f"the declared input range; {int(bad.sum())} of {bad.size} tokens are outside. Declare the range "
            "of these inputs (input_range=InputRange.from_tokens(data))")


MODEL_REMEDY = ("a model's circuit is built for its calibration set: calibrate it on inputs that include tokens "
                "like these (calibration=), or leave them out")
"""What a model's refusal of tokens its interneurons cannot divide proposes (its weights and
division stages are the model's; the declared range is its calibration set's)."""


def encode_model(circuit: Circuit, model: Model, tokens, gains: CodeGains = DEFAULT_GAINS,
                 params: CellParams = DEFAULT_PARAMS, phi: str = "elu1", input_range=None,
                 calibration=None, timing: dict | None = None) -> ModelEncoding:
    """Compute every value of a model's circuit.

    Parameters
    ----------
    circuit : Circuit
        :func:`ctmhsa.circuits.transformer.model_circuit` of the model's sizes.
    model : Model
        The weights (attention without biases or skip path).
    tokens : ndarray, shape (n, de) or (T, n, de)
        The tokens shown (embedded), one set or a stream.
    gains : CodeGains
        ``rho_in`` (relays per unit of N(x)), the TRN pools' ``g_trn``, ``r_trn_min``,
        ``r_inh_max``; the attention's own gains.
    params : CellParams
        ``u`` (V per unit), ``tau_syn``.
    phi : str
        Feature map of the attention.
    input_range : InputRange, float or None
        The tokens the circuit is built for; ``None``: the statistics of ``tokens``.
    calibration : ndarray, shape (S, n, de), optional
        Token sets declared as the inputs the circuit is built for (e.g. a training set's): the
        gains and operating points are fixed from them instead of from Gaussian draws with the
        range's statistics (:func:`calibrate`). Never the tokens shown. A causal model's:
        sequences ``(S, T', de)``.
    timing : dict, optional
        A causal model's stream: ``presentation`` and ``dt`` (s), its memory's timing
        (:mod:`ctmhsa.mapping.kvmemory`; ``forget`` is the model's). ``tokens`` is then the
        sequence as one-token sets ``(T, 1, de)``.

    Raises
    ------
    ValueError
        Tokens outside the declared range.
    OperatingRangeError
        A division (an attention macrocolumn's or a token's normalisation) these tokens need that
        the circuit built for the range cannot exert.
    """
    tokens = np.asarray(tokens, float)
    sets = tokens[None] if tokens.ndim == 2 else tokens
    T, n, de = sets.shape
    if calibration is not None and input_range is None:
        # built for the calibration set: its statistics, and room above its largest token
        input_range = InputRange.from_tokens(np.asarray(calibration, float), margin=CALIBRATION_MARGIN)
    rng = as_input_range(input_range, sets.reshape(-1, de))
    rng.check(sets.reshape(-1, de), "X")
    u = params.u
    causal = model.causal
    if causal and (n != 1 or timing is None):
        raise ValueError("tokens: a causal model's circuit takes its sequence as one-token sets (T, 1, de) "
                         "and the stream's timing (presentation, dt)")
    if calibration is not None:
        calibration = np.asarray(calibration, float)
        if calibration.ndim != 3 or (calibration.shape[2] != de if causal else calibration.shape[1:] != (n, de)):
            want = f"sequences (S, T, de={de})" if causal else f"token sets (S, n={n}, de={de})"
            raise ValueError(f"calibration: expected {want}, got shape {calibration.shape}")
        rng.check(calibration.reshape(-1, de), "calibration")
    cal = calibrate(model, rng, n, phi, tokens=calibration, length=T)
    mem = None if not causal else dict(timing, forget=model.forget, tokens=T)
    blocks_meta = circuit.meta.blocks
    n_inh = circuit.meta.n_inh
    bounds = division_bounds(gains)
    # for the checks only (a causal model's as one-token sets, like the circuit's stream)
    ref = transformer_forward(sets[:, 0] if causal else sets, plain_model(model), phi=phi, stages=True)
    if causal:
        for st in ref["blocks"]:
            for k in ("x", "x_norm", "h", "h_norm", "hidden"):
                if k in st:
                    st[k] = st[k][:, None]
    vals = CircuitValues()
    rho, divisions, encs = {}, {}, []
    stream_rho = [STREAM_RATE / b["x_rms"] for b in cal["blocks"]] + [STREAM_RATE / cal["out_rms"]]
    rho["input"] = stream_rho[0]
    for l, (b, bm) in enumerate(zip(model.blocks, blocks_meta)):
        p, cb, st = block_prefix(l), cal["blocks"][l], ref["blocks"][l]
        # the attention area: encoded for normalised tokens (range known a priori), checked on these
        P = copies(circuit.population(p + "nucleus2"))
        sub = attention_circuit(n, de, bm["H"], bm["dk"], bm["dv"], n_inh, P=P, causal=causal,
                                normalize=model.memory_normalised)
        xn = st["x_norm"]
        t = 0
        rng_l = InputRange(norm=float(de), mean=cb["xn"].mean(axis=0), std=cb["xn"].std(axis=0))
        blk = Block(attn=b.attn)
        # the operating point centred on the calibration tokens' own drives (every set, every query)
        R_set = set_points(sub, gains)
        xc = cb["xn"].reshape(-1, n, de)
        t = 0   # the token set a refusal names (the first is encoded before the others are checked)
        try:
            if causal:   # the memory's operating point from the range, both ends of the stream (normalised)
                drive = (kvmemory.stream_drive(sub, blk, rng_l, phi, gains, model.forget, T)
                         if model.memory_normalised else None)
                # the memory's scale and its integrators' peak from the calibration's own sequences
                enc = encode(sub, xn[0], blk, gains=gains, params=params, phi=phi, input_range=rng_l, drive=drive,
                             timing=dict(mem, calibration=cb["xn"]), remedy=MODEL_REMEDY)
                kvmemory.check_stream(sub, enc.consts, xn, None, blk, phi, model.forget)
            else:
                drive = _central_drive(np.concatenate([pooled_drive(sub, x, x, blk, phi) / R_set for x in xc],
                                                      axis=1), gains)
                enc = encode(sub, xn[0], blk, gains=gains, params=params, phi=phi, input_range=rng_l, drive=drive,
                             remedy=MODEL_REMEDY)
            c = enc.consts
            for t in range(1, 1 if causal else T):
                check_tokens(sub, c["input_range"], c["operating"], c["R_set"], xn[t], None, blk, phi, MODEL_REMEDY)
        except OperatingRangeError as exc:
            raise OperatingRangeError(f"block {l} attention (N(X) of {'these tokens' if T == 1 else f'token set {t}'}): "
                                      f"{exc}") from None
        rho_h = STREAM_RATE / cb["h_rms"]
        encs.append(enc)
        add_block_values(vals, circuit, sub, enc, p)
        vals.params[p + "nucleus2"] = {"b": 0.0, "rho": rho_h}
        rho[p + "nucleus2"] = rho_h
        # normalising relays: drive u x from the stream, unshunted gain centring the division
        for what, relays in relay_sets(sub).items():
            normalising_relays(vals, circuit, p + relays, p + f"trn_{what}", p + f"drive_{what}", stream_rho[l],
                               cb["x_mean_abs"], np.abs(st["x"]).mean(axis=-1), f"X (block {l} input, TRN)",
                               gains, params, rho, divisions)
        _weights(vals, circuit, p + "residual", u / stream_rho[l])
        # with pt_out as encoded (u WO / rho_pt), nucleus 2 sits at u (x̃ + x) = u H
        if b.mlp is not None:
            normalising_relays(vals, circuit, p + "mlp_relay", p + "trn_mlp", p + "drive_mlp", rho_h, cb["h_mean_abs"],
                               np.abs(st["h"]).mean(axis=-1), f"H (block {l}, MLP relays, TRN)", gains, params, rho,
                               divisions)
            rho_a = min(HIDDEN_MEAN_RATE / cb["hidden_mean"], HIDDEN_PEAK_RATE / cb["hidden_peak"])
            hid = circuit.population(p + "hidden")
            _weights(vals, circuit, p + "w1", u * b.mlp.W1 / gains.rho_in)
            vals.params[p + "hidden"] = {"b": u * b.mlp.b1[hid.axis("d")], "rho": rho_a}
            rho[p + "hidden"] = rho_a
            _weights(vals, circuit, p + "w2", u * b.mlp.W2 / rho_a)
            _weights(vals, circuit, p + "skip", u / rho_h)
            out = circuit.population(p + "out")
            vals.params[p + "out"] = {"b": u * _signed_bias(out, b.mlp.b2), "rho": stream_rho[l + 1]}
            rho[p + "out"] = stream_rho[l + 1]
        else:
            # nucleus 2 is the next stream: its code is that stream's
            vals.params[p + "nucleus2"]["rho"] = stream_rho[l + 1]
            rho[p + "nucleus2"] = stream_rho[l + 1]
    if model.readout_W is not None:
        encode_readout(vals, circuit, model, cal, ref["output"] if causal else ref["pooled"], stream_rho[-1], n,
                       gains, params, rho, divisions)
    rates = input_rates(circuit, rho["input"], sets)
    vals.params["input"] = {"r_in": rates[0]}
    consts = dict(gains=gains.to_dict(), input_range=rng, u=u, phi=phi, bounds=bounds,
                  calibration={k: v for k, v in cal.items() if k != "blocks"}
                  | {"blocks": [{k: v for k, v in b.items() if k != "xn"} for b in cal["blocks"]]})
    return ModelEncoding(vals, encs, rho, divisions, consts, rates)


def add_block_values(vals: CircuitValues, circuit: Circuit, sub: Circuit, enc, prefix: str) -> None:
    """A block's attention values (``enc``, encoded on its unprefixed pathway ``sub``) into the
    model's ``vals`` under ``prefix``: weights averaging the copies the model's relays have,
    parameters of every population but the relay sets (driven by their streams, not ``r_in``)."""
    for name, w in enc.values.weights.items():   # encoded for one relay per value: average the copies
        src = sub.projections[name].source
        vals.weights[prefix + name] = w / (copies(circuit.population(prefix + src)) / copies(sub.population(src)))
    for name, prm in enc.values.params.items():
        if name not in RELAY_SETS.values():
            vals.params[prefix + name] = dict(prm)


def encode_readout(vals: CircuitValues, circuit: Circuit, model, cal: dict, pooled, stream_rho: float, rows: int,
                   gains: CodeGains, params: CellParams, rho: dict, divisions: dict) -> None:
    """Values of the read-out (``readout_pool``: the mean of the last stream's ``rows``;
    ``readout_relay``: its normalisation; ``classes``: ``R N(mean) + c``), from the calibration's
    scales ``cal`` (``pooled_rms``, ``pooled_mean_abs``, ``logits_rms``); the shown tokens'
    ``pooled`` means are checked against the normalisation's division. Into ``vals``, ``rho``
    and ``divisions``."""
    u = params.u
    rho_m = STREAM_RATE / cal["pooled_rms"]
    _weights(vals, circuit, "readout_mean", u / (stream_rho * rows))
    vals.params["readout_pool"] = {"b": 0.0, "rho": rho_m}
    rho["readout_pool"] = rho_m
    normalising_relays(vals, circuit, "readout_relay", "readout_trn", "readout_drive", rho_m, cal["pooled_mean_abs"],
                       np.abs(pooled).mean(axis=-1), "pooled output (read-out, TRN)", gains, params, rho, divisions)
    rho_c = STREAM_RATE / cal["logits_rms"]
    _weights(vals, circuit, "readout_classes", u * model.readout_W / gains.rho_in)
    cls = circuit.population("classes")
    vals.params["classes"] = {"b": u * _signed_bias(cls, model.readout_b), "rho": rho_c}
    rho["classes"] = rho_c


def _weights(vals: CircuitValues, circuit: Circuit, name: str, w) -> None:
    """``vals.weights[name]``: ``w`` over the signal, expanded over the ON/OFF cells."""
    vals.weights[name] = cell_weights(circuit, circuit.projections[name], w)


def _signed(circuit: Circuit, obs: dict, pop: str, rho: float) -> np.ndarray:
    p = circuit.population(pop)
    return signed_rate(p, obs[pop]["r"]) / rho


def decode_model(circuit: Circuit, menc: ModelEncoding, obs: dict) -> dict:
    """Every stage of every block from the observables (inverse of :func:`encode_model`).

    Returns
    -------
    dict
        ``blocks``: per block ``x``, ``x_norm`` (the mean of the three relay sets), ``x_norm_sets``
        (``{"q", "k", "v"}``), the attention stages of :func:`ctmhsa.mapping.decode.decode`
        (``q, k, v, s, kappa, Z, y, v_tilde``), ``h`` and, with an MLP, ``h_norm``, ``hidden``;
        ``out``; ``output`` (the last stream), and with a read-out ``pooled`` and ``logits``.
    """
    meta = circuit.meta
    blocks = []
    for l, bm in enumerate(meta.blocks):
        p = block_prefix(l)
        src = stream_source(l, meta.blocks)
        # the cortical stages, decoded as the block's pathway (its relays and nucleus 2 may have copies)
        sub = attention_circuit(meta.n, meta.de, bm["H"], bm["dk"], bm["dv"], meta.n_inh, with_nucleus2=False,
                                P=copies(circuit.population(p + "nucleus2")), causal=meta.causal,
                                normalize=meta.normalize, latents=meta.latents)
        sub_obs = {name: obs[p + name] for name in sub.populations if p + name in obs}
        st = decode(sub, menc.blocks[l], sub_obs)
        st["h"] = _signed(circuit, obs, p + "nucleus2", menc.rho[p + "nucleus2"])
        st["x"] = _signed(circuit, obs, src, menc.rho[src])
        sets = {what: _signed(circuit, obs, p + relays, menc.rho[p + relays])
                for what, relays in relay_sets(circuit, p).items()}
        if meta.latents:   # a Co4 block: its query relays carry N(latents), the others N(X)
            st["latents_norm"] = sets.pop("q")
        st["x_norm_sets"] = sets
        st["x_norm"] = np.mean(list(sets.values()), axis=0)
        if bm["dh"]:
            st["h_norm"] = _signed(circuit, obs, p + "mlp_relay", menc.rho[p + "mlp_relay"])
            hid = circuit.population(p + "hidden")
            st["hidden"] = per_dimension(hid, obs[p + "hidden"]["r"]) / menc.rho[p + "hidden"]
            st["out"] = _signed(circuit, obs, p + "out", menc.rho[p + "out"])
        else:
            st["out"] = st["h"]
        blocks.append(st)
    out = dict(blocks=blocks, output=blocks[-1]["out"])
    if meta.classes:
        out["pooled"] = _signed(circuit, obs, "readout_pool", menc.rho["readout_pool"])
        out["logits"] = _signed(circuit, obs, "classes", menc.rho["classes"])
    return out
