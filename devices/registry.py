"""The Brian2 devices a circuit runs on, as registered objects (after Brian2's ``all_devices``).

A :class:`Device` carries the facts the rest of the package asks about a device: whether it
compiles a project (:mod:`ctmhsa.devices.standalone`), whether OpenMP threads apply, and the
Python package it needs, checked before anything is built (:meth:`Device.check`). The run
options (:class:`ctmhsa.sims.options.RunOptions`), the runners (:mod:`ctmhsa.sims.runners`,
which map a device name to a runner class) and the command line read the one list
:data:`DEVICES`, so a new device is one module that calls :func:`register_device` (plus its
runner's registration in :mod:`ctmhsa.sims.runners`).

Which code the runtime device generates (numpy or Cython) is the run's ``codegen`` option, and a
split run (heads as tasks) is chosen by its ``scheduler``: neither is a device.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from .cuda import cuda_prefs

__all__ = ["Device", "register_device", "get_device", "check_device", "compiled_devices", "compiler_found",
           "DEVICES"]


@dataclass(frozen=True)
class Device:
    """One Brian2 device.

    Attributes
    ----------
    name : str
        Brian2's name of the device (``b2.set_device(name)``), the ``device`` run option.
    compiles : bool
        Whether the device generates and compiles a project (a standalone device, run by
        :mod:`ctmhsa.devices.standalone`) rather than running in this process.
    threads : bool
        Whether the ``threads`` run option (OpenMP threads) applies.
    run_args : bool
        Whether a compiled project takes its inputs, seed and run length as run arguments, tables
        included (a stream's rates, replayed spikes): new tokens, seeds and streams of a shape
        compile nothing, and streams can run (brian2cuda compiles seed and run length in).
    package : str, optional
        Python package the device needs; importing it registers the device with Brian2.
    needs : str
        What the device needs, as the refusal of :meth:`check` words it (default: the package).
    description : str
        One line for the command line's help and the documentation.
    prefs : callable, optional
        ``prefs() -> {name: value}``: the Brian2 preferences (dotted names, e.g.
        ``"codegen.cpp.extra_compile_args_gcc"``) this device needs, computed from Brian2's current
        ones; set while the device builds and runs, and restored after
        (:func:`ctmhsa.devices.standalone.standalone_device`).
    """

    name: str
    compiles: bool = False
    threads: bool = False
    run_args: bool = False
    package: str | None = None
    needs_compiler: bool = False
    needs: str = ""
    description: str = ""
    prefs: Callable[[], dict] | None = None

    def check(self) -> None:
        """Raise ``ValueError`` naming the device if it cannot be used here (before any build):
        a device that compiles C++ needs a compiler (:func:`compiler_found`), and its package must
        import (which registers the device with Brian2)."""
        if self.needs_compiler and not compiler_found():
            raise ValueError(f"device: {self.name} needs a C++ compiler ($CXX, g++, c++ or clang++ on the PATH), "
                             "none found")
        if self.package is None:
            return
        try:
            importlib.import_module(self.package)
        except Exception as exc:   # ImportError, or the package failing to find its hardware
            needs = self.needs or f"the {self.package} package"
            raise ValueError(f"device: {self.name!r} needs {needs} (pip install {self.package}); "
                             f"importing it failed: {exc}") from None


_REGISTRY: dict[str, Device] = {}

DEVICES = _REGISTRY.keys()
"""Names of the registered devices, in the order registered (a live view: a device registered
later is in it)."""


def register_device(device: Device) -> Device:
    """Add ``device`` to :data:`DEVICES`; a name may be registered once. Returns ``device``."""
    if not isinstance(device, Device):
        raise TypeError(f"register_device: expected a Device, got {device!r}")
    if device.name in _REGISTRY:
        raise ValueError(f"device: {device.name!r} is already registered")
    _REGISTRY[device.name] = device
    return device


def get_device(name: str) -> Device:
    """The registered device ``name``; a ``ValueError`` naming it and the registered ones if none."""
    if not isinstance(name, str) or name not in _REGISTRY:
        names = [repr(n) for n in _REGISTRY]
        listed = " or ".join(filter(None, (", ".join(names[:-1]), names[-1])))
        raise ValueError(f"device: expected {listed}, got {name!r}")
    return _REGISTRY[name]


def check_device(name: str) -> None:
    """Raise ``ValueError`` naming ``name`` unless it is a registered device usable here."""
    get_device(name).check()


def compiler_found() -> bool:
    """Whether a C++ compiler is on the path (``$CXX``, ``g++``, ``c++`` or ``clang++``): what
    ``cpp_standalone`` needs, asked by the ``"auto"`` device choices of ``ctmhsa digits`` and
    ``ctmhsa bench language``."""
    import os
    import shutil

    return any(shutil.which(c) for c in (os.environ.get("CXX", ""), "g++", "c++", "clang++") if c)


def compiled_devices() -> tuple[str, ...]:
    """Names of the registered devices that compile a project (the standalone devices)."""
    return tuple(n for n, d in _REGISTRY.items() if d.compiles)


register_device(Device("runtime", description="Brian2's runtime device, in this process (numpy or Cython code: "
                                              "codegen)"))
register_device(Device("cpp_standalone", compiles=True, threads=True, run_args=True, needs_compiler=True,
                       description="a C++ project compiled once per network shape and cached"))
register_device(Device("cuda_standalone", compiles=True, package="brian2cuda",
                       needs="the brian2cuda package and a CUDA GPU",
                       description="the same on an NVIDIA GPU, through brian2cuda", prefs=cuda_prefs))
