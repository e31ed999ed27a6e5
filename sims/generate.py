"""Text written by cortex: a language model's circuit closed on itself, one character per presentation.

:func:`generate` presents a prompt, one character per presentation, to a causal language model's
circuit (:func:`ctmhsa.simulate_model`'s network); from the prompt's last character on, at the end
of each presentation's decoding window the class scores decoded from the output nucleus (the
read-out's class cells), divided by the temperature, give the next character's probabilities;
the character drawn is written into the input relays' table for the next presentation, inside the
same Brian2 run (the runtime device; :attr:`ctmhsa.sims.runners.Runner.on_read`). Nothing of the
exact model enters the loop: the reference is computed after the run, on the text the circuit
wrote, for the comparison only.

The circuit is built for a declared input range, never for the text: by default random strings of
the model's vocabulary (:func:`vocabulary_calibration`; every character equally likely), or a
calibration set given by the caller (e.g. training text).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

from ctmhsa.devices.registry import DEVICES, get_device
from ctmhsa.mapping import kvmemory
from ctmhsa.mapping.blocks import decode_model, input_rates
from ctmhsa.maths.reference import integer
from ctmhsa.maths.model import Model

from .io import atomic_savez, atomic_write_json, atomic_write_text, results_directory
from .jsonfile import to_json
from .language import check_temperature, draw, write
from .model import ModelResult, as_model, finish_model_run, prepare_model_run

__all__ = ["generate", "GenerateResult", "vocabulary_calibration", "GENERATE_LEVELS",
           "CALIBRATION_SEQUENCES", "CALIBRATION_LENGTH"]

GENERATE_LEVELS = ("float", "rate", "escape")
"""``float``: the exact model (:func:`ctmhsa.transformer_forward`); ``rate``, ``escape``: the circuit."""

CALIBRATION_SEQUENCES, CALIBRATION_LENGTH = 8, 64
"""The default calibration: this many random strings of the vocabulary, this many characters each."""


def vocabulary_calibration(model: Model, sequences: int = CALIBRATION_SEQUENCES,
                           length: int = CALIBRATION_LENGTH, seed: int = 0) -> np.ndarray:
    """Random strings of ``model.vocab``, one-hot ``(sequences, length, len(vocab))``: the declared
    range "any character of the vocabulary" (seeded, independent of any text shown)."""
    V = len(model.vocab)
    ids = np.random.default_rng(seed).integers(0, V, (sequences, length))
    return np.eye(V)[ids]


@dataclass
class GenerateResult:
    """Text written by :func:`generate`.

    Attributes
    ----------
    prompt : str
    text : str
        The prompt followed by the generated characters.
    scores : ndarray, shape (chars, classes)
        The class scores each generated character was drawn from (decoded from the circuit, or
        the exact model's at ``neuron="float"``), before the temperature.
    reference_scores : ndarray, shape (chars, classes)
        The exact model's scores at the same positions of the same text (computed after the run).
    neuron : str
    temperature : float
    seed : int
    result : ModelResult or None
        The circuit's run over the text it presented (rates, spikes, every stage against the
        exact model); ``None`` at ``neuron="float"``.
    wall : float
        Seconds.
    vocab : str
        The model's characters (class ``c`` is ``vocab[c]``).
    cell_class, cell_sign : ndarray, shape (N,), or None
        The class and sign (0: +, 1: −) each class cell (population ``classes``, the output
        nucleus of the read-out) represents; ``None`` at ``neuron="float"``.
    """

    prompt: str
    text: str
    scores: np.ndarray
    reference_scores: np.ndarray
    neuron: str
    temperature: float
    seed: int
    result: ModelResult | None
    wall: float
    vocab: str = ""
    cell_class: np.ndarray | None = None
    cell_sign: np.ndarray | None = None

    @property
    def generated(self) -> str:
        """The characters written after the prompt."""
        return self.text[len(self.prompt):]

    @property
    def agreement(self) -> float:
        """Fraction of the generated characters whose largest circuit score is the exact model's."""
        return float(np.mean(self.scores.argmax(axis=1) == self.reference_scores.argmax(axis=1)))

    def summary(self) -> dict:
        """JSON-ready: the text, settings, agreement and (circuit) the run's size and timing."""
        out = dict(prompt=self.prompt, text=self.text, generated=self.generated, neuron=self.neuron,
                   temperature=self.temperature, seed=self.seed, agreement=self.agreement, wall_s=self.wall)
        if self.result is not None:
            c = self.result.config
            out.update(model=c["model"], presentation=c["presentation"], n_neurons=c["n_neurons"],
                       n_synapses=c["n_synapses"], P=c["P"], dt=c["dt"], timings=self.result.timings,
                       logits_nrmse=float(self.result.metrics["logits"]["nrmse"]))
        return out

    def write_files(self, directory: str) -> None:
        """Write into ``directory`` (which must exist): ``text.txt`` (prompt and generated text),
        ``generate.json`` (:meth:`summary`, with ``vocab``), ``scores.npz`` (``scores``,
        ``reference_scores``, ``prompt_length``; with a circuit ``presentation``, ``warmup``,
        ``token_start`` (s; when in each presentation its character reaches the relays),
        ``cell_class``, ``cell_sign`` and the recorded spikes ``spikes.<population>.i`` / ``.t``,
        cell index and time in s) and, with a circuit, ``rates.json`` (its rate table); each atomically."""
        arrays = dict(scores=self.scores, reference_scores=self.reference_scores,
                      prompt_length=np.array(len(self.prompt)))
        if self.result is not None:
            arrays.update(presentation=np.array(self.result.config["presentation"]),
                          warmup=np.array(self.result.config["warmup"]), token_start=np.array(kvmemory.WRITE_WINDOW),
                          cell_class=self.cell_class,
                          cell_sign=self.cell_sign)
            for pop, (i, t) in (self.result.spikes or {}).items():
                arrays[f"spikes.{pop}.i"], arrays[f"spikes.{pop}.t"] = np.asarray(i), np.asarray(t)
        atomic_write_text(os.path.join(directory, "text.txt"), self.text)
        atomic_write_json(os.path.join(directory, "generate.json"), to_json(dict(self.summary(), vocab=self.vocab)))
        atomic_savez(os.path.join(directory, "scores.npz"), **arrays)
        if self.result is not None:
            atomic_write_json(os.path.join(directory, "rates.json"), list(self.result.rate_table()))

    def save(self, path) -> str:
        """:meth:`write_files` into a results directory (``kind`` "generate") written atomically
        (:func:`ctmhsa.sims.io.results_directory`). Returns the absolute path."""
        with results_directory(path, "path", kind="generate") as tmp:
            self.write_files(tmp)
        return os.path.abspath(os.fspath(path))


def _language_model(model) -> Model:
    model = as_model(model, co4=False)   # a closed loop over a causal transformer
    if not model.causal or model.vocab is None or model.embed_W is None:
        raise ValueError(f"model: {model.name or 'the model'} is not a language model (it needs causal=True, a "
                         "vocab and an input embedding of one-hot characters)")
    return model


def _check(model: Model, prompt, chars, neuron, temperature, seed) -> list:
    if not isinstance(prompt, str) or not prompt:
        raise TypeError(f"prompt: expected a non-empty string, got {prompt!r}")
    unknown = sorted(set(prompt) - set(model.vocab))
    if unknown:
        raise ValueError(f"prompt: characters not in the model's vocabulary: {''.join(unknown)!r}")
    integer("chars", chars, 1)
    if neuron not in GENERATE_LEVELS:
        raise ValueError(f"neuron: expected one of {', '.join(GENERATE_LEVELS)}, got {neuron!r}")
    check_temperature(temperature)
    integer("seed", seed, 0)
    return [model.vocab.index(c) for c in prompt]


def generate(model, prompt: str, chars: int, neuron: str = "escape", temperature: float = 1.0, seed: int = 0,
             presentation: float | None = None, calibration=None, lag: float | None = None,
             **options) -> GenerateResult:
    """Write ``chars`` characters after ``prompt``, the circuit reading what it wrote.

    Parameters
    ----------
    model : Model, str or path-like
        A causal language model (``vocab``, one-hot inputs), a model file or a shipped model's
        name (``"shakespeare"``).
    prompt : str
        Characters of ``model.vocab``, presented one per presentation.
    chars : int
        Characters to write.
    neuron : {"escape", "rate", "float"}
        The circuit's level, or ``"float"``: the exact model (no circuit).
    temperature : float
        The decoded scores are divided by it before the softmax; 0 takes the largest score.
    seed : int
        Seeds the draws and the simulation.
    presentation : float, optional
        Seconds per character (default: :func:`ctmhsa.simulate_model`'s, 0.2 s).
    calibration : array, shape (S, L, len(vocab)), optional
        One-hot strings the circuit is built for; default :func:`vocabulary_calibration`.
    lag : float, optional
        Seconds from each presentation's start to its decoding window (default
        :func:`ctmhsa.sims.model.causal_lag`); the next character is drawn at the window's end.
    **options
        As :func:`ctmhsa.simulate_model` (``P``, ``dt``, ``report``, ``record_spikes``, ...);
        the runtime device only (the loop is closed inside the run).

    Returns
    -------
    GenerateResult

    Raises
    ------
    ValueError, TypeError
        A bad argument (naming it), a model that is not a language model, a compiled device —
        before any network is built.

    Notes
    -----
    The operating range is checked before the run on the prompt (and placeholders); the text
    drawn is known only during the run: where it drives cells out of their range,
    ``result.diagnostics["range"]`` reports it.
    """
    t0 = time.perf_counter()
    model = _language_model(model)
    ids = _check(model, prompt, chars, neuron, temperature, seed)
    rng = np.random.default_rng(seed)
    V = len(model.vocab)
    if neuron == "float":
        given = [k for k, v in dict(presentation=presentation, calibration=calibration, lag=lag, **options).items()
                 if v is not None]
        if given:
            raise ValueError(f"{given[0]}: neuron='float' runs the exact model, no circuit")
        ids, scores = write(model, ids, chars, temperature, rng)
        return GenerateResult(prompt, prompt + "".join(model.vocab[c] for c in ids[len(prompt):]), scores,
                              scores.copy(), neuron, float(temperature), int(seed), None, time.perf_counter() - t0,
                              model.vocab)
    device = options.get("device") or getattr(options.get("run_options"), "device", None) or "runtime"
    if device in DEVICES and get_device(device).compiles:
        raise ValueError(f"device: generation closes its loop inside the run, in this process (the runtime "
                         f"device); {device!r} compiles the run")
    L, T = len(ids), len(ids) + chars - 1        # the last character drawn is not presented
    ids = ids + [ids[-1]] * (T - L)               # placeholders, each overwritten before it is presented
    cal = vocabulary_calibration(model) if calibration is None else calibration
    options.setdefault("seed", seed)
    run = prepare_model_run(model, np.eye(V)[ids], neuron, presentation, cal, lag, options)
    if get_device(run.ro.device).compiles:   # (a device set by other means than the keywords above)
        raise ValueError(f"device: generation runs on the runtime device, got {run.ro.device!r}")
    table = run.runner.built.stream_arrays["input"]
    lead, _ = kvmemory.token_lead(run.ro.presentation, run.ro.warmup)
    if table.values.shape[0] != lead + T:
        raise RuntimeError(f"generate: the input table has {table.values.shape[0]} rows, expected {lead + T}")
    # the relays' rates of each character (the encoding's map, fixed by the calibration)
    rows = input_rates(run.circuit, run.menc.rho["input"], model.embed(np.eye(V))[:, None, :])
    scores = []

    def on_read(k, observables):
        if k < L - 1:
            return
        s = np.asarray(decode_model(run.circuit, run.menc, observables)["logits"], float).reshape(-1)
        scores.append(s)
        c = draw(s, temperature, rng)
        if k + 1 < T:
            ids[k + 1] = c
            table.values[lead + k + 1] = rows[c]   # token k+1's row: read from the next presentation on
        else:
            ids.append(c)

    run.runner.on_read = on_read
    obs = run.runner.run(run.run_ro)
    run.tokens, run.ref = model.embed(np.eye(V)[ids[:T]])[:, None, :], None   # the text shown: its reference
    res = finish_model_run(run, obs, t0)
    ref = res.reference_logits[L - 1:]        # the exact model (the circuit's phi) on the text shown
    text = prompt + "".join(model.vocab[c] for c in ids[L:])
    cells = run.circuit.population("classes")
    return GenerateResult(prompt, text, np.array(scores), ref, neuron, float(temperature), int(seed), res,
                          time.perf_counter() - t0, model.vocab, cells.axis("class").copy(), cells.axis("sign").copy())
