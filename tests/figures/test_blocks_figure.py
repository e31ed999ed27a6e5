"""The figures of ``ctmhsa bench depth`` (ctmhsa.figures.blocks): the circuit diagram is the
circuit description's graph, the depth figure draws from the benchmark's JSON only."""

import json

import numpy as np
import pytest


def _circuit(blocks=2, classes=3, P=1):
    from ctmhsa.circuits.transformer import model_circuit

    return model_circuit(4, 6, [dict(H=2, dk=3, dv=3, dh=8)] * blocks, classes=classes, P=P)


def _doc(depths=(1, 2), quick=True):
    """A hand-written document in the format ``ctmhsa bench depth`` writes (with unknown floors)."""
    from ctmhsa.maths.stages import BLOCK_STAGES

    rng = np.random.default_rng(0)
    keys = [k for k in BLOCK_STAGES if k != "x_tilde"]
    rows = []
    for L in depths:
        blocks = [{k: dict(nrmse=float(0.05 + 0.1 * rng.random()),
                           floor=None if k in ("x", "hidden") else float(0.03 + 0.03 * rng.random()))
                   for k in keys} for _ in range(L)]
        rows.append(dict(depth=L, neurons=3000 * L, parts={}, P=1, wall_median=1.0, rate_max_rel_error=1e-3,
                         blocks=blocks, output=dict(nrmse=0.1 * L, floor=0.05 * L, r=0.99),
                         logits=dict(nrmse=0.08 * L, floor=None, r=0.98)))
    return dict(benchmark="depth", quick=quick, n=4, de=6, H=2, dk=3, dv=3, dh=8, classes=3, sets=2, duration=0.5,
                P=None, seed=0, level="escape", rows=rows)


@pytest.mark.codegen_independent
def test_circuit_diagram_draws_every_population_and_projection_once():
    from matplotlib.patches import FancyArrowPatch

    from ctmhsa.figures.blocks import SHORT_NAMES, draw_model_circuit
    from ctmhsa.figures.style import check_fonts, plt

    c = _circuit()
    d = draw_model_circuit(c)
    ax = d["ax"]
    assert set(d["nodes"]) == set(c.populations) and set(d["boxes"]) == set(c.populations)
    for name, label in d["nodes"].items():     # short name and neuron count, on the axes
        role = name.split("_", 1)[1] if name.startswith(("b0_", "b1_")) else name
        assert label.get_text() == f"{SHORT_NAMES[role]}\n{c.population(name).N:,}" and label in ax.texts
    assert set(d["arrows"]) == set(c.projections)
    arrows = [a for a in ax.patches if isinstance(a, FancyArrowPatch)]
    assert len(arrows) == len({id(a) for a in d["arrows"].values()})     # every drawn arrow is a projection
    # a pool and its shunt share one double-headed arrow; every other projection has its own
    pairs = {frozenset((p.source, p.target)) for p in c.projections.values()
             if any(q.source == p.target and q.target == p.source for q in c.projections.values())}
    assert len(arrows) == len(c.projections) - len(pairs)
    for name, p in c.projections.items():
        paired = frozenset((p.source, p.target)) in pairs
        assert (d["arrows"][name].get_arrowstyle().__class__.__name__ == "CurveFilledAB") == paired, name
    assert {t.get_text() for t in ax.get_legend().get_texts()} >= {"core (WQ)", "normalisation (pool / shunt)"}
    check_fonts(ax.figure)
    plt.close(ax.figure)


@pytest.mark.codegen_independent
def test_depth_figure_names_stages_from_the_stage_table_and_marks_quick_data():
    from ctmhsa.figures.blocks import draw_depth
    from ctmhsa.figures.style import QUICK_MARK, check_fonts, plt
    from ctmhsa.maths.stages import BLOCK_STAGES, symbol

    doc = _doc()
    fig = draw_depth(doc)
    fig.canvas.draw()
    bars = fig.axes[-1]
    labels = [t.get_text() for t in bars.get_xticklabels()]
    assert labels and set(labels) <= {symbol(k) for k in BLOCK_STAGES}
    assert labels == [symbol(k) for k in BLOCK_STAGES if k != "x_tilde"]          # in circuit order
    assert len(bars.patches) == len(labels) * 2                                   # deepest model: 2 blocks
    assert fig.get_suptitle().startswith(QUICK_MARK) and "0.5 s window" in fig.get_suptitle()
    assert "2 token sets" in fig.get_suptitle()
    check_fonts(fig)
    plt.close(fig)
    doc["quick"] = False
    fig = draw_depth(doc)
    assert QUICK_MARK not in fig.get_suptitle()
    plt.close(fig)


@pytest.mark.codegen_independent
def test_draw_writes_the_depth_figure_and_the_circuit_of_the_deepest_model(tmp_path):
    import matplotlib.image as mpimg

    from ctmhsa.figures.blocks import draw
    from ctmhsa.figures.style import QUICK_MARK

    path = tmp_path / "bench_depth.json"
    path.write_text(json.dumps(_doc(depths=(1, 2))))
    png = draw(str(path), str(tmp_path / "out" / "depth.png"))
    assert png == str(tmp_path / "out" / "depth.png")
    circuit_png = tmp_path / "out" / "depth_circuit.png"
    for p in (png, circuit_png):
        img = mpimg.imread(str(p))
        assert img.shape[0] > 600 and img.shape[1] > 900 and np.std(img) > 0.01
    assert (tmp_path / "out" / "depth.txt").read_text().startswith(QUICK_MARK)           # captions, marked
    assert (tmp_path / "out" / "depth_circuit.txt").read_text().startswith(QUICK_MARK)
    assert "2-block model" in (tmp_path / "out" / "depth_circuit.txt").read_text()        # the deepest one
