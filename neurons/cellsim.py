"""Cell-level experiments: one population of a cell type under controlled Poisson drive.

This is the measurement bench behind the cell-level tests, the calibration and the in-silico
versions of the paper's fig. 2. Every cell gets, on each driven compartment, ``n_syn``
independent Poisson synapses of rate ``rate[cell]`` and efficacy ``w`` (V·s; mean drive
``n_syn * rate * w`` volts). Optionally, ``n_inh`` divisive interneurons pool every cell of the
population and shunt all of them (one macrocolumn's normalisation loop).

The same equations as the circuit are used (:mod:`ctmhsa.neurons.models`); at the rate level the
drive is its mean, at the spiking levels each step draws ``poisson(n_syn * rate * dt)`` spikes.
"""

from __future__ import annotations

from dataclasses import dataclass

import brian2 as b2
import numpy as np

from .backend import configure_brian2, run_network
from . import simd  # noqa: F401  (registers the lif somata's state-update method)
from .models import SYNAPSE_WEIGHT_UNITS, add_step_code, get_model, initial_draws, synapse_model
from .conductance import lif_drive
from .law_registry import get_law
from .params import DEFAULT_PARAMS, CellParams, seconds, with_units
from .window import Probe, fano_factors, measure

__all__ = ["Drive", "Interneurons", "simulate_cells", "spike_count_nrmse_floor"]


@dataclass(frozen=True)
class Drive:
    """Input to one compartment of every cell: independent Poisson synapses, or (``regular``) their
    spikes in turn, as one perfect integrator of their summed rate fires them (the relays of
    ``firing="population"``, :mod:`ctmhsa.neurons.firing`), from a random phase per cell.

    Attributes
    ----------
    rate : array (N,) or float
        Rate of each synapse (Hz), per cell.
    w : float
        Synaptic efficacy (SI weight units: V·s for dendrites, s for shunts, 1 for pools).
    n_syn : int
        Synapses per cell on this compartment.
    regular : bool
        Spikes of the integrator (no count noise but its phase) instead of Poisson counts.
    """

    rate: object
    w: float
    n_syn: int = 100
    regular: bool = False


@dataclass(frozen=True)
class Interneurons:
    """Divisive interneurons pooling all cells of the population and shunting them.

    ``w_pool`` (dimensionless, per L2/3 spike) and ``I_set`` (Hz) set the set point
    ``R_set = I_set / w_pool`` of the pooled rate; ``w_shunt`` (s) is the shunt per interneuron
    spike (relative to the leak, integrated over time).
    """

    I_set: float
    w_pool: float
    w_shunt: float
    n: int = 1
    e_max: float = 9.0
    """Bound of the loop's relative error (see the interneuron model in :mod:`ctmhsa.neurons.models`)."""
    groups: int = 1
    """Independent macrocolumns: cells are split into ``groups`` equal consecutive blocks, each
    with its own ``n`` interneurons (pooling and shunting that block only)."""


def simulate_cells(
    level: str,
    cell_type: str,
    n_cells: int,
    drives: dict,
    duration: float,
    warmup: float = 0.5,
    dt: float = 1e-4,
    seed: int = 0,
    phi: str = "elu1",
    cell_params: dict | None = None,
    interneurons: Interneurons | None = None,
    params: CellParams = DEFAULT_PARAMS,
    codegen: str = "numpy",
    law: str = "product",
) -> dict:
    """Run ``n_cells`` cells of ``cell_type`` at ``level`` under ``drives``; measure them.

    Parameters
    ----------
    drives : dict
        Compartment name -> :class:`Drive`, or a tuple of them summed on the compartment (a
        signed potential: an ON drive with ``+w`` and an OFF drive with ``-w``, as the circuit's
        ON/OFF relays make ``±u v`` on a dendrite).
    duration, warmup, dt : float or brian2 Quantity
        Measurement window, discarded warm-up and integration step (s, or Brian2 times).
    cell_params : dict
        Values of the model's per-cell parameters (biases in V, ``rho`` in Hz...).
    law : str
        Two-point-neuron law of the soma (:mod:`ctmhsa.neurons.law_registry`); a law other than
        ``"product"`` needs a cell type with one (L5 IT).

    Returns
    -------
    dict
        ``rate`` measured spike rate (Hz; at the rate level the final rate), ``expected`` the
        window mean of the intensity ``r`` (Hz), window means of the other observables,
        ``inh_rate`` (interneuron rates, Hz) when interneurons are present; at the spiking
        levels ``fano`` (pooled Fano factor of the counts in 10 chunks) and ``r_base`` (Hz: a lif
        soma's baseline, 0 otherwise; the rates include it).
    """
    duration, warmup = seconds("duration", duration), seconds("warmup", warmup, allow_zero=True)
    dt = seconds("dt", dt)
    law = get_law(law)
    model = get_model(level, cell_type)
    if not law.product and "{LAW}" not in model.equations:   # refused, not ignored
        raise ValueError(f"law: cell type {cell_type!r} at level {level!r} has no two-point law; got {law.name!r}")
    sources = _drive_sources(drives)
    configure_brian2(codegen)
    b2.seed(seed)
    ns = with_units(params, dt)
    clock = b2.Clock(dt=dt * b2.second)
    comps = {c: [name for name, _ in srcs] for c, srcs in sources.items()}
    if interneurons is not None:
        comps.setdefault("soma", []).append("shunt")
    eqs = model.render(phi, comps, law.name) + "".join(f"\nnu_{name} : Hz" + (f"\nph_{name} : 1" if d.regular else "")
                                                       for srcs in sources.values() for name, d in srcs)
    G = b2.NeuronGroup(n_cells, eqs, threshold=model.threshold or None, reset=model.reset or None,
                       refractory=model.refractory or False, method=model.method, namespace=ns, clock=clock, name="cells")
    # lif somata: driven on their calibrated affine branch unless the caller says otherwise
    drive = lif_drive(dt, cell_type) if model.lif_soma else {}
    for k, v in {**initial_draws(model, n_cells, seed, "cells"), **drive, **(cell_params or {})}.items():
        v = np.asarray(v, float)
        setattr(G, k + "_", float(v) if v.ndim == 0 else v)
    objs = [G]
    add_step_code(G, model, clock)
    for comp, name, d in ((c, n, d) for c, srcs in sources.items() for n, d in srcs):
        unit = model.inputs[comp][1]
        nu = np.broadcast_to(np.asarray(d.rate, float), (n_cells,)).copy()
        setattr(G, f"nu_{name}_", nu)
        if model.spiking and d.regular:   # one integrator of the n_syn synapses' rate: its spikes this step
            rng = np.random.default_rng(None if seed is None else [int(seed), len(objs)])   # one stream per drive
            setattr(G, f"ph_{name}_", rng.random(n_cells))
            objs.append(G.run_regularly(
                f"ph_{name} += {d.n_syn}*nu_{name}*dt\n"
                f"in_{name} += {d.w!r}*{SYNAPSE_WEIGHT_UNITS[unit]}*k_syn*floor(ph_{name})\n"
                f"ph_{name} -= floor(ph_{name})", clock=clock, when="before_groups"))
        elif model.spiking:  # n_syn independent Poisson synapses: a Poisson count per step
            objs.append(G.run_regularly(
                f"in_{name} += {d.w!r}*{SYNAPSE_WEIGHT_UNITS[unit]}*k_syn"
                f"*poisson({d.n_syn}*nu_{name}*dt)", clock=clock, when="before_groups"))
        else:
            setattr(G, f"in_{name}_", d.w * d.n_syn * nu)
    inh = None
    if interneurons is not None:
        im = get_model(level, "interneuron")
        ng = interneurons.groups
        if n_cells % ng:
            raise ValueError(f"interneurons.groups: {ng} does not divide n_cells = {n_cells}")
        cpg, n_i = n_cells // ng, interneurons.n
        inh = b2.NeuronGroup(n_i * ng, im.render(phi, {"soma": ["pool"]}),
                             threshold=im.threshold or None, reset=im.reset or None,
                             method=im.method, namespace=ns, clock=clock, name="interneurons")
        # a lif cell's baseline reaches the pool too: the set point is raised to hold the excess
        inh.I_set_ = interneurons.I_set + interneurons.w_pool * cpg * drive.get("r_base", 0.0)
        inh.e_max_ = interneurons.e_max
        inh.tau_inh_ = params.tau_int    # one division stage (the soma's)
        for k, v in initial_draws(im, n_i * ng, seed, "interneurons").items():
            setattr(inh, k + "_", v)
        objs.append(inh)
        add_step_code(inh, im, clock)
        for name, src, tgt, w, sm, tm, comp in (
                ("pool", G, inh, interneurons.w_pool, model, im, "soma"),
                ("shunt", inh, G, interneurons.w_shunt / interneurons.n, im, model, "soma")):
            S = b2.Synapses(src, tgt, clock=clock, namespace=ns, name=name,
                            **synapse_model(sm, tm, comp, name))
            # all-to-all inside each block: cell c belongs to block c // cpg, interneuron k to k // n_i
            cell = np.repeat(np.arange(n_cells), n_i)
            intn = (cell // cpg) * n_i + np.tile(np.arange(n_i), n_cells)
            pre, post = (cell, intn) if name == "pool" else (intn, cell)
            S.connect(i=pre.astype(np.int32), j=post.astype(np.int32))
            S.w_ = w
            objs.append(S)
    if not model.spiking:
        net = b2.Network(*objs)
        run_network(net, (warmup + duration) * b2.second, namespace={})
        out = {v: np.array(getattr(G, v + "_")[:]) for v in model.observables}
        out["expected"] = out["rate"] = out["r"]
        if inh is not None:
            out["inh_rate"] = np.array(inh.r_[:])
        return out
    acc = "\n".join(f"acc_{v} += {v}*dt" for v in model.accumulated)
    if acc:
        objs.append(G.run_regularly(acc, clock=clock, when="end"))
    probes = {"cells": Probe(b2.SpikeMonitor(G, record=False), lambda v: np.array(getattr(G, v + "_")[:]),
                             tuple(model.observables))}
    if inh is not None:
        probes["interneurons"] = Probe(b2.SpikeMonitor(inh, record=False), None)
    net = b2.Network(*objs, *(p.monitor for p in probes.values()))

    def run(d, report):
        run_network(net, d * b2.second, namespace={}, report=report)
        return 0.0

    m = measure(net, probes, clock, run, warmup, duration, n_chunks=10)
    window = m["snapshots"][-1][1]
    out = dict(window["cells"])
    out["fano"] = fano_factors({"cells": m["chunks"]["cells"]})["cells"]   # pooled, from 10 chunks
    out["expected"] = out["r"]
    out["r_base"] = drive.get("r_base", 0.0)
    if inh is not None:
        out["inh_rate"] = window["interneurons"]["rate"]
    return out

def _drive_sources(drives: dict) -> dict:
    """Compartment -> ``[(input name, Drive)]``: one Drive keeps the name ``drive_<comp>``, a
    tuple of them is named ``drive_<comp>_<k>``."""
    if not isinstance(drives, dict):
        raise TypeError(f"drives: expected a dict compartment -> Drive, got {type(drives).__name__}")
    out = {}
    for comp, d in drives.items():
        many = isinstance(d, (tuple, list))
        ds = tuple(d) if many else (d,)
        if not ds or not all(isinstance(x, Drive) for x in ds):
            raise TypeError(f"drives: {comp!r} must be a Drive or a non-empty tuple of Drives, got {d!r}")
        out[comp] = [(f"drive_{comp}_{k}" if many else f"drive_{comp}", x) for k, x in enumerate(ds)]
    return out


def spike_count_nrmse_floor(rates: np.ndarray, duration: float, fano: float = 1.0) -> float:
    """NRMSE of rates estimated from spike counts, from counting noise alone.

    Each rate estimate ``count / T`` has variance ``F r / T``; the floor is
    ``sqrt(mean(F r / T)) / std(r)`` (the NRMSE convention of :func:`ctmhsa.sims.result.stage_metrics`).
    """
    rates = np.asarray(rates, float)
    return float(np.sqrt(np.mean(fano * rates / duration)) / np.std(rates))
