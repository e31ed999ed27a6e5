"""``simulate_mhsa``: run the thalamo-cortico-thalamic attention circuit and decode it.

A facade: validate the options (:mod:`ctmhsa.sims.options`), build (:func:`ctmhsa.sims.build.build_mhsa`),
run on the runner the options name (:mod:`ctmhsa.sims.runners`) and read the result out
(:mod:`ctmhsa.sims.readout`).
"""

from __future__ import annotations


from .build import build_mhsa
from .options import CircuitOptions, RunOptions
from .result import SimulationResult

__all__ = ["simulate_mhsa"]


def simulate_mhsa(
    X,
    WQ,
    WK,
    WV,
    WO,
    phi: str | None = None,
    neuron: str | None = None,
    duration=None,
    seed: int | None = None,
    Y=None,
    WS=None,
    circuit_options: CircuitOptions | None = None,
    run_options: RunOptions | None = None,
    perturbations=None,
    **options,
) -> SimulationResult:
    """Simulate multihead linear self-attention in a cortico-thalamic circuit.

    Builds the pathway nucleus 1 → H areas → nucleus 2 in Brian2, encodes the tokens
    and weights into rates, synaptic weights and biases, runs it, decodes every stage from the
    neurons and compares it with :func:`ctmhsa.maths.reference.linear_mhsa`.

    Parameters
    ----------
    X : array, shape (n, de) or (T, n, de)
        Tokens (thalamic nucleus 1), or a stream of ``T`` token sets (see ``presentation``).
        Tokens and weights are plain numbers (a dimensionless Brian2 quantity is one; a quantity
        with a unit or a masked array with masked entries is refused).
    WQ, WK : array, shape (H, dk, de)
    WV : array, shape (H, dv, de)
    WO : array, shape (H, de, dv)
    phi : {"elu1", "relu", "softplus", "exp"}
        Dendritic feature map (default ``"elu1"``).
    neuron : {"rate", "escape", "lif"}
        Fidelity level (default ``"escape"``).
    duration : float or brian2 Quantity
        Simulated biological time (s, or a Brian2 time such as ``500*ms``; default 1 s). At the
        rate level the decoded values are the final state; at the spiking levels, the
        measurement window, simulated after ``warmup`` (``warmup + duration`` in all) and at
        least :func:`ctmhsa.sims.options.min_window` (0.1 s with the default cells).
    seed : int
        Random seed of the spiking levels, in ``[0, 2**32)`` on every device (the rate level is
        deterministic; default 0).

    Every option left at ``None`` takes its value from ``circuit_options``/``run_options`` when
    given, else the default of :class:`ctmhsa.sims.options.CircuitOptions`/:class:`ctmhsa.sims.options.RunOptions`.
    Y : array, shape (m, de), optional
        Key/value tokens for cross-attention (a second input nucleus).
    causal : bool
        Causal masking: microcolumns j > i are absent.
    dt : float or brian2 Quantity, optional
        Integration step (s); default :data:`ctmhsa.sims.options.DEFAULT_DT` of the level; at
        most :func:`ctmhsa.sims.options.max_dt` (the fastest cell time constant over its steps:
        5 ms rate, 1 ms escape and lif with the default cells; 0.5 ms for the memory circuit at
        lif, its default there).
    codegen : {"auto", "numpy", "cython"}
        Brian2 code-generation target (runtime device).
    params : CellParams, optional
        Physiological constants (default :data:`ctmhsa.neurons.params.DEFAULT_PARAMS`).
    gains : CodeGains, optional
        Gains of the affine codes (default: the level's, :func:`ctmhsa.maths.codes.default_gains`).
    max_memory : float, optional
        Refuse networks whose estimated memory exceeds this many bytes (default: 80 % of the
        available memory; ``inf``: no limit).
    max_runtime : float, optional
        Refuse runs whose estimated wall time (:func:`ctmhsa.sims.build.estimate_runtime`)
        exceeds this many seconds (default 3600; ``None`` or ``inf``: no limit).
    report : None, "text", "progress" or callable
        Progress report during the run (``"progress"``: a tqdm bar over biological time).
    warmup : float or brian2 Quantity, optional
        Spiking levels: simulated before the measurement window and discarded (s); default
        :data:`ctmhsa.sims.options.DEFAULT_WARMUP` (0.5 s). The rate level has no window: a
        positive warm-up is refused there.
    record_spikes : bool or tuple of str
        Spiking levels: keep spike times (all populations or the named ones, which must be
        populations of the circuit) in ``res.spikes``.
    P : int or dict
        Population coding: neurons per represented dimension, for every population or per
        population name (e.g. ``{"l5pt": 10, "nucleus2": 10}``); see
        :func:`ctmhsa.circuits.builders.build`. Rates of a population with P > 1 get a trailing axis.
    n_inh : int
        Divisive interneurons per macrocolumn.
    signed : {"onoff", "offset"}
        Code of the signed read-outs ṽ and x̃ (see :func:`ctmhsa.circuits.builders.build`).
    checkpoints : sequence of float or brian2 Quantity
        Spiking levels: window lengths (s, < ``duration``) at which every stage is also decoded
        from the window so far; ``res.checkpoints`` lists ``{"T", "metrics"}`` (error vs
        simulated time from one run). The final window is always the last entry. Runtime
        device, one token set only (a stream is decoded per presentation).
    device : {"runtime", "cpp_standalone", "cuda_standalone"}
        Brian2 device. ``"runtime"`` runs in this process (Cython or numpy, see ``codegen``);
        ``"cpp_standalone"`` compiles the network shape once into a cached C++ project (see
        :mod:`ctmhsa.devices.standalone`) and passes tokens, weights and the seed as run arguments, so
        further calls on the same shape do not compile. ``"cuda_standalone"``: the same on an
        NVIDIA GPU through brian2cuda (a ``ValueError`` naming ``device`` where it is not
        installed; see docs/gpu.md). A stream runs on ``"runtime"`` and ``"cpp_standalone"``
        (its rate table a run argument, each presentation read after the run;
        ``"cuda_standalone"`` refuses it). The same seed gives the same spikes on the same
        device; across the runtime and C++ devices the escape level agrees spike for spike
        without OpenMP threads, and the rate level to ~1e-12 (docs/design.md; with threads,
        each thread draws its own numbers).
    threads : int, optional
        OpenMP threads of the standalone device (default 1, compiled without OpenMP; 0 or 1
        likewise; see :class:`ctmhsa.sims.options.RunOptions`). Part of the compiled shape.
    normalize : bool
        ``False``: the unnormalised variant — no interneurons, salience s = phi(q) phi(k)
        (``linear_mhsa(normalize=False)``); the L2/3 -> L5 IT weights then scale the
        apical input by 1/dk.
    WS : array, shape (H, dv, de), optional
        Skip connection: core thalamic axons onto L5 PT add ``WS x_i`` to ṽ_i (and ``WO WS x_i``
        to x̃_i); the reference is extended alike (:func:`ctmhsa.maths.reference.linear_mhsa`).
    circuit : {"quadratic", "linear", "memory"}
        ``"quadratic"``: Algorithm 1, one microcolumn per query-key pair (n m microcolumns per
        head). ``"linear"``: the linear-time key-value-memory circuit (paper discussion, "Beyond
        quadratic scaling"): outer-product cells write S = Σ_j phi(k_j) v_jᵀ and z = Σ_j phi(k_j)
        once per head, and every query macrocolumn reads them out (see
        :mod:`ctmhsa.circuits.builders`); its decoded stages are q, k, v, S, z, Z, ṽ, x̃, compared with
        ``linear_mhsa(method="linear")``. No causal variant.
        ``"memory"``: the key-value memory over a stream (Granier & Senn, arXiv 2504.06354v3;
        :mod:`ctmhsa.circuits.kvmemory`, docs/memory.md): ``X`` of shape ``(T, de)`` (and ``Y``
        alike) is shown one token per ``presentation``; L2/3 integrators hold
        ``M_t = λ M_{t-1} + v_t φ(k_t)ᵀ`` and L5 reads ``ṽ_t = M_t φ(q_t)`` (unnormalised by default
        here; ``normalize=True`` divides by ``z_tᵀ φ(q_t)``). ``res.x_tilde`` and ``res.reference``
        (:func:`ctmhsa.maths.reference.memory_attention`) are ``(T, de)``, every stage is
        decoded per token and ``res.memory`` is ``M_t``, ``(T, H, dv, dk)``. Rate level in this
        release; no causal, skip, Dale, population-coding or perturbation variant.
    tau_mem : float or brian2 Quantity, optional
        ``circuit="memory"``: the memory's time constant (s), ``λ = exp(-presentation / tau_mem)``
        kept per token; ``None`` (default): no forgetting, λ = 1.
    law : str
        Interaction law of the L5 IT somata between basal value R and apical attention C
        (:data:`ctmhsa.neurons.laws.LAWS`): ``"product"`` (Algorithm 1, default) or one of Adeel's
        two-point-neuron laws ``"co4"``, ``"tm1"`` ... ``"tm4"``. The circuit is decoded as if
        it multiplied, so the metrics measure how far a law departs from attention;
        :func:`ctmhsa.neurons.laws.attention_under_law` predicts what it computes instead.
    fold : bool
        Simulate deterministic compartments that receive identical synapses (every
        macrocolumn's copy of a key or value dendrite, every microcolumn's copy of a query
        dendrite and shunted soma, the attention dendrites of a microcolumn's L5 IT cells) once,
        with every cell linked to its class (:mod:`ctmhsa.circuits.fold`). Exact: the same seed gives
        the same spikes with ``fold=False``; at barrel size Brian2 holds 7.6 % of the
        description's synapses. Every cell keeps its own spike generation.
    scheduler : None, "serial", "local", address or ``distributed.Client``
        ``None``: one network. Otherwise the pathway is split at its nuclei and every head
        runs as its own task (spiking levels): ``"serial"`` in this process, ``"local"`` on a
        dask ``LocalCluster``, an address on that dask scheduler. The split run gives the same
        spikes wherever it runs (see :mod:`ctmhsa.sims.distributed`). Heads run on ``device``; on a
        standalone device every head of the run reuses one compiled project through run
        arguments, each head reduced on its worker (observables, L5 PT spikes, the recorded
        spike trains) before it is gathered.

    presentation : float or brian2 Quantity, optional
        A stream (``X`` of shape ``(T, n, de)``): seconds per token set (default 0.2 s), at least
        :func:`ctmhsa.sims.options.min_presentation` (20 ms with the default cells, 0.4 s at
        the lif level: its somata couple over 0.2 s, and its windows open at half the
        presentation, :func:`ctmhsa.sims.options.level_lag`), the time the circuit needs to
        start following a new set before its decoding window opens. A stream lasts ``T * presentation``: ``duration`` and
        ``checkpoints`` do not apply (:data:`ctmhsa.sims.options.APPLIES`).
    input_range : InputRange or float, optional
        The tokens the circuit is built for (:class:`ctmhsa.maths.inputs.InputRange`; a number:
        the largest token norm). Every gain, offset and set point comes from the weights and this
        range; ``None`` declares the range of ``X`` (and ``Y``).
    perturbations : list, optional
        Lesions and drive (:mod:`ctmhsa.circuits.perturb`, also ``ctmhsa.perturb``):
        ``Silence("l23")``, ``Cut("attention", fraction=0.5)``, ``Drive("interneuron", rate=20)``.
        The result is returned even where they move the circuit out of its range (flagged in
        ``res.diagnostics["operating"]``).
    circuit_options, run_options : ctmhsa.sims.options.CircuitOptions, ctmhsa.sims.options.RunOptions, optional
        The options as objects (keywords override their fields); see :mod:`ctmhsa.sims.options`.

    Returns
    -------
    SimulationResult
        On one clock, the network's: t = 0 at the start of the warm-up; the measurement window is
        ``[res.t_start, res.t_stop)`` = ``[warmup, warmup + duration)``. Spike times are on
        that clock (recorded warm-up spikes before ``res.t_start``; ``res.window_spikes(pop)``
        keeps the window's), and every rate in ``res.rates`` is the window's spike count /
        ``duration``.

    See Also
    --------
    ctmhsa.sims.build_mhsa : build without running, to reach the Brian2 network (add monitors).

    Raises
    ------
    ValueError, TypeError
        Bad arguments, a network that would not fit in memory or a run estimated to take
        longer than ``max_runtime`` (the message gives the estimate) — before any network is
        built.
    """
    named = {k: v for k, v in dict(phi=phi, neuron=neuron, duration=duration, seed=seed).items() if v is not None}
    sim = build_mhsa(X, WQ, WK, WV, WO, Y=Y, WS=WS, circuit_options=circuit_options,
                     run_options=run_options, perturbations=perturbations, **options, **named)
    return sim.run()

