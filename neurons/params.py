"""One physiological parameter set shared by every fidelity level.

Values are in SI floats (seconds, volts, hertz) so that they can be hashed, printed and saved
as plain data; :func:`with_units` returns Brian2 quantities for a namespace.

Sources for the time constants:

- somatic membrane time constant of rodent L2/3 and L5 pyramidal cells, 10–20 ms
  (e.g. Larkum et al. 2004; Hay et al. 2011): ``tau_m = 10 ms``;
- apical-tuft / dendritic integration time constant, 10–30 ms (Larkum 2004): ``tau_d = 10 ms``;
- fast excitatory synaptic currents (AMPA), 2–5 ms: ``tau_syn = 5 ms`` (spiking levels);
- interneuron integration of the pooled L2/3 drive, ~10 ms: ``tau_int = 10 ms`` (at the lif
  level the loop integrates over ``tau_int + SomaParams.tau_c``, 60 ms:
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
from dataclasses import asdict, dataclass, fields, replace

import numpy as np

__all__ = ["CellParams", "DEFAULT_PARAMS", "HIGH_CONDUCTANCE", "SomaParams", "DEFAULT_SOMA", "with_units", "k_syn", "seconds"]


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
        adds the somata's coupling ``tau_c`` (:data:`ctmhsa.neurons.models.TAU_LOOP_LIF`).
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
    tau_c: float = 50e-3
    """Time constant of the dendro-somatic coupling that carries the dendrites' product to the
    spike generator (s): a dendritic plateau lasts tens of ms (NMDA/Ca²⁺ plateaus, Larkum et al.
    2009; Major et al. 2013). It low-passes the product, whose fast fluctuations an adapting
    soma would otherwise rectify into extra rate (measured: +40 % L5 IT gain at 5 ms)."""

    def without_adaptation(self) -> "SomaParams":
        return SomaParams(**{**asdict(self), "a": 0.0, "b": 0.0})

    def namespace(self) -> dict:
        """Brian2 quantities, named ``s_<name>`` (the cell models' soma constants)."""
        import brian2 as u

        return dict(s_C=self.C_m * u.farad, s_gL=self.g_L * u.siemens, s_EL=self.E_L * u.volt,
                    s_Vth=self.V_th * u.volt, s_Vr=self.V_r * u.volt, s_tref=self.tau_ref * u.second,
                    s_a=self.a * u.siemens, s_b=self.b * u.amp, s_tw=self.tau_w * u.second,
                    s_ge0=self.beta * self.g_e0 * u.siemens, s_gi0=self.beta * self.g_i0 * u.siemens,
                    s_se=math.sqrt(self.beta) * self.sigma_e * u.siemens,
                    s_si=math.sqrt(self.beta) * self.sigma_i * u.siemens,
                    s_te=self.tau_e * u.second, s_ti=self.tau_i * u.second,
                    s_Ee=self.E_e * u.volt, s_Ei=self.E_i * u.volt, s_tc=self.tau_c * u.second)

    def to_dict(self) -> dict:
        return asdict(self)

    def input_conductance(self) -> float:
        """Mean total membrane conductance (S): leak plus background."""
        return self.g_L + self.beta * (self.g_e0 + self.g_i0)

    def v_rest(self) -> float:
        """Resting potential in the background (V): the conductance-weighted reversal potentials."""
        return (self.g_L * self.E_L + self.beta * (self.g_e0 * self.E_e + self.g_i0 * self.E_i)) / self.input_conductance()


DEFAULT_SOMA = SomaParams()

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
    ns.update(DEFAULT_SOMA.namespace())   # the lif somata's constants (s_...)
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
