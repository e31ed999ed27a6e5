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
    """figures/ imports no simulator, benchmark or data producer (docs/design.md: figures from
    results files only); ctmhsa.sims.figure_data produces what they read."""
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


# -- stage names: one table (ctmhsa.maths.stages) for every figure ----------------------------


def _stage_label_strings():
    """Strings that can only be a stage's label, written by hand: a symbol that is not plain
    ASCII (κ, ṽ, x̃), a name or long name of more than one word ("context-aware value") and the
    cells a stage is read from in parentheses ("(L5 PT)")."""
    from ctmhsa.maths.stages import STAGE_TABLE

    out = {s.symbol for s in STAGE_TABLE.values() if not s.symbol.isascii()}
    out |= {n for s in STAGE_TABLE.values() for n in (s.name, s.long) if " " in n or "-" in n}
    out |= {f"({s.cells})" for s in STAGE_TABLE.values()}
    return out


def _hard_coded_stage_labels(source: str) -> list:
    """(line, text) of every string in ``source`` outside a docstring (figure text, labels,
    captions) that holds a stage label of its own instead of taking it from the stage table."""
    tree = ast.parse(source)
    docs = {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    labels = _stage_label_strings()
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
            and any(label in node.value for label in labels)]


@pytest.mark.codegen_independent
def test_figures_take_stage_labels_from_the_stage_table():
    from ctmhsa import figures

    where = os.path.dirname(figures.__file__)
    found = {name: _hard_coded_stage_labels(open(os.path.join(where, name)).read())
             for name in sorted(os.listdir(where)) if name.endswith(".py")}
    assert not any(found.values()), {k: v for k, v in found.items() if v}
    # the check finds what it looks for
    assert _hard_coded_stage_labels('ax.set_title("ṽ (L5 PT)")\nax.plot(label=f"{k}: x̃")') == \
        [(1, "ṽ (L5 PT)"), (2, ": x̃")]
    assert _hard_coded_stage_labels('PANELS = (("y", "modulated value  (L5 IT soma)"),)') != []
    assert _hard_coded_stage_labels('"""The ṽ panel."""\nx = "v_tilde"') == []


@pytest.mark.codegen_independent
def test_stage_table_is_one_numpy_free_table_that_sims_result_re_exports():
    import ctmhsa.maths.stages as stages
    import ctmhsa.sims.result as result

    tree = ast.parse(open(stages.__file__).read())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= {"__future__", "typing"}, imported
    assert result.STAGE_ORDER is stages.STAGE_ORDER and result.STAGE_LABELS is stages.STAGE_LABELS
    assert stages.STAGE_ORDER == ("q", "k", "v", "q_m", "k_m", "v_m", "s", "kappa", "S", "z", "Z", "y", "v_tilde",
                                  "x_tilde")
    assert stages.STAGE_LABELS["v_tilde"] == ("ṽ", "context value, L5 PT")
    assert stages.title("kappa") == "κ: attention (L2/3 soma)" and stages.symbol("x_tilde") == "x̃"
    with pytest.raises(KeyError, match="unknown stage 'w'"):
        stages.symbol("w")


def _results_dir(path, level, noise):
    """The plain files plot_accuracy reads, for a one-head problem (n = 3, d = 2)."""
    from ctmhsa.figures.accuracy import PANELS

    rng = np.random.default_rng(0)
    shapes = {"q": (1, 3, 2), "k": (1, 3, 2), "v": (1, 3, 2), "s": (1, 3, 3, 2), "y": (1, 3, 3, 2),
              "v_tilde": (1, 3, 2), "x_tilde": (3, 2)}
    ref = {k: rng.normal(size=shapes[k]) for k in PANELS}
    dec = {k: ref[k] + 0.1 * rng.normal(size=shapes[k]) for k in PANELS}
    os.makedirs(path)
    np.savez(os.path.join(path, "stages.npz"), **dec)
    np.savez(os.path.join(path, "reference.npz"), **ref)
    if noise:
        np.savez(os.path.join(path, "noise.npz"), **{k: np.full(shapes[k], 0.01) for k in PANELS})
    met = {k: dict(nrmse=0.1, r=0.99, noise_floor=0.1 if noise else 0.0) for k in PANELS}
    (path / "metrics.json").write_text(json.dumps(met))
    (path / "provenance.json").write_text(json.dumps(dict(level=level, counts=dict(neurons=100),
                                                          config=dict(n=3, H=1, dk=2, dv=2, de=2))))
    return str(path)


@pytest.mark.codegen_independent
def test_accuracy_figure_names_stages_from_the_table_and_draws_the_noise_band(tmp_path):
    from ctmhsa.figures.accuracy import PANELS, noise_band, plot_accuracy
    from ctmhsa.figures.style import plt
    from ctmhsa.maths.stages import title

    fig = plot_accuracy(_results_dir(tmp_path / "escape", "escape", noise=True))
    assert [ax.get_title() for ax in fig.axes] == [title(k) for k in PANELS]
    assert all(len(ax.collections) == 2 for ax in fig.axes)            # the band and the points
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["±2σ spike-count noise"]
    assert "floor 0.100" in fig.axes[0].texts[0].get_text()
    plt.close(fig)
    fig = plot_accuracy(_results_dir(tmp_path / "rate", "rate", noise=False))      # no noise: no band
    assert all(len(ax.collections) == 1 for ax in fig.axes) and fig.axes[0].get_legend() is None
    plt.close(fig)
    x, lo, hi = noise_band([0.0, 1.0, 2.0, 3.0], [0.04] * 4)             # σ = 0.2: ± 0.4
    assert np.allclose(hi - x, 0.4) and np.allclose(x - lo, 0.4) and x[0] == 0 and x[-1] == 3


@pytest.mark.codegen_independent
def test_accuracy_figure_reads_undefined_numbers_of_strict_json(tmp_path):
    """metrics.json is strict JSON: an undefined r or floor is ``null`` (it used to crash the
    figure's number formatting)."""
    from ctmhsa.figures.accuracy import plot_accuracy
    from ctmhsa.figures.style import plt

    path = _results_dir(tmp_path / "rate", "rate", noise=False)
    met = json.loads((tmp_path / "rate" / "metrics.json").read_text())
    met["q"]["r"] = None
    met["q"]["noise_floor"] = None
    (tmp_path / "rate" / "metrics.json").write_text(json.dumps(met))
    plt.close(plot_accuracy(path))
