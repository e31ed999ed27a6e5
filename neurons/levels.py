"""Fidelity levels as registered objects.

A level carries its own facts (as Nengo's neuron types do): whether its cells spike, the step
and warm-up it runs with by default, and whether its somata are conductance-based
integrate-and-fire cells. Code asks a level for these facts (``get_level(level).spiking``)
instead of comparing its name, so a new level is one :func:`register_level` (plus its cell
models in :data:`ctmhsa.neurons.models.MODELS`).

The level's default code gains live one layer up, in :data:`ctmhsa.maths.codes.LEVEL_GAINS`
(gains belong to the encoding).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .registry import Registry

__all__ = ["Level", "register_level", "get_level", "LEVELS"]


@dataclass(frozen=True)
class Level:
    """One fidelity level of the cells.

    Attributes
    ----------
    name : str
        The name options and results carry (``CircuitOptions.neuron``, ``SimulationResult.level``).
    spiking : bool
        Whether the cells emit spikes, counted in a measurement window after a warm-up; False:
        continuous rates, the result is the state at the end of the run.
    dt : float
        Default integration step (s).
    warmup : float
        Default discarded time before the measurement window (s); 0 without spikes.
    lif : bool
        Whether the principal somata are conductance-based integrate-and-fire cells (calibrated
        per cell type); False: escape-noise somata (spiking) or rates.
    description : str
        One line for listings.
    steps_per_tau : float
        The fewest steps per fastest cell time constant it allows (``dt`` at most that constant
        over this; :func:`ctmhsa.sims.options.max_dt`).
    soma_steps_per_tau : float
        The same for the lif somata's own dynamics (membrane ``C_m / g``, background ``tau_e``,
        ``tau_i``), which are integrated exactly over a step (exponential Euler, the exact
        Ornstein-Uhlenbeck update): a step there costs the spike time's resolution, which the
        calibration at that step absorbs. None: ``steps_per_tau``.
    run_cost : dict
        Its cost model: wall time of one step (s) as ``(fixed, per neuron, per simulated
        synapse)`` per device kind (``"runtime"``, ``"standalone"``), read by
        :func:`ctmhsa.sims.cost.estimate_runtime` to refuse runs past ``max_runtime``
        (measurements: :data:`ctmhsa.sims.cost.RUN_COST`).
    """

    name: str
    spiking: bool
    dt: float
    warmup: float
    lif: bool = False
    description: str = ""
    steps_per_tau: float = 5.0
    soma_steps_per_tau: float | None = None
    run_cost: Mapping = field(default=None, compare=False)   # (a dict: left out of hash and equality)

    def __post_init__(self):
        for name in ("steps_per_tau", "soma_steps_per_tau"):
            v = getattr(self, name)
            if v is None and name == "soma_steps_per_tau":   # the level's steps_per_tau
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"{name}: level {self.name!r} needs a positive number of steps per time "
                                 f"constant; got {v!r}")
        kinds = ("runtime", "standalone")
        if not (isinstance(self.run_cost, Mapping) and set(self.run_cost) == set(kinds)
                and all(len(self.run_cost[k]) == 3 for k in kinds)):
            raise ValueError(f"run_cost: level {self.name!r} needs its wall time per step, (fixed, per neuron, "
                             f"per synapse) seconds, for each of {list(kinds)}; got {self.run_cost!r}")

    @property
    def escape(self) -> bool:
        """Whether the principal somata spike by escape noise (probability ``r dt`` per step)."""
        return self.spiking and not self.lif

    def __str__(self):
        return self.name


_REGISTRY = Registry(Level, "neuron: unknown fidelity level {name!r}; expected one of {names}")


def register_level(level: Level) -> Level:
    """Register ``level`` under its name (replacing one of the same name) and return it."""
    return _REGISTRY.register(level)


def get_level(level) -> Level:
    """The registered :class:`Level` named ``level`` (or ``level`` itself when it is one).

    Raises
    ------
    ValueError
        ``level`` names no registered level (the message lists them).
    """
    return _REGISTRY.lookup(level)


class LevelFacts(Mapping):
    """Level name -> one fact of it (a :class:`Level` attribute, or ``fact(level)``): a live,
    read-only view of the registry, for the tables that predate it (``DEFAULT_DT``,
    ``DEFAULT_WARMUP``, ``RUN_COST``)."""

    def __init__(self, attribute):
        self._fact = attribute if callable(attribute) else (lambda level: getattr(level, attribute))

    def __getitem__(self, name):
        if name not in _REGISTRY:
            raise KeyError(name)
        return self._fact(_REGISTRY[name])

    def __iter__(self):
        return iter(tuple(_REGISTRY))

    def __len__(self):
        return len(_REGISTRY)

    def __repr__(self):
        return repr(dict(self))


LEVELS = _REGISTRY.names
"""Names of the registered levels, from exact rates to integrate-and-fire spiking cells."""

# run_cost: measured on the development machine (ctmhsa.sims.cost.RUN_COST says how).
# steps_per_tau: the rate level integrates linear compartments by exponential Euler and is read at
# its fixed point, so 2 steps per time constant keep it exact (docs/digits.md: the digits logits
# 4e-6 from float at dt = tau / 2 = 2.5 ms, 8e-6 at 1 ms, 2e-3 at dt = tau); a spiking level's
# escape probability r dt and its synaptic kernels need 5.
register_level(Level("rate", spiking=False, dt=1e-3, warmup=0.0, steps_per_tau=2.0,
                     description="continuous-rate compartments, no spikes; exact in expectation",
                     run_cost={"runtime": (6e-4, 2e-8, 3.4e-9), "standalone": (4e-6, 1e-8, 1.7e-9)}))
register_level(Level("escape", spiking=True, dt=1e-3, warmup=0.5,
                     description="the rate compartments; somata spike with probability r dt (escape noise)",
                     run_cost={"runtime": (1.3e-3, 1.5e-8, 0.0), "standalone": (4e-6, 3.2e-9, 0.0)}))
# lif: 1 ms since version 0.15 (0.5 ms before): the somata's membrane and background, integrated
# exactly over a step, allow 2.5 steps per time constant (1.08 ms); the synaptic kernels keep 5
# (tau_syn: 1 ms, as at the escape level; docs/lif.md, "A 1 ms step")
register_level(Level("lif", spiking=True, dt=1e-3, warmup=0.5, lif=True, soma_steps_per_tau=2.5,
                     description="conductance-based integrate-and-fire somata, calibrated per cell type",
                     run_cost={"runtime": (8e-4, 1e-7, 0.0), "standalone": (4e-6, 1.6e-8, 0.0)}))
