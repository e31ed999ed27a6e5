"""The planner (issue 47, deliverable 3): from a result's noise floors and their 1/sqrt(T P)
scaling, the window or copies that reach a target NRMSE per stage, with neurons and wall time
(``ctmhsa.sims.plan``, ``SimulationResult.plan``, ``ctmhsa plan``)."""

import math

import numpy as np
import pytest

from conftest import random_problem
from ctmhsa.sims import simulate_mhsa
from ctmhsa.sims.cli import main
from ctmhsa.sims.io import write_result
from ctmhsa.sims.options import CircuitOptions
from ctmhsa.sims.plan import Plan, plan
from ctmhsa.sims.result import SimulationResult

CONFIG = dict(n=3, m=3, H=1, dk=2, dv=2, de=3, neuron="escape", P=1, firing="poisson", dt=1e-3, warmup=0.1,
              duration=0.5, device="runtime", scheduler=None, presentation=None, cross=False, skip=False)


def synthetic(level="escape", floor=0.4, nrmse=None, **config):
    """A result without a network: x̃ decoded with an error of RMS ``nrmse`` (default the floor)
    and a noise variance whose floor is ``floor``."""
    r = np.random.default_rng(0)
    ref = r.normal(size=(3, 3))
    scale = float(np.std(ref))
    err = r.normal(size=ref.shape)
    err *= (floor if nrmse is None else nrmse) * scale / np.sqrt(np.mean(err ** 2))
    var = {} if level == "rate" else {"x_tilde": np.full(ref.shape, (floor * scale) ** 2)}
    return SimulationResult(x_tilde=ref + err, reference=ref, stages={"x_tilde": ref + err},
                            reference_stages={"x_tilde": ref}, rates={}, spikes={}, level=level,
                            config=dict(CONFIG, neuron=level, **config), counts={}, noise_variance=var)


@pytest.fixture(scope="module")
def escape(tmp_path_factory):
    """One tiny escape run (0.4 s, a checkpoint at 0.1 s) and its results directory."""
    X, _, WQ, WK, WV, WO = random_problem(n=3, H=1, dk=2, dv=2, de=3)
    res = simulate_mhsa(X, WQ, WK, WV, WO, neuron="escape", duration=0.4, warmup=0.1, codegen="numpy", seed=0,
                        checkpoints=[0.1])
    path = str(tmp_path_factory.mktemp("plan") / "run")
    write_result(res, path)
    return res, path


@pytest.mark.codegen_independent
def test_quadrupling_the_window_or_the_copies_halves_the_floor():
    p = plan(synthetic(floor=0.4), 0.2)
    (s,) = p.stages
    assert isinstance(p, Plan) and p.exact_rule and not s.reached
    assert s.T == pytest.approx(4 * 0.5) and s.P == 4 and s.P_floor == pytest.approx(0.2)
    # the circuit at P = 4, described (not built); wall times from estimate_runtime
    c = CircuitOptions(neuron="escape", P=4).describe(3, 2, 2, 3)
    assert s.P_neurons == c.n_neurons() and s.P_neurons > p.neurons
    assert s.T_neurons == p.neurons and s.T_wall > p.wall and s.P_wall > p.wall
    # the same circuit run 4x longer: its floor halves, and the plan says the target is reached
    (again,) = plan(synthetic(floor=0.2, duration=2.0), 0.2).stages
    assert again.reached and "already" in str(plan(synthetic(floor=0.2, duration=2.0), 0.2))
    # P is an integer: rounded up, its floor at or below the target
    (odd,) = plan(synthetic(floor=0.4), 0.3).stages
    assert odd.P == math.ceil((0.4 / 0.3) ** 2) and odd.P_floor <= 0.3


@pytest.mark.codegen_independent
def test_per_population_copies_are_scaled_as_a_whole():
    (s,) = plan(synthetic(floor=0.4, P={"l5pt": 2, "nucleus2": 3}), 0.2).stages
    assert s.P["l5pt"] == 8 and s.P["nucleus2"] == 12 and s.P["l23"] == 4 and s.P_floor == pytest.approx(0.2)


@pytest.mark.codegen_independent
def test_a_stage_far_above_its_floor_is_flagged_as_bias():
    p = plan(synthetic(floor=0.1, nrmse=0.5), 0.2)
    assert p.stages[0].bias == pytest.approx(math.sqrt(0.5 ** 2 - 0.1 ** 2), rel=1e-6)
    assert "not reachable by T or P" in str(p)
    assert "integrators" in str(plan(synthetic(floor=0.4, firing="population"), 0.2))   # an upper bound


@pytest.mark.codegen_independent
def test_the_rate_level_is_refused():
    with pytest.raises(ValueError, match=r"^result: the rate level has no spike-count noise"):
        plan(synthetic(level="rate"), 0.1)
    with pytest.raises(TypeError, match=r"^result: expected a ctmhsa.sims.SimulationResult"):
        plan({"x_tilde": 1.0}, 0.1)


@pytest.mark.codegen_independent
@pytest.mark.parametrize("target, error, match", [
    (0, ValueError, r"^target: expected a target NRMSE > 0"), (-0.1, ValueError, r"^target: "),
    (float("nan"), ValueError, r"^target: "), (float("inf"), ValueError, r"^target: "),
    (True, TypeError, r"^target: "), ("0.1", TypeError, r"^target: "),
    ({"x_tilde": 0}, ValueError, r"^target\['x_tilde'\]: "), ({"kappa": 0.1}, ValueError, r"^target: unknown stage")])
def test_a_bad_target_is_refused_naming_it(target, error, match):
    with pytest.raises(error, match=match):
        plan(synthetic(), target)


@pytest.mark.codegen_independent
def test_bad_stages_and_streams_are_refused():
    with pytest.raises(ValueError, match=r"^stages: unknown stage\(s\) \['kappa'\]"):
        plan(synthetic(), 0.1, stages=["kappa"])
    with pytest.raises(ValueError, match=r"^result: a stream's floors are per presentation"):
        plan(synthetic(presentation=0.2), 0.1)


@pytest.mark.codegen_independent
def test_a_bad_cli_target_is_refused_naming_the_flag(capsys):
    assert main(["plan", "no-such-dir", "--target", "0"]) == 2
    assert "ctmhsa: error: --target: expected a target NRMSE > 0" in capsys.readouterr().err


@pytest.mark.brian2
def test_the_rule_matches_the_runs_own_floors(escape):
    """The floors at a quarter of the window are twice the full window's (to within the count
    noise of a 0.1 s window): the scaling the plan uses."""
    res, _ = escape
    short, full = res.diagnostics["checkpoints"][0], res.metrics()
    assert short["T"] == pytest.approx(0.1)
    ratios = [short["metrics"][s]["noise_floor"] / full[s]["noise_floor"] for s in full]
    assert 1.8 < np.median(ratios) < 2.2 and all(1.5 < r < 2.7 for r in ratios)
    p = plan(res, {s: m["noise_floor"] / 2 for s, m in full.items()})
    assert all(s.T == pytest.approx(1.6) and s.P == 4 for s in p.stages)


@pytest.mark.brian2
def test_the_cli_prints_the_plan(escape, capsys):
    _, path = escape
    assert main(["plan", path, "--target", "0.1", "--stage", "x_tilde", "kappa"]) == 0
    out = capsys.readouterr().out
    assert "floor ∝ 1/sqrt(T·P)" in out and "window T (s)" in out
    rows = [line.split()[0] for line in out.splitlines()[3:5]]
    assert rows == ["kappa", "x_tilde"]
    assert main(["plan", path, "--target", "0.1", "--stage", "xtilde"]) == 2
    assert "ctmhsa: error: --stage: unknown stage(s) ['xtilde']" in capsys.readouterr().err
