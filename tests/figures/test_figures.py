"""Every figure is produced from (tiny) results files, and opens as an image; the figures
package only reads them."""

import ast
import os

import numpy as np
import pytest


@pytest.mark.brian2
@pytest.mark.long   # 61 s: every figure from its simulations (default suite kept under 6 min)
def test_figures_command_makes_every_figure(tmp_path):
    from figures.make import FIGURES, make_figures
    from sims.figure_data import make_data

    out = tmp_path / "figs"
    make_data(str(out / "data"), quick=True)
    made = make_figures(str(out), gallery=str(tmp_path / "gallery"))
    assert sorted(os.path.basename(p) for p in made) == sorted(f"{f}.png" for f in FIGURES)
    import matplotlib.image as mpimg

    for f in FIGURES:
        img = mpimg.imread(str(out / f"{f}.png"))
        assert img.shape[0] > 200 and img.shape[1] > 300
        assert np.std(img) > 0.01, f          # not blank
        assert (out / f"{f}.pdf").stat().st_size > 1000
        assert len((out / f"{f}.txt").read_text()) > 50          # caption
        assert (tmp_path / "gallery" / f"{f}.png").exists()
    # the data directory is reused: a second call simulates nothing
    stamp = os.path.getmtime(out / "data" / "accuracy_escape" / "provenance.json")
    make_data(str(out / "data"), quick=True)
    make_figures(str(out))
    assert os.path.getmtime(out / "data" / "accuracy_escape" / "provenance.json") == stamp


@pytest.mark.codegen_independent
def test_figures_only_read_results():
    """figures/ imports no simulator, benchmark or data producer (DESIGN: figures from results
    files only); sims.figure_data produces what they read."""
    import figures

    forbidden = ("sims.simulate", "sims.benchmarks", "sims.figure_data", "sims.distributed", "sims.sweep",
                 "sims.runners")
    where = os.path.dirname(figures.__file__)
    for name in sorted(os.listdir(where)):
        if not name.endswith(".py"):
            continue
        tree = ast.parse(open(os.path.join(where, name)).read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mods = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
                assert "simulate_mhsa" not in [a.name for a in node.names], (name, node.lineno)
            else:
                continue
            for m in mods:
                assert not m.startswith(forbidden), (name, m)


@pytest.mark.codegen_independent
def test_figures_need_their_data(tmp_path):
    from figures.make import make_figures

    with pytest.raises(ValueError, match="no manifest.json"):
        make_figures(str(tmp_path / "figs"))
