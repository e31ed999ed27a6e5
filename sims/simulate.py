"""``simulate_mhsa``: run the thalamo-cortico-thalamic attention circuit and decode it."""

from __future__ import annotations

import os
import time

import numpy as np
from filelock import FileLock

from circuits.builders import CIRCUITS, pathway
from circuits.instantiate import (estimate_memory, fold_plan, instantiate, project_key,
                                  simulated_synapse_count)
from circuits.standalone import project_dir, run_standalone, standalone_device
from mapping.codes import DEFAULT_GAINS, CodeGains
from mapping.decode import decode, range_report
from mapping.encode import encode
from mapping.noise import spike_generation_fano, stage_noise_variance
from mapping.operating import check_operating, enforce
from mapping.reference import linear_mhsa
from neurons.laws import check_law
from neurons.params import DEFAULT_PARAMS, CellParams

from .result import SimulationResult
from .validate import available_memory, check_simulation_args
from .window import counts_as_rates, fano_factors, measure

__all__ = ["simulate_mhsa", "DEFAULT_DT", "AUTO_CYTHON_SYNAPSES"]


DEFAULT_DT = {"rate": 1e-3, "escape": 1e-3, "lif": 1e-4}
"""Default integration step per level (s). The rate level's steady state does not depend on
dt (exponential Euler is exact for its linear compartments); escape cells spike with
probability r dt, exact in expectation while r dt < 1 (1 ms: rates up to a few hundred Hz);
LIF somata need 0.1 ms for their threshold crossings."""

DEFAULT_WARMUP = {"rate": 0.0, "escape": 0.5, "lif": 0.5}
"""Discarded warm-up before the measurement window (s): the interneurons settle in ~0.1 s."""

N_CHUNKS = 10
"""Spike counts are taken at this many equal chunks of the measurement window (one run, see
:func:`sims.window.measure`); the spread of the chunk counts gives each population's Fano factor."""

AUTO_CYTHON_SYNAPSES = 200_000
"""With ``codegen="auto"``, networks with at least this many synapses use Cython (compiled once
per code object and cached); smaller ones use Brian2's numpy target, which needs no compiler."""


def simulate_mhsa(
    X,
    WQ,
    WK,
    WV,
    WO,
    phi: str = "elu1",
    neuron: str = "escape",
    duration: float = 1.0,
    seed: int = 0,
    Y=None,
    causal: bool = False,
    dt: float | None = None,
    codegen: str = "auto",
    params: CellParams | None = None,
    gains: CodeGains | None = None,
    max_memory: int | None = None,
    report=None,
    warmup: float | None = None,
    record_spikes=False,
    P: int | dict = 1,
    n_inh: int = 10,
    signed: str = "onoff",
    checkpoints=(),
    device: str = "runtime",
    threads: int | None = None,
    scheduler=None,
    normalize: bool = True,
    WS=None,
    circuit: str = "quadratic",
    law: str = "product",
    fold: bool = True,
) -> SimulationResult:
    """Simulate multihead linear self-attention in a cortico-thalamic circuit.

    Builds the pathway nucleus 1 → H areas → nucleus 2 (SPEC §3) in Brian2, encodes the tokens
    and weights into rates, synaptic weights and biases, runs it, decodes every stage from the
    neurons and compares it with :func:`mapping.reference.linear_mhsa`.

    Parameters
    ----------
    X : array, shape (n, de)
        Tokens (thalamic nucleus 1).
    WQ, WK : array, shape (H, dk, de)
    WV : array, shape (H, dv, de)
    WO : array, shape (H, de, dv)
    phi : {"elu1", "relu", "softplus", "exp"}
        Dendritic feature map.
    neuron : {"rate", "escape", "lif"}
        Fidelity level.
    duration : float
        Simulated biological time (s). At the rate level the decoded values are the final
        state; at the spiking levels, the measurement window (after ``warmup``).
    seed : int
        Random seed of the spiking levels (the rate level is deterministic).
    Y : array, shape (m, de), optional
        Key/value tokens for cross-attention (a second input nucleus).
    causal : bool
        Causal masking: microcolumns j > i are absent.
    dt : float, optional
        Integration step (s); default :data:`DEFAULT_DT` of the level.
    codegen : {"auto", "numpy", "cython"}
        Brian2 code-generation target (runtime device).
    params : CellParams, optional
        Physiological constants (default :data:`neurons.params.DEFAULT_PARAMS`).
    gains : CodeGains, optional
        Gains of the affine codes (default :data:`mapping.codes.DEFAULT_GAINS`).
    max_memory : int, optional
        Refuse networks whose estimated memory exceeds this many bytes (default: 80 % of the
        available memory).
    report : None, "text" or callable
        Brian2 progress report during the run.
    warmup : float, optional
        Discarded time before the measurement window (s); default :data:`DEFAULT_WARMUP`.
    record_spikes : bool or tuple of str
        Keep spike times (all populations or the named ones) in ``res.spikes``.
    P : int or dict
        Population coding: neurons per represented dimension, for every population or per
        population name (e.g. ``{"l5pt": 10, "nucleus2": 10}``); see
        :func:`circuits.builders.build`. Rates of a population with P > 1 get a trailing axis.
    n_inh : int
        Divisive interneurons per macrocolumn.
    signed : {"onoff", "offset"}
        Code of the signed read-outs ṽ and x̃ (see :func:`circuits.builders.build`).
    checkpoints : sequence of float
        Spiking levels: window lengths (s, < ``duration``) at which every stage is also decoded
        from the window so far; ``res.checkpoints`` lists ``{"T", "metrics"}`` (error vs
        simulated time from one run). The final window is always the last entry. Runtime
        device only.
    device : {"runtime", "cpp_standalone"}
        Brian2 device. ``"runtime"`` runs in this process (Cython or numpy, see ``codegen``);
        ``"cpp_standalone"`` compiles the network shape once into a cached C++ project (see
        :mod:`circuits.standalone`) and passes tokens, weights and the seed as run arguments, so
        further calls on the same shape do not compile. The two devices use different random
        number generators: the same seed gives the same spikes on the same device, not across
        devices (the rate level agrees to ~1e-12).
    threads : int, optional
        OpenMP threads of the standalone device (default: all cores, ``os.cpu_count()``;
        0 = no OpenMP). Part of the compiled shape.
    normalize : bool
        ``False``: the unnormalised variant — no interneurons, salience s = phi(q) phi(k)
        (SPEC: ``linear_mhsa(normalize=False)``); the L2/3 -> L5 IT weights then scale the
        apical input by 1/dk.
    WS : array, shape (H, dv, de), optional
        Skip connection: core thalamic axons onto L5 PT add ``WS x_i`` to ṽ_i (and ``WO WS x_i``
        to x̃_i); the reference is extended alike (:func:`mapping.reference.linear_mhsa`).
    circuit : {"quadratic", "linear"}
        ``"quadratic"``: Algorithm 1, one microcolumn per query-key pair (n m microcolumns per
        head). ``"linear"``: the linear-time key-value-memory circuit (paper discussion, "Beyond
        quadratic scaling"): outer-product cells write S = Σ_j phi(k_j) v_jᵀ and z = Σ_j phi(k_j)
        once per head, and every query macrocolumn reads them out (see
        :mod:`circuits.builders`); its decoded stages are q, k, v, S, z, Z, ṽ, x̃, compared with
        ``linear_mhsa(method="linear")``. No causal variant.
    law : str
        Interaction law of the L5 IT somata between basal value R and apical attention C
        (:data:`neurons.laws.LAWS`): ``"product"`` (Algorithm 1, default) or one of Adeel's
        two-point-neuron laws ``"co4"``, ``"tm1"`` ... ``"tm4"``. The circuit is decoded as if
        it multiplied, so the metrics measure how far a law departs from attention;
        :func:`neurons.laws.attention_under_law` predicts what it computes instead.
    fold : bool
        Simulate deterministic compartments that receive identical synapses (every
        macrocolumn's copy of a key or value dendrite, every microcolumn's copy of a query
        dendrite and shunted soma, the attention dendrites of a microcolumn's L5 IT cells) once,
        with every cell linked to its class (:mod:`circuits.fold`). Exact: the same seed gives
        the same spikes with ``fold=False``; at barrel size Brian2 holds 7.6 % of the
        description's synapses. Every cell keeps its own spike generation.
    scheduler : None, "serial", "local", address or ``distributed.Client``
        ``None``: one network. Otherwise the pathway is split at its nuclei and every head
        runs as its own task (spiking levels, runtime device): ``"serial"`` in this process,
        ``"local"`` on a dask ``LocalCluster``, an address on that dask scheduler. The split
        run gives the same spikes wherever it runs (see :mod:`sims.distributed`).

    Returns
    -------
    SimulationResult

    Raises
    ------
    ValueError, TypeError
        Bad arguments, or a network that would not fit in memory (message gives the estimate).
    """
    t_start = time.perf_counter()
    a = check_simulation_args(X, WQ, WK, WV, WO, phi, neuron, duration, seed, Y, causal, dt, codegen,
                              warmup, normalize)
    params = DEFAULT_PARAMS if params is None else params
    gains = DEFAULT_GAINS if gains is None else gains
    if not isinstance(params, CellParams):
        raise TypeError(f"params: expected neurons.params.CellParams, got {type(params).__name__}")
    if not isinstance(gains, CodeGains):
        raise TypeError(f"gains: expected mapping.codes.CodeGains, got {type(gains).__name__}")
    dt = a["dt"] or DEFAULT_DT[neuron]
    if not isinstance(fold, (bool, np.bool_)):
        raise TypeError(f"fold: expected a bool, got {type(fold).__name__}")
    try:
        checkpoints = tuple(float(x) for x in checkpoints)
    except (TypeError, ValueError):
        raise TypeError(f"checkpoints: expected a sequence of times in seconds, got {checkpoints!r}") from None
    bad = [x for x in checkpoints if not 0 < x < a["duration"]]
    if bad:
        raise ValueError(f"checkpoints: every time must lie in (0, duration = {a['duration']}) s; got {bad}")
    if checkpoints and neuron == "rate":
        raise ValueError("checkpoints: the rate level has no counting window; use a spiking level")
    if device not in ("runtime", "cpp_standalone"):
        raise ValueError(f"device: expected 'runtime' or 'cpp_standalone', got {device!r}")
    if checkpoints and device != "runtime":
        raise ValueError("checkpoints: only the runtime device reads the network during a run; "
                         "use device='runtime' or separate runs")
    if scheduler is not None:
        if neuron == "rate":
            raise ValueError("scheduler: heads are split at the spiking levels; the rate level is "
                             "deterministic and runs as one network (scheduler=None)")
        if device != "runtime" or checkpoints:
            raise ValueError("scheduler: a split run uses the runtime device without checkpoints")
        if not (scheduler in ("serial", "local") or isinstance(scheduler, str)
                or type(scheduler).__name__ == "Client"):
            raise ValueError(f"scheduler: expected None, 'serial', 'local', an address or a "
                             f"distributed.Client; got {scheduler!r}")
    if circuit not in CIRCUITS:
        raise ValueError(f"circuit: expected one of {list(CIRCUITS)}, got {circuit!r}")
    kind, linear = circuit, circuit == "linear"   # `circuit` names the description below
    check_law(law)
    if law != "product" and linear:
        raise ValueError("law: the linear circuit has no L5 IT cells; two-point-neuron laws apply "
                         "to circuit='quadratic'")
    if threads is None:
        threads = os.cpu_count() or 1
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 0:
        raise ValueError(f"threads: expected an integer >= 0 (0 = no OpenMP), got {threads!r}")
    X, Yk = a["X"][0], (None if Y is None else a["Y"][0])
    WQ, WK, WV, WO = a["WQ"], a["WK"], a["WV"], a["WO"]
    if WS is not None:   # validated here, before anything is built
        linear_mhsa(X, WQ, WK, WV, WO, phi=phi, Y=Yk, causal=causal, normalize=normalize, WS=WS)
        WS = np.asarray(WS, float)

    circuit = pathway(a["n"], a["dk"], a["dv"], a["de"], H=a["H"], m=a["m"],
                      cross=Y is not None, causal=causal, P=P, n_inh=n_inh, signed=signed,
                      normalize=normalize, skip=WS is not None, circuit=kind)
    # synapses Brian2 will hold: fewer than the description's when compartments are folded
    n_simulated = simulated_synapse_count(circuit, fold_plan(circuit, neuron) if fold else {})
    need = estimate_memory(circuit, n_simulated)
    limit = int(0.8 * available_memory()) if max_memory is None else int(max_memory)
    if need > limit:
        raise ValueError(
            f"max_memory: the network needs an estimated {need / 2**30:.2f} GiB "
            f"({circuit.n_neurons():,} neurons, {circuit.n_synapses():,} synapses) but the limit is "
            f"{limit / 2**30:.2f} GiB; reduce n, m, H, dk, dv or de, or raise max_memory")
    if codegen == "auto":
        codegen = "cython" if circuit.n_synapses() >= AUTO_CYTHON_SYNAPSES else "numpy"

    # the reference is computed for comparison only; nothing of it enters the circuit
    ref = linear_mhsa(X, WQ, WK, WV, WO, phi=phi, Y=Yk, causal=causal, normalize=normalize, WS=WS,
                      method="linear" if linear else "vectorized")
    enc = encode(circuit, X, WQ, WK, WV, WO, Y=Yk, gains=gains, params=params, phi=phi, WS=WS)
    if neuron == "escape":   # escape cells correct phi for their dendrites' spike-noise variance
        from mapping.dendrites import add_phi_variances

        add_phi_variances(circuit, enc.values, params, dt)
    warm = 0.0 if neuron == "rate" else (DEFAULT_WARMUP[neuron] if a["warmup"] is None else a["warmup"])
    noise_var, early_obs = {}, None
    if scheduler is not None:
        from .distributed import run_split

        built = None
        sa = run_split(circuit, enc, X, WQ, WK, WV, WO, Yk, gains, phi, params, neuron, dt, codegen,
                       a["seed"], warm, a["duration"], N_CHUNKS, scheduler, record_spikes, WS=WS, law=law,
                       fold=fold)
        t_compile, t_run, obs = sa["compile"], sa["run"], sa["obs"]
    elif device == "cpp_standalone":
        key = project_key(circuit, neuron, phi, params, dt, (warm, a["duration"], N_CHUNKS), int(threads),
                          law=law, fold=fold)
        where = project_dir(key)
        with FileLock(where + ".lock"), standalone_device(where, int(threads)):
            built = instantiate(circuit, neuron, enc.values, phi=phi, params=params, dt=dt,
                                seed=a["seed"], record_spikes=record_spikes, device=device, law=law,
                                fold=fold)
            sa = run_standalone(built, warm, a["duration"], where, int(threads), N_CHUNKS, report)
        t_compile, t_run = sa["compile"], sa["run"]
        obs = counts_as_rates(sa["obs"])
    else:
        built = instantiate(circuit, neuron, enc.values, phi=phi, params=params, dt=dt, codegen=codegen,
                            seed=a["seed"], record_spikes=record_spikes, law=law, fold=fold)
        t_compile = built.prepare()
    if device == "cpp_standalone" and neuron == "rate":
        stages = decode(circuit, enc, obs)
        change, fano = float("nan"), {}
    elif device == "cpp_standalone" or scheduler is not None:
        fano = fano_factors(sa["chunks"])
        snapshots = [(a["duration"], obs)]
        change = float("nan")
    elif neuron == "rate":
        # run 90 % of the time, look, run the rest: the change of every observable over the last
        # 10 % says how settled the rate dynamics are, without looking at the reference (and the
        # operating check below says whether they settled at the intended fixed point)
        t_run = built.run(0.9 * a["duration"], report=report)
        early_obs = {p: built.read(p) for p in circuit.populations}
        early = decode(circuit, enc, early_obs)["x_tilde"]
        t_run += built.run(a["duration"] - 0.9 * a["duration"], report=report)
        obs = {p: built.read(p) for p in circuit.populations}
        stages = decode(circuit, enc, obs)
        change = float(np.max(np.abs(stages["x_tilde"] - early)) / (np.max(np.abs(stages["x_tilde"])) or 1.0))
        fano = {}
    else:
        m = measure(built, warm, a["duration"], N_CHUNKS, checkpoints, report)
        t_run, snapshots, fano = m["run"], m["snapshots"], fano_factors(m["chunks"])
        change = float("nan")
    if neuron != "rate":
        own_fano = spike_generation_fano(circuit, neuron, fano)
        checkpoint_results = []
        for mark, o in snapshots:
            st = decode(circuit, enc, o)
            nv = stage_noise_variance(circuit, enc, o, own_fano, mark, st, WQ, WK, WV, WO, phi, WS)
            checkpoint_results.append((mark, st, nv))
        _, stages, noise_var = checkpoint_results[-1]
        obs = snapshots[-1][1]

    rates = {name: pop.to_dense(obs[name]["r"], fill=np.nan) for name, pop in circuit.populations.items()}
    compared = ("q", "k", "v", "S", "z", "Z", "v_tilde", "x_tilde") if linear else \
        ("q", "k", "v", "s", "kappa", "Z", "y", "v_tilde", "x_tilde")
    ref_stages = {k: ref[k] for k in compared
                  if normalize or k not in ("Z", "z")}      # no interneurons, no division to compare
    config = dict(
        n=a["n"], m=a["m"], H=a["H"], dk=a["dk"], dv=a["dv"], de=a["de"], phi=phi, neuron=neuron,
        duration=a["duration"], dt=dt, seed=a["seed"], cross=Y is not None, causal=bool(causal),
        warmup=warm, P=P, n_inh=n_inh, signed=signed, normalize=bool(normalize), skip=WS is not None,
        circuit=kind, law=law, fold=bool(fold),
        codegen=codegen, params=params.to_dict(), gains=gains.to_dict(), device=device,
        threads=int(threads) if device == "cpp_standalone" else None,
        scheduler=None if scheduler is None else (scheduler if isinstance(scheduler, str) else "client"),
    )
    max_rate = 1.0 / dt if neuron == "escape" else None
    # did the circuit work where it claims to (per macrocolumn)? raises at the rate level,
    # warns and flags at spiking levels
    operating = check_operating(circuit, enc, obs, neuron, gains,
                                early=early_obs, T=a["duration"], max_rate=max_rate)
    enforce(operating, neuron)
    if enc.consts["operating"] is not None:
        operating["operating_point"] = enc.consts["operating"].summary()
    diagnostics = dict(range=range_report(circuit, obs, max_rate), convergence=change, fano=fano,
                       operating=operating, in_range=not operating["violations"],
                       memory_estimate_bytes=need, encoding=dict(
                           v0=enc.consts["v0"].tolist(), x0=enc.consts["x0"], xb=enc.consts["xb"]))
    counts = dict(neurons=circuit.n_neurons(), synapses=circuit.n_synapses(),
                  simulated_synapses=n_simulated,
                  populations={k: p.N for k, p in circuit.populations.items()},
                  projections=circuit.n_synapses(by_projection=True))
    timings = dict(build=built.build_time if built is not None else float("nan"), compile=t_compile, run=t_run,
                   total=time.perf_counter() - t_start)
    if neuron != "rate":
        cps = [dict(T=mark, metrics=SimulationResult(
            x_tilde=st["x_tilde"], reference=ref["x_tilde"], stages=st, reference_stages=ref_stages,
            rates={}, spikes={}, level=neuron, config={}, noise_variance=nv).metrics())
            for mark, st, nv in checkpoint_results]
    else:
        cps = []
    diagnostics["checkpoints"] = cps
    spikes = {}
    if record_spikes:
        for p in circuit.populations:
            if built is None:
                if p in sa["spikes"]:
                    spikes[p] = sa["spikes"][p]
            elif (record_spikes is True or p in record_spikes) and p in built.monitors:
                spikes[p] = sa["spikes"][p] if device == "cpp_standalone" else built.spike_trains(p)
    return SimulationResult(
        x_tilde=stages["x_tilde"], reference=ref["x_tilde"], stages=stages,
        reference_stages=ref_stages, rates=rates, spikes=spikes, level=neuron, config=config,
        diagnostics=diagnostics, timings=timings, counts=counts, noise_variance=noise_var,
    )
