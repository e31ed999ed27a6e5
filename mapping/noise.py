"""Expected spike-count noise of every decoded stage (the "noise floor").

From the measured rates, the measured Fano factors and the window T only — never from the
reference — each decoded stage gets the variance it would have if spike-count noise were its
only error. First-order propagation through the decoding relations of :mod:`ctmhsa.mapping.decode`. With
interneurons and ON/OFF pairs, every noise source is propagated with its correlations (a relay's
count moves q, k and v of its token in every head; the pooled L2/3 count is pinned, up to the
interneurons' loop residual, :func:`loop_residual_time`), see :func:`_normalised_microcolumns`;
otherwise different cells are treated as independent. An escape-noise population's count has
its window-mean intensity as its mean (a lif soma's or a perfect integrator's, its count):

- q, k, v (window-mean dendritic potentials): ``Σ_e (W_ce / rho_in)² F_in r_e / T``;
- s (L2/3 counts): own count noise ``F r / (T R²)`` plus the q and k noise through phi
  (``s² [(phi'/phi)(q)² var q + (phi'/phi)(k)² var k]``);
- κ = Σ_c s; y: own L5 IT count noise plus ``v² var κ + κ² var v`` (``(v_0 + v)² var κ``
  in the offset code, whose L5 IT rate carries the offset);
- Z (read from the division of the L2/3 rates): Z^act = Σ_jc phi(q_c) phi(k_jc) as realised
  (the interneurons pin the pooled L2/3 count), so the query's noise enters with each feature's
  share w_c = Σ_j s_jc and the keys' with s_jc, plus the pinned count's own noise;
- ṽ: own L5 PT count noise plus the sum over microcolumns of the L5 IT noise that feeds it,
  with the attention noise weighted by ``(v_j - ṽ_i)²`` (normalisation makes it sum to ~0);
- x̃: own nucleus-2 noise plus ``Σ_hc WO² var ṽ``.

A stage whose error is near its floor is limited by counting noise; an error well above it is
bias (nonlinear distortion, saturation) that more simulated time will not remove.
"""

from __future__ import annotations

import warnings
from functools import partial

import numpy as np

from ctmhsa.circuits.parts import area_hook, register_hook
from ctmhsa.mapping.decode import per_dimension
from ctmhsa.mapping.encode import copies
from ctmhsa.maths.reference import FEATURE_MAPS
from ctmhsa.neurons.firing import get_firing
from ctmhsa.neurons.levels import get_level
from ctmhsa.neurons.conductance import calibration_of, intrinsic_fano
from ctmhsa.neurons.models import ESCAPE, get_model, loop_lag

__all__ = ["stage_noise_variance", "loop_residual_time", "spike_generation_fano", "quantisation_fano", "window_fano",
           "NOISE_DOMINATED", "warn_noise_dominated", "NoiseFloorWarning"]


class NoiseFloorWarning(UserWarning):
    """A spiking run's output is mostly spike-count noise (:func:`warn_noise_dominated`)."""


NOISE_DOMINATED = 1.0
"""A spiking run warns (:class:`NoiseFloorWarning`) when its output x̃'s
count-noise floor, an NRMSE, exceeds this: the noise the counts alone give is larger than the
output's own spread. Found at weight scale 0.01 (square8, lif, 2 s, seed 51): x̃ NRMSE 8.6 at a
floor of 9.0, at its floor and so unflagged, yet noise eight times the signal (version 0.15)."""


def warn_noise_dominated(floor, neuron: str, output: str, window: str, stacklevel: int = 2) -> None:
    """Warn (:class:`NoiseFloorWarning`) where ``floor``, the count-noise floor of ``output`` (an
    NRMSE; None or NaN: not computed), exceeds :data:`NOISE_DOMINATED`. ``window`` says what the counts
    were read over; ``stacklevel`` as :func:`warnings.warn`'s, counted from the caller."""
    if floor is not None and floor > NOISE_DOMINATED:
        warnings.warn(f"{neuron} run: {output}'s spike-count noise floor is {floor:.3g} times its spread (NRMSE, "
                      f"{window}): the decoded output is mostly count noise; a longer window (the floor falls as "
                      "1/sqrt(T)), more copies (P) or larger inputs lower it; see the result's metrics",
                      NoiseFloorWarning, stacklevel=stacklevel + 1)


def spike_generation_fano(circuit, level: str, measured: dict, dt: float | None = None) -> dict:
    """Fano factor of each population's own spike generation, for :func:`stage_noise_variance`.

    Each floor adds a cell's own spike-generation noise to the propagated noise of its inputs.
    An escape cell is Poisson given its intensity (Fano 1); its measured Fano also contains the
    input fluctuations, which the propagation already counts (with ON/OFF pairs, which fire
    mostly on fluctuations, using it double-counted them: floors 3x the errors). Relays and
    interneurons are escape cells at every spiking level. A relay's intensity is constant, so its
    measured Fano is its spike generation's alone, a Bernoulli count per step: ``1 - r dt``
    (0.95 at the default problem's relays; taking 1 made the q, k, v floors 3 % high).

    A lif soma's own spike generation is its count noise under a constant drive: the Fano
    factor of its calibration (:func:`ctmhsa.neurons.conductance.intrinsic_fano`, 0.03-0.2 with
    adaptation a few Hz above the baseline, up to 0.7 at the 1 Hz baseline of the L2/3 and L5
    types), a function of rate, resolved on each window's rates and length by
    :func:`stage_noise_variance` (:func:`window_fano`: a near-regular train's count in a short
    window also carries the phase of its first spike); needs the step ``dt`` (s) the soma was
    calibrated at. Its measured Fano in the circuit (0.35-0.65 on the default problem) also holds
    the fluctuations of its inputs (L2/3 spikes into L5 IT, IT spikes into PT, PT spikes into
    nucleus 2), which the propagation counts already: used as the own noise it put y, ṽ and x̃
    at 0.5-0.8 of their floors. The same holds for the L2/3 somata the interneurons divide
    (version 0.11's soma type, 200 ms coupling): measured in chunks of a tenth of the window, their
    Fano factor (0.52 at 1 s, 0.25 at 3 s, 0.16 at 10 s on the default problem) is that of 0.1-1 s
    chunks of a 4.5 Hz train, not of the window, and put s and κ at 0.5-0.8 of their floors in
    1-3 s windows. The count noise of a cell over spike seeds (the same input, 6-12 seeds) is
    0.094, 0.074, 0.062 of its count at 1, 3, 10 s; this function's gives 0.101, 0.078, 0.069
    (docs/lif.md). Without ``dt`` the measured Fano is used (an upper bound).

    Cells whose soma is a perfect integrator (``meta.firing`` ``"regular"`` or ``"population"``,
    :func:`ctmhsa.neurons.models.integrator_model`) have no Fano factor of their own: their
    count is the integral of their intensity to within one spike. Their entry is the firing
    mode, which :func:`stage_noise_variance` turns into the Fano factor of that quantisation
    in its window (:func:`quantisation_fano`).
    """
    out, own, lif = {}, {}, get_level(level).lif
    for p, pop in circuit.populations.items():
        model = get_model(level, pop.cell_type, circuit.meta.firing)
        if not get_firing(model.firing).poisson:
            out[p] = model.firing
        elif lif and model.lif_soma and dt is not None:
            if pop.cell_type not in own:                                   # one per soma type
                own[pop.cell_type] = partial(intrinsic_fano, calibration_of(pop.cell_type, dt))
            out[p] = own[pop.cell_type]
        elif (pop.cell_type == "relay" or (lif and pop.cell_type != "interneuron")) and p in measured:
            out[p] = measured[p]
        else:
            out[p] = 1.0
    return out


def quantisation_fano(pop, rates, T: float, firing: str) -> float:
    """Effective Fano factor of a population of perfect integrators in a window of ``T`` s.

    A perfect integrator's count in the window is the integral ``x`` of its intensity to within
    one spike: with its phase at the window's start uniform, the count is ``floor(x)`` or
    ``ceil(x)``, of variance ``f (1 - f)``, ``f = frac(x)``; over the spread of ``x`` between
    cells that is ``1/6`` on average, and ``x (1 - x) ~ x`` where ``x < 1/6``: ``q(x) = min(x, 1/6)``
    is used. ``"regular"`` cells count alone (``x = r T`` per cell), a ``"population"`` counts as
    one integrator per dimension (``x = Σ_copies r T``). Returned as the Fano factor that gives
    the same summed variance, ``Σ q(x) / Σ x`` (1 for Poisson counts), so that every propagation
    of :func:`stage_noise_variance` applies unchanged.

    Parameters
    ----------
    pop : Population
    rates : array_like
        Window rate of each cell (Hz).
    T : float
        Window (s).
    firing : {"regular", "population"}
    """
    x = np.asarray(rates, float) * T
    if get_firing(firing).in_turn and "p" in pop.axes:
        x = per_dimension(pop, x, fill=0.0) * copies(pop)        # the dimension's summed count
    return window_fano(x, 0.0)


def window_fano(x, F) -> float:
    """Fano factor of the summed window counts of cells that expect ``x`` spikes each and whose
    spike generation has the Fano factor ``F`` over long windows (their intervals' CV²).

    A renewal train's count in a window of ``x`` expected spikes has the variance ``F x + c``:
    the long-window term and a constant from the phase of the first spike, ``c = 1/6`` for a
    regular train (:func:`quantisation_fano`) and 0 for a Poisson one. In between ``c = (1 - F)/6``
    is used (exact at both ends); below ``x = 1/6`` the count is 0 or 1, of variance ``x``.
    Per cell ``F x + (1 - F) min(x, 1/6)``, returned as ``Σ var / Σ x`` (1 without counts).
    At the lif level's L2/3 (4.5 Hz, F 0.07) the phase adds 0.04 to a 1 s window's Fano factor.

    Parameters
    ----------
    x : array_like
        Expected count of each cell in the window (rate × window).
    F : float or array_like
        Long-window Fano factor of each cell's spike generation (broadcast against ``x``).
    """
    x = np.asarray(x, float)
    F = np.broadcast_to(np.asarray(F, float), x.shape)
    ok = np.isfinite(x) & np.isfinite(F)
    x, F = x[ok], F[ok]
    total = float(x.sum())
    return float((F * x + (1 - F) * np.minimum(x, 1.0 / 6.0)).sum() / total) if total > 0 else 1.0


def _resolved_fano(circuit, obs: dict, fano: dict, T: float) -> dict:
    """``fano`` with each perfect integrator's firing mode replaced by its window's effective
    Fano factor (:func:`quantisation_fano`) and each rate-dependent Fano factor (lif somata) by
    the one of the population's summed count at its cells' window rates and the window's length
    (:func:`window_fano`)."""
    out = {}
    for p, f in fano.items():
        if isinstance(f, str) and p in obs:
            out[p] = quantisation_fano(circuit.populations[p], obs[p]["rate"], T, f)
        elif callable(f) and p in obs:
            r = np.asarray(obs[p]["rate"], float)
            out[p] = window_fano(r * T, f(r))        # absent cells (NaN) left out there
        elif not isinstance(f, str) and not callable(f):
            out[p] = f
    return out


def _baseline_share(obs_l23, R, n_cells):
    """The lif somata's baseline in an L2/3 macrocolumn, per unit of its pooled set point:
    ``b = r_base / R`` per cell and ``N b`` for the macrocolumn's ``N`` cells (0 at the other
    levels). Baseline spikes are counted, pooled and pinned with the signal's (the interneurons'
    set point is raised by them, :mod:`ctmhsa.mapping.baseline`) and are subtracted in the mean
    only, so a cell's count noise is that of ``r_base + R s``, not ``R s``: with version 0.10's
    L2/3 (r_base 20 Hz, 15 Hz per cell above it) 2.3 times the variance the floors of s, κ and Z
    had without it; with the L2/3 soma type of version 0.11 (1 Hz, 3.5 Hz above it) 1.3 times.
    ``r_base`` is read as ``rate - r`` (:func:`ctmhsa.mapping.baseline.remove_baselines`)."""
    base = np.asarray(obs_l23["rate"], float) - np.asarray(obs_l23.get("r", obs_l23["rate"]), float)
    base = float(np.nanmean(base)) if base.size else 0.0
    b = base / np.asarray(R, float)
    return b, n_cells * b


def loop_residual_time(tau_loop, tau_pool: float, lags) -> np.ndarray:
    """How much of a macrocolumn's pooled L2/3 count the interneurons' integral loop leaves
    free, as a time (s): the pooled count's deviation from ``R_set T`` over a window has variance
    ``F R_pool tau_res`` (``R_pool`` the pooled rate in spikes/s, ``F`` the cells' Fano factor),
    against ``F R_pool T`` unpinned.

    The loop integrates the pooled rate, filtered by the pool's synapses (``tau_pool``), into
    ``ln D`` (``d ln D/dt = (I_pool / R_set - 1) / tau_loop``), and the division reaches the
    pool's intensity through the plant's first-order ``lags`` (the shunt's synapses, the somata).
    Integrating, the count deviation is exactly ``e = R_set (tau_loop Δln D + tau_pool Δi)``
    (``i`` the filtered rate's relative deviation): what the window's ends hold. Linearised, the
    loop is a linear system driven by the pool's count noise; its stationary covariance (a
    Lyapunov equation) gives ``Var(e) = F R_pool h`` and ``tau_res = 2 h`` (the two ends
    independent: windows beyond the loop's settling time). Without lags ``tau_res = tau_loop +
    tau_pool``.

    Parameters
    ----------
    tau_loop : float or array
        The loop's time constant in ``ln D`` (s), per macrocolumn.
    tau_pool : float
        The pooling synapses' time constant (s).
    lags : sequence of float or arrays
        The plant's lags (s), broadcast with ``tau_loop``.

    Returns
    -------
    ndarray
        ``tau_res`` (s), shaped as ``tau_loop`` broadcast with ``lags``.
    """
    shape = np.broadcast_shapes(np.shape(tau_loop), *(np.shape(x) for x in lags))
    tl = np.broadcast_to(np.asarray(tau_loop, float), shape).ravel()
    lg = [np.broadcast_to(np.asarray(x, float), shape).ravel() for x in lags]
    k = len(lg)
    N, d = tl.size, k + 2                       # state: the plant's lags, i, ln D
    A = np.zeros((N, d, d))
    for j, tau in enumerate(lg):                # u_j' = (u_{j-1} - u_j) / tau, u_{-1} = -ln D
        A[:, j, j] = -1.0 / tau
        if j == 0:
            A[:, j, d - 1] = -1.0 / tau
        else:
            A[:, j, j - 1] = 1.0 / tau
    A[:, k, k] = -1.0 / tau_pool                # i' = (u_last - i + noise) / tau_pool
    A[:, k, k - 1 if k else d - 1] = (1.0 if k else -1.0) / tau_pool
    A[:, d - 1, k] = 1.0 / tl                   # ln D' = i / tau_loop
    Q = np.zeros((d, d))
    Q[k, k] = 1.0 / tau_pool ** 2               # unit noise intensity (F / R of the relative rate)
    eye = np.eye(d)
    # A Σ + Σ Aᵀ + Q = 0, vectorised (row-major): (A ⊗ I + I ⊗ A) vec Σ = -vec Q
    L = np.einsum("nij,kl->nikjl", A, eye).reshape(N, d * d, d * d) \
        + np.einsum("ij,nkl->nikjl", eye, A).reshape(N, d * d, d * d)
    sigma = np.linalg.solve(L, np.broadcast_to(-Q.ravel(), (N, d * d))[..., None])[..., 0].reshape(N, d, d)
    c = np.zeros((N, d))
    c[:, k], c[:, d - 1] = tau_pool, tl
    h = np.einsum("ni,nij,nj->n", c, sigma, c)
    return (2.0 * h).reshape(shape)


def _expected_counts(circuit, obs: dict, fano: dict, level: str) -> dict:
    """``obs`` with the ``rate`` of every escape-noise population (Poisson given its intensity:
    a plain Fano factor, an escape soma at ``level``) replaced by its window-mean intensity
    ``expected_r``: the mean of its count, whose variance the floor needs; the count itself is
    only an estimate of it. A population that fired no spike in the window had a floor of 0: L5
    IT at weights of 0.01 over half a second (an expected 1.3 spikes, 0 fired) read y at 5
    times its floor, where the intensity's floor is above the error."""
    firing = circuit.meta.firing
    out = dict(obs)
    for p, f in fano.items():
        if p not in obs or "expected_r" not in obs[p] or isinstance(f, str) or callable(f):
            continue
        if get_model(level, circuit.populations[p].cell_type, firing).threshold == ESCAPE:
            out[p] = {**obs[p], "rate": np.asarray(obs[p]["expected_r"], float)}
    return out


def _pool_free(circuit, c, level: str, T: float) -> np.ndarray:
    """The fraction ``min(1, tau_res / T)`` (H, n) of each macrocolumn's pooled L2/3 count
    variance its interneurons leave free over a window ``T`` (:func:`loop_residual_time`): the
    loop's time constant in ln D, ``tau_int`` plus the level's lag (per division stage), the
    pool's and the shunt's synapses (``tau_syn``) and the somata (``tau_m / D``, D the expected
    division: the shunt speeds them up)."""
    lp = c["loop"]
    stages = 2.0 if circuit.meta.apical else 1.0
    D = np.maximum(np.asarray(c["operating"].division, float), 1.0)
    tau = loop_residual_time(lp["tau_int"] + loop_lag(level) / stages, lp["tau_syn"],
                             (lp["tau_syn"], lp["tau_m"] / D))
    return np.minimum(1.0, tau / T)


def _built(l23) -> np.ndarray:
    """Which L2/3 cells exist, on the grid ``(H, n, m, dk)`` (a causal mask leaves some out; the
    decoded stages hold 0 there, not NaN)."""
    return np.isfinite(per_dimension(l23, np.zeros(l23.N), fill=np.nan))


def _rate_var(pop, obs, fano, T):
    """Variance (Hz²) of each dimension's rate estimate (mean over its P copies) on the grid;
    for ON/OFF pairs, of the difference ON - OFF (independent counts: variances add)."""
    P = copies(pop)
    v = per_dimension(pop, fano * np.asarray(obs["rate"], float) / T, fill=0.0) / P
    return v.sum(axis=-1) if "sign" in pop.axes else v


def stage_noise_variance(circuit, encoding, obs: dict, fano: dict, T: float, stages: dict,
                         weights, phi: str, *, level: str) -> dict:
    """Per-entry variance of each decoded stage from spike-count noise alone.

    Parameters
    ----------
    obs : dict
        Window observables per population (``rate`` in Hz).
    fano : dict
        Fano factor of each population's own spike generation (1 for Poisson counts), or its
        firing mode for perfect integrators (:func:`spike_generation_fano`).
    T : float
        Measurement window (s).
    stages : dict
        Decoded stages (used for the propagation derivatives).
    weights : ctmhsa.maths.model.Block
        The block's weights (its ``WS`` where the circuit has the skip path).
    phi : str
        Feature map.
    level : str
        The spiking level (its interneurons' loop lag, :func:`ctmhsa.neurons.models.loop_lag`).
    """
    WQ, WK, WV, WO, WS = weights.WQ, weights.WK, weights.WV, weights.WO, weights.WS
    pops, c = circuit.populations, encoding.consts
    obs = _expected_counts(circuit, obs, fano, level)
    fano = _resolved_fano(circuit, obs, fano, T)
    if "interneuron" in pops and c.get("operating") is not None:
        c = {**c, "pool_free": _pool_free(circuit, c, level, T)}
    g = c["gains"]
    f, df = FEATURE_MAPS[phi]
    out = {}
    rin = _rate_var(pops["nucleus1"], obs["nucleus1"], fano["nucleus1"], T)            # (n, de)
    # the keys' and the values' relays (each the queries' where a circuit has no set of its own)
    rkv, rv = ((_rate_var(pops[p], obs[p], fano[p], T) if p in pops else None) for p in ("nucleus1_kv", "nucleus1_v"))
    rkv = rin if rkv is None else rkv
    rv = rkv if rv is None else rv
    rho_in = g["rho_in"]
    out["q"] = np.einsum("hce,ne->hnc", (WQ / rho_in) ** 2, rin)
    out["k"] = np.einsum("hce,me->hmc", (WK / rho_in) ** 2, rkv)
    out["v"] = np.einsum("hce,me->hmc", (WV / rho_in) ** 2, rv)

    area_hook(circuit, "noise")(circuit, c, obs, fano, T, stages, f, df, out, weights)   # the area's own stages
    # an area may split ṽ's variance: a part x̃ inherits through correlated noise (relays shared by
    # heads and PT cells, pinned L2/3 counts), given on x̃'s grid, and a part independent per PT pair
    shared, indep = out.pop("_x_shared", None), out.pop("_vt_indep", None)
    if "l5pt" in pops:   # the PT cells' own count noise, on top of what they inherit
        own_pt = _rate_var(pops["l5pt"], obs["l5pt"], fano["l5pt"], T) / g["rho_pt"] ** 2
        if WS is not None and "core_skip" in circuit.projections:   # the skip path's relay noise
            own_pt = own_pt + np.einsum("hce,ne->hnc", (np.asarray(WS) / rho_in) ** 2, rin)
        out["v_tilde"] = out["v_tilde"] + own_pt
        indep = None if indep is None else indep + own_pt
    if "nucleus2" in pops:
        own = _rate_var(pops["nucleus2"], obs["nucleus2"], fano["nucleus2"], T) / g["rho_out"] ** 2
        if shared is not None and indep is not None:
            out["x_tilde"] = own + shared + np.einsum("hec,hnc->ne", WO ** 2, indep)
        else:
            out["x_tilde"] = own + np.einsum("hec,hnc->ne", WO ** 2, out["v_tilde"])
    return out


@register_hook("quadratic", "noise")
def _microcolumns(circuit, c, obs, fano, T, stages, f, df, out, weights=None):
    """s, κ, y, Z and ṽ of Algorithm 1's circuit (in place into ``out``).

    With interneurons: Z from :func:`_normalised_microcolumns`; with ON/OFF pairs as well, every
    stage from it. Otherwise (offset code, no interneurons) every cell independent, below."""
    pops = circuit.populations
    if weights is not None and "interneuron" in pops and "Z" in stages:
        full = c["normalize"] and "sign" in pops["l5it"].axes
        _normalised_microcolumns(circuit, c, obs, fano, T, stages, f, df, out, weights, full=full)
        if full:
            return
        z_new = out["Z"]
        _independent_microcolumns(circuit, c, obs, fano, T, stages, f, df, out)
        out["Z"] = z_new
        return
    _independent_microcolumns(circuit, c, obs, fano, T, stages, f, df, out)


def _independent_microcolumns(circuit, c, obs, fano, T, stages, f, df, out):
    """s, κ, y, Z and ṽ with every cell independent (the offset code, no interneurons)."""
    pops, g = circuit.populations, c["gains"]
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
        # Z is read from the L2/3 rates (see ctmhsa.mapping.decode): the query noise enters every
        # cell of macrocolumn i alike through phi(q_i); averaged over the dk features. Plus the
        # set point's own noise: the integral feedback pins the macrocolumn's pooled L2/3 spike
        # *count* at R_set T, so the pooled intensity the rates carry (hence D, Z) misses it by
        # that count's noise, relative variance F / (P R_set T) (measured, n = 4, 24 seeds: Z's
        # error was 1.8-2.3x this floor's variance without the term)
        _, Nb = _baseline_share(obs["l23"], c["R_set"], _built(l23).sum(axis=(-2, -1)))
        own = fano["l23"] * (1 + Nb) / (copies(l23) * c["R_set"] * T)
        out["Z"] = stages["Z"] ** 2 * (np.mean(lq[:, :, 0, :] ** 2 * out["q"], axis=-1) + own)
    if "l5pt" in pops:
        # The interneurons hold each macrocolumn's pooled L2/3 count at its set point (integral
        # feedback on spikes), so the attention errors sum to ~0 over j: δκ_j = ε_j - κ_j Σ ε,
        # and Σ_j δκ_j v_j = Σ_j ε_j (v_j - ṽ_i) — only deviations from ṽ_i carry κ noise.
        dv2 = (stages["v"][:, None, :, :] - stages["v_tilde"][:, :, None, :]) ** 2 \
            if "v_tilde" in stages else v ** 2
        if "sign" not in it.axes or not c["normalize"]:
            dv2 = v ** 2    # offset code (v0 not renormalised) or no interneurons at all
        out["v_tilde"] = np.nansum(var_it + dv2 * out["kappa"][..., None] + var_kv, axis=2)


def _normalised_microcolumns(circuit, c, obs, fano, T, stages, f, df, out, weights, full=True):
    """s, κ, y, Z, ṽ (and x̃'s shared part) of Algorithm 1's circuit with interneurons: first
    order in the independent noise sources, correlations included.

    Sources: every relay's window count (token t, entry e; variance ``D_te = F r / (P T rho_in²)``
    summed over its ON/OFF pair), which moves ``q_t = WQ x_t``, ``k_t`` and ``v_t`` of every head
    at once (features of one token, and q, k, v of one token, are correlated); every L2/3
    cell's count (variance ``F s R T``, R = R_set); the L5 IT cells' counts.

    The interneurons pin each macrocolumn's pooled L2/3 spike *count* at ``R T``: the common gain
    1 / (1 + g) follows the realised ``Z^act_i = Σ_jc phi(q_ic) phi(k_jc)``. With
    ``w_ic = Σ_j s_ijc``, ``ε'_ij = Σ_c s_ijc (λq_ic δq_ic + λk_jc δk_jc)`` (λ = phi'/phi) and
    ``E_i = Σ_j ε'_ij = δZ^act_i / Z_i``:

    - Z (read from the division, 1 + g): ``δZ_i / Z_i = E_i + Σ ε / (R T)``. The query enters
      with the weight ``w_ic`` of each feature (~1/dk), the keys with ``s_ijc``; the floor before
      took the query's relative noise per feature at weight 1 (dk times too much) and no keys.
    - ``δs_ijc = s_ijc (λq_ic δq_ic + λk_jc δk_jc - E_i) + count``; counts multinomial (the
      pooled count is fixed): variance ``F s (1 - s) / (R T)``, ``F κ (1 - κ) / (R T)`` for κ.
      The loop leaves a fraction ``ρ = tau_res / T`` of the pool's own variance free
      (:func:`loop_residual_time`, ``c["pool_free"]``): ``F s (1 - (1 - ρ) s) / (R T)``, and a
      share-weighted sum keeps ``ρ`` of its ``(Σ s a)²`` term (a single key's κ: ``F ρ / (R T)``).
      At the lif level every count also holds the somata's baseline, a share ``b = r_base / R``
      per cell (:func:`_baseline_share`): the shares become ``s + b`` and ``κ + dk b`` of a pool
      ``Σκ + N b``.
    - ``δκ_ij = ε'_ij - κ_ij E_i``; ``δy_ijc = v_jc δκ_ij + κ_ij δv_jc`` (κ_ij and v_j share
      token j's relays) plus the IT counts; ``δṽ_ic = Σ_j [(v_jc - ṽ_ic) ε'_ij + κ_ij δv_jc]``
      plus the IT counts (Σ_j δκ_ij = 0: only deviations from ṽ_i carry attention noise).
    - x̃ = Σ_hc WO ṽ: the heads and the PT cells share relays and L2/3 counts; that part is
      returned as ``out["_x_shared"]`` (``(n, de)``), the independent IT counts as
      ``out["_vt_indep"]``.

    ``full=False``: only Z (the offset code keeps :func:`_independent_microcolumns`).
    """
    pops = circuit.populations
    l23, it = pops["l23"], pops["l5it"]
    WQ, WK, WV, WO = (np.asarray(x, float) for x in (weights.WQ, weights.WK, weights.WV, weights.WO))
    rho_in = c["gains"]["rho_in"]
    s = np.nan_to_num(np.asarray(stages["s"], float))                    # (H, n, m, dk), absent cells 0
    kap = np.nan_to_num(np.asarray(stages["kappa"], float))              # (H, n, m)
    q, k = stages["q"], stages["k"]
    H, n, m, dk = s.shape
    with np.errstate(divide="ignore", invalid="ignore"):
        lq = np.nan_to_num(df(q) / f(q))                                  # (H, n, dk)
        lk = np.nan_to_num(df(k) / f(k))                                  # (H, m, dk)
    # the relays' tokens: query token i is source i; key token j is source j, or n + j with the
    # keys' own relays (every circuit built now has them)
    cross = "nucleus1_kv" in pops
    D = _rate_var(pops["nucleus1"], obs["nucleus1"], fano["nucleus1"], T) / rho_in ** 2      # (n, de)
    if cross:
        D = np.concatenate([D, _rate_var(pops["nucleus1_kv"], obs["nucleus1_kv"], fano["nucleus1_kv"], T)
                            / rho_in ** 2])
    kvsrc = vsrc = np.arange(m) + (n if cross else 0)
    if "nucleus1_v" in pops:   # values from their own relays (independent of the keys')
        vsrc = np.arange(m) + D.shape[0]
        D = np.concatenate([D, _rate_var(pops["nucleus1_v"], obs["nucleus1_v"], fano["nucleus1_v"], T) / rho_in ** 2])
    R = np.asarray(c["R_set"], float)
    cnt = fano["l23"] / (copies(l23) * R * T)                             # (H, n): count variance per unit of s
    # lif: every count carries the baseline too (its share b per cell, Nb per macrocolumn), and
    # the pinned pooled count is (1 + Nb) R T: multinomial in shares (s + b) / (1 + Nb)
    present = _built(l23)                                                 # (H, n, m, dk): cells built
    b, Nb = _baseline_share(obs["l23"], R, present.sum(axis=(-2, -1)))
    var_it = None
    if full:
        a = c["a"][:, :, None, None]
        var_it = np.nan_to_num(_rate_var(it, obs["l5it"], fano["l5it"], T) / (c["gains"]["rho_it"] * a) ** 2)
    heads = dict(s=s, kap=kap, lq=lq, lk=lk, WQ=WQ, WK=WK, WV=WV, WO=WO, v=np.asarray(stages["v"], float),
                 Zst=np.asarray(stages["Z"], float), cnt=np.broadcast_to(cnt, (H, n)),
                 b=np.broadcast_to(b, (H, n)), Nb=np.broadcast_to(Nb, (H, n)), present=present, var_it=var_it,
                 free=np.broadcast_to(np.asarray(c.get("pool_free", 0.0), float), (H, n)))
    parts, cx, pinned = [], 0.0, 0.0
    for sl in _head_chunks(H, n * D.size * max(dk, WV.shape[1])):
        part = microcolumn_floor(D, kvsrc, vsrc, full=full, with_pt="l5pt" in pops, with_out="nucleus2" in pops,
                                 **{key: (None if x is None else x[sl]) for key, x in heads.items()})
        # x̃'s coefficients on the relays add over the heads before they are squared
        cx, pinned = cx + part.pop("_cx", 0.0), pinned + part.pop("_x_pinned", 0.0)
        parts.append(part)
    for key in parts[0]:
        out[key] = np.concatenate([p[key] for p in parts])
    if "nucleus2" in pops and "v_tilde" in out:   # x̃_ie = Σ_hc WO_hec ṽ_hic: relays shared by heads, L2/3 counts by the c
        out["_x_shared"] = np.einsum("iote,te->io", cx * cx, D) + pinned


CHUNK_VALUES = 2 ** 22
"""Largest per-chunk array of :func:`microcolumn_floor` (values, 32 MB): the floor of a run's
heads is computed a few heads at a time, so the client of a 100-head cortex holds one head's
source arrays, not every head's at once (19 GB for 100 barrel heads when done in one piece)."""


def _head_chunks(H: int, per_head: int) -> list:
    """Slices of the H heads with at most :data:`CHUNK_VALUES` values of ``per_head`` each."""
    step = max(1, CHUNK_VALUES // max(1, per_head))
    return [slice(h, min(H, h + step)) for h in range(0, H, step)]


def microcolumn_floor(D, kvsrc, vsrc, *, s, kap, lq, lk, WQ, WK, WV, WO, v, Zst, cnt, b, Nb, present, var_it,
                      free=0.0, full=True, with_pt=True, with_out=True) -> dict:
    """The first-order floors of :func:`_normalised_microcolumns` for a chunk of heads (leading
    axis of every array but ``D``, ``kvsrc``, ``vsrc``).

    Every noise source is a relay ``(t, e)`` of variance ``D[t, e]``; query token ``i`` moves source
    ``i``, key token ``j`` source ``kvsrc[j]`` and value token ``j`` source ``vsrc[j]``. A stage's
    coefficient vector on the sources is a sum of a few rows (a query row, a key row, a value
    row, and the dense ``E_i`` of the pooled division), so its D-weighted square norm is summed
    from those rows' products: ``‖−E + a + b‖² = ‖E‖² + ‖a‖² + ‖b‖² − 2⟨E, a⟩ − 2⟨E, b⟩ + 2⟨a, b⟩``
    with ``⟨a, b⟩ = 0`` unless ``a`` and ``b`` sit on one source. Only ṽ's vector (a sum over the
    keys) is built densely, per chunk. Returns the chunk's ``Z`` and, with ``full``, ``s``,
    ``kappa``, ``y`` and (``with_pt``) ``v_tilde``, ``_vt_indep`` and (``with_out``) ``_cx``,
    ``_x_pinned``, x̃'s shared coefficients and pinned-count variance, summed over the chunk.
    ``free`` (scalar or ``(h, n)``): the fraction of each pooled count's own variance the
    interneurons' loop leaves (:func:`loop_residual_time`; 0: a perfect pin).
    """
    h, n, m, dk = s.shape
    ns, ne = D.shape
    ii = np.arange(n)
    Dq, Dk, Dv = D[:n], D[kvsrc], D[vsrc]                                 # each token's source rows
    same_k = (kvsrc[None, :] == ii[:, None]).astype(float)               # (n, m): key j on query i's source
    same_vq = (vsrc[None, :] == ii[:, None]).astype(float)               # value j on query i's source
    same_vk = (vsrc == kvsrc).astype(float)                               # (m,): value j on key j's source
    # coefficients on the relays (…, source token, e)
    qco = np.einsum("hic,hce->hice", lq, WQ)                              # λq δq_ic on token i
    kco = np.einsum("hjc,hce->hjce", lk, WK)                              # λk δk_jc on token j
    epsq = np.einsum("hijc,hice->hije", s, qco)                           # ε'_ij, query part (source i)
    epsk = np.einsum("hijc,hjce->hije", s, kco)                           # ε'_ij, key part (source kvsrc j)
    E = np.zeros((h, n, ns, ne))                                          # E_i = Σ_j ε'_ij = δZ^act_i / Z_i
    E[:, ii, ii] += epsq.sum(axis=2)
    E[:, :, kvsrc] += epsk
    EE = np.einsum("hite,te->hi", E * E, D)                               # ‖E_i‖²
    out = dict(Z=Zst ** 2 * (EE + cnt * (1 + Nb)))
    if not full:
        return out
    Eq, Ek = E[:, ii, ii], E[:, :, kvsrc]                                 # E_i on query i's, key j's source
    # s_ijc: s (λq δq_ic + λk δk_jc - E_i) + multinomial count
    norm_s = (EE[:, :, None, None] + np.einsum("hice,ie->hic", qco ** 2, Dq)[:, :, None]
              + np.einsum("hjce,je->hjc", kco ** 2, Dk)[:, None]
              - 2 * np.einsum("hie,hice,ie->hic", Eq, qco, Dq)[:, :, None]
              - 2 * np.einsum("hije,hjce,je->hijc", Ek, kco, Dk)
              + 2 * same_k[None, :, :, None] * np.einsum("hice,hjce,ie->hijc", qco, kco, Dq))
    var_s = s ** 2 * norm_s
    # the shares of the pinned count: a cell's s + b, a microcolumn's κ + (its cells) b, the
    # macrocolumn's Σκ + N b (1 + N b where the decoded κ sum to 1). The loop pins all but a
    # fraction `free` of the pool's variance (loop_residual_time): a share a's part of it,
    # (a / pool)² free cnt pool, is not removed
    pinned_frac = (1.0 - np.broadcast_to(np.asarray(free, float), cnt.shape))[..., None]    # (h, n, 1)
    b3 = b[..., None]
    sb = s + b3[..., None] * present                                      # a cell's share, baseline included
    kb = kap + b3 * present.sum(axis=-1)                                  # a microcolumn's share
    pool3 = kb.sum(axis=-1, keepdims=True)                                # (h, n, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["s"] = var_s + cnt[:, :, None, None] * np.nan_to_num(
            sb * (1 - pinned_frac[..., None] * sb / pool3[..., None]))
    # κ_ij = ε'_ij - κ_ij E_i
    eps_norm = (np.einsum("hije,ie->hij", epsq ** 2, Dq) + np.einsum("hije,je->hij", epsk ** 2, Dk)
                + 2 * same_k * np.einsum("hije,hije,ie->hij", epsq, epsk, Dq))
    eps_E = np.einsum("hije,hie,ie->hij", epsq, Eq, Dq) + np.einsum("hije,hije,je->hij", epsk, Ek, Dk)
    ck_norm = eps_norm - 2 * kap * eps_E + kap ** 2 * EE[..., None]       # ‖ε'_ij − κ_ij E_i‖²
    with np.errstate(divide="ignore", invalid="ignore"):
        var_kc = cnt[..., None] * np.nan_to_num(kb * (1 - pinned_frac * kb / pool3))   # its pinned count's variance
    out["kappa"] = ck_norm + var_kc
    # y_ijc = κ_ij v_jc: v δκ + κ δv (token j's relays) + the IT counts
    ck_v = (same_vq[:, :, None] * epsq + same_vk[:, None] * epsk
            - kap[..., None] * E[:, :, vsrc])                             # κ's vector on value j's source
    var_y = (v[:, None] ** 2 * ck_norm[..., None]
             + 2 * v[:, None] * kap[..., None] * np.einsum("hije,hce,je->hijc", ck_v, WV, Dv)
             + kap[..., None] ** 2 * np.einsum("hce,je->hjc", WV ** 2, Dv)[:, None])
    out["y"] = var_y + var_it + v[:, None] ** 2 * var_kc[..., None]
    if not with_pt:
        return out
    # ṽ_ic = Σ_j κ_ij v_jc: Σ_j (v_jc - ṽ_ic) ε'_ij + κ_ij δv_jc, built densely on the sources
    vt = np.einsum("hij,hjc->hic", kap, v)
    dv = v[:, None] - vt[:, :, None]                                      # (h, n, m, dv)
    cv = np.zeros((h, n, ns, v.shape[-1], ne))                            # (h, i, source, c, e)
    cv[:, ii, ii] += np.einsum("hijc,hije->hice", dv, epsq)
    cv[:, :, kvsrc] += np.einsum("hijc,hije->hijce", dv, epsk)
    cv[:, :, vsrc] += np.einsum("hij,hce->hijce", kap, WV)
    # the L2/3 counts, pinned (multinomial: Σ_j kb_j a_j² - (Σ_j kb_j a_j)² / Σ_j kb_j; at b = 0
    # the second term is ṽ² (1 - Σκ)², zero where the decoded κ sum to 1)
    def pinned(a):                                                        # a: (h, n, m, o)
        with np.errstate(divide="ignore", invalid="ignore"):
            return cnt[..., None] * np.nan_to_num(np.einsum("hij,hijo->hio", kb, a ** 2)
                                                  - pinned_frac * np.einsum("hij,hijo->hio", kb, a) ** 2 / pool3)
    indep = var_it.sum(axis=2)
    out["v_tilde"] = np.einsum("hitce,te->hic", cv * cv, D) + pinned(dv) + indep
    out["_vt_indep"] = indep
    if with_out:
        out["_cx"] = np.einsum("hoc,hitce->iote", WO, cv, optimize=True)  # (n, de out, ns, e)
        out["_x_pinned"] = pinned(np.einsum("hoc,hijc->hijo", WO, dv)).sum(axis=0)
    return out


@register_hook("linear", "noise")
def _key_value_memory(circuit, c, obs, fano, T, stages, f, df, out, weights=None):
    """S, z, Z and ṽ of the linear circuit (in place into ``out``).

    With ``p_jfc = phi(k_jf) v_jc`` (outer cells) and ``ṽ_c = Σ_f phi(q_f) S_fc / Z``:
    ``δṽ_c = Σ_f phi(q_f) (δS_fc - ṽ_c δz_f) / Z`` because the interneurons divide by the
    pooled read-out of z (integral feedback), so the key noise enters weighted by
    ``(v_jc - ṽ_c)²`` (as in Algorithm 1's circuit), the value noise by ``κ_ij²``
    (``κ_ij = phi(q_i)·phi(k_j) / Z_i``), and each population's own count noise adds.
    """
    pops, g = circuit.populations, c["gains"]
    m = circuit.meta.m
    q, k, v = stages["q"], stages["k"], stages["v"]                  # (H,n,dk) (H,m,dk) (H,m,dv)
    fq, fk, dfk, dfq = f(q), f(k), df(k), df(q)
    own_outer = _rate_var(pops["outer"], obs["outer"], fano["outer"], T) / g["rho_outer"] ** 2
    own_mem = _rate_var(pops["memory"], obs["memory"], fano["memory"], T) * (m / g["rho_memory"]) ** 2
    var_k = dfk ** 2 * out["k"]                                        # (H, m, dk) on phi(k)
    # S_fc = Σ_j p_jfc: every outer cell's count, its key and value inputs, the memory's count
    out["S"] = (np.einsum("hmf,hmc->hfc", var_k, v ** 2) + np.einsum("hmf,hmc->hfc", fk ** 2, out["v"])
                + own_outer.sum(axis=1) + own_mem)
    normalize = "interneuron" in pops
    if normalize:
        Z = stages["Z"]
        own_oz = _rate_var(pops["outer_z"], obs["outer_z"], fano["outer_z"], T) / g["rho_outer"] ** 2
        own_mz = _rate_var(pops["memory_z"], obs["memory_z"], fano["memory_z"], T) * (m / g["rho_memory"]) ** 2
        own_z = own_oz.sum(axis=1) + own_mz                            # (H, dk)
        out["z"] = var_k.sum(axis=1) + own_z
        # Z_i is measured on the read-out_z somata: z and q noise through Σ_f phi(q_f) z_f
        z = stages["z"]
        out["Z"] = np.einsum("hnf,hf->hn", fq ** 2, out["z"]) + np.einsum("hnf,hnf,hf->hn", dfq ** 2, out["q"], z ** 2)
        # plus the set point's own count noise, as in Algorithm 1's circuit: the integral feedback
        # pins the pooled read-out_z spike count at R_set T (relative variance F / (P R_set T))
        out["Z"] = out["Z"] + Z ** 2 * fano["readout_z"] / (copies(pops["readout_z"]) * c["R_set"] * T)
        own_rz = _rate_var(pops["readout_z"], obs["readout_z"], fano["readout_z"], T).sum(axis=-1) / c["R_set"] ** 2
    else:   # no division: Z = 1, nothing to compensate
        Z, z, own_z, own_rz = np.ones(q.shape[:2]), np.zeros(fq.shape[::2]), np.zeros(fq.shape[::2]), 0.0
    R = c["R_set"]                                                      # (H, n)
    vt = stages["v_tilde"] if normalize else np.zeros_like(stages["v_tilde"])   # nothing to compensate
    v_eff, S_eff = v, stages["S"]
    if not c["onoff"]:   # offset code: outer cells carry v + v0, the read-out S + v0 z and ṽ + v0
        v_eff, vt = v + c["v0"][:, None, None], vt + c["v0"][:, None, None]
        S_eff = S_eff + c["v0"][:, None, None] * z[..., None]
    w = fq / Z[..., None]                                               # (H, n, dk)
    kappa = np.einsum("hnf,hmf->hnm", w, fk)
    dvj = v_eff[:, None, :, :] - vt[:, :, None, :]                        # (H, n, m, dv)
    key = np.einsum("hnf,hmf,hnmc->hnc", w ** 2, var_k, dvj ** 2)
    val = np.einsum("hnm,hmc->hnc", kappa ** 2, out["v"])
    counts = np.einsum("hnf,hfc->hnc", w ** 2, own_outer.sum(axis=1) + own_mem) \
        + vt ** 2 * np.einsum("hnf,hf->hn", w ** 2, own_z)[..., None]
    query = np.einsum("hnf,hnf,hnfc->hnc", dfq ** 2 / Z[..., None] ** 2, out["q"],
                      (S_eff[:, None] - vt[:, :, None, :] * z[:, None, :, None]) ** 2)
    own_read = _rate_var(pops["readout"], obs["readout"], fano["readout"], T).sum(axis=2) / R[..., None] ** 2
    if "l5pt" in pops:
        out["v_tilde"] = key + val + counts + query + own_read + vt ** 2 * np.asarray(own_rz)[..., None]
