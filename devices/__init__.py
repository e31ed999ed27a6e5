"""Devices: where and how a Brian2 network runs (Brian2's ``Device`` registry, as a layer).

:mod:`~ctmhsa.devices.registry` lists the devices (runtime, ``cpp_standalone``,
``cuda_standalone``) with their facts, which options, runners, cost model and command line
read; a new device is a :class:`~ctmhsa.devices.registry.Device`, one
:func:`~ctmhsa.devices.registry.register_device` and a runner (:mod:`ctmhsa.sims.runners`).
:mod:`~ctmhsa.devices.standalone` compiles a network shape once into a cached project and runs
it with new values as run arguments; :mod:`~ctmhsa.devices.cuda` carries brian2cuda's
workarounds.

The layer sits between the cells (:mod:`ctmhsa.neurons`) and the circuits: it compiles and runs
any instantiated network handed to it and describes none (until version 0.15 these modules
were ``ctmhsa.circuits.devices``, ``.standalone`` and ``.cuda``, names that still point here).
"""

from .registry import DEVICES, Device, check_device, compiled_devices, get_device, register_device  # noqa: F401
