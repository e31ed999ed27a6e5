"""Firing rates beside the ranges recorded in vivo: the rate table of every result.

A physiologist's first question of a spiking model is whether its cells fire at rates cells
fire at. Every result carries a table (``res.rate_table()``, also in ``res.diagnostics["rates"]``
and printed by ``ctmhsa run``): per population its cell type, cells, mean, median and largest
rate (Hz), the fraction of silent cells, and the mean's upper bound for that cell type in vivo
(:data:`REFERENCE_RATES`) with ``within`` saying whether the mean is below it. The table is a
diagnostic, never a refusal: a circuit pushed to high rates for accuracy is a legitimate
experiment, and the table states it. docs/physiology.md gives the sources and the measured cost in
accuracy of holding the circuit to these bounds.
"""

from __future__ import annotations

import numpy as np

__all__ = ["REFERENCE_RATES", "RateTable", "rate_table", "isi_cv", "counting_slack", "spikes_between"]

#: cell type -> (upper bound of the population's mean rate in vivo, Hz; its basis). Model cell
#: types with no counterpart that has been recorded in this role (read-out decoders, the linear
#: circuit's memory cells) have no bound.
REFERENCE_RATES = {
    "relay": (100.0, "thalamic relay cells (first-order nuclei): up to ~100 Hz while driven"),
    "relay_norm": (100.0, "thalamic relay cells (first-order nuclei): up to ~100 Hz while driven"),
    "relay_out": (100.0, "higher-order thalamic relay cells: up to ~100 Hz while driven"),
    "l23": (5.0, "L2/3 pyramidal cells fire sparsely, ~0.1-5 Hz (Barth & Poulet 2012)"),
    "interneuron": (40.0, "fast-spiking interneurons (cortical PV, reticular nucleus): ~5-50 Hz in vivo "
                          "(e.g. Gentet et al. 2010); 40 Hz is the circuit's target"),
    "l5it": (20.0, "L5 pyramidal cells: population means below ~20 Hz (de Kock & Sakmann 2009)"),
    "l5pt": (20.0, "L5 pyramidal cells: population means below ~20 Hz (de Kock & Sakmann 2009)"),
    "l6ct": (10.0, "L6 corticothalamic cells fire sparsely, a few Hz"),
    "ffi": (40.0, "feedforward inhibitory (fast-spiking) interneurons under Dale's law: they fire with "
                  "their excitatory cell, so their mean is its; fast-spiking cells ~5-50 Hz in vivo"),
}


class RateTable(list):
    """Rows (dicts) of :func:`rate_table`; ``str()`` is the aligned text table."""

    def __str__(self) -> str:
        head = f"{'population':<16}{'cell type':<13}{'cells':>7}{'mean':>9}{'median':>9}{'max':>9}{'silent':>8}" \
               f"{'Fano':>7}{'ISI CV':>8}{'bound':>8}  "
        lines = [head, "-" * len(head)]
        for r in self:
            bound = "-" if r["bound"] is None else f"{r['bound']:g}"
            flag = "" if r["within"] in (None, True) else "above"
            fano, cv = (("-" if r.get(k) is None else f"{r[k]:.2f}") for k in ("fano", "isi_cv"))
            lines.append(f"{r['population']:<16}{r['cell_type']:<13}{r['cells']:>7d}{r['mean']:>9.2f}"
                         f"{r['median']:>9.2f}{r['max']:>9.1f}{r['silent']:>8.2f}{fano:>7}{cv:>8}{bound:>8}  {flag}")
        return "\n".join(lines)


def isi_cv(cells, times, min_spikes: int = 3) -> tuple[float | None, int]:
    """Mean coefficient of variation of the inter-spike intervals over the cells with at least
    ``min_spikes`` spikes, and how many cells that is (``(None, 0)`` where none has).
    A Poisson cell has CV 1, a regular one 0; cortical cells in vivo ~1 (Softky & Koch 1993,
    J Neurosci 13:334)."""
    cells, times = np.asarray(cells), np.asarray(times, float)
    if cells.size == 0:
        return None, 0
    order = np.lexsort((times, cells))
    c, t = cells[order], times[order]
    same = c[1:] == c[:-1]
    isi, owner = np.diff(t)[same], c[1:][same]
    # per cell, in one pass over the intervals (a loop over cells was quadratic: hours for every
    # spike of a 273,000-cell stream): count, mean, then the spread about each cell's own mean
    _, owner = np.unique(owner, return_inverse=True)
    n = np.bincount(owner)
    mean = np.bincount(owner, isi) / np.maximum(n, 1)
    var = np.bincount(owner, (isi - mean[owner]) ** 2) / np.maximum(n, 1)
    keep = (n >= min_spikes - 1) & (mean > 0)
    if not keep.any():
        return None, 0
    return float(np.mean(np.sqrt(var[keep]) / mean[keep])), int(keep.sum())


def spikes_between(spikes: dict, lo: float, hi: float = np.inf) -> dict:
    """Population -> ``(cells, times)`` of the recorded ``spikes`` with ``lo <= t < hi`` (s)."""
    out = {}
    for name, (cells, times) in spikes.items():
        cells, times = np.asarray(cells), np.asarray(times, float)
        keep = (times >= lo) & (times < hi)
        out[name] = (cells[keep], times[keep])
    return out


def counting_slack(mean: float, window: float | None, cells: int) -> float:
    """Two standard errors of Poisson counting of a population's mean rate ``mean`` (Hz) over
    ``cells`` cells and a ``window`` (s); 0 without a window (no spikes): how far a mean may
    pass a recorded bound and still be read as within it."""
    return 0.0 if not window else 2.0 * float(np.sqrt(mean / (window * cells)))


def rate_table(rates: dict, cell_types: dict, window: float | None = None, fano: dict | None = None,
               spikes: dict | None = None, roles: dict | None = None) -> RateTable:
    """The rate table of one result.

    Parameters
    ----------
    rates : dict
        Population -> rates (Hz) of its cells, any shape (a dense grid with NaN for absent cells,
        or a stream's ``(T, ...)``: pooled over presentations).
    cell_types : dict
        Population -> its cell type (:attr:`ctmhsa.circuits.graph.Population.cell_type`).
    window : float, optional
        Time each rate was counted over (s; a stream's: one presentation's window). A mean is then
        ``within`` its bound unless it exceeds it by more than two standard errors of Poisson
        counting, ``2 sqrt(mean / (window cells))`` (a population held at its bound, as L2/3 at
        its 5 Hz set point, is not flagged for its counting noise); without it, strictly.

    Returns
    -------
    RateTable
        One row per population with cells: ``population``, ``cell_type``, ``role``, ``cells`` (rates
        counted), ``mean``, ``median``, ``max`` (Hz), ``silent`` (fraction at 0 Hz), ``bound``
        (:data:`REFERENCE_RATES`, Hz, or None) and ``within`` (mean <= bound, up to the counting
        noise where ``window`` is given; None without a bound); the single cells' irregularity:
        ``fano`` (the population's pooled spike-count Fano factor over the window's chunks, from
        ``fano``) and ``isi_cv`` (:func:`isi_cv` of the window's recorded spikes, from ``spikes``,
        with ``cv_cells`` the cells it averages), None where not measured (the rate level, or a
        population whose spikes were not recorded).
    fano : dict, optional
        Population -> pooled Fano factor (``res.diagnostics["fano"]``).
    spikes : dict, optional
        Population -> ``(cells, times)`` of the window's recorded spikes.
    roles : dict, optional
        Population -> its role (:attr:`ctmhsa.circuits.graph.Population.role`): each row's
        ``role`` (``""`` where none is given).
    """
    rows = RateTable()
    for name, r in rates.items():
        v = np.asarray(r, float).ravel()
        v = v[np.isfinite(v)]
        if v.size == 0:
            continue
        kind = cell_types.get(name, "?")
        bound = REFERENCE_RATES.get(kind, (None, ""))[0]
        mean = float(v.mean())
        slack = counting_slack(mean, window, v.size)
        f = (fano or {}).get(name)
        cv, n_cv = isi_cv(*spikes[name]) if spikes and name in spikes else (None, 0)
        rows.append(dict(population=name, cell_type=kind, role=(roles or {}).get(name, ""), cells=int(v.size), mean=mean, median=float(np.median(v)),
                         max=float(v.max()), silent=float(np.mean(v == 0)), bound=bound,
                         within=None if bound is None else bool(mean <= bound + slack),
                         fano=None if f is None or not np.isfinite(f) else float(f), isi_cv=cv, cv_cells=n_cv))
    return rows
