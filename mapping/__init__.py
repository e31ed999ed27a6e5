"""Mapping between attention maths and circuit activity.

``ctmhsa.mapping.encode`` / ``ctmhsa.mapping.decode`` the affine codes that turn tokens and
weights into rates, synaptic weights and biases, and rates back into every stage;
``ctmhsa.mapping.noise`` their spike-count floors; ``ctmhsa.mapping.operating`` the working range.
The maths itself (the reference, gradients, transformer blocks, model files, codes) is
:mod:`ctmhsa.maths`, which imports no circuit.

The maths modules were part of this package until version 0.15: ``ctmhsa.mapping.reference``
and the others still name the same module objects (``import ctmhsa.mapping.reference``,
``from ctmhsa.mapping import model``, pickles of their classes).
"""

import importlib as _importlib
import sys as _sys

from ctmhsa.maths import MODULES as _MATHS

for _name in _MATHS:
    _module = _importlib.import_module(f"ctmhsa.maths.{_name}")
    _sys.modules[f"{__name__}.{_name}"] = _module
    globals()[_name] = _module
