"""What the ``cuda_standalone`` device (Brian2CUDA) needs beyond its package.

Two workarounds of brian2cuda 1.0b1 (:func:`cuda_prefs`, :func:`clock_flags`), each a compile error seen
with CUDA 13.0 (nvcc V13.0.88) on ctmhsa's networks without it.

Brian2CUDA 1.0b1 compiles with ``-std=c++11`` (its makefile, and Brian2's host flags), which the
C++ library of CUDA 13 (CCCL 3: Thrust, CUB, libcu++) refuses: it needs C++17. Both compilers are
given ``-std=c++17`` here (nvcc and gcc honour the last ``-std``; every CUDA since 11 and gcc
since 5 accept it), so one project builds with the CUDA 11, 12 and 13 toolkits. Seen on CUDA
13.0 (nvcc V13.0.88): without it, every code object fails with "Thrust requires at least C++17".
"""

from __future__ import annotations

import contextlib
import os

__all__ = ["NondeterministicRunWarning", "NONDETERMINISM", "cuda_prefs", "clock_flags", "network_flags", "is_cuda", "lowercase_run_arg_files", "CXX_STANDARD"]

CXX_STANDARD = "-std=c++17"


class NondeterministicRunWarning(RuntimeWarning):
    """A run whose spikes the seed does not fix (the same seed may give other spikes)."""


NONDETERMINISM = ("cuda_standalone: the same seed does not give the same spikes on this device (measured on "
                  "an H200: two runs of one barrel head with seed 0 decoded different x_tilde, both at the "
                  "noise floor; brian2cuda's order of atomic additions on the GPU is the likely cause, not "
                  "established); see docs/gpu.md")
"""The warning every ``cuda_standalone`` run gives (:func:`ctmhsa.devices.standalone.run_standalone`)."""


def is_cuda(dev) -> bool:
    """Whether the Brian2 device instance ``dev`` (``brian2.get_device()``, not the proxy
    ``brian2.device``) is brian2cuda's."""
    return any(c.__module__.startswith("brian2cuda") for c in type(dev).__mro__)


def cuda_prefs() -> dict:
    """Brian2 preferences of a ``cuda_standalone`` build (:attr:`ctmhsa.devices.registry.Device.prefs`):
    C++17 for nvcc and for the host compiler, the rest of Brian2's flags kept, and no
    loop-invariant hoisting."""
    import brian2 as b2   # here: the device registry is read by layers that never import Brian2

    gcc = [a for a in b2.prefs.codegen.cpp.extra_compile_args_gcc if not a.startswith("-std=")]
    out = {"codegen.cpp.extra_compile_args_gcc": [*gcc, CXX_STANDARD],
           # brian2cuda 1.0b1's reset kernel declares a shared variable twice when it is read both
           # in the hoisted (loop-invariant) lines and per cell ("k_now" has already been declared,
           # the spike counters of ctmhsa.neurons.window): nothing is hoisted on this device
           "codegen.loop_invariant_optimisations": False}
    try:   # registered by brian2cuda's import (Device.check imports it first)
        nvcc = b2.prefs["devices.cuda_standalone.cuda_backend.extra_compile_args_nvcc"]
    except KeyError:
        return out
    out["devices.cuda_standalone.cuda_backend.extra_compile_args_nvcc"] = \
        [a for a in nvcc if not a.startswith("-std=")] + [CXX_STANDARD]
    return out


def clock_flags(network) -> list:
    """nvcc flags that let brian2cuda 1.0b1 compile ``network`` when it runs on a clock of its own.

    Its synaptic-propagation template tests ``defaultclock.timestep[0]`` (a pathway with one
    delay for all its synapses), which exists in the generated code only where an object runs
    on Brian2's ``defaultclock``; a network on its own clock (every circuit here,
    :func:`ctmhsa.circuits.instantiate.instantiate`) fails with ``identifier "defaultclock" is
    undefined``. The name is then defined as the network's clock for the compiler (the clock
    those pathways run on). A network on several clocks, none the default, is refused.
    """
    names = sorted({obj.clock.name for obj in network.sorted_objects})
    if not names or "defaultclock" in names:
        return []
    if len(names) > 1:
        raise ValueError(f"device: 'cuda_standalone' (brian2cuda) needs the network on one clock or on "
                         f"Brian2's defaultclock; it runs on {len(names)} ({', '.join(names)})")
    return [f"-Ddefaultclock={names[0]}"]


@contextlib.contextmanager
def network_flags(dev, network):
    """While ``network``'s project is generated and compiled on the standalone device instance
    ``dev``: its own nvcc flags on brian2cuda (:func:`clock_flags`); nothing on other devices."""
    if not is_cuda(dev):
        yield
        return
    import brian2 as b2

    name = "devices.cuda_standalone.cuda_backend.extra_compile_args_nvcc"
    old = b2.prefs[name]
    b2.prefs[name] = [*old, *clock_flags(network)]
    try:
        yield
    finally:
        b2.prefs[name] = old


def lowercase_run_arg_files(dev, run_args: dict, directory: str) -> list:
    """Write the run-argument files of ``run_args`` whose names hold a capital letter again under
    the lowercased name, in ``directory``'s ``static_arrays``; return the names written (the caller
    removes them after the run).

    brian2cuda 1.0b1's binary lowercases every run argument before it reads it (to compare it
    with "true" and "false"), file names included, so a variable named with a capital letter
    (the escape cells' ``S``) is read from a file that does not exist; the binary then prints
    "Error reading ..." and runs on without the values (seen on an H200: eight populations'
    initial ``S`` silently not set). Brian2's own naming of the file
    (``_prepare_variableview_run_arg``, ``_prepare_timed_array_run_arg``) gives the name.
    """
    from brian2.core.variables import VariableView
    from brian2.input.timedarray import TimedArray

    written = []
    for key, value in run_args.items():
        if isinstance(key, VariableView):
            _, _, name, array = dev._prepare_variableview_run_arg(key, value)
        elif isinstance(key, TimedArray):
            _, _, name, array = dev._prepare_timed_array_run_arg(key, value)
        else:
            continue   # Brian2's run refuses it, naming it
        if name and name != name.lower():
            array.tofile(os.path.join(directory, "static_arrays", name.lower()))
            written.append(name.lower())
    return written
