"""Command line: ``ctmhsa run``, ``ctmhsa circuit``, ``ctmhsa figures``, ``ctmhsa train``,
``ctmhsa digits``, ``ctmhsa experiment``, ``ctmhsa plan``, ``ctmhsa bench NAME``
(one subcommand per benchmark of :data:`ctmhsa.sims.benchmarks.BENCHMARKS`), ``ctmhsa --version``.

Every subcommand takes ``--quiet`` (no progress bars, nothing printed but errors) and
``-v``/``--verbose`` (diagnostics of the ``logging`` module: ``-v`` info, ``-vv`` debug).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import re
import signal
import sys
import threading
import time
import zipfile
from importlib import import_module, metadata

import numpy as np

from ctmhsa.devices.registry import DEVICES, get_device
from ctmhsa.mapping.operating import CircuitRangeError
from ctmhsa.maths.weights import LAYOUTS
from ctmhsa.neurons.levels import LEVELS, get_level
from ctmhsa.neurons.models import FIRING

from .benchmarks import BENCHMARKS, benchmark, run_benchmark
from .config import (DEFAULTS, SIZE_KEYS, default_config_path, make_inputs, output_dir, read_arrays, read_config,
                     resolve_config, sizes_from_files, sizes_of)
from .config import options as config_options
from .digits import AUTO_COMPILED_IMAGES, AUTO_COMPILED_IMAGES_LIF, LIF_CLASS_LATENCY, LIF_FAST_BELOW, LIF_FAST_COPIES
from .figure_data import make_data
from .io import check_output, dumps_json, estimate_result_bytes, write_result
from .options import CODEGEN, DEFAULT_PRESENTATION, RunOptions, check_applies, check_record_spikes
from .progress import set_quiet
from .result import STAGE_LABELS
from .simulate import simulate_mhsa

__all__ = ["main", "build_parser", "stage_table", "source_lines", "FIGURES_DRAWN"]

log = logging.getLogger("ctmhsa")

def _version() -> str:
    try:
        return metadata.version("ctmhsa")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown (not installed)"


def stage_table(res) -> str:
    """Each stage's error beside its spike-count noise floor (an error near its floor is noise,
    one well above it is bias)."""
    rows = [f"  {'stage':<8} {'read from':<28} {'NRMSE':>8} {'floor':>8} {'ratio':>6} {'r':>7}"]
    for name, m in res.metrics().items():
        floor = m["noise_floor"]
        ratio = f"{m['nrmse'] / floor:6.2f}" if floor > 0 else f"{'-':>6}"
        rows.append(f"  {name:<8} {STAGE_LABELS.get(name, ('', ''))[1]:<28} {m['nrmse']:8.3f} {floor:8.3f} {ratio} "
                    f"{m['r']:7.4f}")
    return "\n".join(rows)


def source_lines(origin: dict, problem: dict) -> list[str]:
    """Where a run's tokens and weights came from, as ``ctmhsa run`` prints it: the weights file with
    its layer and heads, the tokens, and what was done to the biases (``origin``: the ``info`` of
    :func:`ctmhsa.sims.config.make_inputs`; ``problem``: the resolved ``[problem]`` table)."""
    tokens = origin.get("tokens", problem.get("inputs"))
    if origin.get("weights") == "random":
        return [f"tokens and weights: random (problem.input_seed = {problem['input_seed']}, "
                f"weight_scale = {problem['weight_scale']:g})"]
    if problem.get("weights") is None:
        return [f"tokens and weights: {tokens}"]
    heads = origin["heads"]
    which = "all" if heads == list(range(origin["n_heads"])) else ", ".join(map(str, heads))
    layer = "" if origin["layer"] is None else f"layer {origin['layer']} of "
    lines = [f"weights: {layer}{origin['weights']} ({origin['layout']} layout), heads {which} of {origin['n_heads']}",
             "tokens: " + (f"random, {problem['n']} of the weights' width {origin['de']} "
                           f"(problem.input_seed = {problem['input_seed']})" if tokens == "random" else tokens)]
    if origin["folded"]:
        # the circuit computes W x; W x + b is W' x' with x' = (x, 1) and b as W's last column
        lines.append(f"biases folded into a constant coordinate: de = {origin['de']} + 1 (each token gains a last "
                     "coordinate 1 and WQ, WK, WV the biases as their last column; x̃'s last coordinate is exactly "
                     "0, its nucleus-2 cells silent)")
    elif origin["has_bias"]:
        lines.append("biases left out (problem.fold_bias = false): the circuit and its reference compute W x, "
                     "not W x + b")
    if origin["output_bias"]:
        lines.append("the output bias is left out: x̃ and its reference are the heads' sum through WO alone")
    return lines


def _abs(value, base: str | None):
    if value is None or value == "random" or os.path.isabs(value):
        return value
    return os.path.abspath(os.path.join(base or ".", value))


SIZE_FLAGS = ("n", "H", "dk", "dv", "de")
"""Sizes ``ctmhsa run`` takes as flags (``--n``, ``--H``, ...): those of the random problem."""


def _config_base(config) -> str:
    """The directory relative paths of a configuration are resolved against: the file's own
    directory, or the working directory for the shipped configurations (``sims/configs``:
    results go where the command runs, never into the installed package)."""
    if not config:
        return os.getcwd()
    here = os.path.dirname(os.path.realpath(config))
    return os.getcwd() if here == os.path.dirname(os.path.realpath(default_config_path())) else here


def _out(args, cfg: dict, base: str) -> tuple[str, str]:
    """The results directory and the setting it came from: ``--out`` (relative to the working
    directory) or ``[output] dir`` (relative to ``base``, the configuration's directory)."""
    if args.out is not None:
        return os.path.abspath(os.path.expanduser(args.out)), "--out"
    return output_dir(cfg["output"]["dir"], base), "output.dir"


def _run_config(args) -> dict:
    """The configuration of ``ctmhsa run``: the file (or the shipped default) with the command
    line's overrides, resolved; sizes that the command line's files provide are taken from them."""
    raw = read_config(args.config)
    source = os.path.abspath(args.config) if args.config else None
    base = _config_base(args.config)
    problem, circuit, run = (raw.setdefault(t, {}) for t in ("problem", "circuit", "run"))
    here = os.getcwd()
    if args.weights is not None:
        problem["weights"] = os.path.abspath(os.path.join(here, args.weights))
        for k in ("H", "dk", "dv", "de"):         # the weights decide them
            problem.pop(k, None)
        if problem.get("inputs", "random") != "random" and args.tokens is None:
            problem["inputs"] = "random"
    if args.tokens is not None:
        problem["inputs"] = os.path.abspath(os.path.join(here, args.tokens))
        for k in ("n", "m"):
            problem.pop(k, None)
    # size flags set the random problem; sizes that files provide are checked against them after
    from_files = sizes_from_files(problem.get("inputs", "random"), problem.get("weights"))
    for key in SIZE_FLAGS:
        if getattr(args, key) is not None:
            if key in from_files:
                problem.pop(key, None)
            else:
                problem[key] = getattr(args, key)
    for key in ("layer", "heads", "n_heads", "layout"):
        if getattr(args, key) is not None:
            problem[key] = getattr(args, key)
    if args.neuron is not None:
        circuit["neuron"] = args.neuron
    if args.dale:
        circuit["dale"] = True
    if args.firing is not None:
        circuit["firing"] = args.firing
    for key in ("duration", "seed", "codegen", "device", "checkpoints", "threads", "presentation"):
        if getattr(args, key) is not None:
            run[key] = getattr(args, key)
    if args.checkpoints is None and run.get("checkpoints") and (args.duration is not None or args.neuron):
        # the file's checkpoints were chosen for its own window and level: keep those that fit
        rate = circuit.get("neuron") in LEVELS and not get_level(circuit["neuron"]).spiking
        keep = [] if rate else [t for t in run["checkpoints"] if t < run.get(
            "duration", DEFAULTS["run"]["duration"])]
        if keep != list(run["checkpoints"]):
            log.info("checkpoints %s -> %s for the window and level of the command line", run["checkpoints"], keep)
        run["checkpoints"] = keep
    if args.neuron is not None and not get_level(args.neuron).spiking:
        # nor has the rate level spikes or a window to warm up for: the file's settings for its
        # spiking level are dropped (the command line's own are kept, and refused if they cannot be)
        for key, off in (("record_spikes", False), ("warmup", 0.0)):
            if run.get(key):
                log.info("run.%s = %s -> %s for the rate level of the command line", key, run[key], off)
                run[key] = off
    if args.record_spikes is not None:
        run["record_spikes"] = True if args.record_spikes == [] else args.record_spikes
    if args.no_record_spikes:
        run["record_spikes"] = False
    cfg = resolve_config(raw)
    p = cfg["problem"]
    for key in ("inputs", "weights"):     # saved with the results: absolute paths
        p[key] = _abs(p[key], base)
    cfg["_source"] = source or "the shipped default (sims/configs/default.toml)"
    cfg["_base"] = base
    cfg["_size_flags"] = {k: getattr(args, k) for k in SIZE_FLAGS if getattr(args, k) is not None and k in from_files}
    return cfg


def _check_size_flags(flags: dict, sizes: dict) -> None:
    """Size flags must agree with the sizes the inputs files give (a ``ValueError`` naming the flag)."""
    for key, want in flags.items():
        if want != sizes[key]:
            raise ValueError(f"--{key}: {want} disagrees with the inputs files, which have {key} = {sizes[key]}; "
                             f"leave --{key} out to take it from them")


def _model_inputs(args, model):
    """Tokens for ``run --model``: ``--tokens FILE.npz`` (its ``X``: (n, de) or a stream (T, n, de); raw
    inputs (n, p) where the model has an embedding) or random ones of the model's shape."""
    if args.tokens:
        X = read_arrays(args.tokens, "--tokens", ("X", "Y"))
        if "Y" in X:
            raise ValueError(f"--tokens: {args.tokens!r} holds Y (cross-attention tokens); a transformer model is "
                             "self-attention and reads X only")
        X = X["X"]
        if args.n is not None and X.ndim >= 2 and args.n != X.shape[-2]:
            raise ValueError(f"--n: {args.n} disagrees with --tokens, whose X {X.shape} has n = {X.shape[-2]}; "
                             "leave --n out to take it from the file")
        return X
    n = args.n or (model.embed_pos.shape[0] if model.embed_pos is not None else 8)
    if model.embed_pos is not None and n != model.embed_pos.shape[0]:
        raise ValueError(f"--n: the model's positional embedding has {model.embed_pos.shape[0]} tokens, got {n}")
    width = model.embed_W.shape[1] if model.embed_W is not None else model.de
    return np.random.default_rng(0 if args.seed is None else args.seed).standard_normal((n, width))


def _load_model(name):
    """:func:`ctmhsa.load_model` with its errors as a ``ValueError`` naming ``--model`` (a missing or
    unreadable file is the user's input, not a fault of the disk)."""
    from ctmhsa.sims.model import as_model

    try:
        return as_model(name)
    except (ValueError, TypeError, OSError, EOFError, zipfile.BadZipFile) as exc:
        msg = str(exc)
        msg = msg[len("model: "):] if msg.startswith("model: ") else f"{name!r}: {msg}"
        raise ValueError(f"--model: {msg}") from None


_MODEL_FLAGS = dict(device="--device", threads="--threads", checkpoints="--checkpoints", weights="--weights",
                    layer="--layer", heads="--heads", n_heads="--n-heads", layout="--layout",
                    record_spikes="--record-spikes", presentation="--presentation", duration="--duration",
                    seed="--seed", codegen="--codegen", neuron="--neuron", dale="--dale", firing="--firing",
                    P="--P", latency="--latency")
"""Option name -> flag, for the messages of ``run --model`` and ``digits``."""


def _flagged(exc: Exception, flags: dict) -> Exception:
    """``exc`` with the option its message starts with (``"presentation: ..."``) named by its flag."""
    name, sep, rest = str(exc).partition(": ")
    return type(exc)(f"{flags[name]}: {rest}") if sep and name in flags else exc


def _check_model_flags(args, model, stream: bool) -> None:
    """Refuse every flag of ``run`` that does not apply to a model (:func:`ctmhsa.sims.options.check_applies`;
    ``duration`` as a stream's where the tokens are one), and those the model file decides."""
    if args.config is not None:
        raise ValueError(f"config: {args.config!r}: a configuration file describes one attention pathway; --model "
                         "runs the model file (give the run's options as flags)")
    for key in ("H", "dk", "dv", "de"):
        if getattr(args, key) is not None:
            raise ValueError(f"--{key}: the model file decides its sizes (H={model.H}, dk={model.dk}, dv={model.dv}, "
                             f"de={model.de}); leave --{key} out")
    rs = None if args.record_spikes is None else (args.record_spikes or True)
    given = dict(device=args.device, threads=args.threads, checkpoints=args.checkpoints, weights=args.weights,
                 layer=args.layer, heads=args.heads, n_heads=args.n_heads, layout=args.layout, record_spikes=rs,
                 presentation=args.presentation, duration=args.duration)
    check_applies("model", given, _MODEL_FLAGS)
    if stream:   # a model shown a stream of sets runs for T x presentation
        check_applies("stream", dict(duration=args.duration), _MODEL_FLAGS)


def _cmd_run_model(args) -> int:
    """``ctmhsa run --model FILE``: a transformer model's circuit (:func:`ctmhsa.sims.model.simulate_model`)."""
    from .model import simulate_model

    model = _load_model(args.model)
    X = _model_inputs(args, model)
    _check_model_flags(args, model, np.ndim(X) == 3)
    out = check_output(args.out or os.path.join("results", f"model-{model.name or 'model'}"), 0, what="--out")
    args._out = out
    opts = {k: v for k, v in dict(duration=args.duration, seed=args.seed, codegen=args.codegen,
                                  presentation=args.presentation, device=args.device,
                                  threads=args.threads).items() if v is not None}
    if args.dale:
        opts["dale"] = True
    if args.firing is not None:
        opts["firing"] = args.firing
    if args.latency:
        opts["latency"] = dict(args.latency)
    if args.record_spikes is not None and not args.no_record_spikes:
        opts["record_spikes"] = args.record_spikes or True    # no names: every population
    neuron = args.neuron or "escape"
    if not args.quiet:
        print(f"ctmhsa run --model {args.model}: {model!r}")
        print(f"  tokens {X.shape}; {neuron} level")
    t0 = time.perf_counter()
    try:
        res = simulate_model(model, X, neuron=neuron, report=None if args.quiet else "progress", **opts)
    except (ValueError, TypeError) as exc:
        raise _flagged(exc, _MODEL_FLAGS) from None
    path = res.save(out)
    args._out = None    # written
    if not args.quiet:
        t = res.timings
        print(f"  {res.counts['total']:,} neurons; build {t['build']:.1f} s, {_compile_text(t)}, "
              f"run {t['run']:.1f} s, total {time.perf_counter() - t0:.1f} s")
        print("  decoded stage vs transformer_forward, per block:")
        print("  " + res.table().replace("\n", "\n  "))
        if get_level(neuron).spiking:
            print("  firing rates (Hz) and the mean's bound in vivo for the cell type (docs/physiology.md):")
            print("  " + str(res.rate_table()).replace("\n", "\n  "))
        rng = {k: v for k, v in res.diagnostics["range"].items() if v.get("silent_interneurons") or v.get("saturated")}
        if rng:
            print(f"  WARNING: cells outside their working range: {rng}")
        print(f"results in {path}")
    return 0


def _check_digits_model(model, patches: tuple, classes: int) -> None:
    """The digits task streams each 8x8 image as ``patches`` = (tokens, pixels per token) and reads
    ``classes`` classes: a ``ValueError`` naming ``--model`` for a model that takes other inputs."""
    n, p = patches
    takes = model.embed_W.shape[1] if model.embed_W is not None else model.de
    positions = model.embed_pos.shape[0] if model.embed_pos is not None else None
    reads = 0 if model.readout_W is None else int(model.readout_W.shape[0])
    if takes != p or positions not in (None, n) or reads != classes:
        has = (f"{'embedding inputs p' if model.embed_W is not None else 'de'} = {takes}"
               + (f", {positions} token positions" if positions is not None else "")
               + (f", {reads} classes" if reads else ", no read-out"))
        raise ValueError(f"--model: {model.source or model.name!r} does not take the digits: the task shows each 8x8 "
                         f"image as {n} tokens of {p} pixels (2x2 patches) and reads {classes} classes (readout.W "
                         f"({classes}, de)); the model has {has}")


def _compile_text(timings: dict) -> str:
    """The compile time of a run's ``timings``, saying when it was a first run's compilation."""
    n = int(timings.get("compiled") or 0)
    first = f" ({n} Cython modules compiled: a first run's cost, cached for later runs)" if n else ""
    return f"compile {timings['compile']:.1f} s{first}"


def _cmd_digits(args) -> int:
    """``ctmhsa digits``: the shipped vision transformer reads the held-out digits, one image per
    presentation, through one built circuit; a results directory with the figure."""
    from ctmhsa.sims.benchmarks.digits import EXAMPLES, classification_row
    from ctmhsa.mapping.blocks import MODEL_REMEDY
    from ctmhsa.mapping.operating import OperatingRangeError
    from .classify import classify
    from .digits import calibration_set, classify_options, digits_device, test_set
    from .io import atomic_write_json, results_directory

    model = _load_model(args.model)
    images, labels = test_set()
    _check_digits_model(model, images.shape[1:], int(labels.max()) + 1)
    cal = calibration_set()   # every digits circuit is built for the training images, never the test ones
    start = args.start
    if not 0 <= start < len(labels):
        raise ValueError(f"--start: expected a test image's index, 0..{len(labels) - 1}, got {start}")
    count = len(labels) - start if args.images is None else args.images
    if not 1 <= count <= len(labels) - start:
        raise ValueError(f"--images: expected 1..{len(labels) - start}{f' from --start {start}' if start else ''}, "
                         f"got {count}")
    index = np.arange(start, start + count)    # the test-set index of every image run
    skip = list(args.skip or ())
    wrong = [i for i in skip if not start <= i < start + count]
    if wrong:
        raise ValueError(f"--skip: test image {wrong[0]} is not among those run ({start}-{start + count - 1})")
    twice = sorted({i for i in skip if skip.count(i) > 1})
    if twice:
        raise ValueError(f"--skip: test image {twice[0]} named twice")
    if len(skip) == count:
        raise ValueError(f"--skip: leaves none of the {count} test images")
    index = np.setdiff1d(index, skip)
    images, labels = images[index], labels[index]
    count = len(index)
    out = check_output(args.out, 0, what="--out")
    args._out = out
    device = digits_device(args.device, count, args.threads, args.neuron)
    opts = {k: v for k, v in dict(seed=args.seed, P=args.P, codegen=args.codegen, device=device,
                                  threads=args.threads).items() if v is not None}
    if not args.quiet:
        which = f"{count} test images" + (f" ({start}-{index[-1]})" if start else "") + (
            f", {len(skip)} left out ({', '.join(map(str, sorted(skip)))})" if skip else "")
        print(f"ctmhsa digits: {model!r}\n  {which}, {args.neuron} level, {args.presentation:g} s each, on {device}")
    spiking = get_level(args.neuron).spiking
    record = ("classes",) if spiking else False
    try:
        read = classify_options(args.neuron, args.presentation, args.firing, model=model)
        if args.latency is not None:   # the class cells' delay: a spiking level's read-out
            if not get_level(args.neuron).spiking:
                raise ValueError("latency: the rate level reads each image's end state; a read-out latency applies "
                                 "at the spiking levels (--neuron escape or lif)")
            read["latency"] = {"classes": args.latency} if args.latency else None
        c = classify(model, images, labels, neuron=args.neuron, presentation=args.presentation,
                     report=None if args.quiet else "progress", record_spikes=record, calibration=cal,
                     **{**read, **opts})   # (a --P given overrides the read-out's own copies)
    except OperatingRangeError as exc:   # a set the circuit cannot divide: named as the test image it is
        msg = re.sub(r"token set (\d+)", lambda m: f"test image {index[int(m.group(1))]}", str(exc), count=1)
        raise OperatingRangeError(msg.replace(MODEL_REMEDY, "the digits circuit is built for the training images; "
                                              "leave this test image out (--skip)")) from None
    except (ValueError, TypeError) as exc:
        if str(exc).startswith("max_memory: "):   # the command's own remedies (it has no memory limit flag)
            raise ValueError(str(exc).replace("use fewer copies (P), a shorter stream, or raise max_memory",
                                              "run fewer test images at a time (--start, --images) or fewer "
                                              "copies (--P)")) from None
        raise _flagged(exc, _MODEL_FLAGS) from None
    doc = dict(benchmark="digits", quick=False, model=model.name, source=model.source, images=count, start=start,
               skipped=sorted(skip), index=index.tolist(),
               presentations=[args.presentation], seed=args.seed, P=int(c.result.config["P"]),
               rows=[classification_row(c, EXAMPLES, images, index=index)],
               float_accuracy=c.float_accuracy, labels=c.labels.tolist(),
               float_predictions=c.float_predictions.tolist())
    with results_directory(out, "--out", kind="digits") as tmp:
        atomic_write_json(os.path.join(tmp, "classification.json"), doc)
        atomic_write_json(os.path.join(tmp, "metrics.json"), c.result.metrics)
        atomic_write_json(os.path.join(tmp, "config.json"), c.result.config)
        atomic_write_json(os.path.join(tmp, "rates.json"), list(c.result.rate_table()))   # beside the recordings
        if spiking:
            c.result.write_nwb(os.path.join(tmp, "spikes.nwb"))
        if not args.no_figure:
            from ctmhsa.figures.digits import draw   # matplotlib: only when drawing

            draw(os.path.join(tmp, "classification.json"), os.path.join(tmp, "digits.png"))
    args._out = None    # written
    if not args.quiet:
        compiled = (f"; compiling {c.compile_s:.0f} s apart ({c.compiled} Cython modules, a first run's cost)"
                    if c.compiled else "")
        print(f"  accuracy {c.accuracy:.4f} (float model {c.float_accuracy:.4f}), agreement {c.agreement:.4f}; "
              f"{c.neurons:,} neurons, {c.wall_per_input:.2f} s per image{compiled}")
        above = [f"{r['population']} {r['mean']:.1f} Hz (bound {r['bound']:g})" for r in c.result.rate_table()
                 if r["within"] is False]
        if above:
            print("  mean rates above their recorded range (rates.json, docs/physiology.md): " + ", ".join(above))
        print(f"results in {out}")
    return 0


def _cmd_generate(args) -> int:
    """``ctmhsa generate``: a language model's circuit writes text after a prompt, one character
    per presentation, reading what it wrote; a results directory with the text, the scores, the
    class cells' spikes and the figure."""
    from .generate import generate
    from .io import results_directory

    out = check_output(args.out, 0, what="--out")
    args._out = out
    circuit = args.neuron != "float"
    opts = {k: v for k, v in dict(P=args.P, presentation=args.presentation, codegen=args.codegen,
                                  firing=args.firing).items() if v is not None}
    if args.cells is not None:
        if not circuit:
            raise ValueError("--cells: --neuron float runs the exact model, no circuit")
        from .model import causal_cells

        opts.update(causal_cells(args.cells, args.neuron))
    if circuit:
        opts.update(report=None if args.quiet else "progress")
        if get_level(args.neuron).spiking:   # the figure's raster of the output nucleus
            opts["record_spikes"] = ("classes",)
    elif opts:
        raise ValueError(f"{_MODEL_FLAGS.get(next(iter(opts)), next(iter(opts)))}: --neuron float runs the exact "
                         "model, no circuit")
    try:
        g = generate(_load_model(args.model), args.prompt, args.chars, neuron=args.neuron,
                     temperature=args.temperature, seed=args.seed, **opts)
    except (ValueError, TypeError) as exc:
        raise _flagged(exc, dict(_MODEL_FLAGS, prompt="--prompt", chars="--chars", temperature="--temperature",
                                 model="--model")) from None
    with results_directory(out, "--out", kind="generate") as tmp:
        g.write_files(tmp)
        if not args.no_figure:
            from ctmhsa.figures.generate import draw   # matplotlib: only when drawing

            draw(tmp)
    args._out = None    # written
    if not args.quiet:
        print(g.text)
        size = (f"; {g.result.config['n_neurons']:,} neurons, {g.result.config['presentation']:g} s per character, "
                f"{g.wall / max(len(g.text) - 1, 1):.2f} s of wall time per character") if g.result is not None else ""
        print(f"-- {args.chars} characters at the {args.neuron} level (temperature {args.temperature:g}); "
              f"agreement with the float model's most likely character {100 * g.agreement:.0f} %{size}")
        print(f"results in {out}")
    return 0


def _cmd_experiment(args) -> int:
    """``ctmhsa experiment NAME``: an in-silico experiment (:mod:`ctmhsa.sims.experiments`), written as a
    results directory: experiment.json, one NWB file per spiking run, NAME.png."""
    from .experiments import experiment, run_experiment

    mod = experiment(args.name)
    out = check_output(args.out or os.path.join("results", f"experiment-{args.name}"), 0, what="--out")
    problem = {k: v for k, v in dict(n=args.n, H=args.H, dk=args.d, dv=args.d, de=args.d).items() if v is not None}
    if not args.quiet:
        print(f"ctmhsa experiment {args.name}: {mod.TITLE} ({mod.SOURCE})\n  {mod.PROTOCOL}")

    def report(k, total, run):
        if not args.quiet:
            print(f"  run {k + 1}/{total}: {run.condition}, {mod.SWEEP[0]} {run.value:g}", flush=True)

    def draw(directory, doc):
        from ctmhsa.figures.experiments import draw as draw_figure   # matplotlib: only when drawing

        draw_figure(os.path.join(directory, "experiment.json"), os.path.join(directory, f"{args.name}.png"))

    doc = run_experiment(args.name, out, neuron=args.neuron, seed=args.seed, duration=args.duration,
                         warmup=args.warmup, problem=problem or None, nwb=not args.no_nwb, codegen=args.codegen,
                         report=report, draw=None if args.no_figure else draw)
    if not args.quiet:
        print(f"  {doc['neurons']:,} neurons, {len(doc['rows'])} runs, {doc['wall_s']:.1f} s")
        for line in doc["predictions"]:
            print(f"  - {line}")
        print(f"results in {out}")
    return 0


def _cmd_run(args) -> int:
    if getattr(args, "model", None):
        return _cmd_run_model(args)
    if getattr(args, "latency", None):
        raise ValueError("--latency: the read-out delays of a model's stream (--model); one pathway's stream reads "
                         "every population in one window")
    quiet = args.quiet
    cfg = _run_config(args)
    co, ro = config_options(cfg)    # validated before anything is built
    p = cfg["problem"]
    origin = {}      # where the tokens and weights came from, printed below
    inputs = make_inputs(p, base_dir=cfg["_base"],    # sizes checked against the table
                         names={"inputs": "--tokens"} if args.tokens is not None else None, info=origin)
    stream = np.ndim(inputs["X"]) == 3
    ro = _check_run_kind(args, cfg, ro, stream)
    p.update(sizes_of(inputs))
    p["cross"] = inputs["Y"] is not None
    _check_size_flags(cfg["_size_flags"], p)
    circ = co.as_built(co.describe(p["n"], p["dk"], p["dv"], p["de"], H=p["H"], m=p["m"], cross=p["cross"]))
    check_record_spikes(ro.record_spikes, circ.populations,
                        name="--record-spikes" if args.record_spikes is not None else "run.record_spikes")
    out, setting = _out(args, cfg, cfg["_base"])
    rr = ro.resolved(co.neuron, co.circuit)
    window = len(inputs["X"]) * (ro.presentation or DEFAULT_PRESENTATION) if stream else rr.duration
    out = check_output(out, estimate_result_bytes(circ, co.neuron, window, rr.warmup, ro.record_spikes,
                                                  summary=not args.no_summary), what=setting)
    cfg["output"]["dir"] = args._out = out
    if not quiet:
        print(f"ctmhsa run: configuration: {cfg['_source']}")
        for line in source_lines(origin, p):
            print(f"  {line}")
        timing = (f"{len(inputs['X'])} token sets, {ro.presentation or DEFAULT_PRESENTATION:g} s each" if stream
                  else f"window {ro.duration:g} s")
        print(f"  n={p['n']} m={p['m']} H={p['H']} dk={p['dk']} dv={p['dv']} de={p['de']}; "
              f"{co.neuron} level, phi={co.phi}, {timing}, seed {ro.seed}, codegen {ro.codegen}")
    t0 = time.perf_counter()
    res = simulate_mhsa(inputs["X"], inputs["WQ"], inputs["WK"], inputs["WV"], inputs["WO"], Y=inputs["Y"],
                        circuit_options=co, run_options=ro.replace(report=None if quiet else "progress"))
    resolved = {k: v for k, v in cfg.items() if not k.startswith("_")}
    resolved["run"] = dict(cfg["run"], **{k: res.config[k] for k in ("dt", "codegen", "warmup")})

    def summary(directory):
        if args.no_summary:
            return
        from ctmhsa.figures.summary import draw_summary   # matplotlib: only when drawing

        draw_summary(res, os.path.join(directory, "summary.png"))   # the result in memory

    if not quiet:
        print("  writing results" + ("" if args.no_summary else " and summary.png") + " ...", flush=True)
    path = write_result(res, out, config=resolved, extra=summary)
    args._out = None    # written
    if not quiet:
        t = res.timings
        sim = res.counts.get("simulated_synapses")
        folded = f" ({sim:,} simulated after folding)" if sim is not None and sim != res.counts["synapses"] else ""
        print(f"  {res.counts['neurons']:,} neurons, {res.counts['synapses']:,} synapses{folded}; "
              f"build {t['build']:.1f} s, {_compile_text(t)}, run {t['run']:.1f} s, "
              f"total {time.perf_counter() - t0:.1f} s")
        print("  decoded stage vs exact attention (NRMSE), beside the error spike-count noise alone "
              "would give (floor):" if co.spiking else "  decoded stage vs exact attention (NRMSE):")
        print(stage_table(res))
        if co.spiking:
            print("  firing rates (Hz) and the mean's bound in vivo for the cell type (docs/physiology.md):")
            print("  " + str(res.rate_table()).replace("\n", "\n  "))
        rng = {k: v for k, v in res.diagnostics["range"].items()
               if v.get("rectified") or v.get("silent_interneurons") or v.get("saturated")}
        if rng:
            print(f"  WARNING: cells outside their working range: {rng}")
        files = sorted(f for f in os.listdir(path) if not f.startswith("."))
        print(f"results in {path}: {', '.join(files)}")
    return 0


_KIND_OPTIONS = ("duration", "checkpoints", "device", "threads", "presentation")
"""Options of ``[run]`` that apply to one token set or to a stream only (:data:`ctmhsa.sims.options.APPLIES`)."""


def _check_run_kind(args, cfg: dict, ro, stream: bool):
    """Refuse the options that do not apply to this run's kind (one token set, or a stream of sets
    ``(T, n, de)``), named by their flag or ``run.<key>``; return the run options of the kind.

    A stream from ``--tokens`` drops the configuration's ``duration`` and ``checkpoints`` (chosen
    for its own window; a stream lasts T x presentation), as the command line's level drops its
    spiking settings."""
    given, names = {}, {}
    for key in _KIND_OPTIONS:
        value = cfg["run"][key]
        if getattr(args, key) is not None:
            given[key], names[key] = value, "--" + key
        elif value is not None and value != DEFAULTS["run"][key]:
            if stream and args.tokens is not None and key in ("duration", "checkpoints"):
                log.info("run.%s = %s dropped for the stream of --tokens", key, value)
                continue
            given[key], names[key] = value, f"run.{key}"
    check_applies("stream" if stream else "set", given, names)
    # a stream's window is T x presentation; the file's (dropped) one must not read as given
    return ro.replace(duration=RunOptions().duration, checkpoints=()) if stream else ro


def _cmd_circuit(args) -> int:
    raw = read_config(args.config)
    cfg = resolve_config(raw)
    p = cfg["problem"]
    if any(p[k] is None for k in SIZE_KEYS):   # sizes from files: read them
        inputs = make_inputs(p, base_dir=_config_base(args.config))
        p.update(sizes_of(inputs))
        p["cross"] = inputs["Y"] is not None
    circ = config_options(cfg)[0].describe(p["n"], p["dk"], p["dv"], p["de"], H=p["H"], m=p["m"],
                                           cross=p["cross"])
    print(dumps_json(circ.to_dict()).rstrip("\n") if args.json else circ.summary())
    return 0


def _cmd_plan(args) -> int:
    from .io import load
    from .plan import plan

    if not (np.isfinite(args.target) and args.target > 0):    # before the directory is read
        raise ValueError(f"--target: expected a target NRMSE > 0 (finite), got {args.target:g}")
    try:
        table = plan(load(args.results), args.target, stages=args.stage)
    except ValueError as exc:     # the flag's name for the argument's
        msg = str(exc)
        raise ValueError("--stage: " + msg[len("stages: "):] if msg.startswith("stages: ") else msg) from None
    print(table)
    return 0


FIGURES_DRAWN = ("fig1b_head_cells", "fig1c_pathway", "fig4a_cross_attention", "fig2_cells", "accuracy_rate",
                 "accuracy_escape", "accuracy_lif", "raster_escape", "error_scaling", "counts_vs_n",
                 "quadratic_vs_linear", "two_point_laws")
"""The figures ``ctmhsa figures`` draws: :data:`ctmhsa.figures.make.FIGURES`, named here for its help
without importing matplotlib (a test keeps the two equal)."""
FIGURES_ELSEWHERE = ("summary_default_run (summary.png) by ctmhsa run, experiment_NAME by ctmhsa experiment "
                     "NAME, training by ctmhsa train, transformer_depth and transformer_circuit by ctmhsa bench "
                     "depth, digits by ctmhsa bench digits, timescale_population by ctmhsa bench timescale, "
                     "theories by ctmhsa bench theories, theories_recall by ctmhsa bench theories --task recall")
"""Which command draws each gallery figure that ``ctmhsa figures`` does not (docs/figures.md)."""


def _cmd_figures(args) -> int:
    from ctmhsa.figures.make import make_figures   # matplotlib: only for this command

    t0 = time.perf_counter()
    data = args.data or os.path.join(args.out, "data")
    make_data(data, quick=args.quick)
    made = make_figures(args.out, data, gallery=args.gallery)
    if not args.quiet:
        for p in made:
            print(f"  {p}")
        print(f"{len(made)} figures (PNG + PDF + caption) in {os.path.abspath(args.out)}, "
              f"{time.perf_counter() - t0:.0f} s")
    return 0


def _cmd_train(args) -> int:
    from .train import default_train_config_path, resolve_train_config, run_training

    path = args.config or default_train_config_path()
    raw = read_config(path)
    train = dict(raw.get("train", {}))
    if args.levels is not None:
        train["levels"] = args.levels
    if args.steps is not None:
        train["steps"] = args.steps
    cfg = resolve_train_config(dict(raw, train=train))      # validated before anything is simulated
    out, setting = _out(args, cfg, _config_base(args.config))
    cfg["output"]["dir"] = out = os.path.abspath(out)
    p, t = cfg["problem"], cfg["train"]
    if not args.quiet:
        print(f"ctmhsa train: {os.path.abspath(path) if args.config else '(shipped default)'}")
        print(f"  teacher-student n={p['n']} H={p['H']} dk={p['dk']} dv={p['dv']} de={p['de']} batch={p['batch']}; "
              f"steps {t['steps']}, {'tied' if t['tied'] else 'untied'} copies")

    def progress(level, s, d):
        if not args.quiet and (s + 1) % 10 == 0:
            print(f"  {level} step {s + 1}: loss {d['loss']:.4g} (exact {d['exact_loss']:.4g}), "
                  f"cos {min(d['cosines']):.3f}..{max(d['cosines']):.3f}, {d['step_time']:.2f} s", flush=True)

    def draw(directory):
        if args.no_figure:
            return
        from ctmhsa.figures.training import draw_training   # matplotlib: only when drawing

        draw_training(directory, os.path.join(directory, "training.png"))

    t0 = time.perf_counter()
    path = run_training(cfg, out, draw=draw, progress=progress, what=setting)   # out checked first
    if not args.quiet:
        with open(os.path.join(path, "summary.json")) as fh:    # null: a NaN in strict JSON
            summ = json.load(fh, object_hook=lambda d: {k: float("nan") if v is None else v for k, v in d.items()})
        for name, lv in [("exact GD", summ["exact_gd"])] + list(summ["levels"].items()):
            cos = lv.get("cos_median")
            print(f"  {name:<9} exact loss {lv['exact_loss_0']:.4g} -> x{lv['exact_ratio_end']:.3f} after "
                  f"{lv['steps']} steps" + (f"; median cosine to the exact gradient "
                                            f"{min(cos.values()):.4f} (worst matrix); "
                                            f"{lv['wall_per_step_s']:.2f} s/step" if cos else ""))
        files = sorted(f for f in os.listdir(path) if not f.startswith("."))
        print(f"results in {path} ({time.perf_counter() - t0:.0f} s): {', '.join(files)}")
    return 0


def _common() -> argparse.ArgumentParser:
    """Flags every subcommand takes."""
    c = argparse.ArgumentParser(add_help=False)
    c.add_argument("--quiet", action="store_true", help="no progress bars; print nothing but errors")
    c.add_argument("-v", "--verbose", action="count", default=0,
                   help="diagnostics: -v progress of each step, -vv debug")
    return c


def _add_benchmarks(sub, common) -> None:
    """``ctmhsa bench NAME``: one subcommand per entry of :data:`ctmhsa.sims.benchmarks.BENCHMARKS`, each
    with the flags its module adds (``add_arguments``) and its ``main`` as the command."""
    names = ", ".join(BENCHMARKS)     # from the registry: none left out
    bench = sub.add_parser("bench", help=f"benchmarks that print a table and write JSON: {names}",
                           description=f"Benchmarks that print a table and write JSON ({names}); "
                                       "`ctmhsa bench NAME --help` lists the flags of each.")
    which = bench.add_subparsers(dest="benchmark", metavar="NAME", required=True, title="benchmarks")
    for name in BENCHMARKS:
        mod = benchmark(name)
        p = which.add_parser(name, help=mod.HELP, description=mod.__doc__, parents=[common],
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(p)
        p.set_defaults(func=functools.partial(_run_and_draw if getattr(mod, "FIGURE", None) else run_benchmark, mod))


def _run_and_draw(mod, args) -> int:
    """Run benchmark ``mod``; where it names a figure module (``FIGURE``), draw that module's
    figure from the JSON the run wrote (unless ``--no-figure``): benchmarks write data, figures read it."""
    rc = run_benchmark(mod, args)
    figure = getattr(mod, "FIGURE", None)
    if rc == 0 and figure and not getattr(args, "no_figure", False) and getattr(args, "out", None):
        png = import_module(figure).draw(args.out)
        print(f"figure {os.path.abspath(png)}")
    return rc


def _times(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a time in seconds, got {text!r}") from None
    return v


def _delay(text: str) -> tuple:
    """An argparse type: ``POPULATION=SECONDS`` (a read-out delay, ``simulate_model``'s ``latency``)."""
    name, sep, value = text.partition("=")
    try:
        if not (sep and name):
            raise ValueError
        return name, float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected POPULATION=SECONDS (e.g. classes=0.15), got {text!r}") from None


def _count(least: int):
    """An argparse type: an integer >= ``least``."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {least}, got {text!r}") from None
        if v < least:
            raise argparse.ArgumentTypeError(f"expected an integer >= {least}, got {v}")
        return v
    return parse


def _config_command(sub, common, name: str, help: str, description: str, default: str):
    """A subcommand that reads an optional TOML configuration and writes a results directory."""
    cmd = sub.add_parser(name, parents=[common], help=help, description=description)
    cmd.add_argument("config", nargs="?", default=None, help=f"TOML configuration (default: {default})")
    cmd.add_argument("--out", help="results directory, relative to the working directory (default: [output] dir "
                                   "of the config, relative to the config's directory); an existing one is "
                                   "replaced only if it is a results directory of ctmhsa or empty")
    return cmd


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="ctmhsa",
        description="Cortico-thalamic circuits computing multihead self-attention (Brian2), after "
                    "Granier & Senn (2025).")
    ap.add_argument("--version", action="version", version=f"ctmhsa {_version()}")
    common = _common()
    sub = ap.add_subparsers(dest="command", required=True)

    run = _config_command(sub, common, "run",
                          help="simulate a configuration, write a results directory with summary.png and spikes.nwb",
                          description="Simulate a configuration (default: a two-head spiking pathway, "
                                      "n = 8, d = 8) and write a results directory: config.toml, "
                                      "metrics.json, stages/reference/rates/spikes/noise .npz, "
                                      "spikes.nwb (spiking levels), summary.png, provenance.json.",
                          default="the shipped two-head spiking pathway")
    run.add_argument("--neuron", choices=["rate", "escape", "lif"], help="override the fidelity level")
    run.add_argument("--dale", action="store_true",
                     help="Dale's law: every cell excitatory or inhibitory (feedforward inhibitory followers)")
    run.add_argument("--firing", choices=FIRING,
                     help="escape level: how cells fire (poisson: escape noise, the default; regular: perfect "
                          "integrate-and-fire somata; population: the same, each dimension's copies in turn)")
    run.add_argument("--duration", type=_times, help="override the simulated window (s)")
    run.add_argument("--seed", type=int, help="override the simulation seed")
    run.add_argument("--codegen", choices=CODEGEN, help="Brian2 code generation target")
    run.add_argument("--device", choices=DEVICES,
                     help="Brian2 device; " + "; ".join(f"{n}: {get_device(n).description}" for n in DEVICES))
    run.add_argument("--record-spikes", nargs="*", metavar="POPULATION",
                     help="keep spike times: of every population (no names) or of the named ones")
    run.add_argument("--no-record-spikes", action="store_true", help="keep no spike times")
    run.add_argument("--checkpoints", nargs="+", type=_times, metavar="T",
                     help="also decode every stage after these window lengths (s)")
    run.add_argument("--threads", type=_count(0), metavar="N",
                     help="OpenMP threads of the cpp_standalone device (default 1; 0 or 1: one thread, "
                          "without OpenMP; more only when asked, as they collapse on a busy machine: "
                          "ctmhsa bench threads)")
    sz = run.add_argument_group("sizes of the random problem (no inputs file needed; files' sizes must agree)")
    sz.add_argument("--n", type=_count(1), metavar="N", help="tokens = macrocolumns per area")
    sz.add_argument("--H", type=_count(1), metavar="H", help="heads = cortical areas")
    sz.add_argument("--dk", type=_count(1), metavar="DK", help="key/query dimension")
    sz.add_argument("--dv", type=_count(1), metavar="DV", help="value dimension")
    sz.add_argument("--de", type=_count(1), metavar="DE", help="token (embedding) dimension")
    w = run.add_argument_group("trained weights (ctmhsa.maths.weights)")
    w.add_argument("--weights", metavar="FILE",
                   help="attention projections of a trained model: .safetensors, or .pt/.bin (needs torch)")
    w.add_argument("--layer", type=lambda s: int(s) if s.lstrip("-").isdigit() else s,
                   help="attention layer number (or key prefix) in the weights file")
    w.add_argument("--heads", type=int, nargs="+", metavar="H", help="heads of that layer to simulate (default all)")
    w.add_argument("--n-heads", dest="n_heads", type=int,
                   help="heads of the layer (default: config.json beside the weights)")
    w.add_argument("--layout", choices=("auto", *LAYOUTS), help="key layout of the weights file")
    w.add_argument("--tokens", metavar="FILE.npz",
                   help="token embeddings: an .npz with X (n, de) (and Y), or a stream of sets X (T, n, de)")
    run.add_argument("--no-summary", action="store_true", help="do not draw summary.png")
    mg = run.add_argument_group("a transformer model (blocks, MLPs, read-out; ctmhsa.load_model)")
    mg.add_argument("--model", metavar="FILE",
                    help="run a model file (.npz/.safetensors in the blocks.{l}.attn/mlp layout) or a shipped "
                         "model's name instead of the configuration; tokens from --tokens or random (--n)")
    mg.add_argument("--presentation", type=_times, metavar="S",
                    help="seconds per token set when --tokens holds a stream X (T, n, de), with or without --model "
                         "(default 0.2)")
    mg.add_argument("--latency", type=_delay, nargs="+", metavar="POP=S",
                    help="a model stream's read-out delays: each population (or a block's population without its "
                         "block, e.g. l5pt) read that many seconds later, its response latency (docs/lif.md)")
    run.set_defaults(func=_cmd_run)

    dg = sub.add_parser("digits", parents=[common], help="the shipped vision transformer reads handwritten digits "
                                                         "in spikes (one circuit, one image per presentation)",
                        description="Stream the held-out 8x8 digits (scikit-learn, the 497 not trained on) through "
                                    "one circuit of the shipped model 'digits', read each class from the read-out's "
                                    "class cells, and write a results directory: classification.json, metrics.json, "
                                    "config.json, rates.json (the rate table), spikes.nwb (spiking levels), digits.png.")
    dg.add_argument("--neuron", choices=["rate", "escape", "lif"], default="escape",
                    help="fidelity level (default escape; lif: 32 cells per value, L5 couplings of 100 ms and its class "
                         "cells read 0.25 s late below 1 s per image, e.g. --presentation 0.5: docs/lif.md)")
    dg.add_argument("--presentation", type=_times, default=0.2, help="seconds per image (default 0.2)")
    dg.add_argument("--images", type=_count(1), help="test images (default all 497, or those from --start)")
    dg.add_argument("--start", type=_count(0), default=0, metavar="I",
                    help="index of the first test image (default 0): a part of the test set")
    dg.add_argument("--skip", type=_count(0), nargs="+", metavar="I",
                    help="test images (by index) left out of those run, named in classification.json (at the lif "
                         "level test image 56 is refused, below every training image's drive: --skip 56)")
    dg.add_argument("--seed", type=int, help="simulation seed (default 0)")
    dg.add_argument("--P", type=_count(1), help=f"cells per value (default 4 at the spiking levels; {LIF_FAST_COPIES} at "
                                                f"the lif level below {LIF_FAST_BELOW:g} s per image)")
    dg.add_argument("--firing", choices=FIRING, default="population",
                    help="escape level: how cells fire (default population: each value's copies as one perfect "
                         "integrator, 5 ms cells; poisson: escape noise)")
    dg.add_argument("--latency", type=_times, metavar="S",
                    help=f"seconds the class cells are read after the other stages, their response latency "
                         f"(default {LIF_CLASS_LATENCY:g} at the lif level below {LIF_FAST_BELOW:g} s per image, whose "
                         f"chain follows an image later than its relays; 0 otherwise; docs/lif.md)")
    dg.add_argument("--model", default="digits", help="model file or shipped name (default digits)")
    dg.add_argument("--codegen", choices=CODEGEN, help="Brian2 code generation target (default auto)")
    dg.add_argument("--device", choices=("auto", "runtime", "cpp_standalone"), default="auto",
                    help=f"Brian2 device (default auto: cpp_standalone from {AUTO_COMPILED_IMAGES} images on, "
                         f"{AUTO_COMPILED_IMAGES_LIF} at the lif level, or with "
                         "--threads, where a C++ compiler is found, which compiles the model's shape once and then runs 2-3x "
                         "faster; runtime otherwise; docs/digits.md)")
    dg.add_argument("--threads", type=_count(0), metavar="N", help="OpenMP threads of cpp_standalone (default 1)")
    dg.add_argument("--out", default=os.path.join("results", "digits"), help="results directory (default results/digits)")
    dg.add_argument("--no-figure", action="store_true", help="do not draw digits.png")
    dg.set_defaults(func=_cmd_digits)

    gen = sub.add_parser("generate", parents=[common], help="a language model's circuit writes text, one character "
                                                            "per presentation, reading what it wrote",
                         description="Present --prompt to the circuit of a causal language model (default the shipped "
                                     "'shakespeare'), one character per presentation; from its last character on, draw "
                                     "each next character from the class scores decoded from the read-out's class "
                                     "cells, divided by --temperature, and show it next, inside the same run. Writes a "
                                     "results directory: text.txt, generate.json, scores.npz (scores and the class "
                                     "cells' spikes), rates.json and generate.png.")
    gen.add_argument("--prompt", default="ROMEO:", help="the prompt (default ROMEO:)")
    gen.add_argument("--chars", type=_count(1), default=200, help="characters to write (default 200)")
    gen.add_argument("--neuron", choices=["escape", "rate", "float"], default="escape",
                     help="fidelity level (default escape); float: the exact model, no circuit")
    gen.add_argument("--temperature", type=float, default=1.0,
                     help="the decoded scores are divided by it before the softmax; 0: the largest (default 1)")
    gen.add_argument("--seed", type=_count(0), default=0, help="seed of the draws and the simulation (default 0)")
    gen.add_argument("--presentation", type=_times, help="seconds per character (default 0.2)")
    gen.add_argument("--P", type=_count(1), help="cells per value (default 4 at the spiking levels)")
    gen.add_argument("--firing", choices=FIRING,
                     help="how the escape cells fire (default poisson: escape noise; population: each value's "
                          "copies in turn, docs/language.md)")
    gen.add_argument("--cells", choices=["causal", "brief"],
                     help="the circuit's cells (default causal: 5 ms; brief: 2.5 ms with a 0.5 ms step at the escape "
                          "level, closer to the float model at 0.2 s per character, docs/language.md)")
    gen.add_argument("--model", default="shakespeare", help="model file or shipped name (default shakespeare)")
    gen.add_argument("--codegen", choices=CODEGEN, help="Brian2 code generation target (default auto)")
    gen.add_argument("--out", default=os.path.join("results", "generate"),
                     help="results directory (default results/generate)")
    gen.add_argument("--no-figure", action="store_true", help="do not draw generate.png")
    gen.set_defaults(func=_cmd_generate)

    from .experiments import EXPERIMENTS

    ex = sub.add_parser("experiment", parents=[common],
                        help="in-silico experiments of the paper's fig. 2 (lesions and drive, with predictions) and "
                             "the circuit's fingerprints beside the recordings",
                        description="Run an in-silico experiment on the circuit (default: the two-head n = d = 8 "
                                    "pathway, escape level) and write a results directory: experiment.json (protocol, "
                                    "one row per run, summary, predictions), one NWB file per spiking run, NAME.png. "
                                    "docs/experiments.md describes each; fingerprints: docs/physiology.md.")
    ex.add_argument("name", choices=sorted(EXPERIMENTS), metavar="NAME",
                    help="one of: " + ", ".join(sorted(EXPERIMENTS)))
    ex.add_argument("--neuron", choices=["rate", "escape", "lif"], default="escape", help="fidelity level (default escape)")
    ex.add_argument("--duration", type=_times, default=1.0, help="measurement window of every run (s, default 1)")
    ex.add_argument("--warmup", type=_times, help="discarded before each window (s; default 0.3, 0 at the rate level)")
    ex.add_argument("--seed", type=int, default=0, help="seed of every run (default 0)")
    ex.add_argument("--n", type=_count(1), help="tokens = macrocolumns per area (default 8)")
    ex.add_argument("--H", type=_count(1), help="heads = cortical areas (default 2)")
    ex.add_argument("--d", type=_count(1), help="dk = dv = de (default 8)")
    ex.add_argument("--codegen", choices=CODEGEN, default="auto", help="Brian2 code generation target")
    ex.add_argument("--out", help="results directory (default results/experiment-NAME)")
    ex.add_argument("--no-nwb", action="store_true", help="do not write the runs' NWB files")
    ex.add_argument("--no-figure", action="store_true", help="do not draw NAME.png")
    ex.set_defaults(func=_cmd_experiment)

    circ = sub.add_parser("circuit", parents=[common], help="print the circuit a configuration describes")
    circ.add_argument("config", nargs="?", default=None)
    circ.add_argument("--json", action="store_true", help="full declarative description as JSON")
    circ.set_defaults(func=_cmd_circuit)

    pl = sub.add_parser("plan", parents=[common],
                        help="from a spiking run's noise floors: the window or P that reaches a target NRMSE per "
                             "stage, with its neurons and wall time",
                        description="Read a results directory (ctmhsa.load) and print, per stage, the window T "
                                    "(same P) and the copies P (same window) whose noise floor reaches the target "
                                    "NRMSE, from the floors' 1/sqrt(T P) scaling, with the neurons and estimated "
                                    "wall time of each (ctmhsa.sims.plan). A floor is the error expected from "
                                    "spike-count noise alone, not a guarantee; no window or P removes a bias.")
    pl.add_argument("results", metavar="RESULTS_DIR", help="a results directory of ctmhsa run (a spiking level)")
    pl.add_argument("--target", type=float, required=True, metavar="NRMSE", help="target NRMSE (> 0) of every stage")
    pl.add_argument("--stage", nargs="+", metavar="STAGE",
                    help="plan only these stages (q k v s kappa Z y v_tilde x_tilde; default all)")
    pl.set_defaults(func=_cmd_plan)

    figs = sub.add_parser("figures", parents=[common],
                          help=f"run the shipped small simulations (ctmhsa.sims.figure_data), then draw the "
                               f"{len(FIGURES_DRAWN)} figures of ctmhsa.figures.make from their files",
                          description=f"Run the shipped small simulations (ctmhsa.sims.figure_data), then draw "
                                      f"these {len(FIGURES_DRAWN)} figures from their files (ctmhsa.figures.make; "
                                      f"PNG + PDF + caption): {', '.join(FIGURES_DRAWN)}. The gallery's other "
                                      f"figures are drawn by the commands that make their data: {FIGURES_ELSEWHERE}.")
    figs.add_argument("--out", default="figures_out", help="output directory (default figures_out)")
    figs.add_argument("--data", default=None,
                      help="data directory (default OUT/data; resumable, one subdirectory per parameter set)")
    figs.add_argument("--gallery", default=None, help="also copy the PNGs here (e.g. figures/gallery)")
    figs.add_argument("--quick", action="store_true", help="very short windows (smoke test; figures marked QUICK)")
    figs.set_defaults(func=_cmd_figures)

    tr = _config_command(sub, common, "train",
                         help="the circuit learns a teacher-student problem with the paper's gradients (eqs. 2-5)",
                         description="Train a student circuit towards a random teacher with eqs. (2)-(5), the "
                                     "updates formed from the circuit's own decoded activity, at every level of "
                                     "[train] levels, beside exact gradient descent; write config.toml, "
                                     "training.npz, summary.json and training.png (loss vs step).",
                         default="the shipped sims/configs/train.toml")
    tr.add_argument("--steps", type=int, help="steps at every level (overrides [train] steps)")
    tr.add_argument("--levels", nargs="+", choices=["rate", "escape", "lif"], help="levels to train")
    tr.add_argument("--no-figure", action="store_true", help="do not draw training.png")
    tr.set_defaults(func=_cmd_train)

    _add_benchmarks(sub, common)
    return ap


class _Stderr(logging.StreamHandler):
    """A handler writing to whatever ``sys.stderr`` is when a record comes (not the stream of
    the first call)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def _logging(verbose: int, quiet: bool) -> None:
    level = logging.ERROR if quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    for name in ("ctmhsa", "sims", "mapping", "circuits", "neurons", "figures"):
        lg = logging.getLogger(name)
        lg.setLevel(level)
        if not any(getattr(h, "_ctmhsa", False) for h in lg.handlers):
            h = _Stderr()
            h.setFormatter(logging.Formatter("ctmhsa: %(levelname)s: %(name)s: %(message)s"))
            h._ctmhsa = True
            lg.addHandler(h)
            lg.propagate = False


def _simulated_time(tb) -> float | None:
    """The simulated time (s) of the Brian2 network whose ``run`` the traceback ``tb`` passes
    through (``None``: none ran; the standalone device runs its own binary)."""
    network = sys.modules.get("brian2.core.network")
    t = None
    while tb is not None and network is not None:
        obj = tb.tb_frame.f_locals.get("self")
        if isinstance(obj, network.Network) and tb.tb_frame.f_code.co_name == "run":
            t = float(obj.t_)
        tb = tb.tb_next
    return t


def _interrupted(args, exc: KeyboardInterrupt) -> int:
    """Report a run stopped by Ctrl+C in one line; exit status 130 (128 + SIGINT), as a shell's."""
    t = _simulated_time(exc.__traceback__)
    when = f" after {t:g} s of simulated time" if t is not None else ""
    out = getattr(args, "_out", None)   # set while a command's results are not yet written
    print(f"ctmhsa: interrupted{when}" + (f"; nothing written to {out}" if out else ""), file=sys.stderr)
    return 130


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    quiet = bool(getattr(args, "quiet", False))
    _logging(getattr(args, "verbose", 0), quiet)
    set_quiet(quiet)
    # Ctrl+C stops the command: Brian2's own handler only ends the running Network.run early, and
    # the window cut short would then be misread as a fault (or, between two runs, lost)
    # (not where SIGINT is ignored, as by nohup: Brian2's handler keeps the one it replaced)
    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread:
        handler = signal.getsignal(signal.SIGINT)
        main_thread = getattr(handler, "previous_handler", handler) is not signal.SIG_IGN
    if main_thread:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return args.func(args)
    except KeyboardInterrupt as exc:
        if main_thread:
            signal.signal(signal.SIGINT, signal.SIG_IGN)    # a second Ctrl+C does not cut the message
        return _interrupted(args, exc)
    except (ValueError, TypeError, NotImplementedError, ImportError) as exc:
        print(f"ctmhsa: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:     # a disk that fills or a location that goes away while writing
        print(f"ctmhsa: error: {exc}", file=sys.stderr)
        return 1
    except CircuitRangeError as exc:   # a run that left its working range: said in full, nothing written
        print(f"ctmhsa: error: {exc}", file=sys.stderr)
        return 1
    finally:
        if main_thread:
            signal.signal(signal.SIGINT, handler)
        set_quiet(False)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
