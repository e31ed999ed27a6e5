"""``training.png`` of one ``ctmhsa train`` results directory, drawn from its ``training.npz``:
the exact loss vs step of the circuit trained at each level (rate, escape ...) beside exact
gradient descent on the reference, with the loss of the circuit's decoded output (left), and
the cosine between the circuit's gradient and the exact one per step, averaged over the four
matrices, with its running median (right).

Usage::

    python -m ctmhsa.figures.training RESULTS_DIR [OUT.png]
"""

from __future__ import annotations

import os
import sys

import numpy as np

from ctmhsa.maths.stages import symbol
from ctmhsa.sims.io import atomic_path

from .style import DPI, check_fonts, plt

__all__ = ["draw_training", "LEVEL_COLOURS"]

LEVEL_COLOURS = {"rate": "#1f78b4", "escape": "#e31a1c", "lif": "#33a02c"}


def _levels(data) -> list[str]:
    return [k[: -len(".exact_loss")] for k in data if k.endswith(".exact_loss")]


def draw_training(directory: str, out: str | None = None) -> str:
    """Draw the training curves of the results directory ``directory`` into ``out`` (default
    ``directory/training.png``), atomically; return the path."""
    out = out or os.path.join(directory, "training.png")
    with np.load(os.path.join(directory, "training.npz")) as f:
        d = {k: np.array(f[k]) for k in f.files}
    fig, (ax, axc) = plt.subplots(1, 2, figsize=(7.2, 3.0), constrained_layout=True)
    gd = d["exact_gd.loss"]
    ax.plot(np.arange(len(gd)), gd / gd[0], color="0.1", lw=1.2, ls=(0, (4, 3)), zorder=5,
            label="exact gradient descent (reference)")
    for lv in _levels(d):
        c = LEVEL_COLOURS.get(lv, None)
        ex, lo = d[f"{lv}.exact_loss"], d[f"{lv}.loss"]
        ax.plot(np.arange(len(ex)), ex / ex[0], color=c, lw=1.4, label=f"circuit, {lv} (exact loss)")
        ax.plot(np.arange(len(lo)), lo / ex[0], color=c, lw=0.6, alpha=0.45, label=f"circuit, {lv} (decoded {symbol('x_tilde')})")
        mean = d[f"{lv}.cosines"].mean(axis=1)          # mean over WQ, WK, WV, WO
        k = min(10, len(mean))
        smooth = np.array([np.median(mean[max(0, s - k + 1): s + 1]) for s in range(len(mean))])
        axc.plot(np.arange(len(mean)), mean, color=c, lw=0.5, alpha=0.35)
        axc.plot(np.arange(len(mean)), smooth, color=c, lw=1.5, label=f"{lv} (running median of {k})")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss / initial loss")
    ax.set_title("teacher–student: loss vs step")
    ax.legend(fontsize=7, loc="upper right")
    axc.set_xlabel("step")
    axc.set_ylabel("cosine to the exact gradient\n(mean over WQ, WK, WV, WO)")
    axc.axhline(0.0, color="0.6", lw=0.6, zorder=0)
    axc.set_ylim(-1.05, 1.05)
    axc.set_title("gradient from the circuit's activity")
    axc.legend(fontsize=7, loc="lower left")
    check_fonts(fig)
    with atomic_path(out, ".png") as tmp:
        fig.savefig(tmp, dpi=DPI, format="png")
    plt.close(fig)
    return out


if __name__ == "__main__":  # pragma: no cover
    draw_training(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
