"""Spike trains and rates of a run as a Neurodata Without Borders file (``spikes.nwb``, pynwb).

One NWB file per spiking run, written by :func:`ctmhsa.sims.io.write_result`:

- ``units``: one row per cell of the circuit, in population order and, within a population, in
  the order of its flat index (the cell index of ``spikes.npz``). Columns: ``population``,
  ``cell_type``, ``role``, ``area``, ``cell`` (flat index within the population), one column per index
  axis of any population (``head``, ``i``, ``j``, ``c``, ``k``, ``sign``, ``token``, ``e``,
  ``f``, ``p``; -1 where the population has no such axis), ``rate`` (Hz, measured over the
  window) and ``spike_times`` (s from the start of the network, warm-up included; empty for
  populations whose spikes were not recorded — the ``recorded`` column says which).
- ``epochs``: the warm-up, the measurement window and every perturbation (tags: its kind and
  target; a ``Silence`` over its interval, a ``Cut`` or ``Drive`` over the whole run).
- ``units.resolution``: the simulation time step ``dt`` (s): spike times are multiples of it.
- ``subject``: the simulated circuit (:data:`SUBJECT`). A model is not an animal: its species is
  NCBI Taxonomy's "synthetic construct" (NCBITaxon_32630, the term for man-made entities, in the
  IRI form nwbinspector accepts); age ``P0D`` (it exists from the start of the session), sex
  ``U`` (not applicable is not among NWB's values; ``U`` claims nothing). The circuit models
  mammalian (rodent barrel) cortex and thalamus, which ``description`` says.
- session metadata: ``session_description`` (level and sizes), ``experiment_description``,
  ``keywords``, ``related_publications`` (the paper, :data:`PAPER`), ``notes`` (the resolved
  configuration as strict JSON).

nwbinspector finds no CRITICAL issue and no BEST_PRACTICE_VIOLATION in these files (tested when it
is installed).

Read it back with pynwb::

    from pynwb import NWBHDF5IO
    with NWBHDF5IO("results/default/spikes.nwb", "r") as io:
        units = io.read().units.to_dataframe()
    units[(units.population == "l5pt") & (units.head == 0)]
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from datetime import datetime, timezone

import numpy as np

from .options import CircuitOptions
from ctmhsa.neurons.levels import get_level

__all__ = ["write_nwb", "circuit_of", "AXIS_DESCRIPTIONS", "SUBJECT", "PAPER", "KEYWORDS"]

log = logging.getLogger(__name__)

AXIS_DESCRIPTIONS = {
    "head": "attention head (cortical area)",
    "i": "query token (macrocolumn)",
    "j": "key token (microcolumn within the macrocolumn)",
    "c": "dimension of the represented key/query (L2/3) or value (L5 IT, L5 PT) vector",
    "k": "interneuron of the macrocolumn's pool",
    "f": "key feature (key-value-memory circuit)",
    "sign": "0: ON cell, 1: OFF cell of a signed pair",
    "token": "token (thalamic relay group)",
    "e": "embedding dimension",
    "p": "copy (population coding)",
    "d": "hidden unit of a transformer block's MLP (L6 corticothalamic cell)",
    "class": "class of a transformer's read-out",
}
"""Meaning of every index axis of the circuit's populations (NWB column descriptions)."""

PAPER = "https://doi.org/10.48550/arXiv.2504.06354"
"""Granier & Senn (2025), "Multihead self-attention in cortico-thalamic circuits", arXiv:2504.06354
(the DOI form of its arXiv identifier)."""

SUBJECT = dict(
    subject_id="ctmhsa-model",
    species="http://purl.obolibrary.org/obo/NCBITaxon_32630",    # "synthetic construct"
    age="P0D", sex="U",
    description="In-silico subject: a simulated cortico-thalamic circuit (ctmhsa, after Granier & Senn 2025) "
                "modelled on mammalian (rodent barrel) cortex and thalamus; not an animal. Species is NCBI "
                "Taxonomy's 'synthetic construct'; the model exists from the start of the session (age P0D) "
                "and has no sex (U).")
"""Arguments of ``pynwb.file.Subject`` for a simulated circuit (see the module docstring)."""

KEYWORDS = ("simulation", "spiking neural network", "Brian2", "cortico-thalamic circuit", "multihead self-attention",
            "transformer", "thalamus", "cortex")
"""The file's ``keywords``."""

_TEXT_COLUMNS = ("population", "cell_type", "role", "area")
"""The units table's columns of text (one string per cell)."""


def circuit_of(config: dict):
    """The circuit description (:func:`ctmhsa.circuits.builders.pathway`) of a result's flat
    configuration (``SimulationResult.config``): what was built, for its populations' axes."""
    c = config
    return CircuitOptions.from_config(c).describe(c["n"], c["dk"], c["dv"], c["de"], H=c["H"], m=c.get("m"),
                                                  cross=c.get("cross", False), skip=c.get("skip", False))


def _written_by_ctmhsa(path: str) -> bool:
    """Whether ``path`` is an NWB file written by :func:`write_nwb` (its ``source_script``)."""
    import h5py

    try:
        if not h5py.is_hdf5(path):
            return False
        with h5py.File(path, "r") as f:
            script = f.get("general/source_script")
            value = script[()] if isinstance(script, h5py.Dataset) else b""
    except (OSError, ValueError, KeyError):
        return False
    value = value.decode() if isinstance(value, bytes) else str(value)
    return value.startswith("ctmhsa")


def _check_path(path) -> None:
    """Refuse ``path`` where writing would replace something that is not ctmhsa's NWB file."""
    from .atomic import OutputError

    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise TypeError(f"path: expected a file name ending in .nwb, got {path!r}")
    p = os.fspath(path)
    if os.path.isdir(p):
        raise OutputError(f"path: {p!r} is a directory; write_nwb writes a file: choose a file name ending in .nwb")
    if os.path.lexists(p) and not _written_by_ctmhsa(p):
        raise OutputError(f"path: {p!r} exists and is not an NWB file written by ctmhsa; write_nwb never replaces "
                          f"other files: choose a new file name ending in .nwb")


def write_nwb(result, path: str, circuit=None) -> str:
    """Write the spike trains and rates of ``result`` (a spiking :class:`ctmhsa.sims.SimulationResult`)
    to the NWB file ``path``; return ``path``.

    The file is written under a temporary name beside ``path`` and renamed onto it when complete.
    An existing ``path`` is replaced only when it is an NWB file written by ctmhsa (its
    ``source_script`` says so); anything else (a user's file, a directory) is never overwritten.

    A stream (``result.stream``) has a rate per presentation: the ``rate`` column then holds one
    row of ``T`` rates per cell (each presentation's decoding window), and every presentation is
    an epoch (tags ``presentation`` and its number; the decoding window adds ``decoding``).

    Parameters
    ----------
    result : SimulationResult
        A spiking run (its ``rates`` and ``spikes``).
    path : str
        File to write (a name ending in ``.nwb``).
    circuit : ctmhsa.circuits.graph.Circuit, optional
        The description the result was built from (default: rebuilt from ``result.config``).

    Raises
    ------
    TypeError
        ``result`` is not a result, or ``path`` is not a path.
    ValueError
        A rate-level result (no spikes), or ``path`` exists and is not an NWB file written by
        ctmhsa (:class:`ctmhsa.sims.io.OutputError`).
    """
    from hdmf.common import VectorData, VectorIndex
    from pynwb import NWBHDF5IO, NWBFile
    from pynwb.file import Subject
    from pynwb.misc import Units

    from .jsonfile import to_json

    if not isinstance(getattr(result, "level", None), str):
        raise TypeError(f"result: expected a spiking run's result (ctmhsa.sims.SimulationResult), "
                        f"got {type(result).__name__}")
    if not get_level(result.level).spiking:
        raise ValueError("result: the rate level has no spikes to write to NWB")
    _check_path(path)
    stream = (getattr(result, "diagnostics", None) or {}).get("stream")
    circuit = circuit_of(result.config) if circuit is None else circuit
    axes = [a for a in AXIS_DESCRIPTIONS if any(a in p.axes for p in circuit.populations.values())]
    cols = {k: [] for k in (*_TEXT_COLUMNS, "cell", "rate", "recorded", *axes)}
    trains, ends = [], []
    n_spikes = 0
    for name, pop in circuit.populations.items():
        N = pop.N
        idx = pop.index
        cols["population"] += [name] * N
        cols["cell_type"] += [pop.cell_type] * N
        cols["role"] += [pop.role] * N
        cols["area"] += [pop.area] * N
        cols["cell"].append(np.arange(N))
        for a in axes:
            cols[a].append(idx[:, pop.axes.index(a)] if a in pop.axes else np.full(N, -1))
        dense = result.rates.get(name)
        if dense is None:
            cols["rate"].append(np.full((N, stream["count"]) if stream else N, np.nan))
        elif stream:             # (T, *grid): one rate per presentation, cells first
            cols["rate"].append(np.asarray(dense, float)[(slice(None), *idx.T)].T)
        else:
            cols["rate"].append(np.asarray(dense, float)[tuple(idx.T)])
        recorded = name in result.spikes
        cols["recorded"].append(np.full(N, recorded))
        if recorded:
            i, t = (np.asarray(x) for x in result.spikes[name])
            order = np.lexsort((t, i))           # by cell, then time
            i, t = i[order], t[order]
            counts = np.bincount(i, minlength=N)
        else:
            t, counts = np.zeros(0), np.zeros(N, int)
        trains.append(t)
        ends.append(n_spikes + np.cumsum(counts))
        n_spikes += int(counts.sum())
    n_units = sum(p.N for p in circuit.populations.values())
    desc = {"population": "circuit population (ctmhsa.circuits.builders)", "cell_type": "neuron model of the population",
            "role": "what the population carries in the computation (ctmhsa.circuits.roles)",
            "area": "thalamus or cortex", "cell": "flat index of the cell within its population",
            "rate": ("spike rate in each presentation's decoding window (Hz), one entry per presentation"
                     if stream else "spike rate over the measurement window (Hz)"),
            "recorded": "whether this population's spike times were recorded (record_spikes)"}
    columns = [VectorData(name=k, description=desc[k], data=list(v) if k in _TEXT_COLUMNS
                          else np.concatenate(v))
               for k, v in cols.items() if k in desc]
    columns += [VectorData(name=a, description=f"index axis {a!r}: {AXIS_DESCRIPTIONS[a]}; -1 where the "
                                              "population has no such axis", data=np.concatenate(cols[a]))
                for a in axes]
    st = VectorData(name="spike_times", description="spike times (s from the start of the run)",
                    data=np.concatenate(trains) if trains else np.zeros(0))
    sti = VectorIndex(name="spike_times_index", data=np.concatenate(ends).astype(np.int64) if ends
                      else np.zeros(0, np.int64), target=st)
    conf = result.config
    units = Units(name="units", id=np.arange(n_units), columns=[st, sti, *columns],
                  description=f"every cell of the circuit ({len(circuit.populations)} populations)",
                  resolution=float(conf["dt"]) if conf.get("dt") else None)   # spike times: multiples of dt
    now = datetime.now(timezone.utc).astimezone()
    nwb = NWBFile(
        session_description=(f"ctmhsa: {result.level} level cortico-thalamic multihead attention, n={conf['n']}, "
                             f"H={conf['H']}, dk={conf['dk']}, dv={conf['dv']}, de={conf['de']}, seed={conf.get('seed')}"),
        identifier=str(uuid.uuid4()), session_start_time=now,
        experiment_description="Simulated spiking circuit after Granier & Senn (2025), 'Multihead "
                               "self-attention in cortico-thalamic circuits': tokens as rates of thalamic "
                               "nucleus 1, every cortical area one attention head, the block output at "
                               "thalamic nucleus 2",
        keywords=list(KEYWORDS), related_publications=[PAPER], subject=Subject(**SUBJECT),
        notes=json.dumps(to_json({k: v for k, v in conf.items() if not isinstance(v, dict) or k == "P"}),
                         allow_nan=False),
        source_script="ctmhsa (ctmhsa.sims.simulate_mhsa)", source_script_file_name="sims/simulate.py")
    nwb.units = units
    warm, dur = float(conf.get("warmup") or 0.0), float(conf["duration"])
    if warm > 0:
        nwb.add_epoch(start_time=0.0, stop_time=warm, tags=["warmup"])
    nwb.add_epoch(start_time=warm, stop_time=warm + dur, tags=["window"])
    for d in conf.get("perturbations") or ():   # a silence is an epoch ("light on"); cuts and drives last the run
        start = d.get("start") or 0.0
        stop = warm + dur if d.get("stop") is None else min(d["stop"], warm + dur)
        if stop > start:
            nwb.add_epoch(start_time=float(start), stop_time=float(stop), tags=[d["kind"], d["target"]])
    if stream:
        P, (lag, _) = float(stream["presentation"]), stream["window"]
        for k, t0 in enumerate(stream["starts"]):
            nwb.add_epoch(start_time=float(t0), stop_time=float(t0) + P, tags=["presentation", str(k)])
            nwb.add_epoch(start_time=float(t0) + float(lag), stop_time=float(t0) + P,
                          tags=["presentation", str(k), "decoding"])
    from .atomic import atomic_path

    with atomic_path(path, ".nwb") as tmp, NWBHDF5IO(tmp, "w") as io:
        io.write(nwb)
    log.info("wrote %s: %d units, %d spikes", path, n_units, n_spikes)
    return path
