"""``ctmhsa bench digits``: handwritten digits read by a vision transformer computed in spikes.

The shipped model (``ctmhsa.load_model("digits")``, trained by ``sims/models/train_digits.py`` on
the first 1,300 images of scikit-learn's 8×8 digits) reads the held-out test images (the other
497, shipped with it: :func:`ctmhsa.sims.digits.test_set`), streamed one after another through one
built circuit per level and presentation time, each circuit built for the training images
(``calibration``: :func:`ctmhsa.sims.digits.calibration_set`; never the test images) (:func:`ctmhsa.sims.classify.classify`); each
image's class is the largest class score decoded from the read-out's class cells in its window.
Per level and presentation time: accuracy, agreement with the float model's predictions,
neurons, wall time per image, the confusion matrix and example images' class scores.

Prints a table and writes JSON; the command line then draws the figure from the JSON
(:func:`ctmhsa.figures.digits.draw`).
"""

from __future__ import annotations

import os
import time

import numpy as np

from ctmhsa.neurons.models import FIRING
from ctmhsa.sims.io import versions

from .common import add_out_argument, count, write_table_and_json

FIGURE = "ctmhsa.figures.digits"
"""The module whose ``draw(json_path)`` the command line calls after the run."""

__all__ = ["HELP", "add_arguments", "main", "FIGURE", "EXAMPLES", "image_of", "classification_row"]

HELP = "scikit-learn digits read by the shipped vision transformer's circuit: accuracy and agreement vs presentation"

EXAMPLES = 8
"""Test images whose class scores the JSON keeps (the first ones)."""


def add_arguments(parser) -> None:
    parser.add_argument("--presentations", type=float, nargs="+", default=[0.05, 0.1, 0.2, 0.5],
                        help="seconds per image at the escape level (default 0.05 0.1 0.2 0.5)")
    parser.add_argument("--rate-presentation", type=float, default=0.5,
                        help="seconds per image at the rate level (default 0.5); 0: skip the rate level")
    parser.add_argument("--images", type=count, default=None, help="test images (default all 497)")
    parser.add_argument("--P", type=count, default=None, help="cells per value (default: simulate_model's, 4)")
    parser.add_argument("--seed", type=int, default=0, help="simulation seed (default 0)")
    parser.add_argument("--model", default="digits", help="model file or shipped name (default digits)")
    parser.add_argument("--firing", choices=FIRING, default="population",
                        help="how the escape cells fire (default population; ctmhsa.sims.digits.cells)")
    parser.add_argument("--quick", action="store_true", help="smoke test: 20 images, 0.2 s, rate at 0.3 s")
    add_out_argument(parser, "bench_results/digits.json")


def image_of(patches) -> np.ndarray:
    """The 8×8 image (pixels / 16) of one input's 2×2 patches ``(16, 4)``: pixel (r, c) is
    position ``2 (r % 2) + c % 2`` of token ``4 (r // 2) + c // 2``."""
    p = np.asarray(patches, float).reshape(4, 4, 2, 2)          # (pr, pc, r % 2, c % 2)
    return p.transpose(0, 2, 1, 3).reshape(8, 8)


def classification_row(c, examples: int, images, index=None) -> dict:
    """A classification's summary, confusion matrix, predictions and its first ``examples`` inputs
    (``images``, the ones classified), each named by its test-set index (``index``: one per image;
    default ``0, 1, ...``)."""
    out = c.summary()
    out["confusion"] = c.confusion.tolist()
    index = range(len(c.labels)) if index is None else [int(i) for i in index]
    out["examples"] = [dict(index=index[i], image=image_of(images[i]).tolist(), label=int(c.labels[i]),
                            prediction=int(c.predictions[i]),
                            float_prediction=int(c.float_predictions[i]), scores=c.scores[i].tolist(),
                            float_scores=c.float_scores[i].tolist()) for i in range(min(examples, len(c.labels)))]
    out["predictions"] = c.predictions.tolist()
    return out


def main(args) -> int:
    from ctmhsa.sims.classify import classify
    from ctmhsa.sims.model import as_model
    from ctmhsa.sims.digits import calibration_set, cells, classify_options, test_set

    model = as_model(args.model)
    params = cells(args.firing)["params"]
    images, labels = test_set()
    cal = calibration_set()   # every digits circuit is built for the training images, never the test ones
    count = len(labels) if args.images is None else int(args.images)
    presentations, rate_p = list(args.presentations), args.rate_presentation
    if args.quick:
        count, presentations, rate_p = min(count, 20), [0.2], 0.3
    if not 1 <= count <= len(labels):
        raise ValueError(f"--images: expected 1..{len(labels)}, got {count}")
    if not 0 <= rate_p < float("inf"):      # 0 skips the rate level
        raise ValueError(f"--rate-presentation: expected seconds >= 0 (0: no rate-level row), got {rate_p}")
    bad = [p for p in presentations if not 0 < p < float("inf")]
    if bad:
        raise ValueError(f"--presentations: expected seconds > 0, got {bad}")
    x, y = images[:count], labels[:count]
    opts = {} if args.P is None else {"P": args.P}
    doc = dict(benchmark="digits", quick=bool(args.quick), model=model.name, source=model.source, images=count,
               presentations=presentations, seed=args.seed, P=args.P, rows=[], versions=versions(),
               cpus=os.cpu_count())
    t_all = time.perf_counter()
    if rate_p:
        c = classify(model, x, y, neuron="rate", presentation=rate_p, calibration=cal,
                     **classify_options("rate", rate_p, args.firing))
        doc["rows"].append(classification_row(c, EXAMPLES, x))
        _progress_line(c)
    for p in presentations:
        c = classify(model, x, y, neuron="escape", presentation=p, seed=args.seed, calibration=cal,
                     **classify_options("escape", p, args.firing, model=model), **opts)
        doc["rows"].append(classification_row(c, EXAMPLES, x))
        _progress_line(c)
    doc["float_accuracy"] = c.float_accuracy
    doc["firing"], doc["params"], doc["tau_relay"] = args.firing, params.to_dict(), params.tau_relay
    doc["labels"] = y.tolist()
    doc["float_predictions"] = c.float_predictions.tolist()
    write_table_and_json(doc, args.out, t_all, _print_table)
    return 0


def _progress_line(c) -> None:
    print(f"{c.neuron:<6} {c.presentation:>5g} s  accuracy {c.accuracy:.4f}  agreement {c.agreement:.4f}  "
          f"({c.neurons:,} neurons, {c.wall_per_input:.2f} s per image)", flush=True)


def _print_table(doc) -> None:
    print(f"\ndigits: {doc['images']} test images, float accuracy {doc['float_accuracy']:.4f}; escape cells: "
          f"{doc.get('firing', 'poisson')} firing, tau_m {1e3 * doc.get('params', {}).get('tau_m', 0.01):g} ms, "
          f"relays {1e3 * doc['tau_relay']:g} ms")
    print(f"{'level':<8}{'s/image':>8}{'neurons':>10}{'accuracy':>10}{'agreement':>11}{'wall/image':>12}")
    for r in doc["rows"]:
        print(f"{r['neuron']:<8}{r['presentation']:>8g}{r['neurons']:>10,}{r['accuracy']:>10.4f}{r['agreement']:>11.4f}"
              f"{r['wall_per_input']:>11.2f}s")
