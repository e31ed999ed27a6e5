"""Command line: ``ctmhsa run``, ``ctmhsa circuit``, ``ctmhsa bench``."""

from __future__ import annotations

import argparse
import os
import sys

__all__ = ["main"]


def _cmd_run(args) -> int:
    from .config import load_config, make_inputs
    from .io import write_result
    from .simulate import simulate_mhsa

    cfg = load_config(args.config)
    sim = cfg["simulation"]
    for key in ("neuron", "duration", "seed"):
        if getattr(args, key) is not None:
            sim[key] = getattr(args, key)
    base = os.path.dirname(cfg["_source"])
    inputs = make_inputs(cfg["problem"], base_dir=base)
    p = cfg["problem"]
    if not args.quiet:
        print(f"ctmhsa run: {cfg['_source']}")
        print(f"  n={p['n']} m={p['m']} H={p['H']} dk={p['dk']} dv={p['dv']} de={p['de']} "
              f"neuron={sim['neuron']} phi={sim['phi']} duration={sim['duration']} s")
    res = simulate_mhsa(
        inputs["X"], inputs["WQ"], inputs["WK"], inputs["WV"], inputs["WO"], Y=inputs["Y"],
        phi=sim["phi"], neuron=sim["neuron"], duration=sim["duration"], seed=sim["seed"],
        causal=p["causal"], normalize=p["normalize"], dt=sim["dt"], codegen=sim["codegen"], warmup=sim["warmup"],
        P=sim["P"], n_inh=sim["n_inh"], signed=sim["signed"], circuit=sim["circuit"], law=sim["law"],
        fold=sim["fold"], device=sim["device"],
        threads=sim["threads"], report=None if args.quiet else "text",
    )
    out = args.out or cfg["output"]["dir"]
    resolved = {k: v for k, v in cfg.items() if not k.startswith("_")}
    resolved["simulation"] = dict(sim, dt=res.config["dt"], codegen=res.config["codegen"],
                                  warmup=res.config["warmup"])
    path = write_result(res, out, config=resolved)
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
    import json

    from circuits.builders import pathway

    from .config import load_config

    cfg = load_config(args.config)
    p, sim = cfg["problem"], cfg["simulation"]
    c = pathway(p["n"], p["dk"], p["dv"], p["de"], H=p["H"], m=p["m"], cross=p["cross"],
                causal=p["causal"], normalize=p["normalize"], P=sim["P"], n_inh=sim["n_inh"],
                signed=sim["signed"], circuit=sim["circuit"])
    print(json.dumps(c.to_dict(), indent=2) if args.json else c.summary())
    return 0


def _cmd_figures(args) -> int:
    import time

    from figures.make import make_figures

    t0 = time.perf_counter()
    made = make_figures(args.out, args.data, quick=args.quick, gallery=args.gallery)
    for p in made:
        print(f"  {p}")
    print(f"{len(made)} figures (PNG + PDF + caption) in {os.path.abspath(args.out)}, "
          f"{time.perf_counter() - t0:.0f} s")
    return 0


def _cmd_bench(args) -> int:
    if args.which == "accuracy":
        from .bench_accuracy import main as accuracy_main

        args.out = args.out or "bench_results/accuracy.json"
        return accuracy_main(args)
    if args.which == "cells":
        from .bench_cells import main as cells_main

        return cells_main(args)
    if args.which == "heads":
        from .bench_heads import main as heads_main

        args.out = args.out or "bench_results/heads.json"
        return heads_main(args)
    if args.which == "circuits":
        from .bench_circuits import main as circuits_main

        args.out = args.out or "bench_results/circuits.json"
        return circuits_main(args)
    if args.which == "robustness":
        from .bench_robustness import main as robustness_main

        args.out = args.out or "bench_results/robustness.json"
        return robustness_main(args)
    if args.which == "speed":
        from .bench_speed import main as speed_main

        args.out = args.out or "bench_results/speed.json"
        return speed_main(args)
    from .bench import main as bench_main

    args.out = args.out or "bench_results/rate.json"
    return bench_main(args)


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

    figs = sub.add_parser("figures", help="run the shipped small simulations and draw every figure")
    figs.add_argument("--out", default="figures_out", help="output directory (default figures_out)")
    figs.add_argument("--data", default=None, help="data directory (default OUT/data; resumable)")
    figs.add_argument("--gallery", default=None, help="also copy the PNGs here (e.g. figures/gallery)")
    figs.add_argument("--quick", action="store_true", help="very short windows (smoke test)")
    figs.set_defaults(func=_cmd_figures)

    bench = sub.add_parser("bench", help="benchmarks that print a table and write JSON")
    bench.add_argument("which", choices=["rate", "cells", "accuracy", "speed", "heads", "circuits", "robustness"],
                       help="rate: build and run a head at the rate level; cells: products, "
                            "normalisation and fig. 2 in silico at the spiking levels; accuracy: "
                            "spiking attention vs the reference over time and read-out copies; "
                            "circuits: quadratic vs linear key-value-memory circuit vs n; "
                            "robustness: the rate level on random untuned instances")
    bench.add_argument("--n", type=int, default=33, help="tokens = macrocolumns (default 33)")
    bench.add_argument("--d", type=int, default=33, help="dk = dv = de (default 33)")
    bench.add_argument("--H", type=int, default=1, help="heads (default 1)")
    bench.add_argument("--duration", type=float, default=1.0, help="simulated time, s (default 1)")
    bench.add_argument("--repeats", type=int, default=3, help="repetitions, each in a fresh process")
    bench.add_argument("--codegen", default="auto", choices=["auto", "numpy", "cython"],
                       help="Brian2 target (auto: Cython from 200k synapses)")
    bench.add_argument("--out", default=None,
                       help="JSON output file (rate: bench_results/rate.json, accuracy: "
                            "bench_results/accuracy.json)")
    bench.add_argument("--out-dir", default="bench_results", help="output directory (cells)")
    bench.add_argument("--levels", nargs="+", default=["escape", "lif"], choices=["escape", "lif"])
    bench.add_argument("--skip-fig2", action="store_true", help="cells: skip the fig. 2 data")
    bench.add_argument("--cases", nargs="+", default=["multihead", "causal", "cross", "barrel"],
                       help="accuracy: cases (barrel, multihead, causal, cross, unnormalised, skip, "
                            "linear, linear_cross, linear_barrel)")
    bench.add_argument("--times", nargs="+", type=float, default=[1.0, 2.0, 5.0, 10.0],
                       help="accuracy: measurement windows (s), from one run each")
    bench.add_argument("--P", nargs="+", type=int, default=[1, 4, 10],
                       help="accuracy: copies of L5 PT and nucleus 2 per dimension")
    bench.add_argument("--sizes", nargs="+", type=int, default=[8, 16, 33], help="speed, circuits: values of n")
    bench.add_argument("--devices", nargs="+", default=["runtime", "cpp_standalone"],
                       choices=["runtime", "cpp_standalone"], help="speed: Brian2 devices")
    bench.add_argument("--threads", type=int, default=None,
                       help="speed: OpenMP threads of the standalone device (default: all cores)")
    bench.add_argument("--copies", default="readout", choices=["readout", "all"],
                       help="accuracy: P copies of the read-out (L5 PT, nucleus 2) or of every "
                            "population but the interneurons")
    bench.add_argument("--fold", nargs="+", choices=["on", "off"], default=None,
                       help="speed: run with folded compartments (on, default), without, or both")
    bench.add_argument("--scheduler", default="local",
                       help="heads: 'local' (LocalCluster), 'serial' or a dask scheduler address")
    bench.add_argument("--instances", type=int, default=500, help="robustness: random instances (default 500)")
    bench.add_argument("--seed", type=int, default=0, help="robustness: seed of the instance generator")
    bench.add_argument("--wide", action="store_true",
                       help="robustness: lift the interneurons' rate bound (tests the wiring alone)")
    bench.add_argument("--allow-slow", action="store_true", help="accuracy: also barrel at the lif level")
    bench.set_defaults(func=_cmd_bench)
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
