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
- recall vs lag: the capacity's streams with ``--lag-pairs`` pairs (default 8) at the largest
  ``--dk``, without forgetting and at each ``--tau-mem``. Pair i is written at token i and the
  writes end at token N - 1, so at the first query token N it was written ``L = N - i`` tokens
  before (its lag); the query tokens write nothing, so they scale every stored pair alike and
  leave the pairs' relative weights (λ^L) as they are at token N. Recall of the pair at each lag,
  the circuit and the reference on the same instances (``--trials``) and the reference alone
  over ``--reference-trials`` other instances.
- latency: wall time of a built circuit's run per presentation (median over ``--repeats``
  fresh builds), build time, neurons, neurons per head (the increment of one head in the
  circuit's description), and x̃'s largest error relative to the reference, at the default
  head size (dk = dv = de = 8, H = 2): the memory circuit with ``--latency-T`` tokens, and the
  v1 circuit (``circuit="quadratic"``, unnormalised: Z ≡ 1 as in the memory circuit) on a
  stream of ``--latency-T`` token sets of ``--set-size`` tokens each; per token, its neurons
  and time are divided by the set size (the v1 circuit shows every token of a set at once).

- predictions (``--prediction-seeds`` instances, default 3, none with ``--quick``), with the perturbation
  hooks (:mod:`ctmhsa.circuits.perturb`; token times: :func:`ctmhsa.mapping.kvmemory.token_times`),
  at the default head size on random tokens: (a) the L2/3 integrators (``memory``) silenced
  from token ``T/2`` on: x̃ of the later tokens against the reference with all tokens, with the
  tokens since the silence and with the current token alone; (b) L5's read-out cells' and L5
  PT's mean rates after the silence, intact, with the integrators silenced and with all of L2/3
  (write cells too) silenced; (c) how fast: the integrators silenced for 0.15 s in the middle
  of a token (0.6 s presentations), the time for the read-out, L5 PT and nucleus-2 rates to
  move 90 % and 99 % of the way to their silenced values and back after the release; (d)
  recall: the capacity's streams (4 pairs, dk 8), the integrators silenced while the pairs are
  queried or while they are written, or the write cells while they are written: the read-outs'
  size against the intact one's and the recall; (e) delay activity: 4 random tokens written,
  then 8 zero tokens, without forgetting and at ``τ_mem`` = 1 s: the integrators' rates per
  token and their change between writes.

``--neuron escape`` measures the decay, the capacity and recall vs lag of the same instances
with escape cells (``--P`` copies, ``--firing``, ``--cells``: :data:`SPIKING`); the predictions
and the latency are the rate level's. Prints a table and writes JSON; the command line then draws the figure
from the JSON (:func:`ctmhsa.figures.memory.draw`). ``--quick`` is a smoke test.
"""

from __future__ import annotations

import os
import time

import numpy as np

from ctmhsa.sims.io import versions
from ctmhsa.sims.progress import progress

from ctmhsa.neurons.firing import FIRING_MODES
from ctmhsa.neurons.levels import get_level

from .common import add_out_argument, count, finish, held_out_weights, warnings_into
from .stream import CELLS, cell_params
from .timescale import QUICK_MARK

FIGURE = "ctmhsa.figures.memory"
"""The module whose ``draw(json_path)`` the command line calls after the run (figures only read data)."""

__all__ = ["HELP", "LEVELS", "FIGURE", "add_arguments", "settings", "check_neuron", "held_out_weights",
           "fit_forget", "decay_row", "pair_streams", "recalled", "recall_fraction", "capacity_row",
           "reference_capacity", "point90", "lag_row", "reference_lag", "silence_row", "speed_row",
           "recall_silence_row", "delay_row", "latency_row", "main"]

HELP = ("key-value memory over a stream: decay vs tau_mem, recall vs stored pairs and dk, recall vs lag, latency "
        "per token (v1 beside)")

LEVELS = ("rate", "escape")
"""The levels measured: the escape level the decay, the capacity and recall vs lag (the
predictions and the latency at the rate level only)."""

SPIKING = dict(P=16, firing="poisson", cells="default")
"""The escape level's ``--P`` (copies of every population but the gate relay), ``--firing``
and ``--cells`` (:mod:`ctmhsa.sims.benchmarks.stream`'s) where not given."""

DECAY_SIZES = dict(H=2, dk=8, dv=8, de=8)      # the default head size (``ctmhsa run``)
CAPACITY_SIZES = dict(dv=8, de=16)              # de >= dk: the query token can be the stored key
RECALL_LEVEL = 0.9
PREDICTIONS = ("silence", "speed", "recall", "delay")
DELAY_TAU_MEM = (None, 1.0)   # the delay activity without forgetting and at tau_mem = 1 s

FULL = dict(tau_mem=[0.5, 1.0, 2.0], lags=8, dk=[4, 8], pairs=[1, 2, 3, 4, 6, 8], trials=2,
            reference_pairs=[1, 2, 3, 4, 6, 8, 12, 16, 24, 32], reference_trials=200, lag_pairs=8, latency_T=8,
            set_size=8, repeats=3, prediction_seeds=3)
QUICK = dict(tau_mem=[1.0], lags=4, dk=[4], pairs=[1, 2], trials=1, reference_pairs=[1, 2, 4, 8],
             reference_trials=50, lag_pairs=4, latency_T=3, set_size=4, repeats=1, prediction_seeds=0)

_PART = dict(decay=0, capacity=1, latency=2, lag=3, predictions=4)    # independent random streams per part


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
    parser.add_argument("--lag-pairs", type=count, default=None,
                        help="stored pairs of the recall-vs-lag runs: lags 1 to N (default 8)")
    parser.add_argument("--prediction-seeds", type=int, default=None,
                        help="instances of the perturbation predictions (default 3, --quick 0: none)")
    parser.add_argument("--latency-T", type=count, default=None, help="presentations of the latency runs (default 8)")
    parser.add_argument("--set-size", type=count, default=None, help="tokens per set of the v1 circuit (default 8)")
    parser.add_argument("--repeats", type=count, default=None, help="latency repeats (default 3)")
    parser.add_argument("--P", type=count, default=None,
                        help=f"escape level: copies of every population but the gate relay (default {SPIKING['P']})")
    parser.add_argument("--firing", default=None, choices=list(FIRING_MODES),
                        help="escape level: how the cells fire (default poisson; population: each value's copies in turn)")
    parser.add_argument("--cells", default=None, choices=list(CELLS),
                        help="escape level: the cells' time constants (default: the circuit's; fast: a causal "
                             "model's 5 ms cells)")
    parser.add_argument("--seed", type=int, default=1, help="weights' and tokens' seed (default 1: held out)")
    parser.add_argument("--codegen", default="numpy", choices=["auto", "numpy", "cython"],
                        help="Brian2 target (default numpy: the rate level's small networks)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: tau_mem 1 s, 4 lags, dk 4, N 1 2, 4 lag pairs, one trial, T 3, one repeat, no predictions")
    parser.add_argument("--no-figure", action="store_true", help="do not draw the figure")
    add_out_argument(parser, "bench_results/memory.json")


def check_neuron(neuron: str) -> str:
    """``neuron`` if this benchmark measures that level, else a ``ValueError`` naming ``--neuron``."""
    if neuron not in LEVELS:
        raise ValueError(f"--neuron: the memory benchmark measures the {' and '.join(LEVELS)} levels "
                         f"(the memory circuit is built at these), got {neuron!r}")
    return neuron


def circuit_options(args) -> dict:
    """The escape level's options (copies, firing mode, cells: :data:`SPIKING` where not given),
    ``{}`` at the rate level, whose flags they are not (a ``ValueError`` naming the flag)."""
    given = {k: getattr(args, k, None) for k in SPIKING if getattr(args, k, None) is not None}
    if not get_level(args.neuron).spiking:
        if given:
            raise ValueError(f"--{next(iter(given))}: an escape-level option; --neuron is 'rate'")
        return {}
    o = {**SPIKING, **given}
    return dict(P=o["P"], firing=o["firing"], params=cell_params(o["cells"]))


def settings(args) -> dict:
    """The grid of a run: flags given, else the ``--quick`` or full defaults."""
    check_neuron(args.neuron)
    base = QUICK if args.quick else FULL
    s = {k: (getattr(args, k) if getattr(args, k, None) is not None else v) for k, v in base.items()}
    s["latency"] = not get_level(args.neuron).spiking
    if not s["latency"]:   # the predictions and the latency are the rate level's
        for k in ("prediction_seeds", "latency_T", "set_size", "repeats"):
            if getattr(args, k, None) is not None and not (k == "prediction_seeds" and args.prediction_seeds == 0):
                raise ValueError(f"--{k.replace('_', '-')}: the predictions and the latency are measured at the rate "
                                 f"level; --neuron is {args.neuron!r}")
        s["prediction_seeds"] = 0
    s["circuit"] = circuit_options(args)
    if not args.presentation > 0 or any(not t > 0 for t in s["tau_mem"]):
        raise ValueError("--presentation, --tau-mem: expected times > 0 s")
    if s["prediction_seeds"] < 0:
        raise ValueError(f"--prediction-seeds: expected an integer >= 0 (0: none), got {s['prediction_seeds']}")
    if any(dk > CAPACITY_SIZES["de"] for dk in s["dk"]):
        raise ValueError(f"--dk: at most de = {CAPACITY_SIZES['de']} (a query token must give q = k)")
    return s


def _rng(seed: int, part: str, *ids) -> np.random.Generator:
    return np.random.default_rng([seed, _PART[part], *ids])


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
              codegen: str = "numpy", **circuit) -> dict:
    """One write, then ``lags`` zero tokens (which write nothing): the memory's component along
    the write per token, circuit and reference, λ fitted to each, and ``τ_mem`` measured."""
    from ctmhsa.maths.reference import memory_attention

    rng = _rng(seed, "decay", int(round(1e3 * tau_mem)))
    W = held_out_weights(rng, **DECAY_SIZES)
    X = np.zeros((lags + 1, DECAY_SIZES["de"]))
    X[0] = rng.normal(size=DECAY_SIZES["de"])
    warned = []
    t0 = time.perf_counter()
    with warnings_into(warned):
        res = _simulate(X, W, neuron, presentation, codegen, tau_mem=tau_mem, **circuit)
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


def recalled(v_tilde, values) -> np.ndarray:
    """Per read-out ``v_tilde (N, dv)``: is its nearest stored value (cosine) among ``values
    (N, dv)`` its own (row i reads pair i)? Boolean ``(N,)``."""
    a = np.asarray(v_tilde, float)
    b = np.asarray(values, float)
    cos = (a / np.linalg.norm(a, axis=1, keepdims=True)) @ (b / np.linalg.norm(b, axis=1, keepdims=True)).T
    return np.argmax(cos, axis=1) == np.arange(len(b))


def recall_fraction(v_tilde, values) -> float:
    """Fraction of read-outs whose nearest stored value is their own (:func:`recalled`)."""
    return float(np.mean(recalled(v_tilde, values)))


def _reference_recalled(X, Y, W, values, forget: float = 1.0) -> np.ndarray:
    from ctmhsa.maths.reference import memory_attention

    N = len(values)
    return recalled(memory_attention(X, *W, Y=Y, forget=forget)["v_tilde"][0, N:], values)


def _reference_recall(X, Y, W, values) -> float:
    return float(np.mean(_reference_recalled(X, Y, W, values)))


def capacity_row(N: int, dk: int, trial: int, presentation: float, seed: int, neuron: str = "rate",
                 codegen: str = "numpy", **circuit) -> dict:
    """Recall of N stored pairs queried by their keys: the circuit and the reference on one instance."""
    X, Y, W, values = pair_streams(N, dk, _rng(seed, "capacity", dk, N, trial))
    warned = []
    t0 = time.perf_counter()
    with warnings_into(warned):
        res = _simulate(X, W, neuron, presentation, codegen, Y=Y, **circuit)
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


def _by_lag(hits) -> list:
    """Recall per pair (row i: pair i of N) as a list by lag ``L = N - i``, lag 1 first."""
    return [bool(h) for h in np.asarray(hits)[::-1]]


def lag_row(N: int, dk: int, tau_mem: float | None, trial: int, presentation: float, seed: int,
            neuron: str = "rate", codegen: str = "numpy", **circuit) -> dict:
    """Recall of each of N stored pairs by its lag (module docstring), the circuit and the
    reference on one instance, without forgetting (``tau_mem=None``) or with it."""
    from ctmhsa.mapping.kvmemory import forget_factor

    X, Y, W, values = pair_streams(N, dk, _rng(seed, "lag", dk, N, trial))
    warned = []
    t0 = time.perf_counter()
    with warnings_into(warned):
        res = _simulate(X, W, neuron, presentation, codegen, Y=Y, tau_mem=tau_mem, **circuit)
    lam = forget_factor(presentation, tau_mem)
    return dict(N=N, dk=dk, tau_mem=tau_mem, forget=lam, trial=trial, lags=list(range(1, N + 1)),
                recalled=_by_lag(recalled(res.stages["v_tilde"][N:, 0], values)),
                recalled_reference=_by_lag(_reference_recalled(X, Y, W, values, lam)),
                v_tilde_rel_error=float(res.metrics()["v_tilde"]["max_rel_error"]),
                wall_s=time.perf_counter() - t0, warnings=warned)


def reference_lag(N: int, dk: int, tau_mem: float | None, trials: int, presentation: float, seed: int) -> dict:
    """The reference's recall by lag over ``trials`` instances (other than the circuit's)."""
    from ctmhsa.mapping.kvmemory import forget_factor

    lam = forget_factor(presentation, tau_mem)
    hits = [_by_lag(_reference_recalled(*pair_streams(N, dk, _rng(seed, "lag", dk, N, 10_000 + i)), lam))
            for i in range(trials)]
    return dict(N=N, dk=dk, tau_mem=tau_mem, forget=lam, trials=trials, lags=list(range(1, N + 1)),
                recall=np.mean(hits, axis=0).tolist())


def _silence(*targets, start=None, stop=None) -> list:
    from ctmhsa.circuits.perturb import Silence

    return [Silence(t, start=start, stop=stop) for t in targets]


def _rel(a, b) -> float:
    return float(np.linalg.norm(np.asarray(a) - b) / np.linalg.norm(b))


def _head_stream(seed: int, what: int, instance: int, T: int):
    """Default-size weights and ``T`` random tokens of one prediction instance."""
    rng = _rng(seed, "predictions", what, instance)
    W = held_out_weights(rng, **DECAY_SIZES)
    return rng.normal(size=(T, DECAY_SIZES["de"])), W


def _recorded(X, W, pops, dt_ms: float, neuron, presentation, codegen, **kw):
    """A run with the rates of ``pops`` recorded every ``dt_ms``: the result and ``{pop: (t, r (steps, N))}``."""
    import brian2 as b2

    from ctmhsa.sims import build_mhsa

    sim = build_mhsa(X, *W, circuit="memory", neuron=neuron, presentation=presentation, codegen=codegen, **kw)
    mons = {k: b2.StateMonitor(sim.groups[k], "r", record=True, dt=dt_ms * b2.ms) for k in pops}
    sim.network.add(*mons.values())
    res = sim.run()
    return res, {k: (m.t_[:], m.r_[:].T) for k, m in mons.items()}


def silence_row(instance: int, presentation: float, seed: int, T: int = 12, neuron: str = "rate",
                codegen: str = "numpy") -> dict:
    """(a, b) of the predictions (module docstring): the integrators, then all of L2/3, silenced
    from token ``T // 2`` on, at the default head size."""
    from ctmhsa.mapping.kvmemory import token_times
    from ctmhsa.maths.reference import memory_attention

    X, W = _head_stream(seed, 0, instance, T)
    t0 = T // 2
    on = token_times(t0, presentation)["shown"][0]
    refs = dict(full=memory_attention(X, *W)["x_tilde"],
                since=np.concatenate([np.zeros((t0, X.shape[1])), memory_attention(X[t0:], *W)["x_tilde"]]),
                own=np.stack([memory_attention(X[t:t + 1], *W)["x_tilde"][0] for t in range(T)]))
    warned, runs = [], {}
    with warnings_into(warned):
        for name, p in (("intact", None), ("memory", _silence("memory", start=on)),
                        ("l23", _silence("memory", "outer", start=on))):
            runs[name] = _simulate(X, W, neuron, presentation, codegen, perturbations=p)
    sil = runs["memory"].x_tilde
    after = range(t0 + 1, T)   # (at token t0 itself 'since' and 'own' are one)
    rates = {name: {pop: float(np.nanmean(r.rates[pop][t0:])) for pop in ("memory", "readout", "l5pt")}
             for name, r in runs.items()}
    return dict(instance=instance, T=T, silenced_from=t0, start=on,
                before_rel_to_full=max(_rel(sil[t], refs["full"][t]) for t in range(t0)),
                **{f"after_rel_to_{k}": [_rel(sil[t], refs[k][t]) for t in after] for k in refs},
                rates=rates, warnings=warned)


def speed_row(instance: int, seed: int, presentation: float = 0.6, T: int = 6, window: float = 0.15,
              neuron: str = "rate", codegen: str = "numpy") -> dict:
    """(c) of the predictions: the integrators silenced for ``window`` s from 0.3 s before token
    ``T - 2``'s read; per population the time (s) to move 90 % / 99 % of the way to the silenced
    state, and back after the release (rates recorded every 1 ms, projected on the difference
    the silence makes just before its end)."""
    from ctmhsa.mapping.kvmemory import token_times

    X, W = _head_stream(seed, 1, instance, T)
    on = token_times(T - 2, presentation)["read"] - 0.3
    off = on + window
    pops, traces, warned = ("readout", "l5pt", "nucleus2"), {}, []
    with warnings_into(warned):
        for name, p in (("intact", None), ("silenced", _silence("memory", start=on, stop=off))):
            traces[name] = _recorded(X, W, pops, 1.0, neuron, presentation, codegen, perturbations=p)[1]
    out = dict(instance=instance, presentation=presentation, start=on, stop=off)
    for k in pops:
        t, a = traces["intact"][k]
        d = traces["silenced"][k][1] - a
        end = d[np.searchsorted(t, off - 1e-9) - 1]
        f = d @ end / (end @ end)         # 0: intact, 1: silenced
        into, back = t >= on - 1e-9, t >= off - 1e-9
        out[k] = {f"onset_{q}": float(t[into][np.argmax(f[into] >= q / 100)] - on) for q in (90, 99)}
        out[k].update({f"release_{q}": float(t[back][np.argmax(np.abs(f[back]) <= 1 - q / 100)] - off)
                       for q in (90, 99)})
    out["warnings"] = warned
    return out


def recall_silence_row(instance: int, presentation: float, seed: int, N: int = 4, dk: int = 8,
                       neuron: str = "rate", codegen: str = "numpy") -> dict:
    """(d) of the predictions: the capacity's streams, the integrators silenced while the pairs
    are queried or while written, the write cells while written; the read-outs' size against
    the intact one's (per query) and the recall (None where nothing is read)."""
    from ctmhsa.mapping.kvmemory import token_times

    X, Y, W, values = pair_streams(N, dk, _rng(seed, "predictions", 2, instance))
    queried, written = token_times(N, presentation)["shown"][0], token_times(N - 1, presentation)["shown"][1]
    cases = dict(intact=None, memory_while_queried=_silence("memory", start=queried),
                 memory_while_written=_silence("memory", stop=written),
                 outer_while_written=_silence("outer", stop=written))
    out, warned, base = dict(instance=instance, N=N, dk=dk), [], None
    for name, p in cases.items():
        with warnings_into(warned):
            v = _simulate(X, W, neuron, presentation, codegen, Y=Y, perturbations=p).stages["v_tilde"][N:, 0]
        size = np.linalg.norm(v, axis=1)
        base = size if base is None else base
        read = bool(np.all(size > 1e-6 * base))
        out[name] = dict(size=(size / base).tolist(), recall=recall_fraction(v, values) if read else None)
    out["warnings"] = warned
    return out


def delay_row(instance: int, tau_mem: float | None, presentation: float, seed: int, K: int = 4, D: int = 8,
              neuron: str = "rate", codegen: str = "numpy") -> dict:
    """(e) of the predictions: ``K`` random tokens written, then ``D`` zero tokens; the
    integrators' rates (Hz) per token as read (token t reads ``M_{t-1}``: row K is the first
    that holds every write), the fraction of them active, and their largest change between two
    writes of the delay relative to their largest rate (``D >= 2``)."""
    from ctmhsa.mapping.kvmemory import token_times

    X, W = _head_stream(seed, 3, instance, K + D)
    X[K:] = 0.0
    warned = []
    with warnings_into(warned):
        res, traces = _recorded(X, W, ("memory",), 2.0, neuron, presentation, codegen, tau_mem=tau_mem)
    r = res.rates["memory"].reshape(K + D, -1)
    t, trace = traces["memory"]
    # between the first two writes of the delay (token K's, which writes nothing, and token K + 1's)
    a = np.searchsorted(t, token_times(K, presentation)["write"][1] + 1e-3)
    b = np.searchsorted(t, token_times(K + 1, presentation)["write"][0] - 1e-3)
    return dict(instance=instance, tau_mem=tau_mem, K=K, D=D, cells=int(r.shape[1]),
                active=float(np.mean(r[K] > 0)), mean_rate=np.nanmean(r, axis=1).tolist(),
                max_rate=np.nanmax(r, axis=1).tolist(),
                hold_change=float(np.max(np.abs(trace[b] - trace[a])) / np.max(trace)), warnings=warned)


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
    if doc.get("circuit"):
        c = doc["circuit"]
        print(f"escape level: P = {c['P']} copies, {c['firing']} firing, cells tau_m {c['params']['tau_m'] * 1e3:g} ms")
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
    print(f"recall vs lag: {doc['lag_pairs']} pairs stored (dk={doc['lag_dk']}), each queried by its key; lag: "
          f"tokens since written; circuit / reference on the same {doc['trials']} instance(s), reference over "
          f"{doc['reference_trials']} others")
    for ref in doc["lag_reference"]:
        rows = [r for r in doc["lag"] if r["tau_mem"] == ref["tau_mem"]]
        mean = {k: np.mean([r[k] for r in rows], axis=0) for k in ("recalled", "recalled_reference")}
        what = "no forgetting" if ref["tau_mem"] is None else f"tau_mem {ref['tau_mem']:g} s (λ {ref['forget']:.3f})"
        print(f"  {what}: " + "  ".join(f"L={L}: {c:.2f}/{rc:.2f} ({r:.2f})" for L, c, rc, r in
                                        zip(ref["lags"], mean["recalled"], mean["recalled_reference"], ref["recall"])))
    _print_predictions(doc["predictions"])
    if not doc["latency"]:
        return
    print(f"latency (median of {doc['repeats']} runs; per token: per presentation / tokens per presentation)")
    print(f"  {'circuit':>9} {'tokens/pres.':>12} {'neurons':>7} {'per head':>8} {'per token':>9} {'build s':>7} "
          f"{'s/presentation':>14} {'s/token':>8} {'x̃ max rel. error':>17}")
    for r in doc["latency"]:
        print(f"  {r['circuit']:>9} {r['set_size']:>12} {r['neurons']:>7} {r['neurons_per_head']:>8} "
              f"{r['neurons_per_token']:>9.1f} {r['build_s']:>7.2f} {r['s_per_presentation']:>14.3f} "
              f"{r['s_per_token']:>8.3f} {_f(r['x_tilde_rel_error'], '.1e'):>17}")


def _span(values, fmt: str) -> str:
    """``min-max`` of ``values`` (one value alone)."""
    lo, hi = np.min(values), np.max(values)
    return format(lo, fmt) if lo == hi else f"{format(lo, fmt)}-{format(hi, fmt)}"


def _print_predictions(pr: dict) -> None:
    """The predictions' table (ranges over the instances)."""
    if not pr["silence"]:
        return
    sil = pr["silence"]
    print(f"predictions ({len(sil)} instance(s); ranges over instances and tokens)")
    print(f"  (a) L2/3 integrators silenced from token {sil[0]['silenced_from']} of {sil[0]['T']}: x̃ after it, "
          f"relative distance to the reference with every token "
          f"{_span([v for r in sil for v in r['after_rel_to_full']], '.2f')}, with the tokens since the silence "
          f"{_span([v for r in sil for v in r['after_rel_to_since']], '.2f')}, with the current token alone "
          f"{_span([v for r in sil for v in r['after_rel_to_own']], '.1e')}; before it "
          f"{_span([r['before_rel_to_full'] for r in sil], '.1e')}")
    for pop in ("readout", "l5pt", "memory"):
        rates = {k: [r["rates"][k][pop] for r in sil] for k in ("intact", "memory", "l23")}
        print(f"  (b) {pop:>8} mean rate after it (Hz): intact {_span(rates['intact'], '.2f')}, integrators "
              f"silenced {_span(rates['memory'], '.2f')}, all L2/3 silenced {_span(rates['l23'], '.2g')}")
    for pop in ("readout", "l5pt", "nucleus2"):
        ms = {k: [1e3 * r[pop][k] for r in pr["speed"]] for k in ("onset_90", "onset_99", "release_90", "release_99")}
        print(f"  (c) {pop:>8} after silencing / releasing the integrators (ms): 90 % {_span(ms['onset_90'], '.0f')}"
              f" / {_span(ms['release_90'], '.0f')}, 99 % {_span(ms['onset_99'], '.0f')} / "
              f"{_span(ms['release_99'], '.0f')}")
    rec = pr["recall"]
    for case in ("intact", "memory_while_queried", "memory_while_written", "outer_while_written"):
        recall = [r[case]["recall"] for r in rec]
        said = "-" if None in recall else f"{np.mean(recall):.2f}"
        print(f"  (d) {rec[0]['N']} pairs, {case.replace('_', ' ')}: read-out size / intact "
              f"{_span([v for r in rec for v in r[case]['size']], '.3g')}, recall {said}")
    for tau in DELAY_TAU_MEM:
        rows = [r for r in pr["delay"] if r["tau_mem"] == tau]
        K, D = rows[0]["K"], rows[0]["D"]
        first, last = [r["mean_rate"][K] for r in rows], [r["mean_rate"][-1] for r in rows]
        print(f"  (e) delay, tau_mem {'none' if tau is None else format(tau, 'g') + ' s'}: integrators' mean rate "
              f"{_span(first, '.2f')} Hz after the writes, {_span(last, '.2f')} Hz {D - 1} tokens later "
              f"(ratio {_span(np.divide(last, first), '.3f')}); active {_span([r['active'] for r in rows], '.2f')}; "
              f"change between writes {_span([r['hold_change'] for r in rows], '.1e')}")


def main(args) -> int:
    s = settings(args)
    P, seed, neuron, cg = args.presentation, args.seed, args.neuron, args.codegen
    t_all = time.perf_counter()
    doc = dict(benchmark="memory", quick=bool(args.quick), neuron=neuron, presentation=P, seed=seed, codegen=cg,
               decay_sizes=DECAY_SIZES, capacity_sizes=CAPACITY_SIZES, recall_level=RECALL_LEVEL,
               **{k: s[k] for k in ("tau_mem", "lags", "dk", "pairs", "trials", "reference_trials", "lag_pairs",
                                    "prediction_seeds", "repeats")}, lag_dk=max(s["dk"]),
               circuit={k: (v.to_dict() if hasattr(v, "to_dict") else v) for k, v in s["circuit"].items()},
               decay=[], capacity=[], reference_capacity=[], lag=[], lag_reference=[], latency=[],
               predictions={k: [] for k in PREDICTIONS}, versions=versions(), cpus=os.cpu_count())
    forgetting = [None, *s["tau_mem"]]
    runs = ([("decay", t) for t in s["tau_mem"]] + [("capacity", (dk, N, i)) for dk in s["dk"]
                                                     for N in s["pairs"] for i in range(s["trials"])]
            + [("lag", (tau, i)) for tau in forgetting for i in range(s["trials"])]
            + [("predictions", i) for i in range(s["prediction_seeds"])]
            + [("latency", c) for c in (("memory", "quadratic") if s["latency"] else ())])
    for part, what in progress(runs, desc="bench memory", unit="run"):
        if part == "decay":
            doc["decay"].append(decay_row(what, s["lags"], P, seed, neuron, cg, **s["circuit"]))
        elif part == "capacity":
            doc["capacity"].append(capacity_row(what[1], what[0], what[2], P, seed, neuron, cg, **s["circuit"]))
        elif part == "lag":
            doc["lag"].append(lag_row(s["lag_pairs"], doc["lag_dk"], what[0], what[1], P, seed, neuron, cg,
                                      **s["circuit"]))
        elif part == "predictions":
            pr = doc["predictions"]
            pr["silence"].append(silence_row(what, P, seed, neuron=neuron, codegen=cg))
            pr["speed"].append(speed_row(what, seed, neuron=neuron, codegen=cg))
            pr["recall"].append(recall_silence_row(what, P, seed, neuron=neuron, codegen=cg))
            pr["delay"] += [delay_row(what, tau, P, seed, neuron=neuron, codegen=cg) for tau in DELAY_TAU_MEM]
        else:
            doc["latency"].append(latency_row(what, s["latency_T"], s["repeats"], P, seed,
                                              s["set_size"], neuron, cg))
    doc["reference_capacity"] = [reference_capacity(dk, s["reference_pairs"], s["reference_trials"], seed)
                                 for dk in s["dk"]]
    doc["lag_reference"] = [reference_lag(s["lag_pairs"], doc["lag_dk"], tau, s["reference_trials"], P, seed)
                            for tau in forgetting]
    doc["wall_s"] = time.perf_counter() - t_all
    print()
    _print_table(doc)
    finish(doc, doc["decay"] + doc["capacity"] + doc["lag"] + doc["latency"]
           + [r for rows in doc["predictions"].values() for r in rows], args.out, "runs")
    return 0   # the figure is drawn from the JSON by ctmhsa.figures.memory (FIGURE)
