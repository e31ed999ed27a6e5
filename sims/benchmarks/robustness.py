"""``ctmhsa bench robustness``: the rate level on random instances nobody tuned.

Draws ``--instances`` problems from a seeded generator over the whole input space — n 1–6,
m ≠ n (cross-attention), H 1–3, dk and dv 1–4, de 2–8, tokens N(0, 1), weights N(0, s²) with s
log-uniform in [1e-2, 1e1], every phi, causal masks, ``normalize=False``, the skip path, both
signed codes, both circuits, P ∈ {1, 2} — runs each at the rate level and sorts it into:

- ``exact``: every stage within 1e-3 (max |error| / max |reference|) of :mod:`ctmhsa.maths.reference`;
- ``refused``: :class:`ctmhsa.mapping.operating.OperatingRangeError` before building, where the
  circuit built for the tokens' declared range (their statistics, not their attention; with the
  apical division stage where the range needs it) cannot divide some macrocolumn, recomputed here
  from the reference (:func:`refusal_justified`);
- ``invalid``: inputs the reference itself rejects (``Z = 0`` with relu) or an unsupported
  combination refused with a ``ValueError`` before building;
- ``failure``: anything else — a wrong answer, an error after the run, or a refusal that the
  recomputed ratio does not justify. The target is 0.

Prints the failures, the worst error among the exact runs, the refusal rate per phi and weight
scale (where the physiological bound lies), and writes JSON. ``--wide`` lifts the interneurons'
rate bound (``r_inh_max = 1e15``) to test the wiring alone: nothing may then be refused.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict

import numpy as np

from ctmhsa.maths.codes import CodeGains
from ctmhsa.maths.inputs import InputRange, expected_feature, projection_moments, sample_tokens
from ctmhsa.mapping.operating import (ROOM_BELOW, SAMPLES, OperatingPoint, OperatingRangeError, division_bounds,
                                      recentre)
from ctmhsa.maths.reference import FEATURE_MAPS, linear_mhsa
from ctmhsa.sims import simulate_mhsa
from ctmhsa.sims.io import atomic_write_json
from ctmhsa.sims.progress import progress

from .common import add_out_argument, count

__all__ = ["HELP", "PHIS", "add_arguments", "draw_instance", "drive_ratio", "refusal_justified", "classify", "main"]

HELP = "the rate level on random untuned instances: exact, refused, invalid, failures (target 0)"
PHIS = ("elu1", "softplus", "exp", "relu")


def add_arguments(parser) -> None:
    parser.add_argument("--instances", type=count, default=500, help="random instances (default 500)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the instance generator (default 0)")
    parser.add_argument("--wide", action="store_true",
                        help="lift the interneurons' rate bound (tests the wiring alone)")
    parser.add_argument("--duration", type=float, default=1.0, help="simulated time per instance, s (default 1)")
    add_out_argument(parser, "bench_results/robustness.json")


def draw_instance(rng: np.random.Generator) -> dict:
    """One random problem (keyword arguments of :func:`ctmhsa.sims.simulate_mhsa`) and its description."""
    circuit = "linear" if rng.random() < 0.3 else "quadratic"
    normalize = bool(rng.random() < 0.85)
    signed = "offset" if (normalize and rng.random() < 0.3) else "onoff"
    cross = bool(rng.random() < 0.3)
    causal = bool((not cross) and circuit == "quadratic" and rng.random() < 0.25)
    n = int(rng.integers(1, 7))
    m = int(rng.integers(1, 7)) if cross else n
    H, dk, dv, de = int(rng.integers(1, 4)), int(rng.integers(1, 5)), int(rng.integers(1, 5)), int(rng.integers(2, 9))
    scale = float(10 ** rng.uniform(-2, 1))
    phi = str(rng.choice(PHIS))
    X = rng.normal(size=(n, de))
    Y = rng.normal(size=(m, de)) if cross else None
    W = [rng.normal(scale=scale, size=s) for s in ((H, dk, de), (H, dk, de), (H, dv, de), (H, de, dv))]
    WS = rng.normal(scale=scale, size=(H, dv, de)) if rng.random() < 0.2 else None
    P = int(rng.choice([1, 1, 1, 2]))
    kw = dict(X=X, Y=Y, WQ=W[0], WK=W[1], WV=W[2], WO=W[3], WS=WS, phi=phi, causal=causal,
              normalize=normalize, signed=signed, circuit=circuit, P=P)
    desc = dict(circuit=circuit, n=n, m=m, H=H, dk=dk, dv=dv, de=de, scale=scale, phi=phi, cross=cross,
                causal=causal, normalize=normalize, signed=signed, skip=WS is not None, P=P)
    return dict(kwargs=kw, desc=desc)


def drive_ratio(ref: dict, causal: bool, linear: bool, gains) -> float:
    """Largest per-head spread of ``Z_i / R_set,i`` across macrocolumns, recomputed from the
    reference (independently of :mod:`ctmhsa.mapping.operating`): ``R_set,i = max(r_l23 N_i,
    r_pool_min)`` with ``N_i`` the L2/3 cells of macrocolumn i (linear circuit: ``dk``, the same
    for every macrocolumn)."""
    H, n, m = ref["kappa"].shape
    dk = ref["s"].shape[-1]
    keys = np.tril(np.ones((n, m))).sum(axis=1) if causal else np.full(n, m)
    cells = np.full(n, dk) if linear else keys * dk
    a = ref["Z"] / np.maximum(gains.r_l23 * cells, gains.r_pool_min)
    return float(np.max(a.max(axis=1) / a.min(axis=1)))


def refusal_justified(ref: dict, kw: dict, gains) -> bool:
    """Whether the circuit built for the range of these tokens cannot divide them, recomputed
    from the reference and the range's statistics (independently of
    :mod:`ctmhsa.mapping.operating`): the gain of head h is the geometric centre of the feasible
    gains for the expected drive ``E[phi(q)]·E[phi(k)]`` per key (:func:`ctmhsa.maths.inputs.expected_feature`
    over the tokens' per-dimension statistics); a refusal is justified where some macrocolumn's
    actual drive ``Z_i / R_set,i`` (the linear circuit's ``Z_i / m``) needs a division outside
    ``[D_min, D_max]`` at that gain."""
    if not kw["normalize"]:
        return False
    H, n, m = ref["kappa"].shape
    dk = ref["s"].shape[-1]
    linear = kw["circuit"] == "linear"
    keys = np.tril(np.ones((n, m))).sum(axis=1) if kw["causal"] else np.full(n, float(m))
    R = np.maximum(gains.r_l23 * (np.full(n, dk) if linear else keys * dk), gains.r_pool_min)
    rng = InputRange.from_tokens(kw["X"], kw["Y"])
    eq = expected_feature(kw["phi"], *projection_moments(kw["WQ"], rng))
    ek = expected_feature(kw["phi"], *projection_moments(kw["WK"], rng))
    per_key = (eq * ek).sum(axis=1)[:, None]                          # (H, 1)
    expected = per_key * (np.ones(n) if linear else keys) / R        # (H, n)
    actual = ref["Z"] / (m if linear else 1.0) / R
    # the gain moved to divide more of the range's sampled token sets; their drives recomputed
    # here from the feature maps (the rule that picks the gain is operating.recentre's)
    de = kw["X"].shape[1]
    Xs = sample_tokens(rng, de, (SAMPLES, n), seed=0)
    Ys = sample_tokens(rng, de, (SAMPLES, m), seed=1) if kw["Y"] is not None else Xs
    f = FEATURE_MAPS[kw["phi"]][0]
    fq = f(np.einsum("hce,sne->shnc", kw["WQ"], Xs))
    fk = f(np.einsum("hce,sme->shmc", kw["WK"], Ys))
    Zs = np.einsum("shnc,shmc->shnm", fq, fk)
    if kw["causal"]:
        Zs = Zs * np.tril(np.ones((n, m)))
    samples = Zs.sum(axis=3) / (m if linear else 1.0) / R

    def gain(apical: bool):
        """The recentred gain per head with one or both division stages (None: no gain), and
        how many sampled sets it divides."""
        d_min, d_max = division_bounds(gains, apical)
        if np.any(expected.max(axis=1) / expected.min(axis=1) > d_max / d_min):
            return None, -1
        with np.errstate(divide="ignore", invalid="ignore"):
            lo, hi = d_min / expected.min(axis=1), d_max / expected.max(axis=1)
            rho = lo * np.minimum(np.sqrt(hi / lo), ROOM_BELOW)
        op = OperatingPoint(rho=rho, drive=expected, division=rho[:, None] * expected, bounds=(d_min, d_max),
                            g_sh=gains.g_sh, g_apical=gains.g_apical if apical else 0.0)
        rho = recentre(op, samples, gains).rho
        D = rho[None, :, None] * samples
        ok = ((D >= d_min * (1 - 1e-9)) & (D <= d_max * (1 + 1e-9))).reshape(SAMPLES, -1).all(axis=1)
        return rho, int(ok.sum())

    # the apical stage is built where the somatic one leaves sampled sets undivided and both divide more
    rho, covered = gain(False)
    apical = bool(kw.get("apical_inhibition"))
    if kw.get("apical_inhibition") is None and covered < SAMPLES:
        apical = gain(True)[1] > covered
    if apical:
        rho = gain(True)[0]
    if rho is None:
        return True
    d_min, d_max = division_bounds(gains, apical)
    D = rho[:, None] * actual
    return bool(np.any(~((D >= d_min * (1 - 1e-9)) & (D <= d_max * (1 + 1e-9)))))


def classify(kw: dict, gains, duration: float = 0.5, tol: float = 1e-3) -> dict:
    """Run one instance at the rate level; return ``{"outcome", "error", "message"}``."""
    try:
        ref = linear_mhsa(kw["X"], kw["WQ"], kw["WK"], kw["WV"], kw["WO"], phi=kw["phi"], Y=kw["Y"],
                          causal=kw["causal"], normalize=kw["normalize"], WS=kw["WS"])
    except ValueError as e:
        return dict(outcome="invalid", error=float("nan"), message=str(e)[:300])
    try:
        res = simulate_mhsa(neuron="rate", duration=duration, gains=gains, **kw)
    except OperatingRangeError as e:
        ok = refusal_justified(ref, kw, gains)
        return dict(outcome="refused" if ok else "failure", error=float("nan"), message=str(e)[:300])
    except ValueError as e:
        if "signed: the unnormalised variant" in str(e):
            return dict(outcome="invalid", error=float("nan"), message=str(e)[:300])
        return dict(outcome="failure", error=float("nan"), message=f"{type(e).__name__}: {str(e)[:300]}")
    except Exception as e:  # noqa: BLE001 - every other outcome is a failure to report
        return dict(outcome="failure", error=float("nan"), message=f"{type(e).__name__}: {str(e)[:300]}")
    worst, where = 0.0, ""
    for stage, m in res.metrics().items():
        if m["max_rel_error"] > worst:
            worst, where = m["max_rel_error"], stage
    if not worst <= tol:
        return dict(outcome="failure", error=worst, message=f"{where} max rel error {worst:.3g}")
    return dict(outcome="exact", error=worst, message="")


def main(args) -> int:
    gains = CodeGains(r_inh_max=1e15) if args.wide else CodeGains()
    rng = np.random.default_rng(args.seed)
    rows, t0 = [], time.perf_counter()
    for k in progress(range(args.instances), desc="bench robustness", unit="instance"):
        inst = draw_instance(rng)
        out = classify(inst["kwargs"], gains, duration=args.duration)
        rows.append(dict(index=k, **inst["desc"], **out))
    wall = time.perf_counter() - t0
    counts = Counter(r["outcome"] for r in rows)
    exact = [r for r in rows if r["outcome"] == "exact"]
    worst = max(exact, key=lambda r: r["error"]) if exact else None
    print(f"rate level, {len(rows)} random instances ({'wide interneuron range' if args.wide else 'default gains'}),"
          f" seed {args.seed}, {wall:.0f} s")
    print("  " + ", ".join(f"{k} {counts.get(k, 0)}" for k in ("exact", "refused", "invalid", "failure")))
    if worst:
        print(f"  worst error of the exact runs: {worst['error']:.3g} (instance {worst['index']})")
    for r in rows:
        if r["outcome"] == "failure":
            print(f"  FAILURE #{r['index']}: {r['message']}  "
                  f"{ {k: r[k] for k in ('circuit', 'n', 'm', 'H', 'dk', 'dv', 'de', 'phi', 'scale')} }")
    # where the physiological bound lies: refusals per phi and weight-scale decade
    table = defaultdict(Counter)
    for r in rows:
        if r["outcome"] in ("exact", "refused"):
            table[(r["phi"], int(np.floor(np.log10(r["scale"]))))][r["outcome"]] += 1
    print("  refused / (exact + refused) by phi and weight scale:")
    print("    phi       " + "".join(f"{f'1e{d}-1e{d + 1}':>14}" for d in (-2, -1, 0)))
    for phi in PHIS:
        cells = []
        for d in (-2, -1, 0):
            c = table[(phi, d)]
            tot = c["exact"] + c["refused"]
            cells.append(f"{c['refused']}/{tot}".rjust(14) if tot else "-".rjust(14))
        print(f"    {phi:<9} " + "".join(cells))
    out = dict(benchmark="robustness", instances=len(rows), seed=args.seed, wide=bool(args.wide), wall_s=wall, counts=dict(counts),
               worst_error=worst["error"] if worst else None, rows=rows)
    if args.out:
        atomic_write_json(args.out, out)
        print(f"wrote {args.out}")
    return 1 if counts.get("failure") else 0
