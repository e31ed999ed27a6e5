"""Options of single sets, streams and models (issue 46 items 4 and 5): every option applies to
the kind of run it is given to or is refused naming it (:data:`ctmhsa.sims.options.APPLIES`),
a stream's presentation is at least the circuit's minimum, and a model's options are checked
before any network is built."""

import dataclasses

import numpy as np
import pytest

import ctmhsa
from ctmhsa.maths.model import Block
from ctmhsa.sims import simulate_mhsa
from ctmhsa.sims.digits import cells
from ctmhsa.sims.options import (APPLIES, RUN_KINDS, CircuitOptions, RunOptions, check_applies, check_run,
                                 given_options, min_presentation)


@pytest.fixture
def problem():
    """The issue's setup ($P): one set X, a stream S of two sets, weights W and a one-block model."""
    r = np.random.default_rng(0)
    X = r.normal(size=(3, 3)) * .6
    S = r.normal(size=(2, 3, 3)) * .6
    W = [r.normal(size=s) / 2 for s in [(1, 2, 3)] * 3 + [(1, 3, 2)]]
    return X, S, W, ctmhsa.Model.from_arrays(*W)


class Built(Exception):
    """Raised in place of building a model's network: carries the options it would run with."""


@pytest.fixture
def model_options(monkeypatch):
    """Run ``simulate_model`` up to its runner and return ``(circuit options, run options)``."""
    def runner(circuit, menc, inputs, co, ro):
        raise Built(co, ro)
    monkeypatch.setattr("ctmhsa.sims.model.RuntimeRunner", runner)

    def run(*args, **kw):
        with pytest.raises(Built) as info:
            ctmhsa.simulate_model(*args, **kw)
        return info.value.args
    return run


# the table -------------------------------------------------------------------------------------

@pytest.mark.codegen_independent
def test_the_table_names_known_kinds_and_every_option_field():
    for name, (kinds, inert, reason) in APPLIES.items():
        assert kinds and set(kinds) <= set(RUN_KINDS), name
        assert set(kinds) == set(RUN_KINDS) or reason, name
    fields = {f.name for cls in (CircuitOptions, RunOptions) for f in dataclasses.fields(cls)}
    assert fields <= set(APPLIES)


@pytest.mark.codegen_independent
def test_check_applies_names_the_option_or_its_flag():
    check_applies("model", dict(causal=False, checkpoints=[], threads=1, device="runtime", record_spikes=["l23"],
                                duration=None))
    check_applies("set", dict(checkpoints=[0.1], device="cpp_standalone", duration=2.0))
    with pytest.raises(ValueError, match=r"^checkpoints: does not apply to a stream of sets, only to one token set: .*"
                                         r"presentation windows"):
        check_applies("stream", dict(checkpoints=[0.1]))
    with pytest.raises(ValueError, match=r"^--scheduler: does not apply to a transformer model"):
        check_applies("model", dict(record_spikes=True, scheduler="serial"), flags=dict(scheduler="--scheduler"))
    with pytest.raises(ValueError, match=r"^run_options\.duration: does not apply to a stream.*T x presentation"):
        check_applies("stream", given_options(run_options=RunOptions(duration=5.0)))
    with pytest.raises(ValueError, match="^kind: "):
        check_applies("pathway", {})
    assert given_options(CircuitOptions(causal=True), RunOptions(), seed=None, neuron="rate") == {
        "neuron": "rate", "circuit_options.causal": True}


# item 4: streams -------------------------------------------------------------------------------

@pytest.mark.codegen_independent
@pytest.mark.parametrize("kw, match", [
    (dict(neuron="rate", run_options=RunOptions(duration=5.0)), r"^run_options\.duration: .*T x presentation"),  # S18
    (dict(neuron="escape", presentation=0.2, checkpoints=[0.1]), r"^checkpoints: .*stream"),                   # S19
    (dict(neuron="rate", run_options=RunOptions(checkpoints=(0.5,))), r"^run_options\.checkpoints: "),
    (dict(neuron="rate", scheduler="serial"), r"^scheduler: does not apply to a stream"),
])
def test_options_that_do_not_apply_to_a_stream_are_refused(problem, no_build, kw, match):
    X, S, W, _ = problem
    with pytest.raises(ValueError, match=match):
        simulate_mhsa(S, *W, **kw)


# item 5: the minimum presentation --------------------------------------------------------------

@pytest.mark.codegen_independent
def test_a_presentation_below_the_minimum_is_refused_before_building(problem, no_build):
    X, S, W, m = problem
    with pytest.raises(ValueError, match=r"^presentation: 0.004 s is shorter than the minimum presentation of "
                                         r"0.02 s at the escape level .*tau_int"):                             # S24
        simulate_mhsa(S, *W, neuron="escape", presentation=0.004, warmup=0.1, seed=1)
    with pytest.raises(ValueError, match=r"^presentation: 0.008 s .*minimum presentation of 0.08 s .*tau_relay"):
        ctmhsa.simulate_model(m, S, neuron="rate", presentation=0.008)                                        # M63
    two = dataclasses.replace(m, blocks=(m.blocks[0], m.blocks[0]))     # blocks settle one after another
    with pytest.raises(ValueError, match=r"^presentation: 0.1 s .*minimum presentation of 0.16 s .*2 blocks"):
        ctmhsa.simulate_model(two, S, neuron="rate", presentation=0.1)


@pytest.mark.codegen_independent
def test_the_minimum_keeps_the_presentations_the_project_uses():
    def minimum(blocks=None, **kw):
        return min_presentation(CircuitOptions(**kw), blocks)[0]

    # pathway streams: the timescale benchmark's 0.05 s (default and 5 ms cells), tests' 0.15-0.3 s
    assert minimum(neuron="escape") <= 0.05 and minimum(neuron="rate") <= 0.05
    assert minimum(neuron="escape", **cells("population")) <= 0.05
    assert 0.4 <= minimum(neuron="lif") <= 0.42        # the lif somata's coupling: 0.2 s
    assert minimum(neuron="lif", circuit="memory") == pytest.approx(0.42)   # and the memory's write window
    # the digits model (one block): `ctmhsa bench digits` runs 0.05 s, Poisson cells included
    for firing in ("population", "poisson"):
        assert minimum(1, neuron="escape", **cells(firing)) <= 0.05
    assert 0.005 < minimum(1, neuron="rate", params=cells()["params"]) <= 0.1                                # C55
    # models of default cells: 0.2 s per set for one block (docs/transformer.md), 1 s up to three
    assert minimum(1, neuron="rate") <= 0.2 and minimum(3, neuron="escape") <= 1.0
    check_run(CircuitOptions(neuron="escape"), RunOptions(presentation=0.05, duration=0.1).resolved("escape"))


@pytest.mark.codegen_independent
def test_digits_refuses_a_presentation_too_short_to_settle(tmp_path, capsys):                               # C55
    from ctmhsa.sims.cli import main

    out = tmp_path / "d55"
    rc = main(["digits", "--neuron", "rate", "--presentation", "0.005", "--images", "2", "--quiet",
               "--out", str(out), "--no-figure"])
    err = capsys.readouterr().err
    assert rc != 0 and not out.exists()
    assert "presentation" in err and "minimum presentation of 0.02 s" in err


# models ----------------------------------------------------------------------------------------

@pytest.mark.codegen_independent
@pytest.mark.parametrize("make, kw, match", [
    (lambda X, S: np.zeros((0, 3)), {}, r"^X: an empty token set"),                                          # M31
    (lambda X, S: np.zeros((0, 3, 3)), {}, r"^X: an empty stream"),                                          # M33
    (lambda X, S: S, dict(neuron="escape", presentation=0.2, lag=0.3), r"^lag: the decoding window .* empty"),  # M36
    (lambda X, S: S, dict(neuron="escape", presentation=0.2, lag=-0.1), r"^lag: expected a non-negative"),    # M37
    (lambda X, S: X, dict(neuron="rate", lag=0.1), r"^lag: .*one token set"),
    (lambda X, S: X, dict(calibration=np.zeros((0, 3, 3))), r"^calibration: .*\(0, 3, 3\) \(empty\)"),       # M43
    (lambda X, S: X, dict(neuron="escape", record_spikes=["nope"]),                                          # M53
     r"^record_spikes: 'nope' is not a population .*'b0_l23'.*selects it in every block"),
    (lambda X, S: S, dict(neuron="rate", run_options=RunOptions(duration=3.0)), r"^run_options\.duration: .*stream"),
])
def test_bad_model_arguments_are_refused_naming_them_before_building(problem, no_build, make, kw, match):
    X, S, W, m = problem
    with pytest.raises(ValueError, match=match):
        ctmhsa.simulate_model(m, make(X, S), **kw)


@pytest.mark.codegen_independent
@pytest.mark.parametrize("kw, name", [
    (dict(circuit_options=CircuitOptions(causal=True)), "circuit_options.causal"),                            # M38
    (dict(circuit_options=CircuitOptions(normalize=False)), "circuit_options.normalize"),
    (dict(circuit_options=CircuitOptions(law="co4")), "circuit_options.law"),
    (dict(circuit_options=CircuitOptions(signed="offset")), "circuit_options.signed"),
    (dict(circuit_options=CircuitOptions(circuit="linear")), "circuit_options.circuit"),
    (dict(run_options=RunOptions(checkpoints=(0.5,))), "run_options.checkpoints"),
    (dict(run_options=RunOptions(scheduler="serial")), "run_options.scheduler"),
])
def test_option_objects_given_to_a_model_apply_or_are_refused(problem, no_build, kw, name):
    X, S, W, m = problem
    with pytest.raises(ValueError, match=rf"^{name}: does not apply to a transformer model"):
        ctmhsa.simulate_model(m, X, neuron="rate", **kw)


@pytest.mark.codegen_independent
def test_option_objects_given_to_a_model_are_applied(problem, model_options):
    X, S, W, m = problem
    co, ro = model_options(m, X, circuit_options=CircuitOptions(neuron="rate", phi="softplus"))
    assert co.neuron == "rate" and co.phi == "softplus" and ro.duration == 1.0
    co, ro = model_options(m, S, run_options=RunOptions(presentation=0.3, warmup=0.2, seed=5), neuron="escape",
                           circuit_options=CircuitOptions(P=2))
    assert (ro.presentation, ro.duration, ro.warmup, ro.seed, co.P) == (0.3, 0.6, 0.2, 5, 2)
    co, ro = model_options(m, X, neuron="rate", run_options=RunOptions(duration=0.5))
    assert ro.duration == 0.5


@pytest.mark.codegen_independent
def test_a_role_without_its_block_records_it_in_every_block(problem, model_options):                      # M53b
    X, S, W, m = problem
    two = dataclasses.replace(m, blocks=(m.blocks[0], Block.from_arrays(*W)))
    co, ro = model_options(two, X, neuron="escape", record_spikes=["l23", "b1_l5pt"], duration=0.2, warmup=0.1)
    assert ro.record_spikes == ("b0_l23", "b1_l23", "b1_l5pt")
    co, ro = model_options(m, X, neuron="escape", record_spikes=True, duration=0.2, warmup=0.1)
    assert ro.record_spikes is True


@pytest.mark.codegen_independent
def test_a_lif_stream_is_read_in_the_second_half_of_each_presentation():
    """The lif somata couple over 0.2 s: a pathway stream's window opens at half the presentation
    (eight couplings, 1.6 s, at most), where the 50 ms of the other levels opened it a quarter of
    one coupling after the switch; the escape level's lag is unchanged."""
    from ctmhsa.sims.options import decode_lag, level_lag

    for P in (0.2, 0.5, 1.0):
        assert level_lag(CircuitOptions(neuron="escape"), P) == decode_lag(P) == min(0.05, P / 2)
    assert level_lag(CircuitOptions(neuron="lif"), 0.4) == pytest.approx(0.2)
    assert level_lag(CircuitOptions(neuron="lif"), 4.0) == pytest.approx(1.6)
