"""A classification task read from spikes: a stream of inputs through one built model circuit.

:func:`classify` shows a model's circuit (:func:`ctmhsa.sims.model.simulate_model`) a stream of
inputs, one per ``presentation``, and reads each input's class from the read-out's class cells
(the largest decoded class score, ON minus OFF rates, in that presentation's window). The float
model's predictions come from :func:`ctmhsa.maths.transformer.transformer_forward` on the same
inputs; accuracy is against the labels, agreement against the float predictions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np


__all__ = ["classify", "Classification"]


@dataclass
class Classification:
    """Predictions of a model's circuit on a labelled stream.

    Attributes
    ----------
    predictions, float_predictions, labels : ndarray (T,)
        The circuit's classes (argmax of its decoded class scores), the float model's, the labels.
    scores, float_scores : ndarray (T, classes)
        Decoded class scores (logits) and exact ones.
    accuracy, float_accuracy, agreement : float
        Fractions of the T inputs.
    confusion : ndarray (classes, classes)
        Counts, rows the label, columns the circuit's class.
    neuron : str
    presentation : float
        Seconds per input.
    neurons : int
        Cells of the circuit.
    wall_per_input : float
        Wall time (s) per input of the run without compiling (building, simulating and
        reading out): what every later run on this machine pays. Until version 0.14 it included
        the first run's compilation (minutes), which made a cold run look 10x slower per image.
    compile_s : float
        Wall time (s) spent generating and compiling code (a first run on this machine compiles
        Cython modules: ``compiled``; a later one only generates and loads them).
    compiled : int
        Cython modules compiled for this run (0: all from the cache).
    spikes_per_input : float or None
        Spikes of every cell per input (the decoding windows' rates over a presentation; the
        spiking levels, ``None`` at the rate level).
    result : ModelResult
        The run (stages per presentation, metrics, rates, spikes of the last window).
    """

    predictions: np.ndarray
    float_predictions: np.ndarray
    labels: np.ndarray
    scores: np.ndarray
    float_scores: np.ndarray
    accuracy: float
    float_accuracy: float
    agreement: float
    confusion: np.ndarray
    neuron: str
    presentation: float
    neurons: int
    wall_per_input: float
    compile_s: float = 0.0
    compiled: int = 0
    spikes_per_input: float | None = None
    result: object = field(repr=False, default=None)

    def summary(self) -> dict:
        """Plain data (JSON): accuracies, agreement, sizes, timing."""
        return dict(neuron=self.neuron, presentation=self.presentation, inputs=int(len(self.labels)),
                    accuracy=self.accuracy, float_accuracy=self.float_accuracy, agreement=self.agreement,
                    neurons=self.neurons, wall_per_input=self.wall_per_input, compile_s=self.compile_s,
                    compiled=self.compiled, spikes_per_input=self.spikes_per_input)


def classify(model, inputs, labels, neuron: str = "escape", presentation: float = 0.2, **options) -> Classification:
    """Classify a labelled stream with one built circuit of ``model``.

    Parameters
    ----------
    model : Model, str or path-like
        A model with a read-out (``readout.W``), a model file or a shipped model's name.
    inputs : array, shape (T, n, p) or (T, n, de)
        One input per presentation (raw inputs where the model has an embedding).
    labels : array of int, shape (T,)
        Classes in ``0 ... classes - 1``.
    neuron : {"rate", "escape", "lif"}
    presentation : float
        Seconds per input.
    **options
        Further keywords of :func:`ctmhsa.sims.model.simulate_model` (``calibration``: the inputs
        the circuit is built for, e.g. the training set; ``P``, ``seed``, ``input_range``,
        ``report``, ...).

    Raises
    ------
    ValueError
        A model without a read-out, labels that do not match the inputs, and every refusal of
        :func:`ctmhsa.sims.model.simulate_model`.
    """
    from .model import as_model, simulate_model

    model = as_model(model)
    if model.readout_W is None:
        raise ValueError(f"model: {model.name or 'the model'} has no read-out (readout.W); nothing to classify")
    x = np.asarray(inputs, float)
    y = np.asarray(labels)
    classes = int(model.readout_W.shape[0])
    if x.ndim != 3:
        raise ValueError(f"inputs: expected a stream (T, n, p), got shape {x.shape}")
    if y.shape != (x.shape[0],) or not np.issubdtype(y.dtype, np.integer) or y.min() < 0 or y.max() >= classes:
        raise ValueError(f"labels: expected {x.shape[0]} integers in 0..{classes - 1}, got shape {y.shape}, "
                         f"dtype {y.dtype}")
    t0 = time.perf_counter()
    res = simulate_model(model, x, neuron=neuron, presentation=presentation, **options)
    wall = time.perf_counter() - t0
    compile_s = float(res.timings.get("compile", 0.0))
    exact = np.asarray(res.reference_logits, float).reshape(len(y), classes)   # the run's own exact model (its phi)
    scores = np.asarray(res.logits, float).reshape(len(y), classes)
    pred, fpred = scores.argmax(axis=1), exact.argmax(axis=1)
    confusion = np.zeros((classes, classes), int)
    np.add.at(confusion, (y, pred), 1)
    return Classification(predictions=pred, float_predictions=fpred, labels=y, scores=scores, float_scores=exact,
                          accuracy=float(np.mean(pred == y)), float_accuracy=float(np.mean(fpred == y)),
                          agreement=float(np.mean(pred == fpred)), confusion=confusion, neuron=neuron,
                          presentation=float(presentation), neurons=int(res.counts["total"]),
                          wall_per_input=(wall - compile_s) / len(y), compile_s=compile_s,
                          compiled=int(res.timings.get("compiled", 0)),
                          spikes_per_input=res.diagnostics.get("spikes_per_input"), result=res)
