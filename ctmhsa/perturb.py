"""Lesions and drive for in-silico experiments: ``ctmhsa.perturb.Silence``, ``Cut``, ``Drive``
(defined in :mod:`ctmhsa.circuits.perturb`)."""

from ctmhsa.circuits.perturb import Cut, Drive, Silence  # noqa: F401

__all__ = ["Silence", "Cut", "Drive"]
