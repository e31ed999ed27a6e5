"""``ctmhsa bench train``: the circuit learns a teacher–student problem with eqs. (2)–(5).

A random teacher of the student's shape (n = 4, H = 2, dk = dv = 3, de = 4 by default) gives the
targets; :func:`ctmhsa.sims.train_mhsa` trains the student at the rate and escape levels (gradients
formed from the circuit's activity), beside exact gradient descent on the reference with the
same learning rate. Reports the wall time per step, the exact loss ratios after 60 steps and at
the end, the circuit's decoded-loss ratio (mean of the last 10 steps' decoded losses over the
first), the cosines between the circuit's and the exact
gradient (first step, median), and the share of the steps' time spent building the network
(once) and rewriting it for every run (``build_share``, :attr:`ctmhsa.sims.train.TrainingResult.build_time`). The JSON is rewritten (atomically) every ``--save-every`` steps,
so an interrupted run keeps what it measured.
"""

from __future__ import annotations

import os
import time


from ctmhsa.sims.io import atomic_write_json, versions
from ctmhsa.neurons.levels import get_level
from ctmhsa.sims.train import WEIGHT_NAMES, curve_summary, default_lr, exact_descent, teacher_student, train_mhsa

from .common import add_out_argument, count

__all__ = ["HELP", "add_arguments", "main"]

HELP = "teacher-student learning from the circuit's activity: loss ratios, gradient cosines, time per step"


def add_arguments(parser) -> None:
    parser.add_argument("--n", type=count, default=4, help="tokens (default 4)")
    parser.add_argument("--H", type=count, default=2, help="heads (default 2)")
    parser.add_argument("--d", type=count, default=3, help="dk = dv (default 3)")
    parser.add_argument("--de", type=int, default=4, help="token dimension (default 4)")
    parser.add_argument("--batch", type=int, default=1, help="sequences per step (default 1)")
    parser.add_argument("--steps", type=int, default=300, help="rate-level steps (default 300)")
    parser.add_argument("--escape-steps", type=int, default=300, help="escape-level steps (default 300)")
    parser.add_argument("--levels", nargs="+", default=["rate", "escape"], choices=["rate", "escape", "lif"],
                        help="levels to train (default rate escape)")
    parser.add_argument("--duration", type=float, default=None,
                        help="window per run at the spiking levels, s (default the level's)")
    parser.add_argument("--seed", type=int, default=0, help="problem and simulation seed (default 0)")
    parser.add_argument("--save-every", type=int, default=10, help="rewrite the JSON every N steps (default 10)")
    add_out_argument(parser, "bench_results/train.json")


def main(args) -> int:
    prob = teacher_student(n=args.n, H=args.H, dk=args.d, dv=args.d, de=args.de, batch=args.batch, seed=args.seed)
    X, T, W0 = prob["X"], prob["T"], prob["W0"]
    lr = default_lr(args.batch, args.n)
    nmax = max([args.steps] + [args.escape_steps for lv in args.levels if get_level(lv).spiking])
    ref = exact_descent(X, T, *W0, steps=nmax, lr=lr)
    out = dict(benchmark="train", n=args.n, H=args.H, dk=args.d, dv=args.d, de=args.de, batch=args.batch,
               seed=args.seed, lr=lr, exact_gd=dict(loss=ref.tolist(), **curve_summary([], ref, [], [])),
               levels={}, versions=versions(), cpus=os.cpu_count())
    print(f"teacher-student n={args.n} H={args.H} dk=dv={args.d} de={args.de} batch={args.batch}, lr={lr:.4g}")
    for level in args.levels:
        spiking = get_level(level).spiking
        steps = args.escape_steps if spiking else args.steps
        rec = dict(loss=[], exact_loss=[], cosines=[], step_time=[], build_time=[], done=False)
        out["levels"][level] = rec
        t0 = time.perf_counter()

        def progress(s, d, rec=rec):
            for k in ("loss", "exact_loss", "cosines", "step_time", "build_time"):
                rec[k].append(d[k])
            if (s + 1) % args.save_every == 0:
                rec["summary"] = curve_summary(rec["loss"], rec["exact_loss"], rec["cosines"], rec["step_time"])
                atomic_write_json(args.out, out)

        opts = {} if args.duration is None or not spiking else dict(duration=args.duration)
        tr = train_mhsa(X, T, *W0, neuron=level, steps=steps, lr=lr, seed=args.seed, progress=progress, **opts)
        rec.update(loss=tr.loss.tolist(), exact_loss=tr.exact_loss.tolist(), cosines=tr.cosines.tolist(),
                   step_time=tr.step_time.tolist(), build_time=tr.build_time.tolist(), done=True,
                   wall_s=time.perf_counter() - t0)
        rec["summary"] = curve_summary(tr.loss, tr.exact_loss, tr.cosines, tr.step_time)
        # the share of the steps' time spent validating, encoding and building or rewriting the network
        rec["build_share"] = float(tr.build_time.sum() / tr.step_time.sum())
        atomic_write_json(args.out, out)
    rows = [f"{'':<10} {'steps':>5} {'s/step':>7} {'E60/E0':>7} {'E300/E0':>8} {'Eend/E0':>8} {'circ end':>8} "
            f"{'cos1 WQ':>8} {'WK':>7} {'WV':>7} {'WO':>7} {'cos med (min)':>13} {'build':>6}"]

    def fmt(v, w, p=3):
        return f"{'-':>{w}}" if v is None else f"{v:>{w}.{p}f}"

    g = out["exact_gd"]
    rows.append(f"{'exact GD':<10} {g['steps']:>5} {'-':>7} {fmt(g['exact_ratio_60'], 7)} "
                f"{fmt(g['exact_ratio_300'], 8)} {fmt(g['exact_ratio_end'], 8)}")
    for level, rec in out["levels"].items():
        sm = rec["summary"]
        c1 = sm.get("cos_first", {})
        rows.append(f"{level:<10} {sm['steps']:>5} {fmt(sm['wall_per_step_s'], 7, 2)} {fmt(sm['exact_ratio_60'], 7)} "
                    f"{fmt(sm['exact_ratio_300'], 8)} {fmt(sm['exact_ratio_end'], 8)} "
                    f"{fmt(sm.get('circuit_ratio_end'), 8)} "
                    + " ".join(fmt(c1.get(w), 8 if w == 'WQ' else 7, 4) for w in WEIGHT_NAMES)
                    + f" {fmt(min(sm.get('cos_median', {'-': 0}).values()), 13, 4)}"
                    + f" {100 * rec['build_share']:>5.1f}%")
    print("\n".join(rows))
    atomic_write_json(args.out, out)
    print(f"written {os.path.abspath(args.out)}")
    return 0
