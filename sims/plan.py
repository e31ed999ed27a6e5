"""Plan a run from a result's noise floors: the window or the copies that bring each stage's
floor to a target NRMSE, and what they cost (:func:`plan`,
``ctmhsa plan``).

A stage's noise floor (``SimulationResult.metrics()["noise_floor"]``,
:mod:`ctmhsa.mapping.noise`) is the NRMSE its spike-count noise alone would give. Its variance is
a sum of count variances ``F r / (P T)`` of the cells that feed the stage: with the same rates and
Fano factors it falls as ``1 / (T P)``, so the floor falls as ``1 / sqrt(T P)`` (docs/results.md,
docs/timescale.md: every stage's error over its floor stayed at 0.72-1.21 from 1 to 20 s). For
escape-noise (``firing="poisson"``) cells that rule is the floor's own; perfect integrators
(``firing="regular"``, ``"population"``) and the lif level's somata count more regularly, their
floors fall between ``1 / sqrt(T P)`` and ``1 / (T P)`` (docs/timescale.md), and the plan is then
an upper bound on the window or copies needed. A floor is the error's expected value from count
noise, not a guarantee: a single run scatters around it, and a stage whose error is well above its
floor carries a bias that neither a longer window nor more copies removes.

``P`` multiplies the copies of every population (``CircuitOptions.P``; a dict of per-population
copies is scaled as a whole, the populations it leaves at 1 included), since every noise source
of a stage is divided by its own population's copies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ctmhsa.maths.stages import STAGE_ORDER
from ctmhsa.neurons.firing import get_firing
from ctmhsa.neurons.levels import get_level

from .cost import estimate_runtime, step_cost
from .result import SimulationResult

__all__ = ["Plan", "StagePlan", "plan"]

BIAS_RATIO = 1.5
"""A stage whose NRMSE is above this multiple of its floor is flagged: its excess is bias (the
floors tell noise from bias within 20 % at the escape level, docs/results.md)."""


@dataclass(frozen=True)
class StagePlan:
    """The plan of one stage.

    Attributes
    ----------
    stage : str
    target, nrmse, floor : float
        The target NRMSE, the result's NRMSE and its noise floor (at its window and copies).
    reached : bool
        The floor is at or below the target already (nothing to change for this stage).
    T : float
        Window (s) at the result's copies whose floor is the target (the result's window when
        reached).
    T_neurons, T_wall : float
        The neurons (the result's own) and estimated wall time (s) of a run with that window.
    P : int or dict
        Copies at the result's window whose floor is at or below the target (an integer, or the
        per-population dict scaled as a whole).
    P_factor : float
        ``P`` over the result's copies (every population's copies are multiplied by it).
    P_floor : float
        The floor at those copies (P is an integer, so at or below the target).
    P_neurons, P_wall : float
        The neurons of that circuit (described, not built) and the estimated wall time (s).
    bias : float or None
        Where the NRMSE is above ``BIAS_RATIO`` times the floor: the error left without count
        noise, ``sqrt(NRMSE² - floor²)`` (one run: a rough figure); ``None`` otherwise.
    """

    stage: str
    target: float
    nrmse: float
    floor: float
    reached: bool
    T: float
    T_neurons: int
    T_wall: float
    P: object
    P_factor: float
    P_floor: float
    P_neurons: int
    P_wall: float
    bias: float | None = None


@dataclass(frozen=True)
class Plan:
    """Per stage the window and the copies that bring its noise floor to a target
    (:func:`plan`); ``str()`` gives a text table.

    Attributes
    ----------
    stages : list of StagePlan
    level, firing : str
    T, P : float, int or dict
        The result's window (s) and copies.
    neurons : int
        The result's neurons.
    wall : float
        Estimated wall time (s) of the result's own run (:func:`ctmhsa.sims.estimate_runtime`),
        for comparison with the planned ones.
    exact_rule : bool
        Whether ``floor ∝ 1/sqrt(T P)`` is the floor's own scaling (escape-noise cells) rather
        than an upper bound (integrators, lif somata).
    notes : list of str
        Stages that could not be planned, and why.
    """

    stages: list
    level: str
    firing: str
    T: float
    P: object
    neurons: int
    wall: float
    exact_rule: bool
    notes: list = field(default_factory=list)

    def to_dicts(self) -> list[dict]:
        """The stages' plans as plain dicts."""
        return [dict(s.__dict__) for s in self.stages]

    def __str__(self) -> str:
        rule = ("floor ∝ 1/sqrt(T·P)" if self.exact_rule
                else "floor falls at least as 1/sqrt(T·P) (integrators or lif somata: an upper bound)")
        head = (f"plan from the noise floors ({self.level}, firing {self.firing}, T = {self.T:g} s, "
                f"P = {_p_text(self.P)}, {self.neurons:,} neurons, ~{_wall(self.wall)} estimated); {rule}.\n"
                "The floor is the error expected from spike-count noise alone: a run scatters around it, "
                "and no window or P removes a bias.")
        rows = [f"{'stage':<8} {'NRMSE':>8} {'floor':>8} {'target':>8}   {'window T (s)':>12} {'neurons':>10} "
                f"{'wall':>10}   {'P':>8} {'floor':>8} {'neurons':>12} {'wall':>10}"]
        for s in self.stages:
            if s.reached:
                rows.append(f"{s.stage:<8} {s.nrmse:>8.3g} {s.floor:>8.3g} {s.target:>8.3g}   floor at or below the "
                            "target already")
            else:
                rows.append(f"{s.stage:<8} {s.nrmse:>8.3g} {s.floor:>8.3g} {s.target:>8.3g}   {s.T:>12.4g} "
                            f"{s.T_neurons:>10,} {_wall(s.T_wall):>10}   {_p_text(s.P, s.P_factor):>8} "
                            f"{s.P_floor:>8.3g} {s.P_neurons:>12,} {_wall(s.P_wall):>10}")
            if s.bias is not None:
                rows.append(f"{'':<8} NRMSE {s.nrmse / s.floor:.2g}x its floor: a bias of ~{s.bias:.3g} that "
                            "neither T nor P removes" + (" (above the target: not reachable by T or P)"
                                                          if s.bias >= s.target else ""))
        foot = ("window T: the measurement window at the same P (warm-up unchanged); P: copies at the same "
                "window (xK: every population's copies times K); wall: ctmhsa.sims.estimate_runtime (a rough "
                "figure, within a factor of a few; compilation excluded)")
        return "\n".join([head, *rows, foot, *self.notes])


def _wall(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    if seconds >= 86400:
        return f"{seconds / 86400:.3g} d"
    return f"{seconds / 3600:.3g} h" if seconds >= 3600 else f"{seconds:.3g} s"


def _p_text(P, factor=None) -> str:
    """``P`` for the table: a planned per-population dict as its factor (``x4``: every
    population's copies times 4; the dict is in :meth:`Plan.to_dicts`)."""
    if isinstance(P, dict) and factor is not None:
        return f"x{factor:g}"
    if isinstance(P, dict):
        return "{" + ", ".join(f"{k}: {v}" for k, v in P.items()) + "}" if P else "1"
    return str(P)


def _targets(target, stages: list) -> dict:
    """``target`` (one NRMSE, or a dict stage -> NRMSE) checked, per stage of ``stages``."""
    def one(name, v):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise TypeError(f"{name}: expected a target NRMSE (a number > 0), got {v!r}")
        if not (math.isfinite(float(v)) and float(v) > 0):
            raise ValueError(f"{name}: expected a target NRMSE > 0 (finite), got {v!r}")
        return float(v)

    if isinstance(target, dict):
        unknown = [k for k in target if k not in stages]
        if unknown:
            raise ValueError(f"target: unknown stage(s) {unknown}; this result has {stages}")
        return {k: one(f"target[{k!r}]", v) for k, v in target.items()}
    t = one("target", target)
    return {k: t for k in stages}


def _cost(config: dict, level: str, T: float, P=None, circuit=None) -> tuple[int, float]:
    """Neurons and estimated wall time (s) of the result's run with window ``T`` and, when
    given, copies ``P`` (the circuit described again, not built)."""

    circuit = _described(config, P) if circuit is None else circuit
    device = config.get("device", "runtime")
    # a split run's heads run as parallel tasks: one task's share, as build_mhsa estimates it
    per = int(config["H"]) if config.get("scheduler") is not None else 1
    steps = int(round((float(config.get("warmup") or 0.0) + T) / float(config["dt"])))
    # the spiking levels' synapses cost nothing per step (RUN_COST: counted per neuron), and
    # counting them takes seconds at a large P (every copy contacts every copy): counted only
    # where they cost, the description's count standing in for the simulated (folded) one
    per_synapse = step_cost(level, device)[2]
    synapses = circuit.n_synapses() if per_synapse else 0
    wall = estimate_runtime(level, device, steps, circuit.n_neurons() // per, synapses // per)
    return circuit.n_neurons(), wall


def plan(result, target, stages=None) -> Plan:
    """Per stage, the window ``T'`` (same copies) and the copies ``P'`` (same window) whose
    noise floor reaches ``target``, with their neurons and estimated wall time.

    From ``floor ∝ 1/sqrt(T P)`` (module docstring): ``T' = T (floor / target)²`` and
    ``P' = ceil(P (floor / target)²)``. The floor is the error expected from count noise, not a
    guarantee; a stage whose error is well above its floor is flagged with its bias.

    Parameters
    ----------
    result : SimulationResult
        A single token set's result at a spiking level (``ctmhsa.load(DIR)`` or
        :func:`ctmhsa.simulate_mhsa`).
    target : float or dict
        The target NRMSE (> 0), for every stage or per stage name.
    stages : list of str, optional
        The stages to plan (default: every stage of the result, or the keys of a ``target`` dict).

    Returns
    -------
    Plan

    Raises
    ------
    ValueError, TypeError
        A bad ``target`` or ``stages``; a rate-level result (no spikes, no floor); a stream
        (its floors are per presentation); a result without its configuration.
    """
    if not isinstance(result, SimulationResult):
        raise TypeError(f"result: expected a ctmhsa.sims.SimulationResult, got {type(result).__name__}")
    if not get_level(result.level).spiking:
        raise ValueError("result: the rate level has no spike-count noise and so no noise floor to plan from; "
                         "plan from a spiking level's result (neuron='escape' or 'lif')")
    c = result.config
    missing = [k for k in ("n", "H", "dk", "dv", "de", "dt", "duration", "P") if k not in c]
    if missing:
        raise ValueError(f"result: its configuration lacks {missing}; plan needs a run's result "
                         "(ctmhsa.simulate_mhsa or ctmhsa.load)")
    if result.stream is not None or c.get("presentation") is not None:
        raise ValueError("result: a stream's floors are per presentation window; plan a single token set's "
                         "result (the presentation time of a stream: ctmhsa bench timescale)")
    metrics = result.metrics()
    have = [s for s in STAGE_ORDER if s in metrics]
    if stages is not None:
        if isinstance(stages, str):
            stages = [stages]
        unknown = [s for s in stages if s not in have]
        if unknown:
            raise ValueError(f"stages: unknown stage(s) {unknown}; this result has {have}")
    targets = _targets(target, list(stages) if stages is not None else have)
    names = [s for s in have if s in targets]

    T, P0 = result.duration, c["P"]
    firing = c.get("firing", "poisson")
    exact = get_level(result.level).escape and get_firing(firing).poisson
    base_neurons, base_wall = _cost(c, result.level, T, circuit=_Counted(result))
    by_factor: dict = {}          # copies multiplier -> (neurons, wall): a description each
    out, notes = [], []
    for s in names:
        m, tgt = metrics[s], targets[s]
        floor = float(m["noise_floor"])
        if not math.isfinite(floor) or floor <= 0:
            notes.append(f"{s}: no noise floor in this result (no spikes counted): not planned")
            continue
        ratio = (floor / tgt) ** 2                   # variance ratio to remove
        bias = (math.sqrt(max(m["nrmse"] ** 2 - floor ** 2, 0.0))
                if math.isfinite(m["nrmse"]) and m["nrmse"] > BIAS_RATIO * floor else None)
        if ratio <= 1 + 1e-9:                        # rounding: a floor equal to the target
            out.append(StagePlan(s, tgt, m["nrmse"], floor, True, T, base_neurons, base_wall, P0, 1.0, floor,
                                 base_neurons, base_wall, bias))
            continue
        T1 = T * ratio
        _, wall_T = _cost(c, result.level, T1, circuit=_Counted(result))
        if isinstance(P0, dict):
            k = math.ceil(ratio - 1e-9)
            every = _populations(c)
            P1 = {p: int(P0.get(p, 1)) * k for p in every}
        else:
            k = math.ceil(int(P0) * ratio - 1e-9) / int(P0)
            P1 = int(round(k * int(P0)))
        if k not in by_factor:
            by_factor[k] = _cost(c, result.level, T, P=P1)
        nP, wall_P = by_factor[k]
        out.append(StagePlan(s, tgt, m["nrmse"], floor, False, T1, base_neurons, wall_T, P1, k, floor / math.sqrt(k),
                             nP, wall_P, bias))
    return Plan(out, result.level, firing, T, P0, base_neurons, base_wall, exact, notes)


class _Counted:
    """The result's own circuit for :func:`_cost`: its recorded counts (described again where a
    result lacks them)."""

    def __init__(self, result):
        self._counts, self._config = result.counts, result.config

    def n_neurons(self):
        n = self._counts.get("neurons")
        return int(n) if n is not None else _described(self._config).n_neurons()

    def n_synapses(self):
        n = self._counts.get("synapses")
        return int(n) if n is not None else _described(self._config).n_synapses()


def _described(config: dict, P=None, built: bool = True):
    """The result's circuit described again (no Brian2 object), with copies ``P`` when given;
    ``built``: as built (Dale's followers added), else the plain pathway."""
    from .options import CircuitOptions

    co = CircuitOptions.from_config(config)
    if P is not None:
        co = co.replace(P=P)
    c = config
    plain = co.describe(c["n"], c["dk"], c["dv"], c["de"], H=c["H"], m=c.get("m"), cross=bool(c.get("cross")),
                        skip=bool(c.get("skip")))
    return co.as_built(plain) if built else plain


def _populations(config: dict) -> list:
    """The populations of the result's pathway (the names a ``P`` dict may hold)."""
    return list(_described(config, P=1, built=False).populations)
