"""Two-point-neuron laws of the L5 IT soma as registered objects.

A law carries its Brian2 expression and numpy function (the pair of
:data:`ctmhsa.neurons.laws.LAWS`) and the facts code asks of it: whether it is Algorithm 1's
product ``R C``. Code asks ``get_law(law).product`` instead of comparing the law's name, so a new
law is one :func:`register_law` (which also enters it in :data:`~ctmhsa.neurons.laws.LAWS`, the
table the cells' equations and :func:`~ctmhsa.neurons.laws.check_law` read).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .laws import LAWS, check_law
from .registry import Registry

__all__ = ["Law", "register_law", "get_law"]


@dataclass(frozen=True)
class Law:
    """One interaction law ``f(R, C)`` of the L5 IT soma (basal drive R, apical drive C).

    Attributes
    ----------
    name : str
        The name options carry (``CircuitOptions.law``).
    expression : str
        Brian2 expression in ``U``, ``V_a``, ``u`` (dimensionless, rectified at 0).
    numpy : callable
        ``f(R, C)`` on arrays, the same law.
    product : bool
        Whether the law is Algorithm 1's product ``[R]_+ [C]_+``: the default, the one the
        linear circuit computes without L5 IT cells, the one eqs. 2-5 differentiate.
    source : str
        Where the law comes from (for listings).
    """

    name: str
    expression: str
    numpy: Callable
    product: bool = False
    source: str = ""

    def __str__(self):
        return self.name


_REGISTRY = Registry(Law, "law: unknown two-point-neuron law {name!r}; expected one of {names}")


def register_law(law: Law) -> Law:
    """Register ``law`` under its name (replacing one of the same name), enter its expression
    and function in :data:`~ctmhsa.neurons.laws.LAWS`, and return it."""
    _REGISTRY.register(law)
    LAWS[law.name] = (law.expression, law.numpy)
    return law


def get_law(law) -> Law:
    """The registered :class:`Law` named ``law`` (or ``law`` itself when it is one).

    Raises
    ------
    TypeError, ValueError
        ``law`` is not a name, or names no law (:func:`~ctmhsa.neurons.laws.check_law`'s messages).
    """
    return _REGISTRY.lookup(law if isinstance(law, Law) else check_law(law))


register_law(Law("product", *LAWS["product"], product=True, source="Algorithm 1 (Granier & Senn)"))
for _name, _source in (("co4", "Adeel eq. 1, 'Cooperation'"), ("tm1", "Adeel eq. 2"), ("tm2", "Adeel eq. 3"),
                       ("tm3", "Adeel eq. 4"), ("tm4", "Adeel eq. 5")):
    register_law(Law(_name, *LAWS[_name], source=_source))
