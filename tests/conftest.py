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
