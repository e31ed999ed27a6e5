"""``ctmhsa bench depth``: how a transformer circuit's error grows with its depth.

Random models of 1, 2 and 3 blocks (``--depths``; each block: H = 2 heads, dk = dv = 3, an MLP of
dh = 8 hidden units, weights ~ N(0, 1/fan-in), MLP biases ~ N(0, 0.3²); a read-out of 3 classes;
the deeper models extend the shallower ones: block l is the same in every depth) read held-out
token sets (n = 4 tokens of de = 6, ``X ~ N(0, 1)``, input seeds 1 ... ``--sets``) at the escape
level (``--duration`` window, 2 s; ``P`` = 4 cells per value), and once at the rate level. Per
depth and block: every stage's NRMSE and its floor (:mod:`ctmhsa.mapping.model_noise`), median
over the token sets; the output's and the logits' NRMSE, floor and r; neurons; wall time.

Prints a table and writes JSON; the command line then draws the figure from the JSON
(:func:`ctmhsa.figures.blocks.draw`).
"""

from __future__ import annotations

import os
import time

import numpy as np

from ctmhsa.sims.io import versions
from ctmhsa.sims.progress import progress

from .common import add_out_argument, count, write_table_and_json

FIGURE = "ctmhsa.figures.blocks"
"""The module whose ``draw(json_path)`` the command line calls after the run."""

__all__ = ["HELP", "add_arguments", "random_model", "main", "FIGURE"]

HELP = "transformer blocks in series: error per stage and block vs depth (1, 2, 3 blocks), against floors"

N, DE, H, DK, DH, CLASSES = 4, 6, 2, 3, 8, 3


def random_model(L: int, seed: int = 0, de: int = DE, H: int = H, dk: int = DK, dh: int = DH,
                 classes: int = CLASSES):
    """``L`` random blocks with MLPs and a read-out; block ``l`` depends on ``(seed, l)`` only, so a
    deeper model extends a shallower one."""
    from ctmhsa.maths.model import Block, MLPWeights, Model

    blocks = []
    for l in range(L):
        g = np.random.default_rng([seed, l])
        s = 1 / np.sqrt(de)
        a = Block.from_arrays(g.normal(0, s, (H, dk, de)), g.normal(0, s, (H, dk, de)), g.normal(0, s, (H, dk, de)),
                              g.normal(0, 1 / np.sqrt(H * dk), (H, de, dk)))
        mlp = MLPWeights(W1=g.normal(0, s, (dh, de)), b1=g.normal(0, 0.3, dh), W2=g.normal(0, 1 / np.sqrt(dh), (de, dh)),
                         b2=g.normal(0, 0.3, de))
        blocks.append(Block(attn=a.attn, mlp=mlp))
    g = np.random.default_rng([seed, 1000])
    return Model(blocks=tuple(blocks), readout_W=g.normal(0, 1 / np.sqrt(de), (classes, de)),
                 readout_b=g.normal(0, 0.3, classes), name=f"random-{L}-blocks")


def add_arguments(parser) -> None:
    parser.add_argument("--depths", type=count, nargs="+", default=[1, 2, 3], help="blocks (default 1 2 3)")
    parser.add_argument("--sets", type=count, default=5, help="held-out token sets per depth (default 5)")
    parser.add_argument("--duration", type=float, default=2.0, help="escape window, s (default 2)")
    parser.add_argument("--P", type=count, default=None, help="cells per value (default: simulate_model's, 4)")
    parser.add_argument("--seed", type=int, default=0, help="simulation seed (default 0)")
    parser.add_argument("--quick", action="store_true", help="smoke test: depths 1 2, 2 sets, 0.5 s")
    add_out_argument(parser, "bench_depth.json")


def _median(rows, *path):
    vals = []
    for r in rows:
        v = r
        for p in path:
            if isinstance(v, dict):
                v = v.get(p)
            elif isinstance(v, list) and isinstance(p, int) and p < len(v):
                v = v[p]
            else:
                v = None
            if v is None:
                break
        if v is not None:
            vals.append(v)
    return float(np.median(vals)) if vals else float("nan")


def main(args) -> int:
    from ctmhsa.sims.model import simulate_model

    depths, sets, duration = args.depths, args.sets, args.duration
    if args.quick:
        depths, sets, duration = [d for d in depths if d <= 2] or [1], 2, 0.5
    if any(d < 1 for d in depths) or sets < 1 or not duration > 0:
        raise ValueError("--depths, --sets, --duration: expected depths >= 1, sets >= 1 and a positive window")
    doc = dict(benchmark="depth", quick=bool(args.quick), n=N, de=DE, H=H, dk=DK, dv=DK, dh=DH, classes=CLASSES,
               sets=sets, duration=duration, P=args.P, seed=args.seed, level="escape", rows=[], versions=versions(),
               cpus=os.cpu_count())
    t_all = time.perf_counter()
    opts = {} if args.P is None else {"P": args.P}
    for L in progress(depths, desc="bench depth", unit="depth"):
        model = random_model(L)
        runs = []
        for k in range(1, sets + 1):
            X = np.random.default_rng(k).normal(size=(N, DE))
            t0 = time.perf_counter()
            res = simulate_model(model, X, neuron="escape", duration=duration, seed=args.seed + k, **opts)
            runs.append(dict(metrics=res.metrics, wall=time.perf_counter() - t0))
        rate = simulate_model(model, np.random.default_rng(1).normal(size=(N, DE)), neuron="rate")
        stages = list(runs[0]["metrics"]["blocks"][0])
        row = dict(depth=L, neurons=res.counts["total"], parts=res.counts["parts"],
                   P=res.config["P"], wall_median=float(np.median([r["wall"] for r in runs])),
                   rate_max_rel_error=max(rate.metrics["output"]["max_rel_error"],
                                          rate.metrics["logits"]["max_rel_error"]),
                   blocks=[{s: dict(nrmse=_median([r["metrics"] for r in runs], "blocks", l, s, "nrmse"),
                                    floor=_median([r["metrics"] for r in runs], "blocks", l, s, "floor"))
                            for s in stages if s in runs[0]["metrics"]["blocks"][l]} for l in range(L)])
        for key in ("output", "logits"):
            row[key] = {m: _median([r["metrics"] for r in runs], key, m) for m in ("nrmse", "floor", "r")}
        doc["rows"].append(row)
    write_table_and_json(doc, args.out, t_all, _print_table)
    return 0


def _print_table(doc) -> None:
    from ctmhsa.maths.stages import symbol

    print(f"\ntransformer depth, escape level, {doc['duration']:g} s window, median of {doc['sets']} token sets")
    print(f"{'depth':>5} {'neurons':>8} {'output NRMSE':>13} {'floor':>7} {'r':>7} {'logits NRMSE':>13} "
          f"{'floor':>7} {'r':>7} {'rate err':>9}")
    for row in doc["rows"]:
        o, g = row["output"], row["logits"]
        print(f"{row['depth']:>5} {row['neurons']:>8,} {o['nrmse']:>13.3f} {o['floor']:>7.3f} {o['r']:>7.4f} "
              f"{g['nrmse']:>13.3f} {g['floor']:>7.3f} {g['r']:>7.4f} {row['rate_max_rel_error']:>9.1e}")
    deepest = doc["rows"][-1]
    print(f"\nper stage, depth {deepest['depth']} (NRMSE / floor):")
    keys = list(deepest["blocks"][0])
    print(f"{'block':>5} " + " ".join(f"{symbol(k):>10}" for k in keys))
    for l, st in enumerate(deepest["blocks"]):
        cells = []
        for k in keys:
            m = st.get(k)
            cells.append(f"{m['nrmse']:.3f}/{m['floor']:.2f}" if m else "-")
        print(f"{l:>5} " + " ".join(f"{c:>10}" for c in cells))
