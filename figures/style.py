"""Shared figure conventions: the paper's colour code, saving PNG + PDF + caption."""

from __future__ import annotations

import os

__all__ = ["PROJECTION_COLOURS", "POP_COLOURS", "save", "plt"]

# paper: green W_Q (core thalamus -> queries), red W_K / W_V (matrix thalamus -> keys, values),
# blue W_O (L5 PT -> higher-order thalamus), purple normalisation (interneurons)
PROJECTION_COLOURS = {"core_q": "#33a02c", "matrix_k": "#e31a1c", "matrix_v": "#e31a1c",
                      "pool": "#6a3d9a", "shunt": "#6a3d9a", "attention": "#ff7f00",
                      "it_pt": "#525252", "pt_out": "#1f78b4"}
POP_COLOURS = {"nucleus1": "#b2df8a", "nucleus1_kv": "#fb9a99", "l23": "#fdbf6f", "interneuron": "#cab2d6",
               "l5it": "#a6cee3", "l5pt": "#1f78b4", "nucleus2": "#8dd3c7"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    return pyplot


plt = _pyplot()


def save(fig, out_dir: str, name: str, caption: str) -> list[str]:
    """Write ``name.png``, ``name.pdf`` and ``name.txt`` (the caption) into ``out_dir``."""
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for ext in ("png", "pdf"):
        p = os.path.join(out_dir, f"{name}.{ext}")
        fig.savefig(p, dpi=130)
        paths.append(p)
    with open(os.path.join(out_dir, f"{name}.txt"), "w") as fh:
        fh.write(caption.strip() + "\n")
    plt.close(fig)
    return paths
