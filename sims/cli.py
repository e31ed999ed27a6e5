"""Command line: ``ctmhsa run``, ``ctmhsa circuit``, ``ctmhsa figures``, ``ctmhsa bench NAME``
(one subcommand per benchmark of :data:`sims.benchmarks.BENCHMARKS`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from circuits.builders import pathway

from .benchmarks import BENCHMARKS, benchmark
from .config import load_config, make_inputs
from .config import options as config_options
from .figure_data import make_data
from .io import write_result
from .simulate import simulate_mhsa

__all__ = ["main"]


def _cmd_run(args) -> int:
    cfg = load_config(args.config)
    for key in ("neuron",):
        if getattr(args, key) is not None:
            cfg["circuit"][key] = getattr(args, key)
    for key in ("duration", "seed"):
        if getattr(args, key) is not None:
            cfg["run"][key] = getattr(args, key)
    co, ro = config_options(cfg)    # validated before anything is built
    inputs = make_inputs(cfg["problem"], base_dir=os.path.dirname(cfg["_source"]))
    p = cfg["problem"]
    if not args.quiet:
        print(f"ctmhsa run: {cfg['_source']}")
        print(f"  n={p['n']} m={p['m']} H={p['H']} dk={p['dk']} dv={p['dv']} de={p['de']} "
              f"neuron={co.neuron} phi={co.phi} duration={ro.duration} s")
    res = simulate_mhsa(inputs["X"], inputs["WQ"], inputs["WK"], inputs["WV"], inputs["WO"], Y=inputs["Y"],
                        circuit_options=co, run_options=ro, report=None if args.quiet else "text")
    resolved = {k: v for k, v in cfg.items() if not k.startswith("_")}
    resolved["run"] = dict(cfg["run"], **{k: res.config[k] for k in ("dt", "codegen", "warmup")})
    path = write_result(res, args.out or cfg["output"]["dir"], config=resolved)
    if not args.quiet:
        t = res.timings
        sim = res.counts.get("simulated_synapses")
        folded = f" ({sim:,} simulated after folding)" if sim is not None and sim != res.counts["synapses"] else ""
        print(f"  {res.counts['neurons']:,} neurons, {res.counts['synapses']:,} synapses{folded}; "
              f"build {t['build']:.2f} s, compile {t['compile']:.2f} s, run {t['run']:.2f} s")
        print(res.metrics_table())
        rng = {k: v for k, v in res.diagnostics["range"].items()
               if v.get("rectified") or v.get("silent_interneurons")}
        if rng:
            print(f"  WARNING: cells outside their working range: {rng}")
        print(f"results written to {path}")
    return 0


def _cmd_circuit(args) -> int:
    cfg = load_config(args.config)
    p, c = cfg["problem"], cfg["circuit"]
    circ = pathway(p["n"], p["dk"], p["dv"], p["de"], H=p["H"], m=p["m"], cross=p["cross"],
                   causal=p["causal"], normalize=p["normalize"], P=c["P"], n_inh=c["n_inh"],
                   signed=c["signed"], circuit=c["circuit"])
    print(json.dumps(circ.to_dict(), indent=2) if args.json else circ.summary())
    return 0


def _cmd_figures(args) -> int:
    from figures.make import make_figures   # matplotlib: only for this command

    t0 = time.perf_counter()
    data = args.data or os.path.join(args.out, "data")
    make_data(data, quick=args.quick)
    made = make_figures(args.out, data, gallery=args.gallery)
    for p in made:
        print(f"  {p}")
    print(f"{len(made)} figures (PNG + PDF + caption) in {os.path.abspath(args.out)}, "
          f"{time.perf_counter() - t0:.0f} s")
    return 0


def _add_benchmarks(sub) -> None:
    """``ctmhsa bench NAME``: one subcommand per entry of :data:`sims.benchmarks.BENCHMARKS`, each
    with the flags its module adds (``add_arguments``) and its ``main`` as the command."""
    bench = sub.add_parser("bench", help="benchmarks that print a table and write JSON",
                           description="Benchmarks that print a table and write JSON; "
                                       "`ctmhsa bench NAME --help` lists the flags of each.")
    which = bench.add_subparsers(dest="benchmark", metavar="NAME", required=True, title="benchmarks")
    for name in BENCHMARKS:
        mod = benchmark(name)
        p = which.add_parser(name, help=mod.HELP, description=mod.__doc__,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(p)
        p.set_defaults(func=mod.main)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="ctmhsa",
        description="Cortico-thalamic circuits computing multihead self-attention (Brian2).")
    sub = ap.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="simulate a configuration and write a results directory")
    run.add_argument("config", nargs="?", default=None,
                     help="TOML configuration (default: the shipped small two-head pathway)")
    run.add_argument("--out", help="results directory (default: [output] dir of the config)")
    run.add_argument("--neuron", choices=["rate", "escape", "lif"], help="override the fidelity level")
    run.add_argument("--duration", type=float, help="override the simulated time (s)")
    run.add_argument("--seed", type=int, help="override the simulation seed")
    run.add_argument("--quiet", action="store_true", help="print nothing but errors")
    run.set_defaults(func=_cmd_run)

    circ = sub.add_parser("circuit", help="print the circuit a configuration describes")
    circ.add_argument("config", nargs="?", default=None)
    circ.add_argument("--json", action="store_true", help="full declarative description as JSON")
    circ.set_defaults(func=_cmd_circuit)

    figs = sub.add_parser("figures", help="run the shipped small simulations (sims.figure_data), then "
                                          "draw every figure from their files (figures.make)")
    figs.add_argument("--out", default="figures_out", help="output directory (default figures_out)")
    figs.add_argument("--data", default=None, help="data directory (default OUT/data; resumable)")
    figs.add_argument("--gallery", default=None, help="also copy the PNGs here (e.g. figures/gallery)")
    figs.add_argument("--quick", action="store_true", help="very short windows (smoke test)")
    figs.set_defaults(func=_cmd_figures)

    _add_benchmarks(sub)
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, TypeError, NotImplementedError) as exc:
        print(f"ctmhsa: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
