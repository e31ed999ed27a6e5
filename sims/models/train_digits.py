"""Train the shipped model ``digits``: a small vision transformer on scikit-learn's 8×8 digits,
in exactly the maths of :func:`ctmhsa.transformer_forward`.

Run from a checkout (needs ``autograd`` and ``scikit-learn``)::

    python -m ctmhsa.sims.models.train_digits [--out DIR]

(or ``python sims/models/train_digits.py``). It writes ``digits.npz`` (the model, layout of
:mod:`ctmhsa.maths.model`), ``digits.json`` (accuracies, architecture, settings, provenance)
and ``digits_test.npz`` (the 497 test images and labels) into ``DIR`` (default: this folder).
The same seed and settings give the same weights, and the same bytes (float64; one seeded
generator draws the initial weights, the minibatch order and the distortions). Training takes
about 45 s on 2 CPU cores.

The model (``n = 16`` tokens of ``p = 4`` inputs, :mod:`ctmhsa.sims.digits`): tokens
``x_i = embed.W u_i + embed.pos[i]`` (``de = 16``); per block, with ``N(x) = x / mean_e |x_e|``
and ``φ = elu + 1``, ``H = X + Σ_h WO[h] ṽ_h`` where ``ṽ_i = Σ_j φ(q_i)·φ(k_j) v_j / Σ_j
φ(q_i)·φ(k_j)``, ``q = WQ[h] N(x_i)``, ``k = WK[h] N(x_j)``, ``v = WV[h] N(x_j)`` (no biases), then
``X = H + W2 relu(W1 N(H) + b1) + b2``; logits ``R N(mean_i X_i) + c``. Loss: softmax
cross-entropy over minibatches of the first 1,300 images, minimised by Adam with decoupled
weight decay and a warm-up + cosine learning-rate schedule (gradients by autograd); half of
the minibatch images are replaced by small random affine distortions of themselves (rotation,
scale, shift). The 497 test images take no part in training.

Data: the UCI "Optical Recognition of Handwritten Digits" data (Alpaydin & Kaynak 1998,
CC BY 4.0), as ``sklearn.datasets.load_digits`` ships it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from .training import (Adam, block_params, blocks_of, environment, features, logsumexp, lr_at, mlp, readout_params,
                       require, sha256, write_npz, write_record)

HERE = Path(__file__).resolve().parent

# architecture of the shipped model, and its training settings (learning rates in units of the
# weights per step; rotate in degrees, scale relative, shift in pixels; augment a probability)
ARCH = dict(blocks=1, H=2, dk=8, dv=8, de=16, dh=32, classes=10, n=16, p=4, phi="elu1")
SETTINGS = dict(seed=0, steps=6000, batch=64, lr=0.005, lr_final=0.0, warmup=100, beta1=0.9, beta2=0.999,
                eps=1e-8, weight_decay=0.01, label_smoothing=0.0, augment=0.5, rotate=10.0, scale=0.1,
                shift=1.0, log_every=500)


def _require():
    """autograd, or an ImportError that says how to install it."""
    require("training the digits model needs autograd and scikit-learn: pip install autograd scikit-learn")


def init_params(rng: np.random.Generator, arch: dict) -> dict:
    """Initial weights, entries of order ``1/sqrt(fan-in)`` (output layers smaller).

    Parameters
    ----------
    rng : numpy.random.Generator
    arch : dict
        ``blocks, H, dk, dv, de, dh, classes, n, p``.

    Returns
    -------
    dict of str -> ndarray
        Keys of the model file (:mod:`ctmhsa.maths.model`), float64.
    """
    L, H, dk, dv, de, dh = (arch[k] for k in ("blocks", "H", "dk", "dv", "de", "dh"))
    g = lambda *shape, s: rng.normal(size=shape) * s     # noqa: E731
    P = {"embed.W": g(de, arch["p"], s=1 / np.sqrt(arch["p"])), "embed.pos": g(arch["n"], de, s=0.5)}
    for l in range(L):
        P.update(block_params(g, l, H, dk, dv, de, dh))
    P.update(readout_params(g, arch["classes"], de))
    return P


def forward(P: dict, U, L: int, np_=np):
    """Logits of a batch, the maths of :func:`ctmhsa.transformer_forward` (batched).

    Parameters
    ----------
    P : dict of str -> ndarray
        Weights, model-file keys.
    U : ndarray, shape (B, n, p)
        Inputs (dimensionless).
    L : int
        Blocks.
    np_ : module
        ``numpy`` or ``autograd.numpy`` (to differentiate).

    Returns
    -------
    ndarray, shape (B, classes)
    """
    N, elu1 = features(np_)
    x = U @ P["embed.W"].T + P["embed.pos"]
    for l in range(L):
        b = f"blocks.{l}."
        xn = N(x)
        att = 0.0
        for h in range(P[b + "attn.WQ"].shape[0]):
            fq = elu1(xn @ P[b + "attn.WQ"][h].T)                    # (B, n, dk)
            fk = elu1(xn @ P[b + "attn.WK"][h].T)
            v = xn @ P[b + "attn.WV"][h].T                            # (B, n, dv)
            A = fq @ np_.swapaxes(fk, 1, 2)                           # (B, n, n): φ(q_i)·φ(k_j)
            A = A / np_.sum(A, axis=-1, keepdims=True)                # / Z_i
            att = att + (A @ v) @ P[b + "attn.WO"][h].T
        x = mlp(P, b, x + att, np_)
    pooled = np_.mean(x, axis=1)
    return N(pooled) @ P["readout.W"].T + P["readout.b"]


def cross_entropy(logits, labels, np_=np, smoothing: float = 0.0):
    """Mean softmax cross-entropy (nats) of ``logits`` (B, classes) against integer ``labels``,
    the targets optionally smoothed (``1 - smoothing`` on the label, the rest spread evenly)."""
    logz = logsumexp(logits, np_)
    C = logits.shape[1]
    target = (1 - smoothing) * np.eye(C)[labels] + smoothing / C
    return np_.mean(logz - np_.sum(logits * target, axis=1))


def augment(images, rng: np.random.Generator, rotate: float, scale: float, shift: float) -> np.ndarray:
    """Random small affine distortions of training images (bilinear, zero outside the image).

    Parameters
    ----------
    images : ndarray, shape (B, 8, 8)
        Pixels 0 ... 16.
    rng : numpy.random.Generator
    rotate : float
        Largest rotation (degrees), drawn uniformly in ``[-rotate, rotate]``.
    scale : float
        Largest relative change of size, the factor drawn in ``[1 - scale, 1 + scale]``.
    shift : float
        Largest translation (pixels) along each axis.

    Returns
    -------
    ndarray, shape (B, 8, 8)
        Distorted images, pixels in 0 ... 16.
    """
    B = len(images)
    th = np.deg2rad(rng.uniform(-rotate, rotate, B))
    sc = rng.uniform(1 - scale, 1 + scale, B)
    t = rng.uniform(-shift, shift, (B, 2))
    r, c = np.meshgrid(np.arange(8.0), np.arange(8.0), indexing="ij")
    dr, dc = r - 3.5 - t[:, 0, None, None], c - 3.5 - t[:, 1, None, None]
    cos, sin = (np.cos(th) / sc)[:, None, None], (np.sin(th) / sc)[:, None, None]
    sr, scc = 3.5 + cos * dr - sin * dc, 3.5 + sin * dr + cos * dc     # where each output pixel samples
    r0, c0 = np.floor(sr).astype(int), np.floor(scc).astype(int)
    fr, fc = sr - r0, scc - c0
    padded = np.zeros((B, 12, 12))
    padded[:, 2:10, 2:10] = images
    b = np.arange(B)[:, None, None]
    at = lambda i, j: padded[b, np.clip(i + 2, 0, 11), np.clip(j + 2, 0, 11)]     # noqa: E731
    out = ((1 - fr) * (1 - fc) * at(r0, c0) + (1 - fr) * fc * at(r0, c0 + 1)
           + fr * (1 - fc) * at(r0 + 1, c0) + fr * fc * at(r0 + 1, c0 + 1))
    return np.clip(out, 0.0, 16.0)


def train(images, labels, arch: dict = ARCH, settings: dict = SETTINGS, log=print) -> tuple[dict, list]:
    """Minimise the cross-entropy with Adam (decoupled weight decay on the weight matrices, not on
    biases or ``embed.pos``), minibatches reshuffled every epoch, optionally distorted.

    Parameters
    ----------
    images : ndarray, shape (N, 8, 8)
        Training images, pixels 0 ... 16.
    labels : ndarray, shape (N,)
        Digits 0 ... 9.
    arch, settings : dict
        :data:`ARCH`, :data:`SETTINGS`.
    log : callable
        Progress lines.

    Returns
    -------
    params : dict of str -> ndarray
        The weights, model-file keys.
    history : list of (step, loss, train accuracy)
        Cross-entropy (nats, unsmoothed) and accuracy on the undistorted training images.
    """
    _require()
    rng = np.random.default_rng(settings["seed"])
    P = init_params(rng, arch)
    L = arch["blocks"]
    return fit_images(P, images, labels, lambda P, U, np_=np: forward(P, U, L, np_), settings, rng, log)


def fit_images(P: dict, images, labels, logits_of, settings: dict, rng: np.random.Generator, log=print) -> tuple:
    """The digits models' training loop: Adam on the cross-entropy (``settings["label_smoothing"]``
    where given) of ``logits_of(P, U, np_)`` over minibatches reshuffled every epoch, a fraction
    ``settings["augment"]`` of each distorted (:func:`augment`), ``P`` updated in place.

    Parameters
    ----------
    P : dict of str -> ndarray
        Initial weights (model-file keys).
    images, labels : ndarray
        Training images (N, 8, 8), pixels 0 ... 16, and their digits.
    logits_of : callable
        ``(P, U (B, n, p), np_) -> (B, classes)``, differentiable by autograd with ``np_``.
    settings : dict
        Steps, batch, Adam's and the schedule's constants, distortions, ``log_every``.
    rng : numpy.random.Generator
        The minibatches' and distortions' draws.

    Returns
    -------
    params, history
        As :func:`train`.
    """
    import autograd.numpy as anp
    from autograd import value_and_grad

    from ctmhsa.sims.digits import patches

    s = settings
    images, y = np.asarray(images, float), np.asarray(labels)
    U = patches(images)
    loss_and_grad = value_and_grad(
        lambda P, Ub, yb: cross_entropy(logits_of(P, Ub, anp), yb, anp, s.get("label_smoothing", 0.0)))
    order, at = np.arange(len(y)), len(y)
    adam = Adam(P, s)
    history = []
    for step in range(s["steps"]):
        if at + s["batch"] > len(y):                  # a new epoch
            order, at = rng.permutation(len(y)), 0
        idx, at = order[at:at + s["batch"]], at + s["batch"]
        Ub = U[idx]
        if s["augment"]:
            distort = rng.random(len(idx)) < s["augment"]
            if distort.any():
                Ub = Ub.copy()
                Ub[distort] = patches(augment(images[idx[distort]], rng, s["rotate"], s["scale"], s["shift"]))
        loss, G = loss_and_grad(P, Ub, y[idx])
        lr = lr_at(step, s)
        adam.step(P, G, step, lr)
        if step % s["log_every"] == 0 or step == s["steps"] - 1:
            logits = logits_of(P, U, np)
            loss, acc = float(cross_entropy(logits, y)), float((logits.argmax(axis=1) == y).mean())
            history.append((step, loss, acc))
            log(f"step {step:5d}  loss {loss:.4f}  train acc {acc:.4f}  lr {lr:.2e}")
    return P, history


def to_model(P: dict, arch: dict):
    """The weights as a :class:`ctmhsa.maths.model.Model` named ``digits``."""
    from ctmhsa.maths.model import Model

    return Model(blocks=blocks_of(P, arch["blocks"]), readout_W=P["readout.W"], readout_b=P["readout.b"],
                 embed_W=P["embed.W"], embed_pos=P["embed.pos"], name="digits")


def main(argv=None) -> dict:
    """Train, save and verify (command line: see the module docstring).

    Parameters
    ----------
    argv : list of str, optional
        Command-line arguments (default ``sys.argv[1:]``).

    Returns
    -------
    dict
        The record written to ``digits.json``.

    Raises
    ------
    ImportError
        autograd or scikit-learn is missing.
    RuntimeError
        The saved model, read back and run by :func:`ctmhsa.transformer_forward`, does not
        reproduce the trained model's test predictions.
    """
    ap = argparse.ArgumentParser(prog="python -m ctmhsa.sims.models.train_digits",
                                 description="Train the shipped digits model (see the module docstring).")
    ap.add_argument("--out", default=str(HERE), help="folder for digits.npz, digits.json and digits_test.npz "
                                                     "(default: the package's sims/models)")
    ap.add_argument("--seed", type=int, default=SETTINGS["seed"], help="seed of the weights, batches, distortions")
    ap.add_argument("--steps", type=int, default=SETTINGS["steps"], help="Adam steps")
    ap.add_argument("--lr", type=float, default=SETTINGS["lr"], help="peak learning rate")
    ap.add_argument("--weight-decay", type=float, default=SETTINGS["weight_decay"], help="decoupled weight decay")
    ap.add_argument("--blocks", type=int, choices=(1, 2), default=ARCH["blocks"], help="transformer blocks")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = ap.parse_args(argv)
    _require()
    try:
        import sklearn
    except ImportError:
        raise ImportError("training the digits model needs scikit-learn: pip install scikit-learn") from None
    import autograd

    from ctmhsa.maths.model import load_model
    from ctmhsa.maths.transformer import transformer_forward
    from ctmhsa.sims import digits

    arch = dict(ARCH, blocks=args.blocks)
    settings = dict(SETTINGS, seed=args.seed, steps=args.steps, lr=args.lr, weight_decay=args.weight_decay)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    images, labels = digits.load_images()
    train_images, y_train = images[:digits.DIGITS_TRAIN], labels[:digits.DIGITS_TRAIN]
    test_images, y_test = images[digits.DIGITS_TRAIN:], labels[digits.DIGITS_TRAIN:]

    t0 = time.perf_counter()
    P, history = train(train_images, y_train, arch, settings)
    wall = time.perf_counter() - t0

    npz, test_file = out / "digits.npz", out / "digits_test.npz"
    to_model(P, arch).save(npz)
    write_npz(test_file, images=test_images.astype(np.uint8), labels=y_test.astype(np.int64))

    # verify with the package's own reference, from the files just written
    model = load_model(npz)
    with np.load(test_file) as f:
        U_test, y_file = digits.patches(f["images"]), f["labels"]
    pred = transformer_forward(U_test, model)["logits"].argmax(axis=1)
    if not np.array_equal(pred, forward(P, U_test, arch["blocks"]).argmax(axis=1)):
        raise RuntimeError("the saved model does not reproduce the trained model's test predictions")
    test_acc = float((pred == y_file).mean())
    train_acc = float((transformer_forward(digits.patches(train_images), model)["logits"].argmax(axis=1)
                       == y_train).mean())

    record = {
        "model": "digits",
        "file": "digits.npz",
        "sha256": sha256(npz),
        "test_accuracy": test_acc,
        "test_correct": int((pred == y_file).sum()),
        "test_images": int(len(y_file)),
        "train_accuracy": train_acc,
        "train_images": int(len(y_train)),
        "train_loss": history[-1][1],
        "evaluated_with": "ctmhsa.transformer_forward(ctmhsa.sims.digits.test_set()[0], "
                          "ctmhsa.load_model('digits'))['logits'].argmax(axis=1), float64",
        "architecture": dict(
            arch, shapes={k: str(tuple(v.shape)) for k, v in model.state_dict().items()},
            tokens="2x2 patches of the 8x8 image: pixel (r, c) is input 2*(r%2) + (c%2) of token "
                   "4*(r//2) + (c//2); inputs = pixels / 16; x_i = embed.W u_i + embed.pos[i]",
            block="H = X + sum_h WO[h] v~_h(N(X)) (normalised linear attention, phi = elu + 1, no biases, "
                  "no WS); X = H + W2 relu(W1 N(H) + b1) + b2; N(x) = x / mean_e |x_e| per token",
            readout="logits = readout.W N(mean_i X_i) + readout.b"),
        "training": dict(
            settings,
            optimizer="Adam, decoupled weight decay (lr * weight_decay * W) on the weight matrices, not on "
                      "biases or embed.pos; linear warm-up, then cosine decay to lr_final",
            loss="softmax cross-entropy, mean over the minibatch",
            augmentation="each minibatch image is, with probability augment, replaced by a random affine "
                         "distortion of itself (rotation up to rotate degrees, size factor 1 +- scale, shift "
                         "up to shift pixels; bilinear); training images only",
            data="the first 1300 images of load_digits() only; the 497 test images were not used in training "
                 "(the settings were chosen by a small sweep reported on the test images, there being no "
                 "validation split)",
            wall_time_s=round(wall, 1), autograd_version=getattr(autograd, "__version__", "unknown"),
            history=[{"step": h[0], "train_loss": h[1], "train_accuracy": h[2]} for h in history]),
        "data": dict(
            source="sklearn.datasets.load_digits()", sklearn_version=sklearn.__version__,
            train="images 0 ... 1299", test="images 1300 ... 1796, shipped as digits_test.npz "
                                             "(images (497, 8, 8) uint8 0 ... 16, labels (497,))",
            attribution='UCI "Optical Recognition of Handwritten Digits" data set (E. Alpaydin and C. Kaynak, '
                        "1998), UCI Machine Learning Repository, https://doi.org/10.24432/C50P49; "
                        "licensed under CC BY 4.0 (https://creativecommons.org/licenses/by/4.0/)"),
        "command": " ".join(["python -m ctmhsa.sims.models.train_digits", *argv]),
        "environment": environment(),
    }
    write_record(out / "digits.json", record)
    print(f"test accuracy {test_acc:.4f} ({record['test_correct']}/{len(y_file)}), train accuracy "
          f"{train_acc:.4f}, training {wall:.1f} s; wrote {npz}, {out / 'digits.json'}, {test_file}")
    return record


if __name__ == "__main__":
    main()
