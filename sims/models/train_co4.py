"""Train the shipped model ``digits_co4``: a Co4 block (Adeel, seed 003; :mod:`ctmhsa.maths.co4`)
on scikit-learn's 8×8 digits, in exactly the maths of :func:`ctmhsa.co4_forward`.

Run from a checkout (needs ``autograd``; the images are the shipped ``digits_train.npz`` and
``digits_test.npz``, so scikit-learn is not needed)::

    python -m ctmhsa.sims.models.train_co4 [--out DIR]

It writes ``digits_co4.npz`` (the model: ``co4.latents, co4.WQ, co4.WK, co4.WV, co4.WO,
readout.W, readout.b, embed.W, embed.pos`` and ``kind`` = ``"co4"``, read by
:func:`ctmhsa.load_model` as a :class:`ctmhsa.maths.co4.Co4Model`) and ``digits_co4.json``
(accuracies, architecture, settings, provenance) into ``DIR`` (default: this folder). The same
seed and settings give the same weights and the same bytes (float64; one seeded generator draws
the initial weights, the minibatch order and the distortions).

The model takes the tokens of the transformer ``digits`` (:mod:`ctmhsa.sims.models.train_digits`):
``n = 16`` patches of ``p = 4`` pixels / 16, ``x_i = embed.W u_i + embed.pos[i]`` (``de = 16``).
One Co4 block of ``L`` latents and ``H`` heads of width ``d``, with ``N(x) = x / mean_e |x_e|``
and ``φ = elu + 1``: ``Q = N(latents) WQᵀ``, ``K = N(X) WKᵀ``, ``V = N(X) WVᵀ``; the triadic loops
``Q_m[l] = mean_j coop(Q[l], (K[j] + V[j])/2)``, ``K_m[j] = mean_l coop(K[j], (Q[l] + V[j])/2)``,
``V_m[j] = mean_l coop(V[j], (Q[l] + K[j])/2)`` (the Cooperation Equation, elementwise);
``ṽ[l] = Σ_j φ(Q_m[l])·φ(K_m[j]) V_m[j] / Σ_j φ(Q_m[l])·φ(K_m[j])``; ``out = latents + Σ_h WO[h]
ṽ_h`` (the residual to the latents); logits ``R N(mean_l out) + c`` (the transformer's read-out). No MLP. Loss, optimiser, schedule and distortions are the
transformer's (:mod:`ctmhsa.sims.models.training`, :func:`~ctmhsa.sims.models.train_digits.augment`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from .train_digits import fit_images
from .training import environment, features, readout_params, require, sha256, write_npz, write_record

HERE = Path(__file__).resolve().parent

# architecture of the shipped model and its training settings (as train_digits' where they apply)
ARCH = dict(L=4, H=2, d=8, de=16, classes=10, n=16, p=4, phi="elu1", mod="cooperation")
SETTINGS = dict(seed=0, steps=6000, batch=64, lr=0.005, lr_final=0.0, warmup=100, beta1=0.9, beta2=0.999,
                eps=1e-8, weight_decay=0.01, augment=0.5, rotate=10.0, scale=0.1, shift=1.0, log_every=500)


def _require():
    require("training the Co4 digits model needs autograd: pip install autograd (or 'ctmhsa[language]')")


def init_params(rng: np.random.Generator, arch: dict) -> dict:
    """Initial weights: the embedding and read-out as the transformer's, the latents ``N(0, 1)``,
    the projections ``1/sqrt(de)`` and ``WO`` ``0.5/sqrt(H d)`` (model-file keys, float64); no
    ``embed.pos`` where ``arch`` has no token count ``n`` (the tokens then form a set)."""
    L, H, d, de = (arch[k] for k in ("L", "H", "d", "de"))
    g = lambda *shape, s: rng.normal(size=shape) * s     # noqa: E731
    P = {"embed.W": g(de, arch["p"], s=1 / np.sqrt(arch["p"]))}
    if arch.get("n"):        # a positional code for a fixed token count (none: a set of any size)
        P["embed.pos"] = g(arch["n"], de, s=0.5)
    P["co4.latents"] = g(L, de, s=1.0)
    for k in ("WQ", "WK", "WV"):
        P[f"co4.{k}"] = g(H, d, de, s=1 / np.sqrt(de))
    P["co4.WO"] = g(H, de, d, s=0.5 / np.sqrt(H * d))
    P.update(readout_params(g, arch["classes"], de))
    return P


def forward(P: dict, U, np_=np):
    """Logits of a batch, the maths of :func:`ctmhsa.co4_forward` (batched, Cooperation Equation).

    Parameters
    ----------
    P : dict of str -> ndarray
        Weights, model-file keys (``embed.pos`` optional: without it no positional code).
    U : ndarray, shape (B, n, p)
        Inputs (dimensionless).
    np_ : module
        ``numpy`` or ``autograd.numpy`` (to differentiate).

    Returns
    -------
    ndarray, shape (B, classes)
    """
    N, elu1 = features(np_)

    def coop(R, C):      # ctmhsa.cooperation, in np_
        return np_.clip(R * R + 2.0 * R + C * (1.0 + np_.abs(R)), 0.0, 6.0)

    xn = N(U @ P["embed.W"].T + P.get("embed.pos", 0.0))          # (B, n, de)
    ln = N(P["co4.latents"])                                      # (L, de)
    att = 0.0
    for h in range(P["co4.WQ"].shape[0]):
        q = (ln @ P["co4.WQ"][h].T)[None, :, None, :]             # (1, L, 1, d)
        k = (xn @ P["co4.WK"][h].T)[:, None, :, :]                # (B, 1, n, d)
        v = (xn @ P["co4.WV"][h].T)[:, None, :, :]
        q_m = np_.mean(coop(q, (k + v) / 2.0), axis=2)            # (B, L, d): over the tokens
        k_m = np_.mean(coop(k, (q + v) / 2.0), axis=1)            # (B, n, d): over the latents
        v_m = np_.mean(coop(v, (q + k) / 2.0), axis=1)
        A = elu1(q_m) @ np_.swapaxes(elu1(k_m), 1, 2)             # (B, L, n): φ(q_m,l)·φ(k_m,j)
        A = A / np_.sum(A, axis=-1, keepdims=True)
        att = att + (A @ v_m) @ P["co4.WO"][h].T                  # (B, L, de)
    h = P["co4.latents"] + att                                    # (B, L, de): the residual to the latents
    return N(np_.mean(h, axis=1)) @ P["readout.W"].T + P["readout.b"]


def train(images, labels, arch: dict = ARCH, settings: dict = SETTINGS, log=print) -> tuple[dict, list]:
    """Minimise the cross-entropy with Adam (decoupled weight decay on the weight matrices, not on
    the latents, biases or ``embed.pos``), minibatches reshuffled every epoch, half distorted: the
    loop of :func:`ctmhsa.sims.models.train_digits.fit_images`, arguments and results as
    :func:`ctmhsa.sims.models.train_digits.train`'s (:data:`ARCH`, :data:`SETTINGS` here)."""
    _require()
    rng = np.random.default_rng(settings["seed"])
    return fit_images(init_params(rng, arch), images, labels, forward, settings, rng, log)


def to_model(P: dict, name: str = "digits_co4"):
    """The weights as a :class:`ctmhsa.maths.co4.Co4Model` named ``name`` (no positional code
    where ``P`` has no ``embed.pos``)."""
    from ctmhsa.maths.co4 import Co4Model

    return Co4Model(*(P["co4." + k] for k in ("latents", "WQ", "WK", "WV", "WO")), readout_W=P["readout.W"],
                    readout_b=P["readout.b"], embed_W=P["embed.W"], embed_pos=P.get("embed.pos"), name=name)


def predict(model, U) -> np.ndarray:
    """The classes :func:`ctmhsa.co4_forward` gives the inputs ``U`` (B, n, p), one token set at a time."""
    from ctmhsa.maths.co4 import co4_forward

    return np.array([int(np.argmax(co4_forward(x, model)["logits"])) for x in model.embed(U)])


def main(argv=None) -> dict:
    """Train, save and verify (command line: see the module docstring).

    Parameters
    ----------
    argv : list of str, optional
        Command-line arguments (default ``sys.argv[1:]``).

    Returns
    -------
    dict
        The record written to ``digits_co4.json``.

    Raises
    ------
    ImportError
        autograd is missing.
    RuntimeError
        The saved model, read back by :func:`ctmhsa.load_model` and run by
        :func:`ctmhsa.co4_forward`, does not reproduce the trained model's test predictions.
    """
    ap = argparse.ArgumentParser(prog="python -m ctmhsa.sims.models.train_co4",
                                 description="Train the shipped Co4 digits model (see the module docstring).")
    ap.add_argument("--out", default=str(HERE), help="folder for digits_co4.npz and digits_co4.json "
                                                     "(default: the package's sims/models)")
    ap.add_argument("--seed", type=int, default=SETTINGS["seed"], help="seed of the weights, batches, distortions")
    ap.add_argument("--steps", type=int, default=SETTINGS["steps"], help="Adam steps")
    ap.add_argument("--lr", type=float, default=SETTINGS["lr"], help="peak learning rate")
    ap.add_argument("--latents", type=int, default=ARCH["L"], help="latent queries L")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = ap.parse_args(argv)
    if args.latents < 1 or args.steps < 1:
        ap.error("--latents and --steps: expected at least 1")
    _require()
    import autograd

    from ctmhsa.maths.co4 import Co4Model
    from ctmhsa.maths.model import load_model
    from ctmhsa.sims import digits

    arch = dict(ARCH, L=args.latents)
    settings = dict(SETTINGS, seed=args.seed, steps=args.steps, lr=args.lr)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with np.load(digits.TRAIN_FILE) as f:
        train_images, y_train = f["images"], f["labels"].astype(np.int64)
    U_test, y_test = digits.test_set()

    t0 = time.perf_counter()
    P, history = train(train_images, y_train, arch, settings)
    wall = time.perf_counter() - t0

    npz = out / "digits_co4.npz"
    write_npz(npz, **to_model(P).state_dict())

    # verify with the package's own reference, from the file just written
    model = load_model(npz)
    if not isinstance(model, Co4Model):
        raise RuntimeError(f"load_model read {npz} as a {type(model).__name__}, not a Co4Model")
    pred = predict(model, U_test)
    if not np.array_equal(pred, forward(P, U_test).argmax(axis=1)):
        raise RuntimeError("the saved model does not reproduce the trained model's test predictions")
    test_acc = float((pred == y_test).mean())
    train_acc = float((predict(model, digits.patches(train_images)) == y_train).mean())
    L, H, d, de, classes, n, p = (arch[k] for k in ("L", "H", "d", "de", "classes", "n", "p"))
    state = to_model(P).state_dict()
    record = {
        "model": "digits_co4",
        "kind": "co4",
        "file": "digits_co4.npz",
        "sha256": sha256(npz),
        "test_accuracy": test_acc,
        "test_correct": int((pred == y_test).sum()),
        "test_images": int(len(y_test)),
        "test_correct_first_50": int((pred[:50] == y_test[:50]).sum()),
        "train_accuracy": train_acc,
        "train_images": int(len(y_train)),
        "train_loss": history[-1][1],
        "parameters": int(sum(a.size for k, a in state.items() if k != "kind")),
        "evaluated_with": "m = ctmhsa.load_model('digits_co4'); ctmhsa.co4_forward(x, m)['logits'].argmax() for "
                          "x in m.embed(ctmhsa.sims.digits.test_set()[0]), float64",
        "architecture": dict(
            arch, shapes={k: str(tuple(a.shape)) for k, a in state.items() if k != "kind"},
            tokens="2x2 patches of the 8x8 image (ctmhsa.sims.digits.patches); inputs = pixels / 16; "
                   "x_i = embed.W u_i + embed.pos[i]",
            block="per head: Q = N(latents) WQ^T, K = N(X) WK^T, V = N(X) WV^T; Q_m[l] = mean_j coop(Q[l], "
                  "(K[j] + V[j])/2), K_m[j] = mean_l coop(K[j], (Q[l] + V[j])/2), V_m[j] = mean_l coop(V[j], "
                  "(Q[l] + K[j])/2), coop(R, C) = ReLU6(R^2 + 2R + C(1 + |R|)) elementwise; v~[l] = sum_j "
                  "phi(Q_m[l]).phi(K_m[j]) V_m[j] / sum_j phi(Q_m[l]).phi(K_m[j]), phi = elu + 1; "
                  "out = latents + sum_h WO[h] v~_h; N(x) = x / mean_e |x_e| per row; no MLP, no biases",
            readout="logits = readout.W N(mean_l(out_l)) + readout.b (the transformer's read-out)"),
        "training": dict(
            settings,
            optimizer="Adam, decoupled weight decay (lr * weight_decay * W) on the weight matrices, not on "
                      "co4.latents, biases or embed.pos; linear warm-up, then cosine decay to lr_final",
            loss="softmax cross-entropy, mean over the minibatch",
            augmentation="each minibatch image is, with probability augment, replaced by a random affine "
                         "distortion of itself (train_digits.augment); training images only",
            data="the 1300 images of digits_train.npz only; the 497 test images were not used in training",
            wall_time_s=round(wall, 1), autograd_version=getattr(autograd, "__version__", "unknown"),
            history=[{"step": h[0], "train_loss": h[1], "train_accuracy": h[2]} for h in history]),
        "data": dict(train="sims/models/digits_train.npz (images 0 ... 1299 of sklearn's load_digits)",
                     test="sims/models/digits_test.npz (images 1300 ... 1796)",
                     attribution="as digits.json: UCI Optical Recognition of Handwritten Digits (Alpaydin and "
                                 "Kaynak 1998), CC BY 4.0"),
        "command": " ".join(["python -m ctmhsa.sims.models.train_co4", *argv]),
        "environment": environment(),
    }
    write_record(out / "digits_co4.json", record)
    print(f"test accuracy {test_acc:.4f} ({record['test_correct']}/{len(y_test)}), train accuracy {train_acc:.4f}, "
          f"training {wall:.1f} s; wrote {npz}, {out / 'digits_co4.json'}")
    return record


if __name__ == "__main__":
    main()
