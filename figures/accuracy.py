"""Decoded stages against the exact reference, read from a results directory.

Usage::

    python -m ctmhsa.figures.accuracy RESULTS_DIR OUT.png
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

__all__ = ["plot_accuracy"]

PANELS = (("q", "query  (L2/3 basal)"), ("k", "key  (L2/3 apical)"), ("v", "value  (L5 IT basal)"),
          ("s", "salience  (L2/3 soma)"), ("y", "modulated value  (L5 IT soma)"),
          ("v_tilde", "context-aware value  (L5 PT)"), ("x_tilde", "output  (nucleus 2)"))


def plot_accuracy(results_dir: str, out: str | None = None):
    """Scatter decoded vs exact for each stage, with NRMSE and r in each panel.

    Reads ``stages.npz``, ``reference.npz``, ``metrics.json`` and ``provenance.json`` only.
    Returns the matplotlib figure (saved to ``out`` when given, PNG and PDF by extension).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(os.path.join(results_dir, "metrics.json")) as fh:
        met = json.load(fh)
    with open(os.path.join(results_dir, "provenance.json")) as fh:
        prov = json.load(fh)
    with np.load(os.path.join(results_dir, "stages.npz")) as st, \
            np.load(os.path.join(results_dir, "reference.npz")) as ref:
        panels = [(k, label, st[k].ravel(), ref[k].ravel()) for k, label in PANELS if k in st.files]
    fig, axes = plt.subplots(1, len(panels), figsize=(2.3 * len(panels), 2.6), constrained_layout=True)
    for ax, (key, label, d, r) in zip(np.atleast_1d(axes), panels):
        lo, hi = float(min(r.min(), np.nanmin(d))), float(max(r.max(), np.nanmax(d)))
        ax.plot([lo, hi], [lo, hi], color="0.6", lw=0.8, zorder=0)
        ax.scatter(r, d, s=4, color="#6a3d9a" if key in ("s", "y") else "#1f78b4", lw=0)
        m = met.get(key, {})
        ax.set_title(label, fontsize=7.5)
        ax.text(0.03, 0.97, f"NRMSE {m.get('nrmse', np.nan):.1e}\nr = {m.get('r', np.nan):.4f}",
                transform=ax.transAxes, va="top", fontsize=7)
        ax.set_xlabel("exact (reference)", fontsize=7)
        ax.tick_params(labelsize=7)
    np.atleast_1d(axes)[0].set_ylabel("decoded from neurons", fontsize=7)
    c = prov["config"]
    fig.suptitle(f"{prov['level']} level: n={c['n']}, H={c['H']}, dk={c['dk']}, dv={c['dv']}, "
                 f"de={c['de']}, {prov['counts']['neurons']:,} neurons — linear attention kernel",
                 fontsize=8)
    if out:
        fig.savefig(out, dpi=300)
    return fig


if __name__ == "__main__":  # pragma: no cover
    if len(sys.argv) != 3:
        sys.exit("usage: python -m ctmhsa.figures.accuracy RESULTS_DIR OUT.png")
    plot_accuracy(sys.argv[1], sys.argv[2])
