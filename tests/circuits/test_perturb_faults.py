"""Faults of the perturbations (issue 46 item 4): several on one target compose, paths resolve by
area and block, and a perturbation outside the run or beyond what a relay can fire is refused
(or warned about where it applies in part) before a network is built."""

import re
import warnings

import numpy as np
import pytest

import ctmhsa
from ctmhsa.circuits import perturb
from ctmhsa.circuits.perturb import Cut, Drive, PerturbationWarning, Silence, check_perturbations
from ctmhsa.circuits.transformer import model_circuit
from ctmhsa.mapping.blocks import model_sizes
from ctmhsa.sims import build_mhsa, simulate_mhsa
from ctmhsa.sims.options import CircuitOptions


def _problem(H=1, n=3, de=3, dk=2, dv=2, seed=0):
    r = np.random.default_rng(seed)
    return dict(X=r.normal(size=(n, de)) * .6, WQ=r.normal(size=(H, dk, de)) / 2, WK=r.normal(size=(H, dk, de)) / 2,
                WV=r.normal(size=(H, dv, de)) / 2, WO=r.normal(size=(H, de, dv)) / 2)


def _pathway(H=1):
    return CircuitOptions(neuron="rate").describe(3, 2, 2, 3, H=H, m=3)


def _model(H=1, blocks=2):
    r = np.random.default_rng(0)
    m = ctmhsa.Model.from_arrays(*[r.normal(size=s) / 2 for s in [(H, 2, 3)] * 3 + [(H, 3, 2)]])
    return model_circuit(3, m.de, model_sizes(m) * blocks, P=1)


# P01: several perturbations of one target compose ---------------------------------------------

@pytest.mark.codegen_independent
def test_two_silences_of_one_population_are_their_union():
    c = _pathway()
    perts = check_perturbations([Silence("l23", start=0.05, stop=0.15), Silence("l23", start=0.3, stop=0.4),
                                 Silence("l23", cells=[0, 1], start=0.1, stop=0.2)], c)
    sv = perturb.silence_values(perturb.apply(c, perts))["l23"]
    assert sorted(sv) == ["sil_off", "sil_off_1", "sil_on", "sil_on_1"]   # two disjoint intervals per cell
    np.testing.assert_array_equal(sv["sil_on"], 0.05)
    np.testing.assert_array_equal(sv["sil_off"][:3], [0.2, 0.2, 0.15])   # overlapping intervals merged
    np.testing.assert_array_equal(sv["sil_on_1"], 0.3)
    np.testing.assert_array_equal(sv["sil_off_1"], 0.4)
    eqs = perturb.silence_equations(2)
    assert "int(t >= sil_on)*int(t < sil_off) - int(t >= sil_on_1)*int(t < sil_off_1)" in eqs
    # one Silence: the same values and equations as before
    one = perturb.silence_values(perturb.apply(c, (Silence("area0.l23", cells=[2], start=0.1),)))["l23"]
    assert sorted(one) == ["sil_off", "sil_on"] and np.isfinite(one["sil_on"]).sum() == 1
    from ctmhsa.circuits.instantiate import SILENCE_EQUATIONS
    assert perturb.silence_equations(1) == SILENCE_EQUATIONS


@pytest.mark.codegen_independent
def test_two_cuts_of_one_projection_remove_independent_draws():
    c = perturb.apply(_pathway(), (Cut("it_pt", 0.5), Cut("it_pt", 0.5)))
    post = c.populations[c.projections["it_pt"].target]
    j = np.tile(np.arange(post.N), 500)
    keep = perturb.cut_mask(c, "it_pt", j, j, seed=3)
    assert 0.72 < np.mean(~keep) < 0.78   # 1 - 0.5 * 0.5


@pytest.mark.codegen_independent
def test_two_drives_of_one_compartment_are_refused_naming_both(no_build):
    with pytest.raises(ValueError, match=r"^perturbations\[1\]: two Drives target 'l23'\.soma \(perturbations"
                                         r"\[0\] too\); give one Drive, at the sum of their rates"):
        build_mhsa(**_problem(), neuron="rate", perturbations=[Drive("l23", rate=3), Drive("block0.l23", rate=4)])


@pytest.fixture(scope="module")
def silenced_twice():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # perturbed: outside its working range, flagged
        return simulate_mhsa(**_problem(), neuron="escape", duration=0.2, warmup=0.1, seed=0, codegen="numpy",
                             record_spikes=("l23",),
                             perturbations=[Silence("l23", start=0.05, stop=0.15),
                                            Silence("l23", cells=[0, 1, 2], start=0.2, stop=0.25),
                                            Silence("l23", start=0.22, stop=0.27)])


@pytest.mark.brian2
def test_both_intervals_of_two_silences_are_silent(silenced_twice):
    """P01: the later Silence of a population used to overwrite the earlier."""
    i, t = silenced_twice.spikes["l23"]

    def spikes(a, b):
        sel = (t >= a + 1e-9) & (t < b - 1e-9)
        return set(i[sel].tolist())

    assert spikes(0.0, 0.05) and spikes(0.15, 0.2) and spikes(0.27, 0.3)
    assert not spikes(0.05, 0.15) and not spikes(0.22, 0.27)
    assert spikes(0.2, 0.22) and not spikes(0.2, 0.22) & {0, 1, 2}   # only cells 0-2 from 0.2 s


# P04, P13, P37: against the run -------------------------------------------------------------

@pytest.mark.codegen_independent
@pytest.mark.parametrize("neuron, kw, span", [("escape", dict(duration=0.2, warmup=0.1), "0.3"),
                                              ("rate", dict(duration=0.2), "0.2")])
def test_a_silence_after_the_run_is_refused(no_build, neuron, kw, span):
    with pytest.raises(ValueError, match=rf"^perturbations\[0\]: Silence\('l23', start=100 s, stop=None\) starts "
                                         rf"after the run ends: the network's clock spans \[0, {span}\) s"):
        build_mhsa(**_problem(), neuron=neuron, perturbations=[Silence("l23", start=100)], **kw)


@pytest.mark.codegen_independent
def test_a_silence_past_the_end_warns_that_it_is_cut_short(no_build):
    with pytest.warns(PerturbationWarning, match=r"stops after the run ends at 0\.3 s .*silences \[0\.1, 0\.3\) s"):
        build_mhsa(**_problem(), neuron="escape", duration=0.2, warmup=0.1, device="cpp_standalone",
                   perturbations=[Silence("l23", start=0.1, stop=5)])
    assert issubclass(ctmhsa.perturb.PerturbationWarning, UserWarning)


@pytest.mark.codegen_independent
@pytest.mark.parametrize("target, rate", [("l23", 1e9), ("interneuron", 20e3)])
def test_a_drive_above_one_spike_per_step_is_refused(no_build, target, rate):
    with pytest.raises(ValueError, match=rf"^perturbations\[0\]: Drive.rate: {re.escape(f'{rate:g}')} Hz is above 1/dt = 1000 Hz"
                                         r".*delivered as 1000 Hz"):
        build_mhsa(**_problem(), neuron="escape", perturbations=[Drive(target, rate=rate)])


@pytest.mark.codegen_independent
def test_drives_up_to_one_spike_per_step_and_any_rate_level_drive_are_accepted(no_build):
    build_mhsa(**_problem(), neuron="escape", device="cpp_standalone", perturbations=[Drive("l23", rate=1000)])
    build_mhsa(**_problem(), neuron="escape", dt=1e-4, device="cpp_standalone",
               perturbations=[Drive("l23", rate=5000)])
    build_mhsa(**_problem(), neuron="rate", device="cpp_standalone", perturbations=[Drive("l23", rate=1e9)])


# P19, P26: the arguments --------------------------------------------------------------------

@pytest.mark.codegen_independent
def test_empty_cells_are_refused_clearly():
    with pytest.raises(ValueError, match=r"^Silence.cells: empty, so no cell would be silenced"):
        Silence("l23", cells=[])
    with pytest.raises(ValueError, match=r"^Silence.cells: empty"):
        Silence("l23", cells=np.array([], int))


@pytest.mark.codegen_independent
@pytest.mark.parametrize("bad, match", [
    (Silence, r"^perturbations: expected a list .*got the class Silence, not an instance"),
    ([Drive], r"^perturbations\[0\]: expected .*got the class Drive, not an instance"),
    (3, r"^perturbations: expected a list .*got int"),
    ("l23", r"^perturbations: expected a list .*got str"),
    ({"l23": Silence("l23")}, r"^perturbations: expected a list .*got dict")])
def test_perturbations_that_are_not_a_list_of_them_are_refused(no_build, bad, match):
    with pytest.raises(TypeError, match=match):
        build_mhsa(**_problem(), neuron="rate", perturbations=bad)


# P25: paths by area and block ---------------------------------------------------------------

@pytest.mark.codegen_independent
def test_an_area_of_a_population_without_an_area_axis_is_refused():
    with pytest.raises(ValueError, match=r"^perturbations\[0\]: 'nucleus1' has no area axis .* shared by all 2 "
                                         r"areas, so 'area1.nucleus1' cannot select area 1's part"):
        check_perturbations([Silence("area1.nucleus1")], _pathway(H=2))
    with pytest.raises(ValueError, match=r"'b0_drive_q' joins populations without an area axis"):
        check_perturbations([Cut("block0.area1.drive_q")], _model(H=2, blocks=1))
    # one area holds all: area 0 of a nucleus is all of it; a projection with an area side selects
    assert check_perturbations([Silence("area0.nucleus1")], _pathway(H=1))
    assert check_perturbations([Cut("area1.pt_out")], _pathway(H=2))


@pytest.mark.codegen_independent
def test_paths_resolve_by_block_in_a_model():
    c = _model(blocks=2)
    for path, name in [("b1.l23", "b1_l23"), ("block1.area0.l23", "area0.b1_l23"), ("b1_l23", "b1_l23"),
                       ("block0.interneuron", "b0_interneuron"), ("input", "input")]:
        assert check_perturbations([Silence(path)], c)[0].population == name
    assert check_perturbations([Cut("block1.attention", 0.5)], c)[0].projection == "b1_attention"
    assert check_perturbations([Drive("b0.l23", rate=5)], c)[0].population == "b0_l23"
    with pytest.raises(ValueError, match=r"'l23' is in 2 blocks of this model \(\['b0_l23', 'b1_l23'\]\); give "
                                         r"its block, e.g. 'block0.l23'"):
        check_perturbations([Silence("l23")], c)
    with pytest.raises(ValueError, match=r"block 2 does not exist \(the model has 2 block\(s\), 0-1\)"):
        check_perturbations([Silence("block2.l23")], c)
    with pytest.raises(ValueError, match=r"'b0_l99' is not a population of this circuit; its populations are "
                                         r"\['input', 'b0_nucleus1'"):
        check_perturbations([Silence("block0.l99")], c)
    # one block: a bare name is its population; an applied path is read back by the description
    one = _model(blocks=1)
    perts = check_perturbations([Silence("block0.area0.l23", start=0.1)], one)
    assert np.all(perturb.silence_values(perturb.apply(one, perts))["b0_l23"]["sil_on"] == 0.1)
    assert check_perturbations([Silence("l23")], one)[0].population == "b0_l23"
    # the pathway is block 0, its names unprefixed; 'b0.' reads as 'block0.'
    assert check_perturbations([Silence("b0.area0.l23")], _pathway())[0].population == "b0.area0.l23"
