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

# Lazy (PEP 562), as the package's front door: ``import ctmhsa.sims.io`` (a figure reading a results
# directory) loads no builder, runner or Brian2; the simulator is imported the first time it is named.
_EXPORTS = {"Simulation": "build", "build_mhsa": "build", "load": "io", "ModelResult": "model",
            "simulate_model": "model", "CircuitOptions": "options", "RunOptions": "options",
            "SimulationResult": "result", "stage_metrics": "result", "simulate_mhsa": "simulate",
            "TrainingResult": "train", "train_mhsa": "train"}

__all__ = ["simulate_mhsa", "build_mhsa", "Simulation", "CircuitOptions", "RunOptions", "SimulationResult",
           "stage_metrics", "load", "train_mhsa", "TrainingResult", "simulate_model", "ModelResult"]


def __getattr__(name):
    if name in _EXPORTS:
        from ctmhsa import lazy_attribute

        return lazy_attribute(__name__, _EXPORTS, globals(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
