"""``ctmhsa bench theories``: two theories of cortical attention side by side on the same cells and
the same task.

The shipped digits models, both trained in their circuits' form on the same 1,300 training
images with the same embedding and read-out: the Granier & Senn transformer (``digits``:
Algorithm 1's microcolumns, one block with an MLP) and Co4 (``digits_co4``: the triad of
cooperation cells over four latent queries feeding the key-value memory; docs/co4.md). Each
reads the same held-out test images (:func:`ctmhsa.sims.digits.test_set`) streamed through one
circuit built for the training images (:func:`ctmhsa.sims.digits.calibration_set`), at the escape
level with the digits circuit's cells (:func:`ctmhsa.sims.digits.classify_options`). Rows: each
model at the default copies ``P`` per presentation time, and Co4 at the copies whose neuron count
is nearest the transformer's (matched neurons) at the first. Per row: parameters, neurons, synapses, float and spiking
accuracy, agreement, spikes per image and wall time per image.

``--task recall``: in-context recall asked once, at the end (:mod:`ctmhsa.sims.recall` with one
query, the form of the seed's bAbI stories): the Granier & Senn key-value memory (``recall``, a
causal stream of the facts and the query, read at the query) and Co4 (``recall_co4``, the facts
and the query as one token set; :mod:`ctmhsa.sims.models.train_recall_co4`), each circuit built
for :data:`RECALL_CALIBRATION`, with the cells of its kind of circuit (the causal circuits' at
``firing="population"``, the digits circuit's for the Co4 set), on ``--sequences`` held-out
questions of ``--pairs`` facts drawn with ``--seed``; the same columns per question.

Prints a table and writes JSON; the command line then draws the figure from the JSON
(:func:`ctmhsa.figures.theories.draw`).
"""

from __future__ import annotations

import os
import time

import numpy as np

from ctmhsa.sims.io import versions

from .common import add_out_argument, count, write_table_and_json

FIGURE = "ctmhsa.figures.theories"
"""The module whose ``draw(json_path)`` the command line calls after the run."""

__all__ = ["HELP", "add_arguments", "main", "FIGURE", "MODELS", "TASKS", "RECALL_CALIBRATION", "matched_copies"]

HELP = ("Granier & Senn vs Co4 on the same cells, on digits or in-context recall: accuracy, neurons, spikes and "
        "time per input")

TASKS = {"digits": (("Granier & Senn", "digits"), ("Co4", "digits_co4")),
         "recall": (("Granier & Senn", "recall"), ("Co4", "recall_co4"))}
"""Per task, (theory, shipped model) compared."""

MODELS = TASKS["digits"]
"""The digits task's (theory, shipped model) pairs."""

RECALL_CALIBRATION = dict(n=64, seed=12345)
"""The recall questions both circuits are built for, of ``--pairs`` facts each
(:func:`ctmhsa.sims.models.train_recall_co4.questions`; a seed no evaluated question uses:
``--seed`` 12345 is refused)."""

RECALL_DEFAULTS = dict(pairs=8, sequences=40)
"""``--task recall``'s ``--pairs`` and ``--sequences`` where not given (``--quick``: 4 sequences)."""


def add_arguments(parser) -> None:
    parser.add_argument("--task", choices=sorted(TASKS), default="digits",
                        help="digits (the held-out test images) or recall (facts, then one query; default digits)")
    parser.add_argument("--images", type=count, default=None, help="digits: test images (default 100; 497 in all)")
    parser.add_argument("--pairs", type=count, default=None,
                        help=f"recall: facts per question, 1-8 (default {RECALL_DEFAULTS['pairs']})")
    parser.add_argument("--sequences", type=count, default=None,
                        help=f"recall: held-out questions (default {RECALL_DEFAULTS['sequences']})")
    parser.add_argument("--presentations", type=float, nargs="+", default=[0.2, 0.5],
                        help="seconds per image (default 0.2 0.5; the matched-neurons row at the first)")
    parser.add_argument("--P", type=count, default=4, help="cells per value of both models (default 4)")
    parser.add_argument("--no-matched", action="store_true",
                        help="skip the Co4 row at the other circuit's neuron count")
    parser.add_argument("--seed", type=int, default=0,
                        help="simulation seed, and with --task recall the questions' (default 0)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: 10 images (recall: 4 questions), no matched row")
    add_out_argument(parser, "bench_results/theories.json")


def _parameters(model) -> int:
    """Trained numbers of a model (its file's arrays, the embedding included)."""
    return int(sum(np.size(a) for k, a in model.state_dict().items() if k != "kind"))


def _circuit_size(model, P: int, n: int = 16) -> tuple[int, int]:
    """Neurons and synapses of ``model``'s circuit over ``n`` tokens with ``P`` copies (the
    description only)."""
    from ctmhsa.circuits.transformer import model_circuit
    from ctmhsa.maths.co4 import Co4Model
    from ctmhsa.mapping.blocks import model_sizes

    co4 = isinstance(model, Co4Model)
    c = model_circuit(n, model.de, model.sizes if co4 else model_sizes(model), classes=int(model.readout_W.shape[0]),
                      P=P, latents=model.shape["L"] if co4 else 0)
    return c.n_neurons(), c.n_synapses()


def matched_copies(model, neurons: int, n: int = 16, largest: int = 16) -> int:
    """The copies ``P`` at which ``model``'s circuit over ``n`` tokens has the neuron count
    nearest ``neurons``."""
    return min(range(1, largest + 1), key=lambda P: abs(_circuit_size(model, P, n)[0] - neurons))


def main(args) -> int:
    if args.task == "recall":
        return _main_recall(args)
    if args.pairs is not None or args.sequences is not None:
        raise ValueError("--pairs, --sequences: recall questions, but --task is digits")
    from ctmhsa.sims.classify import classify
    from ctmhsa.sims.digits import calibration_set, classify_options, test_set
    from ctmhsa.sims.model import as_model

    images, labels = test_set()
    n = 10 if args.quick else int(args.images or 100)
    if not 1 <= n <= len(labels):
        raise ValueError(f"--images: expected 1..{len(labels)}, got {n}")
    presentations = [0.2] if args.quick else list(args.presentations)
    if not all(p > 0 for p in presentations):
        raise ValueError(f"--presentations: expected seconds > 0, got {presentations}")
    x, y, cal = images[:n], labels[:n], calibration_set()
    models = {name: as_model(name) for _, name in MODELS}
    runs = [(theory, name, args.P, p) for p in presentations for theory, name in MODELS]
    if not (args.quick or args.no_matched):
        target = _circuit_size(models["digits"], args.P, x.shape[1])[0]
        runs.insert(2, ("Co4", "digits_co4", matched_copies(models["digits_co4"], target, x.shape[1]),
                        presentations[0]))
    doc = dict(benchmark="theories", task="digits", unit="image", quick=bool(args.quick), images=n,
               presentations=presentations, P=args.P,
               seed=args.seed, rows=[], labels=y.tolist(), versions=versions(), cpus=os.cpu_count())
    t_all = time.perf_counter()
    for theory, name, P, presentation in runs:
        model = models[name]
        c = classify(model, x, y, neuron="escape", presentation=presentation, seed=args.seed, calibration=cal,
                     P=P, **classify_options("escape", presentation, model=model))
        neurons, synapses = _circuit_size(model, P, x.shape[1])
        row = dict(c.summary(), theory=theory, model=name, P=P, parameters=_parameters(model), synapses=synapses,
                   predictions=c.predictions.tolist(), float_predictions=c.float_predictions.tolist())
        doc["rows"].append(row)
        print(f"{theory:<15} {name:<11} P={P:<2} {presentation:g} s  accuracy {c.accuracy:.3f} (float {c.float_accuracy:.3f}), "
              f"{neurons:,} neurons, {c.spikes_per_input:,.0f} spikes and {c.wall_per_input:.2f} s per image",
              flush=True)
    write_table_and_json(doc, args.out, t_all, _print_table)
    return 0


def _print_table(doc) -> None:
    unit = doc.get("unit", "image")
    what = (f"{doc['images']} test digits" if unit == "image" else
            f"{doc['sequences']} questions of {doc['pairs']} facts")
    print(f"\ntheories: {what}, escape")
    print(f"{'theory':<16}{'s/' + unit:>11}{'P':>3}{'params':>8}{'neurons':>9}{'synapses':>12}{'float':>7}{'spikes':>8}"
          f"{'agree':>7}{'spikes/' + unit:>16}{'wall/' + unit:>14}")
    for r in doc["rows"]:
        syn = f"{r['synapses']:,}" if r.get("synapses") is not None else "-"
        print(f"{r['theory']:<16}{r['presentation']:>11g}{r['P']:>3}{r['parameters']:>8,}{r['neurons']:>9,}{syn:>12}"
              f"{r['float_accuracy']:>7.3f}{r['accuracy']:>8.3f}{r['agreement']:>7.3f}{r['spikes_per_input']:>16,.0f}"
              f"{r['wall_per_input']:>14.2f}")
    for r in doc["rows"]:     # a question the circuit refuses before building is listed, not scored
        if r.get("refused"):
            print(f"{r['theory']} P={r['P']} {r['presentation']:g} s: {len(r['refused'])} of "
                  f"{len(r['refused']) + r['inputs']} refused before building ({r['refused'][0]['error'][:90]}...)")
    if doc.get("majority") is not None:
        print(f"naming the commonest value among the facts: {doc['majority']:.3f}")


def _recall_settings(args) -> tuple[int, int, list]:
    """``--task recall``'s questions and presentations, checked before any network is built."""
    from ctmhsa.sims.recall import KEYS

    if args.images is not None:
        raise ValueError("--images: test digits, but --task is recall (--sequences, --pairs)")
    pairs = RECALL_DEFAULTS["pairs"] if args.pairs is None else int(args.pairs)
    n = (4 if args.quick else RECALL_DEFAULTS["sequences"]) if args.sequences is None else int(args.sequences)
    if pairs > KEYS:
        raise ValueError(f"--pairs: at most {KEYS} (the keys a question's facts use once each), got {pairs}")
    if args.seed == RECALL_CALIBRATION["seed"]:
        raise ValueError(f"--seed: {args.seed} draws the calibration questions; choose another")
    if args.seed < 0:
        raise ValueError(f"--seed: expected an integer >= 0, got {args.seed}")
    presentations = [0.2] if args.quick else list(args.presentations)
    if not all(0 < p < float("inf") for p in presentations):
        raise ValueError(f"--presentations: expected seconds > 0, got {presentations}")
    _check_presentations(presentations)
    return pairs, n, presentations


def _check_presentations(presentations: list) -> None:
    """Each presentation valid for both circuits' streams (:func:`ctmhsa.sims.options.check_presentation`),
    before any network is built (the memory circuit's row runs before Co4's could refuse)."""
    from ctmhsa.neurons.levels import get_level
    from ctmhsa.sims.digits import cells
    from ctmhsa.sims.model import CAUSAL_CELLS, as_model
    from ctmhsa.sims.options import CircuitOptions, check_presentation, min_presentation

    dt = get_level("escape").dt
    for params, model in ((CAUSAL_CELLS["causal"], "recall"), (cells()["params"], "recall_co4")):
        options, blocks = CircuitOptions(neuron="escape", params=params), as_model(model).n_blocks
        bad = []
        for p in presentations:
            try:
                check_presentation(options, p, dt, blocks)
            except ValueError:
                bad.append(p)
        if bad:
            low, why = min_presentation(options, blocks)
            raise ValueError(f"--presentations: whole steps of {dt:g} s and at least {low:g} s for {model}'s circuit "
                             f"({why}); got {bad}")


def _memory_row(model, U, y, presentation: float, P: int, seed: int) -> dict:
    """The Granier & Senn memory circuit: each question a causal stream of its facts and query,
    one circuit run each (:func:`ctmhsa.sims.benchmarks.language._run`), read at the query."""
    from types import SimpleNamespace

    from ctmhsa.sims.models.train_recall_co4 import questions

    from .language import _run

    args = SimpleNamespace(P=P, cells="causal", firing="population", seed=seed, codegen="cython")
    t0 = time.perf_counter()
    cal = questions(pairs=U.shape[1] - 1, **RECALL_CALIBRATION)[0]
    out = _run(model, U, "escape", presentation, cal, args)
    wall, compile_s = time.perf_counter() - t0, float(out["timings"].get("compile", 0.0))
    k = out["kept"]
    pred, fpred = out["logits"][:, -1].argmax(axis=-1), out["reference"][:, -1].argmax(axis=-1)
    return dict(accuracy=float(np.mean(pred == y[k])), float_accuracy=float(np.mean(fpred == y[k])),
                agreement=float(np.mean(pred == fpred)), neurons=out["neurons"], synapses=out["synapses"],
                presentation=presentation,
                inputs=len(k), refused=out["refused"], spikes_per_input=out["spikes_per_token"] * U.shape[1],
                wall_per_input=(wall - compile_s) / len(k), compile_s=compile_s,
                predictions=pred.tolist(), float_predictions=fpred.tolist())


def _set_row(model, U, y, presentation: float, P: int, seed: int) -> dict:
    """The Co4 circuit: each question one token set, presented in turn to one built circuit
    (:func:`ctmhsa.sims.classify.classify`, the digits circuit's cells)."""
    from ctmhsa.sims.classify import classify
    from ctmhsa.sims.digits import classify_options
    from ctmhsa.sims.models.train_recall_co4 import questions

    c = classify(model, U, y, neuron="escape", presentation=presentation, seed=seed,
                 calibration=questions(pairs=U.shape[1] - 1, **RECALL_CALIBRATION)[0], P=P,
                 **classify_options("escape", presentation, model=model))
    return dict(c.summary(), inputs=len(y), refused=[], predictions=c.predictions.tolist(),
                float_predictions=c.float_predictions.tolist())


def _main_recall(args) -> int:
    from ctmhsa.sims.model import as_model
    from ctmhsa.sims.models.train_recall_co4 import majority, questions

    pairs, n, presentations = _recall_settings(args)
    U, y = questions(n, pairs, args.seed)
    models = {name: as_model(name) for _, name in TASKS["recall"]}
    runs = [(theory, name, args.P, p) for p in presentations for theory, name in TASKS["recall"]]
    doc = dict(benchmark="theories", task="recall", unit="question", quick=bool(args.quick), sequences=n,
               pairs=pairs, majority=majority(pairs, n, args.seed), presentations=presentations,
               P=args.P, seed=args.seed,
               calibration=dict(RECALL_CALIBRATION, pairs=pairs,
                                what="ctmhsa.sims.recall.recall_sequences(n, pairs, queries=1, seed=seed)"),
               rows=[], labels=y.tolist(), versions=versions(), cpus=os.cpu_count())
    t_all = time.perf_counter()
    i = 0
    while i < len(runs):
        theory, name, P, presentation = runs[i]
        model = models[name]
        row = (_set_row if name == "recall_co4" else _memory_row)(model, U, y, presentation, P, args.seed)
        if name == "recall_co4":
            row["synapses"] = _circuit_size(model, P, U.shape[1])[1]
        row.update(theory=theory, model=name, P=P, parameters=_parameters(model))
        doc["rows"].append(row)
        print(f"{theory:<15} {name:<11} P={P:<2} {presentation:g} s  accuracy {row['accuracy']:.3f} (float "
              f"{row['float_accuracy']:.3f}), {row['neurons']:,} neurons, {row['spikes_per_input']:,.0f} spikes and "
              f"{row['wall_per_input']:.2f} s per question", flush=True)
        if i == 0 and not (args.quick or args.no_matched):   # Co4 at the memory circuit's neuron count
            runs.insert(2, ("Co4", "recall_co4", matched_copies(models["recall_co4"], row["neurons"], U.shape[1]),
                            presentation))
        i += 1
    write_table_and_json(doc, args.out, t_all, _print_table)
    return 0
