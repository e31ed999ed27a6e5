"""Decoded stages against the exact reference, read from a results directory, with each entry's
spike-count noise floor as a band around the identity.

Usage::

    python -m ctmhsa.figures.accuracy RESULTS_DIR OUT.png
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

from ctmhsa.maths.stages import title

from .style import read_json_numbers

__all__ = ["plot_accuracy", "PANELS", "noise_band"]

PANELS = ("q", "k", "v", "s", "y", "v_tilde", "x_tilde")
"""The stages drawn, one panel each (their titles come from :mod:`ctmhsa.maths.stages`)."""

BAND_SD = 2.0
"""Half-width of the noise band in standard deviations of the spike-count noise."""


def noise_band(exact, variance, sd: float = BAND_SD, points: int = 200):
    """The band ``exact ± sd·σ(exact)`` that spike-count noise alone would fill, for drawing.

    ``σ²(exact)`` is a quadratic least-squares fit of the per-entry noise variances against the
    entries' exact values (a rate's counting variance grows with the rate, hence with ``|exact|``
    in the ON/OFF code), kept within the range of the variances. Returns ``(x, lower, upper)`` on
    ``points`` values spanning the exact values; entries with a NaN variance are left out."""
    x, var = np.asarray(exact, float).ravel(), np.asarray(variance, float).ravel()
    ok = np.isfinite(x) & np.isfinite(var)
    x, var = x[ok], var[ok]
    grid = np.linspace(x.min(), x.max(), points)
    deg = min(2, np.unique(x).size - 1)
    fit = np.polyval(np.polyfit(x, var, deg), grid) if deg > 0 else np.full(points, var.mean())
    sigma = np.sqrt(np.clip(fit, var.min(), var.max()))
    return grid, grid - sd * sigma, grid + sd * sigma


def _number(v: float) -> str:
    return f"{v:.3f}" if not np.isfinite(v) or v == 0 or abs(v) >= 1e-3 else f"{v:.1e}"


def plot_accuracy(results_dir: str, out: str | None = None):
    """Scatter decoded vs exact for each stage of :data:`PANELS`, with NRMSE, noise floor and r in
    each panel and, at the spiking levels, the band ``exact ± 2σ`` of each entry's spike-count
    noise (:func:`noise_band`, from ``noise.npz``): points outside it are bias, not noise.

    Reads ``stages.npz``, ``reference.npz``, ``noise.npz`` (when there), ``metrics.json`` and
    ``provenance.json`` only. Returns the matplotlib figure (saved to ``out`` when given, PNG and
    PDF by extension).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    met = read_json_numbers(os.path.join(results_dir, "metrics.json"))
    with open(os.path.join(results_dir, "provenance.json")) as fh:
        prov = json.load(fh)
    noise_path = os.path.join(results_dir, "noise.npz")
    noise = {}
    if os.path.isfile(noise_path):
        with np.load(noise_path) as nz:
            noise = {k: np.array(nz[k]) for k in nz.files}
    with np.load(os.path.join(results_dir, "stages.npz")) as st, \
            np.load(os.path.join(results_dir, "reference.npz")) as ref:
        panels = [(k, st[k].ravel(), ref[k].ravel()) for k in PANELS if k in st.files]
    fig, axes = plt.subplots(1, len(panels), figsize=(2.3 * len(panels), 2.6), constrained_layout=True)
    banded = None
    for ax, (key, d, r) in zip(np.atleast_1d(axes), panels):
        lo, hi = float(min(r.min(), np.nanmin(d))), float(max(r.max(), np.nanmax(d)))
        ax.plot([lo, hi], [lo, hi], color="0.6", lw=0.8, zorder=1)
        if key in noise and np.any(np.asarray(noise[key]) > 0):
            x, low, up = noise_band(r, noise[key])
            ax.fill_between(x, low, up, color="0.82", lw=0, zorder=0,
                            label=None if banded else f"±{BAND_SD:g}σ spike-count noise")
            banded = banded or ax
        ax.scatter(r, d, s=4, color="#6a3d9a" if key in ("s", "y") else "#1f78b4", lw=0, zorder=2)
        m = met.get(key, {})
        ax.set_title(title(key), fontsize=7.5)
        floor = m.get("noise_floor", 0.0) or 0.0
        text = f"NRMSE {_number(m.get('nrmse', np.nan))}" + (f"\nfloor {_number(floor)}" if floor > 0 else "")
        ax.text(0.03, 0.97, text + f"\nr = {m.get('r', np.nan):.4f}", transform=ax.transAxes, va="top",
                fontsize=7, zorder=3, bbox=dict(fc="white", ec="none", alpha=0.75, pad=1))
        ax.set_xlabel("exact (reference)", fontsize=7)
        ax.tick_params(labelsize=7)
    first = np.atleast_1d(axes)[0]
    first.set_ylabel("decoded from neurons", fontsize=7)
    if banded:
        banded.legend(loc="lower right", fontsize=7, frameon=False, handlelength=1.2)
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
