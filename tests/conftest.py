"""Shared fixtures: seeded random attention problems."""

import numpy as np
import pytest


def random_problem(seed=0, n=4, m=None, H=2, dk=3, dv=4, de=5, scale=1.0, batch=None):
    """Tokens and weights with unit-variance projections (weights scaled by 1/sqrt(de))."""
    rng = np.random.default_rng(seed)
    lead = () if batch is None else (batch,)
    X = rng.normal(size=lead + (n, de))
    Y = None if m is None else rng.normal(size=lead + (m, de))
    s = scale / np.sqrt(de)
    WQ = rng.normal(size=(H, dk, de)) * s
    WK = rng.normal(size=(H, dk, de)) * s
    WV = rng.normal(size=(H, dv, de)) * s
    WO = rng.normal(size=(H, de, dv)) / np.sqrt(dv)
    return X, Y, WQ, WK, WV, WO


@pytest.fixture
def problem():
    return random_problem


@pytest.fixture(scope="module")
def problem2():
    """A two-head problem (n = 3, dk = dv = 3, de = 4) shared by the device and dask tests."""
    X, _, WQ, WK, WV, WO = random_problem(seed=3, n=3, H=2, dk=3, dv=3, de=4)
    return X, WQ, WK, WV, WO


@pytest.fixture
def no_build(monkeypatch):
    """Any attempt to build a Brian2 network is a failure (validation must refuse first)."""
    def boom(*a, **k):
        raise AssertionError("a network was built before validation failed")
    monkeypatch.setattr("ctmhsa.sims.runners.instantiate", boom)
