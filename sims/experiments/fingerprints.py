"""Fingerprints against recordings: what the circuit predicts beside what is published.

One preparation, five runs: the control (every population's mean rate, its spikes per cell in a
0.2 s stimulus and its single-cell irregularity), every L2/3 cell silenced (Quiquempoix et al.
2018: L5 responses are reduced, not abolished), and extra basal drive onto the L5 IT cells with
and without extra apical drive (Larkum et al. 2004: apical input raises the slope of the L5
input-output curve). The summary is a table, one row per measure: the circuit's value, the
published value or range, its source, and whether the two agree (``None`` where the circuit has
no counterpart or does not measure it at this level).

A value agrees with a published bound within two standard errors of Poisson counting (the rate
table's tolerance: the L2/3 cells' set point is the 5 Hz bound itself). Spikes per stimulus:
every spike of a cell in a 0.2 s presentation (the digits' and streams'
presentation), its mean rate times 0.2 s, where a cell without drive is silent (the rate and
escape levels). The lif level's pyramidal somata fire a spontaneous baseline (1 Hz since version
0.15; 20 Hz for L5 until then, when the count was left undecided): their evoked spikes are those
above it, the mean rate minus the soma type's ``r_base`` times 0.2 s, as recordings count evoked
spikes above the spontaneous rate. Under one spike agrees with the recordings. The L2/3-silencing
ratio is read above the baseline too: the rates' excess over it, silenced over control.
"""

from __future__ import annotations

import math

from ctmhsa.circuits.perturb import Drive, Silence
from ctmhsa.neurons.levels import get_level
from ctmhsa.neurons.params import lif_soma
from ctmhsa.sims.physiology import counting_slack

from .protocol import Run

NAME = "fingerprints"
TITLE = "Fingerprints against recordings"
SOURCE = ("rates: Barth & Poulet 2012, de Kock & Sakmann 2009, Gentet et al. 2010; evoked spikes: de Kock et al. "
          "2007; irregularity: Softky & Koch 1993; L2/3 silencing: Quiquempoix et al. 2018; apical gain: Larkum "
          "et al. 2004")
PROTOCOL = ("Amplitude 1. Control (rates, spikes per cell in a 0.2 s stimulus, ISI CV); every L2/3 cell silenced; "
            "extra basal drive 0 and 100 Hz per L5 IT cell, with extra apical drive 0 and 50 Hz (the slope ratio).")
SWEEP = ("basal", "extra basal drive per L5 IT cell (Hz)")

STIMULUS = 0.2
"""Seconds of one stimulus (the presentation of the digits and of token streams)."""

BASAL, APICAL = 100.0, 50.0
"""Extra basal and apical drive of the apical-gain runs (Hz per L5 IT cell; as ``apical``'s)."""

# cell type -> (published range of the population mean, Hz; source). The rate table's bounds
# (ctmhsa.sims.physiology.REFERENCE_RATES) are these upper ends, except the interneurons': 40 Hz
# there is the circuit's own target, tighter than the 50 Hz published here, which this table
# compares with
RATES = {
    "relay": ((5.0, 100.0), "thalamic relay cells ~5-50 Hz, up to ~100 Hz while driven"),
    "l23": ((0.1, 5.0), "Barth & Poulet 2012 (Trends Neurosci 35:345): L2/3 pyramidal cells ~0.1-5 Hz"),
    "interneuron": ((5.0, 50.0), "Gentet et al. 2010 (Neuron 65:422): fast-spiking cells ~5-50 Hz"),
    "l5it": ((0.5, 20.0), "de Kock & Sakmann 2009 (PNAS 106:16446): L5 population means below ~20 Hz"),
    "l5pt": ((0.5, 20.0), "de Kock & Sakmann 2009: L5 population means below ~20 Hz, thick-tufted cells the highest"),
}
EVOKED = (1.0, "de Kock et al. 2007 (J Physiol 581:139): under one evoked spike per stimulus per excitatory cell in "
               "every layer")
CV = ((0.5, 1.5), "Softky & Koch 1993 (J Neurosci 13:334): cortical cells fire irregularly, ISI CV ~1")
SILENCING = ("reduced, not abolished", "Quiquempoix et al. 2018 (Curr Biol 28:2089): optogenetic L2/3 silencing "
                                       "reduces L5 whisker responses")
APICAL_GAIN = ("slope raised (a gain change)", "Larkum et al. 2004 (Cereb Cortex 14:1059): apical input raises "
                                               "the slope of the L5 input-output curve")
CORTICAL = ("l23", "interneuron", "l5it", "l5pt")
"""The cortical cell types whose irregularity the table reports."""
PYRAMIDAL = ("l23", "l5it", "l5pt")
"""The cell types whose spikes per stimulus it reports (the recordings' excitatory cells; fast-spiking
interneurons answer a whisker deflection with several spikes)."""


def _label(apical: float) -> str:
    return f"apical +{apical:g} Hz"


def runs(problem, opts) -> list:
    basal = (Drive("l5it", rate=BASAL, compartment="basal"),)
    apical = (Drive("l5it", rate=APICAL, compartment="apical"),)
    return [Run("control", 0.0, table=True),
            Run("L2/3 silenced", 0.0, perturbations=(Silence("l23"),)),
            Run(_label(0.0), BASAL, perturbations=basal),
            Run(_label(APICAL), 0.0, perturbations=apical),
            Run(_label(APICAL), BASAL, perturbations=basal + apical)]


def _row(measure, circuit, published, source, agrees) -> dict:
    return dict(measure=measure, circuit=circuit, published=published, source=source,
                agrees=None if agrees is None else bool(agrees))


def _by_type(table: list) -> dict:
    """Cell type -> the rows of its populations in a rate table."""
    out: dict = {}
    for r in table:
        out.setdefault(r["cell_type"], []).append(r)
    return out


def _mean(rows: list, key: str):
    """Cell-weighted mean of ``key`` over populations (``None`` where none has it)."""
    got = [(r[key], r["cells"]) for r in rows if r.get(key) is not None]
    if not got:
        return None
    return sum(v * n for v, n in got) / sum(n for _, n in got)


def summarise(rows, opts) -> dict:
    by = {(r["condition"], r["value"]): r for r in rows}
    control = by[("control", 0.0)]
    types = _by_type(control["rate_table"])
    level = get_level(opts["neuron"])
    spiking = level.spiking
    table = []
    window = opts["duration"] if spiking else None
    for cell_type, ((lo, hi), source) in RATES.items():
        if cell_type not in types:
            continue
        rate, slack = _mean(types[cell_type], "mean"), _slack(types[cell_type], window)
        table.append(_row(f"{cell_type}: mean rate (Hz)", rate, f"{lo:g}-{hi:g}", source,
                          _within(rate, lo - slack, hi + slack)))
    for cell_type in PYRAMIDAL:
        if cell_type not in types:
            continue
        base = _baseline(level, cell_type)
        spikes = (_mean(types[cell_type], "mean") - base) * STIMULUS
        slack = _slack(types[cell_type], window) * STIMULUS
        what = f"above the {base:g} Hz baseline" if base else "all spikes"
        table.append(_row(f"{cell_type}: spikes per cell in a {STIMULUS:g} s stimulus ({what})", spikes,
                          f"<= {EVOKED[0]:g} evoked", EVOKED[1], _within(spikes, -math.inf, EVOKED[0] + slack)))
    for cell_type in CORTICAL:
        if cell_type not in types:
            continue
        cv = _mean(types[cell_type], "isi_cv") if spiking else None
        (lo, hi), source = CV
        table.append(_row(f"{cell_type}: ISI CV", cv, f"~1 ({lo:g}-{hi:g})", source,
                          None if cv is None else _within(cv, lo, hi)))
    silenced = by[("L2/3 silenced", 0.0)]["rates"]
    for pop in ("l5it", "l5pt"):
        base = _baseline(level, pop)   # read above it, as the evoked spikes
        ratio = (silenced[pop] - base) / (control["rates"][pop] - base) if control["rates"].get(pop, 0.0) > base \
            else None
        what = " above the baseline" if base else ""
        table.append(_row(f"{pop}: rate{what} with every L2/3 cell silenced / control", ratio, SILENCING[0],
                          SILENCING[1], None if ratio is None else 0.05 < ratio < 0.95))
    slope0 = (by[(_label(0.0), BASAL)]["rates"]["l5it"] - control["rates"]["l5it"]) / BASAL
    slope1 = (by[(_label(APICAL), BASAL)]["rates"]["l5it"] - by[(_label(APICAL), 0.0)]["rates"]["l5it"]) / BASAL
    gain = slope1 / slope0 if slope0 else None
    table.append(_row(f"l5it: input-output slope with +{APICAL:g} Hz apical drive / without", gain, APICAL_GAIN[0],
                      APICAL_GAIN[1], None if gain is None else gain > 1.1))
    agree = [r for r in table if r["agrees"] is True]
    disagree = [r for r in table if r["agrees"] is False]
    pred = [f"{len(agree)} of {len(table)} fingerprints agree with the recordings, {len(disagree)} disagree"
            + (": " + "; ".join(f"{r['measure']} {_fmt(r['circuit'])} against {r['published']}" for r in disagree)
               if disagree else "") + "."]
    return dict(summary=dict(table=table, stimulus=STIMULUS, basal=BASAL, apical=APICAL,
                             slope=[slope0, slope1], gain=gain),
                predictions=pred)


def _baseline(level, cell_type: str) -> float:
    """The spontaneous rate (Hz) of ``cell_type``'s cells without drive: the lif soma type's
    baseline (docs/lif.md), none at the other levels. It is no response to a stimulus."""
    return lif_soma(cell_type).r_base if level.lif else 0.0


def _slack(rows: list, window) -> float:
    """The rate table's tolerance on a bound (:func:`ctmhsa.sims.physiology.counting_slack`) for
    the cell type's mean over all its populations' cells."""
    return counting_slack(_mean(rows, "mean"), window, sum(r["cells"] for r in rows))


def _within(value: float, lo: float, hi: float) -> bool:
    """``lo <= value <= hi`` up to float rounding (the L2/3 set point is the 5 Hz bound itself: the
    rate level measured 5.0000000000000036 Hz)."""
    return lo * (1 - 1e-9) <= value <= hi * (1 + 1e-9)


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.3g}"
