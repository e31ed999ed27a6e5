"""Conductance-based adaptive integrate-and-fire somata in a high-conductance state.

The spike generator of the ``lif`` level (see docs/lif.md):

- membrane: C_m dv/dt = g_L (E_L − v) + g_e (E_e − v) + g_i (E_i − v) + I − w, threshold V_th,
  reset V_r, absolute refractoriness τ_ref;
- spike-frequency adaptation (Brette & Gerstner 2005, the AdEx without its exponential):
  τ_w dw/dt = a (v − E_L) − w, w += b at every spike. Strong, slow adaptation acts as negative
  feedback on the rate and linearises the f–I curve (Ermentrout 1998, *Neural Comput.* 10:1721);
- balanced synaptic background: the point-conductance model of Destexhe et al. (2001,
  *Neuroscience* 107:13): excitatory and inhibitory conductances g_e, g_i are Ornstein–Uhlenbeck
  processes (means g_e0, g_i0, standard deviations σ_e, σ_i, correlation times τ_e, τ_i), which
  put the cell in the high-conductance state of cortex in vivo. Scaling both means by β and both
  variances by β is the balanced-background gain control of Chance, Abbott & Reyes (2002,
  *Neuron* 35:773).

The OU conductances are advanced by their exact one-step update after every state update, so the
membrane can use exponential Euler (linear in v given the conductances).

:func:`fi_curve` measures the rate against a constant drive current with the shared measurement
window (:func:`ctmhsa.neurons.window.measure`) and fits it with an affine law r = r0 + c I over a rate
range: the residual of that fit is how far the cell is from a linear spike generator.
"""

from __future__ import annotations

import hashlib
import numbers
import json

import brian2 as b2
import numpy as np

from .backend import cached_json, configure_brian2, run_network
from .models import SOMA_BACKGROUND as BACKGROUND
from .models import SOMA_EQUATIONS as EQUATIONS
from .models import SOMA_REFRACTORY as REFRACTORY
from .models import SOMA_RESET as RESET
from .models import SOMA_THRESHOLD as THRESHOLD
from .params import DEFAULT_SOMA, SomaParams, lif_soma, seconds
from .window import Probe, measure

__all__ = ["BRETTE_GERSTNER_2005", "EQUATIONS", "BACKGROUND", "fi_curve", "affine_fit", "affine_range",
           "soma_calibration", "intrinsic_fano", "calibration_of", "law_rate", "law_current", "lif_drive",
           "rate_range_of", "modulation_gain", "SPLINE_DENSE"]


SPLINE_DENSE = dict(n=36, rep=16, span=20.0)
"""The spline law's dense measurement: ``n`` currents from ``r_base`` - 0.6 Hz to ``r_base`` +
``span`` Hz on the first curve, ``rep`` cells each (:func:`soma_calibration`)."""

BRETTE_GERSTNER_2005 = DEFAULT_SOMA
"""The default soma: Brette & Gerstner's (2005) regular-spiking cell in Destexhe's background."""


def fi_curve(soma: SomaParams, currents, duration=10.0, warmup=1.0, dt=1e-4, seed=0,
             codegen: str = "numpy") -> dict:
    """Rate of ``soma`` against constant drive currents, one cell per current.

    Parameters
    ----------
    soma : SomaParams
    currents : array of float
        Drive currents (A).
    duration, warmup, dt : float or brian2 Quantity
        Measurement window, discarded warm-up and step (s).

    Returns
    -------
    dict
        ``current`` (A), ``rate`` (Hz, spike count / window), ``v_mean`` and ``v_std`` of the
        membrane over the window (V; the refractory clamp included), ``fano`` of the counts in
        10 chunks.
    """
    duration, warmup, dt = seconds("duration", duration), seconds("warmup", warmup, allow_zero=True), \
        seconds("dt", dt)
    currents = np.asarray(currents, float)
    configure_brian2(codegen)
    b2.seed(seed)
    clock = b2.Clock(dt=dt * b2.second)
    G = _somata(soma, len(currents), clock, "I_drive : amp\nacc_v : volt*second\nacc_v2 : volt**2*second\n",
                {}, "somata")
    G.run_regularly("acc_v += v*dt\nacc_v2 += v**2*dt", when="end", clock=clock)
    G.I_drive = currents * b2.amp
    mon = b2.SpikeMonitor(G, record=False)
    net = b2.Network(G, mon)

    def run(d, report):
        run_network(net, d * b2.second, namespace={}, report=report)
        return 0.0

    # window means of v and v² (integrated as acc_v, acc_v2): the membrane's mean and spread
    probe = Probe(mon, lambda v: np.array(getattr(G, v + "_")[:], dtype=float), ("v", "v2"))
    m = measure(net, {"somata": probe}, clock, run, warmup, duration, n_chunks=10)
    obs, chunks = m["snapshots"][-1][1]["somata"], m["chunks"]["somata"]
    mean_c = chunks.mean(axis=0)
    fano = np.full(len(currents), np.nan)
    fano[mean_c > 0] = chunks.var(axis=0, ddof=1)[mean_c > 0] / mean_c[mean_c > 0]
    return dict(current=currents, rate=obs["rate"], v_mean=obs["v"],
                v_std=np.sqrt(np.maximum(obs["v2"] - obs["v"] ** 2, 0.0)), fano=fano)


def _somata(soma: SomaParams, n: int, clock, drive: str, constants: dict, name: str):
    """``n`` fresh somata of ``soma`` at rest in their background, driven by the equations
    ``drive`` (defining ``I_drive``; ``constants`` their namespace): the cells
    :func:`fi_curve` and :func:`modulation_gain` measure."""
    ns = soma.namespace()     # EQUATIONS read the s_ constants
    G = b2.NeuronGroup(n, EQUATIONS + drive, threshold=THRESHOLD, reset=RESET, refractory=REFRACTORY,
                       method="exponential_euler", namespace=dict(ns, **constants), clock=clock, name=name)
    G.run_regularly(BACKGROUND, when="before_groups", clock=clock)
    G.v = soma.E_L * b2.volt
    G.g_e, G.g_i = ns["s_ge0"], ns["s_gi0"]
    return G


def affine_fit(current, rate, lo: float, hi: float) -> dict:
    """Least-squares affine law r = r0 + c I over the points with ``lo <= rate <= hi`` (Hz).

    Returns ``r0`` (Hz), ``c`` (Hz/A), ``max_residual`` and ``rms_residual`` (Hz), and
    ``relative`` = max residual / rate span (the nonlinearity over the range).
    """
    current, rate = np.asarray(current, float), np.asarray(rate, float)
    sel = (rate >= lo) & (rate <= hi)
    if sel.sum() < 3:
        raise ValueError(f"affine_fit: fewer than 3 rates within [{lo}, {hi}] Hz")
    A = np.vstack([np.ones(sel.sum()), current[sel]]).T
    coef, *_ = np.linalg.lstsq(A, rate[sel], rcond=None)
    res = rate[sel] - A @ coef
    return dict(r0=float(coef[0]), c=float(coef[1]), max_residual=float(np.abs(res).max()),
                rms_residual=float(np.sqrt(np.mean(res ** 2))),
                relative=float(np.abs(res).max() / np.ptp(rate[sel])), n=int(sel.sum()))


def _measured(soma: SomaParams) -> dict:
    """The soma's parameters its calibration measures: all but the dendro-somatic coupling
    (``tau_c``, ``tau_c_start``), which is upstream of the driven soma."""
    return {k: v for k, v in soma.to_dict().items() if k not in ("tau_c", "tau_c_start")}


def soma_calibration(soma: SomaParams = DEFAULT_SOMA, dt: float = 1e-4, r_base: float = 20.0,
                     span: float = 100.0, duration: float = 10.0, n: int = 32, seed: int = 7,
                     reach: float | None = None, law: str = "affine", knots: tuple = ()) -> dict:
    """The drive that puts ``soma`` on its affine branch: measured once, cached on disk.

    The f–I curve is measured (:func:`fi_curve`, ``n`` currents, ``duration`` s windows); the
    current ``I_rh`` at which the soma fires ``r_base`` is interpolated, and an affine law is
    fitted over ``[r_base, r_base + span]`` Hz. A cell driven by ``I_rh + I_gain * x`` with
    ``I_gain = 1 / slope`` then fires ``r_base + x`` Hz to within the fit's residual. The
    currents reach the rate ``reach`` (Hz; ``r_base + span`` by default), so that the curve is
    known beyond the fitted range.

    With ``law="quadratic"`` the drive that gives ``r_base + x`` is fitted as
    ``I_rh + I_gain x + I_quad x²`` over ``[r_base, reach]`` (least squares in current; residuals
    reported in Hz): a slightly convex f–I curve is then followed over its whole measured range,
    where an affine law fitted over a part of it leaves it outside that part.

    With ``law="spline"`` the working range is measured a second time, densely
    (:data:`SPLINE_DENSE`: currents from ``r_base`` - 0.6 Hz to ``r_base`` + 20 Hz on the first
    curve, several cells each), and the drive is the cubic spline ``I_rh + I_gain x + I_quad x² +
    I_cub x³ + Σ_n I_knot[n] (x - knots[n])₊³`` (knots in Hz above ``r_base``), fitted to both
    curves with each point weighted by its rate's standard error: the f–I curve bends near the
    threshold (concave over 1-4 Hz for L2/3, convex above), which no polynomial over the whole
    range follows to better than 0.07 Hz there (:func:`law_current`).

    Returns
    -------
    dict
        ``I_rh`` (A), ``I_gain`` (A/Hz), ``I_quad`` (A/Hz², 0 for the affine law), ``r_base``
        (Hz); for the spline also ``I_cub`` (A/Hz³), ``knots`` (Hz), ``I_knot`` (A/Hz³), the
        dense curve (``dense_current``, ``dense_rate``, ``dense_se``) and its fit's
        ``dense_rms_residual`` (Hz); the fit (``max_residual``, ``rms_residual`` in Hz,
        ``relative``), the measured curve (``current``, ``rate``) and its Fano factors (``fano``).
    """
    if law not in ("affine", "quadratic", "spline"):
        raise ValueError(f"law: expected 'affine', 'quadratic' or 'spline', got {law!r}")
    if (law == "spline") != bool(knots):
        raise ValueError(f"knots: the spline law needs knots and only it takes them; got {knots!r} "
                         f"with law {law!r}")
    if reach is not None and reach < r_base + span:
        raise ValueError(f"reach: expected at least r_base + span = {r_base + span:g} Hz, got {reach!r}")
    key = hashlib.sha256(json.dumps(dict(soma=_measured(soma), dt=dt, r_base=r_base, span=span,
                                         duration=duration, n=n, seed=seed, eq=EQUATIONS, bg=BACKGROUND,
                                         version=4, **({} if reach is None else dict(reach=reach)),
                                         **({} if law == "affine" else dict(law=law, weights="1/(x+2)")
                                            if law == "quadratic" else
                                            dict(law=law, weights="1/se", knots=[float(k) for k in knots],
                                                 dense=SPLINE_DENSE)),
                                         # version 0.11's procedure (currents scaled with the
                                         # adaptation, 5 tau_w warm-up) for any other soma; the
                                         # default soma's measurement is unchanged
                                         **({} if _measured(soma) == _measured(DEFAULT_SOMA)
                                            else dict(procedure=2))),
                                    sort_keys=True).encode()).hexdigest()[:16]
    top = r_base + span if reach is None else reach

    def measure_curve() -> dict:
        # up to the rheobase g (V_th - V_rest), plus ~20 pA per Hz for the default cell (its adapted
        # slope is ~60 Hz/nA) and the extra mean adaptation current b tau_w per Hz of a more
        # strongly adapting one; the warm-up lets the adaptation settle (5 tau_w, at least 1 s)
        per_hz = 0.02e-9 + max(0.0, soma.adaptation_per_hz() - DEFAULT_SOMA.adaptation_per_hz())
        i_max = soma.input_conductance() * (soma.V_th - soma.v_rest()) + per_hz * top
        warmup = max(1.0, 5.0 * soma.tau_w)
        curve = fi_curve(soma, np.linspace(0.0, i_max, n), duration=duration, warmup=warmup, dt=dt, seed=seed)
        I, r = curve["current"], np.maximum.accumulate(curve["rate"])   # monotone (counting noise)
        if r[-1] < top:
            raise RuntimeError(f"soma_calibration: the soma reaches only {r[-1]:.0f} Hz (< {top:g} Hz)")
        extra = {}
        if law == "spline":
            # the working range again, densely: several cells per current (another seed)
            n_d, rep = SPLINE_DENSE["n"], SPLINE_DENSE["rep"]
            rng = (r_base - 0.6, r_base + SPLINE_DENSE["span"])
            Id = np.linspace(*np.interp(rng, r + 1e-9 * np.arange(r.size), I), n_d)
            dense = fi_curve(soma, np.repeat(Id, rep), duration=duration, warmup=warmup, dt=dt,
                             seed=seed + 1)["rate"].reshape(n_d, rep)
            rd, sd = dense.mean(axis=1), dense.std(axis=1, ddof=1) / np.sqrt(rep)
            # a single cell's rate: its count's standard error (the chunk Fano factor, at least 0.02)
            f = np.nan_to_num(curve["fano"], nan=1.0)
            se = np.sqrt(np.maximum(f, 0.02) * np.maximum(curve["rate"], 0.5) / duration)
            fit = _spline_fit(np.concatenate([I, Id]), np.concatenate([curve["rate"], rd]),
                              np.concatenate([se, np.maximum(sd, 0.005)]), r_base, top, knots,
                              dense=np.arange(I.size + Id.size) >= I.size)
            extra = dict(I_cub=fit["I_cub"], knots=fit["knots"], I_knot=fit["I_knot"], dense_current=Id.tolist(),
                         dense_rate=rd.tolist(), dense_se=sd.tolist(), dense_rms_residual=fit["dense_rms_residual"])
        elif law == "quadratic":
            fit = _quadratic_fit(I, r, r_base, top)
        else:
            fit = affine_fit(I, r, r_base, r_base + span)
            fit.update(I_rh=float((r_base - fit["r0"]) / fit["c"]), I_gain=float(1.0 / fit["c"]), I_quad=0.0)
        return dict(I_rh=fit["I_rh"], I_gain=fit["I_gain"], I_quad=fit["I_quad"],
                    r_base=float(r_base), max_residual=fit["max_residual"],
                    rms_residual=fit["rms_residual"], relative=fit["relative"],
                    current=I.tolist(), rate=curve["rate"].tolist(),
                    fano=np.nan_to_num(curve["fano"], nan=1.0).tolist(), **extra)

    return cached_json("soma", key, measure_curve)


def _quadratic_fit(I, r, lo: float, hi: float, x0: float = 2.0) -> dict:
    """``I = I_rh + I_gain x + I_quad x²`` with ``x = r - lo``, least squares over the points with
    ``lo <= r <= hi`` (Hz), each residual weighted by ``1 / (x + x0)`` (its square by the square;
    ``x0`` in Hz): most cells fire a few Hz above the baseline, and there a residual of 0.1 Hz is
    a few percent of their signal (with equal weights the law sat 0.065 Hz below the L2/3 curve
    over 1.5-8 Hz, with these 0.025).
    Residuals in Hz (the measured rate against the law's)."""
    sel = (r >= lo) & (r <= hi)
    if sel.sum() < 4:
        raise ValueError(f"soma_calibration: fewer than 4 rates within [{lo}, {hi}] Hz")
    x = r[sel] - lo
    w = 1.0 / (x + x0)
    a, *_ = np.linalg.lstsq(np.vstack([np.ones(x.size), x, x ** 2]).T * w[:, None], I[sel] * w, rcond=None)
    cal = dict(I_rh=float(a[0]), I_gain=float(a[1]), I_quad=float(a[2]), r_base=float(lo))
    res = r[sel] - law_rate(cal, I[sel])
    return dict(cal, max_residual=float(np.abs(res).max()), rms_residual=float(np.sqrt(np.mean(res ** 2))),
                relative=float(np.abs(res).max() / np.ptp(r[sel])))


def _spline_fit(I, r, se, lo: float, hi: float, knots, dense=None) -> dict:
    """The cubic spline drive ``I(x) = I_rh + I_gain x + I_quad x² + I_cub x³ + Σ I_knot[n]
    (x - knots[n])₊³``, ``x = r - lo``, least squares over the points with ``lo - 0.6 <= r <= hi``
    (Hz), each current's residual weighted by ``1 / se`` (its rate's standard error, Hz).
    Residuals in Hz (the measured rate against the law's), over ``[lo, hi]``; those of the dense
    curve's points (``dense``, a mask; by default the points with ``se`` below 0.05 Hz, which
    picked the L2/3 type's dense curve and none of the default soma's, 0.07-0.13 Hz) apart."""
    I, r, se = (np.asarray(a, float) for a in (I, r, se))
    sel = (r >= lo - 0.6) & (r <= hi)
    if sel.sum() < 5 + len(knots):
        raise ValueError(f"soma_calibration: too few rates within [{lo - 0.6}, {hi}] Hz for the spline")
    x, w = r[sel] - lo, 1.0 / se[sel]
    basis = np.vstack([x ** 0, x, x ** 2, x ** 3] + [np.maximum(x - k, 0.0) ** 3 for k in knots]).T
    a, *_ = np.linalg.lstsq(basis * w[:, None], I[sel] * w, rcond=None)
    cal = dict(I_rh=float(a[0]), I_gain=float(a[1]), I_quad=float(a[2]), I_cub=float(a[3]),
               knots=[float(k) for k in knots], I_knot=[float(c) for c in a[4:]], r_base=float(lo))
    grid = np.linspace(-0.6, hi - lo + 10.0, 4001)
    if np.any(np.diff(law_current(cal, grid)) <= 0):
        raise RuntimeError("soma_calibration: the fitted spline drive is not increasing over the range")
    on = sel & (r >= lo)
    res = r[on] - law_rate(cal, I[on])
    dense = (se < 0.05 if dense is None else np.asarray(dense, bool))[on]
    return dict(cal, max_residual=float(np.abs(res).max()), rms_residual=float(np.sqrt(np.mean(res ** 2))),
                relative=float(np.abs(res).max() / np.ptp(r[on])),
                dense_rms_residual=float(np.sqrt(np.mean(res[dense] ** 2))) if dense.any() else float("nan"))


def law_current(cal: dict, x) -> np.ndarray:
    """The drive current (A) under which a calibrated soma fires ``r_base + x`` (``x`` in Hz):
    ``I_rh + I_gain x + I_quad x² (+ I_cub x³ + Σ_n I_knot[n] (x - knots[n])₊³ for the spline)``."""
    x = np.asarray(x, float)
    cur = cal["I_rh"] + (cal["I_gain"] + (cal.get("I_quad", 0.0) + cal.get("I_cub", 0.0) * x) * x) * x
    for k, c in zip(cal.get("knots", ()), cal.get("I_knot", ())):
        cur = cur + c * np.maximum(x - k, 0.0) ** 3
    return cur


def modulation_gain(cell_type: str = "l5pt", freqs=(0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0), rate: float = 12.0,
                    swing: float = 2.0, cells: int = 300, duration: float = 16.0, warmup: float = 2.0,
                    dt: float = 1e-3, seed: int = 3, codegen: str = "numpy") -> dict:
    """How steeply a lif soma answers a modulated drive, relative to its calibrated law.

    ``cells`` fresh somata of ``cell_type``'s type per frequency are driven at the current of
    ``rate`` Hz above its baseline (:func:`law_current`) plus a sinusoid whose amplitude is
    half the law's current step from ``rate - swing`` to ``rate + swing``; the first Fourier
    component of their spikes at each frequency, over ``swing``, is the gain. The law is the
    soma's adapted answer to a constant drive, so the gain is 1 for slow drives; an adapting
    soma answers drives faster than its adaptation more steeply (Benda & Herz 2003), which
    counts a drive's fluctuations in that band as signal and more (docs/lif.md, "The adapting
    soma's fast gain"). The soma alone: a dendro-somatic coupling ``tau_c`` upstream of it
    filters the drive by ``1 / sqrt(1 + (2 pi f tau_c)^2)`` more.

    Parameters
    ----------
    cell_type : str
        A key of :data:`ctmhsa.neurons.params.LIF_SOMATA` (others: the default soma).
    freqs : sequence of float
        Modulation frequencies (Hz, > 0).
    rate, swing : float
        Operating point above the baseline and modulation depth in the law's rate (Hz).
    cells : int
        Somata per frequency.
    duration, warmup, dt : float
        Measurement window, discarded warm-up and step (s); ``dt`` also picks the calibration.
    seed : int
    codegen : str

    Returns
    -------
    dict
        ``freq`` (Hz), ``gain`` (rate modulation / ``swing``), ``phase`` (degrees, + = the rate
        leads the drive), ``mean_rate`` (Hz, baseline included), ``rate`` and ``swing``.

    Raises
    ------
    ValueError
        Frequencies not positive, a rate not above 0, a swing not above 0 or past the rate, fewer
        than one cell, or a window shorter than one period of the slowest frequency.
    """
    freqs = np.asarray(freqs, float)
    if freqs.ndim != 1 or freqs.size == 0 or not np.all(np.isfinite(freqs)) or np.any(freqs <= 0):
        raise ValueError(f"freqs: expected frequencies > 0 Hz, got {freqs.tolist()}")
    if isinstance(rate, bool) or not isinstance(rate, numbers.Real) or not 0 < rate < np.inf:
        raise ValueError(f"rate: expected Hz above the baseline, > 0, got {rate!r}")
    if isinstance(swing, bool) or not isinstance(swing, numbers.Real) or not 0 < swing <= rate:
        raise ValueError(f"swing: expected 0 < swing <= rate (Hz above the baseline), got swing={swing!r}, rate={rate!r}")
    if isinstance(cells, bool) or not isinstance(cells, (int, np.integer)) or cells < 1:
        raise ValueError(f"cells: expected an integer >= 1, got {cells!r}")
    duration, warmup, dt = seconds("duration", duration), seconds("warmup", warmup, allow_zero=True), \
        seconds("dt", dt)
    if duration * freqs.min() < 1.0:
        raise ValueError(f"duration: {duration:g} s is shorter than one period of {freqs.min():g} Hz")
    soma = lif_soma(cell_type)
    cal = calibration_of(cell_type, dt)
    i0 = law_current(cal, rate)
    di = 0.5 * (law_current(cal, rate + swing) - law_current(cal, rate - swing))
    configure_brian2(codegen)
    b2.seed(seed)
    clock = b2.Clock(dt=dt * b2.second)
    G = _somata(soma.params, cells * freqs.size, clock, "I_drive = m_i0 + m_di*sin(2*pi*m_f*t) : amp\n"
                "m_f : Hz (constant)\n", dict(m_i0=i0 * b2.amp, m_di=di * b2.amp), "modulated")
    G.m_f = np.repeat(freqs, cells) * b2.Hz
    mon = b2.SpikeMonitor(G)
    run_network(b2.Network(G, mon), (warmup + duration) * b2.second, namespace={})
    i, t = np.asarray(mon.i[:]), np.asarray(mon.t[:] / b2.second)
    keep = t >= warmup
    i, t = i[keep] // cells, t[keep] - warmup
    comp = np.array([np.sum(np.exp(-2j * np.pi * f * t[i == k])) for k, f in enumerate(freqs)])
    comp = comp * np.exp(-2j * np.pi * freqs * warmup)     # the drive's phase counted from t = 0
    amp = 2.0 * np.abs(comp) / (cells * duration)
    return dict(freq=freqs, gain=amp / swing, phase=np.degrees(np.angle(1j * comp)),
                mean_rate=np.bincount(i, minlength=freqs.size) / (cells * duration), rate=float(rate),
                swing=float(swing))


def law_rate(cal: dict, current) -> np.ndarray:
    """The rate (Hz) a calibrated soma's law assigns to a drive ``current`` (A): the inverse of
    ``I = I_rh + I_gain x + I_quad x²``, ``r = r_base + x`` (affine when ``I_quad`` is 0), or of
    the spline (:func:`law_current`)."""
    if cal.get("knots"):      # the spline: inverted on a 1 mHz grid, linear beyond its ends
        top = float(np.max(cal.get("rate", [cal["r_base"] + 100.0]))) + 50.0
        x = np.arange(-cal["r_base"], top - cal["r_base"], 1e-3)
        cur, c = np.maximum.accumulate(law_current(cal, x)), np.asarray(current, float)
        out = np.interp(c, cur, x)
        s0, s1 = (x[1] - x[0]) / (cur[1] - cur[0]), (x[-1] - x[-2]) / (cur[-1] - cur[-2])
        out = np.where(c < cur[0], x[0] + (c - cur[0]) * s0, np.where(c > cur[-1], x[-1] + (c - cur[-1]) * s1, out))
        return cal["r_base"] + out
    d = np.asarray(current, float) - cal["I_rh"]
    a, b = cal.get("I_quad", 0.0), cal["I_gain"]
    if a == 0.0:
        return cal["r_base"] + d / b
    disc = np.maximum(b * b + 4.0 * a * d, 0.0)     # the root through x = 0 at d = 0
    return cal["r_base"] + 2.0 * d / (b + np.sqrt(disc))


def intrinsic_fano(cal: dict, rates, width: int = 2) -> np.ndarray:
    """Fano factor of the soma's own spike generation at ``rates`` (Hz), from the counts of its
    calibration under constant drive (:func:`soma_calibration`: 1 s chunks, the background's
    conductance noise included, no input fluctuation).

    One current's Fano factor rests on 10 chunks (relative standard error ~0.5), so the curve
    is pooled over ``width`` neighbouring currents on each side (``Σ F r / Σ r``: the Fano factor
    of their summed counts) and interpolated in rate; rates beyond the curve take its end
    values. Measured for the default soma at dt = 0.5 ms (20 s windows): 0.16-0.21 at 9-20 Hz,
    0.07-0.11 at 25-70 Hz, 0.03-0.04 at 100-130 Hz (adaptation regularises the trains).
    """
    r = np.asarray(cal["rate"], float)
    f = np.asarray(cal.get("fano", np.ones_like(r)), float)
    keep = r > 0
    r, f = r[keep], f[keep]
    if r.size == 0:
        return np.ones(np.shape(rates))
    box = np.ones(2 * width + 1)        # the neighbours' summed variance over their summed mean
    window = slice(width, width + r.size)   # "full", cut to the curve (any length of it)
    pooled = np.convolve(f * r, box)[window] / np.convolve(r, box)[window]
    order = np.argsort(r)
    return np.interp(np.asarray(rates, float), r[order], pooled[order])


def affine_range(cal: dict, tol: float = 3.0) -> tuple[float, float]:
    """The rates (Hz) over which a calibrated soma follows its affine law within ``tol`` Hz.

    Walks the measured f–I curve of ``cal`` (:func:`soma_calibration`) outwards from ``r_base``
    and stops at the first point off the law ``r_base + (I - I_rh) / I_gain`` by more than
    ``tol``; the bounds are interpolated between the last point on and the first point off.
    Measured (default soma, dt = 0.1 ms, tol 3 Hz): 9.7–141 Hz on its affine law until version
    0.14 (6.8–136 Hz as first measured), 14–184 Hz on the spline law of 0.15 (0–187 Hz at 0.5 ms); below, the threshold bends the
    curve up (rates fall to 0), above, refractoriness and adaptation bend it down."""
    I, r = np.asarray(cal["current"], float), np.asarray(cal["rate"], float)
    law = law_rate(cal, I)
    off = np.abs(r - law) > tol
    k0 = int(np.argmin(np.abs(r - cal["r_base"])))

    def edge(step):
        k = k0
        while 0 <= k + step < r.size and not off[k + step]:
            k += step
        if not 0 <= k + step < r.size:
            return float(r[k])
        # between r[k] (on) and r[k+step] (off): where the departure reaches tol
        d0, d1 = abs(r[k] - law[k]), abs(r[k + step] - law[k + step])
        f = (tol - d0) / (d1 - d0) if d1 > d0 else 0.0
        return float(law[k] + f * (law[k + step] - law[k]))

    return max(edge(-1), 0.0), edge(+1)


def calibration_of(cell_type: str = "default", dt: float = 1e-4) -> dict:
    """The calibration (:func:`soma_calibration`, cached) of the lif soma type of ``cell_type``
    (:func:`ctmhsa.neurons.params.lif_soma`: L2/3 has its own, 1 Hz baseline) at step ``dt`` (s)."""
    t = lif_soma(cell_type)
    return soma_calibration(t.params, dt=dt, r_base=t.r_base, span=t.span, n=t.n_currents, duration=t.window,
                            reach=t.reach, law=t.law, knots=t.knots)


def rate_range_of(cell_type: str = "default", dt: float = 1e-4) -> tuple[float, float]:
    """The affine range (Hz, :func:`affine_range`) of the lif soma type of ``cell_type``, with
    that type's tolerance."""
    return affine_range(calibration_of(cell_type, dt), tol=lif_soma(cell_type).tol)


def lif_drive(dt: float = 1e-4, cell_type: str = "default") -> dict:
    """Per-cell parameters that put a lif soma of ``cell_type`` on its law: ``I_rh`` (A),
    ``I_gain`` (A/Hz), ``I_quad`` (A/Hz², 0 for an affine law), ``r_base`` (Hz) and, for the
    spline law, ``I_cub`` and ``I_k1``, ``I_k2``, ... (A/Hz³), from its
    calibration (:func:`calibration_of`)."""
    cal = calibration_of(cell_type, dt)
    out = dict(I_rh=cal["I_rh"], I_gain=cal["I_gain"], I_quad=cal.get("I_quad", 0.0), r_base=cal["r_base"])
    if cal.get("knots"):
        out.update(I_cub=cal["I_cub"], **{f"I_k{n}": c for n, c in enumerate(cal["I_knot"], 1)})
    return out
