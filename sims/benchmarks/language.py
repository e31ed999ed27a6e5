"""``ctmhsa bench language``: the shipped causal models read in spikes, one token per presentation.

Two tasks, each per level (``float``: the exact model, :func:`ctmhsa.transformer_forward`;
``rate`` and ``escape``: its circuit, :func:`ctmhsa.simulate_model`) and per presentation time
(seconds per token; the float model has none):

- *recall* (``ctmhsa.load_model("recall")``, :mod:`ctmhsa.sims.recall`): for each number of
  facts in ``--pairs`` (as many queries), ``--sequences`` held-out sequences (seed ``--seed``),
  each one circuit run; the recall accuracy over their queries, the float model's on the same
  sequences, the logits' NRMSE against the float logits (pooled over the sequences), neurons and
  wall time per token. The circuit is built for recall sequences of another seed
  (:data:`RECALL_CALIBRATION`), never the evaluated ones.
- *characters* (``ctmhsa.load_model("shakespeare")``, :mod:`ctmhsa.sims.language`): ``--windows``
  held-out windows of ``--length`` characters of the validation play
  (:func:`~ctmhsa.sims.language.validation_windows`, seed ``--seed``), each one run; bits per
  character of the next characters from the circuit's logits, the float model's on the same
  windows, their ratio (``100 (circuit / float - 1)`` %), top-1 agreement with the float model,
  the logits' NRMSE, neurons and wall time per token. The circuit is built for random strings of
  the vocabulary (:func:`ctmhsa.sims.generate.vocabulary_calibration`).

A sequence the circuit refuses before building (a token outside its operating range,
:class:`ctmhsa.mapping.operating.OperatingRangeError`) is listed under its row's ``refused`` and
left out of that row and its float comparison; the other sequences run on.

The cells are a causal model's defaults (:data:`ctmhsa.sims.model.CAUSAL_PARAMS`; ``--cells brief``:
:data:`ctmhsa.sims.model.BRIEF_PARAMS`, 2.5 ms, with the step :func:`ctmhsa.sims.model.causal_cells`
gives), the decoding
window :func:`ctmhsa.sims.model.causal_lag`'s, the copies per value ``--P`` (default
:data:`ctmhsa.sims.model.MODEL_COPIES` at the escape level, one at the rate level). Prints a table
and writes JSON; the command line then draws the figure from the JSON
(:func:`ctmhsa.figures.language.draw`).
"""

from __future__ import annotations

import os
import time

import numpy as np

from ctmhsa.neurons.firing import FIRING_MODES, get_firing
from ctmhsa.neurons.levels import get_level
from ctmhsa.sims.io import versions
from ctmhsa.sims.progress import progress

from .common import add_out_argument, count, finish, warnings_into

FIGURE = "ctmhsa.figures.language"
"""The module whose ``draw(json_path)`` the command line calls after the run."""

__all__ = ["HELP", "LEVELS", "DEFAULTS", "QUICK", "RECALL_CALIBRATION", "AUTO_COMPILED_CHARACTERS", "FIGURE",
           "add_arguments", "settings", "language_device",
           "recall_row", "character_row", "main"]

HELP = ("the causal models' circuits: recall accuracy and Shakespeare bits per character vs level and "
        "presentation time")

LEVELS = ("float", "rate", "escape")

DEFAULTS = dict(presentations=[0.1, 0.2, 0.5], pairs=[2, 4, 8], sequences=2, windows=1, length=32)
"""The flags' values where not given: all three levels took 9 minutes on two cores with Brian2's
code cached, 17 minutes compiling it first (one thread, ``OMP_NUM_THREADS=1``)."""

QUICK = dict(presentations=[0.2], pairs=[2], sequences=1, windows=1, length=3)
"""``--quick``'s values of the flags not given (a smoke test)."""

CODEGEN = "cython"
"""The runtime device's code target where ``--codegen`` is not given: the recall circuit at the
escape level ran 6x faster than with numpy, which ``auto`` picks for its size."""

AUTO_COMPILED_CHARACTERS = 400
"""``--device auto`` (the default) runs the character model at the escape level on ``cpp_standalone``
for windows of this many characters or more (each window is one run), where a C++ compiler is
found; everything else on the runtime device. Measured (version 0.15; escape, Poisson cells, one
thread, 0.2 s per token, P = 4, seed 1, load 0.8-1.7; the same spikes on both devices, as
docs/design.md states for escape cells without OpenMP; ``docs/measured/language_device_*.json``):
a window of 32 characters ran 26.5 s on the runtime device (Cython, 1.9 s to load its modules)
and 12.7 s compiled (0.2 s to prepare the cached project), after 146 s of compiling the project
the first time: 0.43 s less per character, so a window pays the first compilation back from
about 340 characters on. A row of two recall sequences (4 and 8 tokens each) took 3.3-3.8 s on
the runtime device and 0.8-0.9 s compiled, but each doubling of a stream's length compiles its
own project (60 s, :func:`ctmhsa.devices.standalone.stream_rows`), which short recall runs do
not pay back: recall stays on the runtime device, as does the rate level (not measured
compiled)."""

RECALL_CALIBRATION = dict(n=8, pairs=8, seed=12345)
"""The recall sequences the circuit is built for (:func:`ctmhsa.sims.recall.recall_sequences`; a
seed no evaluated sequence uses: ``--seed`` 12345 is refused)."""


def add_arguments(parser) -> None:
    parser.add_argument("--levels", nargs="+", choices=LEVELS, default=list(LEVELS),
                        help="float (the exact model), rate, escape (default all three)")
    parser.add_argument("--presentations", type=float, nargs="+", default=None,
                        help=f"seconds per token at the rate and escape levels (default {_flag('presentations')})")
    parser.add_argument("--pairs", type=count, nargs="+", default=None,
                        help=f"facts per recall sequence, as many queries; 1-8 (default {_flag('pairs')})")
    parser.add_argument("--sequences", type=count, default=None,
                        help=f"recall sequences per number of pairs (default {_flag('sequences')})")
    parser.add_argument("--windows", type=count, default=None,
                        help=f"held-out windows of the validation play (default {_flag('windows')})")
    parser.add_argument("--length", type=count, default=None,
                        help=f"characters per window (default {_flag('length')})")
    parser.add_argument("--P", type=count, default=None,
                        help="copies per value at the escape level (default simulate_model's, 4; the rate level: 1)")
    parser.add_argument("--firing", default="poisson", choices=list(FIRING_MODES),
                        help="how the escape level's cells fire (default poisson: escape noise; population: "
                             "each value's copies in turn, docs/timescale.md)")
    parser.add_argument("--cells", default=None, choices=["causal", "brief"],
                        help="the circuit's cells (default causal: 5 ms, ctmhsa.sims.model.CAUSAL_PARAMS; brief: "
                             "2.5 ms, BRIEF_PARAMS, with a 0.5 ms step at the escape level)")
    parser.add_argument("--seed", type=int, default=1,
                        help="seed of the held-out sequences and windows, and of the simulations (default 1)")
    parser.add_argument("--codegen", default=None, choices=["auto", "numpy", "cython"],
                        help=f"Brian2 target of the runtime device (default {CODEGEN}: the recall circuit at the "
                             "escape level ran 6x faster than with numpy, which auto picks for its size)")
    parser.add_argument("--device", default="auto", choices=["auto", "runtime", "cpp_standalone"],
                        help="Brian2 device of the rate and escape levels (default auto: "
                             "ctmhsa.sims.benchmarks.language.language_device)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: " + ", ".join(f"--{k} {_flag(k, QUICK)}" for k in QUICK) + " unless given")
    parser.add_argument("--no-figure", action="store_true", help="do not draw the figure")
    add_out_argument(parser, "bench_results/language.json")


def language_device(device: str, task: str = "recall", level: str = "escape", length: int = 0) -> str:
    """The device of one task's circuit runs: ``device`` itself, or for ``"auto"``
    ``cpp_standalone`` for the character model at the escape level on windows of ``length``
    characters from :data:`AUTO_COMPILED_CHARACTERS` on, where a C++ compiler is found, else
    ``runtime``."""
    from ctmhsa.devices.registry import compiler_found

    if device != "auto":
        return device
    compiled = task == "characters" and get_level(level).escape and length >= AUTO_COMPILED_CHARACTERS
    return "cpp_standalone" if compiled and compiler_found() else "runtime"


def _flag(name: str, values: dict = DEFAULTS) -> str:
    v = values[name]
    return " ".join(f"{x:g}" for x in v) if isinstance(v, list) else f"{v:g}"


def settings(args) -> dict:
    """The run's settings: each flag given, else ``--quick``'s or the default value; checked
    before any network is built.

    Raises
    ------
    ValueError
        Naming the flag: a presentation below a level's minimum (of the deeper model), more pairs
        than keys, the calibration's seed, a flag its levels do not use. (:func:`main` draws the
        windows next, before any network: a ``--length`` beyond the validation play is refused there.)
    """
    from ctmhsa.maths.model import load_model
    from ctmhsa.sims.model import CAUSAL_CELLS
    from ctmhsa.sims.options import CircuitOptions, min_presentation
    from ctmhsa.sims.recall import KEYS

    base = QUICK if args.quick else DEFAULTS
    s = {k: base[k] if getattr(args, k) is None else getattr(args, k) for k in DEFAULTS}
    s["levels"] = [lv for lv in LEVELS if lv in args.levels]   # the table's order, once each
    spiking = [lv for lv in s["levels"] if lv != "float"]
    if not spiking:   # the float model has no presentation
        if args.presentations is not None:
            raise ValueError("--presentations: seconds per token at the rate and escape levels, but --levels has "
                             "neither")
        s["presentations"] = []
    if not spiking and args.cells is not None:
        raise ValueError("--cells: the circuit's cells, but --levels has no circuit (rate or escape)")
    s["cells"] = args.cells or "causal"
    depth = max(load_model(m).n_blocks for m in ("recall", "shakespeare"))
    for lv in spiking:
        low, why = min_presentation(CircuitOptions(neuron=lv, params=CAUSAL_CELLS[s["cells"]]), blocks=depth)
        bad = [p for p in s["presentations"] if not p >= low]
        if bad:
            raise ValueError(f"--presentations: at least {low:g} s at the {lv} level ({why}); got {bad}")
    bad = [p for p in s["pairs"] if p > KEYS]
    if bad:
        raise ValueError(f"--pairs: at most {KEYS} (the keys a sequence's facts use once each), got {bad}")
    if args.seed < 0:
        raise ValueError(f"--seed: expected an integer >= 0, got {args.seed}")
    if args.seed == RECALL_CALIBRATION["seed"]:
        raise ValueError(f"--seed: {args.seed} draws the calibration sequences; choose another")
    if "escape" not in spiking and args.P is not None:
        raise ValueError("--P: copies per value at the escape level, but --levels has no escape")
    if not spiking and args.device != "auto":
        raise ValueError("--device: the circuit's device, but --levels has no circuit (rate or escape)")
    from ctmhsa.devices.registry import check_device, get_device

    if args.device != "auto":
        if get_device(args.device).compiles and args.codegen is not None:
            raise ValueError(f"--codegen: the runtime device's code, but --device {args.device} compiles every run")
        try:
            check_device(args.device)   # a compiler, the device's package
        except ValueError as exc:
            raise ValueError(f"--{exc}") from None
    s["device"] = args.device
    if "escape" not in spiking and not get_firing(args.firing).poisson:
        raise ValueError("--firing: how the escape level's cells fire, but --levels has no escape")
    s["P"] = args.P
    return s


def _simulate(model, U, level: str, presentation: float, calibration, args) -> tuple:
    """One sequence through the circuit: ``(ModelResult, wall s, warnings)``."""
    from ctmhsa.sims.model import causal_cells, simulate_model

    spiking = get_level(level).spiking
    opts = {} if args.P is None or not spiking else {"P": args.P}
    opts["device"] = language_device(getattr(args, "device", "auto"), "characters" if model.vocab else "recall",
                                     level, U.shape[0])   # one window (sequence) per run
    opts.update(causal_cells(args.cells or "causal", level))
    if spiking and not get_firing(args.firing).poisson:
        opts["firing"] = args.firing
    record: list = []
    t0 = time.perf_counter()
    with warnings_into(record):
        res = simulate_model(model, U, neuron=level, presentation=presentation, calibration=calibration,
                             seed=args.seed, codegen=getattr(args, "codegen", None) or CODEGEN, **opts)
    return res, time.perf_counter() - t0, record


def _run(model, inputs, level, presentation, calibration, args) -> dict:
    """Every sequence of ``inputs`` (n, T, p) at one level and presentation: the logits (n, T,
    classes), the float logits, every cell's spikes per token (mean over the sequences; spiking
    levels), neurons, wall time and the warnings."""
    from ctmhsa.maths.transformer import transformer_forward

    if level == "float":
        t0 = time.perf_counter()
        z = np.stack([transformer_forward(U, model)["logits"] for U in inputs])
        wall = time.perf_counter() - t0
        return dict(logits=z, reference=z, spikes_per_token=None, neurons=0, synapses=0, wall_s=wall, timings=dict(run=wall),
                    warnings=[], kept=list(range(len(inputs))), refused=[])
    from ctmhsa.mapping.operating import OperatingRangeError

    runs, kept, refused = [], [], []
    for i, U in enumerate(inputs):   # a sequence the circuit refuses is listed, the others run on
        try:
            runs.append(_simulate(model, U, level, presentation, calibration, args))
            kept.append(i)
        except OperatingRangeError as exc:
            refused.append(dict(index=i, error=str(exc)))
    if not runs:
        raise OperatingRangeError(f"every sequence refused at the {level} level: {refused[-1]['error']}")
    # compile: Brian2's code, once per new shape and timing, cached on disk for later runs
    timings = {k: sum(r.timings[k] for r, _, _ in runs) for k in ("build", "compile", "compiled", "run", "decode")}
    spikes = [r.diagnostics.get("spikes_per_input") for r, _, _ in runs]   # per token, spiking levels
    return dict(logits=np.stack([r.logits for r, _, _ in runs]),
                reference=np.stack([r.reference_logits for r, _, _ in runs]),
                spikes_per_token=float(np.mean(spikes)) if None not in spikes else None,
                neurons=int(runs[0][0].config["n_neurons"]), synapses=int(runs[0][0].config["n_synapses"]),
                device=runs[0][0].config.get("device"), codegen=runs[0][0].config.get("codegen"),
                wall_s=sum(w for _, w, _ in runs), timings=timings,
                warnings=sorted({w for _, _, ws in runs for w in ws}), kept=kept, refused=refused)


def _common(out: dict, level: str, presentation, tokens: int) -> dict:
    """The columns both tasks share: level, presentation, the logits' NRMSE, neurons, wall time."""
    from ctmhsa.sims.result import stage_metrics

    m = stage_metrics(out["logits"], out["reference"])
    return dict(level=level, presentation=presentation, nrmse=m["nrmse"], r=m["r"], neurons=out["neurons"],
                device=out.get("device"), codegen=out.get("codegen"),
                tokens=tokens, wall_s=out["wall_s"], wall_per_token=out["wall_s"] / tokens, timings=out["timings"],
                run_per_token=out["timings"]["run"] / tokens, warnings=out["warnings"], refused=out["refused"])


def recall_row(model, seqs, level: str, presentation, calibration, args) -> dict:
    """Recall sequences ``seqs`` (:class:`ctmhsa.sims.recall.RecallSequences`) at one level and
    presentation (``None`` at the float level)."""
    from ctmhsa.sims.recall import recall_accuracy

    out = _run(model, seqs.inputs, level, presentation, calibration, args)
    k = out["kept"]
    row = dict(pairs=seqs.pairs, queries=seqs.queries, sequences=len(k),
               accuracy=recall_accuracy(out["logits"], seqs.targets[k], seqs.mask[k]),
               float_accuracy=recall_accuracy(out["reference"], seqs.targets[k], seqs.mask[k]))
    return {**_common(out, level, presentation, len(k) * seqs.T), **row}


def character_row(model, windows, level: str, presentation, calibration, args) -> dict:
    """Character windows ``windows`` (n, length + 1) of class ids at one level and presentation:
    the logits at ``t`` predict character ``t + 1``."""
    from ctmhsa.sims.language import bits_per_char, one_hot

    inputs = np.stack([one_hot(w[:-1], len(model.vocab)) for w in windows])
    out = _run(model, inputs, level, presentation, calibration, args)
    targets = windows[out["kept"], 1:]
    bpc, ref = bits_per_char(out["logits"], targets), bits_per_char(out["reference"], targets)
    top = out["logits"].argmax(-1)
    # each kept window's own BPC and the float model's (a pooled ratio hides which window errs)
    per_window = [dict(index=int(k), bpc=bits_per_char(z, t), float_bpc=bits_per_char(zr, t))
                  for k, z, zr, t in zip(out["kept"], out["logits"], out["reference"], targets)]
    row = dict(windows=len(targets), length=int(targets.shape[1]), bpc=bpc, float_bpc=ref,
               ratio_pct=100.0 * (bpc / ref - 1.0), agreement=float(np.mean(top == out["reference"].argmax(-1))),
               top1=float(np.mean(top == targets)), per_window=per_window)
    return {**_common(out, level, presentation, targets.size), **row}


def main(args) -> int:
    from ctmhsa.maths.model import load_model
    from ctmhsa.sims.generate import vocabulary_calibration
    from ctmhsa.sims.language import validation_windows
    from ctmhsa.sims.recall import recall_sequences

    s = settings(args)
    recall, chars = load_model("recall"), load_model("shakespeare")
    seqs = [recall_sequences(s["sequences"], pairs=k, seed=args.seed) for k in s["pairs"]]
    windows = validation_windows(s["windows"], s["length"], seed=args.seed)   # refuses a --length too long
    cal_recall = recall_sequences(**RECALL_CALIBRATION).inputs
    cal_chars = vocabulary_calibration(chars)
    points = [(lv, p) for lv in s["levels"] for p in ([None] if lv == "float" else s["presentations"])]
    doc = dict(benchmark="language", quick=bool(args.quick), levels=s["levels"], presentations=s["presentations"],
               pairs=s["pairs"], sequences=s["sequences"], windows=s["windows"], length=s["length"], P=s["P"],
               firing=args.firing, cells=s["cells"],
               seed=args.seed, codegen=args.codegen or CODEGEN, device=s["device"], recall_values=int(recall.readout_W.shape[0]),
               vocabulary=len(chars.vocab),
               recall_calibration=dict(RECALL_CALIBRATION,
                                       what="ctmhsa.sims.recall.recall_sequences(n, pairs, seed=seed)"),
               character_calibration="ctmhsa.sims.generate.vocabulary_calibration(model)",
               recall=[], characters=[], versions=versions(), cpus=os.cpu_count())
    t_all = time.perf_counter()
    jobs = [("recall", lv, p, q) for lv, p in points for q in seqs] + [("characters", lv, p, None) for lv, p in points]
    for task, lv, p, q in progress(jobs, desc="bench language", unit="point"):
        if task == "recall":
            doc["recall"].append(recall_row(recall, q, lv, p, cal_recall, args))
        else:
            doc["characters"].append(character_row(chars, windows, lv, p, cal_chars, args))
    doc["wall_s"] = time.perf_counter() - t_all
    print()
    _print(doc)
    finish(doc, doc["recall"] + doc["characters"], args.out, "points")
    return 0   # the figure is drawn from the JSON by ctmhsa.figures.language (FIGURE)


def _where(r: dict) -> str:
    return f"{r['level']:<7}{'—' if r['presentation'] is None else format(r['presentation'], 'g'):>6}"


def _print(doc: dict) -> None:
    P = "simulate_model's default" if doc["P"] is None else doc["P"]
    devices = sorted({r["device"] for r in doc["recall"] + doc["characters"] if r.get("device")})
    print(f"recall: {doc['sequences']} held-out sequence(s) per point (seed {doc['seed']}), queries = pairs; "
          f"escape P = {P}; devices: {', '.join(devices) or '-'} (--device {doc['device']})")
    print(f"{'level':<7}{'s/tok':>6}{'pairs':>6}{'accuracy':>9}{'float':>7}{'NRMSE':>7}{'neurons':>9}{'wall/tok':>10}"
          f"{'run/tok':>9}")
    for r in doc["recall"]:
        print(f"{_where(r)}{r['pairs']:>6}{r['accuracy']:>9.3f}{r['float_accuracy']:>7.3f}{r['nrmse']:>7.3f}"
              f"{r['neurons']:>9,}{r['wall_per_token']:>9.2f}s{r['run_per_token']:>8.2f}s")
    print(f"\ncharacters: {doc['windows']} held-out window(s) of {doc['length']} characters of the validation play "
          f"(seed {doc['seed']}); {doc.get('cells', 'causal')} cells")
    print(f"{'level':<7}{'s/tok':>6}{'BPC':>7}{'float':>7}{'ratio':>8}{'agree':>7}{'top-1':>7}{'NRMSE':>7}"
          f"{'neurons':>9}{'wall/tok':>10}{'run/tok':>9}")
    for r in doc["characters"]:
        print(f"{_where(r)}{r['bpc']:>7.3f}{r['float_bpc']:>7.3f}{r['ratio_pct']:>+7.1f}%{r['agreement']:>7.3f}"
              f"{r['top1']:>7.3f}{r['nrmse']:>7.3f}{r['neurons']:>9,}{r['wall_per_token']:>9.2f}s"
              f"{r['run_per_token']:>8.2f}s")
    print("wall/tok: the whole call per token (Brian2's compilation included, cached on disk after a first run); "
          "run/tok: the network's run")
    for task in ("recall", "characters"):
        for r in doc[task]:
            for ref in r.get("refused", []):
                print(f"refused ({task}, {_where(r).strip()}), sequence {ref['index']}, left out of that row: "
                      f"{ref['error']}")
