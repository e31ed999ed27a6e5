"""ctmhsa: cortico-thalamic circuits that compute multihead self-attention, neuron by neuron.

The front door of the package (Granier & Senn 2025):

>>> import ctmhsa
>>> exact = ctmhsa.linear_mhsa(X, WQ, WK, WV, WO)    # every stage, exact  # doctest: +SKIP
>>> res = ctmhsa.simulate_mhsa(X, WQ, WK, WV, WO, neuron="escape")   # doctest: +SKIP
>>> res = ctmhsa.load("results/default")                             # doctest: +SKIP

Its layers are subpackages: :mod:`ctmhsa.neurons` (cell models), :mod:`ctmhsa.circuits` (the
circuit description and its Brian2 builder), :mod:`ctmhsa.mapping` (the maths and the codes between
numbers and rates), :mod:`ctmhsa.sims` (the simulator API, results, command line and benchmarks)
and :mod:`ctmhsa.figures` (figures drawn from results files).
"""

import os as _os
from importlib import metadata as _metadata

# In a source checkout the layers are the repository's top-level folders (circuits/, neurons/, ...),
# installed as ctmhsa.circuits, ... (pyproject's package-dir). Running from the checkout without an
# install (``python -m pytest`` puts the checkout first on sys.path), this package finds them beside
# itself; an installed copy has them inside it and never looks outside.
_HERE = _os.path.dirname(_os.path.abspath(__file__))
_LAYERS = ("neurons", "circuits", "mapping", "sims", "figures")
if not _os.path.isdir(_os.path.join(_HERE, "circuits")):
    _root = _os.path.dirname(_HERE)
    if all(_os.path.isfile(_os.path.join(_root, p, "__init__.py")) for p in _LAYERS):
        __path__.append(_root)  # noqa: F821 - a package's __path__

try:
    __version__ = _metadata.version("ctmhsa")
except _metadata.PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
    __version__ = "0+unknown"

# The front door is lazy (PEP 562): ``import ctmhsa.maths.reference`` stays numpy-only, and
# Brian2 is imported the first time a simulator name is used.
_EXPORTS = {"linear_mhsa": "maths.reference", "memory_attention": "maths.reference", "simulate_mhsa": "sims", "build_mhsa": "sims",
            "train_mhsa": "sims", "load": "sims", "Simulation": "sims", "SimulationResult": "sims",
            "TrainingResult": "sims", "CircuitOptions": "sims", "RunOptions": "sims",
            "InputRange": "maths.inputs", "Model": "maths.model", "load_model": "maths.model",
            "transformer_forward": "maths.transformer", "simulate_model": "sims", "ModelResult": "sims",
            "cooperation": "maths.co4", "co4_forward": "maths.co4", "Co4Model": "maths.co4"}
_SUBMODULES = ("perturb",)   # ctmhsa.perturb.Silence, ... (lesions and drive)

__all__ = ["__version__", *_EXPORTS, *_SUBMODULES]


def lazy_attribute(package: str, exports: dict, namespace: dict, name: str):
    """Attribute ``name`` of ``package`` imported from its module ``exports[name]`` (relative) the
    first time it is asked for, and kept in the package's ``namespace`` (a PEP 562 ``__getattr__``
    of this package and of :mod:`ctmhsa.sims`)."""
    import importlib

    value = getattr(importlib.import_module(f".{exports[name]}", package), name)
    namespace[name] = value
    return value


def __getattr__(name):
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    if name in _EXPORTS:
        return lazy_attribute(__name__, _EXPORTS, globals(), name)
    raise AttributeError(f"module 'ctmhsa' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS) | set(_SUBMODULES))
