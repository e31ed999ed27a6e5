"""The figure glitches a newcomer reported, each checked on its drawn figure (no simulation): the summary's
error-vs-window legend clear of the lines and its floors told apart from a 1/√T guide, raster
marks inside their axes and a time axis that agrees with the title, fig. 2 (d) in three labelled
levels, and the digits panel (a) agreement ring visible around the accuracy dot."""

import numpy as np
import pytest

pytestmark = pytest.mark.codegen_independent

WARMUP, DURATION = 0.5, 10.0
CHECKPOINTS = {   # T -> {stage: (NRMSE, floor)}: x̃ and s as in the gallery's earlier summary,
    # ṽ off its floor (a bias of ~0.14), low across the panel where the fixed legend sat; floors ∝ 1/√T
    1.0: {"v_tilde": (0.21, 0.38), "x_tilde": (0.68, 0.67), "s": (0.44, 0.45)},
    2.5: {"v_tilde": (0.175, 0.24), "x_tilde": (0.40, 0.42), "s": (0.27, 0.285)},
    5.0: {"v_tilde": (0.155, 0.17), "x_tilde": (0.31, 0.30), "s": (0.195, 0.20)},
    10.0: {"v_tilde": (0.145, 0.12), "x_tilde": (0.21, 0.21), "s": (0.152, 0.142)},
}


def _result(checkpoints=CHECKPOINTS):
    """A SimulationResult of the default pathway's sizes (n = 8, H = 2, d = 8, escape, 0.5 s
    warm-up + 10 s) with random stages and Poisson spikes for every cell of the first 1.6 s."""
    from ctmhsa.maths.reference import linear_mhsa
    from ctmhsa.sims.nwb import circuit_of
    from ctmhsa.sims.result import SimulationResult

    rng = np.random.default_rng(0)
    n, H, d = 8, 2, 8
    config = dict(n=n, m=n, H=H, dk=d, dv=d, de=d, neuron="escape", phi="elu1", causal=False, normalize=True,
                  circuit="quadratic", law="product", P=1, n_inh=30, signed="onoff", fold=True, dale=False,
                  firing="poisson", duration=DURATION, dt=1e-3, warmup=WARMUP, seed=0, cross=False, skip=False)
    s = 1 / np.sqrt(d)
    ref = linear_mhsa(rng.normal(size=(n, d)), rng.normal(size=(H, d, d)) * s, rng.normal(size=(H, d, d)) * s,
                      rng.normal(size=(H, d, d)) * s, rng.normal(size=(H, d, d)) * s, phi="elu1")
    ref = {k: np.asarray(v, float) for k, v in ref.items() if k in ("q", "k", "v", "s", "kappa", "Z", "y",
                                                                      "v_tilde", "x_tilde")}
    noise = {k: np.full(v.shape, (0.1 * np.std(v)) ** 2) for k, v in ref.items()}
    stages = {k: v + rng.normal(size=v.shape) * np.sqrt(noise[k]) for k, v in ref.items()}
    spikes = {}
    for name, pop in circuit_of(config).populations.items():
        k = rng.poisson(10 * pop.N * 1.6)
        spikes[name] = (rng.integers(0, pop.N, k), np.sort(rng.uniform(0, 1.6, k)))
    cps = [dict(T=T, metrics={k: dict(nrmse=e, noise_floor=f) for k, (e, f) in m.items()})
           for T, m in checkpoints.items()]
    return SimulationResult(x_tilde=stages["x_tilde"], reference=ref["x_tilde"], stages=stages,
                            reference_stages=ref, rates={}, spikes=spikes, level="escape", config=config,
                            diagnostics=dict(checkpoints=cps), counts=dict(neurons=4320, synapses=151552),
                            noise_variance=noise)


@pytest.fixture(scope="module")
def summary():
    from ctmhsa.figures.style import plt
    from ctmhsa.figures.summary import draw_summary

    fig = draw_summary(_result())
    fig.canvas.draw()
    yield fig
    plt.close(fig)


def _axes(fig, title_start):
    return next(a for a in fig.axes if a.get_title().startswith(title_start))


def _line_points(ax, line):
    """A line's path in display coordinates, densely sampled (as it is drawn: log axes included)."""
    xy = line.get_transform().transform(np.asarray(line.get_xydata(), float))
    return np.concatenate([np.linspace(a, b, 200) for a, b in zip(xy[:-1], xy[1:])])


def test_summary_error_legend_hides_no_line(summary):
    """The legend of the error-vs-window panel keeps 2 points clear of every drawn line and
    marker (it covered ṽ)."""
    ax = _axes(summary, "error vs simulated time")
    legend = ax.get_legend()
    assert legend is not None
    bb = legend.get_window_extent(summary.canvas.get_renderer())
    lines = [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 1]
    assert len(lines) >= 6                                     # NRMSE and floor of ṽ, x̃ and s
    pt = summary.dpi / 72
    for line in lines:
        xy = _line_points(ax, line)
        m = pt * (2 + max(line.get_linewidth(), line.get_markersize() if line.get_marker() != "None" else 0) / 2)
        inside = (xy[:, 0] > bb.x0 - m) & (xy[:, 0] < bb.x1 + m) & (xy[:, 1] > bb.y0 - m) & (xy[:, 1] < bb.y1 + m)
        assert not inside.any(), f"legend covers {line.get_label()}"


def test_summary_floor_and_sqrt_guide_are_told_apart(summary):
    """No two lines of the panel lie on each other (a 1/√T guide through a floor did); floors
    that fall as 1/√T are said to in the legend. Floors that do not get a distinct guide."""
    def check(ax):
        lines = [np.log(np.asarray(ln.get_ydata(), float)) for ln in ax.get_lines() if len(ln.get_xdata()) > 1]
        for a in range(len(lines)):
            for b in range(a + 1, len(lines)):
                assert np.max(np.abs(lines[a] - lines[b])) > 0.03, "two lines coincide"

    ax = _axes(summary, "error vs simulated time")
    check(ax)
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("floor" in t and "1/√T" in t for t in texts)
    from ctmhsa.figures.style import plt
    from ctmhsa.figures.summary import _error_vs_window

    # floors that do not scale as 1/√T: a dotted guide, not on any floor, and the legend names it
    bent = {T: {k: (e, f * T ** 0.2) for k, (e, f) in m.items()} for T, m in CHECKPOINTS.items()}
    cps = [dict(T=T, metrics={k: dict(nrmse=e, noise_floor=f) for k, (e, f) in m.items()}) for T, m in bent.items()]
    fig, ax = plt.subplots()
    handles = _error_vs_window(ax, cps)
    check(ax)
    assert any(h.get_linestyle() == ":" and "1/√T" in h.get_label() for h in handles)
    assert not any("floor, ∝" in h.get_label() for h in handles)
    plt.close(fig)


def test_summary_raster_axis_agrees_with_its_title(summary):
    """The raster's title says it shows the first 1 s of the window: its time axis counts from
    the window's start and every spike drawn lies in that second; the title says why the
    interneurons fire together."""
    from ctmhsa.figures.panels import INTERNEURON_NOTE

    ax = _axes(summary, "spikes of macrocolumn")
    assert "first 1 s of the window" in ax.get_title()
    assert ax.get_xlim() == pytest.approx((0.0, 1.0))
    assert "in the measurement window" in ax.get_xlabel()
    x = np.concatenate([np.asarray(c.get_offsets(), float)[:, 0] for c in ax.collections if len(c.get_offsets())])
    assert x.min() >= 0 and x.max() < 1.0
    assert INTERNEURON_NOTE in ax.get_title()


def test_summary_raster_cuts_no_mark(summary):
    """No spike mark (its full height) reaches past the raster's top or bottom edge."""
    ax = _axes(summary, "spikes of macrocolumn")
    box = ax.get_window_extent(summary.canvas.get_renderer())
    half = max(np.sqrt(max(c.get_sizes())) for c in ax.collections) / 2 * summary.dpi / 72   # px
    y = np.concatenate([c.get_offset_transform().transform(np.asarray(c.get_offsets(), float))[:, 1]
                        for c in ax.collections if len(c.get_offsets())])
    assert y.max() + half <= box.y1 - 1 and y.min() - half >= box.y0 + 1, "a raster mark touches the top or bottom"


def test_fig2_d_sign_matrix_has_three_labelled_levels(tmp_path):
    """Fig. 2 (d) draws its −1/0/+1 matrix in exactly three colours with a colour bar of three
    labelled levels (it was a continuous bar)."""
    from matplotlib.colors import BoundaryNorm

    from ctmhsa.figures.make import _it_pt_matrix
    from ctmhsa.figures.panels import fig2
    from ctmhsa.figures.style import plt

    b, three = np.linspace(0, 3, 4), np.array([0.3, 1.0, 2.0])
    grid = np.outer(b, np.ones(3))
    path = tmp_path / "fig2_escape.npz"
    np.savez(path, basal=b, a_apical=three, a_rate=grid, b_l23_active_fraction=np.array([1.0, 0.3]),
             b_rate=grid[:, :2], c_others=three, c_rate_with_interneurons=grid, c_prediction=grid,
             c_rate_without_interneurons=grid)
    M = _it_pt_matrix()
    assert set(np.unique(M)) <= {-1.0, 0.0, 1.0}
    fig = fig2({"escape": str(path)}, M)
    fig.canvas.draw()
    axd = next(a for a in fig.axes if a.get_title().startswith("(d)"))
    im = axd.images[0]
    assert im.get_cmap().N == 3 and isinstance(im.norm, BoundaryNorm) and im.norm.Ncmap == 3
    assert len({tuple(im.to_rgba(v)) for v in (-1, 0, 1)}) == 3          # one colour per level
    bar = im.colorbar
    assert [float(t) for t in bar.get_ticks()] == [-1.0, 0.0, 1.0]
    labels = [t.get_text() for t in bar.ax.get_yticklabels()]
    assert len(labels) == 3 and len(set(labels)) == 3 and all(labels)
    assert labels[0].startswith("−1") and labels[1].startswith("0") and labels[2].startswith("+1")
    plt.close(fig)


def test_digits_agreement_ring_stays_visible_around_the_accuracy_dot():
    """Panel (a): where accuracy and agreement coincide, the agreement ring is drawn above the
    accuracy dot, unfilled, and wide enough that the dot (with its rim) fits inside it."""
    from ctmhsa.figures.digits import draw_digits
    from ctmhsa.figures.style import plt

    conf = np.diag([2] * 10).tolist()
    rows = [dict(neuron="escape", presentation=p, inputs=20, accuracy=a, agreement=a, neurons=70830,
                 wall_per_input=0.3, confusion=conf, examples=[]) for p, a in ((0.05, 0.1), (0.1, 0.17), (0.2, 0.95))]
    rows.append(dict(neuron="rate", presentation=0.2, inputs=20, accuracy=0.96, agreement=0.96, neurons=19890,
                     wall_per_input=3.7, confusion=conf, examples=[]))
    fig = draw_digits(dict(model="digits", images=20, float_accuracy=0.962, rows=rows))
    ax = fig.axes[0]
    for marker in ("o", "s"):       # escape: dots and rings; rate: squares
        marked = sorted((ln for ln in ax.get_lines() if ln.get_marker() == marker),
                        key=lambda ln: ln.get_markersize())
        dot, ring = marked[0], marked[-1]          # accuracy the smaller marker, agreement the larger
        assert ring.get_markersize() > dot.get_markersize(), marker
        assert ring.get_zorder() > dot.get_zorder(), "the accuracy dot is drawn over the agreement ring"
        assert ring.get_markerfacecolor() == "none", "the agreement ring is filled"
        inner = ring.get_markersize() - ring.get_markeredgewidth()
        outer = dot.get_markersize() + dot.get_markeredgewidth()
        assert inner > outer, "the accuracy dot fills the agreement ring"
    plt.close(fig)
