"""The wall-time cost model of a run: :data:`RUN_COST` per device kind and level, and
:func:`estimate_runtime`. Below the builder (:mod:`ctmhsa.sims.build` refuses runs past
``max_runtime`` with it) and the planner (:mod:`ctmhsa.sims.plan`), which need no builder."""

from __future__ import annotations

from ctmhsa.devices.registry import get_device
from ctmhsa.neurons.levels import LevelFacts, get_level

__all__ = ["RUN_COST", "estimate_runtime", "step_cost"]


RUN_COST = {kind: LevelFacts(lambda level, kind=kind: tuple(level.run_cost[kind])) for kind in ("runtime", "standalone")}
"""Wall time of one step (s): ``(fixed, per neuron, per simulated synapse)`` per device kind and
level, for :func:`estimate_runtime` (each level carries its own: a read-only view of them). Every result records the estimate beside the measured run
(``res.timings["estimated_run"]`` and ``["run"]``). Checked in version 0.15 on the default problem,
n = d = 8 (H = 2) and n = d = 16 (2 s escape, 0.5 s rate, 1 s lif; load 4-6 on the 2 cores, so
about 2-3x slower than quiet): measured / estimated 1.4-3.9 at escape, 2.1-9.2 at the rate level,
3.2-8.2 at lif (the lif level's fixed cost per step is underestimated), 1.9-3.1 on
``cpp_standalone``. The estimate refuses runs that cannot finish; in every run measured it was low.

Measured on this project's 2-core development machine (shared, Brian2 2.9.0, one run each, the
``run`` timing of :func:`ctmhsa.sims.simulate_mhsa`, compilation excluded): *fixed*, the time per
step of the smallest circuit (n = 3, H = 1, dk = dv = 2, de = 3; 132 neurons) with numpy code;
*per neuron*, the rest at n = 16 to 48, H = 2, dk = dv = de = 16 to 32 (27k to 456k neurons),
the cheaper of numpy and Cython; *per synapse*, the rate level's continuous synapses (Cython,
1.5 M synapses: 3.4 ns; numpy took 10 to 19 ns). Spiking synapses act only at spikes and are
counted in the per-neuron cost. The standalone costs were measured at the escape level
(``cpp_standalone``, one thread: 4 us per step, 7 ns per neuron at 27k neurons); its other
levels take the runtime costs halved. Version 0.15 sums the relays' fixed noise variances once
per run and folds the interneurons: the standalone estimates then read twice (escape) and three
times (lif) the measured runs, high enough to refuse runs that fit, and were measured again
(quiet machine, load 0.5-1.3, one thread, n = 16, H = 2 and n = d = 33, H = 1, 1.1 s): 3.2 ns
per neuron at escape and 16 ns at lif, below every run measured (measured / estimated
1.04-1.10 and 1.04-1.19)."""


def estimate_runtime(level: str, device: str, steps: int, neurons: int, synapses: int) -> float:
    """Estimated wall time (s) of ``steps`` integration steps of a network of ``neurons`` cells
    and ``synapses`` simulated synapses at ``level`` on ``device``:
    ``steps * (fixed + neurons * per_neuron + synapses * per_synapse)`` with :data:`RUN_COST`.

    A rough figure (within a factor of a few of the measured runs; fewer cores, numpy code of a
    large circuit or a busy machine are slower, more OpenMP threads faster), meant to refuse
    runs that cannot finish, not to plan them. Building and compiling are not included.
    """
    fixed, per_neuron, per_synapse = step_cost(level, device)
    return float(steps) * (fixed + neurons * per_neuron + synapses * per_synapse)


def step_cost(level, device: str) -> tuple:
    """``(fixed, per neuron, per synapse)`` wall time of one step (s) of ``level`` on ``device``:
    the level's own cost model (:attr:`ctmhsa.neurons.levels.Level.run_cost`) for the device's kind."""
    return tuple(get_level(level).run_cost["standalone" if get_device(device).compiles else "runtime"])
