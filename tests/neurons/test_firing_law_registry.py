"""Firing modes and L5 IT laws as registered objects (issue 48, item 1): their facts, and no
firing-mode or law name comparisons left outside ctmhsa.neurons.firing and
ctmhsa.neurons.law_registry (the counter of tests/neurons/test_levels.py, for their names)."""

import ast
import dataclasses
import pathlib

import numpy as np
import pytest
from conftest import LAYERS
from conftest import name_comparisons as comparisons_with

from ctmhsa.neurons import firing as firing_registry
from ctmhsa.neurons import law_registry, laws, models
from ctmhsa.neurons.firing import FIRING_MODES, Firing, get_firing, register_firing
from ctmhsa.neurons.law_registry import Law, get_law, register_law

pytestmark = pytest.mark.codegen_independent

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIRING_NAMES = ("poisson", "regular", "population")
LAW_NAMES = ("product", "co4", "tm1", "tm2", "tm3", "tm4")
REGISTRIES = {ROOT / "neurons" / "firing.py", ROOT / "neurons" / "law_registry.py"}
# "path: comparison" that may stay: another "population" (a perturbation's kind). The soma
# calibration's f-I fit laws ("affine", "quadratic", "spline" in ctmhsa.neurons.conductance) are
# another kind of law.
ALLOWED = {'circuits/perturb.py: kind == "population"'}     # a perturbation's kind, not a firing mode


def name_comparisons(source: str, names=FIRING_NAMES + LAW_NAMES) -> list[tuple[int, str]]:
    """Comparisons with a firing mode's or an L5 IT law's name (:func:`conftest.name_comparisons`)."""
    return comparisons_with(source, names)


def test_counter_finds_comparisons():
    src = 'a == "poisson"\nb != "product"\nc in ("regular", "population")\n"tm1" in laws\nd == "rate"\n'
    assert [n for n, _ in name_comparisons(src)] == [1, 2, 3]
    assert name_comparisons(src)[0] == (1, 'a == "poisson"')


def test_no_firing_or_law_name_comparisons_outside_registries():
    found = []
    for pkg in LAYERS:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if path in REGISTRIES:
                continue
            rel = path.relative_to(ROOT).as_posix()
            found += [f"{rel}:{n}: {text}" for n, text in name_comparisons(path.read_text())
                      if f"{rel}: {text}" not in ALLOWED]
    assert found == []


def test_registries_hold_the_former_tables():
    assert FIRING_MODES == FIRING_NAMES and tuple(models.FIRING) == FIRING_NAMES
    assert [get_firing(n).poisson for n in FIRING_NAMES] == [True, False, False]
    assert [get_firing(n).integrator for n in FIRING_NAMES] == [False, True, True]
    assert [get_firing(n).in_turn for n in FIRING_NAMES] == [False, False, True]
    assert get_firing(get_firing("regular")) is get_firing("regular") and str(get_firing("regular")) == "regular"
    assert tuple(law_registry._REGISTRY) == LAW_NAMES == tuple(laws.LAWS)
    for name in LAW_NAMES:
        law = get_law(name)
        assert (law.expression, law.numpy) == laws.LAWS[name] and law.product == (name == "product")
    assert get_law(get_law("tm2")) is get_law("tm2") and str(get_law("tm2")) == "tm2"


@pytest.mark.parametrize("bad", ["burst", None, ["poisson"]])
def test_unknown_firing_refused(bad):
    with pytest.raises(ValueError, match=r"firing: expected one of \['poisson', 'regular', 'population'\]"):
        get_firing(bad)
    with pytest.raises(TypeError):
        register_firing("poisson")


def test_unknown_law_refused():
    with pytest.raises(ValueError, match=r"law: unknown two-point-neuron law 'sum'; expected one of"):
        get_law("sum")
    with pytest.raises(TypeError, match="law: expected a law name"):
        get_law(None)
    with pytest.raises(TypeError):
        register_law("product")


@pytest.fixture
def toy_firing():
    """A copy of the regular mode named "toy"; the registry restored afterwards."""
    saved = dict(firing_registry._REGISTRY)
    yield register_firing(dataclasses.replace(get_firing("regular"), name="toy"))
    firing_registry._REGISTRY.clear()
    firing_registry._REGISTRY.update(saved)


@pytest.fixture
def toy_law():
    """A copy of tm2 named "toy"; the registry and the laws' table restored afterwards."""
    saved, saved_laws = dict(law_registry._REGISTRY), dict(laws.LAWS)
    yield register_law(dataclasses.replace(get_law("tm2"), name="toy"))
    for table, old in ((law_registry._REGISTRY, saved), (laws.LAWS, saved_laws)):
        table.clear()
        table.update(old)


def test_toy_firing_is_one_registration(toy_firing):
    from ctmhsa.neurons.params import DEFAULT_PARAMS
    from ctmhsa.sims.digits import cells, window_lag
    from ctmhsa.sims.options import CircuitOptions

    assert "toy" in models.FIRING and get_firing("toy") is toy_firing
    CircuitOptions(neuron="escape", firing="toy")
    with pytest.raises(ValueError, match="perfect integrators"):
        CircuitOptions(neuron="rate", firing="toy")
    toy, regular = models.get_model("escape", "l23", "toy"), models.get_model("escape", "l23", "regular")
    assert toy == dataclasses.replace(regular, firing="toy")
    assert models.count_variance("r", "toy", 4, DEFAULT_PARAMS) == models.count_variance("r", "regular", 4,
                                                                                         DEFAULT_PARAMS)
    assert window_lag(0.2, "toy") == window_lag(0.2, "regular")
    assert cells("toy")["params"] == cells("regular")["params"]


def test_toy_law_is_one_registration(toy_law):
    from ctmhsa.sims.options import CircuitOptions

    assert laws.check_law("toy") == "toy" and laws.law_expression("toy") == laws.law_expression("tm2")
    R = np.linspace(-2, 2, 9)
    assert np.array_equal(laws.law_numpy("toy")(R, 1.0), laws.law_numpy("tm2")(R, 1.0))
    CircuitOptions(law="toy")
    with pytest.raises(ValueError, match="the linear circuit has no L5 IT cells"):
        CircuitOptions(law="toy", circuit="linear")


def test_registries_restored_after_toys():
    assert "toy" not in FIRING_MODES and "toy" not in laws.LAWS and "toy" not in law_registry._REGISTRY
    with pytest.raises(ValueError, match="firing: expected one of"):
        get_firing("toy")
