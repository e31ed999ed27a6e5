"""The runner the experiments share: one circuit, a list of runs, one document.

An experiment module defines ``NAME``, ``TITLE``, ``SOURCE`` (the experiment it repeats),
``PROTOCOL`` (what it does, in words), ``SWEEP`` (the swept variable's name and label),
``runs(problem, options) -> list[Run]`` and ``summarise(rows, options) -> dict`` (``summary``
numbers and ``predictions`` sentences). :func:`run` executes the runs and assembles the document.

Every run of an experiment is the same preparation: the circuit is built for one declared input
range, that of the whole stimulus set (:meth:`ctmhsa.maths.inputs.InputRange.from_tokens`), so
its gains, set points and offsets are identical in every run (the tokens shown never set a
parameter); only the relays' rates and the perturbations differ. Every run uses the same seed
(paired comparisons: a condition's difference is not sampling noise of another seed).
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass

import numpy as np

from ctmhsa.circuits.perturb import silence_values
from ctmhsa.maths.inputs import InputRange
from ctmhsa.mapping.operating import OperatingRangeWarning

from ..build import build_mhsa
from ..config import problem_inputs
from ..io import atomic_write_json, check_output, results_directory
from ..options import CircuitOptions, RunOptions, check_run
from .fit import fit_line  # noqa: F401 - re-exported (the experiments' figures import it from .fit)

__all__ = ["Run", "run", "DEFAULT_PROBLEM", "PSTH_BIN", "fit_line", "rows_of", "population_size"]

DEFAULT_PROBLEM = dict(n=8, H=2, dk=8, dv=8, de=8, input_seed=0, weight_scale=1.0)
"""The circuit the experiments run on by default: ``ctmhsa run``'s (two heads, n = d = 8)."""

PSTH_BIN = 20e-3
"""Bin of the population time histograms (s)."""


@dataclass(frozen=True)
class Run:
    """One run of a protocol.

    Attributes
    ----------
    condition : str
        The condition's label (one line of the figure).
    value : float
        The swept variable's value in this run (the experiment's ``SWEEP``).
    amplitude : float
        Stimulus: the problem's tokens times ``amplitude``.
    perturbations : tuple
        :mod:`ctmhsa.circuits.perturb` objects.
    psth : tuple of str
        Populations whose population rate over time (``PSTH_BIN`` bins) the row keeps (spiking
        levels only; the run is skipped at the rate level).
    table : bool
        The row keeps the run's rate table (:meth:`ctmhsa.sims.result.SimulationResult.rate_table`:
        per population its rates, Fano factor and, the spikes recorded at the spiking levels, ISI
        CV).
    """

    condition: str
    value: float
    amplitude: float = 1.0
    perturbations: tuple = ()
    psth: tuple = ()
    table: bool = False


def population_size(problem: dict, neuron: str, population: str) -> int:
    """Cells of ``population`` in the circuit of ``problem`` (to choose cells to silence)."""
    p = problem
    c = CircuitOptions(neuron=neuron).describe(p["n"], p["dk"], p["dv"], p["de"], H=p["H"])
    return c.populations[population].N


def rows_of(rows: list, condition: str) -> list:
    """The rows of ``condition``, by increasing swept value."""
    return sorted((r for r in rows if r["condition"] == condition), key=lambda r: r["value"])


def _check(neuron, seed, duration, warmup, problem, codegen) -> dict:
    """The options validated by the simulator's own option objects, and the problem's sizes; before
    anything is built."""
    co = CircuitOptions(neuron=neuron)
    check_run(co, RunOptions(duration=duration, warmup=warmup, seed=seed, codegen=codegen).resolved(neuron))
    p = dict(DEFAULT_PROBLEM)
    if problem is not None:
        if not isinstance(problem, dict):
            raise TypeError(f"problem: expected a dict of problem sizes, got {type(problem).__name__}")
        unknown = set(problem) - set(DEFAULT_PROBLEM)
        if unknown:
            raise ValueError(f"problem: unknown keys {sorted(unknown)}; expected some of {sorted(DEFAULT_PROBLEM)}")
        p.update(problem)
    return p


def _seen_rates(sim, res) -> dict:
    """Population -> rates (Hz) as an electrode sees them: at the rate level a silenced cell's
    output is 0 (the perturbation gates its output; its own state runs on)."""
    rates = dict(res.rates)
    if not CircuitOptions(neuron=res.level).spiking:
        for name, sv in silence_values(sim.circuit).items():
            pop = sim.circuit.populations[name]
            silent = pop.to_dense(np.isfinite(sv["sil_on"]).astype(float), fill=0.0) > 0
            rates[name] = np.where(silent, 0.0, rates[name])
    return rates


def _slope(decoded, reference) -> float:
    d, r = np.asarray(decoded, float).ravel(), np.asarray(reference, float).ravel()
    ok = np.isfinite(d) & np.isfinite(r)
    return float(np.sum(d[ok] * r[ok]) / np.sum(r[ok] ** 2))


def _psth(res, population: str, N: int) -> list:
    i, t = res.spikes.get(population, (np.zeros(0), np.zeros(0)))
    edges = np.arange(0.0, res.t_stop + PSTH_BIN / 2, PSTH_BIN)
    counts, _ = np.histogram(np.asarray(t, float), bins=edges)
    return (counts / (N * PSTH_BIN)).tolist()


def _row(r: Run, sim, res) -> dict:
    rates = _seen_rates(sim, res)
    l23 = sim.circuit.populations.get("l23")
    row = dict(condition=r.condition, value=float(r.value), amplitude=float(r.amplitude),
               perturbations=[p.describe() for p in r.perturbations],
               rates={k: float(np.nanmean(v)) for k, v in rates.items()})
    if l23 is not None:   # pooled L2/3 rate per macrocolumn (head, i), mean over macrocolumns
        grid = rates["l23"]
        pooled = np.nansum(grid, axis=tuple(range(2, grid.ndim)))
        row["pooled_l23"] = float(np.mean(pooled))
        row["set_point"] = float(np.mean(sim.encoding.consts["R_set"]))
    m = res.metrics()
    row["gain"] = {s: _slope(res.stages[s], res.reference_stages[s]) for s in ("v_tilde", "x_tilde")}
    row["nrmse"] = {s: m[s]["nrmse"] for s in ("v_tilde", "x_tilde")}
    row["in_range"] = bool(res.diagnostics.get("in_range", True))
    row["violations"] = len(res.diagnostics.get("operating", {}).get("violations", []))
    if r.psth:
        row["psth"] = {p: _psth(res, p, sim.circuit.populations[p].N) for p in r.psth}
        row["psth_bin"] = PSTH_BIN
    if r.table:
        row["rate_table"] = [dict(t) for t in res.rate_table()]
    return row


def run(module, out=None, *, neuron: str = "escape", seed: int = 0, duration: float = 1.0,
        warmup: float | None = None, problem: dict | None = None, nwb: bool = True, codegen: str = "auto",
        report=None, draw=None) -> dict:
    """Run the protocol of experiment ``module``; return its document (and write it to ``out``).

    Parameters
    ----------
    module
        An experiment module (:data:`ctmhsa.sims.experiments.EXPERIMENTS`).
    out : str, optional
        Results directory to write (kind ``experiment``): ``experiment.json`` (the document),
        one ``<run>.nwb`` per spiking run where ``nwb`` (every cell, its rate and spike train,
        silences as epochs) and whatever ``draw`` writes. Checked before anything runs: an
        existing path that is not a results directory of this project is never replaced.
    neuron : {"rate", "escape", "lif"}
        Fidelity level (runs that need spikes, such as a time course, are skipped at the rate level).
    seed : int
        Seed of every run (paired comparisons across conditions).
    duration : float
        Measurement window of every run (s; at the rate level the simulated time).
    warmup : float, optional
        Discarded before the window (s; default 0.3 at the spiking levels, 0 at the rate level).
    problem : dict, optional
        Sizes and seeds of the random problem (:data:`DEFAULT_PROBLEM`'s keys).
    nwb : bool
        Write one NWB file per spiking run into ``out``.
    codegen : {"auto", "numpy", "cython"}
        Brian2 code-generation target.
    report : callable, optional
        ``report(k, total, run)`` before each run (progress).
    draw : callable, optional
        ``draw(directory, document)``: writes the figure into the results directory before it is
        moved into place (the command line passes :func:`ctmhsa.figures.experiments.draw`).

    Returns
    -------
    dict
        ``experiment``, ``title``, ``source``, ``protocol``, ``sweep``, the options, ``problem``,
        ``neurons``, ``rows`` (one per run: condition, swept value, amplitude, perturbations,
        population mean rates, pooled L2/3 rate and its set point, decoded gain and NRMSE of ṽ
        and x̃, whether the run stayed in the working range and its number of violations (a
        perturbed run's are expected and not warned about), population time histograms where
        asked), ``summary`` and ``predictions``, ``wall_s``, ``machine`` (load averages, cores and
        time before and after the runs).
    """
    spiking = CircuitOptions(neuron=neuron).spiking   # the level's fact; refuses an unknown level
    if warmup is None:
        warmup = 0.3 if spiking else 0.0
    p = _check(neuron, seed, duration, warmup, problem, codegen)
    opts = dict(neuron=neuron, seed=int(seed), duration=float(duration), warmup=float(warmup))
    x = problem_inputs(n=p["n"], H=p["H"], dk=p["dk"], dv=p["dv"], de=p["de"], inputs="random",
                       input_seed=p["input_seed"], weight_scale=p["weight_scale"])
    runs = [r for r in module.runs(p, opts) if spiking or not r.psth]
    stimuli = np.concatenate([a * x["X"] for a in sorted({r.amplitude for r in runs})])
    input_range = InputRange.from_tokens(stimuli)     # the stimulus set: one preparation for every run
    if out is not None:
        out = check_output(out, 0, what="out")
    from ..benchmarks.common import machine_state

    t0 = time.perf_counter()
    doc = dict(experiment=module.NAME, title=module.TITLE, source=module.SOURCE, protocol=module.PROTOCOL,
               sweep=dict(zip(("name", "label"), module.SWEEP)), codegen=codegen, problem=p, **opts)
    before = machine_state()     # the load averages around the runs, as a benchmark records them

    def execute(tmp):
        rows = []
        for k, r in enumerate(runs):
            if report is not None:
                report(k, len(runs), r)
            sim = build_mhsa(r.amplitude * x["X"], x["WQ"], x["WK"], x["WV"], x["WO"], neuron=neuron,
                             duration=duration, warmup=warmup, seed=int(seed), input_range=input_range,
                             perturbations=list(r.perturbations) or None, codegen=codegen,
                             record_spikes=bool(spiking and (r.psth or r.table or (nwb and tmp))))
            with warnings.catch_warnings():
                if r.perturbations:   # a lesion moves the circuit out of its range by design: kept in the row
                    warnings.simplefilter("ignore", OperatingRangeWarning)
                res = sim.run()
            rows.append(_row(r, sim, res))
            doc["neurons"] = res.counts["neurons"]
            if tmp is not None and nwb and spiking:
                from ..nwb import write_nwb

                name = f"run{k:02d}.nwb"
                write_nwb(res, os.path.join(tmp, name), circuit=sim.circuit)
                rows[-1]["nwb"] = name
        doc["rows"] = rows
        doc.update(module.summarise(rows, opts))
        doc["wall_s"] = time.perf_counter() - t0
        doc["machine"] = dict(before=before, after=machine_state())
        if tmp is not None:
            atomic_write_json(os.path.join(tmp, "experiment.json"), doc)
            if draw is not None:
                draw(tmp, doc)

    if out is None:
        execute(None)
    else:
        with results_directory(out, "out", kind="experiment") as tmp:
            execute(tmp)
    return doc
