"""The lif level's noise floors and interneuron loop (docs/lif.md, "Floors and the interneurons'
loop"): the somata's own count noise from their calibration, the baselines' counting noise in the
pinned L2/3 counts, and a loop no faster than the coupling it closes around."""

import re

import numpy as np
import pytest

from ctmhsa.circuits.builders import pathway
from ctmhsa.mapping.noise import _baseline_share, _built, spike_generation_fano, window_fano
from ctmhsa.neurons.conductance import intrinsic_fano
from ctmhsa.neurons.models import TAU_LOOP_LIF, get_model


@pytest.mark.codegen_independent
def test_intrinsic_fano_pools_neighbours_and_interpolates_in_rate():
    cal = dict(rate=[0.0, 10.0, 20.0, 40.0, 80.0], fano=[1.0, 0.4, 0.2, 0.1, 0.05])
    # width 0: the measured points themselves; silent currents are left out
    assert intrinsic_fano(cal, [10.0, 40.0], width=0) == pytest.approx([0.4, 0.1])
    assert intrinsic_fano(cal, [30.0], width=0) == pytest.approx([0.15])
    assert intrinsic_fano(cal, [1.0, 500.0], width=0) == pytest.approx([0.4, 0.05])   # ends held
    # width 1: the Fano factor of the neighbours' summed counts, Σ F r / Σ r
    assert intrinsic_fano(cal, [20.0], width=1)[0] == pytest.approx((4 + 4 + 4) / 70)
    assert np.all(intrinsic_fano(dict(rate=[0.0], fano=[1.0]), [5.0]) == 1.0)         # nothing measured


@pytest.mark.codegen_independent
def test_baseline_share_is_read_from_the_counts_above_the_baseline():
    obs = dict(rate=np.full(8, 35.0), r=np.full(8, 15.0))      # 20 Hz of every cell is baseline
    b, Nb = _baseline_share(obs, np.array([[240.0]]), np.array([[16]]))
    assert b == pytest.approx(20 / 240) and Nb == pytest.approx(16 * 20 / 240)
    b, Nb = _baseline_share(dict(rate=np.full(8, 5.0), r=np.full(8, 5.0)), np.array([[40.0]]), np.array([[8]]))
    assert b == 0.0 and Nb == 0.0                               # no baseline: the escape level's floors


@pytest.mark.codegen_independent
def test_baselines_are_counted_only_for_the_cells_a_causal_mask_builds():
    built = _built(pathway(3, 2, 2, 2, H=1, causal=True).populations["l23"])    # (H, n, m, dk)
    assert built.shape == (1, 3, 3, 2)
    assert built.sum(axis=(-2, -1)).tolist() == [[2, 4, 6]]                     # query i sees keys j <= i
    assert _built(pathway(3, 2, 2, 2, H=1).populations["l23"]).all()


@pytest.mark.codegen_independent
def test_the_lif_loop_integrates_over_the_coupling_and_l23_has_its_own_constants():
    eq = get_model("lif", "interneuron").equations
    assert TAU_LOOP_LIF in eq and "/tau_inh " not in eq
    assert TAU_LOOP_LIF == "(tau_inh + 50*ms)"          # 60 ms (tau_inh = tau_int), whatever the somata's coupling
    # version 0.12: every soma couples over 200 ms; the default soma's coupling starts at a tenth
    # of it (the warm-up settles the chain L2/3 -> IT -> PT -> nucleus 2), L2/3's is fixed
    from ctmhsa.neurons.params import DEFAULT_SOMA, L23_SOMA, L5_SOMA
    assert DEFAULT_SOMA.tau_c == L23_SOMA.tau_c == L5_SOMA.tau_c == 0.2
    assert DEFAULT_SOMA.tau_c_start == L5_SOMA.tau_c_start == 0.1 and L23_SOMA.tau_c_start == 1.0
    assert "s5_tc0" in get_model("lif", "l5pt").equations and "s23_tc0" in get_model("lif", "l23").equations
    assert "s5_tc0" in get_model("lif", "l5it").equations and "s_tc0" in get_model("lif", "relay_out").equations
    # the linear circuit's read-out (shunted by its own interneurons) keeps a fixed 50 ms coupling
    from ctmhsa.neurons.params import lif_soma
    rd = lif_soma("kv_read").params
    assert rd.tau_c == 0.05 and rd.tau_c_start == 1.0 and "srd_tc" in get_model("lif", "kv_read").equations
    assert "/tau_inh" in get_model("escape", "interneuron").equations
    # L2/3 has its own soma type (strongly adapting, 1 Hz baseline): its own constants (and L5 its own)
    l23, pt = get_model("lif", "l23"), get_model("lif", "relay_out")
    l23_code = "\n".join((l23.equations, l23.regular, l23.threshold, l23.reset, l23.refractory))
    pt_code = "\n".join((pt.equations, pt.regular, pt.threshold, pt.reset, pt.refractory))
    assert "s23_b" in l23.reset and "s23_tc" in l23.equations and not re.search(r"\bs_", l23_code)
    assert pt.reset == "v = s_Vr; w_ad += s_b" and "s23_" not in pt_code
    for ct in ("l5it", "l5pt"):   # L5's type since version 0.15: its own constants only
        l5 = get_model("lif", ct)
        l5_code = "\n".join((l5.equations, l5.regular, l5.threshold, l5.reset, l5.refractory))
        assert l5.reset == "v = s5_Vr; w_ad += s5_b" and not re.search(r"\b(s|s23)_", l5_code)


@pytest.mark.codegen_independent
@pytest.mark.parametrize("shape", [1, 4, 15, 50])
def test_window_fano_predicts_the_window_counts_of_renewal_trains(shape):
    """Gamma renewal trains (interval CV² = 1/shape, mean interval 1), stationary, each counted in
    a window of x ~ U(0.5, 12) expected spikes (a population's spread of rates): the model's
    Fano factor of the summed counts within 10 % of the measured one (40,000 windows). Poisson
    (shape 1) and regular trains are its exact ends."""
    rng = np.random.default_rng(shape)
    x = rng.uniform(0.5, 12.0, 40000)
    t = np.cumsum(rng.gamma(shape, 1 / shape, size=(x.size, 100)), axis=1)
    t0 = 20 + 5 * rng.random(x.size)
    c = ((t >= t0[:, None]) & (t < (t0 + x)[:, None])).sum(axis=1)
    assert window_fano(x, 1 / shape) == pytest.approx(np.sum((c - x) ** 2) / np.sum(x), rel=0.10)
    assert window_fano([0.1, 0.05], 0.0) == 1.0 and window_fano([600.0], 0.0) == pytest.approx(1 / 3600)


@pytest.mark.codegen_independent
def test_every_lif_soma_counts_its_spike_generation_in_its_window():
    """L2/3 included (version 0.12): its Fano factor measured in chunks of a tenth of the window
    is that of 0.1-1 s chunks of a 4.5 Hz train and overcounts a 1-3 s window's noise by 2.5-5x;
    the floors take its calibration's, plus the phase of the first spike (window_fano)."""
    circuit = pathway(2, 2, 2, 2, H=1)
    own = spike_generation_fano(circuit, "lif", {p: 0.5 for p in circuit.populations}, dt=5e-4)
    assert all(callable(own[p]) for p in ("l23", "l5it", "l5pt", "nucleus2"))
    assert own["nucleus1"] == 0.5 and own["interneuron"] == 1.0       # escape relays, interneurons
    f = own["l23"](np.array([4.5]))[0]
    assert 0.02 < f < 0.2                                              # regular: adaptation


@pytest.mark.brian2
@pytest.mark.long   # 11 s of lif; the lif floors' parts are checked above
def test_lif_interneurons_fire_below_40_hz_without_ringing():
    """The lif loop (tau_int + 50 ms) holds every macrocolumn's pooled rate with interneurons at
    physiological rates, firing regularly, and L2/3 at 4.5 Hz (its 1 Hz baseline plus r_l23 =
    3.5 Hz; macrocolumns of 64 cells, above r_pool_min / r_l23 = 57). With tau_int alone (10 ms
    against the somata's coupling) the loop rings: 104 Hz here, Fano factor 10.5, 2 violations
    (61 Hz, Fano 6-11 on the default problem; docs/lif.md)."""
    from ctmhsa.sims import simulate_mhsa
    from ctmhsa.sims.benchmarks.common import square_problem

    x = square_problem(8, 8, 1, seed=0)
    res = simulate_mhsa(x["X"], x["WQ"], x["WK"], x["WV"], x["WO"], neuron="lif", duration=1.0, seed=1)
    rates = {r["population"]: r["mean"] for r in res.rate_table()}
    assert rates["interneuron"] <= 40.0, rates
    assert rates["l23"] <= 5.0, rates                          # a 1 Hz baseline + r_l23 = 3.5 Hz
    assert res.diagnostics["fano"]["interneuron"] < 1.0
    assert res.diagnostics["operating"]["violations"] == []    # pooled rates within their count noise
