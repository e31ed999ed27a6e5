"""Fidelity levels as registered objects (issue 48, item 1): their facts, and no level-name
comparisons left outside ctmhsa.neurons.levels."""

import dataclasses
import pathlib

import numpy as np
import pytest
from conftest import LAYERS, name_comparisons

from ctmhsa.neurons import levels, models
from ctmhsa.neurons.levels import LEVELS, Level, get_level, register_level

pytestmark = pytest.mark.codegen_independent

ROOT = pathlib.Path(__file__).resolve().parents[2]
NAMES = ("rate", "escape", "lif")
ALLOWED = set()   # "path:line" of a comparison that may stay (none)


def level_comparisons(source: str) -> list[int]:
    """Lines comparing a value with a level's name: ``x == "rate"``, ``x != "lif"``,
    ``x in ("escape", "lif")`` (a key test such as ``"rate" in obs`` is not one)."""
    return [n for n, _ in name_comparisons(source, NAMES)]


def test_counter_finds_comparisons():
    src = 'a == "rate"\nb != "lif"\nc in ("escape", "lif")\n"rate" in obs\nd == "poisson"\n'
    assert level_comparisons(src) == [1, 2, 3]


def test_no_level_name_comparisons_outside_levels():
    found = []
    for pkg in LAYERS:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if path == ROOT / "neurons" / "levels.py":
                continue
            rel = path.relative_to(ROOT).as_posix()
            found += [f"{rel}:{n}" for n in level_comparisons(path.read_text()) if f"{rel}:{n}" not in ALLOWED]
    assert found == []


def test_registry_holds_the_former_tables():
    from ctmhsa.sims.options import DEFAULT_DT, DEFAULT_WARMUP

    assert LEVELS == NAMES and tuple(models.FIDELITY_LEVELS) == NAMES
    assert dict(DEFAULT_DT) == {"rate": 1e-3, "escape": 1e-3, "lif": 1e-3}
    assert dict(DEFAULT_WARMUP) == {"rate": 0.0, "escape": 0.5, "lif": 0.5}
    assert [get_level(n).spiking for n in NAMES] == [False, True, True]
    assert [get_level(n).lif for n in NAMES] == [False, False, True]
    assert [get_level(n).escape for n in NAMES] == [False, True, False]
    assert get_level(get_level("lif")) is get_level("lif") and str(get_level("lif")) == "lif"


@pytest.mark.parametrize("bad", ["gif", None, ["rate"]])
def test_unknown_level_refused(bad):
    with pytest.raises(ValueError, match=r"unknown fidelity level .*expected one of \['rate', 'escape', 'lif'\]"):
        get_level(bad)
    with pytest.raises(TypeError):
        register_level("rate")


@pytest.mark.parametrize("field", ["steps_per_tau", "soma_steps_per_tau"])
@pytest.mark.parametrize("bad", [0, -2.5, True, "5"])
def test_a_level_refuses_steps_that_are_not_positive_numbers(field, bad):
    with pytest.raises(ValueError, match=rf"^{field}: level 'lif' needs a positive number"):
        dataclasses.replace(get_level("lif"), **{field: bad})


def test_the_lif_somata_take_their_own_steps_the_synapses_the_levels():
    """The lif level's 1 ms: its somata's membrane and background allow 2.5 steps per time
    constant (1.08 ms), the synaptic kernels 5 (tau_syn = 5 ms: 1 ms, as at the escape level)."""
    from ctmhsa.sims.options import CircuitOptions, max_dt

    bound, why = max_dt(CircuitOptions(neuron="lif"))
    assert bound == pytest.approx(1e-3) and why.startswith("tau_syn")
    assert get_level("lif").soma_steps_per_tau == 2.5 and get_level("escape").soma_steps_per_tau is None
    saved = dict(levels._REGISTRY)
    try:   # with the somata held to the level's 5 steps, they would bind: 2.7 ms / 5
        register_level(dataclasses.replace(get_level("lif"), soma_steps_per_tau=None))
        bound, why = max_dt(CircuitOptions(neuron="lif"))
        assert bound == pytest.approx(2.7e-3 / 5) and why.startswith("tau_e")
    finally:
        levels._REGISTRY.clear()
        levels._REGISTRY.update(saved)


def test_the_memory_circuit_keeps_half_a_millisecond_at_the_lif_level():
    """Its read path erred more at the lif level's 1 ms (ṽ NRMSE 0.287 against 0.248, the same
    floors): its default step there is 0.5 ms, and a coarser one is refused before anything is
    built; the other levels and areas keep theirs."""
    from ctmhsa.sims.options import CircuitOptions, RunOptions, check_run

    assert RunOptions().resolved("lif", "memory").dt == 5e-4
    assert RunOptions().resolved("lif", "quadratic").dt == RunOptions().resolved("escape", "memory").dt == 1e-3
    assert RunOptions(dt=1e-4).resolved("lif", "memory").dt == 1e-4
    co = CircuitOptions(neuron="lif", circuit="memory")
    with pytest.raises(ValueError, match=r"^dt: 0.001 s .*circuit='memory' at the lif level"):
        check_run(co, RunOptions(dt=1e-3, presentation=1.0).resolved("lif", "memory"))


@pytest.fixture
def toy_level():
    """A copy of the rate level named "toy", its cell models the rate level's; the registries
    restored afterwards."""
    saved_levels, saved_models = dict(levels._REGISTRY), dict(models.MODELS)
    register_level(dataclasses.replace(get_level("rate"), name="toy", description="a copy of rate"))
    models.MODELS.update({("toy", ct): m for (lv, ct), m in saved_models.items() if lv == "rate"})
    yield get_level("toy")
    levels._REGISTRY.clear()
    levels._REGISTRY.update(saved_levels)
    models.MODELS.clear()
    models.MODELS.update(saved_models)


def test_toy_level_is_one_registration(toy_level):
    from ctmhsa.sims.options import DEFAULT_DT, CircuitOptions, RunOptions, max_dt

    assert "toy" in LEVELS and "toy" in models.FIDELITY_LEVELS and DEFAULT_DT["toy"] == 1e-3
    co = CircuitOptions(neuron="toy")
    assert co.level is toy_level and not co.spiking
    assert max_dt(co) == max_dt(CircuitOptions(neuron="rate"))
    assert RunOptions().resolved("toy") == RunOptions().resolved("rate")
    assert models.get_model("toy", "l23") == models.get_model("rate", "l23")
    with pytest.raises(ValueError, match="warmup: the rate level has no measurement window"):
        RunOptions(warmup=0.1).resolved("toy")


def test_toy_level_builds_and_runs(toy_level):
    """The registered toy level runs a whole simulation through the unchanged front end, giving
    the rate level's result (its cells are the rate level's)."""
    from ctmhsa import simulate_mhsa

    rng = np.random.default_rng(3)
    X = rng.normal(size=(3, 4))
    W = [rng.normal(size=(2, 2, 4)) / 2 for _ in range(3)] + [rng.normal(size=(2, 4, 2)) / 2]
    toy, rate = (simulate_mhsa(X, *W, neuron=lv, duration=0.3) for lv in ("toy", "rate"))
    assert toy.level == "toy" and toy.config["neuron"] == "toy"
    np.testing.assert_array_equal(toy.x_tilde, rate.x_tilde)
    assert toy.metrics()["x_tilde"]["nrmse"] < 1e-6


def test_registry_restored_after_toy():
    assert "toy" not in LEVELS and not any(lv == "toy" for lv, _ in models.MODELS)
    with pytest.raises(ValueError, match="neuron: expected one of"):
        from ctmhsa.sims.options import CircuitOptions

        CircuitOptions(neuron="toy")
