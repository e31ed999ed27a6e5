"""In-silico experiments: the experiments the paper rests on (its fig. 2), run on the circuit.

Each experiment is a protocol of runs of one circuit (:func:`ctmhsa.sims.simulate_mhsa` with
perturbations, :mod:`ctmhsa.circuits.perturb`), built for one declared input range (the stimulus
set), so that every run of an experiment is the same preparation: only the stimulus and the
perturbation change. It returns (and writes) a plain document: the protocol, one row per run
(population mean rates, pooled L2/3 rate, decoded gain of ṽ and x̃), a summary with the
measured numbers and the predictions they make. ``ctmhsa experiment NAME`` writes it as a results
directory with one NWB file per spiking run and a figure (docs/experiments.md).

=====================  ==========================================================================
``photoinhibition``    L2/3 photo-inhibition (Quiquempoix et al. 2018): L5 IT and PT gain over a
                       stimulus sweep with none, half or all L2/3 cells silenced; the time course
                       after silencing half of them
``interneurons``       interneuron silencing: the loss of divisive normalisation (Wilson et al.
                       2012; Carandini & Heeger)
``it_pt``              cutting a fraction of the IT -> PT synapses (Campagnola et al. 2022: the
                       connection is one-way): PT and read-out gain, IT and L2/3 unchanged
``apical``             an apical-input sweep at the L5 IT cells (Larkum et al. 2004): their
                       input-output curve's slope under apical drive
``fingerprints``       the circuit beside the recordings: rates by cell type, spikes per cell in
                       a 0.2 s stimulus, ISI CV, L2/3 silencing and apical gain, each with its
                       published value, source and whether the two agree
=====================  ==========================================================================
"""

from __future__ import annotations

from importlib import import_module

__all__ = ["EXPERIMENTS", "experiment", "run_experiment"]

#: name -> module (imported on demand by :func:`experiment`)
EXPERIMENTS = {
    "photoinhibition": "ctmhsa.sims.experiments.photoinhibition",
    "interneurons": "ctmhsa.sims.experiments.interneurons",
    "it_pt": "ctmhsa.sims.experiments.it_pt",
    "apical": "ctmhsa.sims.experiments.apical",
    "fingerprints": "ctmhsa.sims.experiments.fingerprints",
}


def experiment(name: str):
    """The module of experiment ``name`` (a key of :data:`EXPERIMENTS`)."""
    if not isinstance(name, str) or name not in EXPERIMENTS:
        raise ValueError(f"experiment: unknown {name!r}; expected one of {sorted(EXPERIMENTS)}")
    return import_module(EXPERIMENTS[name])


def run_experiment(name: str, out=None, **options) -> dict:
    """Run experiment ``name``; see :func:`ctmhsa.sims.experiments.protocol.run`."""
    from .protocol import run

    return run(experiment(name), out=out, **options)
