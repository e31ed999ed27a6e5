"""``ctmhsa bench stream``: the key-value memory circuit over a long stream at a spiking level,
against its reference and its noise floor, per token.

The memory circuit (``circuit="memory"``, unnormalised, no forgetting by default) is shown ``T``
held-out random tokens (seed ``--seed``), one per presentation, in a head of ``--H`` areas and
width ``--d`` (dk = dv = de; default 8, H = 2). For every setting of population coding (``--P``: copies of every population
but the gate) and write-cell gain (``--rho-outer``, Hz per unit of ``φ(k) v``; the shipped gain
is :class:`ctmhsa.maths.codes.CodeGains`'s) and firing mode (``--firing``: escape noise, or each
value's copies in turn), with the circuit's default cells or a causal model's 5 ms ones
(``--cells``), it reports x̃'s NRMSE pooled over the stream and per
token (tokens after the first), its noise floor (the read-out's spike counts and the writes'
counts carried by the integrators, :mod:`ctmhsa.mapping.kvmemory`), the correlation with the
reference pooled and per token, the neurons, the mean rates of the memory's populations, the
cells that saturated, and the wall time. The target it is measured against (docs/memory.md,
"Escape level"): x̃ NRMSE ≤ 0.10 and r ≥ 0.99 on every token after the first, T = 32,
0.2 s per token, ≤ 1e5 neurons.
"""

from __future__ import annotations

import dataclasses
import os
import time

import numpy as np

from ctmhsa.neurons.firing import FIRING_MODES, get_firing
from ctmhsa.neurons.levels import get_level
from ctmhsa.sims.io import versions
from ctmhsa.sims.progress import progress

from .common import add_out_argument, count, finish, held_out_weights, warnings_into

HELP = "the memory circuit over a long stream at a spiking level: x̃ per token against its reference and floor"

SIZES = dict(H=2, dk=8, dv=8, de=8)
POPULATIONS = ("nucleus1", "nucleus1_kv", "outer", "memory", "readout", "l5pt", "nucleus2")
"""The populations ``--P`` copies (the gate relay stays one signal)."""
RATES = ("outer", "memory", "readout", "l5pt", "nucleus2")
TARGET = dict(nrmse=0.10, r=0.99, neurons=100_000)
CELLS = ("default", "fast")
"""``--cells``: the circuit's default cells, or a causal model's (:data:`ctmhsa.sims.model.CAUSAL_PARAMS`)."""


def cell_params(cells: str):
    """The :class:`ctmhsa.neurons.params.CellParams` ``--cells`` names."""
    from ctmhsa.neurons.params import DEFAULT_PARAMS
    from ctmhsa.sims.model import CAUSAL_PARAMS

    return dict(default=DEFAULT_PARAMS, fast=CAUSAL_PARAMS)[cells]


def add_arguments(parser) -> None:
    parser.add_argument("--neuron", default="escape", choices=["escape", "lif", "rate"],
                        help="level of the cells (default escape; lif needs presentations of 0.42 s or more)")
    parser.add_argument("--H", type=count, default=SIZES["H"], help=f"heads (default {SIZES['H']})")
    parser.add_argument("--d", type=count, default=SIZES["de"],
                        help=f"dk = dv = de, the head's width (default {SIZES['de']})")
    parser.add_argument("--T", type=count, default=32, help="tokens in the stream (default 32)")
    parser.add_argument("--P", type=count, nargs="+", default=[16, 32],
                        help="copies per population, one run each (default 16 32)")
    parser.add_argument("--rho-outer", type=float, nargs="+", default=[20.0, 80.0],
                        help="write cells' gain, Hz per unit of φ(k)v, one run each (default 20 80; 20 is the shipped)")
    parser.add_argument("--firing", nargs="+", default=["poisson"], choices=list(FIRING_MODES),
                        help="how the escape cells fire, one run each (default poisson: escape noise; population: "
                             "each value's copies in turn, docs/timescale.md)")
    parser.add_argument("--cells", default="default", choices=list(CELLS),
                        help="the cells' time constants (default: the pathway's 10 ms; fast: 5 ms somata, dendrites "
                             "and relays, a causal model's, ctmhsa.sims.model.CAUSAL_PARAMS)")
    parser.add_argument("--presentation", type=float, default=0.2, help="seconds per token (default 0.2)")
    parser.add_argument("--normalize", action="store_true", help="the normalised variant")
    parser.add_argument("--seed", type=int, default=1, help="weights' and tokens' seed (default 1: held out)")
    parser.add_argument("--spike-seed", type=int, default=3, help="the simulation's seed (default 3)")
    parser.add_argument("--codegen", default="cython", choices=["auto", "numpy", "cython"],
                        help="Brian2 target (default cython)")
    add_out_argument(parser, "bench_results/stream.json")


def problem(T: int, seed: int, sizes: dict = SIZES) -> tuple:
    """``(X (T, de), [WQ, WK, WV, WO])``: held-out tokens N(0, 1) and unit-variance projections
    of ``sizes`` (``H``, ``dk``, ``dv``, ``de``)."""
    rng = np.random.default_rng([seed, 5])
    W = held_out_weights(rng, *(sizes[k] for k in ("H", "dk", "dv", "de")))
    return rng.normal(size=(T, sizes["de"])), W


def row(X, W, P: int, rho_outer: float, args, firing: str = "poisson") -> dict:
    """One run: x̃ against the reference and its floor, pooled and per token."""
    from ctmhsa.maths.codes import default_gains
    from ctmhsa.sims import simulate_mhsa

    gains = dataclasses.replace(default_gains(args.neuron), rho_outer=float(rho_outer))
    copies = {p: P for p in POPULATIONS}
    if args.normalize:
        copies.update({p: P for p in ("outer_z", "memory_z", "readout_z")})
    record: list = []
    t0 = time.perf_counter()
    with warnings_into(record):
        res = simulate_mhsa(X, *W, circuit="memory", neuron=args.neuron, presentation=args.presentation,
                            P=copies, gains=gains, normalize=args.normalize, seed=args.spike_seed,
                            codegen=args.codegen, firing=firing, params=cell_params(args.cells))
    wall = time.perf_counter() - t0
    m = res.metrics()["x_tilde"]
    x, ref = np.asarray(res.x_tilde), np.asarray(res.reference)
    per = np.sqrt(np.mean((x - ref) ** 2, axis=1) / np.mean(ref ** 2, axis=1))
    r_tok = np.array([np.corrcoef(x[t], ref[t])[0, 1] for t in range(len(x))])
    ranges = res.diagnostics["range"]
    saturated = sorted({p for rep in ranges for p, v in rep.items() if v.get("saturated")})
    return dict(P=int(P), rho_outer=float(rho_outer), firing=firing, nrmse=float(m["nrmse"]), floor=float(m["noise_floor"]),
                r=float(m["r"]), per_token=per.tolist(), r_per_token=r_tok.tolist(),
                worst_after_first=float(per[1:].max()) if len(per) > 1 else float("nan"),
                median=float(np.median(per)), r_min_after_first=float(r_tok[1:].min()) if len(per) > 1 else float("nan"),
                neurons=int(res.counts["neurons"]), rates={p: float(np.nanmean(res.rates[p])) for p in RATES},
                saturated=saturated, wall_s=wall, warnings=record)


def check_settings(args) -> None:
    """Refuse, naming the flag, a firing mode or a presentation the level's circuit does not take
    (:class:`ctmhsa.sims.options.CircuitOptions`, :func:`ctmhsa.sims.options.min_presentation`),
    before any run starts."""
    from ctmhsa.sims.options import CircuitOptions, min_presentation

    for firing in dict.fromkeys(args.firing):
        try:
            co = CircuitOptions(neuron=args.neuron, circuit="memory", firing=firing, params=cell_params(args.cells))
        except ValueError as exc:
            raise ValueError(f"--firing: {exc}") from None
        t_min, why = min_presentation(co)
        if args.presentation < t_min * (1 - 1e-9):
            raise ValueError(f"--presentation: {args.presentation:g} s is shorter than the {args.neuron} level's "
                             f"shortest, {t_min:g} s ({why})")


def _print(doc: dict) -> None:
    print(f"memory circuit, {doc['neuron']}, T = {doc['T']}, {doc['presentation']:g} s per token, "
          f"H = {doc['sizes']['H']}, dk = dv = de = {doc['sizes']['de']}{', normalised' if doc['normalize'] else ''}, "
          f"{doc['cells']} cells")
    print(f"{'firing':>10} {'P':>4} {'rho_outer':>9} {'neurons':>8} {'x̃ NRMSE':>8} {'floor':>6} {'r':>6} {'worst tok':>9} "
          f"{'median':>6} {'min r':>6} {'rates outer/memory/readout/PT/n2 (Hz)':>38} {'wall s':>7}")
    for r in doc["rows"]:
        rates = "/".join(f"{r['rates'][p]:.1f}" for p in RATES)
        print(f"{r['firing']:>10} {r['P']:>4} {r['rho_outer']:>9g} {r['neurons']:>8,} {r['nrmse']:>8.3f} {r['floor']:>6.3f} "
              f"{r['r']:>6.3f} {r['worst_after_first']:>9.3f} {r['median']:>6.3f} {r['r_min_after_first']:>6.3f} "
              f"{rates:>38} {r['wall_s']:>7.0f}" + (f"  saturated: {', '.join(r['saturated'])}" if r["saturated"] else ""))
    print(f"target: x̃ NRMSE <= {TARGET['nrmse']} and r >= {TARGET['r']} on every token after the first, "
          f"<= {TARGET['neurons']:,} neurons")


def main(args) -> int:
    if not args.presentation > 0:
        raise ValueError(f"--presentation: expected seconds > 0, got {args.presentation}")
    if any(not g > 0 for g in args.rho_outer):
        raise ValueError(f"--rho-outer: expected gains > 0 Hz, got {args.rho_outer}")
    t_all = time.perf_counter()
    sizes = dict(H=args.H, dk=args.d, dv=args.d, de=args.d)
    X, W = problem(args.T, args.seed, sizes)
    doc = dict(benchmark="stream", neuron=args.neuron, T=args.T, presentation=args.presentation,
               normalize=bool(args.normalize), seed=args.seed, spike_seed=args.spike_seed, sizes=sizes,
               cells=args.cells, target=TARGET, codegen=args.codegen, rows=[], versions=versions(), cpus=os.cpu_count())
    if not get_level(args.neuron).spiking and any(not get_firing(f).poisson for f in args.firing):
        raise ValueError(f"--firing: how the escape level's cells fire; --neuron is {args.neuron!r}")
    check_settings(args)
    grid = [(f, P, g) for f in dict.fromkeys(args.firing) for P in args.P for g in args.rho_outer]
    for f, P, g in progress(grid, desc="bench stream", unit="run"):
        doc["rows"].append(row(X, W, P, g, args, firing=f))
    doc["wall_s"] = time.perf_counter() - t_all
    print()
    _print(doc)
    finish(doc, doc["rows"], args.out, "runs")
    return 0
