"""Every figure is produced from (tiny) results files, and opens as an image."""

import os

import numpy as np
import pytest

pytestmark = pytest.mark.brian2


@pytest.mark.long   # 61 s: every figure from its simulations (default suite kept under 6 min)
def test_figures_command_makes_every_figure(tmp_path):
    from figures.make import FIGURES, make_figures

    out = tmp_path / "figs"
    made = make_figures(str(out), quick=True, gallery=str(tmp_path / "gallery"))
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
    make_figures(str(out), quick=True)
    assert os.path.getmtime(out / "data" / "accuracy_escape" / "provenance.json") == stamp
