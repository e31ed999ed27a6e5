"""Every figure is produced from (tiny) results files, and opens as an image; the figures
package only reads them."""

import ast
import json
import os

import numpy as np
import pytest


@pytest.mark.brian2
@pytest.mark.long   # 61 s: every figure from its simulations (default suite kept under 6 min)
def test_figures_command_makes_every_figure(tmp_path):
    from ctmhsa.figures.make import FIGURES, make_figures
    from ctmhsa.sims.figure_data import make_data

    out = tmp_path / "figs"
    make_data(str(out / "data"), quick=True)
    made = make_figures(str(out), gallery=str(tmp_path / "gallery"))
    assert sorted(os.path.basename(p) for p in made) == sorted(f"{f}.png" for f in FIGURES)
    import matplotlib.image as mpimg

    for f in FIGURES:
        img = mpimg.imread(str(out / f"{f}.png"))
        assert img.shape[0] > 600 and img.shape[1] > 900            # 300 dpi
        assert np.std(img) > 0.01, f          # not blank
        assert (out / f"{f}.pdf").stat().st_size > 1000
        caption = (out / f"{f}.txt").read_text()
        assert len(caption) > 50
        from ctmhsa.figures.make import FROM_SIMULATIONS

        assert caption.startswith("QUICK") == (f in FROM_SIMULATIONS), f       # quick data are marked
        assert (tmp_path / "gallery" / f"{f}.png").exists()
    # captions name the sizes that were simulated (quick: n = 3)
    assert "one head, n = 3, d = 3" in (out / "accuracy_escape.txt").read_text()
    # the data directory is reused: a second call simulates nothing
    man = json.loads((out / "data" / "manifest.json").read_text())
    acc = out / "data" / man["accuracy"]["escape"] / "provenance.json"
    stamp = os.path.getmtime(acc)
    make_data(str(out / "data"), quick=True)
    make_figures(str(out))
    assert os.path.getmtime(acc) == stamp


@pytest.mark.codegen_independent
def test_figures_only_read_results():
    """figures/ imports no simulator, benchmark or data producer (DESIGN: figures from results
    files only); ctmhsa.sims.figure_data produces what they read."""
    from ctmhsa import figures

    forbidden = tuple(f"ctmhsa.sims.{m}" for m in ("simulate", "benchmarks", "figure_data", "distributed",
                                                    "sweep", "runners"))
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
    from ctmhsa.figures.make import make_figures

    with pytest.raises(ValueError, match="no manifest.json"):
        make_figures(str(tmp_path / "figs"))


@pytest.mark.codegen_independent
def test_figure_data_are_keyed_by_their_parameters():
    from ctmhsa.sims.figure_data import param_key

    X = np.arange(6.0).reshape(2, 3)
    k = param_key(X=X, duration=1.0, neuron="escape")
    assert k == param_key(neuron="escape", duration=1.0, X=X.copy())          # order and copies: same
    assert k != param_key(X=X, duration=0.1, neuron="escape")                # quick window
    assert k != param_key(X=X[:, :2], duration=1.0, neuron="escape")         # other size
    assert k != param_key(X=X.reshape(3, 2), duration=1.0, neuron="escape")  # same bytes, other shape
    assert k != param_key(X=X + 1e-12, duration=1.0, neuron="escape")


@pytest.mark.codegen_independent
def test_saved_figures_are_300_dpi_marked_when_quick_and_refuse_small_text(tmp_path):
    import matplotlib.image as mpimg

    from ctmhsa.figures.style import DPI, QUICK_MARK, plt, save

    fig, ax = plt.subplots(figsize=(2, 1.5))
    ax.plot([0, 1], [0, 1], label="line")
    ax.legend()
    fig.suptitle("a title")
    png = save(fig, str(tmp_path), "f", "A caption.", quick=True)[0]
    assert DPI == 300 and mpimg.imread(png).shape[:2] == (450, 600)
    assert (tmp_path / "f.txt").read_text().startswith(QUICK_MARK)
    fig, ax = plt.subplots()
    ax.text(0.5, 0.5, "tiny", fontsize=5)
    with pytest.raises(ValueError, match=r"text below 7.0 pt: \[\(5.0, 'tiny'\)\]"):
        save(fig, str(tmp_path), "g", "caption")
    assert not (tmp_path / "g.png").exists()
