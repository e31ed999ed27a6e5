"""``ctmhsa bench speed``: build, compile and simulation speed per device, and the overhead of our
construction against a hand-written Brian2 network of the same size.

For each n (``--sizes``; d = ``--d``, H = ``--H``) and device (``--devices``) one repetition runs
in a fresh process (so peak memory belongs to it alone) and simulates the escape level for
``--duration`` s after a 0.1 s warm-up. Reported: build s, compile s, simulated wall s per
biological second, synaptic events per wall second (spikes x out-degree, counted from the window
spike counts and scaled to the whole run), peak RSS, neurons, synapses. Medians of ``--repeats``.

The *hand-written* network has the same populations (sizes), the same connectivity (the same
pre/post index arrays) and the same spike load: every cell fires as an escape (Bernoulli) cell
at the rate it had in the circuit run, and every spike increments an exponential synaptic
current of its targets, one per projection — written directly in Brian2 without the circuit
description, the encoder or the cell-model registry. The ratio ours / hand-written is therefore
the cost of everything our cells compute beyond spiking and synaptic transmission (dendritic
compartments, phi, shunting, window integrals) plus the cost of our construction layers.
"""

from __future__ import annotations

import os
import resource
import tempfile
import threading
import time

import brian2 as b2
import numpy as np

from ctmhsa.circuits.builders import pathway
from ctmhsa.devices.cuda import network_flags
from ctmhsa.devices.registry import compiled_devices, get_device
from ctmhsa.circuits.fold import fold_plan, simulated_out_degree
from ctmhsa.devices.standalone import project_dir, standalone_device
from ctmhsa.neurons.backend import configure_brian2, run_network
from ctmhsa.sims import simulate_mhsa
from ctmhsa.sims.io import atomic_write_json, versions
from ctmhsa.sims.progress import progress

from .common import add_out_argument, count, fresh_process, one_shot_main, peak_rss_mb, square_problem

__all__ = ["HELP", "add_arguments", "run_once", "main"]

MODULE = "ctmhsa.sims.benchmarks.speed"     # run as ``python -m MODULE --one JSON`` per repetition
HELP = ("escape level per size, device and folding: build, compile, s per biological s, synaptic "
        "events/s, peak memory, and the overhead against a hand-written Brian2 network")
WARMUP = 0.1


def add_arguments(parser) -> None:
    parser.add_argument("--sizes", nargs="+", type=count, default=[8, 16, 33], help="values of n (default 8 16 33)")
    parser.add_argument("--d", type=count, default=33, help="dk = dv = de (default 33)")
    parser.add_argument("--H", type=count, default=1, help="heads (default 1)")
    parser.add_argument("--duration", type=float, default=1.0, help="simulated time after the warm-up, s (default 1)")
    parser.add_argument("--repeats", type=count, default=3, help="repetitions, each in a fresh process (default 3)")
    parser.add_argument("--devices", nargs="+", default=["runtime", "cpp_standalone"],
                        choices=["runtime", *compiled_devices()],
                        help="Brian2 devices (default runtime cpp_standalone; cuda_standalone needs "
                             "brian2cuda and an NVIDIA GPU, see docs/gpu.md)")
    parser.add_argument("--threads", type=int, default=None,
                        help="OpenMP threads of the standalone device, both networks (default: all cores)")
    parser.add_argument("--fold", nargs="+", choices=["on", "off"], default=None,
                        help="run with folded compartments (on, default), without, or both")
    add_out_argument(parser, "bench_results/speed.json")


def _out_degree(circuit, plan=None) -> dict:
    """Out-degree of every cell: in the description, or (``plan``, see
    :func:`ctmhsa.circuits.fold.fold_plan`) in the network Brian2 simulates."""
    deg = {p: np.zeros(pop.N) for p, pop in circuit.populations.items()}
    for proj in circuit.projections.values():
        deg[proj.source] += simulated_out_degree(circuit, proj, plan or {})
    return deg


class _TreeMemory:
    """Peak of the summed resident memory of this process and all its descendants (the
    standalone binary runs as a child while this process holds its own arrays), sampled every
    ``interval`` s from ``/proc`` (Linux; elsewhere ``peak_mb`` stays NaN)."""

    def __init__(self, interval: float = 0.02):
        self.interval, self.peak_mb = interval, float("nan")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _tree_kb(root: int) -> int:
        children: dict[int, list[int]] = {}
        rss: dict[int, int] = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/status") as f:
                    fields = dict(line.split(":", 1) for line in f if ":" in line)
                children.setdefault(int(fields["PPid"]), []).append(int(d))
                rss[int(d)] = int(fields.get("VmRSS", "0 kB").split()[0])
            except (OSError, KeyError, ValueError):
                continue
        total, todo = 0, [root]
        while todo:
            pid = todo.pop()
            total += rss.get(pid, 0)
            todo.extend(children.get(pid, []))
        return total

    def _run(self):
        while not self._stop.is_set():
            kb = self._tree_kb(os.getpid())
            self.peak_mb = kb / 1024 if np.isnan(self.peak_mb) else max(self.peak_mb, kb / 1024)
            self._stop.wait(self.interval)

    def __enter__(self):
        if os.path.isdir("/proc/self"):
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


def run_once(n: int, d: int, H: int, duration: float, device: str, threads: int, kind: str,
             fold: bool = True, dt: float | None = None) -> dict:
    """One repetition in this process (``kind``: ``"ctmhsa"`` or ``"handwritten"``; ``fold``:
    ctmhsa with folded compartments, see :mod:`ctmhsa.circuits.fold`; ``dt``: the hand-written
    network's step, s — the one the ctmhsa run reported)."""
    x = square_problem(n, d, H)
    circuit = pathway(n, d, d, d, H=H)
    deg = _out_degree(circuit)
    plan = fold_plan(circuit, "escape") if kind == "ctmhsa" and fold else {}
    sim_deg = _out_degree(circuit, plan)
    with _TreeMemory() as mem:
        if kind == "ctmhsa":
            res = simulate_mhsa(x["X"], x["WQ"], x["WK"], x["WV"], x["WO"], neuron="escape",
                                duration=duration, warmup=WARMUP, seed=0, device=device, threads=threads,
                                codegen="cython", fold=fold)
            rates = {p: np.nan_to_num(np.asarray(res.rates[p], float)).ravel() for p in circuit.populations}
            t = dict(build=res.timings["build"], compile=res.timings["compile"], run=res.timings["run"])
            dt = res.config["dt"]
        else:
            if dt is None:
                raise ValueError("dt: the hand-written network needs the step of the ctmhsa run")
            with np.load(os.environ["CTMHSA_BENCH_RATES"]) as f:
                rates = {p: np.asarray(f[p], float) for p in f.files}
            t = _handwritten(circuit, rates, duration + WARMUP, device, threads, dt)
    events_per_bio_s = float(sum(np.dot(rates[p], deg[p]) for p in circuit.populations))
    processed_per_bio_s = float(sum(np.dot(rates[p], sim_deg[p]) for p in circuit.populations))
    out = dict(n=n, d=d, H=H, device=device, threads=threads, kind=kind, duration=duration, dt=dt,
               fold=bool(fold) if kind == "ctmhsa" else False,
               neurons=circuit.n_neurons(), synapses=circuit.n_synapses(),
               simulated_synapses=int(sum(d.sum() for d in sim_deg.values())),
               processed_events_per_s=processed_per_bio_s * (duration + WARMUP) / t["run"],
               build_s=t["build"], compile_s=t["compile"], run_s=t["run"],
               run_per_bio_s=t["run"] / (duration + WARMUP),
               events_per_s=events_per_bio_s * (duration + WARMUP) / t["run"],
               peak_rss_mb=peak_rss_mb(),
               # the standalone binary (and any compiler) run as child processes
               peak_child_rss_mb=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
               # this process and the binary at the same time (sampled every 20 ms)
               peak_tree_mb=mem.peak_mb)
    if kind == "ctmhsa":   # the hand-written network replays this spike load
        path = os.path.join(os.environ.get("CTMHSA_BENCH_TMP") or tempfile.gettempdir(),
                            f"rates_{n}_{device}.npz")
        np.savez(path, **rates)
        out["rates_file"] = path
    return out


def _handwritten(circuit, rates, total, device, threads, dt) -> dict:
    def build():
        t0 = time.perf_counter()
        clock = b2.Clock(dt=dt * b2.second, name="hw_clock")   # as in the circuit run
        groups = {}
        for p, pop in circuit.populations.items():
            targets = [q for q, pr in circuit.projections.items() if pr.target == p]
            eqs = "r : Hz\n" + "\n".join(f"dI_{q}/dt = -I_{q}/(5*ms) : 1" for q in targets)
            g = b2.NeuronGroup(pop.N, eqs, threshold="rand() < r*dt", method="exact", name=f"hw_{p}",
                               clock=clock)
            groups[p] = g
        syn = {}   # projection -> (Synapses, number of synapses)
        for q, pr in circuit.projections.items():
            S = b2.Synapses(groups[pr.source], groups[pr.target], "w : 1 (constant)",
                            on_pre=f"I_{q}_post += w", name=f"hw_{q}", clock=clock)
            i, j = circuit.pairs(pr)
            S.connect(i=i.astype(np.int32), j=j.astype(np.int32))
            syn[q] = (S, len(i))
        return groups, syn, time.perf_counter() - t0

    if device == "runtime":
        configure_brian2("cython")
        groups, syn, t_build = build()
        for p, g in groups.items():
            g.r_ = rates[p]
        for S, _ in syn.values():
            S.w_ = 0.1
        net = b2.Network(*groups.values(), *(S for S, _ in syn.values()))
        # run as the circuit's runs are (run_network: no full garbage collection per run), so
        # that the ratio compares the networks, not Brian2's collection
        t0 = time.perf_counter()
        run_network(net, 0 * b2.second)
        t_compile = time.perf_counter() - t0
        t0 = time.perf_counter()
        run_network(net, total * b2.second)
        return dict(build=t_build, compile=t_compile, run=time.perf_counter() - t0)
    where = project_dir(f"handwritten_{device}_{circuit.n_neurons()}_{threads}_{total}_{dt}")
    with standalone_device(where, threads, device) as dev:
        groups, syn, t_build = build()
        args = {g.r: rates[p] * b2.Hz for p, g in groups.items()}
        args.update({S.w: np.full(count, 0.1) for S, count in syn.values()})
        net = b2.Network(*groups.values(), *(S for S, _ in syn.values()))
        net.run(total * b2.second)
        t0 = time.perf_counter()
        with network_flags(b2.get_device(), net):
            dev.build(directory=where, compile=True, run=False, clean=False, with_output=False)
        t_compile = time.perf_counter() - t0
        t0 = time.perf_counter()
        dev.run(directory=where, with_output=False, run_args=args)
        t_run = time.perf_counter() - t0
    return dict(build=t_build, compile=t_compile, run=t_run)


KEYS = ("build_s", "compile_s", "run_s", "run_per_bio_s", "events_per_s", "processed_events_per_s",
        "peak_rss_mb", "peak_child_rss_mb", "peak_tree_mb")


def _repeat(spec: dict, repeats: int, env_extra: dict, label: str, bar=None) -> dict:
    reps = []
    for r in range(repeats):
        if bar is not None:
            bar.set_postfix_str(label)
        rep = fresh_process(MODULE, spec, env_extra)
        reps.append(rep)
        if bar is not None:
            bar.update()
        print(f"  {label} {r + 1}/{repeats}: run {rep['run_s']:.2f} s, compile {rep['compile_s']:.1f} s",
              flush=True)
    med = {k: float(np.median([x[k] for x in reps])) for k in KEYS}
    med["repetitions"] = reps
    return med


def main(args) -> int:
    if args.repeats < 1:
        raise ValueError(f"--repeats: expected >= 1, got {args.repeats}")
    folds = [f == "on" for f in args.fold or ["on"]]
    threads = os.cpu_count() if args.threads is None else args.threads
    tmp = tempfile.mkdtemp(prefix="ctmhsa-bench-")
    rows = []
    bar = progress(total=len(args.sizes) * len(args.devices) * (len(folds) + 1) * args.repeats,
                   desc="bench speed", unit="rep")
    for n in args.sizes:
        for device in args.devices:
            th = threads if device != "runtime" and get_device(device).threads else 0
            spec = dict(n=n, d=args.d, H=args.H, duration=args.duration, device=device, threads=th)
            ours = {}
            for fold in folds:
                ours[fold] = _repeat(dict(spec, kind="ctmhsa", fold=fold), args.repeats,
                                     {"CTMHSA_BENCH_TMP": tmp}, f"n={n} {device} ctmhsa fold={fold}", bar)
            first = ours[folds[0]]["repetitions"][0]   # the same spikes either way
            hand = _repeat(dict(spec, kind="handwritten", dt=first["dt"]), args.repeats,
                           {"CTMHSA_BENCH_RATES": first["rates_file"]},
                           f"n={n} {device} hand-written", bar)
            for fold in folds:
                r0 = ours[fold]["repetitions"][0]
                rows.append(dict(n=n, d=args.d, H=args.H, device=device, threads=th, fold=fold,
                                 neurons=r0["neurons"], synapses=r0["synapses"],
                                 simulated_synapses=r0["simulated_synapses"], median=ours[fold],
                                 handwritten=hand, overhead=ours[fold]["run_s"] / hand["run_s"]))
            atomic_write_json(args.out, dict(benchmark="speed", level="escape", duration=args.duration,
                                             repeats=args.repeats, rows=rows, versions=versions(),
                                             cpus=os.cpu_count()))
    bar.close()
    print(f"\nescape level, d={args.d}, H={args.H}, {WARMUP}+{args.duration} s simulated, median of "
          f"{args.repeats} fresh processes (hand-written: same populations, connectivity and spikes, "
          f"unfolded); events = spikes x out-degree of the circuit, processed = of the simulated network")
    print(f"  {'n':>3} {'device':<15} {'fold':<5} {'neurons':>8} {'synapses':>11} {'simulated':>10} "
          f"{'build s':>8} {'compile s':>9} {'s/bio s':>8} {'Mevents/s':>9} {'processed':>9} {'peak MB':>8} "
          f"{'binary MB':>9} {'sum MB':>7} "
          f"{'hand s/bio s':>12} {'ratio':>6}")
    for r in rows:
        m, h = r["median"], r["handwritten"]
        print(f"  {r['n']:>3} {r['device']:<15} {'on' if r['fold'] else 'off':<5} {r['neurons']:>8,} "
              f"{r['synapses']:>11,} {r['simulated_synapses']:>10,} {m['build_s']:>8.2f} "
              f"{m['compile_s']:>9.1f} {m['run_per_bio_s']:>8.2f} {m['events_per_s'] / 1e6:>9.1f} "
              f"{m['processed_events_per_s'] / 1e6:>9.1f} {m['peak_rss_mb']:>8.0f} {m['peak_child_rss_mb']:>9.0f} {m['peak_tree_mb']:>7.0f} "
              f"{h['run_per_bio_s']:>12.2f} {r['overhead']:>6.2f}")
    print(f"written {os.path.abspath(args.out)}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    one_shot_main(MODULE, run_once)
