"""Cutting IT -> PT (Campagnola et al. 2022): a one-way connection carries the attention output.

Campagnola et al. found L5 IT -> L5 PT connections common and PT -> IT rare (the paper's fig. 2d).
In the circuit L5 PT sums the L5 IT outputs of its macrocolumn: the context-aware value ṽ. Cutting
a fraction f of the IT -> PT synapses (:class:`ctmhsa.perturb.Cut`) should scale ṽ, and the block
output x̃ read through nucleus 2, by 1 - f, and leave L2/3 and L5 IT untouched (nothing feeds back).
"""

from __future__ import annotations

from ctmhsa.circuits.perturb import Cut

from .protocol import Run, rows_of

NAME = "it_pt"
TITLE = "Cutting the IT → PT projection"
SOURCE = "Campagnola et al. 2022, Science 375:eabj5861 (the paper's fig. 2d)"
PROTOCOL = ("Amplitude 1. A random fraction f = 0-1 of the IT -> PT synapses removed (seeded). Measured: the gain "
            "of the decoded v~ and x~ (slope on the exact values), and the L2/3, L5 IT and L5 PT rates.")
SWEEP = ("fraction", "fraction of IT → PT synapses cut")
FRACTIONS = (0.0, 0.25, 0.5, 0.75, 1.0)
CONDITION = "IT -> PT cut"


def runs(problem, opts) -> list:
    return [Run(CONDITION, f, perturbations=(Cut("it_pt", f),) if f > 0 else ()) for f in FRACTIONS]


def summarise(rows, opts) -> dict:
    rs = rows_of(rows, CONDITION)
    ctrl = rs[0]
    gains = {s: [r["gain"][s] for r in rs] for s in ("v_tilde", "x_tilde")}
    dev = {s: max(abs(g - (1 - r["value"]) * gains[s][0]) for g, r in zip(gains[s], rs)) for s in gains}
    upstream = {p: max(abs(r["rates"][p] / ctrl["rates"][p] - 1) for r in rs) for p in ("l23", "l5it")}
    summary = dict(fraction=[r["value"] for r in rs], gain=gains, deviation_from_1_minus_f=dev,
                   upstream_change=upstream, l5pt=[r["rates"]["l5pt"] for r in rs])
    pred = [f"Cutting a fraction f of IT -> PT scales the decoded v~ by 1 - f (largest deviation "
            f"{dev['v_tilde']:.3f} of the intact gain) and x~ likewise ({dev['x_tilde']:.3f}): the attention "
            "output is carried by this projection alone.",
            f"L2/3 and L5 IT rates move by at most {100 * upstream['l23']:.1f} % and "
            f"{100 * upstream['l5it']:.1f} % (exactly 0 at the rate level; at the spiking levels the cut "
            "changes which random numbers later cells draw): with a one-way IT -> PT projection, nothing "
            "upstream of PT notices the cut. A PT -> IT connection would make L5 IT depend on f."]
    return dict(summary=summary, predictions=pred)
