"""The ``cuda_standalone`` device (brian2cuda): what ctmhsa changes for it, and a build of a circuit's
GPU project where the toolchain is installed (issue 50, item 3).

The build test generates and compiles the project with nvcc but does not run it (no GPU is needed:
the GPU's detection is turned off and a compute capability named); it is skipped where brian2cuda
does not import (it needs Brian2 2.10.1) or nvcc is missing. Runs on a GPU are measured by
``ctmhsa bench speed --devices cuda_standalone`` (docs/gpu.md).
"""

import os
import shutil
import types

import brian2 as b2
import pytest

from ctmhsa.devices import cuda
from ctmhsa.devices.registry import get_device


def _network(*clocks):
    objs = [types.SimpleNamespace(clock=types.SimpleNamespace(name=c)) for c in clocks]
    return types.SimpleNamespace(sorted_objects=objs)


@pytest.mark.codegen_independent
def test_network_on_its_own_clock_names_it_for_the_compiler():
    assert cuda.clock_flags(_network("clock_pathway", "clock_pathway")) == ["-Ddefaultclock=clock_pathway"]
    assert cuda.clock_flags(_network("defaultclock", "clock_pathway")) == []   # declared already
    assert cuda.clock_flags(_network()) == []
    with pytest.raises(ValueError, match="device: 'cuda_standalone' .* runs on 2 \\(a, b\\)"):
        cuda.clock_flags(_network("a", "b"))


@pytest.mark.codegen_independent
def test_prefs_ask_for_cpp17_and_keep_the_other_flags():
    before = list(b2.prefs.codegen.cpp.extra_compile_args_gcc)
    prefs = cuda.cuda_prefs()
    gcc = prefs["codegen.cpp.extra_compile_args_gcc"]
    assert gcc[-1] == "-std=c++17" and sum(a.startswith("-std=") for a in gcc) == 1
    assert [a for a in gcc if not a.startswith("-std=")] == [a for a in before if not a.startswith("-std=")]
    assert prefs["codegen.loop_invariant_optimisations"] is False
    assert b2.prefs.codegen.cpp.extra_compile_args_gcc == before   # computed, not set
    assert get_device("cuda_standalone").prefs is cuda.cuda_prefs
    assert get_device("cpp_standalone").prefs is None and get_device("runtime").prefs is None


@pytest.mark.codegen_independent
def test_is_cuda_reads_the_device_class_not_the_proxy():
    fake = type("CUDAStandaloneDevice", (), {"__module__": "brian2cuda.device"})()
    assert cuda.is_cuda(fake)
    assert not cuda.is_cuda(b2.get_device())
    assert not cuda.is_cuda(b2.device)   # the proxy of the active device: never taken for brian2cuda
    with cuda.network_flags(b2.get_device(), _network("x")):   # nothing changed off brian2cuda
        pass


@pytest.mark.codegen_independent
def test_standalone_device_sets_and_restores_a_device_s_prefs(tmp_path, monkeypatch):
    from ctmhsa.devices import registry, standalone

    dev = registry.Device("cpp_standalone", compiles=True, threads=True,
                         prefs=lambda: {"codegen.loop_invariant_optimisations": False})
    monkeypatch.setitem(registry._REGISTRY, "cpp_standalone", dev)
    assert b2.prefs.codegen.loop_invariant_optimisations is True
    with standalone.standalone_device(str(tmp_path), 1):
        assert b2.prefs.codegen.loop_invariant_optimisations is False
    assert b2.prefs.codegen.loop_invariant_optimisations is True


def _brian2cuda():
    try:
        import brian2cuda  # noqa: F401
    except Exception as exc:   # not installed, or needing another Brian2
        pytest.skip(f"brian2cuda does not import here ({type(exc).__name__}: {exc})")
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc (the CUDA toolkit) is not installed")
    roots = [os.environ.get("CUDA_PATH", ""), "/usr/local/cuda", os.path.dirname(os.path.dirname(nvcc))]
    include = [os.path.join(r, "include") for r in roots if r] + list(b2.prefs.codegen.cpp.include_dirs)
    if not any(os.path.isfile(os.path.join(d, "curand.h")) for d in include):
        pytest.skip("the CUDA toolkit here has no cuRAND (curand.h)")


@pytest.mark.standalone
def test_gpu_project_of_a_circuit_compiles(problem, tmp_path, monkeypatch):
    """The escape level's project of a small pathway generated and compiled by brian2cuda (every
    kind of code object the circuit has); its run, which needs a GPU, is not started."""
    _brian2cuda()
    from ctmhsa.devices import standalone
    from ctmhsa.sims.simulate import simulate_mhsa

    monkeypatch.setenv("CTMHSA_CACHE", str(tmp_path))
    gpu = b2.prefs.devices.cuda_standalone.cuda_backend
    saved = (gpu.detect_gpus, gpu.gpu_id, gpu.compute_capability)
    gpu.detect_gpus, gpu.gpu_id, gpu.compute_capability = False, 0, 9.0

    class Compiled(Exception):
        pass

    def execute(dev, built, *args, **kw):
        raise Compiled(dev.project_dir)

    monkeypatch.setattr(standalone, "_execute", execute)
    X, _, WQ, WK, WV, WO = problem(seed=1, n=3, H=1, dk=2, dv=2, de=4)
    try:
        with pytest.raises(Compiled) as info:
            simulate_mhsa(X, WQ, WK, WV, WO, neuron="escape", seed=1, device="cuda_standalone")
    finally:
        gpu.detect_gpus, gpu.gpu_id, gpu.compute_capability = saved
    project = str(info.value)
    with open(f"{project}/makefile") as fh:
        make = fh.read()
    assert "-std=c++17" in make and "-Ddefaultclock=clock_" in make
    assert os.path.isfile(os.path.join(project, "main"))   # compiled and linked


@pytest.mark.codegen_independent
def test_run_argument_files_with_capitals_are_written_lowercased_too(tmp_path):
    """brian2cuda's binary lowercases the file names of run arguments: a variable ``S`` is read
    from ``init_<group>_s_<md5>.dat``, which is written beside Brian2's own file."""
    from ctmhsa.devices import standalone

    with standalone.standalone_device(str(tmp_path), 1) as dev:
        G = b2.NeuronGroup(3, "S : 1\nv : 1", name="cells")
        (tmp_path / "static_arrays").mkdir(exist_ok=True)
        names = cuda.lowercase_run_arg_files(b2.get_device(), {G.S: [1.0, 2.0, 3.0], G.v: [4.0, 5.0, 6.0]},
                                             str(tmp_path))
        _, _, original, _ = b2.get_device()._prepare_variableview_run_arg(G.S, [1.0, 2.0, 3.0])
        del dev
    assert original.startswith("init_cells_S_") and names == [original.lower()]
    assert list((tmp_path / "static_arrays" / names[0]).read_bytes()) == list(
        b2.np.asarray([1.0, 2.0, 3.0]).tobytes())
