"""Perturbation hooks (issue 29): silence, cut, drive; names by place; results flagged, not raised."""

import warnings

import numpy as np
import pytest

import ctmhsa
from ctmhsa.sims import build_mhsa, simulate_mhsa

P = ctmhsa.perturb


def _problem(seed=0, n=3, de=4, H=2, dk=2, dv=2):
    rng = np.random.default_rng(seed)
    return dict(X=rng.normal(size=(n, de)) / 2, WQ=rng.normal(size=(H, dk, de)) / 2,
                WK=rng.normal(size=(H, dk, de)) / 2, WV=rng.normal(size=(H, dv, de)), WO=rng.normal(size=(H, de, dv)))


def _run(pert, **kw):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        res = simulate_mhsa(**_problem(), perturbations=pert, duration=0.5, **kw)
    return res, [str(x.message) for x in w]


@pytest.mark.brian2
@pytest.mark.parametrize("neuron", ["rate", "escape"])
def test_silencing_l23_silences_l5_and_is_flagged_not_raised(neuron):
    res, warned = _run([P.Silence("l23")], neuron=neuron, seed=2)
    assert np.nanmax(res.rates["l5it"]) == 0 and np.nanmax(res.rates["l5pt"]) == 0
    assert not res.diagnostics["in_range"] and any("outside its working range" in m for m in warned)
    assert res.config["perturbations"][0]["kind"] == "silence"


@pytest.mark.brian2
def test_silencing_one_area_leaves_the_other():
    base, _ = _run(None, neuron="rate")
    res, _ = _run([P.Silence("area1.l23")], neuron="rate")
    np.testing.assert_allclose(res.rates["l5pt"][0], base.rates["l5pt"][0], rtol=1e-9)
    assert np.nanmax(res.rates["l5pt"][1]) == 0


@pytest.mark.brian2
def test_silence_interval_on_the_network_clock():
    res, _ = _run([P.Silence("nucleus1", start=0.6, stop=0.8)], neuron="escape", seed=1,
                  record_spikes=("nucleus1",))
    _, t = res.spikes["nucleus1"]
    assert t.size and not np.any((t >= 0.6 + 1e-9) & (t < 0.8 - 1e-9)) and np.any(t >= 0.8)


@pytest.mark.brian2
def test_partial_cut_removes_that_fraction_and_is_seeded():
    sim = build_mhsa(**_problem(), neuron="escape", seed=4, perturbations=[P.Cut("it_pt", fraction=0.5)])
    w = np.asarray(sim.runner.built.synapses["it_pt"].w_[:])
    assert 0.35 < np.mean(w == 0) < 0.65
    again = build_mhsa(**_problem(), neuron="escape", seed=4, perturbations=[P.Cut("it_pt", fraction=0.5)])
    np.testing.assert_array_equal(w == 0, np.asarray(again.runner.built.synapses["it_pt"].w_[:]) == 0)


@pytest.mark.brian2
def test_drive_adds_a_relay_population_and_raises_interneuron_input():
    base, _ = _run(None, neuron="rate")
    res, _ = _run([P.Drive("interneuron", rate=20)], neuron="rate")
    assert res.counts["populations"]["drive_interneuron"] == res.counts["populations"]["interneuron"]
    # the integral feedback holds the pooled input at its set point: the L2/3 pool gives way
    assert np.nanmean(res.rates["l23"]) < np.nanmean(base.rates["l23"])


@pytest.mark.codegen_independent
@pytest.mark.parametrize("bad, match", [
    (P.Silence("l99"), "'l99' is not a population"), (P.Cut("l23"), "'l23' is not a projection"),
    (P.Silence("area7.l23"), "area 7 does not exist"), (P.Silence("block1.l23"), "block 1 does not exist"),
    ("l23", "expected ctmhsa.perturb.Silence, Cut or Drive")])
def test_bad_perturbations_are_refused_before_building(bad, match):
    with pytest.raises((ValueError, TypeError), match=match):
        build_mhsa(**_problem(), neuron="rate", perturbations=[bad])


@pytest.mark.codegen_independent
def test_perturbation_fields_are_validated():
    with pytest.raises(ValueError, match="Cut.fraction"):
        P.Cut("attention", fraction=1.5)
    with pytest.raises(ValueError, match="Silence.stop"):
        P.Silence("l23", start=0.5, stop=0.2)
    with pytest.raises(ValueError, match="Drive.rate"):
        P.Drive("interneuron", rate=-1)
    with pytest.raises(ValueError, match="Silence.population"):
        P.Silence("a b")


@pytest.mark.brian2
def test_one_drive_per_population_and_compartment():
    res, _ = _run([P.Drive("l5it", rate=20, compartment="basal"), P.Drive("l5it", rate=20, compartment="apical")],
                  neuron="rate")
    pops = res.counts["populations"]
    assert pops["drive_l5it_basal"] == pops["drive_l5it_apical"] == pops["l5it"]
    with pytest.raises(ValueError, match="two Drives target 'l5it'.apical"):
        build_mhsa(**_problem(), neuron="rate", perturbations=[P.Drive("l5it", rate=5, compartment="apical"),
                                                                P.Drive("l5it", rate=9, compartment="apical")])


@pytest.mark.brian2
def test_silenced_interneurons_stay_finite():
    # their error never closes while their output is gone: the integral is capped, not overflowed to NaN
    sim = build_mhsa(**_problem(), neuron="escape", seed=1, duration=0.5, perturbations=[P.Silence("interneuron")])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # out of its working range: flagged
        res = sim.run()
    r = np.asarray(sim.runner.built.groups["interneuron"].r_[:])
    assert np.all(np.isfinite(r)) and r.max() <= 10 / 1e-3 + 1e-6
    assert np.nanmax(res.rates["l23"]) > 0
