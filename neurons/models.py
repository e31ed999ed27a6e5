"""Cell models per fidelity level, as Brian2 equation strings with units.

A :class:`CellModel` says how a cell type is written at one level: its equations, which
variable each compartment's synaptic input feeds (and in which unit), its output rate, which
per-cell parameters the mapping layer sets, and which state variables the decoder reads.
Models are registered per ``(level, cell_type)`` (like Nengo's ``Builder.register``), so the
circuit instantiation never needs to know the equations.

Rate level (``"rate"``): continuous-rate compartments, no spikes. Every compartment is a state
variable with its time constant; the input of a compartment is the sum of its projections'
summed variables ``in_<projection>`` (``w * r_pre``). Conventions: dendritic potentials are
relative to rest, in volts; ``u`` volts encode one unit; rates are in Hz and rectified.

Escape level (``"escape"``): the same compartments and the same expected rate ``r``, but inputs
are spikes through exponential synaptic currents (each spike adds ``w * k_syn``,
``k_syn = (1 - exp(-dt/tau_syn))/dt``, so the step-sampled mean input is exactly ``w * rate`` as
at the rate level) and every cell spikes with probability ``r dt`` per step, with no effect of a
spike on the membrane (escape noise, Urbanczik & Senn 2014). Because the rate is linear in the
somatic potential and in the apical factor, the expected rate equals the rate-level rate when
the inputs to a product are independent: the level's error is spike-count noise. The spikes are
sampled one interval at a time, with one random number per spike (see :data:`ESCAPE`). With
``firing="regular"`` or ``"population"`` (:data:`FIRING`) the same cells have a perfect
integrate-and-fire soma instead, which fires the window integral of ``r`` to within one spike
(:func:`integrator_model`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np

from .firing import FIRING_MODES, get_firing
from .laws import law_expression
from .levels import LEVELS, get_level
from .params import DRAW_KEY, SIMD_METHOD, lif_soma
from .shotnoise import regular_ratio_expression

__all__ = ["FIDELITY_LEVELS", "CellModel", "Fold", "register", "get_model", "PHI_EXPRESSIONS", "phi_expression", "MODELS",
           "SYNAPSE_WEIGHT_UNITS", "ESCAPE", "ESCAPE_SURVIVAL", "ESCAPE_RESET", "synapse_model", "initial_draws",
           "add_step_code", "PHI_VARIANCE", "PHI_CORRECTED", "corrected_phi_expression", "CorrectedCellModel",
           "PHI_DERIVATIVE", "PHI_COVARIANCE", "count_variance", "SOURCE_VARIANCE", "sums_variance", "source_variance_code",
           "FollowerModel", "FIRING", "integrator_model", "stratify_phases", "R_FS_MAX", "TAU_LOOP_LIF", "TAU_LOOP_LAG",
           "loop_lag"]

PHI_EXPRESSIONS = {
    # elu(x) + 1 == max(x, 0) + exp(min(x, 0))
    "elu1": "(clip({x}, 0, inf) + exp(clip({x}, -inf, 0)))",
    "relu": "clip({x}, 0, inf)",
    # softplus, written to stay finite for large |x|
    "softplus": "(clip({x}, 0, inf) + log(1 + exp(-abs({x}))))",
    "exp": "exp({x})",
}
"""Brian2 expressions of the named feature maps (dendritic nonlinearities)."""


def phi_expression(name: str, x: str) -> str:
    """Brian2 expression of feature map ``name`` applied to expression ``x``."""
    try:
        return PHI_EXPRESSIONS[name].format(x=x)
    except KeyError:
        raise ValueError(
            f"phi: the circuit implements the named maps {sorted(PHI_EXPRESSIONS)}; got {name!r}"
        ) from None


@dataclass(frozen=True)
class Fold:
    """Deterministic state that cells with identical synaptic input may share.

    The builder (:mod:`ctmhsa.circuits.fold`) simulates ``variables`` once per class of cells that
    receive the same synapses on ``compartments``; the compartments' input sums, synaptic
    currents and ``parameters`` move along, and the cells read ``variables`` as linked variables.
    Only state that is a deterministic function of those inputs may be declared (no random
    numbers, no reset).

    Attributes
    ----------
    name : str
        Suffix of the folded group's name.
    variables : tuple of str
        State variables shared within a class.
    compartments : tuple of str
        Compartments whose synaptic inputs drive them.
    parameters : tuple of str
        Per-cell parameters they use (must be equal within a class).
    cached : tuple of str
        Subexpressions of ``variables`` alone (e.g. phi of the apical potential) that the folded
        group evaluates once per class and step instead of every cell (before the cells' state
        update and after its own), linked into the cells like ``variables``.
    """

    name: str
    variables: tuple
    compartments: tuple
    parameters: tuple = ()
    cached: tuple = ()


@dataclass(frozen=True)
class CellModel:
    """How one cell type is written at one fidelity level.

    Attributes
    ----------
    equations : str
        Brian2 equations; ``{phi:EXPR}``-style placeholders are filled by :meth:`render`.
    inputs : dict
        ``compartment -> (variable, unit)``: the subexpression that sums the compartment's
        synaptic inputs, and its Brian2 unit string.
    output : str
        Name of the rate variable read by outgoing synapses (Hz).
    parameters : tuple of str
        Per-cell parameters set by the mapping layer (biases, input rates, gains).
    observables : tuple of str
        State variables the decoder reads.
    method : str
        Brian2 integration method.
    regular : str
        Code run every time step after the state update (e.g. rectification), or ``""``.
    pre_threshold : str
        Code run every time step after every state update of the step (the cell's own, its
        regular code and its folded compartments'), in the spike thresholder's loop just before
        each cell's spike condition (:class:`ctmhsa.neurons.threshold.CellThresholder`): the escape
        cells' survival update, or ``""``.
    threshold, reset, refractory : str
        Brian2 spike condition, reset code and refractoriness (empty: none).
    folds : tuple of Fold
        State that cells with identical inputs may share (see :class:`Fold`).
    integrated : tuple of str
        Observables whose window integral ``acc_<v>`` the ``pre_threshold`` code accumulates (it
        computes them anyway); the others are accumulated by code run after every step (see
        :attr:`accumulated`).
    init : dict
        Initial values of state variables (dimensionless), the same for every cell.
    uniform_init : tuple of str
        Variables that start from independent uniform draws in (0, 1], one per cell (seeded per
        run by the instantiation, see :func:`initial_draws`).
    firing : str
        How the soma turns its intensity ``r`` into spikes (:data:`FIRING`): ``"poisson"`` (the
        escape cells' Bernoulli draws), or a perfect integrator (``"regular"``, ``"population"``,
        see :func:`integrator_model`); informational for the other cells.
    on_spike : dict
        ``compartment -> code`` that a spike arriving at the compartment also runs, besides adding
        to its current (Brian2 ``on_pre`` code, the target's variables suffixed ``_post``): the
        lif memory integrators' leak at each spike of their gate (:mod:`ctmhsa.circuits.kvmemory`).
    """

    equations: str
    inputs: dict = field(default_factory=dict)
    output: str = "r"
    parameters: tuple = ()
    observables: tuple = ("r",)
    method: str = "exponential_euler"
    regular: str = ""
    pre_threshold: str = ""
    threshold: str = ""
    reset: str = ""
    refractory: str = ""
    folds: tuple = ()
    integrated: tuple = ()
    init: dict = field(default_factory=dict)
    uniform_init: tuple = ()
    firing: str = "poisson"
    on_spike: dict = field(default_factory=dict)
    units: dict = field(default_factory=lambda: {"r": "Hz", "V_b": "volt", "V_a": "volt", "U": "volt",
                                                 "P": "1", "v": "volt"})

    @property
    def spiking(self) -> bool:
        """Spiking models emit spikes (``threshold``); their synapses are event-driven."""
        return bool(self.threshold)

    @property
    def lif_soma(self) -> bool:
        """A calibrated conductance-based soma (:func:`_lif`): driven on its law, firing a
        baseline (its drive ``I_rh``, ``I_gain``, ... set by :mod:`ctmhsa.mapping.baseline`)."""
        return "I_rh" in self.parameters

    @property
    def accumulated(self) -> tuple:
        """Observables whose window integral is accumulated by code run after every step."""
        return tuple(v for v in self.observables if v not in self.integrated)

    def render(self, phi: str, projections_by_compartment: dict[str, list[str]],
               law: str = "product") -> str:
        """Full equations with feature map, somatic law and input sums filled in.

        ``projections_by_compartment`` maps compartment -> names of projections targeting it;
        each gets a parameter ``in_<name>`` written by its Synapses' summed variable. ``law``
        (:mod:`ctmhsa.neurons.laws`) replaces ``{LAW}`` (the L5 IT soma's basal x apical interaction).
        """
        lines = [self.equations.format(PHI_B=phi_expression(phi, "V_b/u"),
                                       PHI_A=phi_expression(phi, "V_a/u"),
                                       LAW=law_expression(law)).strip()]
        for comp, (var, unit) in self.inputs.items():
            projs = projections_by_compartment.get(comp, [])
            zero = "0" if unit == "1" else f"0*{unit}"
            total = " + ".join(f"in_{p}" for p in projs) or zero
            lines.append(f"{var} = {total} : {unit}")
            if self.spiking:  # exponential synaptic currents, incremented by w*k_syn per spike
                lines.extend(f"din_{p}/dt = -in_{p}/tau_syn : {unit}" for p in projs)
            else:             # written every step by the projection's summed variable
                lines.extend(f"in_{p} : {unit}" for p in projs)
        if self.spiking:      # window integrals of the observables (from t_win on), for time averages
            lines.append("t_win : second (shared)")
            lines.extend(f"acc_{v} : " + ("second" if self.units[v] == "1" else f"{self.units[v]}*second")
                         for v in self.observables)
        unknown = set(projections_by_compartment) - set(self.inputs)
        if unknown:
            raise ValueError(f"model has no input for compartment(s) {sorted(unknown)}")
        return "\n".join(lines)


FIDELITY_LEVELS = LEVELS
"""Fidelity levels of the cells, from exact rates to integrate-and-fire spiking cells: the names
registered in :mod:`ctmhsa.neurons.levels` (a live view)."""

MODELS: dict[tuple[str, str], CellModel] = {}


def register(level: str, cell_type: str):
    """Decorator registering a factory ``() -> CellModel`` for ``(level, cell_type)``."""

    def deco(factory):
        MODELS[(level, cell_type)] = factory()
        return factory

    return deco


def get_model(level: str, cell_type: str, firing: str = "poisson") -> CellModel:
    """The model of ``cell_type`` at ``level``, its escape-noise soma made a perfect integrator
    for ``firing`` ``"regular"`` or ``"population"`` (:func:`integrator_model`)."""
    try:
        return integrator_model(MODELS[(level, cell_type)], firing)
    except KeyError:
        levels = sorted({lv for lv, _ in MODELS})
        raise ValueError(
            f"neuron: no model for cell type {cell_type!r} at level {level!r}; levels with models: {levels}"
        ) from None


def initial_draws(model: CellModel, n: int, seed, stream: str) -> dict:
    """Initial values of ``n`` cells of ``model``: ``model.init``, and independent uniform
    draws in (0, 1] for ``model.uniform_init``.

    The draws come from numpy, seeded by ``(seed, stream)`` (``stream`` names the population),
    independent of Brian2's random numbers and of the device, so every device starts from the
    same state. ``seed=None`` draws fresh entropy.
    """
    out = {v: np.full(n, float(x)) for v, x in model.init.items()}
    if model.uniform_init:
        tag = int.from_bytes(hashlib.sha256(stream.encode()).digest()[:4], "little")
        rng = np.random.default_rng(np.random.SeedSequence(None if seed is None else [int(seed), tag]))
        out.update({v: 1.0 - rng.random(n) for v in model.uniform_init})
    return out


def stratify_phases(phases: np.ndarray, copy: np.ndarray, dimension: np.ndarray, copies: int) -> np.ndarray:
    """Phases of a ``"population"`` (:data:`FIRING`): the copies of a dimension evenly spread,
    ``S_k = 1 - frac(U + k/P)`` for copy ``k`` of ``P``, ``U`` the first copy's seeded draw
    (``1 - phases`` of it), so that ``P`` integrators driven alike fire in turn.

    Parameters
    ----------
    phases : ndarray
        The cells' independent draws in (0, 1] (:func:`initial_draws`).
    copy, dimension : ndarray of int
        Each cell's copy index (``0 .. copies - 1``) and an integer key of its dimension (the
        cells sharing every other axis).
    copies : int
        Copies per dimension.
    """
    phases, copy, dimension = np.asarray(phases, float), np.asarray(copy), np.asarray(dimension)
    first = copy == 0
    offset = np.zeros(int(dimension.max()) + 1 if dimension.size else 0)
    offset[dimension[first]] = 1.0 - phases[first]
    return 1.0 - np.mod(offset[dimension] + copy / copies, 1.0)


def add_step_code(group, model: CellModel, clock) -> None:
    """Attach ``model``'s per-step code to the Brian2 ``group``: ``regular`` right after the
    group's state update (``run_regularly`` in the ``groups`` slot, order 1), and
    ``pre_threshold`` inside the spike thresholder (:class:`ctmhsa.neurons.threshold.CellThresholder`,
    the thresholder of every spiking model), in the same loop over the cells just before the
    spike condition: every state update of the step (the cell's own, its regular code, its
    folded compartments and their caches, see :func:`ctmhsa.circuits.instantiate.instantiate`) has run
    by then, so the condition sees the step's intensity."""
    if model.regular and DRAW_KEY in group.variables:   # the lif somata's background: counter-based draws
        from .simd import CounterDraws

        CounterDraws.install(group, model.regular, clock, when="groups", order=1, name=f"{group.name}_regular")
    elif model.regular:
        group.run_regularly(model.regular, clock=clock, when="groups", order=1, name=f"{group.name}_regular")
    if model.threshold:
        from .threshold import CellThresholder   # Brian2's codegen: imported where a group is built

        CellThresholder.install(group, model.pre_threshold)
    elif model.pre_threshold:
        raise ValueError("pre_threshold: code before a spike condition needs a model with a threshold")


# ------------------------------------------------------------------------------------------------
# Rate level
# ------------------------------------------------------------------------------------------------

@register("rate", "relay")
def _rate_relay():
    # thalamic relay cell of nucleus 1: its rate is the encoded token (set by the mapping layer)
    return CellModel(
        equations="""
        r = r_in : Hz
        r_in : Hz
        """,
        parameters=("r_in",),
    )


def _two_compartment(shunted: bool, gain: str, apical_bias: bool) -> CellModel:
    """A two-compartment pyramidal cell: basal and apical dendrites (leaky integrators of their
    synaptic input plus a bias), a soma following the basal potential — or, when ``shunted``
    (L2/3-like), receiving phi of it and divided by the interneurons' shunt ``g_sh`` — and the
    rate ``rho * gain`` (somatic factor times apical factor). A shunted cell's gain ``rho`` is
    per cell: the encoder sets it per head so that every macrocolumn's division is reachable
    (:mod:`ctmhsa.mapping.operating`); the others share one gain per population."""
    soma = "u*{PHI_B} - U*(1 + g_sh)" if shunted else "V_b - U"
    phi_apical = "phi_a" in gain       # phi of the apical potential, cached per fold class
    # a shunted cell's apical factor is divided by the interneurons' apical shunt g_ap (the second
    # division stage; g_ap = 0 where no projection targets it, and the factor is exactly 1)
    lines = ["dV_b/dt = (b_b + I_b - V_b)/tau_d : volt",
             f"dV_a/dt = ({'b_a + ' if apical_bias else ''}I_a - V_a)/tau_d : volt",
             f"dU/dt = ({soma})/tau_m : volt",
             f"r = rho*{gain}{'*k_ap' if shunted else ''} : Hz"]
    if shunted:
        lines.append("k_ap = 1/(1 + g_ap) : 1")
    if phi_apical:
        lines.append("phi_a = {PHI_A} : 1")
    lines.append("b_b : volt")
    if apical_bias:
        lines.append("b_a : volt")
    lines.append("rho : Hz (constant)" if shunted else "rho : Hz (shared, constant)")
    inputs = {"basal": ("I_b", "volt"), "apical": ("I_a", "volt")}
    if shunted:
        inputs["soma"] = ("g_sh", "1")
        inputs["apical_shunt"] = ("g_ap", "1")
    # the soma is a deterministic filter of the basal potential (and of the shunt): it folds
    # with the basal dendrite; the apical dendrite folds alone. The apical shunt comes from the
    # interneurons that shunt the soma, so it folds with the soma (its factor k_ap cached)
    folds = (Fold("basal", ("V_b", "U"), ("basal", "soma", "apical_shunt") if shunted else ("basal",), ("b_b",),
                  cached=("k_ap",) if shunted else ()),
             Fold("apical", ("V_a",), ("apical",), ("b_a",) if apical_bias else (),
                  cached=("phi_a",) if phi_apical else ()))
    return CellModel(equations="\n".join(lines), inputs=inputs,
                     parameters=("b_b", "b_a", "rho") if apical_bias else ("b_b", "rho"),
                     observables=("V_b", "V_a", "U", "r"), folds=folds)


_PHI_GAIN = "clip(U/u, 0, inf)*phi_a"           # somatic factor x phi(apical) (phi_a = {PHI_A})
_LINEAR_GAIN = "clip(U/u, 0, inf)*clip(V_a/u, 0, inf)"   # somatic factor x rectified apical


@register("rate", "l23")
def _rate_l23():
    # basal dendrite: query; apical dendrite: key; each passes phi (dendritic nonlinearity).
    # The soma receives phi(q) and is shunted by the macrocolumn's interneurons (g_sh, relative
    # to the leak); the apical output phi(k) sets the gain of the somatic rate.
    return _two_compartment(shunted=True, gain=_PHI_GAIN, apical_bias=True)


@register("rate", "interneuron")
def _rate_interneuron():
    # Integral feedback on the pooled L2/3 drive. The shunt it exerts is g = r / I_set (relative
    # to the L2/3 leak), and the rate integrates the relative error scaled by the total
    # conductance 1 + g:  d ln(1 + g)/dt = (I_pool / I_set - 1) / tau_int.
    # At steady state I_pool = I_set (exact division, any Z); unlike a plain integrator, whose
    # loop slows down as 1 + g grows with Z, it settles in ~tau_int for every macrocolumn.
    # The relative error saturates at e_max (pooled drive far above its set point, only in
    # transients): unbounded, ln(1 + g) jumped by ~5 per step at the start and overflowed. The
    # error must stay linear in I_pool over its spike noise, or the fixed point is no longer
    # E[I_pool] = I_set: one L2/3 spike raises it by ~1/(tau_syn R_set), 13 in a macrocolumn of
    # 3 cells at 5 Hz, where a fixed bound of 9 clipped every spike and drove the interneurons to
    # 1/dt (measured); the encoder sets e_max = 9 + 5/(tau_syn R_set) (ctmhsa.mapping.encode).
    # Rectified at 0 after every step, which also prevents integrator wind-up; capped at 10/dt
    # (far above any working rate: 10 kHz at the escape level's 1 ms), so that interneurons whose
    # output is silenced (ctmhsa.perturb.Silence), whose error then never closes, stop growing
    # instead of overflowing to inf and NaN.
    # With the apical stage the division is the square of the somatic one, so the loop would move
    # twice as fast in ln D; k_int (1 per somatic stage alone, 1/2 with both) keeps its speed: at
    # the escape level the doubled gain rang and held the interneurons near their bound (measured)
    return CellModel(
        equations="""
        dr/dt = (r + I_set)*clip(I_pool/I_set - 1, -1, e_max)/tau_inh : Hz
        I_set : Hz
        e_max : 1 (constant)
        tau_inh : second (constant)
        """,
        inputs={"soma": ("I_pool", "Hz")},
        parameters=("I_set", "e_max", "tau_inh"),
        regular="r = clip(r, 0*Hz, 10/dt)",
        # the interneurons of a macrocolumn pool the same L2/3 cells: their loop is one
        # deterministic state per macrocolumn, each cell keeping its own membrane and spikes
        # (at barrel size 1.08 M pooling synapses become 36,000)
        folds=(Fold("soma", ("r",), ("soma",), ("I_set", "e_max", "tau_inh")),),
    )


@register("rate", "l5it")
def _rate_l5it():
    # basal: value (+ offset, see ctmhsa.mapping.encode); apical: summed local L2/3 salience;
    # soma rate = basal-driven rate x apical gain ({LAW}: the product of Algorithm 1 by default,
    # or another two-point-neuron law of ctmhsa.neurons.laws)
    return _two_compartment(shunted=False, gain="{LAW}", apical_bias=False)


def _rate_linear():
    # L5 PT and nucleus-2 relay: leaky integration of summed input, linear rectified rate
    # The potential is a deterministic filter of the summed input: the copies of a value, which
    # receive the same synapses, share it (one synapse per class instead of one per copy: the
    # dense L5 IT -> PT, PT -> nucleus 2 and MLP projections took 57 % of a lif digits run at 32
    # copies, measured with perf); each copy keeps its own spikes
    return CellModel(
        equations="""
        dU/dt = (b + I_s - U)/tau_m : volt
        r = rho*clip(U/u, 0, inf) : Hz
        b : volt
        rho : Hz (shared, constant)
        """,
        inputs={"soma": ("I_s", "volt")},
        parameters=("b", "rho"),
        observables=("U", "r"),
        folds=(Fold("soma", ("U",), ("soma",), ("b",)),),
    )


register("rate", "l5pt")(_rate_linear)
register("rate", "relay_out")(_rate_linear)
# transformer blocks (ctmhsa.circuits.transformer): the MLP's hidden units (L6 corticothalamic
# cells, rate rho [W1 N(h) + b1]_+: the rectification is the MLP's relu) and the read-out's
# class cells are the same leaky linear-rectified cell
register("rate", "decoder")(_rate_linear)


@register("rate", "l6ct")
def _rate_l6ct():
    # the MLP's hidden unit: the linear cell with the relays' slow integration (tau_relay): its
    # rate is rectified (the relu), so fluctuations of its potential around a mean near 0 would
    # add to its mean rate (E[relu] > relu(E)); a slow membrane keeps them small
    m = _rate_linear()
    return replace(m, equations=m.equations.replace("/tau_m", "/tau_relay"))


@register("rate", "ffi")
def _rate_ffi():
    # feedforward inhibitory follower of an excitatory cell (Dale's law, ctmhsa.circuits.dale):
    # at the rate level it fires at its cell's rate (its drive writes w r_pre, w = 1)
    return CellModel(equations="r = I_f : Hz", inputs={"soma": ("I_f", "Hz")})


@register("rate", "relay_norm")
def _rate_relay_norm():
    # thalamic relay of a transformer block's stream, divisively normalised per token: the
    # dendrite integrates the stream (driver input, u x per unit), the soma follows it shunted
    # by the token's TRN interneurons (its input g_sh, relative to the leak, is g_trn times their
    # rate: CodeGains.g_trn), rate rho [U/u]_+. The TRN
    # pool holds the token's summed ON + OFF rate at its set point, so the rates are
    # rho_in [±N(x)]_+ for every stream scale (as the L2/3 somata divide by Z). The dendrite is
    # slow (tau_relay): the pool sums the rectified ON and OFF rates, so the dendrite's spike
    # fluctuations would count as signal and shrink N(x) (CellParams.tau_relay).
    return CellModel(
        equations="""
        dV_b/dt = (I_b - V_b)/tau_relay : volt
        dU/dt = (V_b - U*(1 + g_sh))/tau_m : volt
        r = rho*clip(U/u, 0, inf) : Hz
        rho : Hz (shared, constant)
        """,
        inputs={"basal": ("I_b", "volt"), "soma": ("g_sh", "1")},
        parameters=("rho",),
        observables=("V_b", "U", "r"),
    )


# key-value memory cells of the linear circuit: sum their write cells' rates over tokens j; the
# normaliser's memory (z = Σ_j phi(k_j), no on/off pair) is a type of its own, read unrectified at
# the lif level (below)
register("rate", "memory")(_rate_linear)
register("rate", "memory_z")(_rate_linear)


@register("rate", "kv_write")
def _rate_kv_write():
    # outer-product cell of the linear circuit: basal value (linear, as L5 IT) times the apical
    # key passed through phi (as L2/3); with a basal bias of one unit and no basal input it
    # fires for phi(k) alone (the cells writing z = Σ_j phi(k_j))
    return _two_compartment(shunted=False, gain=_PHI_GAIN, apical_bias=True)


@register("rate", "kv_read")
def _rate_kv_read():
    # read-out cell of the linear circuit: basal query through phi and a shunted soma (as L2/3),
    # apical memory entry, linear-rectified (as L5 IT): rate ∝ phi(q_f) S_fc / (1 + g)
    return _two_compartment(shunted=True, gain=_LINEAR_GAIN, apical_bias=False)


SYNAPSE_WEIGHT_UNITS = {"volt": "volt*second", "1": "second", "Hz": "1"}
"""Unit of a synaptic weight for each input unit: input = weight x presynaptic rate."""


def synapse_model(source: CellModel, target: CellModel, compartment: str, name: str, gated: bool = False,
                  replayed: bool = False, sign: str = "", source_copies: int = 1, params=None) -> dict:
    """Keyword arguments of ``brian2.Synapses`` for projection ``name`` onto ``compartment``.

    A spiking source is event-driven: each spike adds ``w * k_syn`` to the target's exponential
    current ``in_<name>``. A rate source writes ``w * r_pre`` into ``in_<name>`` every step
    (a summed variable). Either way the mean input is ``w`` times the presynaptic rate.

    Onto a compartment whose phi the target corrects (:class:`CorrectedCellModel`), the
    projection also sums the compartment's spike-noise variance every step from its
    presynaptic cells' intensities (Campbell's theorem in discrete time, see
    :mod:`ctmhsa.mapping.dendrites`): ``Σ p (1 - p) (w k_syn)² G_shot / u²`` with ``p = r_pre dt``.
    The circuit thus corrects phi for whatever its inputs are, with nothing set from the tokens.
    Each presynaptic cell holds its own count variance per step (:data:`SOURCE_VARIANCE`, from
    :func:`source_variance_code`), which every synapse reads.

    ``gated``: the source is silenced over an interval (its subexpression ``gate``, see
    :mod:`ctmhsa.circuits.perturb`); a rate source's output is multiplied by it (a spiking one
    stops spiking: its threshold is gated by the instantiation).

    ``replayed``: the source replays recorded spikes (a split run's heads) and has no intensity
    variable; each synapse then holds its presynaptic cell's count variance ``pvar`` (from the
    relay's rate, written with the rates: run-time data, :func:`ctmhsa.circuits.instantiate.assign`).

    ``sign``: the projection carries one sign of its weights (Dale's law,
    :mod:`ctmhsa.circuits.dale`). Onto a corrected compartment the positive half sums the variance
    of both halves, from the whole weight ``wv`` (its synapses and the negative half's join the
    same cells, and a follower fires with every spike of its cell); the negative half sums none
    (two summed variables cannot write one target).

    Onto a follower (:class:`FollowerModel`) a spike adds ``w`` to the follower's pending count.

    ``source_copies`` (the source's copies per dimension) and ``params`` (``tau_d``, ``tau_syn``)
    give the variance of a source whose soma is a perfect integrator (:func:`count_variance`).
    """
    rate = f"{source.output}_pre*gate_pre" if gated else f"{source.output}_pre"
    if getattr(target, "follower", False) and source.spiking:
        return dict(model="w : 1 (constant)", on_pre="pending_post += w")
    unit = target.inputs[compartment][1]
    w = f"w : {SYNAPSE_WEIGHT_UNITS[unit]} (constant)"
    lines = [w]
    if sums_variance(target, compartment, sign):
        # the source's count variance, computed once per cell and step (source_variance_code):
        # a per-synapse expression cost half the digits circuit's steps (population firing)
        var = "pvar" if replayed else f"{SOURCE_VARIANCE}_pre"
        wv = "wv" if sign == "+" else "w"
        lines.append(f"{PHI_VARIANCE[compartment]}_post = ({wv}*k_syn/u)**2*G_shot*{var} : 1 (summed)")
        if sign == "+":
            lines.append(f"wv : {SYNAPSE_WEIGHT_UNITS[unit]} (constant)")
        if replayed:
            lines.append("pvar : 1 (constant)")
    if source.spiking:
        on_pre = [f"in_{name}_post += w*k_syn", target.on_spike.get(compartment, "")]
        return dict(model="\n".join(lines), on_pre="\n".join(code for code in on_pre if code))
    return dict(model="\n".join(lines + [f"in_{name}_post = w*{rate} : {unit} (summed)"]))


SOURCE_VARIANCE = "nvar"
"""State variable of a cell that drives a phi-corrected compartment: its spike-count variance per
step (:func:`count_variance` of its intensity), which every synapse onto such a compartment reads
as ``nvar_pre`` (:func:`synapse_model`)."""


def sums_variance(target: CellModel, compartment: str, sign: str = "") -> bool:
    """Whether a projection onto ``compartment`` of ``target`` sums its sources' count variance
    (:func:`synapse_model`): a compartment the target corrects for its spike noise, and not the
    negative half of a Dale split (its positive half sums both)."""
    return compartment in getattr(target, "corrected", ()) and sign != "-"


def source_variance_code(source: CellModel, gated: bool = False, copies: int = 1, params=None) -> str:
    """Brian2 code setting :data:`SOURCE_VARIANCE` of a ``source`` cell from its intensity (times
    its ``gate`` where silenced): run in every step after the cell's last update and before the
    synapses sum it (``ctmhsa.circuits.instantiate``: ``before_groups``), so that the synapses read
    what they would compute from ``r_pre`` themselves, once per cell instead of once per synapse."""
    rate = f"{source.output}*gate" if gated else source.output
    return f"{SOURCE_VARIANCE} = {count_variance(rate, source.firing, copies, params)}"


def count_variance(rate: str, firing: str = "poisson", copies: int = 1, params=None) -> str:
    """Brian2 expression of the spike-count variance per step, ``p (1 - p)`` with
    ``p = clip(rate dt, 0, 1)``, of an escape cell of intensity ``rate``; for a perfect
    integrator (``firing`` ``"regular"``, or ``"population"`` of ``copies`` cells of evenly
    spread phases, one periodic train at ``copies`` times the rate), the same times the
    fraction of a Poisson train's dendritic variance that a periodic train makes
    (:func:`ctmhsa.neurons.shotnoise.regular_ratio`, with ``params``' ``tau_d`` and ``tau_syn``)."""
    p = f"clip({rate}*dt, 0, 1)"
    mode = get_firing(firing)
    if mode.poisson:
        return f"{p}*(1 - {p})"
    if params is None:
        raise ValueError("count_variance: a perfect integrator's variance needs params (tau_d, tau_syn)")
    train = f"{int(copies)}*{rate}" if mode.in_turn else rate
    return f"{p}*(1 - {p})*{regular_ratio_expression(train, params)}"


# ------------------------------------------------------------------------------------------------
# Escape level: the rate-level cells, spiking with probability r*dt per step (no reset of the soma)
# ------------------------------------------------------------------------------------------------

ESCAPE = "S < u_next"
"""Escape-noise spike condition: in every step a cell spikes with probability ``p = r dt``
(an inhomogeneous Bernoulli process of intensity ``r``, at most one spike per step), sampled
one interval at a time so that random numbers are drawn per *spike*, not per cell and step.
``S`` is the probability that the cell has not spiked since its last spike,
``S = prod_k (1 - p_k)`` (updated by :data:`ESCAPE_SURVIVAL`, a loop that runs on every thread),
and ``u_next`` a uniform draw in (0, 1]: the cell spikes in the first step where ``S`` falls
below ``u_next`` (inverse-transform sampling of the next interval). Given no spike since the
last one, the probability of a spike in step k is ``(S_{k-1} - S_k) / S_{k-1} = p_k`` exactly:
the same spike statistics as a draw ``rand() < r dt`` in every step, at one draw per spike and a
multiplication per cell and step. (The thresholder, a serial loop in Brian2, was 57 % of a
barrel head's run time with one draw per cell and step; measured.) A cell driven past ``1/dt``
(``p`` clipped at 1, see the ``saturated`` diagnostic) spikes in every step. ``r`` is the step's
intensity after its state update, as for a per-step draw. Every code-generation target and
device draws the same numbers in the same order (the spiking cells in index order, population by
population), so numpy, Cython and C++ give the same spikes for the same seed."""

ESCAPE_RESET = "S = 1\nu_next = 1 - rand()"
"""Reset of the escape condition: survival restarted, the next interval's uniform drawn."""

_WINDOW_INTEGRAL = "acc_r += r*dt*int(t >= t_win)"

ESCAPE_SURVIVAL = "S *= 1 - clip(r*dt, 0, 1)\n" + _WINDOW_INTEGRAL
"""Survival update of the escape cells, and the window integral of their intensity ``r`` (the
expected count) in the same loop, which computes ``r`` anyway."""

_ESCAPE_EQUATIONS = """
S : 1
u_next : 1
"""


def _escape(rate_model: CellModel) -> CellModel:
    return replace(rate_model, equations=rate_model.equations.rstrip() + _ESCAPE_EQUATIONS,
                   pre_threshold=ESCAPE_SURVIVAL, threshold=ESCAPE, reset=ESCAPE_RESET, integrated=("r",),
                   init={"S": 1.0}, uniform_init=("u_next",))


# The phi-bias correction. A dendrite integrating spikes fluctuates around the mean the encoder
# set, so a cell passing it through a curved phi sees E[phi(V/u)] != phi(E[V]/u) (README, "The
# φ-bias"). The escape cells that pass a dendrite through phi use instead
#     phi_c(x) = phi(x) - sigma² phi''(x) / 2,      x = V/u, sigma² = Var(V)/u²,
# whose expectation over a fluctuation of variance sigma² is phi(E[x]) up to O(sigma⁴ phi⁽⁴⁾),
# exact for exp in its Gaussian form exp(x - sigma²/2). The variance of every such dendrite is
# set per cell before the run from the encoder's weights and relay rates (ctmhsa.mapping.dendrites:
# Campbell's theorem in the discrete time of the simulation). relu (phi'' a delta at 0) has no
# such correction and keeps its bias. The rate level, which has no fluctuations, is unchanged.
# See docs/phi_bias.md.

PHI_VARIANCE = {"basal": "sig2_b", "apical": "sig2_a"}
"""Per-cell parameter holding the variance of ``V/u`` (dimensionless, in units of u²) of each
compartment whose phi the escape cells correct (set by :func:`ctmhsa.mapping.dendrites.phi_variances`)."""

_PHI_PLACEHOLDER = {"basal": ("PHI_B", "V_b/u"), "apical": ("PHI_A", "V_a/u")}

PHI_CORRECTED = {
    # phi''(x) = exp(x) below 0, 0 above (phi' is continuous, phi'' jumps at 0)
    "elu1": "(clip({x}, 0, inf) + exp(clip({x}, -inf, 0))*(1 - 0.5*{s}*int({x} < 0)))",
    # phi'' is a delta at 0: no second-order correction exists
    "relu": "clip({x}, 0, inf)",
    # phi''(x) = sigmoid(x) (1 - sigmoid(x)) = exp(-|x|)/(1 + exp(-|x|))²
    "softplus": "(clip({x}, 0, inf) + log(1 + exp(-abs({x}))) - 0.5*{s}*exp(-abs({x}))/(1 + exp(-abs({x})))**2)",
    # E[exp(x + sigma Z)] = exp(x + sigma²/2) for Gaussian fluctuations: exact
    "exp": "exp({x} - 0.5*{s})",
}
"""Brian2 expressions of the corrected feature maps ``phi_c`` of argument ``{x}`` and variance ``{s}``."""


PHI_DERIVATIVE = {
    "elu1": "exp(clip({x}, -inf, 0))",
    "relu": "int({x} > 0)",
    "softplus": "1/(1 + exp(-{x}))",
    "exp": "exp({x})",
}
"""Brian2 expressions of phi' (for the covariance correction of the outer-product cells)."""

PHI_COVARIANCE = "cov_ba"
"""Per-cell parameter of the linear circuit's outer-product cells: the covariance of their
somatic potential ``U/u`` (the value, a filter of the basal dendrite) and apical potential
``V_a/u`` (the key), which share their presynaptic relays (token j drives both)."""


def corrected_phi_expression(name: str, x: str, s: str) -> str:
    """Brian2 expression of ``phi_c``: feature map ``name`` of ``x`` corrected for the variance
    ``s`` of ``x`` (see :data:`PHI_CORRECTED`)."""
    phi_expression(name, x)   # the same error for an unknown name
    return PHI_CORRECTED[name].format(x=x, s=s)


@dataclass(frozen=True)
class CorrectedCellModel(CellModel):
    """An escape cell whose ``corrected`` compartments pass their potential through ``phi_c``
    (:data:`PHI_CORRECTED`) with the per-cell variance parameter of :data:`PHI_VARIANCE`.

    Attributes
    ----------
    corrected : tuple of str
        Compartments (``"basal"``: the ``{PHI_B}`` placeholder, ``"apical"``: ``{PHI_A}``).
    """

    corrected: tuple = ()
    covariance: bool = False

    def render(self, phi: str, projections_by_compartment: dict[str, list[str]],
               law: str = "product") -> str:
        eqs = self.equations
        for comp in self.corrected:
            key, x = _PHI_PLACEHOLDER[comp]
            eqs = eqs.replace("{" + key + "}", corrected_phi_expression(phi, x, PHI_VARIANCE[comp]))
        eqs = eqs.replace("{DPHI_A}", PHI_DERIVATIVE[phi].format(x="V_a/u"))
        return CellModel.render(replace(self, equations=eqs), phi, projections_by_compartment, law)


def _corrected(model: CellModel, compartments: tuple) -> CorrectedCellModel:
    """``model`` with phi of ``compartments`` corrected: one variance parameter per compartment,
    folded with it (the basal one enters the soma, folded with the basal dendrite; the apical one
    the apical phi, cached by the apical fold)."""
    names = tuple(PHI_VARIANCE[c] for c in compartments)
    # the variances are summed by the projections onto the compartments (synapse_model), not set
    # by the mapping layer: they move with their compartment's fold, like its input sums
    folds = tuple(replace(f, parameters=f.parameters + tuple(PHI_VARIANCE[c] for c in compartments
                                                                if c in f.compartments))
                  for f in model.folds)
    eqs = model.equations.rstrip() + "".join(f"\n{v} : 1" for v in names) + "\n"
    fields = {k: getattr(model, k) for k in model.__dataclass_fields__}
    return CorrectedCellModel(**{**fields, "equations": eqs, "folds": folds, "corrected": tuple(compartments)})


for _ct in ("relay", "l23", "l5it", "l5pt", "relay_out", "memory", "memory_z", "kv_write", "kv_read",
            "l6ct", "decoder", "relay_norm"):
    MODELS[("escape", _ct)] = _escape(MODELS[("rate", _ct)])

R_FS_MAX = 500.0
"""Largest rate of a threshold interneuron (Hz): a fast-spiking cell's ~2 ms shortest interval
(sustained rates of 300-600 Hz under strong current; McCormick et al. 1985, J Neurophysiol
54:782; Nowak et al. 2003, Cereb Cortex 13:711)."""

THRESHOLD_INTERNEURON = f"S -= clip(r*dt, 0, {R_FS_MAX!r}*dt/second)\n" + _WINDOW_INTEGRAL
"""Membrane update of the threshold interneurons, before their spike condition ``S < 0``:
``S`` is the distance to threshold of a non-leaky integrate-and-fire membrane driven by the
integral loop's output ``r`` (at most :data:`R_FS_MAX`); a spike subtracts one threshold
(``S += 1``), so the cell fires at rate ``r`` exactly, regularly, with no random number.
Their loop's ``r`` is clipped at 0 as the rate level's is: a small pool's silent gaps are
forgotten, a leak (``docs/operating_range.md``, "The interneurons' loop residual in the
floors, and its leak": a state allowed below threshold pinned the pool but widened the
division's excursions)."""


def _threshold_interneuron(rate_model: CellModel) -> CellModel:
    """The divisive interneuron as a cell with a threshold (docs/physiology.md): its integral
    feedback ``r`` on the pooled L2/3 drive is the current charging a non-leaky membrane, which
    spikes on crossing threshold and keeps the excess (a perfect integrate-and-fire cell: its
    rate is ``r``, its intervals regular, sub-Poisson). Every cell starts at its own phase (a
    uniform draw of the seed), so that the cells of a macrocolumn, driven alike, stay apart."""
    return replace(rate_model, equations=rate_model.equations.rstrip() + "\nS : 1\n",
                   pre_threshold=THRESHOLD_INTERNEURON,
                   threshold="S < 0", reset="S += 1", integrated=("r",), uniform_init=("S",))


MODELS[("escape", "interneuron")] = _threshold_interneuron(MODELS[("rate", "interneuron")])

FIRING = FIRING_MODES
"""How the escape level's cells turn their intensity into spikes: ``"poisson"`` (escape noise,
:data:`ESCAPE`), ``"regular"`` (a perfect integrate-and-fire soma per cell, independent phases)
and ``"population"`` (the same, the phases of a dimension's copies evenly spread: the copies
fire as one integrator of their summed rate; so are the phases of a macrocolumn's threshold
interneurons, :func:`ctmhsa.circuits.instantiate._phases`). See :func:`integrator_model`,
docs/timescale.md."""

INTEGRATOR = "S -= clip(r*dt, 0, 1)\n" + _WINDOW_INTEGRAL
"""Membrane update of a perfect integrate-and-fire soma before its spike condition ``S < 0``:
``S`` is the distance to threshold, charged by the intensity ``r`` (at most one spike a step)."""


def integrator_model(model: CellModel, firing: str) -> CellModel:
    """``model`` with its escape-noise soma replaced by a perfect integrate-and-fire soma when
    ``firing`` is ``"regular"`` or ``"population"`` (other models, and ``"poisson"``, unchanged).

    The soma integrates the same intensity ``r`` the escape cell would draw its spikes from,
    fires when it reaches threshold and keeps the excess (``S += 1``): its count in any window
    is the window integral of ``r`` to within one spike, whatever the window, and it draws no
    random number (its phase, ``S`` at the start, is the seed's: :func:`initial_draws`). The
    expected rate is the escape cell's, so the mapping and the decoding are the same; only the
    count noise changes, from Poisson (variance = mean) to the quantisation of one spike (the
    noise floors, :func:`ctmhsa.mapping.noise.spike_generation_fano`). ``"population"`` also
    spreads the phases of a dimension's copies evenly (:func:`ctmhsa.circuits.instantiate`):
    copies driven alike then fire in turn, as one integrator of their summed rate, so the
    population's count is within one spike of its integral (an efficient population code,
    Boerlin, Machens & Deneve 2013, where a cell's spike removes the shared error the others
    would have fired on).
    """
    if get_firing(firing).poisson or model.pre_threshold != ESCAPE_SURVIVAL:
        return model
    eqs = "\n".join(line for line in model.equations.splitlines() if line.strip() != "u_next : 1")
    return replace(model, equations=eqs, pre_threshold=INTEGRATOR, threshold="S < 0", reset="S += 1",
                   init={k: v for k, v in model.init.items() if k != "S"}, uniform_init=("S",), firing=firing)
# L2/3: basal query (shunted soma drive) and apical key; the linear circuit's outer-product
# cells: apical key; its read-out cells: basal query (shunted soma drive)
for _ct, _comps in (("l23", ("basal", "apical")), ("kv_write", ("apical",)), ("kv_read", ("basal",))):
    MODELS[("escape", _ct)] = _corrected(MODELS[("escape", _ct)], _comps)


def _covariance_corrected(model: CorrectedCellModel) -> CorrectedCellModel:
    """The outer-product cell with its value x key covariance removed: its value (soma U, a
    filter of the basal dendrite) and key (apical) dendrites integrate the same relays, so
    E[U phi(V_a)] = E[U] E[phi(V_a)] + Cov(U, phi(V_a)), and Cov(U, phi(V_a)) = C E[phi'(V_a)]
    (Stein's lemma, C = Cov(U, V_a)/u², set per cell by ctmhsa.mapping.dendrites). The gain subtracts
    C phi'(V_a/u) while the soma is depolarised: the ON cell (C) and the OFF cell (-C, opposite
    value weights) of a pair subtract C phi' from their rate difference at every instant."""
    rate = "r = rho*clip(U/u, 0, inf)*phi_a : Hz"
    assert rate in model.equations
    eqs = model.equations.replace(
        rate, f"r = rho*(clip(U/u, 0, inf)*phi_a - {PHI_COVARIANCE}*dphi_a*int(U > 0*volt)) : Hz\n"
              "dphi_a = {DPHI_A} : 1")
    eqs = eqs.rstrip() + f"\n{PHI_COVARIANCE} : 1\n"
    folds = tuple(replace(f, cached=f.cached + ("dphi_a",)) if "phi_a" in f.cached else f for f in model.folds)
    # summed every step by the covariance synapses of the instantiation (relay -> cell, one per
    # relay contacting both dendrites, coefficient w_b w_a from the weights)
    return replace(model, equations=eqs, folds=folds, covariance=True)


MODELS[("escape", "kv_write")] = _covariance_corrected(MODELS[("escape", "kv_write")])


# ------------------------------------------------------------------------------------------------
# LIF level: the same dendrites; conductance-based adaptive integrate-and-fire somata
# ------------------------------------------------------------------------------------------------
# The rate-level cell's law r = rho*P (P = basal factor x apical gain, computed in the passive
# compartments, where the interneurons' shunt divides exactly) becomes the drive current of a
# conductance-based adaptive integrate-and-fire soma in a high-conductance state
# (:mod:`ctmhsa.neurons.conductance`): I_drive = I_rh + I_gain*rho*P + I_quad*(rho*P)**2. The mapping
# layer sets I_rh (the current at which the soma fires its baseline r_base), I_gain (A per Hz: the
# inverse slope of the soma's measured f-I curve above the baseline) and I_quad (A per Hz^2: the
# curve's convexity; and for a spline law I_cub and knot terms), so the rate is r_base + rho*P on the
# calibrated law (see docs/lif.md and ctmhsa.mapping.baseline). Relays stay Poisson and the
# interneurons keep their escape-level integral feedback.

SOMA_EQUATIONS = """
dv/dt = (s_gL*(s_EL - v) + g_e*(s_Ee - v) + g_i*(s_Ei - v) + I_drive - w_ad)/s_C : volt (unless refractory)
dw_ad/dt = (s_a*(v - s_EL) - w_ad)/s_tw : amp
g_e : siemens
g_i : siemens
"""
"""The conductance-based adaptive soma (:mod:`ctmhsa.neurons.conductance`, constants ``s_*`` from
:class:`ctmhsa.neurons.params.SomaParams`); ``I_drive`` (A) is defined by the model that uses it."""
SOMA_BACKGROUND = ("g_e = s_ge0 + (g_e - s_ge0)*exp(-dt/s_te) + s_se*sqrt(1 - exp(-2*dt/s_te))*(rand() - 0.5)*sqrt(12)\n"
              "g_i = s_gi0 + (g_i - s_gi0)*exp(-dt/s_ti) + s_si*sqrt(1 - exp(-2*dt/s_ti))*(rand() - 0.5)*sqrt(12)")
"""Exact one-step update of the point-conductance background (an Ornstein-Uhlenbeck process), run
after every state update. Its increments are uniform, ``(rand() - 1/2) sqrt(12)``, with the
variance of a standard normal: the process keeps the OU's mean, variance and autocorrelation
exactly (an AR(1) with any i.i.d. increments of that variance), and its marginal is near Gaussian
(excess kurtosis -0.2 for g_e at 0.5 ms, the sum of a few increments). Two Box-Muller normals
per cell and step were 42 % of a lif barrel head's run: 9.7 against 5.6 s per biological second
on the standalone device (docs/lif.md, "The step"); the soma is calibrated with this background."""
SOMA_THRESHOLD, SOMA_RESET, SOMA_REFRACTORY = "v > s_Vth", "v = s_Vr; w_ad += s_b", "s_tref"


_LIF_SOMA = f"""
dP_c/dt = (P - P_c)/(s_tc*clip(s_tc0 + (1 - s_tc0)*t/(250*ms), s_tc0, 1)) : 1
{DRAW_KEY} : 1 (shared)
r = r_base + rho*P : Hz
I_rh : amp (constant)
I_gain : amp/Hz (shared, constant)
I_quad : amp/Hz**2 (shared, constant)
r_base : Hz (shared, constant)
"""


def _drive(knots=()) -> tuple[str, tuple]:
    """The soma's drive current in x = rho P_c (:func:`ctmhsa.neurons.conductance.law_current`):
    ``I_rh + I_gain x + I_quad x²`` (affine and quadratic laws), plus ``I_cub x³`` and
    ``I_k<n> (x - knots[n])₊³`` for a spline law (knots in Hz above the baseline). Returns the
    equation lines and the names of the spline's parameters."""
    x = "rho*P_c"
    if not knots:
        return f"\nI_drive = I_rh + (I_gain + I_quad*{x})*{x} : amp", ()
    names = tuple(f"I_k{n}" for n in range(1, len(knots) + 1))
    terms = "".join(f" + {c}*clip({x} - {k!r}*Hz, 0*Hz, inf*Hz)**3" for c, k in zip(names, knots))
    decl = "".join(f"\n{c} : amp/Hz**3 (shared, constant)" for c in ("I_cub",) + names)
    return f"\nI_drive = I_rh + (I_gain + (I_quad + I_cub*{x})*{x})*{x}{terms} : amp{decl}", ("I_cub",) + names


def _soma_constants(code: str, prefix: str) -> str:
    """``code`` with the default soma's constants (``s_...``) renamed to another soma type's."""
    return code if prefix == "s_" else re.sub(r"\bs_(\w+)", prefix + r"\1", code)


def _lif(rate_model: CellModel, apical_bias: bool = False, cell_type: str = "default") -> CellModel:
    """The lif version of ``rate_model``: its rate law drives the soma type of ``cell_type``
    (:func:`ctmhsa.neurons.params.lif_soma`)."""
    soma = lif_soma(cell_type)
    rename = partial(_soma_constants, prefix=soma.prefix)
    lines = rate_model.equations.strip().splitlines()
    rate = next(line.strip() for line in lines if line.strip().startswith("r = rho*"))
    P = rate[len("r = rho*"):].rsplit(":", 1)[0].strip()
    eqs = "\n".join(line for line in lines if not line.strip().startswith("r ="))
    drive, spline = _drive(soma.knots)
    params = ("I_rh", "I_gain", "I_quad", "r_base") + spline
    folds = rate_model.folds
    if apical_bias:   # cancels the baselines of the L2/3 cells feeding the attention dendrite
        eqs = eqs.replace("dV_a/dt = (I_a - V_a)/tau_d", "dV_a/dt = (b_a + I_a - V_a)/tau_d") + "\nb_a : volt"
        params += ("b_a",)
        folds = tuple(replace(f, parameters=f.parameters + ("b_a",)) if "V_a" in f.variables else f for f in folds)
    regular = "\n".join(x for x in (rate_model.regular, rename(SOMA_BACKGROUND)) if x)
    return replace(rate_model, equations=eqs + f"\nP = {P} : 1" + rename(SOMA_EQUATIONS + _LIF_SOMA + drive),
                   method=SIMD_METHOD, regular=regular, parameters=rate_model.parameters + params,
                   threshold=rename(SOMA_THRESHOLD), reset=rename(SOMA_RESET),
                   refractory=rename(SOMA_REFRACTORY), folds=folds,
                   init={**rate_model.init, "v": soma.params.E_L, "g_e": soma.params.g_e0,
                         "g_i": soma.params.g_i0},
                   observables=rate_model.observables + ("P",))


@dataclass(frozen=True)
class FollowerModel(CellModel):
    """A feedforward inhibitory follower (:mod:`ctmhsa.circuits.dale`): an integrate-and-fire
    cell whose one-to-one drive synapse is suprathreshold, so that it fires once for every spike
    of its cell, at the next step (``pending`` counts the spikes not yet fired; Brian2 resets
    after propagating, so a spike arriving while the follower fires is kept). It has no
    intensity of its own: the phi correction downstream takes the variance of both halves of a
    split projection from the excitatory half (:func:`synapse_model`). No random number: a
    follower adds no noise."""

    follower: bool = True

    def render(self, phi, projections_by_compartment, law="product"):
        return CellModel.render(self, phi, {}, law)


_FOLLOWER = FollowerModel(equations="pending : 1", threshold="pending > 0.5", reset="pending -= 1",
                          observables=(), init={"pending": 0.0})
MODELS[("escape", "ffi")] = _FOLLOWER
MODELS[("lif", "ffi")] = _FOLLOWER
MODELS[("lif", "relay")] = MODELS[("escape", "relay")]
TAU_LOOP_LAG = 50e-3
"""The lag (s) the lif interneurons' loop adds to ``tau_int`` (:data:`TAU_LOOP_LIF`)."""
TAU_LOOP_LIF = f"(tau_inh + {TAU_LOOP_LAG * 1e3:g}*ms)"
"""Time constant of the interneurons' integral loop at the lif level: ``tau_inh`` (their ``tau_int``;
twice that with the apical division stage, :mod:`ctmhsa.mapping.operating`) plus 50 ms,
the dendro-somatic coupling ``tau_c`` of every lif soma until version 0.11 (version 0.12 gives
the default soma 200 ms, as L2/3 has; the loop keeps 60 ms).
Until version 0.10 the lif L2/3 somata answered a change of their shunt through that 50 ms
low-pass, and an integral loop
faster than the lag it closes around rings: with 10 ms against 50 ms (phase margin ~25 degrees)
the loop's r swung between 0 and 10/dt, the interneurons fired 61 Hz (bursts of 20-40 ms), and
macrocolumns whose L2/3 somata were pushed by the swings into the bends of their f-I curve
settled 4-6 % off their set point, Z up to 7.5 % off (default problem, 10 s, seeds 1-2). With
tau_int + tau_c = 60 ms: 27 Hz, pooled rates within 3.3 %, Z within 3.5-6.3 %; 100 ms changed
nothing further (docs/lif.md, "The interneurons' loop"). The L2/3 soma type of version 0.11
couples over 200 ms; the loop deliberately keeps 60 ms: the
strongly adapting soma's steep answer to fast changes is a phase lead, and the loop does not
ring (interneuron Fano factor 0.03-0.12; docs/lif.md, "Physiological L2/3 rates")."""


def loop_lag(level: str) -> float:
    """The lag (s) a level's interneurons add to their loop's time constant ``tau_int``:
    :data:`TAU_LOOP_LAG` at the lif level, 0 at the others."""
    return TAU_LOOP_LAG if get_level(level).lif else 0.0


MODELS[("lif", "interneuron")] = replace(
    MODELS[("escape", "interneuron")],
    equations=MODELS[("escape", "interneuron")].equations.replace("/tau_inh", "/" + TAU_LOOP_LIF))
MODELS[("lif", "l5pt")] = _lif(MODELS[("rate", "l5pt")], cell_type="l5pt")
for _ct in ("relay_out", "memory"):
    MODELS[("lif", _ct)] = _lif(MODELS[("rate", _ct)])
# the transformer blocks' cortical cells too: the MLP's hidden units (L6 CT, their relu the law's
# rectification: below it the soma fires its baseline) and the read-out's class cells
for _ct in ("l6ct", "decoder"):
    MODELS[("lif", _ct)] = _lif(MODELS[("rate", _ct)], cell_type=_ct)
# thalamic relays are escape-noise cells at the lif level, the normalised ones as the others
MODELS[("lif", "relay_norm")] = MODELS[("escape", "relay_norm")]


@dataclass(frozen=True)
class _Unrectified(CellModel):
    """A lif cell whose potentials ``unrectified`` (``"V_a"``, ``"U"``) enter its coupling
    unrectified: their mean is never negative, but their spike noise reaches below 0, and
    rectified before the coupling's low-pass its positive excursions would add to the mean.

    - L5 IT's attention dendrite (``V_a``) fluctuates (L2/3 spikes, the baselines' included)
      around a_i κ_ij >= 0 (measured rectified: L5 IT gain +27 %); unrectified, ON minus OFF is
      exactly U V_a.
    - The linear circuit's normaliser memory (``U``, cell type ``memory_z``) holds z_f / m, its
      write cells' rates less their baselines, through a 10 ms filter of a few cells' spikes:
      rectified, it read 6-17 % high on small weights (``docs/operating_range.md``, "Silent
      wrong answers at the spiking levels"). The value memory's on/off pairs stay rectified:
      their values lie near 0, where the pair's difference cancels the rectification's bias and
      an unrectified cell would be driven below its baseline, beyond its soma's law."""

    unrectified: tuple = ()

    def render(self, phi, projections_by_compartment, law="product"):
        eqs = CellModel.render(self, phi, projections_by_compartment, law)
        lines = []
        for line in eqs.splitlines():
            if line.startswith("P = "):
                for var in self.unrectified:
                    line = line.replace(f"clip({var}/u, 0, inf)", f"({var}/u)")
            lines.append(line)
        return "\n".join(lines)


def _unrectified(model: CellModel, *names: str) -> _Unrectified:
    """``model`` (a lif cell) with the potentials ``names`` unrectified in its coupling."""
    return _Unrectified(**{k: getattr(model, k) for k in model.__dataclass_fields__}, unrectified=names)


MODELS[("lif", "l5it")] = _unrectified(_lif(MODELS[("rate", "l5it")], apical_bias=True, cell_type="l5it"), "V_a")
MODELS[("lif", "memory_z")] = _unrectified(_lif(MODELS[("rate", "memory_z")]), "U")
# the dendrites integrate spikes as at the escape level: phi corrected for their variance alike
MODELS[("lif", "l23")] = _lif(_corrected(MODELS[("rate", "l23")], ("basal", "apical")), cell_type="l23")
# the read-out cells' apical memory entry integrates memory cells, whose baselines b_a cancels
MODELS[("lif", "kv_read")] = _lif(_corrected(MODELS[("rate", "kv_read")], ("basal",)), apical_bias=True,
                                  cell_type="kv_read")
MODELS[("lif", "kv_write")] = _lif(_covariance_corrected(_corrected(MODELS[("rate", "kv_write")], ("apical",))))
