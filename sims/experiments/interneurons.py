"""Interneuron silencing: without the interneurons, L2/3 is no longer divisively normalised.

Divisive normalisation (Carandini & Heeger 2012) in superficial cortex (the paper's fig. 2c;
Wilson et al. 2012: activating PV interneurons divides responses) is what makes L2/3 compute the
*normalised* salience. Here the stimulus amplitude is swept with the interneurons intact and
silenced (:class:`ctmhsa.perturb.Silence`). Intact, the pooled L2/3 rate of every macrocolumn is
held at its set point whatever the drive (it is divided by the drive); silenced, it follows the
drive, and the circuit's output is no longer attention.
"""

from __future__ import annotations

from ctmhsa.circuits.perturb import Silence

from .protocol import Run, rows_of

NAME = "interneurons"
TITLE = "Interneuron silencing and the loss of normalisation"
SOURCE = "Wilson et al. 2012, Nature 488:343; Carandini & Heeger 2012 (the paper's fig. 2c)"
PROTOCOL = ("Stimulus amplitudes 0.25-1 (tokens x a), interneurons intact or silenced (whole run). Measured: "
            "the pooled L2/3 rate per macrocolumn over its set point, L5 IT / PT rates, and how far x~ is from "
            "attention (NRMSE).")
SWEEP = ("amplitude", "stimulus amplitude (tokens × a)")
AMPLITUDES = (0.25, 0.5, 0.75, 1.0)
CONDITIONS = ("control", "interneurons silenced")


def runs(problem, opts) -> list:
    perts = {"control": (), CONDITIONS[1]: (Silence("interneuron"),)}
    return [Run(c, a, amplitude=a, perturbations=perts[c]) for c in CONDITIONS for a in AMPLITUDES]


def summarise(rows, opts) -> dict:
    summary = {}
    for c in CONDITIONS:
        rs = rows_of(rows, c)
        pooled = [r["pooled_l23"] / r["set_point"] for r in rs]
        summary[c] = dict(pooled_over_set_point=pooled, span=pooled[-1] / pooled[0] if pooled[0] else float("nan"),
                          l5it=[r["rates"]["l5it"] for r in rs], l5pt=[r["rates"]["l5pt"] for r in rs],
                          x_tilde_nrmse=[r["nrmse"]["x_tilde"] for r in rs])
    c, s = summary["control"], summary[CONDITIONS[1]]
    division = [b / a if a else float("nan") for a, b in zip(c["pooled_over_set_point"], s["pooled_over_set_point"])]
    summary["division"] = division
    pred = [f"Intact, the pooled L2/3 rate of a macrocolumn stays at {min(c['pooled_over_set_point']):.2f}-"
            f"{max(c['pooled_over_set_point']):.2f} of its set point over a {AMPLITUDES[-1] / AMPLITUDES[0]:g}x "
            "range of stimulus amplitude: it is divided by the drive. Silenced, it follows the drive "
            f"(sum of phi(q) phi(k)): {min(s['pooled_over_set_point']):.1f}-{max(s['pooled_over_set_point']):.1f}x "
            f"the set point. The ratio, {min(division):.1f}-{max(division):.1f}, is the division the interneurons "
            "exerted: silencing them should raise L2/3 rates by that factor.",
            f"Silencing the interneurons raises L5 IT from {c['l5it'][-1]:.1f} to {s['l5it'][-1]:.1f} Hz and L5 PT "
            f"from {c['l5pt'][-1]:.1f} to {s['l5pt'][-1]:.1f} Hz at full amplitude, and the output is no longer "
            f"attention: x~ NRMSE {c['x_tilde_nrmse'][-1]:.2f} intact, {s['x_tilde_nrmse'][-1]:.1f} silenced."]
    return dict(summary=summary, predictions=pred)
