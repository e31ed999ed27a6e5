"""Variants of the issue-46 fault cases outside the case file: option objects beside keywords
left at None, area paths with cells, training and sweeps given what they cannot apply, results
read back damaged, writers given no result, benchmark sizes. Every one refuses before building."""

import json
import os

import numpy as np
import pytest

import ctmhsa
from conftest import random_problem
from ctmhsa.circuits.perturb import Silence, check_perturbations
from ctmhsa.sims import CircuitOptions, RunOptions, train_mhsa
from ctmhsa.sims.io import load, write_result
from ctmhsa.sims.options import given_options, split_options
from ctmhsa.sims.result import SimulationResult
from ctmhsa.sims.sweep import sweep

pytestmark = pytest.mark.codegen_independent


@pytest.fixture
def tiny():
    X, _, WQ, WK, WV, WO = random_problem(n=3, H=1, dk=2, dv=2, de=3)
    return dict(X=X, WQ=WQ, WK=WK, WV=WV, WO=WO)


# 1. a keyword left at None beside an option object ----------------------------------------------

def test_a_keyword_left_at_none_keeps_the_option_objects_field():
    """``build_mhsa(S, presentation=None, run_options=RunOptions(presentation=0.5))`` ran 0.2 s
    presentations (the default) instead of the object's 0.5 s, without a word."""
    co, ro = split_options(CircuitOptions(input_range=5.0), RunOptions(presentation=0.5, dt=5e-4),
                           presentation=None, dt=None, input_range=None, neuron="rate")
    assert (ro.presentation, ro.dt, co.input_range.norm) == (0.5, 5e-4, 5.0)
    assert split_options(None, RunOptions(dt=5e-4), dt=1e-4)[1].dt == 1e-4     # a value still overrides
    assert given_options(None, RunOptions(presentation=0.5), presentation=None) == {
        "run_options.presentation": 0.5}


def test_a_models_one_set_refuses_the_run_options_presentation(tiny, no_build):
    """``simulate_model(m, X, run_options=RunOptions(presentation=0.2))`` on one token set was
    accepted and the presentation ignored."""
    m = ctmhsa.Model.from_arrays(tiny["WQ"], tiny["WK"], tiny["WV"], tiny["WO"])
    with pytest.raises(ValueError, match=r"^presentation: a presentation period needs a stream"):
        ctmhsa.simulate_model(m, tiny["X"], neuron="rate", run_options=RunOptions(presentation=0.2))


# 2. an area path with cells ----------------------------------------------------------------------

def test_cells_outside_the_paths_area_are_refused():
    """``Silence("area1.l23", cells=[0])`` with cell 0 in area 0 silenced no cell at all."""
    circuit = CircuitOptions(neuron="rate").describe(3, 2, 2, 3, H=2)
    with pytest.raises(ValueError, match=r"^perturbations\[0\]: Silence.cells: \[0\] lie outside area 1 of "
                                         r"'l23' \(its 18 cells there: \[18, 19,"):
        check_perturbations([Silence("area1.l23", cells=[0])], circuit)
    check_perturbations([Silence("area1.l23", cells=[18, 20])], circuit)     # cells of that area


# 3. training -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, obj", [("circuit_options", CircuitOptions(causal=True)),
                                       ("run_options", RunOptions(duration=0.5))])
def test_training_refuses_option_objects_by_name(tiny, no_build, name, obj):
    """Was ``TypeError: split_options() got multiple values for argument 'circuit_options'``."""
    with pytest.raises(TypeError, match=rf"^{name}: train_mhsa takes its options as keywords"):
        train_mhsa(tiny["X"], tiny["X"], tiny["WQ"], tiny["WK"], tiny["WV"], tiny["WO"], steps=1, **{name: obj})


def test_training_refuses_what_one_set_cannot_apply_before_the_first_step(tiny, no_build):
    """A presentation was refused inside the first step ("step 0, batch item 0: ...")."""
    with pytest.raises(ValueError, match=r"^presentation: does not apply to one token set"):
        train_mhsa(tiny["X"], tiny["X"], tiny["WQ"], tiny["WK"], tiny["WV"], tiny["WO"], steps=1, presentation=0.2)


# 4. sweeps ---------------------------------------------------------------------------------------

def test_a_sweep_refuses_a_bad_item_before_any_item_runs(tiny, no_build, tmp_path):
    """Item 1's presentation on one set was refused only after item 0 had run (and, without an
    out_dir, its result was lost)."""
    good = dict(tiny, neuron="rate")
    for bad, match in [(dict(good, presentation=0.2), r"^items\[1\]: presentation: does not apply"),
                       (dict(good, duration=-1), r"^items\[1\]: duration: expected a positive"),
                       (dict(good, foo=1), r"^items\[1\]: unexpected keyword argument 'foo'"),
                       ({"X": tiny["X"], "seed": -1}, r"^items\[1\]: seed: expected a non-negative integer")]:
        with pytest.raises((ValueError, TypeError), match=match):
            sweep([good, bad], "serial", out_dir=str(tmp_path / "sw"))
    assert not os.path.exists(tmp_path / "sw")


@pytest.mark.parametrize("items, out_dir, match", [
    (None, 3, r"^out_dir: expected a directory path \(a string\), got 3"),
    ("dict", None, r"^items: expected a sequence of dicts of simulate_mhsa arguments, got dict"),
])
def test_a_sweeps_arguments_are_named(tiny, no_build, items, out_dir, match):
    item = dict(tiny, neuron="rate")
    with pytest.raises(TypeError, match=match):
        sweep(item if items == "dict" else [item], "serial", out_dir=out_dir)


# 5. results written and read back ----------------------------------------------------------------

def _result() -> SimulationResult:
    x = np.full((2, 2), 1.0)
    return SimulationResult(x_tilde=x, reference=x, stages={"x_tilde": x}, reference_stages={"x_tilde": x},
                            rates={"nucleus2": np.ones((2, 2))}, spikes={}, level="rate",
                            config={"duration": 0.5}, counts={"neurons": 4})


def test_writers_refuse_what_is_not_a_result(tmp_path):
    """Both were ``AttributeError: 'NoneType' object has no attribute ...``."""
    from ctmhsa.sims.nwb import write_nwb

    with pytest.raises(TypeError, match=r"^result: expected a ctmhsa.sims.SimulationResult"):
        write_result(None, str(tmp_path / "run"))
    assert not os.path.exists(tmp_path / "run")
    with pytest.raises(TypeError, match=r"^result: expected a spiking run's result"):
        write_nwb(None, str(tmp_path / "x.nwb"))
    spiking = _result()
    spiking.level = "escape"
    with pytest.raises(TypeError, match=r"^path: expected a file name ending in .nwb, got None"):
        write_nwb(spiking, None)


def test_load_names_an_unknown_level_and_stages_unlike_their_reference(tmp_path):
    """An unknown level was read as it was; stages of another shape than their reference failed
    later in ``metrics()`` ("decoded shape (1, 2) differs from reference (2, 2)", no file named)."""
    path = write_result(_result(), str(tmp_path / "run"), config={})
    prov_file = os.path.join(path, "provenance.json")
    prov = json.load(open(prov_file))
    json.dump(dict(prov, level="bogus"), open(prov_file, "w"))
    with pytest.raises(ValueError, match=r"provenance.json: 'level' must be one of \['escape', 'lif', 'rate'\], "
                                         r"got 'bogus'"):
        load(path)
    json.dump(prov, open(prov_file, "w"))
    np.savez(os.path.join(path, "stages.npz"), x_tilde=np.ones((1, 2)))
    with pytest.raises(ValueError, match=r"stages.npz: 'x_tilde' has shape \(1, 2\) but reference.npz holds "
                                         r"\(2, 2\)"):
        load(path)


# 6. benchmark sizes ------------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["levels", "--n", "0"], ["rate", "--repeats", "0"], ["dale", "--H", "-1"],
                                  ["speed", "--sizes", "0"], ["heads", "--d", "0"]])
def test_benchmark_sizes_are_refused_at_the_command_line(argv, capsys, monkeypatch, tmp_path):
    """``ctmhsa bench levels --n 0`` printed a traceback from the benchmark's fresh process."""
    from ctmhsa.sims.cli import main

    monkeypatch.setattr("ctmhsa.sims.benchmarks.common.machine_state", lambda: pytest.fail("the benchmark started"))
    try:
        rc = main(["bench", *argv, "--out", str(tmp_path / "b.json")])
    except SystemExit as exc:     # refused by the flag's type
        rc = exc.code
    assert rc == 2
    err = capsys.readouterr().err
    assert f"--{argv[-2].lstrip('-')}" in err and "expected an integer >= 1" in err and "Traceback" not in err
