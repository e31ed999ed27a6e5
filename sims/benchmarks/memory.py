"""``ctmhsa bench memory``: the key-value memory over a stream (``circuit="memory"``), measured.

Held-out random weights (``N(0, 1/de)``, value read-out ``N(0, 1/dv)``) and tokens, drawn from
``--seed`` (default 1; the circuit's tests use other instances). One token per presentation
(``--presentation``, 0.3 s: the rate level's streams are settled from there). Three parts:

- decay: a stream of ``1 + lags`` tokens, the first a random token, the others zero. A zero
  token writes nothing, whatever the weights: its value ``v = W_V 0 = 0`` makes its outer
  product ``v φ(k)ᵀ`` zero, so from the second token on the memory only forgets. Its size is
  its component along the first write, ``c_t = <M_t, M_1> / <M_1, M_1>`` (all heads), which is
  λ^t in the reference; λ is fitted per token (least squares of ``ln c_t`` on ``t``) and the
  measured ``τ_mem = -presentation / ln λ`` is set against the declared one, per ``--tau-mem``.
- capacity: N key-value pairs, one head. The memory is written by one stream and read by the
  queries of another (cross-attention, ``Y=``), a stream of ``2 N`` tokens: ``Y`` is the N
  stored tokens (random, so random keys ``k_i = W_K y_i`` and values ``v_i = W_V y_i``) and
  then N zero tokens (which write nothing, as above); ``X`` is N zero tokens (their read-outs
  are not used) and then the N queries, token ``x = W_Q⁺ k_i`` (the pseudo-inverse: the query
  is exactly the stored key, ``q = k_i``, for ``dk <= de``). A single stream would not do: each
  query token would write its own key-value pair, so the memory would grow while it is queried
  and the later queries would read pairs that were never stored. A query is recalled when the
  stored value nearest (cosine) to its read-out ``ṽ`` is its own; the recall fraction per N and
  ``dk``, of the circuit and of the reference (:func:`ctmhsa.memory_attention`) on the same
  instances, and of the reference alone over ``--reference-trials`` instances per N, whose
  90 % point (the first N whose recall falls below 0.9) is reported.
- latency: wall time of a built circuit's run per presentation (median over ``--repeats``
  fresh builds), build time, neurons, neurons per head (the increment of one head in the
  circuit's description), and x̃'s largest error relative to the reference, at the default
  head size (dk = dv = de = 8, H = 2): the memory circuit with ``--latency-T`` tokens, and the
  v1 circuit (``circuit="quadratic"``, unnormalised: Z ≡ 1 as in the memory circuit) on a
  stream of ``--latency-T`` token sets of ``--set-size`` tokens each; per token, its neurons
  and time are divided by the set size (the v1 circuit shows every token of a set at once).

Only the rate level is measured so far (``--neuron rate``); the spiking levels of the memory
circuit are not built. Prints a table and writes JSON; the command line then draws the figure
from the JSON (:func:`ctmhsa.figures.memory.draw`). ``--quick`` is a smoke test.
"""

from __future__ import annotations

import os
import time

import numpy as np

from ctmhsa.sims.io import versions
from ctmhsa.sims.progress import progress

from .common import add_out_argument, count, finish, warnings_into
from .timescale import QUICK_MARK

FIGURE = "ctmhsa.figures.memory"
"""The module whose ``draw(json_path)`` the command line calls after the run (figures only read data)."""

__all__ = ["HELP", "LEVELS", "FIGURE", "add_arguments", "settings", "check_neuron", "held_out_weights",
           "fit_forget", "decay_row", "pair_streams", "recall_fraction", "capacity_row", "reference_capacity",
           "point90", "latency_row", "main"]

HELP = "key-value memory over a stream: decay vs tau_mem, recall vs stored pairs and dk, latency per token (v1 beside)"

LEVELS = ("rate",)
"""The levels measured; the memory circuit's spiking levels are not built yet."""

DECAY_SIZES = dict(H=2, dk=8, dv=8, de=8)      # the default head size (``ctmhsa run``)
CAPACITY_SIZES = dict(dv=8, de=16)              # de >= dk: the query token can be the stored key
RECALL_LEVEL = 0.9

FULL = dict(tau_mem=[0.5, 1.0, 2.0], lags=8, dk=[4, 8], pairs=[1, 2, 3, 4, 6, 8], trials=2,
            reference_pairs=[1, 2, 3, 4, 6, 8, 12, 16, 24, 32], reference_trials=200, latency_T=8, set_size=8,
            repeats=3)
QUICK = dict(tau_mem=[1.0], lags=4, dk=[4], pairs=[1, 2], trials=1, reference_pairs=[1, 2, 4, 8],
             reference_trials=50, latency_T=3, set_size=4, repeats=1)

_PART = dict(decay=0, capacity=1, latency=2)    # independent random streams per part


def add_arguments(parser) -> None:
    parser.add_argument("--neuron", default="rate",
                        help=f"level of the cells (default rate; measured so far: {', '.join(LEVELS)})")
    parser.add_argument("--presentation", type=float, default=0.3, help="seconds per token (default 0.3)")
    parser.add_argument("--tau-mem", type=float, nargs="+", default=None,
                        help="declared memory time constants, s (default 0.5 1 2)")
    parser.add_argument("--lags", type=count, default=None, help="tokens after the write in the decay runs (default 8)")
    parser.add_argument("--dk", type=count, nargs="+", default=None,
                        help="key sizes of the capacity runs (default 4 8)")
    parser.add_argument("--pairs", type=count, nargs="+", default=None,
                        help="stored pairs N of the circuit's capacity runs (default 1 2 3 4 6 8)")
    parser.add_argument("--trials", type=count, default=None, help="circuit instances per N and dk (default 2)")
    parser.add_argument("--reference-trials", type=count, default=None,
                        help="reference instances per N and dk (default 200)")
    parser.add_argument("--latency-T", type=count, default=None, help="presentations of the latency runs (default 8)")
    parser.add_argument("--set-size", type=count, default=None, help="tokens per set of the v1 circuit (default 8)")
    parser.add_argument("--repeats", type=count, default=None, help="latency repeats (default 3)")
    parser.add_argument("--seed", type=int, default=1, help="weights' and tokens' seed (default 1: held out)")
    parser.add_argument("--codegen", default="numpy", choices=["auto", "numpy", "cython"],
                        help="Brian2 target (default numpy: the rate level's small networks)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: tau_mem 1 s, 4 lags, dk 4, N 1 2, one trial, T 3, one repeat")
    parser.add_argument("--no-figure", action="store_true", help="do not draw the figure")
    add_out_argument(parser, "bench_results/memory.json")


def check_neuron(neuron: str) -> str:
    """``neuron`` if this benchmark measures that level, else a ``ValueError`` naming ``--neuron``."""
    if neuron not in LEVELS:
        raise ValueError(f"--neuron: the memory benchmark measures the {' and '.join(LEVELS)} level only "
                         f"(the memory circuit's spiking levels are not built yet), got {neuron!r}")
    return neuron


def settings(args) -> dict:
    """The grid of a run: flags given, else the ``--quick`` or full defaults."""
    check_neuron(args.neuron)
    base = QUICK if args.quick else FULL
    s = {k: (getattr(args, k) if getattr(args, k, None) is not None else v) for k, v in base.items()}
    if not args.presentation > 0 or any(not t > 0 for t in s["tau_mem"]):
        raise ValueError("--presentation, --tau-mem: expected times > 0 s")
    if any(dk > CAPACITY_SIZES["de"] for dk in s["dk"]):
        raise ValueError(f"--dk: at most de = {CAPACITY_SIZES['de']} (a query token must give q = k)")
    return s


def _rng(seed: int, part: str, *ids) -> np.random.Generator:
    return np.random.default_rng([seed, _PART[part], *ids])


def held_out_weights(rng, H: int, dk: int, dv: int, de: int) -> list:
    """``[WQ, WK, WV, WO]`` with unit-variance projections of unit-variance tokens."""
    shapes = [(H, dk, de), (H, dk, de), (H, dv, de)]
    return [rng.normal(size=s) / np.sqrt(de) for s in shapes] + [rng.normal(size=(H, de, dv)) / np.sqrt(dv)]


def _simulate(X, W, neuron, presentation, codegen, **kw):
    from ctmhsa.sims import simulate_mhsa

    return simulate_mhsa(X, *W, circuit="memory", neuron=neuron, presentation=presentation, codegen=codegen, **kw)


def fit_forget(c) -> float:
    """λ per token fitted to a memory's size ``c`` over tokens since its write (least squares of
    ``ln c`` on the lag; ``c`` must be positive)."""
    c = np.asarray(c, float)
    if np.any(c <= 0):
        raise ValueError("fit_forget: the memory's component must stay positive to fit a decay")
    return float(np.exp(np.polyfit(np.arange(c.size), np.log(c), 1)[0]))


def _component(M) -> np.ndarray:
    """``<M_t, M_0> / <M_0, M_0>`` over heads, ``M`` of shape ``(T, H, dv, dk)``."""
    M = np.asarray(M, float).reshape(len(M), -1)
    return M @ M[0] / (M[0] @ M[0])


def decay_row(tau_mem: float, lags: int, presentation: float, seed: int, neuron: str = "rate",
              codegen: str = "numpy") -> dict:
    """One write, then ``lags`` zero tokens (which write nothing): the memory's component along
    the write per token, circuit and reference, λ fitted to each, and ``τ_mem`` measured."""
    from ctmhsa.mapping.reference import memory_attention

    rng = _rng(seed, "decay", int(round(1e3 * tau_mem)))
    W = held_out_weights(rng, **DECAY_SIZES)
    X = np.zeros((lags + 1, DECAY_SIZES["de"]))
    X[0] = rng.normal(size=DECAY_SIZES["de"])
    warned = []
    t0 = time.perf_counter()
    with warnings_into(warned):
        res = _simulate(X, W, neuron, presentation, codegen, tau_mem=tau_mem)
    lam = float(np.exp(-presentation / tau_mem))
    c = _component(res.memory)
    c_ref = _component(np.swapaxes(memory_attention(X, *W, forget=lam)["M"], 0, 1))
    lam_fit = fit_forget(c)
    tau = -presentation / np.log(lam_fit)
    return dict(tau_mem=tau_mem, forget=lam, lags=list(range(lags + 1)), component=c.tolist(),
                component_reference=c_ref.tolist(),
                norm=np.linalg.norm(res.memory.reshape(lags + 1, -1), axis=1).tolist(),
                forget_fitted=lam_fit, forget_fitted_reference=fit_forget(c_ref), tau_measured=float(tau),
                tau_rel_error=float(tau / tau_mem - 1), neurons=int(res.counts["neurons"]),
                wall_s=time.perf_counter() - t0, warnings=warned)


def pair_streams(N: int, dk: int, rng, dv: int = CAPACITY_SIZES["dv"], de: int = CAPACITY_SIZES["de"]):
    """One head's weights and the cross-attention streams storing N pairs, then querying each
    by its key: ``X`` (queries), ``Y`` (writes), both ``(2 N, de)``, the weights and the stored
    values ``(N, dv)`` (see the module's docstring)."""
    W = held_out_weights(rng, 1, dk, dv, de)
    stored = rng.normal(size=(N, de))
    keys, values = stored @ W[1][0].T, stored @ W[2][0].T
    queries = keys @ np.linalg.pinv(W[0][0]).T                     # W_Q x = k_i
    zeros = np.zeros((N, de))
    return np.concatenate([zeros, queries]), np.concatenate([stored, zeros]), W, values


def recall_fraction(v_tilde, values) -> float:
    """Fraction of read-outs ``v_tilde (N, dv)`` whose nearest stored value (cosine) among
    ``values (N, dv)`` is their own (row i reads pair i)."""
    a = np.asarray(v_tilde, float)
    b = np.asarray(values, float)
    cos = (a / np.linalg.norm(a, axis=1, keepdims=True)) @ (b / np.linalg.norm(b, axis=1, keepdims=True)).T
    return float(np.mean(np.argmax(cos, axis=1) == np.arange(len(b))))


def _reference_recall(X, Y, W, values) -> float:
    from ctmhsa.mapping.reference import memory_attention

    N = len(values)
    return recall_fraction(memory_attention(X, *W, Y=Y)["v_tilde"][0, N:], values)


def capacity_row(N: int, dk: int, trial: int, presentation: float, seed: int, neuron: str = "rate",
                 codegen: str = "numpy") -> dict:
    """Recall of N stored pairs queried by their keys: the circuit and the reference on one instance."""
    X, Y, W, values = pair_streams(N, dk, _rng(seed, "capacity", dk, N, trial))
    warned = []
    t0 = time.perf_counter()
    with warnings_into(warned):
        res = _simulate(X, W, neuron, presentation, codegen, Y=Y)
    v_tilde = res.stages["v_tilde"][N:, 0]
    return dict(N=N, dk=dk, trial=trial, recall=recall_fraction(v_tilde, values),
                recall_reference=_reference_recall(X, Y, W, values),
                v_tilde_rel_error=float(res.metrics()["v_tilde"]["max_rel_error"]), neurons=int(res.counts["neurons"]),
                wall_s=time.perf_counter() - t0, warnings=warned)


def reference_capacity(dk: int, pairs, trials: int, seed: int) -> dict:
    """The reference's mean recall per N over ``trials`` instances (other instances than the
    circuit's), and its 90 % point."""
    recall = [float(np.mean([_reference_recall(*pair_streams(N, dk, _rng(seed, "capacity", dk, N, 10_000 + i)))
                             for i in range(trials)])) for N in pairs]
    return dict(dk=dk, pairs=list(pairs), trials=trials, recall=recall, n90=point90(pairs, recall))


def point90(pairs, recall, level: float = RECALL_LEVEL):
    """The first N whose recall falls below ``level`` (None: never, over ``pairs``)."""
    return next((int(N) for N, r in zip(pairs, recall) if r < level), None)


def latency_row(circuit: str, T: int, repeats: int, presentation: float, seed: int, set_size: int = 1,
                neuron: str = "rate", codegen: str = "numpy") -> dict:
    """Wall time per presentation (median over ``repeats`` fresh builds) of a stream of ``T``
    tokens (``circuit="memory"``) or of ``T`` sets of ``set_size`` tokens (``"quadratic"``,
    unnormalised), the default head size; neurons, per head and per token."""
    from ctmhsa.sims import build_mhsa
    from ctmhsa.sims.options import CircuitOptions

    rng = _rng(seed, "latency")
    S = DECAY_SIZES
    W = held_out_weights(rng, **S)
    memory = circuit == "memory"
    X = rng.normal(size=(T, S["de"]) if memory else (T, set_size, S["de"]))
    n = 1 if memory else set_size
    builds, runs, warned = [], [], []
    for _ in range(repeats):
        with warnings_into(warned):
            t0 = time.perf_counter()
            sim = build_mhsa(X, *W, circuit=circuit, neuron=neuron, presentation=presentation, normalize=False,
                             codegen=codegen)
            t1 = time.perf_counter()
            res = sim.run()
        runs.append(time.perf_counter() - t1)
        builds.append(t1 - t0)
    co = CircuitOptions(circuit=circuit, neuron=neuron, normalize=False)
    head = (co.describe(n, S["dk"], S["dv"], S["de"], H=2).n_neurons()
            - co.describe(n, S["dk"], S["dv"], S["de"], H=1).n_neurons())
    per_presentation = float(np.median(runs)) / T
    return dict(circuit=circuit, T=T, set_size=n, presentation=presentation, repeats=repeats,
                neurons=int(res.counts["neurons"]), neurons_per_head=int(head),
                neurons_per_token=float(res.counts["neurons"] / n), build_s=float(np.median(builds)), run_s=runs,
                s_per_presentation=per_presentation, s_per_token=per_presentation / n,
                x_tilde_rel_error=float(res.metrics()["x_tilde"]["max_rel_error"]), warnings=warned, **S)


def _f(x, fmt) -> str:
    return "-" if x is None or not np.isfinite(x) else format(x, fmt)


def _print_table(doc: dict) -> None:
    if doc["quick"]:
        print(f"{QUICK_MARK}: a smoke test; its numbers are not the benchmark's: run without --quick for those")
    S = DECAY_SIZES
    print(f"decay: one write, then {doc['lags']} zero tokens ({doc['neuron']} level, presentation "
          f"{doc['presentation']:g} s, H={S['H']}, dk=dv=de={S['dk']})")
    print(f"  {'tau_mem s':>9} {'λ declared':>10} {'λ fitted':>9} {'λ ref.':>9} {'tau measured s':>14} "
          f"{'rel. error':>10} {'wall s':>6}")
    for r in doc["decay"]:
        print(f"  {r['tau_mem']:>9g} {r['forget']:>10.5f} {r['forget_fitted']:>9.5f} "
              f"{r['forget_fitted_reference']:>9.5f} {r['tau_measured']:>14.4f} {r['tau_rel_error']:>+10.1e} "
              f"{r['wall_s']:>6.1f}")
    print(f"capacity: N pairs stored (Y), each queried by its key (X), nearest stored value by cosine; recall "
          f"fraction, circuit / reference on the same {doc['trials']} instance(s) per N (dv={CAPACITY_SIZES['dv']}, "
          f"de={CAPACITY_SIZES['de']}, H=1)")
    for dk in doc["dk"]:
        rows = [r for r in doc["capacity"] if r["dk"] == dk]
        cells = "  ".join(f"N={N}: {np.mean([r['recall'] for r in rows if r['N'] == N]):.2f}/"
                          f"{np.mean([r['recall_reference'] for r in rows if r['N'] == N]):.2f}"
                          for N in doc["pairs"])
        print(f"  dk={dk:<2} {cells}")
    for ref in doc["reference_capacity"]:
        curve = "  ".join(f"{N}: {r:.2f}" for N, r in zip(ref["pairs"], ref["recall"]))
        n90 = "never" if ref["n90"] is None else f"N = {ref['n90']}"
        print(f"  reference, dk={ref['dk']}, {ref['trials']} instances per N: {curve}; below 0.9 from {n90}")
    print(f"latency (median of {doc['repeats']} runs; per token: per presentation / tokens per presentation)")
    print(f"  {'circuit':>9} {'tokens/pres.':>12} {'neurons':>7} {'per head':>8} {'per token':>9} {'build s':>7} "
          f"{'s/presentation':>14} {'s/token':>8} {'x̃ max rel. error':>17}")
    for r in doc["latency"]:
        print(f"  {r['circuit']:>9} {r['set_size']:>12} {r['neurons']:>7} {r['neurons_per_head']:>8} "
              f"{r['neurons_per_token']:>9.1f} {r['build_s']:>7.2f} {r['s_per_presentation']:>14.3f} "
              f"{r['s_per_token']:>8.3f} {_f(r['x_tilde_rel_error'], '.1e'):>17}")


def main(args) -> int:
    s = settings(args)
    P, seed, neuron, cg = args.presentation, args.seed, args.neuron, args.codegen
    t_all = time.perf_counter()
    doc = dict(benchmark="memory", quick=bool(args.quick), neuron=neuron, presentation=P, seed=seed, codegen=cg,
               decay_sizes=DECAY_SIZES, capacity_sizes=CAPACITY_SIZES, recall_level=RECALL_LEVEL,
               **{k: s[k] for k in ("tau_mem", "lags", "dk", "pairs", "trials", "repeats")},
               decay=[], capacity=[], reference_capacity=[], latency=[], versions=versions(), cpus=os.cpu_count())
    runs = ([("decay", t) for t in s["tau_mem"]] + [("capacity", (dk, N, i)) for dk in s["dk"]
                                                     for N in s["pairs"] for i in range(s["trials"])]
            + [("latency", c) for c in ("memory", "quadratic")])
    for part, what in progress(runs, desc="bench memory", unit="run"):
        if part == "decay":
            doc["decay"].append(decay_row(what, s["lags"], P, seed, neuron, cg))
        elif part == "capacity":
            doc["capacity"].append(capacity_row(what[1], what[0], what[2], P, seed, neuron, cg))
        else:
            doc["latency"].append(latency_row(what, s["latency_T"], s["repeats"], P, seed,
                                              s["set_size"], neuron, cg))
    doc["reference_capacity"] = [reference_capacity(dk, s["reference_pairs"], s["reference_trials"], seed)
                                 for dk in s["dk"]]
    doc["wall_s"] = time.perf_counter() - t_all
    print()
    _print_table(doc)
    finish(doc, doc["decay"] + doc["capacity"] + doc["latency"], args.out, "runs")
    return 0   # the figure is drawn from the JSON by ctmhsa.figures.memory (FIGURE)
