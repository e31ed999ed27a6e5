"""Values, decoding, timing and reference of the key-value memory over a stream
(``circuit="memory"``, :mod:`ctmhsa.circuits.kvmemory`).

The encoding is the linear circuit's at one token slot (``ctmhsa.mapping.encode._key_value_memory``:
write cells ``rho_outer φ(k_f) [±v_c]_+``, read-out cells ``∝ φ(q_f) x apical``) with the memory
cells made integrators. Their constants come from the declared timing alone (step dt,
forgetting λ, the write window ``s``; never the tokens): while the gate is open the integrators
are stepped by forward Euler, ``U ← a U + (dt/τ_w) I_s``, and hold still otherwise, with::

    a   = λ^(dt/s)                       (the s/dt steps of a write keep exactly λ: leak = (1 - a)/dt)
    τ_w = dt Σ_{i=0..s/dt-1} a^i         (and add exactly one unit, u v φ(k)ᵀ / h)

so that after the write of token t the integrators hold ``u M_t / h`` (:func:`horizon`: a
weighted mean over the stream, as the linear circuit's memory holds the mean over its tokens).
While token t is shown they hold ``u M_{t-1} / h``; the recall synapses weigh it by λ
(``λ u / rho_memory``) and the bypass (write cells -> L5 apical) adds the current token's product
in the memory's units (weight ``u / (h rho_outer)``, as the write), so L5's apical dendrites sum
``u (λ M_{t-1} + v_t φ(k_t)ᵀ) / h = u M_t / h`` and the read-out is ``M_t φ(q_t)``
(normalised: divided by the interneurons, which hold ``Σ_f z_t,f φ(q_t,f)`` at the set point, as
in the linear circuit).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ctmhsa.circuits.kvmemory import WRITE_WINDOW
from ctmhsa.circuits.parts import get_part, register_hook, register_values

from . import noise, operating  # noqa: F401 - register the linear circuit's hooks reused below
from .decode import _decode_key_value_memory, per_dimension, signed_rate
from .encode import _key_value_memory, relay_rates
from .operating import check_division, expected_drive, set_points
from ctmhsa.maths.reference import FEATURE_MAPS
from ctmhsa.maths.reference import memory_attention

__all__ = ["READ_SETTLE", "read_lag", "read_settle", "forget_factor", "horizon", "memory_scale", "MEMORY_PEAK_RATE",
           "scale_draws", "peak_rates", "capped", "READ_PATH", "peak_rate", "integrator_constants",
           "check_stream", "token_lead", "gate_table", "stream_drive", "stream_tables",
           "reference_stages", "to_stream", "token_times"]

# The gate relay fires at 1/dt while the write window is open (0 otherwise) and its synapses weigh
# dt, so the integrators' gate input is exactly 1 or 0: at the rate level its rate, at the escape
# level its spike in every step of the window (p = 1; ctmhsa.circuits.kvmemory).


def forget_factor(presentation: float, tau_mem: float | None) -> float:
    """λ = exp(-presentation / tau_mem), the fraction of the memory kept per token (1: ``tau_mem=None``)."""
    return 1.0 if tau_mem is None else math.exp(-float(presentation) / float(tau_mem))


def horizon(forget: float, tokens: int) -> float:
    """``h = Σ_{j<T} λ^j``: the most tokens' worth the memory holds over a stream of ``T``
    tokens (T at λ = 1). The integrators hold ``M / h`` (a weighted mean, as the linear circuit's
    memory holds the mean over its m tokens), so their rates do not grow with the stream: a
    structural scale (the stream's length and λ), never the tokens'."""
    return float(np.sum(float(forget) ** np.arange(int(tokens))))


SCALE_SAMPLES = 512
"""Tokens drawn from the declared range (a fixed seed) to estimate :func:`memory_scale`."""


def memory_scale(weights, input_range, phi: str, forget: float, tokens: int, de: int,
                 samples: int = SCALE_SAMPLES, tokens_drawn=None) -> float:
    """``s``: how many tokens' worth of one token's product ``v φ(k)ᵀ`` the memory holds, in
    root mean square, after a stream of ``tokens`` independent tokens drawn from the declared
    range (:func:`ctmhsa.maths.inputs.sample_tokens`, seed 2: the weights and the range, never
    the tokens shown). With ``μ`` the mean product and ``E‖p‖²`` its mean square (over heads),
    ``s² = (h² ‖μ‖² + h₂ (E‖p‖² − ‖μ‖²)) / E‖p‖²``, ``h = Σ λ^j`` (:func:`horizon`),
    ``h₂ = Σ λ^{2j}``: between ``√h₂`` (products of random sign, which add as a random walk)
    and ``h`` (products that all agree, the worst case).

    The unnormalised memory holds ``M / s`` and its read-out encodes ``ṽ / s``, so that a
    random stream keeps its cells at the rates of one token whatever its length; a stream
    whose products agree reads up to ``h / s`` higher (``√T`` at λ = 1 for zero-mean products),
    which the operating report flags where a cell saturates. ``tokens_drawn`` (``(S, de)``, a
    calibration set's tokens) replaces the draws from the range."""
    x = scale_draws(input_range, de, samples) if tokens_drawn is None else np.asarray(tokens_drawn, float)
    f = FEATURE_MAPS[phi][0]
    prod = np.einsum("hce,se->shc", weights.WV, x)[..., :, None] * f(np.einsum("hfe,se->shf", weights.WK, x))[..., None, :]
    mean_sq = float(np.mean(np.sum(prod ** 2, axis=(1, 2, 3))))
    sq_mean = float(np.sum(prod.mean(axis=0) ** 2))
    lam = float(forget) ** np.arange(int(tokens))
    h, h2 = float(lam.sum()), float(np.sum(lam ** 2))
    if mean_sq <= 0:
        return h
    return float(np.sqrt((h * h * sq_mean + h2 * max(mean_sq - sq_mean, 0.0)) / mean_sq))


MEMORY_PEAK_RATE = 500.0
"""Hz: the most a cell of the memory's read path (integrators, L5 read-out, L5 PT, nucleus 2)
may fire on the streams its scale is calibrated on (:func:`peak_rates`); half of the escape
level's ``1/dt`` at 1 ms, so that a stream twice the calibration's largest stays below the one
spike per step an escape cell can fire. The shipped character model's read path fired up to
1,700 Hz on its calibration strings at the RMS scale alone and saturated on the validation
play (integrators and read-out cells at 1 kHz; ṽ of those tokens 0.3-0.7 off)."""


def scale_draws(input_range, de: int, samples: int = SCALE_SAMPLES) -> np.ndarray:
    """The tokens a memory's scale is estimated on where no calibration set is given: ``samples``
    drawn from the declared range (:func:`ctmhsa.maths.inputs.sample_tokens`, seed 2), ``(S, de)``."""
    from ctmhsa.maths.inputs import sample_tokens

    return sample_tokens(input_range, de, (int(samples),), seed=2)


def peak_rates(weights, tokens_drawn, phi: str, forget: float, tokens: int, gains, rho_l23) -> dict:
    """The largest rate (Hz) of each population of the read path at a memory scale of 1, over streams of ``tokens``
    tokens cut in order from ``tokens_drawn`` (``(S, de)``: a calibration set's sequences one
    after the other, or draws of the declared range; at least one stream), each from an empty
    memory: integrators ``rho_memory |M|``, read-out ``rho_l23 φ(q_f) |M_cf|``, L5 PT
    ``rho_pt |ṽ| / dk`` and nucleus 2 ``rho_out |x̃| / dk`` (the unnormalised codes of
    :func:`ctmhsa.mapping.encode._key_value_memory`, all divided by the scale). The weights and
    those tokens, never the tokens shown."""
    x = np.asarray(tokens_drawn, float)
    T = max(1, min(int(tokens), len(x)))
    f = FEATURE_MAPS[phi][0]
    k = f(np.einsum("hfe,se->shf", weights.WK, x))
    q = f(np.einsum("hfe,se->shf", weights.WQ, x))
    v = np.einsum("hce,se->shc", weights.WV, x)
    dk, rho = k.shape[-1], np.asarray(rho_l23, float).reshape(-1)[:, None, None]
    top = dict(memory=0.0, readout=0.0, l5pt=0.0, nucleus2=0.0)
    for i in range(len(x) // T):
        M = np.zeros(v.shape[1:] + k.shape[-1:])                                     # (H, dv, dk)
        for t in range(i * T, (i + 1) * T):
            M = float(forget) * M + v[t][..., :, None] * k[t][..., None, :]
            vt = np.einsum("hcf,hf->hc", M, q[t])
            top["memory"] = max(top["memory"], float(np.max(np.abs(M))))
            top["readout"] = max(top["readout"], float(np.max(rho * np.abs(M) * q[t][:, None, :])))
            top["l5pt"] = max(top["l5pt"], float(np.max(np.abs(vt))))
            top["nucleus2"] = max(top["nucleus2"], float(np.max(np.abs(np.einsum("hec,hc->e", weights.WO, vt)))))
    return dict(memory=gains.rho_memory * top["memory"], readout=top["readout"], l5pt=gains.rho_pt * top["l5pt"] / dk,
                nucleus2=gains.rho_out * top["nucleus2"] / dk)


def capped(gain: float, peak: float, top: float = MEMORY_PEAK_RATE) -> float:
    """``gain`` lowered by ``top / peak`` where ``peak`` (Hz at ``gain``) is above ``top`` (Hz)."""
    return float(gain) * min(1.0, float(top) / float(peak)) if peak > 0 else float(gain)


READ_PATH = ("memory", "readout", "l5pt", "nucleus2")
"""The populations of the memory's read path (:func:`peak_rates`)."""


def peak_rate(circuit, level: str, dt: float) -> float:
    """Hz: the most a cell of the memory's read path may fire above its baseline on the streams
    its scale is calibrated on. :data:`MEMORY_PEAK_RATE` for cells without a baseline; for lif
    somata the least signal their types' laws span (:func:`ctmhsa.neurons.conductance.rate_range_of`
    at 0.5 ms: 164 Hz above L5 PT's 1 Hz baseline, 167 Hz above the default soma's 20 Hz). Half of it (as the escape cells keep half of
    1/dt) left the typical cell 2-5 Hz above its baseline, whose spikes then dominated the
    counting noise (T = 4, 16 copies, 1 s per token: x̃ floor 0.86 against 0.60 with all of it); a
    cell of a stream past the calibration's largest is flagged by the operating report."""
    from ctmhsa.neurons.models import get_model

    types = {circuit.population(p).cell_type for p in READ_PATH if p in circuit.populations}
    lif = [ct for ct in sorted(types) if get_model(level, ct).lif_soma]
    if not lif:
        return MEMORY_PEAK_RATE
    from ctmhsa.neurons.conductance import rate_range_of
    from ctmhsa.neurons.params import lif_soma

    return min(rate_range_of(ct, dt)[1] - lif_soma(ct).r_base for ct in lif)


def integrator_constants(forget: float, dt: float, window: float = WRITE_WINDOW) -> dict:
    """The memory cells' ``leak`` (Hz) and write time ``tau_w`` (s) for forward Euler steps of
    ``dt`` in a write window (module docstring): exact in the discrete time the circuit runs in."""
    steps = int(round(window / dt))
    a = float(forget) ** (1.0 / steps)
    return dict(leak=(1.0 - a) / dt, tau_w=dt * float(np.sum(a ** np.arange(steps))))


@register_values("memory")
def _stream_memory(circuit, vals, gains, ctx):
    """The linear circuit's values at one token slot, the integrators' constants from the
    declared timing (``ctx["timing"]``: presentation, dt, forget), the gate and the bypass."""
    timing = ctx.get("timing")
    if timing is None:
        raise ValueError("timing: the memory circuit's integrators need the stream's presentation, dt and "
                         "forgetting (ctmhsa.sims.build_mhsa gives them)")
    normalised = "interneuron" in circuit.populations
    h = horizon(timing["forget"], timing["tokens"])
    # the memory's units: M / s unnormalised (its RMS over a random stream of the declared range,
    # or of the calibration's tokens, memory_scale), M / h and z / h normalised (the division's
    # range spans the whole horizon); no cell of the read path above its peak_rate (below)
    drawn = timing.get("calibration")
    if drawn is None and not normalised:
        drawn = scale_draws(ctx["input_range"], circuit.meta.de)
    s = h if normalised else memory_scale(ctx["weights"], ctx["input_range"], ctx["phi"], timing["forget"],
                                          timing["tokens"], circuit.meta.de, tokens_drawn=drawn)
    if not normalised:   # no cell of the read path above its peak rate (peak_rate) on those streams:
        # the read-out through the scale, the integrators, L5 PT and nucleus 2 through their own gains
        peaks = peak_rates(ctx["weights"], drawn, ctx["phi"], timing["forget"], timing["tokens"], gains,
                           ctx["rho_l23"])
        top = timing.get("peak_rate", MEMORY_PEAK_RATE)
        s = max(s, peaks["readout"] / top)
        gains = replace(gains, rho_memory=capped(gains.rho_memory, peaks["memory"] / s, top))
    gains, R_set = _key_value_memory(circuit, vals, gains, ctx)
    const = integrator_constants(timing["forget"], timing["dt"])
    ctx["timing"] = {**{k: v for k, v in timing.items() if k != "calibration"}, "scale": s}   # for decoding
    for z in ("", "_z"):
        if f"memory{z}" in circuit.populations:
            vals.params[f"memory{z}"] = dict(const, rho=gains.rho_memory, tau_gate=timing["dt"])
            vals.weights[f"recall{z}"] = timing["forget"] * vals.weights[f"recall{z}"]   # λ M_{t-1}
            vals.weights[f"gate{z}"] = timing["dt"]
            vals.weights[f"write{z}"] = vals.weights[f"write{z}"] / s                  # M / s
            vals.weights[f"bypass{z}"] = vals.weights[f"write{z}"]   # the current product, in the memory's units
    if not normalised:   # Σ_f readout = rho_l23 ṽ / s, ṽ sums s tokens' worth
        R_set = R_set / s
        gains = replace(gains, rho_pt=capped(gains.rho_pt / s, peaks["l5pt"] / s, top),
                        rho_out=capped(gains.rho_out / s, peaks["nucleus2"] / s, top))
    if "l5pt" in circuit.populations:
        vals.weights["readout_pt"] = ctx["u"] / R_set
    vals.params["nucleus_gate"] = {"r_in": 0.0}
    return gains, R_set


@register_hook("memory", "decode")
def _decode_stream_memory(circuit, encoding, obs):
    """q, k, v, Z as the linear circuit's; the memory as L5 reads it, ``S = M_tᵀ`` (H, dk, dv):
    λ times the integrators' ``M_{t-1}`` plus the write cells' current ``v_t φ(k_t)ᵀ`` (and ``z_t``
    alike)."""
    st = _decode_key_value_memory(circuit, encoding, obs)
    pops, g, timing = circuit.populations, encoding.consts["gains"], encoding.consts["timing"]
    lam, h = timing["forget"], horizon(timing["forget"], timing["tokens"])
    st["S"] = lam * timing.get("scale", h) * st["S"] + signed_rate(pops["outer"], obs["outer"]["r"])[:, 0] / g["rho_outer"]
    if "memory_z" in pops:
        st["z"] = lam * h * st["z"] + per_dimension(pops["outer_z"], obs["outer_z"]["r"])[:, 0] / g["rho_outer"]
        st["Z"] = h * st["Z"]   # 1 + g = rho_l23 Z / (h R_set)
    return st


# the operating range: as the linear circuit's at one token slot
for _hook in ("pool_cells", "pooled_drive"):
    register_hook("memory", _hook)(get_part("linear").hooks[_hook])


@register_hook("memory", "noise")
def _stream_memory_noise(circuit, c, obs, fano, T, stages, f, df, out, weights=None):
    """The linear circuit's count noise at one token slot (:func:`ctmhsa.mapping.noise`), with
    the integrators' counts in the memory's units: L5 reads ``λ M_{t-1}`` from integrators that
    hold it divided by the memory's scale (``s``, or ``h`` normalised), so their count variance
    enters S, z and ṽ times ``(λ s)²``, where the linear circuit's memory of one token enters once."""
    get_part("linear").hooks["noise"](circuit, c, obs, fano, T, stages, f, df, out, weights)
    timing, g, pops = c["timing"], c["gains"], circuit.populations
    a2 = (timing["forget"] * timing.get("scale", horizon(timing["forget"], timing["tokens"]))) ** 2
    extra = {}
    for z in ("", "_z"):
        if f"memory{z}" in pops:
            p = pops[f"memory{z}"]
            extra[z] = (a2 - 1.0) * noise._rate_var(p, obs[f"memory{z}"], fano[f"memory{z}"], T) / g["rho_memory"] ** 2
    out["S"] = out["S"] + extra[""]
    normalised = "_z" in extra
    Z = stages["Z"] if normalised else np.ones(stages["q"].shape[:2])
    w = f(stages["q"]) / Z[..., None]
    if normalised:   # Z = Σ_f φ(q_f) z_f; δṽ_c = Σ_f φ(q_f) (δS_fc − ṽ_c δz_f) / Z
        out["z"] = out["z"] + extra["_z"]
        out["Z"] = out["Z"] + np.einsum("hnf,hf->hn", f(stages["q"]) ** 2, extra["_z"])
    if "l5pt" in pops:
        vt = np.einsum("hnf,hfc->hnc", w ** 2, extra[""])
        if normalised:
            vt = vt + stages["v_tilde"] ** 2 * np.einsum("hnf,hf->hn", w ** 2, extra["_z"])[..., None]
        out["v_tilde"] = out["v_tilde"] + vt


def stream_drive(circuit, weights, input_range, phi: str, gains, forget: float, tokens: int) -> np.ndarray:
    """The pooled drives per Hz of set point the normalisation's operating point is centred on
    (``encode(drive=...)``, :func:`ctmhsa.mapping.operating.operating_point`): the read-out-z cells
    pool ``φ(q_t) · z_t / h``, which grows over the stream from one token's worth (``1/h`` of
    the full memory) to the full memory; both ends, from the weights, the declared range and
    the stream's length (:func:`horizon`), never the tokens. ``(H, 2)``."""
    full = expected_drive(circuit, weights, input_range, phi) / set_points(circuit, gains)
    return np.concatenate([full / horizon(forget, tokens), full], axis=1)


def check_stream(circuit, c, X, Y, block, phi: str, forget: float) -> None:
    """Refuse a stream the built circuit does not take (a check, never a setting): tokens outside
    the declared range, or (normalised) a division ``φ(q_t) · z_t / h`` its interneurons cannot
    exert at the fixed gain, for any token t."""
    rng, Yk = c["input_range"], X if Y is None else Y
    rng.check(X[:, 0], "X")
    if Y is not None:
        rng.check(Y[:, 0], "Y")
    if c["operating"] is None:
        return
    f = FEATURE_MAPS[phi][0]
    fq = f(np.einsum("hce,te->htc", block.WQ, X[:, 0]))
    fk = f(np.einsum("hce,te->htc", block.WK, Yk[:, 0]))
    z = np.zeros(fk.shape[::2])
    for t in range(X.shape[0]):
        z = forget * z + fk[:, t]
        drive = np.einsum("hc,hc->h", fq[:, t], z)[:, None] / horizon(forget, X.shape[0])
        try:
            check_division(c["operating"], drive / c["R_set"], "X, WQ, WK")
        except ValueError as exc:
            raise type(exc)(f"X[{t}] (token {t}): {exc}") from None


def stream_tables(circuit, enc, X, Y, block, phi: str, presentation: float, warmup: float) -> dict:
    """Relay population -> ``(rates (rows, N), period, shift)`` (:func:`ctmhsa.circuits.instantiate.instantiate`):
    token t on the matrix and core relays over ``[warmup + t P + s, warmup + (t + 1) P + s)`` (the
    first token also before), so that the state read at ``warmup + (t + 1) P`` has settled on
    token t and the write gate opens after it, over ``[warmup + t P, warmup + t P + s)`` for t >= 1
    (``s`` = :data:`ctmhsa.circuits.kvmemory.WRITE_WINDOW`; the gate relay at ``1/dt``, every copy,
    so that at the escape level it spikes in every step, and the integrators open one step
    later). Every token is checked first."""
    c, P, W = enc.consts, float(presentation), float(warmup)
    lead, shift = token_lead(P, W)
    check_stream(circuit, c, X, Y, block, phi, c["timing"]["forget"])
    rows: dict = {}
    for t in range(X.shape[0]):
        Xt, Yt = X[t], None if Y is None else Y[t]
        for pop, vals in relay_rates(circuit, enc.codes["tokens"], Xt, Yt, c["onoff"]).items():
            rows.setdefault(pop, []).extend([vals["r_in"]] * (1 + (lead if t == 0 else 0)))
    out = {pop: (np.stack(r), P, shift) for pop, r in rows.items()}
    out["nucleus_gate"] = gate_table(X.shape[0], P, W, c["timing"]["dt"], circuit.populations["nucleus_gate"].N)
    return out


def token_lead(presentation: float, warmup: float) -> tuple:
    """``(lead, shift)`` of a stream's token table (:func:`stream_tables`): rows of the first
    token before the stream (``lead``) and the table's time shift (s), so that token t is on the
    relays over ``[warmup + t P + s, warmup + (t + 1) P + s)`` (``s`` = :data:`WRITE_WINDOW`)."""
    P, W, s = float(presentation), float(warmup), WRITE_WINDOW
    lead = int(math.ceil((W + s) / P - 1e-9))
    return lead, lead * P - W - s


def gate_table(tokens: int, presentation: float, warmup: float, dt: float, cells: int) -> tuple:
    """The write gate's table ``(rates (steps, cells), dt, 0)``: one row per step, ``1/dt`` over the
    first :data:`WRITE_WINDOW` of every presentation after the first (writing the token before
    it), else 0 — a declared timing signal, the same for any tokens."""
    P, W = float(presentation), float(warmup)
    steps = np.arange(int(round((W + int(tokens) * P) / dt)) + 1) - int(round(W / dt))
    period, window = int(round(P / dt)), int(round(WRITE_WINDOW / dt))
    gate = np.where((steps >= period) & (steps % period < window), 1.0 / dt, 0.0)
    return np.repeat(gate[:, None], int(cells), axis=1), dt, 0.0


READ_SETTLE = 0.08
"""Time (s) the read-out cascade (L5 dendrite and soma, L5 PT, nucleus 2: four 10 ms stages, and
their synaptic currents at the spiking levels) takes to follow a new token (:func:`read_lag`)."""


def read_lag(presentation: float, settle: float = READ_SETTLE) -> float:
    """Start (s, after a presentation's start) of the memory circuit's decoding window at the
    spiking levels: the token switches ``WRITE_WINDOW`` into its presentation, and the read-out
    cascade follows it over :data:`READ_SETTLE`; at most half the presentation. The pathway's
    default (:func:`ctmhsa.sims.options.decode_lag`, 50 ms) opened the window 30 ms after the
    switch, and about a quarter of the previous token's output leaked into each reading (escape,
    T = 8, d = 8, H = 2, P = 16 copies, 0.2 s: x̃ NRMSE 0.43 against a floor of 0.24; with this
    lag, 0.10 s, 0.34 against 0.30). ``settle`` (s): the cascade's settling time where its cells
    are slower (the lif somata's couplings, :func:`read_settle`)."""
    return min(WRITE_WINDOW + float(settle), 0.5 * float(presentation))


def read_settle(tau: float) -> float:
    """The read-out cascade's settling time (s) for cells whose slowest time constant is ``tau``
    (s): :data:`READ_SETTLE` (eight 10 ms constants), or eight of ``tau`` where it is longer."""
    return max(READ_SETTLE, 8.0 * float(tau))


def token_times(t: int, presentation: float, warmup: float = 0.0) -> dict:
    """When token ``t`` (0-based) is in the circuit, on the network clock (s; t = 0 at the start
    of the warm-up, which is 0 at the rate level; :func:`stream_tables`), for timing a
    :class:`ctmhsa.perturb.Silence`. With ``P`` the presentation, ``W`` the warm-up and ``s`` =
    :data:`ctmhsa.circuits.kvmemory.WRITE_WINDOW`:

    - ``shown = (W + t P + s, W + (t + 1) P + s)``: on the thalamic relays (token 0 from 0 on).
      A Silence over it acts on token t's read and write and on no other token's;
    - ``read = W + (t + 1) P``: the state decoded for token t (``res.x_tilde[t]``, the end of
      its decoding window ``res.diagnostics["stream"]``);
    - ``write = (W + (t + 1) P, W + (t + 1) P + s)``: the gate adds token t's product to the
      integrators (after the run's end for the last token, which is read but never written).

    A Silence that starts or stops inside a write window cuts that write short (a part of the
    token written): start and stop a Silence of the write cells or the gate outside them."""
    P, W, s = float(presentation), float(warmup), WRITE_WINDOW
    read = W + (t + 1) * P
    return dict(shown=(W + t * P + s, read + s), read=read, write=(read, read + s))


def to_stream(ref: dict) -> dict:
    """:func:`ctmhsa.maths.reference.memory_attention`'s stages per token, on the circuit's
    grid (token first, one token slot): ``q, k (T, H, 1, dk)``, ``v, v_tilde (T, H, 1, dv)``,
    ``S (T, H, dk, dv)``, ``z (T, H, dk)``, ``Z (T, H, 1)``, ``x_tilde (T, 1, de)``."""
    out = {key: np.swapaxes(ref[key], 0, 1)[:, :, None] for key in ("q", "k", "v", "v_tilde")}
    out["S"] = np.swapaxes(np.swapaxes(ref["M"], -1, -2), 0, 1)
    out["x_tilde"] = ref["x_tilde"][:, None]
    if "z" in ref:
        out["z"] = np.swapaxes(ref["z"], 0, 1)
        out["Z"] = np.swapaxes(ref["Z"], 0, 1)[:, :, None]
    return out


def reference_stages(X, WQ, WK, WV, WO, forget: float, normalize: bool, Y=None, phi: str = "elu1", WS=None) -> dict:
    """The exact stages of the stream (``X (T, 1, de)``, ``Y`` alike), for comparison only:
    :func:`ctmhsa.maths.reference.memory_attention` on the circuit's grid (:func:`to_stream`; no ``WS``)."""
    return to_stream(memory_attention(X[:, 0], WQ, WK, WV, WO, forget=forget, normalize=normalize,
                                      Y=None if Y is None else Y[:, 0], phi=phi))


@register_hook("memory", "reference")
def _memory_reference(arrays: dict, phi: str, causal: bool, normalize: bool, forget: float = 1.0) -> dict:
    """The memory circuit's reference (:meth:`ctmhsa.circuits.parts.Part.reference`): every
    stage per token (causal by construction)."""
    return reference_stages(**arrays, forget=forget, normalize=normalize, phi=phi)


@register_hook("memory", "carried_noise")
def _carried_write_noise(circuit, encoding, snaps: list, per: list, fano: dict, weights, phi: str) -> None:
    """The write cells' count noise that the integrators carry from token to token, added in
    place to every presentation's noise variances (``per[t]["noise"]``; the read-out's own floor
    counts only the spikes of its window). Token t's write integrates the write cells' spikes
    over the gate's window ``WRITE_WINDOW`` (their rates those of token t's window: the relays
    still show it), a variance ``w_t`` per memory entry in the products' units; the memory keeps
    ``V_t = λ² V_{t-1} + w_t``, and token t reads ``λ M_{t-1}``: ``λ² V_{t-1}`` on S, through
    ``φ(q_t)`` (over ``Z``) on ṽ, through ``W_O`` on x̃. Fano factors as the window's
    (:func:`ctmhsa.mapping.noise.stage_noise_variance`)."""
    pops, c = circuit.populations, encoding.consts
    g, lam = c["gains"], c["timing"]["forget"]
    f = FEATURE_MAPS[phi][0]
    normalised = "memory_z" in pops
    V, Vz = 0.0, 0.0                                        # carried variances of M (H, dk, dv) and z (H, dk)
    for snap, p in zip(snaps, per):
        nv, st = p["noise"], p["stages"]
        if np.ndim(V):
            carried = lam ** 2 * V
            nv["S"] = nv["S"] + carried
            w = f(st["q"]) / (st["Z"][..., None] if normalised else 1.0)   # (H, n, dk)
            vt = np.einsum("hnf,hfc->hnc", w ** 2, carried)
            if normalised:   # δṽ = Σ_f φ(q_f) (δS_fc − ṽ_c δz_f) / Z; Z = Σ_f φ(q_f) z_f
                carried_z = lam ** 2 * Vz
                nv["z"] = nv["z"] + carried_z
                nv["Z"] = nv["Z"] + np.einsum("hnf,hf->hn", f(st["q"]) ** 2, carried_z)
                vt = vt + st["v_tilde"] ** 2 * np.einsum("hnf,hf->hn", w ** 2, carried_z)[..., None]
            nv["v_tilde"] = nv["v_tilde"] + vt
            if "x_tilde" in nv:
                nv["x_tilde"] = nv["x_tilde"] + np.einsum("hec,hnc->ne", np.asarray(weights.WO) ** 2, vt)
        fw = noise._resolved_fano(circuit, snap, fano, WRITE_WINDOW)

        def write(pop):   # one write's variance per entry, in the products' units
            return noise._rate_var(pops[pop], snap[pop], fw[pop], WRITE_WINDOW)[:, 0] / g["rho_outer"] ** 2

        V = lam ** 2 * V + write("outer")
        if normalised:
            Vz = lam ** 2 * Vz + write("outer_z")
