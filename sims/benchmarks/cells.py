"""``ctmhsa bench cells``: spiking cells that multiply and divide, measured.

Prints and writes (JSON + npz, atomically):

1. product table — L5 IT rate vs the encoded product basal x apical on an 8 x 8 grid spanning an
   8-fold range of each factor: NRMSE of the rate above the baseline (lif: ``r_base``, escape: 0)
   vs ``rho b a``, and the spike-count noise floor (measured Fano factor);
2. normalisation table — a macrocolumn of 32 L2/3 cells with 10 interneurons, four input sets
   whose Σu spans > 3x: pooled rate / set point, proportionality slope, NRMSE vs noise floor,
   interneuron rates;
3. in-silico fig. 2 — (a) f–I curves of an L5 IT cell at three apical drives; (b) the same cell
   with its L2/3 (apical) input intact vs 70 % silenced; (c) an L2/3 cell's response to its own
   drive at three levels of the other cells' drive, with and without interneurons;
4. law table (``--laws``) — L5 IT cells following a two-point-neuron law (``co4``, ``tm1``..``tm4``,
   :mod:`ctmhsa.neurons.laws`) with signed basal and apical drives from ON/OFF relays: rate vs
   ``rho law(R, C)`` on held-out cells (:func:`law_table`).
"""

from __future__ import annotations

import os
import time

import numpy as np

from ctmhsa.circuits.builders import DEFAULT_N_INH
from ctmhsa.maths.codes import DEFAULT_GAINS as G
from ctmhsa.neurons.cellsim import Drive, Interneurons, simulate_cells, spike_count_nrmse_floor
from ctmhsa.neurons.firing import get_firing
from ctmhsa.neurons.laws import law_numpy
from ctmhsa.neurons.params import DEFAULT_PARAMS, k_syn
from ctmhsa.sims.io import atomic_savez, atomic_write_json, versions

__all__ = ["HELP", "add_arguments", "product_table", "normalisation_table", "fig2_data", "LAW_RANGES",
           "law_grid", "signed_drive", "drive_variances", "gaussian_mean", "law_table", "main"]

HELP = ("spiking cells: product and normalisation error tables with noise floors, and the in-silico "
        "fig. 2 data (npz)")

U = 1e-3
W = U / (100 * 10.0)          # 10 Hz on 100 synapses = 1 encoded unit
DT = {"escape": 1e-3, "lif": 1e-4}
LAW_T = {"escape": 20.0, "lif": 10.0}
"""Window of the law table per level (s)."""


def add_arguments(parser) -> None:
    parser.add_argument("--levels", nargs="+", default=["escape", "lif"], choices=["escape", "lif"],
                        help="fidelity levels (default escape lif)")
    parser.add_argument("--skip-fig2", action="store_true", help="skip the fig. 2 data")
    parser.add_argument("--laws", nargs="+", default=[], choices=sorted(LAW_RANGES), metavar="LAW",
                        help="also measure L5 IT cells following these two-point laws on held-out cells "
                             f"({', '.join(sorted(LAW_RANGES))}; default none)")
    parser.add_argument("--law-firing", nargs="+", default=["poisson"], choices=["poisson", "population"],
                        help="how the law table's ON/OFF relays fire: poisson (Poisson counts, the default) and/or "
                             "population (one integrator each, as the digits circuits' relays fire)")
    parser.add_argument("--out-dir", default="bench_results",
                        help="output directory of cells.json and fig2_<level>.npz (default bench_results)")


def output_json(args) -> str:
    """The JSON this benchmark writes (``cells.json`` in ``--out-dir``), for the machine's state."""
    return os.path.join(args.out_dir, "cells.json")


def product_table(level: str, T: float = 20.0, seed: int = 1) -> dict:
    f = np.geomspace(0.25, 2.0, 8)
    B, A = (x.ravel() for x in np.meshgrid(f, f, indexing="ij"))
    rho = 20.0
    out = simulate_cells(level, "l5it", B.size, {"basal": Drive(10 * B, W), "apical": Drive(10 * A, W)},
                         duration=T, warmup=0.3, dt=DT[level], seed=seed, cell_params=dict(b_b=0.0, rho=rho))
    # both levels fire rho p above their baseline (escape: 0; lif: r_base, on the calibrated branch)
    r, p = out["rate"] - out["r_base"], B * A
    pred = rho * p
    nrmse = float(np.sqrt(np.mean((r - pred) ** 2)) / np.std(pred))
    floor = spike_count_nrmse_floor(pred + out["r_base"], T, out["fano"])   # every spike, measured Fano
    return dict(level=level, T=T, nrmse=nrmse, noise_floor=floor, ratio=nrmse / floor,
                bias=float(np.mean(r - pred) / np.mean(pred)),
                expected_bias=float(np.mean(out["expected"] - out["r_base"] - pred) / np.mean(pred)),
                r_base=out["r_base"], fano=out["fano"], n=int(p.size), b=B, a=A, rate=r)

def normalisation_table(level: str, T: float = 10.0, n_inh: int = DEFAULT_N_INH) -> dict:
    rng = np.random.default_rng(0)
    N = 32
    b0, a0 = rng.uniform(0.0, 1.0, N), rng.uniform(0.0, 1.0, N)
    R_set = G.r_l23 * N
    inh = Interneurons(I_set=1 / G.g_sh, w_pool=1 / (G.g_sh * R_set), w_shunt=G.g_sh, n=n_inh)
    rows = []
    for k, scale in enumerate([0.2, 0.7, 1.3, 2.2]):
        b, a = b0 * scale, a0 * scale
        out = simulate_cells(level, "l23", N, {"basal": Drive(10 * b, W), "apical": Drive(10 * a, W)},
                             duration=T, warmup=1.0, dt=DT[level], seed=10 + k, interneurons=inh,
                             cell_params=dict(b_b=0.0, b_a=0.0, rho=G.rho_l23))
        u = (b + 1) * (a + 1)
        target = R_set * u / u.sum()
        r = out["rate"] - out.get("r_base", 0.0)      # lif: the rate above the soma's baseline
        rows.append(dict(sum_u=float(u.sum()), pooled_over_set=float(r.sum() / R_set),
                         slope=float(r @ target / (target @ target)),
                         r_shape=float(np.corrcoef(r, u)[0, 1]),
                         nrmse=float(np.sqrt(np.mean((r - target) ** 2)) / np.std(target)),
                         # counting noise of every spike (baseline included), measured Fano
                         noise_floor=spike_count_nrmse_floor(target + out.get("r_base", 0.0), T,
                                                             out.get("fano", 1.0)),
                         fano=out.get("fano", 1.0),
                         inh_rate=float(np.mean(out["inh_rate"]))))
    pooled = [row["pooled_over_set"] for row in rows]
    slopes = [row["slope"] for row in rows]
    return dict(level=level, T=T, n_inh=n_inh, rows=rows,
                normaliser_spread=float(max(pooled) - min(pooled)),
                slope_spread=float(max(slopes) - min(slopes)))


def fig2_data(level: str, T: float = 5.0) -> dict:
    """Fig. 2 protocols on the ``level`` cells (``T`` s per point): rates in Hz, drives in encoded
    units; ``a_r_base`` and ``c_r_base`` (Hz) are the somata's baselines in panels (a, b: L5 IT)
    and (c: L2/3) (lif: 1 and 1 Hz since version 0.15, escape: 0), ``c_prediction`` the normalised L2/3 rate above
    its baseline, ``R_set u_own / Σu`` with ``u = phi(basal) phi(apical)``."""
    basal = np.linspace(0.0, 3.0, 13)
    data = {"basal": basal, "level": np.array(level)}
    # (a) apical input multiplies the f–I gain of an L5 (IT) cell
    apical = np.array([0.5, 1.0, 2.0])
    Bg, Ag = (x.ravel() for x in np.meshgrid(basal, apical, indexing="ij"))
    out = simulate_cells(level, "l5it", Bg.size, {"basal": Drive(10 * Bg, W), "apical": Drive(10 * Ag, W)},
                         duration=T, warmup=0.3, dt=DT[level], seed=21, cell_params=dict(b_b=0.0, rho=20.0))
    data["a_apical"] = apical
    data["a_rate"] = out["rate"].reshape(basal.size, apical.size)
    data["a_r_base"] = np.array(float(out.get("r_base", 0.0)))
    # (b) silencing 70 % of the L2/3 input to the apical tuft lowers the gain of L5 IT
    fractions = np.array([1.0, 0.3])
    Bg, Fg = (x.ravel() for x in np.meshgrid(basal, fractions, indexing="ij"))
    out = simulate_cells(level, "l5it", Bg.size, {"basal": Drive(10 * Bg, W), "apical": Drive(10 * 1.0 * Fg, W)},
                         duration=T, warmup=0.3, dt=DT[level], seed=22, cell_params=dict(b_b=0.0, rho=20.0))
    data["b_l23_active_fraction"] = fractions
    data["b_rate"] = out["rate"].reshape(basal.size, fractions.size)
    # (c) divisive normalisation: in each of many independent macrocolumns of N L2/3 cells, K
    # target cells (indices 0..K-1, averaged: a single cell's count is too noisy to show the
    # division) get their own basal drive while the other N-K get a common drive
    others = np.array([0.3, 1.0, 2.0])
    N, K = 16, 4
    own, oth = (x.ravel() for x in np.meshgrid(basal, others, indexing="ij"))
    b = np.repeat(oth, N).reshape(own.size, N)
    b[:, :K] = own[:, None]
    b = b.ravel()
    curves = {}
    for with_inh in (True, False):
        inh = (Interneurons(I_set=1 / G.g_sh, w_pool=1 / (G.g_sh * G.r_l23 * N), w_shunt=G.g_sh,
                            n=10, groups=own.size) if with_inh else None)
        res = simulate_cells(level, "l23", b.size, {"basal": Drive(10 * b, W), "apical": Drive(10 * np.ones(b.size), W)},
                             duration=T, warmup=0.5, dt=DT[level], seed=30 + with_inh,
                             interneurons=inh, cell_params=dict(b_b=0.0, b_a=0.0, rho=G.rho_l23))
        curves[with_inh] = res["rate"].reshape(own.size, N)[:, :K].mean(axis=1).reshape(basal.size, others.size)
    # elu1 of non-negative drives is 1 + drive; the apical drive is 1 unit for every cell
    u_own, u_oth = 2.0 * (1.0 + own), 2.0 * (1.0 + oth)
    data["c_prediction"] = (G.r_l23 * N * u_own / (K * u_own + (N - K) * u_oth)).reshape(basal.size, others.size)
    data["c_r_base"] = np.array(float(res.get("r_base", 0.0)))
    data["c_others"] = others
    data["c_rate_with_interneurons"] = curves[True]
    data["c_rate_without_interneurons"] = curves[False]
    # gains: least-squares slope of rate on basal drive (above 0)
    data["a_gain"] = np.array([np.polyfit(basal, data["a_rate"][:, k], 1)[0] for k in range(apical.size)])
    data["b_gain"] = np.array([np.polyfit(basal, data["b_rate"][:, k], 1)[0] for k in range(fractions.size)])
    return data

LAW_RANGES = {
    # co4: R² + 2R is smallest at R = -1 and the apical term C (1 + |R|) sets the sign; past R = 1.5
    # with C > 0 (or R < -3 with C < 0) the ReLU6 holds it at 6 (or 0) over the whole C range
    "co4": ((-3.0, 1.5), (-2.0, 3.0)),
    # eqs. 2-5 are R times a positive modulation: 0 for R < 0; |R C| <= 2 keeps tm1 (e^{RC}) and
    # tm4 (2^{RC}) within 8.4 and 8 units
    **{tm: ((-0.5, 2.0), (-1.0, 1.0)) for tm in ("tm1", "tm2", "tm3", "tm4")},
}
"""Working range ``((R_lo, R_hi), (C_lo, C_hi))`` (encoded units) of each law in the law table."""
LAW_PEAK = 120.0
"""Hz: the law table's gain puts the law's largest value over its range at this rate (co4: rho = 20 Hz)."""


def law_grid(law: str, n: int = 8, held_out: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Grid of encoded drives ``(R, C)`` (flat, ``n * n`` cells) over the law's working range:
    ``n`` evenly spaced nodes per axis spanning it (the tuning grid), or the midpoints of
    ``n + 1`` such nodes (``held_out``: ``n`` points per axis inside the range, none on a tuning node)."""
    axes = []
    for lo, hi in LAW_RANGES[law]:
        if held_out:
            edges = np.linspace(lo, hi, n + 1)
            axes.append(0.5 * (edges[1:] + edges[:-1]))
        else:
            axes.append(np.linspace(lo, hi, n))
    R, C = np.meshgrid(*axes, indexing="ij")
    return R.ravel(), C.ravel()


def signed_drive(x, rho_in: float = G.rho_in, regular: bool = False) -> tuple:
    """A signed potential ``u x`` on a compartment, as the circuit's ON/OFF relays make it: the ON
    relay fires ``rho_in [x]_+`` through ``+u/rho_in``, the OFF relay ``rho_in [-x]_+`` through
    ``-u/rho_in`` (Hz, V·s); Poisson relays, or (``regular``) integrators (:class:`Drive`)."""
    x = np.asarray(x, float)
    return (Drive(rho_in * np.maximum(x, 0.0), U / rho_in, 1, regular),
            Drive(rho_in * np.maximum(-x, 0.0), -U / rho_in, 1, regular))


def _impulse_gains(params, dt: float) -> tuple[float, float]:
    """``(Σ hV_m², Σ hU_m²)``: the variance of a dendrite ``V`` and of the soma ``U`` following it
    (``tau_m``), per unit of spike-count variance and unit current jump, sampled after each
    step's state update (the discrete impulse responses, as ``soma_cross_gain`` sums hU hV)."""
    a, c, e = (np.exp(-dt / t) for t in (params.tau_syn, params.tau_d, params.tau_m))
    I, V, Us, gv, gu = 1.0, 0.0, 0.0, 0.0, 0.0
    for _ in range(int(40 * max(params.tau_syn, params.tau_d, params.tau_m) / dt) + 10):
        V, Us, I = c * V + (1 - c) * I, e * Us + (1 - e) * V, a * I
        gv, gu = gv + V * V, gu + Us * Us
    return gv, gu


def drive_variances(R, C, rho_in: float = G.rho_in, dt: float = 1e-3, params=DEFAULT_PARAMS) -> tuple:
    """Shot-noise variances (units of u²) of ``R = U/u`` and ``C = V_a/u`` under
    :func:`signed_drive`: Poisson counts (variance ``rate dt`` per step) of ``rho_in |x|`` Hz in all,
    each spike a jump ``k_syn u/rho_in`` of the current (Campbell's theorem in discrete time,
    docs/phi_bias.md); from the declared rates and the cell's constants only."""
    gv, gu = _impulse_gains(params, dt)
    per_unit = dt * k_syn(params, dt) ** 2 / rho_in     # rho_in |x| dt (k_syn / rho_in)²
    return np.abs(np.asarray(R, float)) * per_unit * gu, np.abs(np.asarray(C, float)) * per_unit * gv


def gaussian_mean(f, R, C, var_R, var_C, order: int = 32) -> np.ndarray:
    """``E f(R + sR Z1, C + sC Z2)`` for independent standard normals (Gauss-Hermite)."""
    z, w = np.polynomial.hermite_e.hermegauss(order)
    w = w / w.sum()
    Rz = R[:, None, None] + np.sqrt(var_R)[:, None, None] * z[None, :, None]
    Cz = C[:, None, None] + np.sqrt(var_C)[:, None, None] * z[None, None, :]
    return np.einsum("nij,i,j->n", f(Rz, Cz), w, w)


def law_table(level: str, law: str = "co4", T: float = 20.0, seed: int = 2, held_out: bool = True,
              n: int = 8, reps: int = 2, rho_in: float = G.rho_in, params=DEFAULT_PARAMS,
              firing: str = "poisson") -> dict:
    """L5 IT cells following ``law`` (:mod:`ctmhsa.neurons.laws`) under signed drives, measured.

    ``reps`` cells at each point of :func:`law_grid` (``held_out``: the midpoints, spike seed
    ``seed``; the tuning grid is its nodes), basal ``R`` and apical ``C`` each from an ON/OFF
    relay pair (:func:`signed_drive`, ``rho_in`` Hz per unit, Poisson counts), ``T`` s after a
    0.3 s warm-up. The prediction is ``rho law(R, C)`` above the soma's baseline (lif: ``r_base``),
    ``rho`` putting the law's largest value over the range at :data:`LAW_PEAK`. ``params``: the
    cells' constants (slower dendrites and soma, ``tau_d``, ``tau_m``, average the shot noise more).
    ``firing``: how the relays fire (:data:`ctmhsa.neurons.firing.FIRING_MODES`): Poisson counts
    (``"poisson"``), or, as the circuits of ``firing="population"`` make them (the digits
    circuits), one integrator each (``"regular"``, ``"population"``); the cells' own spikes are
    the level's either way.

    Returns
    -------
    dict
        ``nrmse`` (RMS error / std of the prediction) and its spike-count ``noise_floor`` (measured
        Fano factor); ``rms_range`` the RMS error / ``rho (max - min)`` of the law over its working
        range (the target: <= 5 %) and ``floor_range`` the counting noise alone in those units;
        ``bias`` the mean error and ``intensity_rms`` / ``intensity_bias`` those of the window-mean
        intensity (no count noise: the systematic part), all / ``rho (max - min)``;
        ``predicted_bias`` the mean shot-noise bias ``rho (E law(R + noise, C + noise) - law(R, C))``
        for Gaussian fluctuations of the variances of :func:`drive_variances` (nothing measured),
        ``explained_rms`` the intensity's RMS departure from that expectation; ``wall_s``.
    """
    t0 = time.perf_counter()
    f = law_numpy(law)
    R, C = (np.tile(x, reps) for x in law_grid(law, n, held_out))
    (rlo, rhi), (clo, chi) = LAW_RANGES[law]
    dense = f(*np.meshgrid(np.linspace(rlo, rhi, 201), np.linspace(clo, chi, 201), indexing="ij"))
    rho = LAW_PEAK / float(dense.max())
    scale = rho * float(dense.max() - dense.min())
    dt = DT[level]
    regular = not get_firing(firing).poisson
    out = simulate_cells(level, "l5it", R.size, {"basal": signed_drive(R, rho_in, regular),
                                                 "apical": signed_drive(C, rho_in, regular)},
                         duration=T, warmup=0.3, dt=dt, seed=seed, cell_params=dict(b_b=0.0, rho=rho), law=law,
                         params=params)
    pred = rho * f(R, C)
    r, intensity = out["rate"] - out["r_base"], out["expected"] - out["r_base"]
    err, sys_err = r - pred, intensity - pred
    # the shot-noise prediction is that of Poisson relays; an integrator's spikes have no count noise to average
    expected_law = (rho * gaussian_mean(f, R, C, *drive_variances(R, C, rho_in, dt, params)) if not regular
                    else np.full_like(pred, np.nan))

    def rms(x):
        return float(np.sqrt(np.mean(x ** 2)))

    return dict(level=level, law=law, firing=firing, T=T, seed=seed, held_out=held_out, n=int(R.size), rho=rho,
                rho_in=rho_in,
                R_range=[rlo, rhi], C_range=[clo, chi],
                nrmse=rms(err) / float(np.std(pred)),
                noise_floor=spike_count_nrmse_floor(pred + out["r_base"], T, out["fano"]),
                rms_range=rms(err) / scale,
                floor_range=float(np.sqrt(np.mean(out["fano"] * (pred + out["r_base"]) / T))) / scale,
                bias=float(np.mean(err)) / scale, intensity_rms=rms(sys_err) / scale,
                intensity_bias=float(np.mean(sys_err)) / scale,
                predicted_bias=float(np.mean(expected_law - pred)) / scale,
                explained_rms=rms(intensity - expected_law) / scale,
                r_base=out["r_base"], fano=out["fano"], wall_s=time.perf_counter() - t0,
                R=R, C=C, rate=r, intensity=intensity)


def main(args) -> int:
    outdir = args.out_dir
    levels = args.levels
    summary = dict(benchmark="cells", versions=versions(), product={}, normalisation={}, fig2={})
    t0 = time.perf_counter()
    for level in levels:
        summary["product"][level] = {k: v for k, v in product_table(level).items()
                                     if not isinstance(v, np.ndarray)}
        summary["normalisation"][level] = normalisation_table(level)
        if not args.skip_fig2:
            d = fig2_data(level)
            atomic_savez(os.path.join(outdir, f"fig2_{level}.npz"), **d)
            summary["fig2"][level] = dict(a_gain=d["a_gain"].tolist(), b_gain=d["b_gain"].tolist(),
                                          file=os.path.join(outdir, f"fig2_{level}.npz"))
    if args.laws:   # the "laws" entry only when asked: the default output is unchanged
        # per law, level and relays' firing: the tuning grid (seed 1), then the held-out cells (other
        # grid, seed 2)
        summary["laws"] = {law: {level: {firing: {grid: {k: v for k, v in law_table(
            level, law, T=LAW_T[level], seed=seed, held_out=grid == "held_out", firing=firing).items()
            if not isinstance(v, np.ndarray)} for grid, seed in (("tuning", 1), ("held_out", 2))}
            for firing in args.law_firing} for level in levels} for law in args.laws}
    summary["wall_s"] = time.perf_counter() - t0
    print("\nProduct: L5 IT rate vs basal x apical (8 x 8 grid, 8-fold range per factor)")
    print(f"  {'level':<7} {'NRMSE':>8} {'floor':>8} {'ratio':>6}  notes")
    for level, p in summary["product"].items():
        note = (f"bias {p['bias']:+.2%} (intensity {p['expected_bias']:+.2%}); baseline {p['r_base']:g} Hz, "
                f"Fano {p['fano']:.2f}")
        print(f"  {level:<7} {p['nrmse']:>8.4f} {p['noise_floor']:>8.4f} {p['nrmse'] / p['noise_floor']:>6.2f}  {note}")
    print("\nNormalisation: 32 L2/3 cells + 10 interneurons, r_k = R_set u_k / Σu")
    print(f"  {'level':<7} {'Σu':>7} {'pooled/R':>9} {'slope':>7} {'NRMSE':>7} {'floor':>7} {'inh Hz':>7}")
    for level, nt in summary["normalisation"].items():
        for row in nt["rows"]:
            print(f"  {level:<7} {row['sum_u']:>7.1f} {row['pooled_over_set']:>9.4f} {row['slope']:>7.4f} "
                  f"{row['nrmse']:>7.3f} {row['noise_floor']:>7.3f} {row['inh_rate']:>7.1f}")
        print(f"  {level:<7} normaliser spread {nt['normaliser_spread']:.2%}, slope spread {nt['slope_spread']:.2%}")
    if summary["fig2"]:
        print("\nFig. 2 in silico: f–I gain (Hz per unit basal drive)")
        for level, f in summary["fig2"].items():
            print(f"  {level:<7} (a) apical 0.5/1/2: {np.round(f['a_gain'], 2).tolist()}   "
                  f"(b) L2/3 100%/30%: {np.round(f['b_gain'], 2).tolist()}")
    if "laws" in summary:
        print("\nLaws: L5 IT rate vs rho law(R, C), signed ON/OFF drives; errors / rho (max - min) of the law")
        print(f"  {'law':<5} {'level':<7} {'relays':<10} {'grid':<9} {'NRMSE':>7} {'floor':>7} {'RMS/rng':>8} "
              f"{'floor':>7} {'bias':>7} {'sys RMS':>8} {'pred bias':>9} {'vs E[law]':>9}")
        for law, by_level in summary["laws"].items():
            for level, by_firing in by_level.items():
                for firing, grid, t in ((f, g, t) for f, grids in by_firing.items() for g, t in grids.items()):
                    print(f"  {law:<5} {level:<7} {firing:<10} {grid:<9} {t['nrmse']:>7.3f} {t['noise_floor']:>7.3f} "
                          f"{t['rms_range']:>8.2%} {t['floor_range']:>7.2%} {t['bias']:>+7.2%} "
                          f"{t['intensity_rms']:>8.2%} {t['predicted_bias']:>+9.2%} {t['explained_rms']:>9.2%}")
    path = os.path.join(outdir, "cells.json")
    atomic_write_json(path, summary)
    print(f"\nwritten {os.path.abspath(path)} ({summary['wall_s']:.0f} s)")
    return 0
