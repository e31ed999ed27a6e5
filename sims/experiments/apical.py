"""An apical-input sweep at the L5 IT cells (Larkum et al. 2004): apical input sets the gain.

Larkum et al. found that current into the apical dendrite of L5 pyramidal cells multiplies the
slope of their input-output curve (the paper's fig. 2a). In the circuit the L5 IT soma is the
basal (value) input times the apical (attention) input. Here extra Poisson drive
(:class:`ctmhsa.perturb.Drive`, each at the compartment's usual weight) is given to the basal
dendrites at several rates, with and without extra apical drive, and the slope of the mean L5 IT
rate on the basal drive is measured per apical level.
"""

from __future__ import annotations

from ctmhsa.circuits.perturb import Drive

from .protocol import Run, fit_line, rows_of

NAME = "apical"
TITLE = "Apical input and the gain of L5 IT cells"
SOURCE = "Larkum et al. 2004, Cerebral Cortex 14:1059 (the paper's fig. 2a)"
PROTOCOL = ("Amplitude 1. Extra basal drive 0-100 Hz per L5 IT cell (the analogue of somatic current), at extra "
            "apical drive 0, 25 and 50 Hz. Gain: slope of the mean L5 IT rate on the basal drive, per apical level.")
SWEEP = ("basal", "extra basal drive per L5 IT cell (Hz)")
BASAL = (0.0, 25.0, 50.0, 75.0, 100.0)
APICAL = (0.0, 25.0, 50.0)


def _label(apical: float) -> str:
    return f"apical +{apical:g} Hz"


def runs(problem, opts) -> list:
    out = []
    for a in APICAL:
        for b in BASAL:
            perts = tuple(Drive("l5it", rate=r, compartment=c) for r, c in ((b, "basal"), (a, "apical")) if r > 0)
            out.append(Run(_label(a), b, perturbations=perts))
    return out


def summarise(rows, opts) -> dict:
    slopes, icpts = [], []
    for a in APICAL:
        rs = rows_of(rows, _label(a))
        s, i = fit_line([r["value"] for r in rs], [r["rates"]["l5it"] for r in rs])
        slopes.append(s)
        icpts.append(i)
    ratio = [s / slopes[0] if slopes[0] else float("nan") for s in slopes]
    summary = dict(apical=list(APICAL), slope=slopes, intercept=icpts, slope_ratio=ratio)
    pred = [f"Apical drive multiplies the L5 IT input-output slope: {slopes[0]:.4f} Hz/Hz without extra apical "
            "input, " + ", ".join(f"{s:.4f} ({q:.2f}x) with +{a:g} Hz" for a, s, q in
                                  zip(APICAL[1:], slopes[1:], ratio[1:])) + ". A product of basal and apical "
            "inputs scales the slope; an additive apical input would shift the curve and leave the slope."]
    return dict(summary=summary, predictions=pred)
