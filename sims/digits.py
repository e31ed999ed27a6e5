"""scikit-learn's 8×8 handwritten digits as token sets of 2×2 patches, for the shipped model
``digits`` (:func:`ctmhsa.load_model`, trained by ``sims/models/train_digits.py``).

An 8×8 image (pixels 0 ... 16) becomes ``n = 16`` tokens of ``p = 4`` inputs: the image is cut
into 2×2 patches, token ``t = 4·pr + pc`` being the patch in patch row ``pr`` and patch column
``pc`` (both 0 ... 3), and the four pixels of a patch are its inputs in row-major order. Pixel
``(r, c)`` is therefore input ``2·(r % 2) + (c % 2)`` of token ``4·(r // 2) + (c // 2)``. The
inputs are the pixels divided by 16 (dimensionless, 0 ... 1).

The split is fixed: the first :data:`DIGITS_TRAIN` = 1,300 images of
``sklearn.datasets.load_digits()`` train, the remaining :data:`DIGITS_TEST` = 497 test. The test
images ship with the package (``sims/models/digits_test.npz``: ``images`` (497, 8, 8) uint8 in
0 ... 16 as scikit-learn gives them, ``labels`` (497,)), so :func:`test_set` needs numpy only;
:func:`train_set` needs scikit-learn.

Data: the scikit-learn digits are a copy of the test set of the UCI "Optical Recognition of
Handwritten Digits" data set (E. Alpaydin and C. Kaynak, 1998; UCI Machine Learning Repository,
https://doi.org/10.24432/C50P49), licensed under CC BY 4.0
(https://creativecommons.org/licenses/by/4.0/). ``digits_test.npz`` redistributes 497 of its
images unchanged, and ``digits_train.npz`` its first 1,300 (the training set, shipped as the
circuit's calibration set).

>>> from ctmhsa.sims.digits import test_set          # doctest: +SKIP
>>> import ctmhsa                                    # doctest: +SKIP
>>> U, y = test_set()                                # (497, 16, 4), (497,)  # doctest: +SKIP
>>> logits = ctmhsa.transformer_forward(U, ctmhsa.load_model("digits"))["logits"]  # doctest: +SKIP
>>> (logits.argmax(axis=1) == y).mean()              # doctest: +SKIP
"""

from __future__ import annotations

import math
import numbers
from pathlib import Path

import numpy as np

__all__ = ["DIGITS_TRAIN", "DIGITS_TEST", "N_TOKENS", "PATCH_INPUTS", "TEST_FILE", "TRAIN_FILE", "patches",
           "load_images", "train_set", "test_set", "calibration_set", "TAU_RELAY", "FIRING", "cells", "SETTLE",
           "MIN_WINDOW", "window_lag", "classify_options", "AUTO_COMPILED_IMAGES", "digits_device",
           "LIF_CLASS_LATENCY", "LIF_L5_COUPLING", "LIF_FAST_BELOW", "LIF_FAST_COPIES"]

TAU_RELAY = 20e-3
"""``CellParams.tau_relay`` (s) of the digits circuit with Poisson (escape-noise) cells: a stream
of images needs a faster chain than the 40 ms default (set for accuracy on one token set): at the
rate level the logits were within 0.3-4 % of the float model's 0.2 s after an image's start with
10 ms, 17-137 % with 40 ms; at the escape level 20 ms with 0.5 s per image agreed on 12 of 12
images, 10 ms on 9 (docs/digits.md)."""

FIRING = "population"
"""How the digits circuit's cells fire by default (:data:`ctmhsa.neurons.models.FIRING`): each
value's copies as one perfect integrator, and each macrocolumn's interneurons in turn
(docs/digits.md: 95.6 % at 0.2 s per image in version 0.10, against 26 % with Poisson cells)."""


SETTLE = 0.125
"""s after an image's start at which the digits circuit of integrators (:func:`cells`) is read,
where the presentation leaves at least :data:`MIN_WINDOW` after it (:func:`window_lag`). Chosen
on training images only (the first 150, 0.2 s each, agreement with the float model: lag 0.10 s
96.7 %, 0.12 and 0.13 s 99.3 %, 0.14 and 0.15 s 98.7 %, 0.16 s 96.7 %; docs/digits.md): the
chain settles in about 0.12 s, and a later start leaves a shorter window."""

CO4_SETTLE = 0.15
"""The same for a Co4 model's circuit (``load_model("digits_co4")``: the triad, the key-value memory
and its read-out, a longer chain than the transformer's microcolumns). Chosen on training images
only (the first 60, 0.2 s each, seed 0, agreement with the float model: lag 0.125 s 98.3 %,
logits NRMSE 0.105; 0.15 s 100 %, 0.059; docs/co4.md)."""

MIN_WINDOW = 0.05
"""Shortest decoding window (s) :func:`window_lag` leaves after :data:`SETTLE`; shorter
presentations are read from their second half."""


def window_lag(presentation: float, firing: str = FIRING, settle: float = SETTLE):
    """The decoding lag (s) of the digits circuit: for integrators, :data:`SETTLE` where the
    presentation is at least ``SETTLE + MIN_WINDOW`` long (0.2 s: the window 0.125-0.2 s), half
    the presentation otherwise (0.1 s: 0.05-0.1 s); ``None`` (the models' default, half the
    presentation) for Poisson cells.

    Until version 0.9.0 the lag was ``min(SETTLE, presentation / 2)``, which read 0.2 s images
    from 0.1 s, not from the 0.125 s chosen on the training images (docs/digits.md)."""
    from ctmhsa.neurons.firing import get_firing

    if get_firing(firing).poisson:
        return None
    presentation = float(presentation)
    return settle if presentation >= settle + MIN_WINDOW - 1e-12 else 0.5 * presentation


def cells(firing: str = FIRING) -> dict:
    """``firing`` and ``params`` of the digits circuit. Perfect integrators
    (``"population"``, ``"regular"``) run in the high-conductance state
    (:data:`ctmhsa.neurons.params.HIGH_CONDUCTANCE`: 5 ms somata and dendrites) with 5 ms relays:
    their counts carry little noise, so the chain can be fast without the relays' rectified pools
    counting fluctuations as signal (the bias that set :data:`TAU_RELAY` for Poisson cells)."""
    from ctmhsa.neurons.firing import get_firing
    from ctmhsa.neurons.params import HIGH_CONDUCTANCE, CellParams

    if get_firing(firing).poisson:
        return dict(firing=firing, params=CellParams(tau_relay=TAU_RELAY))
    return dict(firing=firing, params=HIGH_CONDUCTANCE.replace(tau_relay=5e-3))


AUTO_COMPILED_IMAGES = 256
"""``ctmhsa digits --device auto`` (the default) runs ``cpp_standalone`` from this many images on.
Measured at 0.2 s per image, escape level (docs/digits.md, version 0.15): the runtime device
(Cython) took 0.48-0.57 s per image, the compiled project 0.196 s for all 497 (whole call, one
thread, load 1.1-1.5), after compiling once per model shape and stream length (75-150 s, against
about 160 s for the runtime's Cython modules the first time). From 256 images on (a table of 259 rows or
more: the project of the default 497 images) a compiled run is faster once compiled. The rate level
likewise (version 0.15, 2.5 ms steps, 100 images, load 0.9-1.1): runtime 0.40 s per image,
compiled 0.16-0.17 s after compiling once (27-34 s)."""


AUTO_COMPILED_IMAGES_LIF = 32
"""The same at the lif level, whose somata's loops the compiled project vectorises
(:mod:`ctmhsa.neurons.simd`). Measured at 1.5 s per image (20 test images, seed 1, one thread,
load 1.1-1.3, version 0.15): the runtime device (Cython modules already compiled) 4.85 s per
image, the compiled project 1.63 s after compiling once (78 s), both 100 % (logits NRMSE 0.221 and
0.252): faster from about 24 images on."""


LIF_FAST_BELOW = 1.0
"""Presentations (s per image) shorter than this take, at the lif level, L5 somata of a
:data:`LIF_L5_COUPLING` coupling and class cells read :data:`LIF_CLASS_LATENCY` late; longer ones
the soma types' own couplings in one window. Measured on training images 300-319 (P = 4, seed
1): at 1.0 s the own couplings agreed with float on 100 % (logits NRMSE 0.299, ṽ 0.189, L5 PT
14.1 Hz), the fast ones on 95 % (0.308, 0.310, L5 PT 20.9 Hz); at 0.5 s the fast ones on 93 %
and the own ones on 47 % (docs/lif.md, "Digits at 0.5 s")."""

LIF_FAST_COPIES = 32
"""Cells per value (``P``) of the digits circuit at the lif level below :data:`LIF_FAST_BELOW`
per image, unless given: with 4, L5 PT's drive is noisy enough for its adapting soma to rectify
it into rate above its 20 Hz bound (21.0 Hz at 0.5 s, 50 test images; 16.0 Hz with 16) and 88 %
of the images agreed with float. 32 was chosen on training images: of the 62 with the float
model's smallest margins, 83.9 % agreed at 16 and 93.5 % at 32 (docs/lif.md, "Digits at 0.5 s",
"Every test image"). Since the linear cells fold their copies it runs as fast as 16 did (4.1 s
per 0.5 s image compiled, 546,270 neurons)."""

LIF_L5_COUPLING = 0.1
"""Dendro-somatic coupling (s) of the digits circuit's L5 IT and PT somata at the lif level for
presentations shorter than :data:`LIF_FAST_BELOW` (``coupling`` of
:func:`ctmhsa.sims.model.simulate_model`), in place of their soma type's 0.2 s, which lags an
image per 0.5 s by about 0.3 s. The same calibrated law (the coupling is upstream of it). 50 ms
until later in version 0.15: L5's adapting soma answers fluctuations of its drive faster than its
adaptation (144 ms) more steeply than its calibrated law (2.0x at 2 Hz, 3.3x at 4 Hz,
:func:`ctmhsa.neurons.conductance.modulation_gain`), so a short coupling let
the L5 IT cells' counting noise through to L5 PT amplified (ṽ's error 0.24, of which 99 % was
shared by PT's copies, against 0.16 for the IT cells' own sum). 100 ms filters that band: on the
124 training images with the float model's smallest margins (P = 32, seed 1) ṽ 0.23 -> 0.14 and the
class cells' logits 0.233 -> 0.179 (read :data:`LIF_CLASS_LATENCY` late; docs/lif.md, "The
adapting soma's fast gain"). Chosen on training images only."""

LIF_CLASS_LATENCY = 0.25
"""s after the other stages at which the lif level's class cells are read (``latency`` of
:func:`ctmhsa.sims.model.simulate_model`; at most half the presentation): their response latency.
The chain from the relays to the class cells (L2/3 somata with a 0.2 s coupling, L5 with
:data:`LIF_L5_COUPLING` and a 144 ms adaptation, the MLP's hidden cells) follows an image later
than its relays, so a window in the presentation's second half read the class cells while they
still showed part of the previous image. Chosen on training images only: 0.15 on 30 of them at
16 cells per value (0.10-0.20 agreed on all 30), 0.2 on the 124 with the float model's smallest
margins at 32 (120 agreed against 117 at 0.15, the logits' error 0.238 against 0.262), then 0.25
with L5's 100 ms coupling on the same images (the logits' error 0.179 against 0.196 at 0.2 and
0.208 at 0.3; docs/lif.md, "Digits at 0.5 s", "The adapting soma's fast gain")."""


def digits_device(device: str, images: int, threads=None, neuron: str = "escape") -> str:
    """The device ``ctmhsa digits`` runs on: ``device`` itself, or for ``"auto"``
    ``cpp_standalone`` where ``threads`` are asked for or ``images`` is at least
    :data:`AUTO_COMPILED_IMAGES` (:data:`AUTO_COMPILED_IMAGES_LIF` at the lif level), where it
    was measured faster, and a C++ compiler is found (``$CXX``, ``g++``, ``c++`` or ``clang++``
    on the path), else ``runtime``."""
    from ctmhsa.neurons.levels import get_level

    if device != "auto":
        return device
    from ctmhsa.devices.registry import compiler_found

    compiler = compiler_found()
    least = AUTO_COMPILED_IMAGES_LIF if get_level(neuron).lif else AUTO_COMPILED_IMAGES
    wanted = threads is not None or images >= least
    return "cpp_standalone" if compiler and wanted else "runtime"


def classify_options(neuron: str, presentation: float, firing: str = FIRING, model=None) -> dict:
    """Keywords of :func:`ctmhsa.sims.classify.classify` for the digits circuit at ``neuron``
    (``ctmhsa digits`` and ``ctmhsa bench digits``): at the escape level the cells of
    ``firing`` (:func:`cells`) and the decoding lag (:func:`window_lag`; :data:`CO4_SETTLE` for a
    Co4 ``model``, whose chain is longer); at the rate level, which has no spikes, the same time
    constants (``params``), the largest step they allow that divides ``presentation`` (``dt``,
    2.5 ms at 0.2 s: the rate level is read at its fixed point, which that step keeps;
    docs/digits.md) and the models' default window; at
    the lif level the models' default cells and window (its somata have their own constants;
    docs/lif.md, "Models at the lif level"), below :data:`LIF_FAST_BELOW` per image with L5 somata
    of a :data:`LIF_L5_COUPLING` coupling (``coupling``) and the class cells read
    :data:`LIF_CLASS_LATENCY` later (``latency``), :data:`LIF_FAST_COPIES` cells per value (``P``;
    a caller's own ``P`` replaces it)."""
    from ctmhsa.maths.co4 import Co4Model
    from ctmhsa.neurons.levels import get_level
    from ctmhsa.sims.options import CircuitOptions, max_dt

    if isinstance(presentation, bool) or not (isinstance(presentation, numbers.Real) and 0 < presentation < math.inf):
        raise ValueError(f"presentation: expected seconds per image > 0, got {presentation!r}")
    opts = cells(firing)
    if get_level(neuron).escape:   # escape-noise somata: the cells of firing
        settle = CO4_SETTLE if isinstance(model, Co4Model) else SETTLE
        return dict(opts, lag=window_lag(presentation, firing, settle))
    if get_level(neuron).lif:
        if presentation >= LIF_FAST_BELOW:
            return {}
        return dict(P=LIF_FAST_COPIES, coupling={"l5it": LIF_L5_COUPLING, "l5pt": LIF_L5_COUPLING},
                    latency={"classes": min(LIF_CLASS_LATENCY, 0.5 * presentation)})
    bound = max_dt(CircuitOptions(neuron=neuron, params=opts["params"]))[0]
    steps = max(math.ceil(presentation / bound - 1e-9), 4)     # whole steps, four at least (a decoding window)
    return dict(params=opts["params"], dt=presentation / steps)

DIGITS_TRAIN = 1300
"""Training images: the first 1,300 of ``sklearn.datasets.load_digits()``."""

DIGITS_TEST = 497
"""Test images: the remaining 497 (1,797 in all)."""

N_TOKENS = 16
"""Tokens per image (4 × 4 patches)."""

PATCH_INPUTS = 4
"""Inputs per token (the 2 × 2 pixels of a patch)."""

PIXEL_MAX = 16
"""Largest pixel value of the digits (pixels are integers 0 ... 16)."""

TEST_FILE = Path(__file__).resolve().parent / "models" / "digits_test.npz"
"""The shipped test images and labels."""

TRAIN_FILE = Path(__file__).resolve().parent / "models" / "digits_train.npz"
"""The shipped training images and labels (the circuit's calibration set: :func:`calibration_set`)."""


def patches(images) -> np.ndarray:
    """Images as token sets of 2×2 patches.

    Parameters
    ----------
    images : array, shape (N, 8, 8) or (N, 64), or one image (8, 8)
        Pixel values in 0 ... 16 (the counts of ``load_digits``; dimensionless), rows first.

    Returns
    -------
    ndarray, shape (N, 16, 4), or (16, 4) for one image
        ``pixels / 16`` (0 ... 1): pixel ``(r, c)`` is entry ``2·(r % 2) + (c % 2)`` of token
        ``4·(r // 2) + (c // 2)``.

    Raises
    ------
    ValueError
        Another shape, NaN/inf, or a pixel outside 0 ... 16.
    TypeError
        A non-numeric array.
    """
    a = np.asarray(images)
    if a.dtype == object or not (np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating)):
        raise TypeError(f"images: expected a numeric array, got dtype {a.dtype}")
    one = a.shape == (8, 8)
    if one:
        a = a[None]
    if a.ndim == 2 and a.shape[1] == 64:
        a = a.reshape(-1, 8, 8)
    if a.ndim != 3 or a.shape[1:] != (8, 8):
        raise ValueError(f"images: expected shape (N, 8, 8), (N, 64) or (8, 8), got {np.shape(images)}")
    a = a.astype(float)
    if not np.all(np.isfinite(a)):
        raise ValueError("images: contains NaN or infinite values")
    if a.size and (a.min() < 0 or a.max() > PIXEL_MAX):
        raise ValueError(f"images: pixels must lie in 0 ... {PIXEL_MAX} (load_digits' counts), got "
                         f"{a.min():g} ... {a.max():g}")
    # (N, pr, r % 2, pc, c % 2) -> (N, pr, pc, r % 2, c % 2) -> (N, 4·pr + pc, 2·(r % 2) + c % 2)
    out = a.reshape(-1, 4, 2, 4, 2).transpose(0, 1, 3, 2, 4).reshape(-1, N_TOKENS, PATCH_INPUTS) / PIXEL_MAX
    return out[0] if one else out


def load_images() -> tuple[np.ndarray, np.ndarray]:
    """All 1,797 digits of scikit-learn, in its order.

    Returns
    -------
    images : ndarray, shape (1797, 8, 8), uint8
        Pixels 0 ... 16.
    labels : ndarray, shape (1797,), int64
        Digits 0 ... 9.

    Raises
    ------
    ImportError
        scikit-learn is not installed.
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise ImportError("the digits' training images come from scikit-learn: pip install scikit-learn "
                          "(the test images ship with ctmhsa: ctmhsa.sims.digits.test_set())") from None
    d = load_digits()
    return d.images.astype(np.uint8), d.target.astype(np.int64)


def train_set() -> tuple[np.ndarray, np.ndarray]:
    """The first :data:`DIGITS_TRAIN` digits as token sets.

    Returns
    -------
    inputs : ndarray, shape (1300, 16, 4)
        Pixels / 16 as patches (:func:`patches`; dimensionless).
    labels : ndarray, shape (1300,), int64

    Raises
    ------
    ImportError
        scikit-learn is not installed (``pip install scikit-learn``).
    """
    images, labels = load_images()
    return patches(images[:DIGITS_TRAIN]), labels[:DIGITS_TRAIN]


def calibration_set() -> np.ndarray:
    """The training digits as token sets, read from the shipped file (numpy only): the inputs a
    circuit of the ``digits`` model is built for (``simulate_model(..., calibration=...)``: its
    gains and operating points come from them, never from the test images).

    Returns
    -------
    ndarray, shape (1300, 16, 4)
        Pixels / 16 as patches (:func:`patches`; dimensionless).
    """
    return _shipped(TRAIN_FILE, "training")[0]


def _shipped(path: Path, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Patches and labels of a shipped image file (``images`` uint8 0 ... 16, ``labels``)."""
    if not path.is_file():
        raise FileNotFoundError(f"digits: the {what} images {path} are missing from the installation; regenerate "
                                "them with python -m ctmhsa.sims.models.train_digits")
    with np.load(path) as f:
        return patches(f["images"]), f["labels"].astype(np.int64)


def test_set() -> tuple[np.ndarray, np.ndarray]:
    """The :data:`DIGITS_TEST` test digits as token sets, read from the shipped file (numpy only).

    Returns
    -------
    inputs : ndarray, shape (497, 16, 4)
        Pixels / 16 as patches (:func:`patches`; dimensionless).
    labels : ndarray, shape (497,), int64

    Raises
    ------
    FileNotFoundError
        ``sims/models/digits_test.npz`` is missing from the installation.
    """
    return _shipped(TEST_FILE, "test")


test_set.__test__ = False      # not a pytest test when imported into a test module
