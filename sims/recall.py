"""In-context recall (multi-query associative recall), synthetic and seeded, for the shipped causal
model ``recall`` (:func:`ctmhsa.load_model`, trained by ``sims/models/train_recall.py``).

A sequence first states ``pairs`` facts "key → value", then asks ``queries`` times for the value of
a stored key; at every query the model must name the value, from what its key-value memory holds.
This is the multi-query associative recall (MQAR) of Arora et al. 2023 (Zoology: measuring and
improving recall in efficient language models, arXiv:2312.04927), the synthetic probe of the
in-context retrieval that induction heads perform (Olsson et al. 2022, In-context learning and
induction heads, Transformer Circuits Thread).

Design: the circuit has no positional code and one forgetting factor λ for all its blocks, so it
cannot bind a key to the value of the NEXT token as the usual MQAR does (that needs a previous-
token head). A key and its value therefore arrive together in ONE token, a *fact*, whose input row
holds the key and the value two-hot; a *query* token carries a stored key and the query flag. Per
head the memory writes ``M_t = λ M_{t-1} + v_t φ(k_t)ᵀ`` at every token and the query reads
``ṽ_t = M_t φ(q_t)``: one block suffices.

Input rows (``p = keys + values + 1`` entries, dimensionless 0 or 1): entries ``0 ... keys-1`` the
one-hot key, ``keys ... keys+values-1`` the one-hot value (all zero on a query), the last the query
flag (1 on a query). Tokens ``0 ... pairs-1`` are the facts, the rest the queries, ``T = pairs +
queries``. A sequence's keys are distinct, drawn at random from the ``keys`` symbols; each value is
drawn at random from the ``values`` symbols (repeats allowed). Queries ask for stored keys: when
``queries ≤ pairs`` each stored key at most once; more queries go round the stored keys in rounds,
each round a fresh random order of all of them. Only query positions are scored (``mask``), the
target being the queried key's value index (``-1`` elsewhere).

>>> from ctmhsa.sims.recall import recall_sequences, recall_accuracy   # doctest: +SKIP
>>> import ctmhsa                                                     # doctest: +SKIP
>>> s = recall_sequences(200, pairs=8, seed=1)                          # doctest: +SKIP
>>> model = ctmhsa.load_model("recall")                                # doctest: +SKIP
>>> logits = ctmhsa.transformer_forward(s.inputs, model)["logits"]     # (200, 16, 8)  # doctest: +SKIP
>>> recall_accuracy(logits, s.targets, s.mask)                         # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ctmhsa.maths.reference import integer

__all__ = ["KEYS", "VALUES", "RecallSequences", "input_size", "recall_sequences", "recall_accuracy"]

KEYS = 8
"""Default number of key symbols ``K``."""

VALUES = 8
"""Default number of value symbols ``V`` (the model's classes)."""


@dataclass(frozen=True)
class RecallSequences:
    """A batch of recall sequences (:func:`recall_sequences`).

    Attributes
    ----------
    inputs : ndarray, shape (n, T, keys + values + 1), float
        Input rows (two-hot key and value on a fact, one-hot key and flag on a query).
    targets : ndarray, shape (n, T), int
        Value index at query positions, -1 at facts.
    mask : ndarray, shape (n, T), bool
        The scored (query) positions.
    pairs, queries, keys, values : int
        As given; ``T = pairs + queries``.
    """

    inputs: np.ndarray
    targets: np.ndarray
    mask: np.ndarray
    pairs: int
    queries: int
    keys: int
    values: int

    @property
    def T(self) -> int:
        """Tokens per sequence, ``pairs + queries``."""
        return self.pairs + self.queries


def input_size(keys: int = KEYS, values: int = VALUES) -> int:
    """Entries of an input row, ``p = keys + values + 1``."""
    return integer("keys", keys, 1) + integer("values", values, 1) + 1


def recall_sequences(n: int, pairs: int, queries: int | None = None, keys: int = KEYS, values: int = VALUES,
                     seed: int = 0) -> RecallSequences:
    """Seeded recall sequences: ``pairs`` facts, then ``queries`` queries of stored keys.

    Parameters
    ----------
    n : int
        Sequences (≥ 1).
    pairs : int
        Facts per sequence, 1 ... ``keys`` (the keys of a sequence are distinct).
    queries : int, optional
        Queries per sequence (≥ 1; default ``pairs``).
    keys, values : int
        Key and value symbols (≥ 1; default :data:`KEYS`, :data:`VALUES`).
    seed : int
        Seed of the generator (``numpy.random.default_rng``); equal arguments give equal sequences.

    Returns
    -------
    RecallSequences

    Raises
    ------
    TypeError, ValueError
        An argument of the wrong type or out of range (the message names it).
    """
    n = integer("n", n, 1)
    keys, values = integer("keys", keys, 1), integer("values", values, 1)
    pairs = integer("pairs", pairs, 1)
    if pairs > keys:
        raise ValueError(f"pairs: {pairs} facts need as many distinct keys, but keys = {keys}")
    queries = pairs if queries is None else integer("queries", queries, 1)
    rng = np.random.default_rng(integer("seed", seed, 0))
    T = pairs + queries
    stored = np.argsort(rng.random((n, keys)), axis=1)[:, :pairs]           # distinct keys per sequence
    vals = rng.integers(0, values, size=(n, pairs))
    rounds = -(-queries // pairs)
    order = np.concatenate([np.argsort(rng.random((n, pairs)), axis=1) for _ in range(rounds)], axis=1)
    asked = order[:, :queries]                                                # which fact each query asks

    rows = np.arange(n)[:, None]
    inputs = np.zeros((n, T, keys + values + 1))
    inputs[rows, np.arange(pairs), stored] = 1.0
    inputs[rows, np.arange(pairs), keys + vals] = 1.0
    q = pairs + np.arange(queries)
    inputs[rows, q, stored[rows, asked]] = 1.0
    inputs[:, q, -1] = 1.0
    targets = np.full((n, T), -1, dtype=np.int64)
    targets[:, pairs:] = vals[rows, asked]
    mask = np.zeros((n, T), dtype=bool)
    mask[:, pairs:] = True
    return RecallSequences(inputs=inputs, targets=targets, mask=mask, pairs=pairs, queries=queries, keys=keys,
                           values=values)


def recall_accuracy(logits, targets, mask) -> float:
    """Fraction of scored positions whose largest logit is the target.

    Parameters
    ----------
    logits : array, shape (n, T, values) or (T, values)
    targets : array of int, shape (n, T) or (T,)
    mask : array of bool, shape (n, T) or (T,)
        Scored positions (at least one).

    Returns
    -------
    float
        In [0, 1].

    Raises
    ------
    ValueError
        The shapes disagree, or nothing is scored.
    """
    logits, targets, mask = np.asarray(logits, float), np.asarray(targets), np.asarray(mask, bool)
    if logits.ndim < 2 or logits.shape[:-1] != targets.shape:
        raise ValueError(f"logits: expected shape {targets.shape} + (values,) to match targets, got {logits.shape}")
    if mask.shape != targets.shape:
        raise ValueError(f"mask: expected shape {targets.shape} to match targets, got {mask.shape}")
    if not mask.any():
        raise ValueError("mask: no position is scored")
    return float(np.mean(logits.argmax(axis=-1)[mask] == targets[mask]))
