"""Firing modes as registered objects.

A firing mode says how the escape level's somata turn their intensity ``r`` into spikes, and
carries the facts code asks of it (as :class:`ctmhsa.neurons.levels.Level` does for a level):
whether the spikes are Poisson draws, and whether the copies of a dimension fire in turn. Code
asks ``get_firing(firing).poisson`` instead of comparing the mode's name, so a new mode is one
:func:`register_firing`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .registry import Registry

__all__ = ["Firing", "register_firing", "get_firing", "FIRING_MODES"]


@dataclass(frozen=True)
class Firing:
    """One way for a soma to fire.

    Attributes
    ----------
    name : str
        The name options and circuits carry (``CircuitOptions.firing``, ``CellModel.firing``).
    poisson : bool
        Whether the spikes are escape-noise draws (a Bernoulli draw per step, Poisson counts of
        Fano factor 1, :data:`ctmhsa.neurons.models.ESCAPE`); False: a perfect integrate-and-fire
        soma (:func:`ctmhsa.neurons.models.integrator_model`), its count the integral of its
        intensity to within one spike.
    in_turn : bool
        Whether the phases of a dimension's copies are evenly spread, so that the copies fire in
        turn as one integrator of their summed rate (:func:`ctmhsa.neurons.models.stratify_phases`);
        False: every cell on its own phase.
    description : str
        One line for listings.
    """

    name: str
    poisson: bool
    in_turn: bool = False
    description: str = ""

    @property
    def integrator(self) -> bool:
        """Whether the soma is a perfect integrator (no random draws of its own)."""
        return not self.poisson

    def __str__(self):
        return self.name


_REGISTRY = Registry(Firing, "firing: expected one of {names}, got {name!r}")


def register_firing(firing: Firing) -> Firing:
    """Register ``firing`` under its name (replacing one of the same name) and return it."""
    return _REGISTRY.register(firing)


def get_firing(firing) -> Firing:
    """The registered :class:`Firing` named ``firing`` (or ``firing`` itself when it is one).

    Raises
    ------
    ValueError
        ``firing`` names no registered mode (the message lists them).
    """
    return _REGISTRY.lookup(firing)


FIRING_MODES = _REGISTRY.names
"""Names of the registered firing modes (:data:`ctmhsa.neurons.models.FIRING` is this view)."""

register_firing(Firing("poisson", poisson=True,
                       description="escape noise: a Bernoulli draw per step, Poisson counts"))
register_firing(Firing("regular", poisson=False,
                       description="a perfect integrate-and-fire soma per cell, independent phases"))
register_firing(Firing("population", poisson=False, in_turn=True,
                       description="perfect integrators, a dimension's copies' phases evenly spread: "
                                   "they fire in turn as one integrator of their summed rate"))
