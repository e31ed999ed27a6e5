"""Declarative cortico-thalamic circuits (networkx) and their instantiation in Brian2.

``ctmhsa.circuits.graph`` describes populations and projections; ``ctmhsa.circuits.builders`` builds the
microcolumn, macrocolumn, area and pathway levels; ``ctmhsa.circuits.instantiate`` turns a
description into Brian2 objects (one NeuronGroup per population, one Synapses per projection).
Compiling and running on a device is :mod:`ctmhsa.devices`.
"""

import importlib as _importlib
import sys as _sys

from ctmhsa.devices import MODULES as _DEVICE_MODULES

from .builders import SCALES, area, build, macrocolumn, microcolumn, pathway  # noqa: F401
from .graph import Circuit, Population, Projection, connect_pairs  # noqa: F401

# the device modules lived here until version 0.15 (ctmhsa.circuits.standalone, ...): the same
# module objects under their old names
for _old, _new in _DEVICE_MODULES.items():
    _sys.modules[f"{__name__}.{_old}"] = _importlib.import_module(f"ctmhsa.devices.{_new}")
