"""Train the shipped causal model ``recall``: in-context recall (multi-query associative recall,
:mod:`ctmhsa.sims.recall`) by the paper's key-value memory, in exactly the maths of a causal
:func:`ctmhsa.transformer_forward` (:mod:`ctmhsa.sims.models.train_causal`).

Run from a checkout (needs ``autograd``)::

    OMP_NUM_THREADS=1 python -m ctmhsa.sims.models.train_recall [--out DIR]

It writes ``recall.npz`` (the model, layout of :mod:`ctmhsa.maths.model`) and ``recall.json``
(accuracies, architecture, settings, provenance) into ``DIR`` (default: this folder). The same
seed and settings give the same weights and the same bytes (float64; one seeded generator draws
the initial weights, each step's load and its sequences). Training takes about 40 s on one core.

The model: one block, one head (``dk = 8``, ``dv = 4``, ``de = 16``), no MLP, the memory
unnormalised (the paper's, ``ṽ_t = M_t φ(q_t)``) and forgetting nothing (λ = 1: the facts must be
held to the last query); ``x_t = embed.W u_t`` on the ``p = 17`` input entries, logits
``readout.W N(X_t) + readout.b`` over the 8 values per token. Training: each Adam step one
minibatch of 64 sequences of ``pairs`` facts and as many queries, ``pairs`` drawn uniformly from
1 ... :data:`P_TRAIN` per step (so that one model serves every load), the loss the softmax
cross-entropy at the query positions only.

Chosen by a small sweep (5,000 steps each, held-out accuracy at 8 pairs, 2,000 sequences): the
same with ``dv = 8`` 99.8 % (``dk = 16``: 100 %; with an MLP of 32 hidden units 99.8 %), with
``dv = 4`` 100 % at seeds 0 and 1; smaller ones fail: ``de = 8`` 79 %, ``dk = dv = 4`` 53 %. The
normalised memory learns too, less well (``dv = 4``: 98.2 %).

Seeds: :data:`SETTINGS` ``seed`` (0) seeds the generator of the initial weights and of the
training sequences, each minibatch drawn by :func:`ctmhsa.sims.recall.recall_sequences` with a
seed the generator draws in ``[2**32, 2**62)``; the held-out sequences use seeds below ``2**32``
(:data:`EVAL_SEED`), never used in training. At small loads the task has few distinct sequences
(one pair: 64), so these are held-out draws rather than unseen sequences; at 8 pairs there are
``8!·8^8·8! ≈ 2.7e16``.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ctmhsa.sims import recall
from ctmhsa.sims.models.training import environment, training_args, write_record
from ctmhsa.sims.models.train_causal import check_against_reference, forward, require, sha256, to_model, train

HERE = Path(__file__).resolve().parent

P_TRAIN = 8
"""Largest number of facts per training sequence (loads 1 ... P_TRAIN, queries = pairs)."""

EVAL_SEED = 1
"""Seed of the held-out sequences (:func:`ctmhsa.sims.recall.recall_sequences`; < 2**32, so
never a training minibatch's)."""

EVAL_SEQUENCES = 2000
"""Held-out sequences per load or length in ``recall.json``."""

QUERIES = (8, 16, 32, 64, 120)
"""Queries after :data:`P_TRAIN` facts in the accuracy-vs-length table (T = 16 ... 128)."""

ARCH = dict(blocks=1, H=1, dk=8, dv=4, de=16, dh=0, classes=recall.VALUES,
            p=recall.input_size(recall.KEYS, recall.VALUES), forget=1.0, normalize=False, phi="elu1")
SETTINGS = dict(seed=0, steps=5000, batch=64, lr=0.01, lr_final=0.0, warmup=100, beta1=0.9, beta2=0.999,
                eps=1e-8, weight_decay=0.0, clip=1.0, log_every=500)


def batches(step: int, rng: np.random.Generator, batch: int = SETTINGS["batch"], p_train: int = P_TRAIN):
    """A step's minibatch for :func:`ctmhsa.sims.models.train_causal.train`: ``batch`` sequences of a
    load drawn from 1 ... ``p_train``, queries = pairs, targets 0 where not scored."""
    pairs = int(rng.integers(1, p_train + 1))
    s = recall.recall_sequences(batch, pairs, seed=int(rng.integers(2 ** 32, 2 ** 62)))
    return s.inputs, np.maximum(s.targets, 0), s.mask


def accuracy(model, pairs: int, queries: int | None = None, n: int = EVAL_SEQUENCES, seed: int = EVAL_SEED):
    """Float recall accuracy of ``model`` by :func:`ctmhsa.transformer_forward` on held-out sequences."""
    from ctmhsa.maths.transformer import transformer_forward

    s = recall.recall_sequences(n, pairs, queries, seed=seed)
    return recall.recall_accuracy(transformer_forward(s.inputs, model)["logits"], s.targets, s.mask)


def main(argv=None) -> dict:
    """Train, save, verify and record (``argv``: the command line of the module docstring, default
    ``sys.argv[1:]``); returns the record written to ``recall.json``.

    Raises ``ImportError`` without autograd, and ``RuntimeError`` where the saved model, read back and
    run by :func:`ctmhsa.transformer_forward`, does not reproduce the trained model's predictions.
    """
    args, argv = training_args("ctmhsa.sims.models.train_recall", "the shipped recall model",
                               "recall.npz and recall.json", SETTINGS, argv)
    require()
    import autograd

    from ctmhsa.maths.model import load_model
    from ctmhsa.maths.transformer import transformer_forward

    arch, settings = dict(ARCH), dict(SETTINGS, seed=args.seed, steps=args.steps)
    out = Path(args.out or HERE)
    out.mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter()
    P, history = train(batches, arch, settings)
    wall = time.perf_counter() - t0

    npz = out / "recall.npz"
    to_model(P, arch, "recall", vocab=None).save(npz)

    # verify with the package's own reference, from the file just written
    model = load_model(npz)
    held = recall.recall_sequences(EVAL_SEQUENCES, P_TRAIN, seed=EVAL_SEED)
    logits = transformer_forward(held.inputs, model)["logits"]
    if not np.array_equal(logits.argmax(axis=-1), forward(P, held.inputs, arch).argmax(axis=-1)):
        raise RuntimeError("the saved model does not reproduce the trained model's predictions")
    err = check_against_reference(P, arch, held.inputs[:50], vocab=None)

    by_pairs = {str(p): accuracy(model, p) for p in range(1, recall.KEYS + 1)}
    by_length = {str(P_TRAIN + q): accuracy(model, P_TRAIN, q) for q in QUERIES}
    record = {
        "model": "recall",
        "file": "recall.npz",
        "sha256": sha256(npz),
        "accuracy": by_pairs[str(P_TRAIN)],
        "trained_pairs": P_TRAIN,
        "accuracy_by_pairs": by_pairs,
        "accuracy_by_length": by_length,
        "evaluated_with": f"ctmhsa.sims.recall.recall_accuracy(ctmhsa.transformer_forward(s.inputs, "
                          f"ctmhsa.load_model('recall'))['logits'], s.targets, s.mask), s = "
                          f"recall_sequences({EVAL_SEQUENCES}, pairs, queries, seed={EVAL_SEED}); by_pairs: "
                          f"queries = pairs; by_length: pairs = {P_TRAIN}, T = pairs + queries; float64",
        "reference_difference": err,
        "task": dict(keys=recall.KEYS, values=recall.VALUES, p=arch["p"],
                     inputs="a fact: one-hot key (entries 0...keys-1) and one-hot value (keys...keys+values-1); "
                            "a query: one-hot key and the flag (last entry); facts first, then queries of "
                            "stored keys (each once per round); scored at queries only"),
        "architecture": dict(
            arch, shapes={k: str(tuple(v.shape)) for k, v in model.state_dict().items()},
            block="H = X + sum_h WO[h] v~_h, v~_t = M_t phi(q_t), M_t = forget M_{t-1} + v_t phi(k_t)^T "
                  "(unnormalised), q, k, v of N(X_t), phi = elu + 1, no biases, no MLP; "
                  "N(x) = x / mean_e |x_e| per token",
            readout="logits_t = readout.W N(X_t) + readout.b; x_t = embed.W u_t (no positional code)"),
        "training": dict(
            settings, p_train=P_TRAIN,
            sequences=f"per step {settings['batch']} sequences of pairs facts and pairs queries, pairs uniform "
                      f"in 1...{P_TRAIN}, recall_sequences(seed drawn in [2**32, 2**62) by the generator "
                      f"seeded with seed)",
            optimizer="Adam, gradients clipped to global norm clip; linear warm-up, then cosine decay to "
                      "lr_final (train_causal.train)",
            loss="softmax cross-entropy over the query positions of the minibatch",
            eval_seed=EVAL_SEED,
            wall_time_s=round(wall, 1), autograd_version=getattr(autograd, "__version__", "unknown"),
            history=[{"step": s, "train_loss": loss} for s, loss in history
                     if s % settings["log_every"] == 0 or s == settings["steps"] - 1]),
        "command": " ".join(["OMP_NUM_THREADS=1 python -m ctmhsa.sims.models.train_recall", *argv]),
        "environment": environment(),
    }
    write_record(out / "recall.json", record)
    print(f"held-out accuracy at {P_TRAIN} pairs {record['accuracy']:.4f}, training {wall:.1f} s; "
          f"wrote {npz}, {out / 'recall.json'}")
    return record


if __name__ == "__main__":
    main()
