"""One physiological parameter set shared by every fidelity level.

Values are in SI floats (seconds, volts, hertz) so that they can be hashed, printed and saved
as plain data; :func:`with_units` returns Brian2 quantities for a namespace.

Sources for the time constants:

- somatic membrane time constant of rodent L2/3 and L5 pyramidal cells, 10–20 ms
  (e.g. Larkum et al. 2004; Hay et al. 2011): ``tau_m = 10 ms``;
- apical-tuft / dendritic integration time constant, 10–30 ms (Larkum 2004): ``tau_d = 10 ms``;
- fast excitatory synaptic currents (AMPA), 2–5 ms: ``tau_syn = 5 ms`` (spiking levels);
- interneuron integration of the pooled L2/3 drive, ~10 ms: ``tau_int = 10 ms``.

``u`` is the dendritic potential that encodes one unit of the attention quantities
(q, k, v, ...): 1 mV per unit keeps potentials within a few mV of rest for unit-variance
projections.

Integrate-and-fire somata (``lif`` level): threshold 20 mV above rest, reset to 10 mV,
2 ms absolute refractoriness, and an Ornstein–Uhlenbeck background of 4 mV standard deviation
standing for the balanced synaptic bombardment of cortical neurons in vivo (Destexhe et al.
2003: 2–6 mV membrane-potential fluctuations). The somatic drive is ``v_drive`` = 10 mV per unit
of encoded product, so products of 1–4 span the sub- to supra-threshold range.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, fields, replace

import numpy as np

__all__ = ["CellParams", "DEFAULT_PARAMS", "with_units", "k_syn", "seconds"]


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
        Integration time constant of the divisive interneurons (s).
    tau_syn : float
        Synaptic current time constant at the spiking levels (s).
    u : float
        Dendritic potential per encoded unit (V).
    v_th, v_reset : float
        LIF threshold and reset, relative to rest (V).
    tau_ref : float
        LIF absolute refractory period (s).
    sigma_bg : float
        Standard deviation of the LIF's OU background (V).
    v_drive : float
        LIF somatic drive per unit of encoded product (V).
    """

    tau_m: float = 10e-3
    tau_d: float = 10e-3
    tau_int: float = 10e-3
    tau_syn: float = 5e-3
    u: float = 1e-3
    v_th: float = 20e-3
    v_reset: float = 10e-3
    tau_ref: float = 2e-3
    sigma_bg: float = 4e-3
    v_drive: float = 10e-3

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

_UNITS = {"tau_m": "second", "tau_d": "second", "tau_int": "second", "tau_syn": "second", "u": "volt",
          "v_th": "volt", "v_reset": "volt", "tau_ref": "second", "sigma_bg": "volt", "v_drive": "volt"}


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
    if dt is not None:
        ns["k_syn"] = k_syn(params, dt) * brian2.Hz
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
