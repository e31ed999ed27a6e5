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

__all__ = ["HELP", "add_arguments", "main", "FIGURE", "MODELS", "matched_copies"]

HELP = "Granier & Senn vs Co4 on the same cells and digits: accuracy, neurons, spikes and time per image"

MODELS = (("Granier & Senn", "digits"), ("Co4", "digits_co4"))
"""(theory, shipped model) compared."""


def add_arguments(parser) -> None:
    parser.add_argument("--images", type=count, default=100, help="test images (default 100; 497 in all)")
    parser.add_argument("--presentations", type=float, nargs="+", default=[0.2, 0.5],
                        help="seconds per image (default 0.2 0.5; the matched-neurons row at the first)")
    parser.add_argument("--P", type=count, default=4, help="cells per value of both models (default 4)")
    parser.add_argument("--no-matched", action="store_true",
                        help="skip the Co4 row at the transformer's neuron count")
    parser.add_argument("--seed", type=int, default=0, help="simulation seed (default 0)")
    parser.add_argument("--quick", action="store_true", help="smoke test: 10 images, no matched row")
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
    from ctmhsa.sims.classify import classify
    from ctmhsa.sims.digits import calibration_set, classify_options, test_set
    from ctmhsa.sims.model import as_model

    images, labels = test_set()
    n = 10 if args.quick else int(args.images)
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
    doc = dict(benchmark="theories", quick=bool(args.quick), images=n, presentations=presentations, P=args.P,
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
    print(f"\ntheories: {doc['images']} test digits, escape")
    print(f"{'theory':<16}{'s/image':>8}{'P':>3}{'params':>8}{'neurons':>9}{'synapses':>12}{'float':>7}{'spikes':>8}"
          f"{'agree':>7}{'spikes/img':>12}{'wall/img':>9}")
    for r in doc["rows"]:
        print(f"{r['theory']:<16}{r['presentation']:>8g}{r['P']:>3}{r['parameters']:>8,}{r['neurons']:>9,}{r['synapses']:>12,}"
              f"{r['float_accuracy']:>7.3f}{r['accuracy']:>8.3f}{r['agreement']:>7.3f}{r['spikes_per_input']:>12,.0f}"
              f"{r['wall_per_input']:>9.2f}")
