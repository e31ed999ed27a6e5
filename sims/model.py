"""Simulate a transformer model, block by block in one network: :func:`simulate_model`.

The circuit (:func:`ctmhsa.circuits.transformer.model_circuit`) is built once from the model's
weights and the declared input range (:mod:`ctmhsa.mapping.blocks`); the tokens shown only set the
input relays' rates (a table over time for a stream). Every stage of every block is decoded from
the cells and compared with :func:`ctmhsa.maths.transformer.transformer_forward`.
"""

from __future__ import annotations

import dataclasses
import os
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ctmhsa.circuits import dale
from ctmhsa.devices.registry import DEVICES, get_device
from ctmhsa.circuits.transformer import model_circuit
from ctmhsa.circuits.parts import get_area
from ctmhsa.mapping import kvmemory
from ctmhsa.mapping.baseline import add_lif_drive, remove_baselines
from ctmhsa.mapping.blocks import decode_model, encode_model, model_sizes
from ctmhsa.mapping.triad import encode_co4_model
from ctmhsa.mapping.decode import range_report
from ctmhsa.mapping.noise import warn_noise_dominated
from ctmhsa.maths.co4 import Co4Model, co4_forward
from ctmhsa.maths.model import Model, load_model
from ctmhsa.mapping.model_noise import model_floors
from ctmhsa.maths.stages import BLOCK_STAGES, CO4_BLOCK_STAGES, symbol
from ctmhsa.maths.transformer import plain_model, tokens_of, transformer_forward

from . import profile
from .io import atomic_savez, atomic_write_json, results_directory
from .jsonfile import to_json
from .physiology import RateTable, rate_table, spikes_between
from ctmhsa.neurons.levels import LEVELS, get_level
from ctmhsa.neurons.params import HIGH_CONDUCTANCE, seconds
from ctmhsa.neurons.window import fano_factors, stream_delays

from .options import (AUTO_CYTHON_SYNAPSES, N_CHUNKS, CircuitOptions, RunOptions, check_applies, check_run,
                      given_options, max_dt, refuse_for_area, split_options)
from ctmhsa.circuits.fold import fold_plan, simulated_synapse_count
from ctmhsa.circuits.memory import estimate_memory, stream_memory

from .build import _check_runtime, _stream_timing
from .validate import available_memory
from .result import stage_metrics
from .runners import RuntimeRunner, runner_for

__all__ = ["simulate_model", "ModelResult", "MODEL_WARMUP_PER_BLOCK", "MODEL_COPIES", "RATE_TIME_PER_BLOCK",
           "MODEL_LAG_FRACTION", "MODEL_DEVICES", "model_devices", "CAUSAL_PARAMS", "BRIEF_PARAMS", "CAUSAL_CELLS",
           "causal_cells", "CAUSAL_SETTLE", "causal_lag",
           "ModelRun", "prepare_model_run", "finish_model_run"]

MODEL_WARMUP_PER_BLOCK = 0.25
"""Warm-up per block (s) at the spiking levels: each block adds about eight cell stages of
10-20 ms and two integral-feedback loops before its output settles (measured, docs/transformer.md)."""

MODEL_COPIES = 4
"""Cells per represented value (``P``) of a model's spiking populations by default: with 60 Hz
per RMS unit (the hidden cells' too, before their sparse gain of version 0.15) a random two-block
model's output reached r = 0.95-0.99 in a 2 s window (three seeds; one cell per value: 0.78-0.92;
docs/transformer.md). The rate level uses one."""

RATE_TIME_PER_BLOCK = 1.0
"""Simulated time per block (s) at the rate level (docs/transformer.md, "Settling");
``diagnostics["settled"]`` reports the change over the last 10 % of the run."""

MODEL_LAG_FRACTION = 0.5
"""A stream's decoding window starts this fraction of each presentation after its start (a
causal model's: :func:`causal_lag`)."""

CAUSAL_PARAMS = HIGH_CONDUCTANCE.replace(tau_relay=5e-3)
"""A causal model's cells by default (``params`` not given), at every level: 5 ms somata and
dendrites (the awake high-conductance state) and 5 ms relays, as the digits circuit's. A token
per 0.2 s leaves the chain of a block and the read-out (relays, memory read-out, L5 PT, higher-
order relays, read-out relays, class cells) about 0.1 s to follow each token: with the default
40 ms relays the window read the previous token (``recall``, 8 pairs, escape, P = 16, 0.2 s:
0 % recall, logits r = 0.22; with these cells 100 %, r = 0.97; docs/language.md)."""

BRIEF_PARAMS = HIGH_CONDUCTANCE.replace(tau_m=2.5e-3, tau_d=2.5e-3, tau_relay=2.5e-3)
"""Cells of 2.5 ms (somata, dendrites, relays) for a deep causal model at 0.2 s per token: the
character model's second block follows each character in half the time. Escape level,
population firing, P = 4, two held-out windows of Twelfth Night at 0.2 s per character: bits per
character +35.7 % of the float model's with :data:`CAUSAL_PARAMS`, +14.0 % with these, +11.2 %
with 1.25 ms cells (docs/language.md). Shorter than the 5 ms the project takes for the awake
high-conductance state (:data:`ctmhsa.neurons.params.HIGH_CONDUCTANCE`): a computational
setting, not a measured cell; the escape level's step is then 0.5 ms (:func:`causal_cells`)."""

CAUSAL_CELLS = dict(causal=CAUSAL_PARAMS, brief=BRIEF_PARAMS)
"""A causal model's cells by name (``--cells`` of ``ctmhsa bench language`` and ``ctmhsa generate``)."""


def causal_cells(name: str, neuron: str) -> dict:
    """Keywords of :func:`simulate_model` for the cells ``name`` of :data:`CAUSAL_CELLS` at level
    ``neuron``: ``params``, and ``dt`` where the level's default step is too coarse for them
    (:func:`ctmhsa.sims.options.max_dt`: 0.5 ms for :data:`BRIEF_PARAMS` at the escape level).

    Raises
    ------
    ValueError
        ``cells`` not one of :data:`CAUSAL_CELLS`.
    """
    if name not in CAUSAL_CELLS:
        raise ValueError(f"cells: expected one of {sorted(CAUSAL_CELLS)}, got {name!r}")
    params = CAUSAL_CELLS[name]
    out = dict(params=params)
    bound, _ = max_dt(CircuitOptions(neuron=neuron, params=params))
    if get_level(neuron).dt > bound * (1 + 1e-9):
        out["dt"] = bound
    return out


CAUSAL_SETTLE = 0.1
"""Seconds after a causal model's token reaches its relays (:data:`ctmhsa.mapping.kvmemory.WRITE_WINDOW`
into the presentation) before its output is read (:func:`causal_lag`), with :data:`CAUSAL_PARAMS`."""


def causal_lag(presentation: float) -> float:
    """A causal model's default decoding lag (s): the token's arrival plus :data:`CAUSAL_SETTLE`
    where that leaves a window of at least 50 ms (0.2 s: the window 0.12-0.2 s), else half the
    presentation."""
    settle = kvmemory.WRITE_WINDOW + CAUSAL_SETTLE
    return settle if presentation >= settle + 0.05 - 1e-12 else MODEL_LAG_FRACTION * presentation

MODEL_DEVICES = ("runtime", "cpp_standalone")
"""The shipped devices a model runs on (:func:`model_devices`: every registered one that runs in
this process, or compiles a project that takes its inputs as run arguments). On
``cpp_standalone`` one project is compiled per model shape (sizes, level, cells, dt, the
presentation's timing); tokens, weights and the seed are run arguments, and a stream's windows
are read after the run (:class:`ctmhsa.devices.standalone.StreamRead`)."""


def model_devices() -> tuple:
    """The registered devices a model runs on, from their facts: a device that runs in this
    process, or one whose compiled project takes tokens, weights and a stream's table as run
    arguments (``cuda_standalone`` compiles seed and run length in: not one)."""
    return tuple(name for name in DEVICES if not get_device(name).compiles or get_device(name).run_args)

SETTLED = 1e-4
"""Largest relative change of the rate-level output over the last 10 % of a run before
:func:`simulate_model` warns that it has not settled."""


@dataclass
class ModelResult:
    """A simulated transformer model.

    Attributes
    ----------
    output, reference : ndarray, shape ((T,) n, de)
        The last block's stream, decoded from its cells, and :func:`transformer_forward`'s.
    logits, reference_logits : ndarray, shape ((T,) classes), or None
        Class scores from the read-out's cells and exact (``None`` without a read-out).
    blocks, reference_blocks : list of dict
        Per block every stage (:data:`ctmhsa.maths.stages.BLOCK_STAGES`), decoded and exact;
        a stream adds a leading presentation axis.
    metrics : dict
        ``blocks``: per block ``{stage: stage_metrics}``; ``output``, ``logits``;
        for a stream also ``presentations``: the output's metrics per presentation.
    counts : dict
        Population -> neurons; ``parts`` groups them (input, per block: relays, TRN, attention,
        residual, MLP; read-out).
    rates : dict
        Population -> per-cell rate (Hz) of the (last) window. The rate table
        (:meth:`rate_table`) of a stream pools every presentation's window.
    spikes : dict
        Population -> ``(cell_index, time_s)`` of the recorded populations.
    config : dict
        Options, model, sizes, gains (Hz per unit of every code), calibration scales.
    timings : dict
        ``build``, ``compile``, ``run``, ``decode`` (reading the stages and floors), ``total`` (s).
    diagnostics : dict
        ``range``: per population the cells outside their working range
        (:func:`ctmhsa.mapping.decode.range_report`; of a stream, its worst presentation's);
        ``rates``: the rate table's rows (of a stream, every presentation's window; at the spiking
        levels the pooled Fano factors, and the ISI CV of the populations whose spikes were recorded,
        over the run after its warm-up); ``settled`` (rate level): the largest change
        of the output over the last 10 % of the run (of any presentation of a stream), relative
        to its largest entry; a stream's ``settled_per_presentation`` (a warning above
        :data:`SETTLED`); ``spikes_per_input`` (spiking levels): an estimate of every cell's spikes
        per token set, the decoding windows' rates times a presentation (the transient before a
        window is counted at the window's rate), or times the window of one set.
    """

    output: np.ndarray
    reference: np.ndarray
    logits: np.ndarray | None
    reference_logits: np.ndarray | None
    blocks: list
    reference_blocks: list
    metrics: dict
    counts: dict
    rates: dict
    spikes: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    diagnostics: dict = field(default_factory=dict)

    def table(self) -> str:
        """Error per stage per block (NRMSE, r) as text."""
        lines = [f"{'block':<6}{'stage':<8}{'NRMSE':>9}{'floor':>9}{'ratio':>7}{'r':>8}"]

        def row(l, label, m):
            fl = m.get("floor")
            extra = f"{fl:>9.4f}{m['nrmse'] / fl:>7.2f}" if fl else f"{'-':>9}{'-':>7}"
            return f"{l:<6}{label:<8}{m['nrmse']:>9.4f}{extra}{m['r']:>8.4f}"

        for l, st in enumerate(self.metrics["blocks"]):
            lines.extend(row(l, symbol(k), m) for k, m in st.items())
        for k in ("output", "logits"):
            if self.metrics.get(k):
                lines.append(row("-", k, self.metrics[k]))
        return "\n".join(lines)

    def rate_table(self):
        """Firing rates per population beside the range recorded in vivo for its cell type
        (:func:`ctmhsa.sims.physiology.rate_table`; ``str()`` of it is a text table)."""
        return RateTable(self.diagnostics.get("rates", []))

    def save(self, path) -> str:
        """Write a results directory (``kind`` "model"): ``stages.npz`` (decoded and exact, every
        block), ``metrics.json``, ``config.json``, ``rates.json`` (:meth:`rate_table`) and, where
        recorded, ``spikes.npz``.

        Written atomically beside ``path`` and moved over it (:func:`ctmhsa.sims.io.results_directory`):
        an existing path that is not a results directory of this project is never replaced or
        deleted (``OutputError``). Returns the absolute path.
        """
        arrays = {"output": self.output, "reference": self.reference}
        if self.logits is not None:
            arrays.update(logits=self.logits, reference_logits=self.reference_logits)
        for l, (d, r) in enumerate(zip(self.blocks, self.reference_blocks)):
            for k in d:
                if isinstance(d[k], np.ndarray) and k in r:
                    arrays[f"blocks.{l}.{k}"] = d[k]
                    arrays[f"reference.blocks.{l}.{k}"] = r[k]
        with results_directory(path, "path", kind="model") as tmp:
            atomic_savez(os.path.join(tmp, "stages.npz"), **arrays)
            atomic_write_json(os.path.join(tmp, "metrics.json"), self.metrics)
            atomic_write_json(os.path.join(tmp, "config.json"), to_json(self.config))
            atomic_write_json(os.path.join(tmp, "rates.json"), list(self.rate_table()))
            if self.spikes:
                atomic_savez(os.path.join(tmp, "spikes.npz"),
                             **{f"{p}.{k}": v for p, (i, t) in self.spikes.items() for k, v in (("i", i), ("t", t))})
            level = self.config.get("neuron")
            if (level not in LEVELS or get_level(level).spiking) and self.config.get("presentation") is None:
                self.write_nwb(os.path.join(tmp, "spikes.nwb"))
        return os.path.abspath(os.fspath(path))

    @classmethod
    def load(cls, path) -> "ModelResult":
        """Read a results directory written by :meth:`save` (stages, metrics and configuration;
        rates and spikes are not stored there, see ``spikes.nwb``).

        Raises
        ------
        TypeError
            ``path`` is not a path.
        ValueError
            ``path`` is not a directory, or one of its files is missing or damaged (the message
            names the directory, the file and what is wrong: :func:`ctmhsa.sims.io.read_member`).
        """
        from .io import read_member

        if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path: expected a results directory path (a string), got {path!r}")
        folder = os.fspath(path)
        if not os.path.isdir(folder):
            raise ValueError(f"path: {folder!r} is not a results directory of a model (no such directory)")
        arrays = read_member(folder, "stages.npz")
        metrics = read_member(folder, "metrics.json", expect=dict)
        config = read_member(folder, "config.json", expect=dict)
        rates = os.path.join(folder, "rates.json")
        diagnostics = {"rates": read_member(folder, "rates.json", expect=list)} if os.path.lexists(rates) else {}
        if not isinstance(config.get("blocks"), list):
            raise ValueError(f"path: {folder!r}: config.json: expected 'blocks', a list of the blocks' sizes; "
                             f"got {config.get('blocks')!r}")
        missing = [k for k in ("output", "reference") if k not in arrays]
        if missing:
            raise ValueError(f"path: {folder!r}: stages.npz has no array {missing[0]!r} (holds {sorted(arrays)[:6]})")
        L = len(config["blocks"])
        blocks = [{k.split(".", 2)[2]: v for k, v in arrays.items() if k.startswith(f"blocks.{l}.")} for l in range(L)]
        refs = [{k.split(".", 3)[3]: v for k, v in arrays.items() if k.startswith(f"reference.blocks.{l}.")}
                for l in range(L)]
        return cls(output=arrays["output"], reference=arrays["reference"], logits=arrays.get("logits"),
                   reference_logits=arrays.get("reference_logits"), blocks=blocks, reference_blocks=refs,
                   metrics=metrics, counts={}, rates={}, config=config, diagnostics=diagnostics)

    def circuit(self):
        """The circuit description the result was built from (rebuilt from ``config``)."""
        c = self.config
        return model_circuit(c["n"], c["de"], c["blocks"], classes=c["classes"], n_inh=c["n_inh"], P=c["P"],
                             causal=bool(c.get("causal", False)), normalize=bool(c.get("normalize", True)))

    def write_nwb(self, path) -> str:
        """Every cell's population, index axes, window rate and (where recorded) spike train in a
        Neurodata Without Borders file (:func:`ctmhsa.sims.nwb.write_nwb`; spiking levels). An
        existing ``path`` is replaced only when it is an NWB file written by ctmhsa (else
        ``OutputError``)."""
        from types import SimpleNamespace

        from .nwb import write_nwb

        circuit = self.circuit()
        c, b0 = self.config, self.config["blocks"][0]
        view = SimpleNamespace(
            level=c["neuron"], spikes=self.spikes,
            rates={p: circuit.population(p).to_dense(r) for p, r in self.rates.items()},
            config=dict(n=c["n"], de=c["de"], H=b0["H"], dk=b0["dk"], dv=b0["dv"], dt=c["dt"], seed=c["seed"],
                        warmup=c["warmup"], duration=c["duration"], blocks=len(c["blocks"]), model=c["model"]))
        return write_nwb(view, os.fspath(path), circuit=circuit)


def _counts(circuit) -> dict:
    pops = circuit.populations
    parts: dict = {}
    for name, pop in pops.items():
        if name.startswith("b") and "_" in name:
            blk, rest = name.split("_", 1)
            part = ("TRN" if rest.startswith("trn") else "relays (N)" if rest.startswith(("nucleus1", "mlp_relay"))
                    else "residual (nucleus 2)" if rest == "nucleus2" else "MLP hidden" if rest == "hidden"
                    else "output nucleus" if rest == "out" else "attention")
            parts.setdefault(blk, {}).setdefault(part, 0)
            parts[blk][part] += pop.N
        else:
            key = "input" if name == "input" else "read-out"
            parts[key] = parts.get(key, 0) + pop.N
    return dict(populations={k: p.N for k, p in pops.items()}, parts=parts, total=circuit.n_neurons())


def _compare(dec: dict, ref: dict) -> dict:
    return {k: stage_metrics(dec[k], ref[k]) for k in BLOCK_STAGES + CO4_BLOCK_STAGES if k in dec and k in ref
            and np.shape(dec[k]) == np.shape(ref[k])}


def simulate_model(model, X, neuron: str | None = None, presentation: float | None = None, calibration=None,
                   lag: float | None = None, latency: dict | None = None, **options) -> ModelResult:
    """Simulate ``model`` on tokens ``X`` with spiking (or rate) cells.

    Parameters
    ----------
    model : Model, str or path-like
        A :class:`ctmhsa.maths.model.Model`, a model file or a shipped model's name
        (:func:`ctmhsa.load_model`).
    X : array, shape (n, de) or (T, n, de)
        Tokens, or a stream of ``T`` token sets (raw inputs ``(n, p)`` where the model has an
        embedding; the embedding is applied before the input relays).
    neuron : {"rate", "escape", "lif"}
        Fidelity level (default: ``circuit_options.neuron``, else ``"escape"``). At ``"lif"`` the
        cortical cells (L2/3, L5 IT and PT, the memory's cells, the MLP's hidden L6 CT cells and
        the read-out's class cells) have conductance-based somata that fire a baseline, cancelled
        at every target and removed before decoding; the thalamic relays, normalised or not,
        and the interneurons are the escape level's (docs/lif.md, "Models at the lif level").
    presentation : float, optional
        Seconds per token set of a stream (default 0.2 s), at least
        :func:`ctmhsa.sims.options.min_presentation` for the model's depth (two settling time
        constants per block: 80 ms per block with the default 40 ms relays).
    calibration : array, shape (S, n, de) or (S, n, p), optional
        Inputs the circuit is built for (e.g. a training set; raw inputs where the model has an
        embedding): every gain and operating point is fixed from them
        (:func:`ctmhsa.mapping.blocks.calibrate`), and without ``input_range`` they declare it.
        Default: Gaussian draws with the statistics of ``input_range`` (or of ``X``).
    lag : float, optional
        A stream's decoding window is ``[lag, presentation)`` after each set's start (s; streams
        only); default :data:`MODEL_LAG_FRACTION` of the presentation (a block is a chain of about
        eight cell stages: its output follows a new set later than one pathway's, see
        docs/digits.md); a causal model's :func:`causal_lag`.
    latency : dict, optional
        A stream's read-out delays at the spiking levels: population (``"classes"``,
        ``"b0_hidden"``) or block population without its block (``"l5pt"``: every block's) ->
        seconds in ``[0, presentation)``; that population's windows are ``[lag + delay,
        presentation + delay)`` after each set's start, the stage's response latency (the digits
        circuit's class cells at the lif level: 0.15 s with 50 ms L5 couplings, 0.25 s with
        100 ms, about 0.3 s with their own; docs/lif.md, "Digits at 0.5 s"). The run goes on for
        the largest delay after the last set. Default: none.
    **options
        ``duration`` (s; the window at the spiking levels, default 1 s; the simulated time at
        the rate level, default :data:`RATE_TIME_PER_BLOCK` per block), ``warmup`` (s; default
        :data:`MODEL_WARMUP_PER_BLOCK` per block, at least the level's), ``P`` (cells per
        value, default :data:`MODEL_COPIES` at the spiking levels, 1 at the rate level),
        ``seed``, ``dt``, ``phi``, ``n_inh``, ``gains``, ``params`` (a causal model's default
        :data:`CAUSAL_PARAMS`), ``input_range``,
        ``record_spikes`` (population names such as ``"b0_l23"``; a name without its block,
        ``"l23"``, selects that population in every block), ``codegen``, ``report``, ``fold``,
        ``firing``, ``max_memory``, ``max_runtime``, ``dale`` (Dale's law: feedforward inhibitory
        followers carry every negative weight, :mod:`ctmhsa.circuits.dale`), ``device`` (one of
        :data:`MODEL_DEVICES`; on ``cpp_standalone`` other tokens of the same shape reuse the
        compiled project), ``threads`` (the standalone device's OpenMP threads), and
        ``coupling`` (lif soma cell type -> its dendro-somatic coupling, s:
        :attr:`ctmhsa.sims.options.CircuitOptions.coupling`),
        ``circuit_options``/``run_options`` (:mod:`ctmhsa.sims.options`; keywords override their
        fields, fields left at their defaults take the model's defaults above).

    Returns
    -------
    ModelResult

    Raises
    ------
    ValueError, TypeError
        A bad argument (naming it), an option that does not apply to models
        (:data:`ctmhsa.sims.options.APPLIES`: ``causal``, ``circuit``, ``signed``, ``law``,
        ``normalize``, a scheduler, checkpoints; a device not in :data:`MODEL_DEVICES`; ``duration`` on a
        stream, ``lag`` or ``latency`` on one set or at the rate level), a presentation below the minimum,
        tokens outside the declared
        range, or a division of the circuit these tokens need that it cannot exert
        (:class:`ctmhsa.mapping.operating.OperatingRangeError`) — before any network is built.
    """
    t0 = time.perf_counter()
    run = prepare_model_run(model, X, neuron, presentation, calibration, lag, options, latency=latency)
    return finish_model_run(run, run.runner.run(run.run_ro), t0)


@dataclass
class ModelRun:
    """A model's network ready to run (:func:`prepare_model_run`): the checked tokens
    ``(T, 1, de)`` of a causal model, else as given, the options, the encoded circuit and its
    runner, the exact model on the tokens (``ref``; ``None``: computed by :func:`finish_model_run`,
    after a closed loop replaced the tokens); :func:`finish_model_run` decodes what it observed."""

    model: Model
    tokens: np.ndarray
    stream: bool
    one: bool
    co: CircuitOptions
    ro: RunOptions
    run_ro: RunOptions
    circuit: object
    menc: object
    runner: object
    n: int
    ref: dict | None = None


def as_model(model, co4: bool = True):
    """``model`` as a :class:`Model` or a :class:`ctmhsa.maths.co4.Co4Model`: itself, or the
    model file or shipped model it names. ``co4=False``: a Co4 model, which the caller does not
    run (a transformer's closed-loop generation), is a ``ValueError`` naming ``model``."""
    if isinstance(model, (str, os.PathLike)):
        model = load_model(model)
    if isinstance(model, Model) or (co4 and isinstance(model, Co4Model)):
        return model
    if isinstance(model, Co4Model):   # a model file's kind is its keys': refused by name, not by a failure later
        raise ValueError(f"model: {model.name or 'the model'} is a Co4 model (ctmhsa.maths.co4.Co4Model); this "
                         f"runs transformer models only")
    raise TypeError(f"model: expected a ctmhsa Model or Co4Model, a model file or a shipped model's name, "
                    f"got {type(model).__name__}")


def _sizes(model) -> list:
    """The blocks' sizes of a transformer or a Co4 model (:func:`model_circuit`)."""
    return model.sizes if isinstance(model, Co4Model) else model_sizes(model)


def prepare_model_run(model, X, neuron, presentation, calibration, lag, options: dict,
                      latency: dict | None = None) -> "ModelRun":
    """Everything :func:`simulate_model` does before the network runs: the arguments checked,
    the circuit built and encoded, its runner made (arguments as :func:`simulate_model`'s)."""
    model = as_model(model)
    co_in, ro_in = options.get("circuit_options"), options.get("run_options")
    plain = {k: v for k, v in options.items() if k not in ("circuit_options", "run_options")}
    if neuron is None:   # the level of circuit_options where given
        neuron = co_in.neuron if co_in is not None and hasattr(co_in, "neuron") else "escape"
    if neuron not in LEVELS:
        raise ValueError(f"neuron: expected one of {', '.join(LEVELS)}, got {neuron!r}")
    # every option applies to a model or is refused (options.APPLIES), those inside the option objects too
    given = given_options(co_in if isinstance(co_in, CircuitOptions) else None,
                          ro_in if isinstance(ro_in, RunOptions) else None,
                          **plain, presentation=presentation, lag=lag, latency=latency, calibration=calibration)
    check_applies("model", given)
    tokens = tokens_of(model, X)
    if model.causal:   # one token per presentation: the sequence as a stream of one-token sets
        if tokens.ndim != 2:
            raise ValueError(f"X: a causal model reads one sequence (T, {'p' if model.embed_W is not None else 'de'})"
                             f", one token per presentation; got shape {np.shape(X)}")
        tokens = tokens[:, None, :]
    stream = tokens.ndim == 3
    if 0 in tokens.shape:
        raise ValueError(f"X: an empty {'stream' if stream else 'token set'}: every axis must be non-empty; "
                         f"got shape {np.shape(X)}")
    if stream:   # a stream's timing: T x presentation, no duration
        check_applies("stream", {k: v for k, v in given.items() if k.rsplit(".", 1)[-1] == "duration"})
    elif lag is not None or latency is not None:
        name = "lag" if lag is not None else "latency"
        raise ValueError(f"{name}: the decoding {'lag' if lag is not None else 'delays'} of a stream's presentations; "
                         f"X is one token set, shape {np.shape(X)} (give a stream (T, n, de) or leave {name} out)")
    elif presentation is not None or given.get("run_options.presentation") is not None:
        raise ValueError(f"presentation: a presentation period needs a stream of token sets, X of shape "
                         f"(T, n, de); X is one token set, shape {np.shape(X)} (give duration= instead)")

    def default(name):   # neither a keyword nor a field of the option objects sets it
        return name not in plain and f"circuit_options.{name}" not in given and f"run_options.{name}" not in given

    if default("P"):
        options["P"] = MODEL_COPIES if get_level(neuron).spiking else 1
    if model.causal and default("params"):
        options["params"] = CAUSAL_PARAMS
    # presentation=None would replace run_options.presentation: pass it only where given
    co, ro = split_options(neuron=neuron, **options, **({} if presentation is None else {"presentation": presentation}))
    ro = _stream_timing(ro, tokens.shape[0] if stream else None, co.neuron)
    if default("warmup") and co.spiking:
        ro = ro.replace(warmup=max(co.level.warmup, MODEL_WARMUP_PER_BLOCK * model.n_blocks))
    if not co.spiking and default("duration") and not stream:
        ro = ro.replace(duration=RATE_TIME_PER_BLOCK * model.n_blocks)
    # a causal model's blocks are memory circuits: what they do not build is refused, and its
    # step and presentation are checked as theirs
    if model.causal:
        _check_causal_options(co)
    block_co = co.replace(circuit="memory") if model.causal else co
    ro = ro.resolved(co.neuron, block_co.circuit)
    try:   # dt, the window, a presentation of the model's depth
        check_run(block_co, ro, blocks=model.n_blocks)
    except ValueError as exc:
        if not model.causal:
            raise
        raise ValueError(f"{exc} (a causal model's blocks are memory circuits)") from None
    if ro.device not in model_devices():
        raise ValueError(f"device: a model runs on {' or '.join(map(repr, model_devices()))}, got {ro.device!r}")
    # the rate level's settling check on a compiled device: one set as a stream of one
    # presentation, its state sampled at 90 % and at the end (read after the run)
    one = not stream and not co.spiking and get_device(ro.device).compiles
    run_ro = ro.replace(presentation=ro.duration) if one else ro
    runner_for(run_ro).check(co, run_ro)
    if stream:   # the decoding window, before anything is built
        if lag is None:
            lag = causal_lag(ro.presentation) if model.causal else MODEL_LAG_FRACTION * ro.presentation
        else:
            lag = seconds("lag", lag, allow_zero=True)
        if not lag < ro.presentation:
            raise ValueError(f"lag: the decoding window [lag, presentation) is empty (lag {lag:g} s, "
                             f"presentation {ro.presentation:g} s)")
        if latency is not None and not co.spiking:
            raise ValueError(f"latency: the rate level reads each presentation's end state, not windows of spikes; "
                             f"read-out delays apply at the spiking levels (neuron={co.neuron!r})")
        if model.causal and lag < kvmemory.WRITE_WINDOW:
            raise ValueError(f"lag: a causal model's token reaches its relays {kvmemory.WRITE_WINDOW:g} s into each "
                             f"presentation (after the previous token's write); a window opening at {lag:g} s "
                             "would read the previous token")
    n = tokens.shape[-2]
    if isinstance(co.P, dict):
        raise ValueError("P: a model's streams take one number of copies per value (an int), got a dict")
    cal = None if calibration is None else tokens_of(model, calibration, "calibration")
    if cal is not None and (cal.ndim != 3 or 0 in cal.shape):
        raise ValueError(f"calibration: expected one or more sets of inputs (S, n, "
                         f"{'p' if model.embed_W is not None else 'de'}), got shape {np.shape(calibration)}"
                         f"{' (empty)' if cal.ndim == 3 else ''}")
    co4 = isinstance(model, Co4Model)
    if co4:   # its block is the Co4 area: what that area does not build is refused
        refuse_for_area(co, get_area("co4"), "a Co4 model's block is the Co4 area; ")
    circuit = model_circuit(n, model.de, _sizes(model), classes=0 if model.readout_W is None
                            else int(model.readout_W.shape[0]), n_inh=co.n_inh, P=int(co.P),
                            causal=model.causal, normalize=model.memory_normalised,
                            latents=model.shape["L"] if co4 else 0)
    built = co.as_built(circuit)   # Dale's followers are counted; the encoding is the plain circuit's
    if not isinstance(ro.record_spikes, bool):
        ro = ro.replace(record_spikes=_recorded_populations(ro.record_spikes, built.populations))
    _check_size(built, co, ro, tokens.shape[0] if stream else 0)
    delays = _read_out_delays(latency, built.populations, ro.presentation, ro.dt) if stream else None
    ref = _reference(model, tokens, co.phi)   # before the build: a model these tokens break is refused here
    if co4:
        menc = encode_co4_model(circuit, model, tokens, gains=co.code_gains, params=co.params, phi=co.phi,
                                input_range=co.input_range, calibration=cal)
    else:
        menc = encode_model(circuit, model, tokens, gains=co.code_gains, params=co.params, phi=co.phi,
                            input_range=co.input_range, calibration=cal,
                            timing=dict(presentation=ro.presentation, dt=ro.dt) if model.causal else None)
    # lif somata: driven on their calibrated branch, their baselines cancelled at every target (a
    # bias, or an interneuron pool's set point raised), as for one layer (no-op at the other levels)
    add_lif_drive(circuit, menc.values, co.neuron, ro.dt)
    if co.dale:   # the followers share the plain circuit's weights
        dale.add_values(built, menc.values)
    circuit = built
    if stream or one:
        menc.stream = _stream_table(menc, run_ro, circuit if model.causal else None)
    compiled = get_device(ro.device).compiles
    if ro.codegen == "auto" and not compiled:   # the synapses Brian2 holds decide, as for one layer
        held = simulated_synapse_count(circuit, fold_plan(circuit, co.neuron) if co.fold else {})
        ro = run_ro = ro.replace(codegen="cython" if held >= AUTO_CYTHON_SYNAPSES else "numpy")
    runner = (runner_for(run_ro) if compiled else RuntimeRunner)(circuit, menc, None, co, run_ro)
    if stream:
        runner.lag = lag
        runner.latency = delays
    return ModelRun(model=model, tokens=tokens, stream=stream, one=one, co=co, ro=ro, run_ro=run_ro,
                    circuit=circuit, menc=menc, runner=runner, n=n, ref=ref)


def finish_model_run(run: "ModelRun", obs, t0: float) -> ModelResult:
    """Decode the observations ``obs`` of a :class:`ModelRun` and compare them with the exact
    model on ``run.tokens`` (the tokens shown, known only after a closed-loop run)."""
    model, tokens, stream, one, co, ro, circuit, menc, runner, n = (
        run.model, run.tokens, run.stream, run.one, run.co, run.ro, run.circuit, run.menc, run.runner, run.n)
    ref = run.ref if run.ref is not None else _reference(model, tokens, co.phi)   # (a closed loop's text: now)
    t_decode = time.perf_counter()
    if one:   # back to one set: its final state, and its state at 90 % of the run
        obs = dataclasses.replace(obs, stream=False, early=obs.early[0])
    snaps = [o for _, o in obs.snapshots] if obs.stream else [obs.final]
    decoded = [decode_model(circuit, menc, _above_baselines(circuit, menc, o)) for o in snaps]
    dec = _stack(decoded, stream)
    if model.causal:   # the sequence's grid: one token per presentation, no token slot
        dec = _one_slot(dec)
    blocks_ref = ref["blocks"]
    metrics = dict(blocks=[_compare(d, r) for d, r in zip(dec["blocks"], blocks_ref)],
                   output=stage_metrics(dec["output"], ref["output"]))
    if ref["logits"] is not None:
        metrics["logits"] = stage_metrics(dec["logits"], ref["logits"])
    if stream:
        metrics["presentations"] = [stage_metrics(d["output"], r) for d, r in zip(decoded, ref["output"])]
    if co.spiking and not stream and not isinstance(model, Co4Model):   # (a Co4 model's floors: not built)
        floors = model_floors(circuit, menc, obs.final, ref, model, ro.duration, co.phi)
        for l, fl in enumerate(floors["blocks"]):
            for k, m in metrics["blocks"][l].items():
                if k in fl:
                    m["floor"] = fl[k]
        for k in ("output", "logits"):
            if k in metrics and k in floors:
                metrics[k]["floor"] = floors[k]
        warn_noise_dominated(floors.get("output"), co.neuron, "the model's output", f"{ro.duration:g} s window",
                             stacklevel=3)   # as one layer's x̃ (sims.readout)
    # a stream's range and rate table cover every presentation's window, not the last one alone
    max_rate = 1.0 / ro.dt if co.spiking else None
    diag = dict(range=_worst_range([range_report(circuit, o, max_rate=max_rate) for o in snaps]))
    if co.spiking:   # every cell's spikes per input (its window's rate over a presentation, or the window)
        per = [sum(float(np.sum(o[p]["rate"])) for p in o if "rate" in o[p]) for o in snaps]
        diag["spikes_per_input"] = float(np.mean(per)) * (ro.presentation if stream else ro.duration)
    if obs.early is not None:   # the rate level: its output at 90 % of the run (of each presentation)
        late = [d["output"] for d in decoded]
        early = [decode_model(circuit, menc, e)["output"] for e in (obs.early if stream else [obs.early])]
        change = [float(np.max(np.abs(e - d)) / (np.max(np.abs(d)) or 1.0)) for e, d in zip(early, late)]
        diag["settled"] = max(change)
        if stream:
            diag["settled_per_presentation"] = change
        if diag["settled"] > SETTLED:
            where = (f"presentation {int(np.argmax(change))} (of {len(change)})" if stream else "the run")
            what = "present each token set longer (presentation=)" if stream else "run longer"
            warnings.warn(f"{'presentation' if stream else 'duration'}: the rate-level output still changed by "
                          f"{diag['settled']:.2g} of its largest entry over the last 10 % of {where} (more than "
                          f"{SETTLED:g}); {what}", stacklevel=3)
    config = dict(model=repr(model), model_source=model.source, neuron=co.neuron, phi=co.phi, n=n, de=model.de,
                  causal=model.causal, forget=model.forget, normalize=model.memory_normalised,
                  blocks=_sizes(model), classes=0 if model.readout_W is None else int(model.readout_W.shape[0]),
                  n_inh=co.n_inh, P=int(co.P), dt=ro.dt, warmup=ro.warmup, duration=ro.duration,
                  presentation=ro.presentation, seed=ro.seed, device=ro.device,
                  lag=runner.lag if stream else None, latency=dict(runner.latency or {}) if stream else None,
                  coupling=co.coupling, fold=co.fold,
                  codegen=None if get_device(ro.device).compiles else ro.codegen,   # the runtime's only
                  threads=runner.config()["threads"], rho=menc.rho,
                  divisions={k: list(v) for k, v in menc.divisions.items()},
                  calibration=menc.consts["calibration"], input_range=menc.consts["input_range"].to_dict(),
                  n_neurons=circuit.n_neurons(), n_synapses=circuit.n_synapses(), circuit=circuit.to_dict())
    rates = {p: np.asarray(o["r"], float) for p, o in obs.final.items() if "r" in o}
    pooled = {p: np.stack([np.asarray(o[p]["r"], float) for o in snaps]) for p in rates}
    fano = spikes = None
    if co.spiking:   # the single cells' irregularity: the windows' chunk spread, the run's recorded spikes
        fano = fano_factors(obs.chunks) if obs.fano is None else dict(obs.fano)
        spikes = spikes_between(obs.spikes or {}, ro.warmup - 0.5 * ro.dt)
    # each rate's counting time: the window of its presentation (one set: the run's window)
    window = float(np.mean([t for t, _ in obs.snapshots])) if stream else ro.duration
    diag["rates"] = rate_table(pooled, {k: p.cell_type for k, p in circuit.populations.items()},
                               roles={k: p.role for k, p in circuit.populations.items()},
                               window=window if co.spiking else None, fano=fano, spikes=spikes)
    timings = dict(build=obs.build, compile=obs.compile, compiled=obs.compiled, run=obs.run,
                   decode=time.perf_counter() - t_decode, total=time.perf_counter() - t0)
    profile.record(timings)
    return ModelResult(
        output=dec["output"], reference=ref["output"], logits=dec.get("logits"), reference_logits=ref["logits"],
        blocks=dec["blocks"], reference_blocks=blocks_ref, metrics=metrics, counts=_counts(circuit),
        rates=rates, spikes=obs.spikes,
        config=config, diagnostics=diag, timings=timings)



def _worst_range(reports: list) -> dict:
    """One :func:`ctmhsa.mapping.decode.range_report` of a stream's presentations: per population
    and entry the worst presentation's (the largest count of cells out of range, the largest
    rate); one presentation's report as it is."""
    return {name: {k: max(r[name][k] for r in reports) for k in rep} for name, rep in reports[0].items()}


def _above_baselines(circuit, menc, obs: dict) -> dict:
    """The observables the decoders read: at the lif level every soma's rates above its baseline
    (:func:`ctmhsa.mapping.baseline.remove_baselines`), on copies, so that the rate table and the
    noise floors keep every spike; the observables themselves at the other levels."""
    return remove_baselines(circuit, menc.values, {p: dict(o) for p, o in obs.items()})


def _check_causal_options(co) -> None:
    """The options a causal model's memory blocks are built with (the memory area's facts,
    :class:`ctmhsa.circuits.builders.StreamMemory`): a ``ValueError`` naming any other."""
    refuse_for_area(co, get_area("memory"), "a causal model's blocks are memory circuits; ")


def _named_populations(names, populations, option: str) -> dict:
    """Each of ``names`` -> the populations it names: a population of ``populations`` itself, a
    block's role without its block (``"l23"``) that population of every block (``"b0_l23"``,
    ``"b1_l23"``, ...); a ``ValueError`` naming ``option`` for a name that is neither."""
    found = {name: [name] if name in populations else [p for p in populations if _role(p) == name]
             for name in names}
    unknown = [name for name, ps in found.items() if not ps]
    if unknown:
        roles = sorted({_role(p) for p in populations if _role(p) != p})
        raise ValueError(f"{option}: {', '.join(map(repr, unknown))} "
                         f"{'is not a population' if len(unknown) == 1 else 'are not populations'} of this model's "
                         f"circuit; its populations are {list(populations)} (a block's population without its "
                         f"block, one of {roles}, selects it in every block)")
    return found


def _recorded_populations(names, populations) -> tuple:
    """``record_spikes`` of a model as population names (:func:`_named_populations`)."""
    return tuple(dict.fromkeys(p for ps in _named_populations(names, populations, "record_spikes").values()
                               for p in ps))


def _read_out_delays(latency, populations, presentation: float, dt: float) -> dict | None:
    """``latency`` of :func:`simulate_model` as population -> delay (s): a block's population
    without its block (``"l5pt"``) names it in every block; a ``ValueError`` naming ``latency``
    for a name that is no population, a delay outside ``[0, presentation)`` or not a whole
    number of steps ``dt`` (both devices read windows at step boundaries), a ``TypeError`` for
    a latency that is not a mapping."""
    if latency is None:
        return None
    if not isinstance(latency, Mapping):
        raise TypeError(f"latency: expected a mapping population -> seconds, got {type(latency).__name__}")
    found = _named_populations(list(latency), populations, "latency")
    out = stream_delays({p: d for name, d in latency.items() for p in found[name]}, presentation, populations)
    for name, d in out.items():
        if abs(d / dt - round(d / dt)) > 1e-6:
            raise ValueError(f"latency: the delay of {name!r} must be a whole number of steps (dt = {dt:g} s), got {d:g} s")
    return out


def _role(population: str) -> str:
    """A block's population without its block prefix (``"b1_l23"`` -> ``"l23"``); others as they are."""
    head, sep, rest = population.partition("_")
    return rest if sep and head[:1] == "b" and head[1:].isdigit() else population


def _check_size(circuit, co, ro, windows: int = 0) -> None:
    """``max_memory`` and ``max_runtime`` as for :func:`ctmhsa.sims.build_mhsa` (``ValueError``
    naming them), before anything is encoded or built; a stream of ``windows`` presentations
    counts what it keeps until its run ends (:func:`ctmhsa.circuits.memory.stream_memory`)."""
    plan = fold_plan(circuit, co.neuron) if co.fold else {}
    n_sim = simulated_synapse_count(circuit, plan)
    limit = int(0.8 * available_memory()) if ro.max_memory is None else float(ro.max_memory)
    need = estimate_memory(circuit, n_sim)
    kept = stream_memory(circuit, co.neuron, plan, windows, N_CHUNKS, get_device(ro.device).compiles)
    if need + kept > limit:
        stream = (f" and a stream of {windows} presentations keeps {kept / 2**30:.2f} GiB until it ends"
                  if kept else "")
        raise ValueError(f"max_memory: the model's network needs an estimated {need / 2**30:.2f} GiB "
                         f"({circuit.n_neurons():,} neurons, {circuit.n_synapses():,} synapses){stream} but the limit "
                         f"is {limit / 2**30:.2f} GiB; use fewer copies (P){', a shorter stream' if kept else ''}, "
                         "or raise max_memory")
    _check_runtime(circuit, co, ro, n_sim)


def _stream_table(menc, ro, causal_circuit=None) -> dict:
    """The input relays' rates over time: the first set during the warm-up, then one row per
    presentation (as :func:`ctmhsa.sims.build._stream_tables`). A causal model's circuit
    (``causal_circuit``): its tokens switch a write window into each presentation and every
    block's write gate opens in that window (:func:`ctmhsa.mapping.kvmemory.token_lead`,
    :func:`~ctmhsa.mapping.kvmemory.gate_table`), as the memory circuit's do."""
    P, W = ro.presentation, ro.warmup
    rates = menc.input_rates
    if causal_circuit is None:
        lead = int(np.ceil(W / P - 1e-9))
        shift = lead * P - W
    else:
        lead, shift = kvmemory.token_lead(P, W)
    rows = np.concatenate([np.repeat(rates[:1], lead + 1, axis=0), rates[1:]], axis=0)
    out = {"input": (rows, P, shift)}
    if causal_circuit is not None:
        for name in causal_circuit.by_role("write_gate"):
            out[name] = kvmemory.gate_table(len(rates), P, W, ro.dt, causal_circuit.population(name).N)
    return out


def _reference(model, tokens, phi: str) -> dict:
    """The exact model (:func:`transformer_forward`); a causal model's on its circuit's grid:
    the sequence ``(T, ...)`` and each block's memory stages as the memory circuit decodes them
    (:func:`ctmhsa.mapping.kvmemory.to_stream`)."""
    if isinstance(model, Co4Model):
        return _co4_reference(model, tokens, phi)
    if not model.causal:
        return transformer_forward(tokens, plain_model(model), phi=phi, stages=True)
    ref = transformer_forward(tokens[:, 0], plain_model(model), phi=phi, stages=True)
    for st in ref["blocks"]:
        st.update(kvmemory.to_stream({k: st[k] for k in ("q", "k", "v", "v_tilde", "M", "x_tilde", "z", "Z")
                                      if k in st}))
        st["x_tilde"] = st["x_tilde"][:, 0]
        st.pop("M", None)
    return ref


def _co4_reference(model: Co4Model, tokens, phi: str) -> dict:
    """A Co4 model's exact stages (:func:`ctmhsa.maths.co4.co4_forward`) as a one-block model's
    (``blocks``, ``output``, ``pooled``, ``logits``; a stream's stacked along its presentations),
    its attention's memory ``S, z`` and normaliser ``Z`` as the Co4 area decodes them."""
    from ctmhsa.circuits.co4 import triad_memory

    def one(x):
        st = co4_forward(x, model, phi=phi)
        block = {k: st[k] for k in ("x_norm", "latents_norm", "q", "k", "v", "q_m", "k_m", "v_m", "kappa", "Z",
                                    "v_tilde", "x_tilde")} | triad_memory(st["k_m"], st["v_m"], phi)
        block.update(x=np.asarray(x, float), h=st["out"], out=st["out"])
        return dict(blocks=[block], output=st["out"], pooled=st["pooled"], logits=st["logits"])

    sets = [one(x) for x in (tokens if tokens.ndim == 3 else [tokens])]
    if tokens.ndim == 2:
        return sets[0]
    stack = lambda key, d: None if d[0][key] is None else np.stack([s[key] for s in d])   # noqa: E731
    return dict(blocks=[{k: np.stack([s["blocks"][0][k] for s in sets]) for k in sets[0]["blocks"][0]}],
                output=stack("output", sets), pooled=stack("pooled", sets), logits=stack("logits", sets))


def _one_slot(dec: dict) -> dict:
    """A causal model's decoded stream without its one token slot: the streams ``(T, de)``
    (attention stages keep the memory circuit's grid)."""
    out = dict(dec, output=dec["output"][:, 0])
    out["blocks"] = [{k: (v[:, 0] if k in ("x", "x_norm", "h", "h_norm", "hidden", "out", "x_tilde") else v)
                      for k, v in b.items()} for b in dec["blocks"]]
    return out


def _stack(decoded: list, stream: bool) -> dict:
    """One decoded dict, or a stream's stacked along a leading presentation axis."""
    if not stream:
        return decoded[0]
    out = {k: np.stack([d[k] for d in decoded]) for k in decoded[0] if k != "blocks"}
    out["blocks"] = [{k: np.stack([d["blocks"][l][k] for d in decoded]) for k in decoded[0]["blocks"][l]
                      if isinstance(decoded[0]["blocks"][l][k], np.ndarray)}
                     for l in range(len(decoded[0]["blocks"]))]
    return out
