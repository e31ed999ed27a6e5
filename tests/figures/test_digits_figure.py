"""The figure of ``ctmhsa bench digits`` (ctmhsa.figures.digits), drawn from the benchmark's JSON only."""

import json

import numpy as np
import pytest


def _doc(images=20, quick=False, seed=0):
    """A hand-written document in the format ``ctmhsa bench digits`` writes: a rate row at 0.5 s,
    then escape rows at 0.05, 0.1, 0.2 and 0.5 s, 8 examples each (random images and scores)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, images)
    float_scores = rng.normal(0, 1, (images, 10))
    float_scores[np.arange(images), labels] += 3.0
    float_scores[:2] = rng.normal(0, 1, (2, 10))          # a couple the float model may get wrong
    fpred = float_scores.argmax(1)

    def row(neuron, presentation, noise):
        scores = float_scores + rng.normal(0, noise, float_scores.shape)
        pred = scores.argmax(1)
        confusion = np.zeros((10, 10), int)
        np.add.at(confusion, (labels, pred), 1)
        examples = [dict(index=i, image=rng.random((8, 8)).round(3).tolist(), label=int(labels[i]),
                         prediction=int(pred[i]), float_prediction=int(fpred[i]), scores=scores[i].tolist(),
                         float_scores=float_scores[i].tolist()) for i in range(8)]
        return dict(neuron=neuron, presentation=presentation, inputs=images, accuracy=float(np.mean(pred == labels)),
                    float_accuracy=float(np.mean(fpred == labels)), agreement=float(np.mean(pred == fpred)),
                    neurons=61_440, wall_per_input=0.4 + 8 * presentation + rng.random(), confusion=confusion.tolist(),
                    predictions=pred.tolist(), examples=examples)

    rows = [row("rate", 0.5, 0.3)] + [row("escape", p, 1.5 / np.sqrt(p) / 4) for p in (0.05, 0.1, 0.2, 0.5)]
    return dict(benchmark="digits", quick=quick, model="digits", images=images, presentations=[0.05, 0.1, 0.2, 0.5],
                seed=0, P=None, float_accuracy=float(np.mean(fpred == labels)), labels=labels.tolist(),
                float_predictions=fpred.tolist(), rows=rows)


@pytest.mark.codegen_independent
def test_digits_figure_draws_every_panel_from_the_document():
    from ctmhsa.figures.digits import draw_digits
    from ctmhsa.figures.style import QUICK_MARK, check_fonts, plt

    doc = _doc()
    fig = draw_digits(doc)
    fig.canvas.draw()
    check_fonts(fig)
    axes = fig.get_axes()
    assert len(axes) == 2 + 2 * 8                   # (a), (c), and a thumbnail and a bar chart per example
    acc = axes[0]
    assert [float(t) for t in acc.get_xticks()] == pytest.approx([50, 100, 200, 500])   # ms, log x
    assert acc.get_xscale() == "log"
    assert "61,440 neurons" in acc.get_title()
    title = fig.get_suptitle()
    assert "20 test images" in title and f"{100 * doc['float_accuracy']:.1f} %" in title and QUICK_MARK not in title
    # (c): the 0.2 s escape row's confusion, its counts written where not zero
    row = next(r for r in doc["rows"] if r["neuron"] == "escape" and r["presentation"] == 0.2)
    conf = axes[1]
    assert "200 ms" in conf.get_title()
    written = sum(int(t.get_text()) for t in conf.texts)
    assert written == doc["images"] == np.sum(row["confusion"])
    # (b): thumbnails of that row's images; bars of its spiking scores; titles coloured by correctness
    from ctmhsa.figures.digits import RIGHT, WRONG
    for e, im, bx in zip(row["examples"], axes[2::2], axes[3::2]):
        assert np.allclose(im.images[0].get_array(), e["image"])
        assert [p.get_height() for p in bx.patches] == pytest.approx(e["scores"])
        spk = next(t for t in im.texts if t.get_text().startswith("spiking"))
        assert spk.get_color() == (RIGHT if e["prediction"] == e["label"] else WRONG)
        flt = next(t for t in bx.texts if t.get_text().startswith("float"))
        assert flt.get_color() == (RIGHT if e["float_prediction"] == e["label"] else WRONG)
    plt.close(fig)
    doc["quick"] = True
    fig = draw_digits(doc)
    assert fig.get_suptitle().startswith(QUICK_MARK)
    plt.close(fig)


@pytest.mark.codegen_independent
def test_digits_figure_of_quick_data_one_escape_row():
    """``--quick``: 20 images, one escape row (0.2 s) and the rate level at 0.3 s."""
    from ctmhsa.figures.digits import draw_digits
    from ctmhsa.figures.style import QUICK_MARK, check_fonts, plt

    doc = _doc(quick=True)
    doc["rows"] = [dict(doc["rows"][0], presentation=0.3), doc["rows"][3]]
    doc["presentations"] = [0.2]
    fig = draw_digits(doc)
    check_fonts(fig)
    assert fig.get_suptitle().startswith(QUICK_MARK)
    assert [float(t) for t in fig.get_axes()[0].get_xticks()] == pytest.approx([200, 300])
    plt.close(fig)


@pytest.mark.codegen_independent
def test_draw_writes_the_figure_beside_the_json(tmp_path):
    import matplotlib.image as mpimg

    from ctmhsa.figures.digits import draw
    from ctmhsa.figures.style import QUICK_MARK

    path = tmp_path / "digits.json"
    path.write_text(json.dumps(_doc(quick=True)))
    png = draw(str(path))
    assert isinstance(png, str) and png == str(tmp_path / "digits.png")
    img = mpimg.imread(png)
    assert img.shape[0] > 1500 and img.shape[1] > 1500 and np.std(img) > 0.01
    assert (tmp_path / "digits.pdf").stat().st_size > 0
    assert (tmp_path / "digits.txt").read_text().startswith(QUICK_MARK)          # the caption, marked
