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

__all__ = ["READ_SETTLE", "read_lag", "forget_factor", "horizon", "integrator_constants", "stream_drive", "stream_tables",
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
    gains, R_set = _key_value_memory(circuit, vals, gains, ctx)
    const = integrator_constants(timing["forget"], timing["dt"])
    h = horizon(timing["forget"], timing["tokens"])
    for z in ("", "_z"):
        if f"memory{z}" in circuit.populations:
            vals.params[f"memory{z}"] = dict(const, rho=gains.rho_memory, tau_gate=timing["dt"])
            vals.weights[f"recall{z}"] = timing["forget"] * vals.weights[f"recall{z}"]   # λ M_{t-1}
            vals.weights[f"gate{z}"] = timing["dt"]
            vals.weights[f"write{z}"] = vals.weights[f"write{z}"] / h                  # M / h
            vals.weights[f"bypass{z}"] = vals.weights[f"write{z}"]   # the current product, in the memory's units
    if "interneuron" not in circuit.populations:   # Σ_f readout = rho_l23 ṽ / h, ṽ sums h tokens' worth
        R_set = R_set / h
        gains = replace(gains, rho_pt=gains.rho_pt / h, rho_out=gains.rho_out / h)
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
    st["S"] = lam * h * st["S"] + signed_rate(pops["outer"], obs["outer"]["r"])[:, 0] / g["rho_outer"]
    if "memory_z" in pops:
        st["z"] = lam * h * st["z"] + per_dimension(pops["outer_z"], obs["outer_z"]["r"])[:, 0] / g["rho_outer"]
        st["Z"] = h * st["Z"]   # 1 + g = rho_l23 Z / (h R_set)
    return st


# the operating range and noise: as the linear circuit's at one token slot
for _hook in ("pool_cells", "pooled_drive", "noise"):
    register_hook("memory", _hook)(get_part("linear").hooks[_hook])


def stream_drive(circuit, weights, input_range, phi: str, gains, forget: float, tokens: int) -> np.ndarray:
    """The pooled drives per Hz of set point the normalisation's operating point is centred on
    (``encode(drive=...)``, :func:`ctmhsa.mapping.operating.operating_point`): the read-out-z cells
    pool ``φ(q_t) · z_t / h``, which grows over the stream from one token's worth (``1/h`` of
    the full memory) to the full memory; both ends, from the weights, the declared range and
    the stream's length (:func:`horizon`), never the tokens. ``(H, 2)``."""
    full = expected_drive(circuit, weights, input_range, phi) / set_points(circuit, gains)
    return np.concatenate([full / horizon(forget, tokens), full], axis=1)


def _check_stream(circuit, c, X, Y, block, phi: str, forget: float) -> None:
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
    c, P, W, s = enc.consts, float(presentation), float(warmup), WRITE_WINDOW
    lead = int(math.ceil((W + s) / P - 1e-9))
    _check_stream(circuit, c, X, Y, block, phi, c["timing"]["forget"])
    rows: dict = {}
    for t in range(X.shape[0]):
        Xt, Yt = X[t], None if Y is None else Y[t]
        for pop, vals in relay_rates(circuit, enc.codes["tokens"], Xt, Yt, c["onoff"]).items():
            rows.setdefault(pop, []).extend([vals["r_in"]] * (1 + (lead if t == 0 else 0)))
    out = {pop: (np.stack(r), P, lead * P - W - s) for pop, r in rows.items()}
    # the gate, one row per step: open over the first s of every presentation after the first
    dt = c["timing"]["dt"]
    steps = np.arange(int(round((W + X.shape[0] * P) / dt)) + 1) - int(round(W / dt))
    period, window = int(round(P / dt)), int(round(s / dt))
    gate = np.where((steps >= period) & (steps % period < window), 1.0 / dt, 0.0)
    out["nucleus_gate"] = (np.repeat(gate[:, None], circuit.populations["nucleus_gate"].N, axis=1), dt, 0.0)
    return out


READ_SETTLE = 0.08
"""Time (s) the read-out cascade (L5 dendrite and soma, L5 PT, nucleus 2: four 10 ms stages, and
their synaptic currents at the spiking levels) takes to follow a new token (:func:`read_lag`)."""


def read_lag(presentation: float) -> float:
    """Start (s, after a presentation's start) of the memory circuit's decoding window at the
    spiking levels: the token switches ``WRITE_WINDOW`` into its presentation, and the read-out
    cascade follows it over :data:`READ_SETTLE`; at most half the presentation. The pathway's
    default (:func:`ctmhsa.sims.options.decode_lag`, 50 ms) opened the window 30 ms after the
    switch, and about a quarter of the previous token's output leaked into each reading (escape,
    T = 8, d = 8, H = 2, P = 16 copies, 0.2 s: x̃ NRMSE 0.43 against a floor of 0.24; with this
    lag, 0.10 s, 0.34 against 0.30)."""
    return min(WRITE_WINDOW + READ_SETTLE, 0.5 * float(presentation))


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
