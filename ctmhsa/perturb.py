"""Lesions and drive for in-silico experiments: ``ctmhsa.perturb.Silence``, ``Cut``, ``Drive``
and ``PerturbationWarning`` (defined in :mod:`ctmhsa.circuits.perturb`)."""

from ctmhsa.circuits.perturb import Cut, Drive, PerturbationWarning, Silence  # noqa: F401

__all__ = ["Silence", "Cut", "Drive", "PerturbationWarning"]
