"""Task-dependent values of a circuit: the interface between the mapping layer and the builder.

Plain numpy in SI units, no Brian2: the mapping layer (:mod:`ctmhsa.mapping.encode`) produces them
without importing the builder, and :func:`ctmhsa.circuits.instantiate.instantiate` writes them into
Brian2 variables (never compiled into code, so a new input reuses every compiled object).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CircuitValues"]


@dataclass
class CircuitValues:
    """Task-dependent values, supplied by the mapping layer (SI units, numpy).

    Attributes
    ----------
    weights : dict
        Projection name -> weight source array (indexed by the projection's ``weight_index``)
        or a scalar for ``"ones"`` projections; already in SI weight units (input unit x s).
    params : dict
        Population name -> {parameter: per-cell array or scalar}.
    init : dict
        Population name -> {state variable: initial value(s)} (optional).
    """

    weights: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    init: dict = field(default_factory=dict)
