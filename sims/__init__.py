"""Experiments on the cortico-thalamic attention circuit: the simulator API, its options and
runners, configurations, results on disk and the command line (benchmarks in
:mod:`ctmhsa.sims.benchmarks`).

>>> from ctmhsa.sims import simulate_mhsa, build_mhsa
>>> res = simulate_mhsa(X, WQ, WK, WV, WO, neuron="rate")   # doctest: +SKIP
>>> sim = build_mhsa(X, WQ, WK, WV, WO, neuron="escape")    # doctest: +SKIP
>>> sim.network.add(brian2.StateMonitor(sim.groups["l5pt"], "r", record=True))  # doctest: +SKIP
>>> res = sim.run(2 * brian2.second)                        # doctest: +SKIP
>>> tr = train_mhsa(X, T, WQ, WK, WV, WO, neuron="rate", steps=100)  # doctest: +SKIP
"""

from .build import Simulation, build_mhsa  # noqa: F401
from .io import load  # noqa: F401
from .model import ModelResult, simulate_model  # noqa: F401
from .options import CircuitOptions, RunOptions  # noqa: F401
from .result import SimulationResult, stage_metrics  # noqa: F401
from .simulate import simulate_mhsa  # noqa: F401
from .train import TrainingResult, train_mhsa  # noqa: F401

__all__ = ["simulate_mhsa", "build_mhsa", "Simulation", "CircuitOptions", "RunOptions", "SimulationResult",
           "stage_metrics", "load", "train_mhsa", "TrainingResult", "simulate_model", "ModelResult"]
