"""Experiments on the cortico-thalamic attention circuit: the simulator API, configurations,
results on disk, benchmarks and the command line.

>>> from sims import simulate_mhsa
>>> res = simulate_mhsa(X, WQ, WK, WV, WO, neuron="rate")   # doctest: +SKIP
"""

from .result import SimulationResult, stage_metrics  # noqa: F401
from .simulate import simulate_mhsa  # noqa: F401
from .io import load  # noqa: F401

__all__ = ["simulate_mhsa", "SimulationResult", "stage_metrics", "load"]
