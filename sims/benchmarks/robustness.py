"""``ctmhsa bench robustness``: random instances nobody tuned, at the rate level or a spiking one.

Draws ``--instances`` problems from a seeded generator over the whole input space — n 1–6,
m ≠ n (cross-attention), H 1–3, dk and dv 1–4, de 2–8, tokens N(0, 1), weights N(0, s²) with s
log-uniform in [1e-2, 1e1], every phi, causal masks, ``normalize=False``, the skip path, both
signed codes, both circuits, P ∈ {1, 2} — runs each at the rate level (``--level rate``, the
default) and sorts it into:

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

At a spiking level (``--level escape`` or ``lif``; the same instances, spike seed = instance
index + 1, a ``--duration`` window, 2 s by default) a run cannot be exact; what matters is that
it never errs without saying so. Each run's worst stage (NRMSE over its spike-count noise floor,
``bench accuracy``'s ``worst_ratio``; where it passes :data:`SILENT`, every stage pooled over
:data:`REPEATS` more spike seeds, so that one run's scatter is not taken for a bias) and the
diagnostics raised (:class:`ctmhsa.mapping.operating.OperatingRangeWarning`,
:class:`ctmhsa.mapping.noise.NoiseFloorWarning`) sort it into ``at_floor`` (worst stage within
:data:`SILENT` of its floor; ``flagged`` says whether a diagnostic was raised anyway),
``flagged`` (above it, and a diagnostic said so), ``refused`` and ``invalid`` as above, and
``failure``: above :data:`SILENT` with no diagnostic (a silent wrong answer), an error, or an
unjustified refusal. The target is 0 again.
"""

from __future__ import annotations

import time
import warnings
from collections import Counter, defaultdict

import numpy as np

from ctmhsa.maths.codes import CodeGains, default_gains
from ctmhsa.maths.inputs import InputRange, expected_feature, projection_moments, sample_tokens
from ctmhsa.mapping.noise import NoiseFloorWarning
from ctmhsa.mapping.operating import (ROOM_BELOW, SAMPLES, OperatingPoint, OperatingRangeError,
                                      OperatingRangeWarning, division_bounds, recentre)
from ctmhsa.maths.reference import FEATURE_MAPS, linear_mhsa
from ctmhsa.neurons.levels import LEVELS, get_level
from ctmhsa.sims import simulate_mhsa
from ctmhsa.sims.io import atomic_write_json
from ctmhsa.sims.progress import progress

from .accuracy import pooled_ratios
from .common import add_out_argument, count, load_average

__all__ = ["HELP", "PHIS", "SILENT", "REPEATS", "DIAGNOSTICS", "add_arguments", "draw_instance", "drive_ratio",
           "refusal_justified", "classify", "classify_spiking", "main"]

HELP = ("random untuned instances, rate level (exact, refused, invalid, failures) or a spiking one (at the "
        "noise floor, flagged, refused, invalid, silent failures); target 0 failures")
PHIS = ("elu1", "softplus", "exp", "relu")

SILENT = 2.0
"""A spiking stage whose error stays above this many times its count-noise floor over
:data:`REPEATS` + 1 spike seeds, with no diagnostic raised, is a silent failure: a bias, not
one run's scatter. A stage at its floor scatters from run to run as a χ² of its few degrees of
freedom (one where a single entry's noise dominates, as with one token; about 6 for Z and x̃ at
the lif level, ``docs/lif.md``, "How often a run at its floor crosses 1.3"), so one run passes 2
in up to 5 % of runs; pooled over five seeds, in 0.1 %."""

REPEATS = 4
"""Further spike seeds of a run whose worst stage passes :data:`SILENT`."""

DIAGNOSTICS = (OperatingRangeWarning, NoiseFloorWarning)
"""The warnings by which a spiking run says its answer is not to be trusted."""

RATE_DURATION, SPIKING_WINDOW = 1.0, 2.0
"""The default ``--duration``: the rate level's simulated time, a spiking level's window (s)."""


def add_arguments(parser) -> None:
    parser.add_argument("--instances", type=count, default=500, help="random instances (default 500)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the instance generator (default 0)")
    parser.add_argument("--wide", action="store_true",
                        help="lift the interneurons' rate bound (tests the wiring alone; rate level)")
    parser.add_argument("--level", choices=tuple(LEVELS), default="rate",
                        help="fidelity level the instances run at (default rate)")
    parser.add_argument("--duration", type=float, default=None,
                        help="simulated time per instance, s (default 1 at the rate level; the measurement "
                             "window at a spiking one, default 2)")
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


def refusal_justified(ref: dict, kw: dict, gains, apical_stage: bool = True) -> bool:
    """Whether the circuit built for the range of these tokens cannot divide them, recomputed
    from the reference and the range's statistics (independently of
    :mod:`ctmhsa.mapping.operating`): the gain of head h is the geometric centre of the feasible
    gains for the expected drive ``E[phi(q)]·E[phi(k)]`` per key (:func:`ctmhsa.maths.inputs.expected_feature`
    over the tokens' per-dimension statistics); a refusal is justified where some macrocolumn's
    actual drive ``Z_i / R_set,i`` (the linear circuit's ``Z_i / m``) needs a division outside
    ``[D_min, D_max]`` at that gain. ``apical_stage``: whether the level builds the apical
    division stage (the lif level does not)."""
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
    if apical_stage and kw.get("apical_inhibition") is None and covered < SAMPLES:
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


def _spiking_run(kw: dict, neuron: str, duration: float, seed: int) -> tuple:
    """One spiking run of an instance: ``({stage: {"nrmse", "noise_floor"}}, [diagnostics raised])``;
    a stage decoded non-finite has an infinite NRMSE (never at its floor)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = simulate_mhsa(neuron=neuron, duration=duration, seed=seed, **kw)
    said = sorted({f"{type(w.message).__name__}: {str(w.message)[:160]}" for w in caught
                   if isinstance(w.message, DIAGNOSTICS)})
    return {st: dict(nrmse=m["nrmse"] if np.isfinite(m["nrmse"]) else np.inf, noise_floor=m["noise_floor"])
            for st, m in res.metrics().items()}, said


def _ratios(runs: list) -> dict:
    """Each stage's error over its floor pooled over ``runs`` (:func:`accuracy.pooled_ratios`),
    the stages no floor informs left out."""
    return {st: r for st, r in pooled_ratios(runs).items() if not np.isnan(r)}


def classify_spiking(kw: dict, neuron: str, gains, duration: float, seed: int, repeats: int = REPEATS) -> dict:
    """Run one instance at spiking level ``neuron`` for a ``duration`` window with spike seed
    ``seed``; a run with a stage above :data:`SILENT` times its floor again with ``repeats`` more
    spike seeds (``seed + 10000 r``), each stage's error then pooled over the runs
    (sqrt(Σ NRMSE² / Σ floor²)). Returns ``{"outcome", "error", "stage", "first", "first_stage",
    "runs", "flagged", "diagnostics", "message"}`` (module docstring; ``error``, ``stage``: the
    worst stage and its ratio, pooled where repeated; ``first``, ``first_stage``: the first run's)."""
    def out(outcome, message, error=float("nan"), stage="", first=float("nan"), first_stage="", runs=0, said=()):
        return dict(outcome=outcome, error=float(error), stage=stage, first=float(first), first_stage=first_stage,
                    runs=runs, flagged=bool(said), diagnostics=list(said), message=message)

    try:
        ref = linear_mhsa(kw["X"], kw["WQ"], kw["WK"], kw["WV"], kw["WO"], phi=kw["phi"], Y=kw["Y"],
                          causal=kw["causal"], normalize=kw["normalize"], WS=kw["WS"])
    except ValueError as e:
        return out("invalid", str(e)[:300])
    try:
        stages, said = _spiking_run(kw, neuron, duration, seed)
    except OperatingRangeError as e:
        justified = refusal_justified(ref, kw, gains, apical_stage=not get_level(neuron).lif)
        return out("refused" if justified else "failure", str(e)[:300])
    except ValueError as e:
        return out("invalid" if "signed: the unnormalised variant" in str(e) else "failure",
                   f"{type(e).__name__}: {str(e)[:300]}")
    except Exception as e:  # noqa: BLE001 - every other outcome is a failure to report
        return out("failure", f"{type(e).__name__}: {str(e)[:300]}")
    runs = [stages]
    ratios = _ratios(runs)
    if not ratios:
        return out("failure", "no stage has a finite noise floor", runs=1, said=said)
    first_stage = max(ratios, key=ratios.get)
    first = ratios[first_stage]
    if first > SILENT:   # a bias or one run's scatter: more spike seeds tell them apart
        for r in range(1, repeats + 1):
            try:
                more, also = _spiking_run(kw, neuron, duration, seed + 10000 * r)
            except Exception as e:  # noqa: BLE001 - the same input ran once: anything now is a failure
                return out("failure", f"spike seed {seed + 10000 * r}: {type(e).__name__}: {str(e)[:300]}",
                           first=first, first_stage=first_stage, runs=len(runs), said=said)
            runs.append(more)
            said = sorted(set(said) | set(also))
    pooled = _ratios(runs)
    stage = max(pooled, key=pooled.get)
    worst = pooled[stage]
    kw_out = dict(error=worst, stage=stage, first=first, first_stage=first_stage, runs=len(runs), said=said)
    if worst <= SILENT:
        return out("at_floor", "", **kw_out)
    if said:
        return out("flagged", said[0], **kw_out)
    return out("failure", f"{stage} {worst:.3g} times its noise floor over {len(runs)} spike seeds, no diagnostic "
                          f"raised", **kw_out)


def main(args) -> int:
    level = args.level
    spiking = get_level(level).spiking
    if args.wide and spiking:
        raise ValueError(f"--wide: lifts the interneurons' rate bound of the rate level; spiking interneurons "
                         f"cannot fire without bound (got --level {level})")
    duration = (SPIKING_WINDOW if spiking else RATE_DURATION) if args.duration is None else args.duration
    if not duration > 0:
        raise ValueError(f"--duration: expected a positive time in s, got {duration!r}")
    gains = CodeGains(r_inh_max=1e15) if args.wide else default_gains(level)
    rng = np.random.default_rng(args.seed)
    rows, t0 = [], time.perf_counter()
    for k in progress(range(args.instances), desc="bench robustness", unit="instance"):
        inst = draw_instance(rng)
        if not spiking:
            out = classify(inst["kwargs"], gains, duration=duration)
        else:
            out = classify_spiking(inst["kwargs"], level, gains, duration, seed=k + 1)
        rows.append(dict(index=k, **inst["desc"], **out))
    wall = time.perf_counter() - t0
    if spiking:
        return _report_spiking(args, level, duration, rows, wall)
    counts = Counter(r["outcome"] for r in rows)
    exact = [r for r in rows if r["outcome"] == "exact"]
    worst = max(exact, key=lambda r: r["error"]) if exact else None
    print(f"rate level, {len(rows)} random instances ({'wide interneuron range' if args.wide else 'default gains'}),"
          f" seed {args.seed}, {wall:.0f} s")
    print("  " + ", ".join(f"{k} {counts.get(k, 0)}" for k in ("exact", "refused", "invalid", "failure")))
    if worst:
        print(f"  worst error of the exact runs: {worst['error']:.3g} (instance {worst['index']})")
    _print_failures(rows)
    # where the physiological bound lies: refusals per phi and weight-scale decade
    _print_scale_table(rows, ("refused",), ("exact", "refused"))
    out = dict(benchmark="robustness", instances=len(rows), seed=args.seed, wide=bool(args.wide), wall_s=wall, counts=dict(counts),
               worst_error=worst["error"] if worst else None, rows=rows)
    if args.out:
        atomic_write_json(args.out, out)
        print(f"wrote {args.out}")
    return 1 if counts.get("failure") else 0


def _print_failures(rows: list) -> None:
    """One line per failed instance: its message and shape."""
    for r in rows:
        if r["outcome"] == "failure":
            print(f"  FAILURE #{r['index']}: {r['message']}  "
                  f"{ {k: r[k] for k in ('circuit', 'n', 'm', 'H', 'dk', 'dv', 'de', 'phi', 'scale', 'P')} }")


def _print_scale_table(rows: list, shown: tuple, total: tuple) -> None:
    """Per phi and weight-scale decade: the counts of the outcomes ``shown`` over those of ``total``."""
    table = defaultdict(Counter)
    for r in rows:
        if r["outcome"] in total:
            table[(r["phi"], int(np.floor(np.log10(r["scale"]))))][r["outcome"]] += 1
    print(f"  {' / '.join(shown)} / ({' + '.join(total)}) by phi and weight scale:")
    print("    phi       " + "".join(f"{f'1e{d}-1e{d + 1}':>14}" for d in (-2, -1, 0)))
    for phi in PHIS:
        cells = []
        for d in (-2, -1, 0):
            c = table[(phi, d)]
            tot = sum(c[k] for k in total)
            cells.append(("/".join(str(c[k]) for k in shown) + f"/{tot}").rjust(14) if tot else "-".rjust(14))
        print(f"    {phi:<9} " + "".join(cells))


def _report_spiking(args, level: str, duration: float, rows: list, wall: float) -> int:
    """Print and write a spiking level's sweep (:func:`main`)."""
    counts = Counter(r["outcome"] for r in rows)
    kinds = ("at_floor", "flagged", "refused", "invalid", "failure")
    print(f"{level} level, {len(rows)} random instances, {duration:g} s windows, seed {args.seed}, {wall:.0f} s")
    print("  " + ", ".join(f"{k} {counts.get(k, 0)}" for k in kinds))
    again = [r for r in rows if r.get("runs", 0) > 1]
    if again:
        print(f"  {len(again)} runs above {SILENT:g} times a floor ran {REPEATS} more spike seeds: "
              + ", ".join(f"#{r['index']} {r['first_stage']} {r['first']:.2f} -> {r['stage']} {r['error']:.2f} pooled"
                            for r in again))
    quiet = [r for r in rows if r["outcome"] == "at_floor"]
    if quiet:
        worst = max(quiet, key=lambda r: r["error"])
        print(f"  worst stage of the runs at their floor: {worst['stage']} {worst['error']:.2f} times its floor "
              f"(instance {worst['index']}); {sum(r['flagged'] for r in quiet)} of them flagged anyway")
    _print_failures(rows)
    # where the circuit leaves its range: flagged and refused per phi and weight-scale decade
    _print_scale_table(rows, ("flagged", "refused"), ("at_floor", "flagged", "refused"))
    out = dict(benchmark="robustness", level=level, duration=duration, silent=SILENT, repeats=REPEATS,
               instances=len(rows),
               seed=args.seed, spike_seeds="instance index + 1", wide=False, wall_s=wall, counts=dict(counts),
               load_average=load_average(), rows=rows)
    if args.out:
        atomic_write_json(args.out, out)
        print(f"wrote {args.out}")
    return 1 if counts.get("failure") else 0
