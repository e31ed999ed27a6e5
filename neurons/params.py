"""One physiological parameter set shared by every fidelity level.

Values are in SI floats (seconds, volts, hertz) so that they can be hashed, printed and saved
as plain data; :func:`with_units` returns Brian2 quantities for a namespace.

Sources for the time constants:

- somatic membrane time constant of rodent L2/3 and L5 pyramidal cells, 10–20 ms
  (e.g. Larkum et al. 2004; Hay et al. 2011): ``tau_m = 10 ms``;
- apical-tuft / dendritic integration time constant, 10–30 ms (Larkum 2004): ``tau_d = 10 ms``;
- fast excitatory synaptic currents (AMPA), 2–5 ms: ``tau_syn = 5 ms`` (spiking levels);
- interneuron integration of the pooled L2/3 drive, ~10 ms: ``tau_int = 10 ms`` (at the lif
  level the loop integrates over ``tau_int`` + 50 ms, 60 ms:
  :data:`ctmhsa.neurons.models.TAU_LOOP_LIF`).

``u`` is the dendritic potential that encodes one unit of the attention quantities
(q, k, v, ...): 1 mV per unit keeps potentials within a few mV of rest for unit-variance
projections.

Integrate-and-fire somata (``lif`` level): :class:`SomaParams`, a conductance-based adaptive
integrate-and-fire soma (Brette & Gerstner 2005) in the high-conductance state made by a balanced
point-conductance background (Destexhe et al. 2001); see :mod:`ctmhsa.neurons.conductance`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace

import numpy as np

__all__ = ["CellParams", "DEFAULT_PARAMS", "HIGH_CONDUCTANCE", "SomaParams", "DEFAULT_SOMA", "L23_SOMA", "L5_SOMA", "LifSoma",
           "LIF_SOMATA", "lif_soma", "with_units", "k_syn", "seconds", "check_coupling", "coupling_namespace"]


@dataclass(frozen=True)
class CellParams:
    """Physiological constants (SI units; see the module docstring for sources).

    Attributes
    ----------
    tau_m : float
        Somatic membrane time constant (s).
    tau_d : float
        Dendritic (basal and apical compartment) time constant (s).
    tau_int : float
        Integration time constant of the divisive interneurons (s); at the lif level their loop
        adds 50 ms, the somata's coupling until version 0.11 (:data:`ctmhsa.neurons.models.TAU_LOOP_LIF`).
    tau_syn : float
        Synaptic current time constant at the spiking levels (s).
    u : float
        Dendritic potential per encoded unit (V).
    tau_relay : float
        Dendritic time constant of the normalising thalamic relays of transformer blocks (s,
        :mod:`ctmhsa.circuits.transformer`). Their ON and OFF cells are rectified and their TRN
        pool holds the sum of both, which counts the dendrite's fluctuations as signal: at
        10 ms a second block's normalised stream came out 13 % low (two seeds), at 40 ms 4 %,
        and the output reached its floor (docs/transformer.md). Thalamocortical cells'
        membrane time constants are 10-40 ms (in vitro, e.g. Crunelli et al. 1987).
    """

    tau_m: float = 10e-3
    tau_d: float = 10e-3
    tau_int: float = 10e-3
    tau_syn: float = 5e-3
    u: float = 1e-3
    tau_relay: float = 40e-3

    def __post_init__(self):
        for f in fields(self):
            val = getattr(self, f.name)
            if not isinstance(val, (int, float)) or not val > 0:
                raise ValueError(f"params.{f.name}: expected a positive number (SI units), got {val!r}")

    def to_dict(self) -> dict:
        return asdict(self)

    def replace(self, **changes) -> "CellParams":
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"params: unknown parameter(s) {sorted(unknown)}; known: {[f.name for f in fields(self)]}")
        return replace(self, **changes)


DEFAULT_PARAMS = CellParams()

HIGH_CONDUCTANCE = CellParams(tau_m=5e-3, tau_d=5e-3)
"""Somatic and dendritic time constants of 5 ms: cortical cells under the synaptic bombardment
of the awake state (the high-conductance state, Destexhe, Rudolph & Pare 2003, Nat Rev Neurosci
4:739: membrane time constants fall to a fifth of their value at rest). The circuit follows a
change of its tokens in half the time (90 % of a change in 55 ms, docs/timescale.md); where the
cells fire Poisson spikes, their dendrites then average fewer spikes (16 % more error at one
window)."""


@dataclass(frozen=True)
class SomaParams:
    """Parameters of the conductance-based adaptive soma (SI units: F, S, V, A, s).

    Defaults: the regular-spiking AdEx cell of Brette & Gerstner (2005, *J. Neurophysiol.*
    94:3637; C_m, g_L, E_L, V_th = V_T, V_r, a, b, τ_w) and the point-conductance background of
    Destexhe et al. (2001; g_e0, g_i0, σ_e, σ_i, τ_e, τ_i, E_e, E_i).
    """

    C_m: float = 281e-12
    g_L: float = 30e-9
    E_L: float = -70.6e-3
    V_th: float = -50.4e-3
    V_r: float = -70.6e-3
    tau_ref: float = 2e-3
    a: float = 4e-9
    b: float = 80.5e-12
    tau_w: float = 144e-3
    g_e0: float = 12e-9
    g_i0: float = 57e-9
    sigma_e: float = 3e-9
    sigma_i: float = 6.6e-9
    tau_e: float = 2.7e-3
    tau_i: float = 10.5e-3
    E_e: float = 0.0
    E_i: float = -75e-3
    beta: float = 1.0
    """Balanced-background scale: both conductance means × β, both variances × β."""
    tau_c: float = 0.2
    """Time constant of the dendro-somatic coupling that carries the dendrites' product to the
    spike generator (s): dendritic plateaus last tens to hundreds of ms (NMDA/Ca²⁺ plateaus,
    Larkum et al. 2009; Major et al. 2013). It low-passes the product, whose fluctuations an
    adapting soma would otherwise turn into rate off its law (measured: +40 % L5 IT gain at 5 ms;
    at 50 ms, until version 0.11, L5 PT and nucleus-2 cells fired 8-9 % below their law above
    120 Hz and 4-6 % above it at 20-40 Hz; 200 ms since version 0.12, docs/lif.md). The soma's
    calibration drives its current directly and does not depend on it."""
    tau_c_start: float = 0.1
    """The coupling's time constant at t = 0 as a fraction of ``tau_c``, rising linearly to
    ``tau_c`` over the run's first 250 ms, so that the chain L2/3 → L5 IT → L5 PT → nucleus 2
    settles within the 0.5 s warm-up (four 200 ms couplings in series do not: x̃ at slope 0.76 in
    a 1 s window). 1 keeps the coupling fixed (the L2/3 type: its interneurons' loop, tuned
    around the fixed coupling, settled a barrel head's Z 30 % worse with the ramp)."""

    def without_adaptation(self) -> "SomaParams":
        return SomaParams(**{**asdict(self), "a": 0.0, "b": 0.0})

    def namespace(self, prefix: str = "s_") -> dict:
        """Brian2 quantities, named ``<prefix><name>`` (the cell models' soma constants: ``s_C``,
        ``s_b``, ... for the default prefix)."""
        import brian2 as u

        ns = dict(C=self.C_m * u.farad, gL=self.g_L * u.siemens, EL=self.E_L * u.volt,
                  Vth=self.V_th * u.volt, Vr=self.V_r * u.volt, tref=self.tau_ref * u.second,
                  a=self.a * u.siemens, b=self.b * u.amp, tw=self.tau_w * u.second,
                  ge0=self.beta * self.g_e0 * u.siemens, gi0=self.beta * self.g_i0 * u.siemens,
                  se=math.sqrt(self.beta) * self.sigma_e * u.siemens,
                  si=math.sqrt(self.beta) * self.sigma_i * u.siemens,
                  te=self.tau_e * u.second, ti=self.tau_i * u.second,
                  Ee=self.E_e * u.volt, Ei=self.E_i * u.volt, tc=self.tau_c * u.second,
                  tc0=self.tau_c_start)
        return {prefix + k: v for k, v in ns.items()}

    def adaptation_per_hz(self) -> float:
        """Mean adaptation current per Hz of sustained rate, ``b tau_w`` (A/Hz): the negative
        feedback that linearises the f–I curve (Ermentrout 1998)."""
        return self.b * self.tau_w

    def to_dict(self) -> dict:
        return asdict(self)

    def input_conductance(self) -> float:
        """Mean total membrane conductance (S): leak plus background."""
        return self.g_L + self.beta * (self.g_e0 + self.g_i0)

    def v_rest(self) -> float:
        """Resting potential in the background (V): the conductance-weighted reversal potentials."""
        return (self.g_L * self.E_L + self.beta * (self.g_e0 * self.E_e + self.g_i0 * self.E_i)) / self.input_conductance()


DEFAULT_SOMA = SomaParams()

L23_SOMA = SomaParams(b=805e-12, tau_c_start=1.0)
"""The lif level's L2/3 soma: the default cell with ten times its spike-triggered adaptation
(b = 0.8 nA, tau_w = 144 ms: b tau_w = 116 pA/Hz) and a 200 ms dendro-somatic coupling.

- **Adaptation.** Its negative feedback makes the f–I curve nearly affine down to ~1 Hz
  (Ermentrout 1998), where the default cell bends below 6.8 Hz: over 1-10 Hz the largest
  residual of an affine fit is 0.17 Hz (2 % of the span), against 0.45 Hz (5 %) with b tau_w = 46 pA/Hz (dt =
  0.5 ms, 40 s windows). L2/3 then fires a 1 Hz baseline plus a few Hz of signal. Regular-spiking
  L2/3 pyramidal cells adapt strongly, but 0.8 nA per spike is more than a single spike adds to a
  measured afterhyperpolarisation current: a modelling choice, stated as such (docs/lif.md,
  "Physiological L2/3 rates").
- **Coupling.** Strong adaptation makes the soma answer fast changes of its drive ~25 times more
  steeply than slow ones, so it rectifies the fluctuations of its drive (the relays' counting
  noise reaching the dendrites) into extra rate: with the default 50 ms coupling L2/3 fired 8 %
  above its law (27 % with b = 0.32 nA, tau_w = 0.5 s), which biased Z. 200 ms left 0.6 %
  (300 ms: 0.2 %; default problem, 5 s). Dendritic NMDA plateau potentials last 50-500 ms
  (Major, Larkum & Schiller 2013, Annu. Rev. Neurosci. 36:1)."""


@dataclass(frozen=True)
class LifSoma:
    """A lif soma type: its parameters, the baseline it fires at zero signal and how its affine
    law is calibrated and checked (:func:`ctmhsa.neurons.conductance.soma_calibration`,
    :func:`ctmhsa.neurons.conductance.affine_range`).

    Attributes
    ----------
    params : SomaParams
    r_base : float
        Baseline rate (Hz): the cell fires ``r_base + rho P``.
    span : float
        Width of the rate range above ``r_base`` that the affine law is fitted over (Hz).
    tol : float
        Departure from the affine law (Hz) that ends the working range.
    prefix : str
        Prefix of its constants in the Brian2 namespace (``s_`` for the default soma).
    n_currents : int
        Number of drive currents its calibration measures (from 0 to past ``r_base + span``).
    window : float
        Calibration window per current (s).
    reach : float, optional
        Rate (Hz) the calibration's currents reach (``r_base + span`` when None): the working
        range is found on the measured curve, so it ends there at the latest.
    law : str
        ``"affine"`` (fitted over ``[r_base, r_base + span]``), ``"quadratic"`` (a convex
        curve, fitted over ``[r_base, reach]``) or ``"spline"`` (a cubic spline over
        ``[r_base, reach]``, its working range measured densely;
        :func:`ctmhsa.neurons.conductance.soma_calibration`).
    knots : tuple of float
        The spline's knots (Hz above ``r_base``); empty for the other laws.
    """

    params: SomaParams
    r_base: float
    span: float
    tol: float
    prefix: str
    n_currents: int = 32
    window: float = 10.0
    reach: float | None = None
    law: str = "affine"
    knots: tuple = ()


SIMD_METHOD = "exponential_euler_simd"
"""The lif somata's state-update method: Brian2's exponential Euler, vectorisable on
``cpp_standalone`` (registered by :mod:`ctmhsa.neurons.simd`, which every module that builds
groups imports)."""

DRAW_KEY = "draw_key"
"""The lif somata's shared key of a step's background draws on ``cpp_standalone``
(:class:`ctmhsa.neurons.simd.CounterDraws`; unused elsewhere)."""


_L23_TYPE = LifSoma(L23_SOMA, r_base=1.0, span=60.0, tol=0.5, prefix="s23_", n_currents=160, window=40.0,
                    law="spline", knots=(1.0, 3.0))
_DEFAULT_TYPE = LifSoma(DEFAULT_SOMA, r_base=20.0, span=100.0, tol=3.0, prefix="s_", window=20.0, reach=150.0,
                        law="spline", knots=(5.0, 20.0))
LIF_SOMATA = {"default": _DEFAULT_TYPE, "l23": _L23_TYPE,
              "kv_read": replace(_DEFAULT_TYPE, params=replace(DEFAULT_SOMA, tau_c=50e-3, tau_c_start=1.0),
                                 prefix="srd_"),
              "kv_memory": replace(_DEFAULT_TYPE, params=replace(DEFAULT_SOMA, tau_c=10e-3, tau_c_start=1.0),
                                   prefix="smem_")}
"""The lif level's soma types by cell type (others use ``"default"``). L2/3 cells fire a 1 Hz
baseline and a few Hz of signal per cell: their calibration measures 160 currents for 40 s
each (0.4 Hz apart), the working range again with 16 cells per current, and fits a cubic spline
law over 1-61 Hz (knots 1 and 3 Hz above the baseline: the curve is concave over 1-4 Hz, convex
above; a quadratic missed it by -0.12 Hz at the baseline, version 0.12); their
working range ends where the curve leaves the law by 0.5 Hz (0-67 Hz at 0.5 ms). L5 IT and PT
have their own type since version 0.15 (:data:`L5_SOMA`, below: a 1 Hz baseline). The other
somata fire a 20 Hz baseline on a cubic spline law since version 0.15 (knots 5 and 20 Hz above
the baseline, fitted over 20-150 Hz with the first 20 Hz measured again by 16 cells per current,
20 s windows; within 0.22 Hz of the dense curve, 3 Hz of the whole: 0-187 Hz at 0.5 ms,
14-184 Hz at 0.1 ms). Their affine law until 0.14 was 9 % too steep over the first 10 Hz above
the baseline, where the memory circuit's cells carry their signal (docs/lif.md, "The default
soma's law near its baseline"). In the circuit, with the 200 ms coupling of version 0.12, L5 PT
(then of this type) and nucleus-2 cells at 120-150 Hz fired within 2.5 % of their law (8-9 % below
it with 50 ms). The linear circuit's read-out cells (``kv_read``) keep the default cell with its former fixed
50 ms coupling: their means are 15-55 Hz and single cells reach 125 Hz, past the L2/3 type's
range, and their interneurons' loop (60 ms) did not settle around a 200 ms coupling (Z at 2.6-3.1
of its floor instead of 0.95-1.44, n = d = 6, H = 2, input seeds 23, 24, 5 s). The calibration is
the default soma's (the coupling is not part of it). The stream memory's integrators
(``kv_memory``) keep the default cell with a 10 ms coupling: their drive, the persistent state
``U``, holds still between writes, so there are no dendritic fluctuations to average, and a
200 ms coupling would only delay the memory's output after each write."""
# the read-out's class cells follow each presentation (a few hundred ms): the memory cells' fast
# coupling (docs/lif.md, "Models at the lif level")
LIF_SOMATA["decoder"] = LIF_SOMATA["kv_memory"]

L5_SOMA = replace(DEFAULT_SOMA, b=322e-12)
"""The lif level's L5 IT and PT soma: the default cell with four times its spike-triggered
adaptation (b = 0.32 nA, tau_w = 144 ms: b tau_w = 46 pA/Hz against 11.6) and its 200 ms
dendro-somatic coupling (with the fast start of a chain: IT drives PT).

- **Why.** On the default soma's 20 Hz baseline L5 IT fired 27 Hz and L5 PT 47 Hz where L5 cells
  fire below ~20 Hz in vivo (de Kock & Sakmann 2009), and the baseline's counting noise was most
  of theirs. The adaptation's negative feedback straightens the f–I curve's foot (Ermentrout
  1998), so the type fires a 1 Hz baseline on a spline law that stays within 1 Hz of its curve
  over 0-165 Hz (0.5 ms). L5 IT fires 7.9 Hz and L5 PT 19 Hz on the default problem
  (docs/lif.md, "Physiological L5 rates").
- **Why not more.** The L2/3 type's 0.8 nA gives the same rates and errors but fires more
  regularly (ISI CV 0.50 against 0.59 for IT, 0.53 against 0.63 for PT); the default cell's
  80.5 pA on a 2 Hz baseline fires irregularly (CV 0.79-0.85) but its noisier spikes raised the
  errors of ṽ and x̃ and put L5 PT at 21-22 Hz. Thick-tufted PT cells adapt less than IT cells
  in slices; one type for both is a modelling choice, stated as such."""
LIF_SOMATA["l5it"] = LIF_SOMATA["l5pt"] = LifSoma(L5_SOMA, r_base=1.0, span=149.0, tol=1.0, prefix="s5_",
                                                  n_currents=128, window=40.0, law="spline",
                                                  knots=(1.0, 3.0, 20.0))
# the MLP's hidden cells (L6 CT): the L5 cell and its calibration (the coupling is not part of
# it) on its 1 Hz baseline, with a coupling fast enough to follow each presentation
LIF_SOMATA["l6ct"] = replace(LIF_SOMATA["l5it"], params=replace(L5_SOMA, tau_c=50e-3, tau_c_start=1.0),
                             prefix="s6_")


def lif_soma(cell_type: str) -> LifSoma:
    """The lif soma type of ``cell_type`` (:data:`LIF_SOMATA`)."""
    return LIF_SOMATA.get(cell_type, LIF_SOMATA["default"])


def check_coupling(coupling) -> dict:
    """``coupling`` (lif soma cell type -> its dendro-somatic coupling ``tau_c``, s) checked:
    a mapping of cell types of :data:`LIF_SOMATA` to seconds in ``(0, 10]``, every cell type that
    shares a soma type (its constants' prefix, e.g. ``"l5it"`` and ``"l5pt"``) given the same
    coupling. A ``ValueError``/``TypeError`` naming ``coupling`` otherwise. The coupling is not
    part of a soma's calibration (:func:`ctmhsa.neurons.conductance.calibration_params`): the
    same law holds."""
    if not isinstance(coupling, Mapping):
        raise TypeError(f"coupling: expected a mapping cell type -> seconds (e.g. {{'l5it': 0.05, 'l5pt': 0.05}}), "
                        f"got {type(coupling).__name__}")
    out = {}
    for ct, tau in coupling.items():
        if ct not in LIF_SOMATA or ct == "default":
            raise ValueError(f"coupling: {ct!r} is not a lif soma cell type; expected some of "
                             f"{sorted(k for k in LIF_SOMATA if k != 'default')}")
        tau = seconds("coupling", tau)
        if not 0 < tau <= 10.0:
            raise ValueError(f"coupling: the coupling of {ct!r} must be seconds in (0, 10], got {tau!r}")
        out[ct] = tau
    for ct, tau in out.items():   # one soma type, one set of constants: its cell types agree
        shared = sorted(c for c in LIF_SOMATA if LIF_SOMATA[c].prefix == LIF_SOMATA[ct].prefix)
        if "default" in shared:   # its constants are every cell type's without a soma type of its own
            raise ValueError(f"coupling: {ct!r} has the default soma type, which every lif cell type without one of "
                             f"its own shares; its coupling is not set by cell type")
        if any(out.get(c) != tau for c in shared):
            raise ValueError(f"coupling: cell types {shared} share one soma type (constants "
                             f"{LIF_SOMATA[ct].prefix}...); give them one coupling, got "
                             f"{ {c: out.get(c) for c in shared} }")
    return out


def coupling_namespace(coupling: dict | None) -> dict:
    """The namespace entries (``<prefix>tc``) that ``coupling`` (checked: :func:`check_coupling`)
    replaces in :func:`with_units`'s; none for ``None``."""
    import brian2

    return {LIF_SOMATA[ct].prefix + "tc": tau * brian2.second for ct, tau in check_coupling(coupling or {}).items()}

_UNITS = {"tau_m": "second", "tau_d": "second", "tau_int": "second", "tau_syn": "second", "u": "volt",
          "tau_relay": "second"}


def k_syn(params: CellParams, dt: float) -> float:
    """Per-spike increment factor of an exponential synaptic current (Hz):
    ``(1 - exp(-dt/tau_syn)) / dt``, which makes its mean, sampled once per step of ``dt`` (s),
    exactly ``w * rate``."""
    return (1.0 - math.exp(-dt / params.tau_syn)) / dt


def with_units(params: CellParams, dt: float | None = None) -> dict:
    """Brian2 quantities for a namespace (imports Brian2 lazily).

    With ``dt`` (s), adds ``k_syn = (1 - exp(-dt/tau_syn)) / dt``: the per-spike increment
    factor of an exponential synaptic current that makes its mean, sampled once per step,
    exactly ``w * rate`` (``1/tau_syn`` is biased by ``+dt/(2 tau_syn)``: +1 % at 0.1 ms).
    """
    import brian2

    ns = {k: getattr(params, k) * getattr(brian2, _UNITS[k]) for k in _UNITS}
    for soma in LIF_SOMATA.values():      # the lif somata's constants (s_..., s23_...)
        ns.update(soma.params.namespace(soma.prefix))
    if dt is not None:
        from .shotnoise import shot_noise_gain, soma_cross_gain

        ns["k_syn"] = k_syn(params, dt) * brian2.Hz
        # the dendrites' shot-noise gains (dimensionless), for the in-circuit phi correction
        ns["G_shot"], ns["G_cross"] = shot_noise_gain(params, dt), soma_cross_gain(params, dt)
    return ns


def seconds(name: str, value, *, allow_none: bool = False, allow_zero: bool = False) -> float | None:
    """``value`` as a finite time in seconds: a Brian2 quantity of time (``500*ms``) or a real
    number of seconds; ``ValueError``/``TypeError`` naming ``name`` otherwise."""
    if value is None and allow_none:
        return None
    expected = "a non-negative finite time" if allow_zero else "a positive finite time"
    if hasattr(value, "dim"):     # a Brian2 quantity (Brian2 is imported only if one is given)
        import brian2 as b2

        if not b2.have_same_dimensions(value, b2.second):
            raise ValueError(f"{name}: expected {expected}, got {value} (not a time)")
        if np.size(value) != 1:
            raise ValueError(f"{name}: expected one time, got {np.size(value)} values")
        value = float(np.asarray(value / b2.second).reshape(()))
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: expected a number of seconds or a Brian2 time (e.g. 500*ms), "
                        f"got {type(value).__name__}")
    value = float(value)
    if not np.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name}: expected {expected} in seconds, got {value!r}")
    return value
