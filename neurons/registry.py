"""A registry of named objects of one kind (firing modes, L5 IT laws): code asks a registered
object for its facts instead of comparing its name, so a new one is one registration."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["Registry", "RegistryNames"]


class Registry(dict):
    """Name -> object of class ``kind`` (which has a ``name``), in order of registration.

    Parameters
    ----------
    kind : type
        The class of the registered objects.
    unknown : str
        Message of the ``ValueError`` for an unknown name, formatted with ``name`` (the value
        asked for) and ``names`` (the registered names, a list).
    """

    def __init__(self, kind: type, unknown: str):
        super().__init__()
        self.kind, self.unknown = kind, unknown
        self.names = RegistryNames(self)

    def register(self, obj):
        """Register ``obj`` under its name (replacing one of the same name) and return it."""
        if not isinstance(obj, self.kind):
            raise TypeError(f"expected a {self.kind.__module__}.{self.kind.__name__}, got {type(obj).__name__}")
        self[obj.name] = obj
        return obj

    def lookup(self, name):
        """The object registered as ``name`` (or ``name`` itself when it is one); ``ValueError``
        (:attr:`unknown`) for any other value."""
        if isinstance(name, self.kind):
            return name
        try:
            return self[name]
        except (KeyError, TypeError):   # TypeError: an unhashable value
            raise ValueError(self.unknown.format(name=name, names=list(self))) from None


class RegistryNames(Sequence):
    """The names of a registry (a dict name -> object) in order of registration: a live,
    read-only view that compares equal to a tuple of the same names."""

    def __init__(self, registry: dict):
        self._registry = registry

    def __getitem__(self, i):
        return tuple(self._registry)[i]

    def __len__(self):
        return len(self._registry)

    def __contains__(self, name):
        return isinstance(name, str) and name in self._registry

    def __eq__(self, other):
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    __hash__ = None

    def __repr__(self):
        return repr(tuple(self))
