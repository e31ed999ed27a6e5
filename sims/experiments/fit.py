"""Pure-numpy helpers of the in-silico experiments that their figures share: kept apart from
:mod:`ctmhsa.sims.experiments.protocol` (which builds circuits) so that a figure reads an
experiment's document without loading the simulator."""

from __future__ import annotations

import numpy as np

__all__ = ["fit_line"]


def fit_line(x, y) -> tuple[float, float]:
    """Least-squares ``(slope, intercept)`` of ``y`` on ``x`` (NaN with fewer than 2 points)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 2 or np.ptp(x[ok]) == 0:
        return float("nan"), float("nan")
    slope, icpt = np.polyfit(x[ok], y[ok], 1)
    return float(slope), float(icpt)
