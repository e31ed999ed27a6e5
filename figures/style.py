"""Shared figure conventions: the paper's colour code, type sizes, saving PNG + PDF + caption.

Every figure is saved at :data:`DPI` dots per inch with no text smaller than :data:`MIN_FONT`
points (set here for matplotlib as a whole; :func:`check_fonts` verifies a figure before it is
saved) and legends inside the figure.
"""

from __future__ import annotations

import json
import os

__all__ = ["read_json_numbers", "PROJECTION_COLOURS", "POP_COLOURS", "save", "plt", "DPI", "MIN_FONT", "check_fonts",
           "QUICK_MARK", "mark_quick"]

DPI = 300
"""Resolution of every PNG (dots per inch)."""

MIN_FONT = 7.0
"""Smallest type size (points) of any text in a figure."""

QUICK_MARK = "QUICK (smoke-test data: short windows, small sizes)"
"""Label of figures drawn from ``ctmhsa figures --quick`` data, in the title and the caption."""

# paper: green W_Q (core thalamus -> queries), red W_K / W_V (matrix thalamus -> keys, values),
# blue W_O (L5 PT -> higher-order thalamus), purple normalisation (interneurons)
PROJECTION_COLOURS = {"core_q": "#33a02c", "matrix_k": "#e31a1c", "matrix_v": "#e31a1c",
                      "pool": "#6a3d9a", "shunt": "#6a3d9a", "attention": "#ff7f00",
                      "it_pt": "#525252", "pt_out": "#1f78b4"}
POP_COLOURS = {"nucleus1": "#b2df8a", "nucleus1_kv": "#fb9a99", "nucleus1_v": "#e31a1c", "l23": "#fdbf6f", "interneuron": "#cab2d6",
               "l5it": "#a6cee3", "l5pt": "#1f78b4", "nucleus2": "#8dd3c7",
               "outer": "#fdbf6f", "outer_z": "#ffe0a0", "memory": "#b15928", "memory_z": "#d9a27a",
               "readout": "#a6cee3", "readout_z": "#cfe5f2"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    pyplot.rcParams.update({
        "font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "xtick.labelsize": 7,
        "ytick.labelsize": 7, "legend.fontsize": 7, "legend.title_fontsize": 7, "figure.titlesize": 9,
        "savefig.dpi": DPI, "figure.dpi": 100,
    })
    return pyplot


plt = _pyplot()


def check_fonts(fig, minimum: float = MIN_FONT) -> None:
    """Raise ``ValueError`` if any visible text of ``fig`` is smaller than ``minimum`` points."""
    small = sorted({(round(t.get_fontsize(), 2), t.get_text()[:40]) for t in fig.findobj(
        lambda o: hasattr(o, "get_fontsize") and hasattr(o, "get_text"))
        if t.get_visible() and t.get_text().strip() and t.get_fontsize() < minimum - 1e-9})
    if small:
        raise ValueError(f"figure: text below {minimum} pt: {small[:6]}")


def mark_quick(fig, quick: bool) -> None:
    """Mark a figure drawn from quick data in its title (the figure's suptitle, in red, above
    any title it had)."""
    if quick:
        old = fig.get_suptitle()
        fig.suptitle(QUICK_MARK + (f"\n{old}" if old else ""), color="#b2182b", fontsize=9)


def save(fig, out_dir: str, name: str, caption: str, quick: bool = False) -> list[str]:
    """Write ``name.png`` (at :data:`DPI`), ``name.pdf`` and ``name.txt`` (the caption) into
    ``out_dir``; a figure of quick data is marked in its title and its caption."""
    os.makedirs(out_dir, exist_ok=True)
    mark_quick(fig, quick)
    check_fonts(fig)
    if quick:
        caption = f"{QUICK_MARK}. " + caption
    paths = []
    for ext in ("png", "pdf"):
        p = os.path.join(out_dir, f"{name}.{ext}")
        fig.savefig(p, dpi=DPI)
        paths.append(p)
    with open(os.path.join(out_dir, f"{name}.txt"), "w") as fh:
        fh.write(caption.strip() + "\n")
    plt.close(fig)
    return paths


def read_json_numbers(path: str):
    """A results JSON file (metrics.json, provenance.json) with ``null`` read as NaN: the files
    are strict JSON, where an undefined number (r of a constant stage, an unknown floor) is
    ``null``, and the figures plot it as a gap."""
    with open(path) as fh:
        return json.load(fh, object_hook=lambda d: {k: float("nan") if v is None else v for k, v in d.items()})
