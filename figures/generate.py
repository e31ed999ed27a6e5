"""The figure of ``ctmhsa generate``: the class cells' spikes while the circuit writes, and the
per-character class probabilities it drew from, read from the results directory only
(``generate.json``, ``scores.npz``; :class:`ctmhsa.sims.generate.GenerateResult`)."""

from __future__ import annotations

import os
import sys

import numpy as np

from .style import plt, read_json_numbers, save

__all__ = ["draw_generate", "draw"]


def _shown(c: str) -> str:
    return {"\n": "⏎", " ": "␣"}.get(c, c)


def _probabilities(scores: np.ndarray, temperature: float) -> np.ndarray:
    """``softmax(scores / T)`` per row (``T = 0``: one-hot on the largest score), as drawn from."""
    if temperature == 0:
        return np.eye(scores.shape[1])[scores.argmax(axis=1)]
    z = (scores - scores.max(axis=1, keepdims=True)) / temperature
    p = np.exp(z)
    return p / p.sum(axis=1, keepdims=True)


def _raster(ax, doc: dict, arrays) -> None:
    """(a) Spikes of the class cells, grouped by class (+ cells above − cells), over the
    presentations; each presentation labelled with the character it showed."""
    text, L, vocab = doc["text"], int(arrays["prompt_length"]), doc["vocab"]
    P, W = float(arrays["presentation"]), float(arrays["warmup"])
    s0 = float(arrays["token_start"]) if "token_start" in arrays else 0.0   # a character's arrival in its presentation
    shown = text[:-1]                                     # the last character written is not presented
    i, t = arrays["spikes.classes.i"], arrays["spikes.classes.t"] - W
    cls, sign = arrays["cell_class"], arrays["cell_sign"]
    order = np.lexsort((sign, cls))                       # rows: class by class, + then −
    row = np.empty_like(order)
    row[order] = np.arange(len(order))
    keep = t >= 0
    ax.scatter(t[keep], row[i[keep]], s=0.3, c=np.where(sign[i[keep]] == 0, "#1f78b4", "#b2182b"),
               marker="|", linewidths=0.4, rasterized=True)
    for k, c in enumerate(shown):
        ax.axvline(k * P + s0, color="0.8", lw=0.4, zorder=0)
        ax.text((k + 0.5) * P + s0, len(order) * 1.01, _shown(c), ha="center", va="bottom", fontsize=7,
                color="0.55" if k < L else "black", clip_on=False)
    per = len(order) / len(vocab)
    step = max(1, len(vocab) // 12)
    ax.set_yticks([(c + 0.5) * per for c in range(0, len(vocab), step)])
    ax.set_yticklabels([_shown(vocab[c]) for c in range(0, len(vocab), step)], fontsize=7)
    ax.set_xlim(0, len(shown) * P + s0)
    ax.set_ylim(0, len(order))
    ax.set_xlabel("time from the first character (s)")
    ax.set_ylabel("class cells (by character)")
    ax.set_title("(a) the output nucleus (read-out class cells; blue +, red −); characters shown above "
                 "(prompt grey)", fontsize=8, pad=14)


def _scores(ax, doc: dict, arrays) -> None:
    """(b) Per generated character: the probabilities drawn from (the decoded scores / T), the
    character drawn (white dot) and the float model's most likely character on the same text (×)."""
    vocab, T = doc["vocab"], float(doc["temperature"])
    p = _probabilities(np.asarray(arrays["scores"], float), T)
    ref = np.asarray(arrays["reference_scores"], float).argmax(axis=1)
    gen = doc["generated"]
    im = ax.imshow(p.T, aspect="auto", origin="lower", cmap="Greys", vmin=0, vmax=max(float(p.max()), 1e-12),
                   interpolation="nearest")
    drawn = [vocab.index(c) for c in gen]
    ax.scatter(np.arange(len(drawn)), drawn, s=9, facecolors="white", edgecolors="#e66101", linewidths=0.7,
               label="drawn")
    ax.scatter(np.arange(len(ref)), ref, s=12, marker="x", c="#5e3c99", linewidths=0.7,
               label="float model's most likely")
    step = max(1, len(vocab) // 12)
    ax.set_yticks(range(0, len(vocab), step))
    ax.set_yticklabels([_shown(vocab[c]) for c in range(0, len(vocab), step)], fontsize=7)
    xs = range(0, len(gen), max(1, len(gen) // 40))
    ax.set_xticks(list(xs))
    ax.set_xticklabels([_shown(gen[k]) for k in xs], fontsize=7)
    ax.set_xlabel("character written")
    ax.set_ylabel("next character")
    ax.set_title(f"(b) probabilities drawn from (scores / T, T = {T:g}); agreement with the float model "
                 f"{100 * float(doc['agreement']):.0f} %", fontsize=8)
    ax.legend(fontsize=7, loc="upper right", framealpha=0.85)
    plt.colorbar(im, ax=ax, fraction=0.03, pad=0.01).ax.tick_params(labelsize=7)


def draw_generate(doc: dict, arrays, fig=None):
    """The figure from ``generate.json`` (``doc``) and ``scores.npz`` (``arrays``): (a) the class
    cells' raster where spikes were recorded, (b) the per-character probabilities. Returns it."""
    has_raster = "spikes.classes.i" in arrays and "cell_class" in arrays
    if fig is None:
        fig = plt.figure(figsize=(7.4, 6.4 if has_raster else 3.6), constrained_layout=True)
    axes = fig.subplots(2 if has_raster else 1, 1, squeeze=False)[:, 0]
    if has_raster:
        _raster(axes[0], doc, arrays)
    _scores(axes[-1], doc, arrays)
    size = f", {int(doc['n_neurons']):,} neurons, {1e3 * float(doc['presentation']):.0f} ms per character" \
        if "n_neurons" in doc else ""
    fig.suptitle(f"Written by the {doc['neuron']} circuit{size}: {doc['text']!r}"[:150], fontsize=8)
    return fig


def _caption(doc) -> str:
    where = ("the float model (no circuit)" if doc["neuron"] == "float" else
             f"the {doc['neuron']} level of the model's circuit, one character per "
             f"{1e3 * float(doc['presentation']):.0f} ms presentation")
    return (f"Text written by {where} after the prompt {doc['prompt']!r}: at the end of each presentation's "
            "decoding window the class scores decoded from the read-out's class cells, divided by the temperature "
            f"T = {float(doc['temperature']):g}, gave the next character's probabilities, and the character drawn "
            "was shown next. (a) Spikes of the class cells (each character's + cells blue, − cells red); grey "
            "lines where each character reached the thalamic relays, each labelled with the character it showed "
            "(prompt grey). "
            "(b) The probabilities of every next character (grey scale), the character drawn (dot) and the float "
            "model's most likely character on the same text (cross).")


def draw(directory: str, png: str | None = None) -> str:
    """Draw the figure of a ``ctmhsa generate`` results ``directory`` into ``png`` (default
    ``directory/generate.png``; with a PDF and a caption). Returns the PNG's path."""
    doc = read_json_numbers(os.path.join(directory, "generate.json"))
    with np.load(os.path.join(directory, "scores.npz")) as z:
        arrays = {k: z[k] for k in z.files}
    png = png or os.path.join(directory, "generate.png")
    fig = draw_generate(doc, arrays)
    out_dir, stem = os.path.dirname(os.path.abspath(png)), os.path.splitext(os.path.basename(png))[0]
    return save(fig, out_dir, stem, _caption(doc))[0]


if __name__ == "__main__":  # pragma: no cover
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: python -m ctmhsa.figures.generate DIRECTORY [OUT.png]  (redraws the generate figure)")
    print(draw(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
