"""Declarative cortico-thalamic circuits (networkx) and their instantiation in Brian2.

``ctmhsa.circuits.graph`` describes populations and projections; ``ctmhsa.circuits.builders`` builds the
microcolumn, macrocolumn, area and pathway levels; ``ctmhsa.circuits.instantiate`` turns a
description into Brian2 objects (one NeuronGroup per population, one Synapses per projection).
Compiling and running on a device is :mod:`ctmhsa.devices`.
"""

from .builders import SCALES, area, build, macrocolumn, microcolumn, pathway  # noqa: F401
from .graph import Circuit, Population, Projection, connect_pairs  # noqa: F401
from . import co4  # noqa: F401,E402 - registers the Co4 area (it builds on the builders' linear circuit)

