"""Devices as registered objects: one list that the options, the runners and the command line read,
and a new device as one registration (issue 48)."""

import sys

import numpy as np
import pytest

from ctmhsa.devices import registry, standalone
from ctmhsa.devices.registry import DEVICES, Device, get_device, register_device
from ctmhsa.sims import cli, options
from ctmhsa.sims.options import RunOptions
from ctmhsa.sims.runners import RUNNERS, SPLIT, RuntimeRunner, StandaloneRunner, register_runner, runner_for


@pytest.fixture
def toy():
    """A runtime-like device ``"toy"`` run by the runtime runner; the registries restored after."""
    saved_devices, saved_runners = dict(registry._REGISTRY), dict(RUNNERS)
    register_device(Device("toy", description="Brian2's runtime device under another name"))
    register_runner("toy", RuntimeRunner)
    yield "toy"
    registry._REGISTRY.clear()
    registry._REGISTRY.update(saved_devices)
    RUNNERS.clear()
    RUNNERS.update(saved_runners)


def _cli_choices() -> list:
    run = next(a for a in cli.build_parser()._subparsers._group_actions[0].choices["run"]._actions
               if a.dest == "device")
    return list(run.choices)


@pytest.mark.codegen_independent
def test_the_four_places_read_the_registry():
    names = ["runtime", "cpp_standalone", "cuda_standalone"]
    assert list(DEVICES) == names
    assert list(options.DEVICES) == names
    assert standalone.STANDALONE_DEVICES == ("cpp_standalone", "cuda_standalone")
    assert standalone.check_device is registry.check_device
    assert set(RUNNERS) == set(names) | {SPLIT}
    assert _cli_choices() == names   # the command line offers cuda_standalone too


@pytest.mark.codegen_independent
def test_toy_device_is_one_registration(toy):
    ro = RunOptions(device=toy)
    assert runner_for(ro) is RuntimeRunner
    assert toy in options.DEVICES and toy in _cli_choices() and toy not in standalone.STANDALONE_DEVICES
    with pytest.raises(ValueError, match="'toy' is already registered"):
        register_device(Device(toy))


@pytest.mark.brian2
def test_toy_device_runs_the_rate_level(toy, problem):
    from ctmhsa.sims.simulate import simulate_mhsa

    X, _, WQ, WK, WV, WO = problem(seed=1, n=3, H=1, dk=2, dv=2, de=3)
    kw = dict(neuron="rate", duration=0.5, codegen="numpy")
    res, ref = (simulate_mhsa(X, WQ, WK, WV, WO, device=d, **kw) for d in (toy, "runtime"))
    assert res.config["device"] == toy
    np.testing.assert_array_equal(res.stages["x_tilde"], ref.stages["x_tilde"])


@pytest.mark.codegen_independent
def test_unknown_device_is_refused_naming_it(monkeypatch):
    for bad in ("gpu", None):
        with pytest.raises(ValueError, match=f"device: expected 'runtime', 'cpp_standalone' or "
                                             f"'cuda_standalone', got {bad!r}"):
            RunOptions(device=bad)
    with pytest.raises(ValueError, match="device: expected .*, got .gpu."):
        register_runner("gpu", RuntimeRunner)
    with pytest.raises(TypeError, match="expected a Device"):
        register_device("gpu")
    monkeypatch.setitem(sys.modules, "brian2cuda", None)   # as if not installed
    with pytest.raises(ValueError, match="device: 'cuda_standalone' needs the brian2cuda package and a CUDA GPU"):
        get_device("cuda_standalone").check()


@pytest.mark.codegen_independent
def test_standalone_device_still_reaches_the_standalone_runner(problem, monkeypatch):
    """``device="cpp_standalone"`` is run by the standalone runner (its run replaced: nothing compiles)."""
    from ctmhsa.sims.simulate import simulate_mhsa

    class Reached(Exception):
        pass

    def run(self, run_options):
        raise Reached(run_options.device)

    monkeypatch.setattr(StandaloneRunner, "run", run)
    X, _, WQ, WK, WV, WO = problem(seed=1, n=3, H=1, dk=2, dv=2, de=3)
    with pytest.raises(Reached, match="cpp_standalone"):
        simulate_mhsa(X, WQ, WK, WV, WO, neuron="escape", duration=0.3, warmup=0.1, device="cpp_standalone")


@pytest.mark.codegen_independent
def test_threads_are_refused_where_the_device_runs_without_openmp():
    """OpenMP threads apply to cpp_standalone; the runtime device (and brian2cuda's) ignored them."""
    assert not get_device("runtime").threads and not get_device("cuda_standalone").threads
    assert get_device("cpp_standalone").threads
    for ok in (None, 0, 1):
        RunOptions(device="runtime", threads=ok)
    with pytest.raises(ValueError, match="threads: 4 OpenMP threads apply to .*device='runtime' runs without them"):
        RunOptions(device="runtime", threads=4)
    assert RunOptions(device="cpp_standalone", threads=4).threads == 4


@pytest.mark.codegen_independent
def test_code_asks_a_device_for_its_facts_not_its_name():
    """Device names are compared only where a benchmark picks its own rows and where make's
    record of a compiled project is checked (cpp_standalone's build on POSIX); everything else
    reads the registry's facts (``compiles``, ``threads``, ``run_args``)."""
    import pathlib

    from conftest import LAYERS, name_comparisons

    root = pathlib.Path(__file__).resolve().parents[2]
    allowed = {"devices/standalone.py": 1, "sims/benchmarks/speed.py": 2, "sims/benchmarks/accuracy.py": 2}
    found = {}
    for layer in LAYERS:
        for path in (root / layer).rglob("*.py"):
            rel = path.relative_to(root).as_posix()
            if rel == "devices/registry.py":
                continue
            n = len(name_comparisons(path.read_text(), set(DEVICES)))
            if n:
                found[rel] = n
    assert found == allowed


@pytest.mark.codegen_independent
def test_a_compiled_device_without_a_compiler_is_refused_before_anything_is_built(monkeypatch):
    import shutil

    from ctmhsa.devices.registry import check_device

    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(ValueError, match="device: cpp_standalone needs a C\\+\\+ compiler"):
        check_device("cpp_standalone")
    check_device("runtime")                                    # the runtime device needs none
