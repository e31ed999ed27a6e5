"""Options of a simulation, as validated frozen parameter objects.

Two objects, as NetPyNE separates ``netParams`` from ``simConfig``:

- :class:`CircuitOptions` — *what is built*: the fidelity level, the dendritic feature map, the
  circuit variant and its structure, the physiological constants and the gains of the codes.
  They decide the Brian2 network and the encoded values.
- :class:`RunOptions` — *how it runs*: simulated time, step, warm-up, seed, code generation,
  device, threads, scheduler, recording. The same built circuit can run under different ones.

Which option applies to which kind of run (one token set, a stream of sets, a transformer model)
is one table, :data:`APPLIES`, enforced by :func:`check_applies`; the level's facts that bound a
run (:func:`max_dt`, :func:`min_window`, :func:`min_presentation`) are here too.

Every default is written here once (the TOML tables ``[circuit]`` and ``[run]`` of
:mod:`ctmhsa.sims.config` are these fields). Every field is checked when the object is made, so a bad
option raises a ``ValueError``/``TypeError`` naming it before anything is built. Times accept
Brian2 quantities (``500*ms``) or floats in seconds, and are stored in seconds.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
from dataclasses import dataclass, field, fields

import numpy as np

from ctmhsa.circuits.builders import DEFAULT_N_INH, SIGNED_CODES, apical_areas, pathway
from ctmhsa.circuits.parts import PARTS, areas, get_area
from ctmhsa.circuits.kvmemory import WRITE_WINDOW
from ctmhsa.circuits.dale import apply as dale_apply
from ctmhsa.devices.registry import DEVICES, check_device, get_device   # DEVICES: re-exported, the registry's names
from ctmhsa.maths.codes import CodeGains, default_gains
from ctmhsa.maths.inputs import as_input_range
from ctmhsa.neurons.firing import get_firing
from ctmhsa.neurons.law_registry import get_law
from ctmhsa.neurons.levels import LevelFacts, get_level
from ctmhsa.neurons.models import FIDELITY_LEVELS, FIRING, PHI_EXPRESSIONS, TAU_LOOP_LAG
from ctmhsa.neurons.params import DEFAULT_PARAMS, DEFAULT_SOMA, LIF_SOMATA, CellParams, check_coupling, seconds

__all__ = ["CircuitOptions", "RunOptions", "split_options", "seconds", "DEFAULT_DT", "DEFAULT_WARMUP",
           "N_CHUNKS", "AUTO_CYTHON_SYNAPSES", "CODEGEN", "DEVICES", "SCHEDULERS", "STEPS_PER_TAU",
           "DEFAULT_MAX_RUNTIME", "SEED_LIMIT", "max_dt", "min_window", "check_presentation", "check_run", "check_record_spikes",
           "check_scheduler", "DEFAULT_PRESENTATION", "DECODE_LAG", "decode_lag", "stream_chunks",
           "RUN_KINDS", "APPLIES", "check_applies", "given_options", "settling_constant", "min_presentation", "level_lag"]

DEFAULT_DT = LevelFacts("dt")
"""Default integration step per level (s), a view of :attr:`ctmhsa.neurons.levels.Level.dt`. The
rate level's steady state does not depend on dt (exponential Euler is exact for its linear
compartments); escape cells spike with probability r dt, exact in expectation while r dt < 1 (1 ms: rates up to a few hundred Hz);
LIF somata integrate their membrane exactly for the step's conductances (exponential Euler), update
their Ornstein-Uhlenbeck conductance background exactly, and are
calibrated at the step they run with: 0.5 ms gave the accuracy of 0.1 ms at a fifth of the steps
(a barrel head on the standalone device at 10.5x the escape level's time instead of 46x), and
1 ms (version 0.15, :func:`max_dt`) that of 0.5 ms at half the steps: 5.1x against 9.7x in one
run (``ctmhsa bench levels``; docs/lif.md, "A 1 ms step")."""

DEFAULT_WARMUP = LevelFacts("warmup")
"""Discarded warm-up before the measurement window (s), a view of
:attr:`ctmhsa.neurons.levels.Level.warmup`: the interneurons settle in ~0.1 s."""

N_CHUNKS = 10

DEFAULT_PRESENTATION = 0.2
"""Presentation period (s) of a stream of token sets when none is given (perception: 100-300 ms)."""

DECODE_LAG = 0.05
"""Time (s) from a presentation's start to its decoding window's, at most half the presentation.
A compromise: the circuit reaches 50 % of a change after 38 ms (rate level) to 53 ms (escape) and
90 % after 69 to 85 ms (``ctmhsa bench timescale``, docs/timescale.md), so a window from 50 ms
still holds part of the transition (at 0.2 s per presentation the streamed error is 1.14-1.23x
the static one), while a later start shortens the window and raises the count noise as much."""


def decode_lag(presentation: float) -> float:
    """Start (s, after a presentation's start) of its decoding window: :data:`DECODE_LAG`, at
    most half the presentation; the window runs to the presentation's end."""
    return min(DECODE_LAG, 0.5 * float(presentation))


def level_lag(options, presentation: float) -> float:
    """A pathway stream's decoding lag (s) at the level of ``options``: :func:`decode_lag`, or,
    where the cells settle slower than :data:`DECODE_LAG` allows (the lif somata's 0.2 s
    coupling), eight settling constants (:func:`settling_constant`,
    :func:`ctmhsa.mapping.kvmemory.read_settle`), at most half the presentation (:func:`decode_lag`'s 50 ms opened a lif window a quarter of one coupling after
    the switch)."""
    from ctmhsa.mapping.kvmemory import read_settle   # the memory circuit's read-out follows the same rule

    slow = read_settle(settling_constant(options)[0]) if options.level.lif else 0.0
    return min(max(decode_lag(presentation), slow), 0.5 * float(presentation))


def stream_chunks(window: float, options) -> int:
    """Chunks of one presentation's window (the Fano factors): :data:`N_CHUNKS`, fewer where a
    chunk would be shorter than the slowest cell time constant (at least 1)."""
    tau = max(_time_constants(options).values())
    return int(max(1, min(N_CHUNKS, np.floor(window / tau + 1e-9))))
"""Spike counts are taken at this many equal chunks of the measurement window (one run, see
:func:`ctmhsa.neurons.window.measure`); the spread of the chunk counts gives each population's Fano
factor."""

AUTO_CYTHON_SYNAPSES = 200_000
"""With ``codegen="auto"``, networks whose simulated synapses (those Brian2 holds after folding,
:func:`ctmhsa.circuits.fold.simulated_synapse_count`) reach this many use Cython (compiled once per
code object and cached); smaller ones use Brian2's numpy target, which needs no compiler. Counting
the described synapses instead put a two-block transformer (327,520 described, 173,056 held) on
Cython: 896 s of compilation in a fresh environment against 11 s of numpy run."""

CODEGEN = ("auto", "numpy", "cython")
REPORTS = ("progress", "text", "stdout", "stderr")

SCHEDULERS = ("serial", "local")
"""Scheduler names (:func:`ctmhsa.sims.distributed.client_for`); any other string must be a dask
scheduler address, which has a port or a protocol (``tcp://host:8786``, ``host:8786``)."""

_ADDRESS = re.compile(r"[a-z][a-z0-9+.-]*://\S+|[^\s:/]+:\d+")

STEPS_PER_TAU = LevelFacts("steps_per_tau")
"""The fewest steps per fastest cell time constant per level, a view of
:attr:`ctmhsa.neurons.levels.Level.steps_per_tau`: ``dt`` may be at most that constant divided
by it (:func:`max_dt`; the escape level's default 1 ms is ``tau_syn / 5``; the rate level allows
2). Measured on a small circuit: the rate level's interneuron loop (which moves up to ~10x faster
than ``tau_int`` while it divides) settles at dt = 5 ms and oscillates out of range at 10 ms
(``tau_int`` = 10 ms)."""

DEFAULT_MAX_RUNTIME = 3600.0
"""Default wall-time limit of one run (s; :attr:`RunOptions.max_runtime`)."""

SEED_LIMIT = 2**32
"""Seeds are 32-bit on every device (Brian2's runtime generator and the compiled projects')."""


def _choice(name, value, allowed):
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name}: expected one of {list(allowed)}, got {value!r}")


def _flag(name, value, expected="True or False"):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected {expected}, got {value!r}")


def check_scheduler(value, name: str = "scheduler", allow_none: bool = True) -> None:
    """``value`` must be None (where allowed), one of :data:`SCHEDULERS`, a dask scheduler address
    or a ``distributed.Client``; a ``ValueError`` naming ``name`` and the valid values otherwise."""
    if (value is None and allow_none) or type(value).__name__ == "Client":
        return
    if isinstance(value, str) and (value in SCHEDULERS or _ADDRESS.fullmatch(value)):
        return
    valid = ", ".join(map(repr, ([None] if allow_none else []) + list(SCHEDULERS)))
    raise ValueError(f"{name}: expected {valid}, a dask scheduler address ('tcp://host:8786' or "
                     f"'host:8786') or a distributed.Client; got {value!r}")


def check_record_spikes(value, populations, name: str = "record_spikes") -> None:
    """Every population ``value`` names must be one of the circuit's ``populations`` (a
    ``ValueError`` naming ``name``, the unknown names and the valid ones)."""
    if isinstance(value, (bool, np.bool_)) or value is None:
        return
    unknown = [p for p in value if p not in populations]
    if unknown:
        raise ValueError(f"{name}: {', '.join(map(repr, unknown))} "
                         f"{'is not a population' if len(unknown) == 1 else 'are not populations'} of this "
                         f"circuit; its populations are {list(populations)}")


def _set(obj, name, value):
    object.__setattr__(obj, name, value)   # frozen: only __post_init__ normalises a field


def _positive(value) -> bool:
    """A positive real number or inf (not a bool, not NaN)."""
    return (not isinstance(value, (bool, np.bool_)) and isinstance(value, numbers.Real)
            and not math.isnan(value) and value > 0)


class _Options:
    """Shared behaviour of the option objects: plain-data views and copies with changes."""

    def to_dict(self) -> dict:
        """Plain data (JSON/TOML-ready; ``params``/``gains`` as dicts)."""
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = v.to_dict() if hasattr(v, "to_dict") else (list(v) if isinstance(v, tuple) else v)
        return out

    def replace(self, **changes):
        """A copy with ``changes`` (validated like a new object)."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class CircuitOptions(_Options):
    """What is built: the circuit, its cells and its codes.

    Attributes
    ----------
    neuron : {"rate", "escape", "lif"}
        Fidelity level of every cell.
    phi : {"elu1", "relu", "softplus", "exp"}
        Dendritic feature map.
    causal : bool
        Causal masking: microcolumns j > i are absent.
    normalize : bool, optional
        ``False``: the unnormalised variant (no interneurons). ``None`` (default): the attention
        area's own default (:attr:`ctmhsa.circuits.parts.Part.normalize`: normalised, the
        memory over a stream unnormalised as the revised paper's).
    circuit : {"quadratic", "linear", "memory"} or str
        Algorithm 1, the linear-time key-value-memory circuit, or the key-value memory over a
        stream of single tokens (:mod:`ctmhsa.circuits.kvmemory`; rate level, and the escape level
        unnormalised); or any registered attention area (:func:`ctmhsa.circuits.parts.areas`),
        whose facts (:class:`ctmhsa.circuits.parts.Part`) say which options apply to it.
    law : str
        Interaction law of the L5 IT somata (:data:`ctmhsa.neurons.laws.LAWS`).
    P : int or dict
        Neurons per represented dimension, for every population or per population name.
    n_inh : int
        Divisive interneurons per macrocolumn.
    signed : {"onoff", "offset"}
        Code of the signed read-outs ṽ and x̃.
    fold : bool
        Simulate deterministic compartments with identical inputs once (exact).
    dale : bool
        Dale's law: every cell excitatory or inhibitory; the negative weights of every excitatory
        population are carried by feedforward inhibitory followers, one per cell
        (:mod:`ctmhsa.circuits.dale`; docs/physiology.md gives the cost in neurons).
    firing : {"poisson", "regular", "population"}
        How the escape level's cells turn their intensity into spikes
        (:func:`ctmhsa.neurons.models.integrator_model`): escape noise (Poisson counts, the
        default), a perfect integrate-and-fire soma per cell (a count within one spike of its
        intensity's integral), or the same with the phases of each dimension's ``P`` copies
        evenly spread (a population count within one spike), and those of each macrocolumn's
        threshold interneurons (a shunt without the beat of independent phases).
        docs/timescale.md measures them.
    params : CellParams
        Physiological constants.
    gains : CodeGains, optional
        Gains of the affine codes; ``None``: the level's default
        (:func:`ctmhsa.maths.codes.default_gains`), see :attr:`code_gains`.
    input_range : InputRange, float, dict or None
        The tokens the circuit is built for (:class:`ctmhsa.maths.inputs.InputRange`; a number is
        the largest token norm): every gain, offset and set point comes from the weights and this
        range, so one built circuit runs any tokens of it; tokens outside it are refused.
        ``None``: the range of the tokens given (their largest norm and statistics).
    tau_mem : float, optional
        ``circuit="memory"``: the memory's time constant (s); the memory keeps
        ``λ = exp(-presentation / tau_mem)`` of itself per token. ``None``: no forgetting (λ = 1).
    apical_inhibition : bool, optional
        The divisive interneurons also shunt the apical dendrites of the cells they divide: a
        second, multiplicative division stage, ``(1 + g_sh r)(1 + g_apical r)``, which widens
        the spread of drives a head can normalise from 58x to 3,300x (docs/operating_range.md).
        ``None`` (default): built where the somatic stage alone cannot divide every token set
        sampled from the declared range and both stages divide more of them (from the weights
        and the range only: :func:`ctmhsa.mapping.operating.apical_needed`); the result's
        configuration records what was built. Circuits ``"quadratic"`` and ``"linear"``, normalised.
    coupling : dict, optional
        The lif level's dendro-somatic couplings by cell type (s; ``{"l5it": 0.05, "l5pt": 0.05}``),
        in place of their soma types' (:data:`ctmhsa.neurons.params.LIF_SOMATA`; the calibrated law
        is the same: the coupling is upstream of the driven soma). Cell types sharing a soma type
        take one value (:func:`ctmhsa.neurons.params.check_coupling`). Default: each type's own
        (200 ms for L2/3 and L5; docs/lif.md, "Digits at 0.5 s"). A faster coupling follows a
        stream sooner but passes more of the drive's fluctuations, which an adapting soma
        rectifies into rate: one layer (n = 3, dk = dv = 2, 3 s, P = 1, seed 2) read ṽ at 0.815
        with L5 at 50 ms against 0.309 with its own 200 ms.
    """

    neuron: str = "escape"
    phi: str = "elu1"
    causal: bool = False
    normalize: bool | None = None
    circuit: str = "quadratic"
    law: str = "product"
    P: int | dict = 1
    n_inh: int = DEFAULT_N_INH
    signed: str = "onoff"
    fold: bool = True
    dale: bool = False
    firing: str = "poisson"
    params: CellParams = DEFAULT_PARAMS
    gains: CodeGains | None = None
    input_range: object = None
    tau_mem: float | None = None
    apical_inhibition: bool | None = None
    coupling: dict | None = None

    def __post_init__(self):
        _choice("neuron", self.neuron, FIDELITY_LEVELS)
        if not isinstance(self.phi, str):
            raise TypeError(
                f"phi: the circuit implements named feature maps {sorted(PHI_EXPRESSIONS)} "
                f"(dendritic nonlinearities); got {type(self.phi).__name__}. Custom callables work in "
                "ctmhsa.maths.reference only")
        if self.phi not in PHI_EXPRESSIONS:
            raise ValueError(f"phi: unknown feature map {self.phi!r}; expected one of {sorted(PHI_EXPRESSIONS)}")
        if self.normalize is None:   # the attention area's default (the revised paper's memory: unnormalised)
            _set(self, "normalize", getattr(PARTS.get(self.circuit) if isinstance(self.circuit, str) else None,
                                            "normalize", True))
        for name in ("causal", "normalize", "fold", "dale"):
            _flag(name, getattr(self, name), "a bool" if name in ("fold", "dale") else "True or False")
            _set(self, name, bool(getattr(self, name)))
        area = get_area(self.circuit)      # the attention area's facts decide what applies to it
        _set(self, "tau_mem", seconds("tau_mem", self.tau_mem, allow_none=True))
        if self.tau_mem is not None and not area.stream:
            raise ValueError(f"tau_mem: the memory's time constant is the memory circuit's "
                             f"(circuit={_names(lambda a: a.stream)}); "
                             f"circuit={self.circuit!r} keeps no memory between token sets")
        _refuse_level(area, self.neuron)
        if self.causal and area.no_causal:
            raise ValueError(f"causal: {area.no_causal}")
        if self.apical_inhibition is not None:
            _flag("apical_inhibition", self.apical_inhibition, "True, False or None (built where needed)")
            _set(self, "apical_inhibition", bool(self.apical_inhibition))
            if self.apical_inhibition and not (self.normalize and area.apical):
                raise ValueError(f"apical_inhibition: the apical division stage is built by the divisive "
                                 f"interneurons of circuits {list(apical_areas())} with normalize=True; got "
                                 f"circuit={self.circuit!r}, normalize={self.normalize}")
            if self.apical_inhibition and get_level(self.neuron).lif:
                raise ValueError("apical_inhibition: the apical division stage is not built at the lif level in this "
                                 "release (measured: s and x̃ at 2x their noise floors against 1-1.5x with the somatic "
                                 "stage alone; docs/operating_range.md); use neuron='rate' or 'escape'")
        if not get_law(self.law).product and not area.two_point_laws:
            raise ValueError(f"law: the {_area_name(area)} has no L5 IT cells; two-point-neuron laws apply "
                             f"to circuit={_names(lambda a: a.two_point_laws)}")
        _choice("firing", self.firing, FIRING)
        if get_firing(self.firing).integrator and not get_level(self.neuron).escape:
            raise ValueError(f"firing: {self.firing!r} makes the escape level's somata perfect integrators; "
                             f"neuron={self.neuron!r} has no escape-noise cells (use neuron='escape')")
        refuse_for_area(self, area)
        if self.signed not in SIGNED_CODES:
            raise ValueError(f"signed: expected 'offset' or 'onoff', got {self.signed!r}")
        if isinstance(self.n_inh, bool) or not isinstance(self.n_inh, (int, np.integer)) or self.n_inh < 1:
            raise ValueError(f"n_inh: expected an integer >= 1, got {self.n_inh!r}")
        if isinstance(self.P, dict):   # population names are checked against the circuit when built
            _set(self, "P", dict(self.P))
        elif isinstance(self.P, bool) or not isinstance(self.P, (int, np.integer)) or self.P < 1:
            raise ValueError(f"P: expected an integer >= 1 or a dict of them per population, got {self.P!r}")
        if not isinstance(self.params, CellParams):
            raise TypeError(f"params: expected ctmhsa.neurons.params.CellParams, got {type(self.params).__name__}")
        if self.gains is not None and not isinstance(self.gains, CodeGains):
            raise TypeError(f"gains: expected ctmhsa.maths.codes.CodeGains, got {type(self.gains).__name__}")
        if self.input_range is not None:
            _set(self, "input_range", as_input_range(self.input_range))
        if self.coupling is not None:
            if not get_level(self.neuron).lif:
                raise ValueError(f"coupling: the dendro-somatic coupling is the lif somata's; neuron={self.neuron!r} has "
                                 f"none (use neuron='lif')")
            _set(self, "coupling", check_coupling(self.coupling) or None)

    def __hash__(self):   # P or coupling may be a dict
        return hash(repr(self.to_dict()))

    def describe(self, n: int, dk: int, dv: int, de: int, H: int = 1, m: int | None = None,
                 cross: bool = False, skip: bool = False):
        """The pathway these options build for the given sizes (:func:`ctmhsa.circuits.builders.pathway`;
        ``cross``: a second input nucleus, ``skip``: the core -> L5 PT skip connection)."""
        return pathway(n, dk, dv, de, H=H, m=m, cross=cross, causal=self.causal, normalize=self.normalize,
                       apical=bool(self.apical_inhibition),
                       P=self.P, n_inh=self.n_inh, signed=self.signed, skip=skip, circuit=self.circuit)

    def as_built(self, circuit):
        """``circuit`` (a description of :meth:`describe`) as it is built: under Dale's law when
        :attr:`dale` (its followers added, :func:`ctmhsa.circuits.dale.apply`), else itself."""
        out = dale_apply(circuit) if self.dale else circuit
        return out.with_meta(firing=self.firing) if self.firing != out.meta.firing else out

    @classmethod
    def from_config(cls, config: dict) -> "CircuitOptions":
        """The options recorded in a result's flat configuration (``SimulationResult.config``)."""
        return cls(**{k: config[k] for k in CIRCUIT_FIELDS if k in config and k not in ("params", "gains")
                      and not (k == "input_range" and config[k] is None)})

    @property
    def code_gains(self) -> CodeGains:
        """The gains in use: ``gains``, or the level's default when ``gains`` is None."""
        return default_gains(self.neuron) if self.gains is None else self.gains

    def to_dict(self) -> dict:
        out = super().to_dict()
        out["gains"] = self.code_gains.to_dict()    # what was used, not "default"
        return out

    @property
    def level(self):
        """The fidelity level, :class:`ctmhsa.neurons.levels.Level` (its facts)."""
        return get_level(self.neuron)

    @property
    def spiking(self) -> bool:
        return self.level.spiking


@dataclass(frozen=True)
class RunOptions(_Options):
    """How a built circuit runs.

    Attributes
    ----------
    duration : float
        Simulated biological time (s): the final state at the rate level, the measurement
        window (after ``warmup``) at the spiking levels, where it must be at least
        :func:`min_window` (0.1 s with the default cells). A spiking run simulates
        ``warmup + duration`` in all.
    dt : float, optional
        Integration step (s); ``None``: :data:`DEFAULT_DT` of the level, or the circuit's finer
        step where it needs one (the memory circuit at the lif level: 0.5 ms). At most
        :func:`max_dt` (the fastest cell time constant over the level's ``steps_per_tau``: 5 at
        the spiking levels, 2 at the rate level; the lif somata's 2.5).
    warmup : float, optional
        Discarded time before the measurement window (s); ``None``: :data:`DEFAULT_WARMUP`.
        The rate level has no window: a positive warm-up there is refused.
    seed : int
        Random seed of the spiking levels: an integer in ``[0, 2**32)`` on every device.
    checkpoints : tuple of float
        Window lengths (s, < ``duration``) at which every stage is also decoded (runtime device).
    codegen : {"auto", "numpy", "cython"}
        Brian2 code-generation target of the runtime device.
    device : {"runtime", "cpp_standalone", "cuda_standalone"} or another registered device
        Brian2 device (:mod:`ctmhsa.devices.registry`; its runner: :mod:`ctmhsa.sims.runners`);
        ``"cuda_standalone"`` needs brian2cuda and a GPU (checked here: a ``ValueError`` naming
        ``device`` otherwise).
    threads : int, optional
        OpenMP threads of the standalone device (``None``: one thread, compiled without OpenMP;
        0 or 1 likewise). More threads gain at most about a quarter on a quiet machine and lose
        10-100x on a busy one, where OpenMP's threads wait on each other (``ctmhsa bench
        threads``; docs/cortex.md), so more are used only when asked for.
    scheduler : None, "serial", "local", address or ``distributed.Client``
        Split the pathway at its nuclei and run every head as its own task.
    record_spikes : bool or tuple of str
        Keep spike times (all populations or the named ones; spiking levels only, names checked
        against the circuit's populations when it is described).
    max_memory : float, optional
        Refuse networks whose estimated memory exceeds this many bytes (``None``: 80 % of the
        available memory; ``inf``: no limit).
    max_runtime : float, optional
        Refuse runs whose estimated wall time exceeds this many seconds
        (:func:`ctmhsa.sims.build.estimate_runtime`; default :data:`DEFAULT_MAX_RUNTIME`, one
        hour; ``None`` or ``inf``: no limit).
    report : None, "progress", "text", "stdout", "stderr" or callable
        Progress during the run: ``"progress"`` draws a tqdm bar over the biological time
        (:class:`ctmhsa.sims.progress.RunProgress`; on the standalone device read from the binary's
        report), ``"text"`` prints Brian2's text report, a callable is Brian2's
        ``report(elapsed, completed, start, duration)``.
    presentation : float, optional
        A stream of token sets (``X`` of shape ``(T, n, de)``): each is shown for this long (s),
        one after another, to the one built circuit; ``duration`` is then ``T * presentation``
        (set by :func:`ctmhsa.sims.build_mhsa`). Each presentation is decoded from its own
        window, ``[decode_lag(presentation), presentation)`` after its start
        (:func:`decode_lag`). ``None``: one token set.
    """

    duration: float = 1.0
    dt: float | None = None
    warmup: float | None = None
    seed: int = 0
    checkpoints: tuple = ()
    codegen: str = "auto"
    device: str = "runtime"
    threads: int | None = None
    scheduler: object = field(default=None, compare=False)
    record_spikes: bool | tuple = False
    max_memory: float | None = None
    max_runtime: float | None = DEFAULT_MAX_RUNTIME
    report: object = field(default=None, compare=False)
    presentation: float | None = None

    def __post_init__(self):
        _set(self, "duration", seconds("duration", self.duration))
        _set(self, "presentation", seconds("presentation", self.presentation, allow_none=True))
        _set(self, "dt", seconds("dt", self.dt, allow_none=True))
        try:
            _set(self, "warmup", seconds("warmup", self.warmup, allow_none=True, allow_zero=True))
        except TypeError as exc:   # a ValueError, as warmup has always raised
            raise ValueError(f"warmup: expected a non-negative finite time in seconds; {exc}") from None
        if self.dt is not None and self.dt > self.duration:
            raise ValueError(f"dt: {self.dt} s is longer than duration = {self.duration} s")
        if (isinstance(self.seed, (bool, np.bool_)) or not isinstance(self.seed, numbers.Integral)
                or not 0 <= self.seed < SEED_LIMIT):
            raise ValueError(f"seed: expected a non-negative integer below 2**32 (32-bit seeds on every "
                             f"device), got {self.seed!r}")
        _set(self, "seed", int(self.seed))
        if isinstance(self.checkpoints, (str, bytes)):
            raise TypeError(f"checkpoints: expected a sequence of times in seconds, got {self.checkpoints!r}")
        try:
            cps = tuple(seconds("checkpoints", x, allow_zero=True) for x in self.checkpoints)
        except TypeError:
            raise TypeError(f"checkpoints: expected a sequence of times in seconds, got {self.checkpoints!r}") from None
        bad = [x for x in cps if not 0 < x < self.duration]
        if bad:
            raise ValueError(f"checkpoints: every time must lie in (0, duration = {self.duration}) s; got {bad}")
        _set(self, "checkpoints", cps)
        _choice("codegen", self.codegen, CODEGEN)
        check_device(self.device)   # registered, and its package importable
        if self.threads is not None and (isinstance(self.threads, bool)
                                         or not isinstance(self.threads, (int, np.integer)) or self.threads < 0):
            raise ValueError(f"threads: expected an integer >= 0 (0 = no OpenMP), got {self.threads!r}")
        if self.threads is not None and self.threads > 1 and not get_device(self.device).threads:
            raise ValueError(f"threads: {self.threads} OpenMP threads apply to a device that compiles C++ with "
                             f"OpenMP (cpp_standalone); device={self.device!r} runs without them (give None, 0 or 1)")
        check_scheduler(self.scheduler)
        rs = self.record_spikes
        if not isinstance(rs, (bool, np.bool_)):
            if isinstance(rs, str) or not all(isinstance(p, str) for p in rs):
                raise TypeError(f"record_spikes: expected True, False or a sequence of population names, got {rs!r}")
            _set(self, "record_spikes", tuple(rs))
        else:
            _set(self, "record_spikes", bool(rs))
        if not (self.report is None or callable(self.report) or self.report in REPORTS):
            raise ValueError(f"report: expected None, one of {list(REPORTS)} or a callable "
                             f"report(elapsed, completed, start, duration); got {self.report!r}")
        if self.max_memory is not None and not _positive(self.max_memory):
            raise ValueError(f"max_memory: expected a positive number of bytes, inf (no limit) or None "
                             f"(80 % of the available memory), got {self.max_memory!r}")
        if self.max_runtime is not None and not _positive(self.max_runtime):
            raise ValueError(f"max_runtime: expected a positive number of seconds of wall time, or None or "
                             f"inf (no limit), got {self.max_runtime!r}")

    def records(self, population: str) -> bool:
        """Whether the spike times of ``population`` are kept (``record_spikes``)."""
        return self.record_spikes is True or (bool(self.record_spikes) and population in self.record_spikes)

    def resolved(self, level: str, circuit: str | None = None) -> "RunOptions":
        """A copy with the level's defaults filled in: ``dt`` (the level's, or the largest that
        ``circuit``'s cells allow at that level where it is finer: :func:`max_dt`), ``warmup`` (0
        at the rate level, which has no window) and ``threads`` (1 unless asked for: see
        ``threads``).

        Raises
        ------
        ValueError
            What the rate level cannot do: checkpoints, spike recording, a warm-up.
        """
        lv = get_level(level)
        if not lv.spiking:
            if self.checkpoints:
                raise ValueError("checkpoints: the rate level has no counting window; use a spiking level")
            if self.record_spikes:
                raise ValueError("record_spikes: the rate level has no spikes; use a spiking level "
                                 "(neuron='escape' or 'lif') or record_spikes=False")
            if self.warmup:
                raise ValueError(f"warmup: the rate level has no measurement window (its result is the state "
                                 f"at the end of duration), so a warm-up of {self.warmup:g} s would not be "
                                 "simulated; leave warmup out or set it to 0")
        warm = 0.0 if not lv.spiking else (lv.warmup if self.warmup is None else self.warmup)
        # one thread unless asked: OpenMP threads collapse on a shared, busy machine (see threads)
        threads = 1 if self.threads is None else int(self.threads)
        area_dt = None if circuit is None or self.dt else _area_dt(circuit, lv)
        dt = self.dt or (lv.dt if area_dt is None else min(lv.dt, area_dt))
        return self.replace(dt=dt, warmup=warm, threads=threads)

    def to_dict(self) -> dict:
        out = super().to_dict()
        s = self.scheduler
        out["scheduler"] = None if s is None else (s if isinstance(s, str) else "client")
        out["report"] = None if self.report is None else (self.report if isinstance(self.report, str) else "callable")
        return out


def refuse_for_area(options: CircuitOptions, area, context: str = "") -> None:
    """What the attention ``area`` does not build (Dale's followers, integrating somata, its own
    :meth:`~ctmhsa.circuits.parts.Part.check_options`), refused with a ``ValueError`` naming the
    option (the area's own refusals first: they say most); ``context`` opens the generic messages
    (a causal model's blocks say what they are)."""
    area.check_options(options)
    _refuse_level(area, options.neuron, context)
    if options.dale and not area.dale:
        raise ValueError(f"dale: {context}Dale's law is built for circuit={_names(lambda a: a.dale)}; the "
                         f"{_area_name(area)}'s cells remove a covariance of relays that their followers "
                         "would share")
    if get_firing(options.firing).integrator and not area.integrators:
        raise ValueError(f"firing: {context}{options.firing!r} is built for circuit="
                         f"{_names(lambda a: a.integrators)} (the {_area_name(area)}'s cells correct a covariance "
                         "of Poisson relays)")


def _refuse_level(area, neuron: str, context: str = "") -> None:
    """A ``ValueError`` naming ``neuron`` where the attention ``area`` is not built at that level."""
    if area.levels and get_level(neuron).name not in area.levels:
        raise ValueError(f"neuron: {context}the {_area_name(area)} is built at the {' and '.join(area.levels)} "
                         f"level{'s' if len(area.levels) > 1 else ''} in this release; got {neuron!r}")


def _area_name(area) -> str:
    """How a refusal names an attention area (``"linear circuit"``)."""
    return f"{area.name} circuit"


def _names(fact) -> str:
    """The registered areas with ``fact`` (a predicate on the part), as ``circuit=`` takes them."""
    return " or ".join(repr(name) for name in areas() if fact(get_area(name))) or "none"


def _area_dt(circuit: str, level) -> float | None:
    """The largest step (s) the attention area ``circuit`` allows at ``level`` where it is its own
    (:attr:`ctmhsa.circuits.parts.Part.lif_max_dt`, at the lif level), else None."""
    return get_area(circuit).lif_max_dt if get_level(level).lif else None


_SOMA_TAUS = ("tau_e", "tau_i", "tau_soma")
"""The lif somata's own time constants in :func:`_time_constants` (``Level.soma_steps_per_tau``)."""


def _time_constants(options: CircuitOptions) -> dict:
    """Name -> time constant (s) of every dynamics the level of ``options`` integrates."""
    p = options.params
    taus = dict(tau_m=p.tau_m, tau_d=p.tau_d, tau_int=p.tau_int)
    if options.spiking:       # exponential synaptic currents
        taus["tau_syn"] = p.tau_syn
    if options.level.lif:   # the somata's membrane and their conductance background
        s = DEFAULT_SOMA
        taus.update(tau_e=s.tau_e, tau_i=s.tau_i, tau_soma=s.C_m / s.input_conductance())
    return taus


def max_dt(options: CircuitOptions) -> tuple[float, str]:
    """The largest integration step (s) the cells of ``options`` allow, and why.

    The fastest time constant of the level's cells over the level's ``steps_per_tau``
    (:attr:`ctmhsa.neurons.levels.Level.steps_per_tau`; rate: ``tau_m``, ``tau_d``, ``tau_int``,
    10 ms by default, over 2: 5 ms; escape: also ``tau_syn``, 5 ms, over 5: 1 ms; lif: also the
    somata's ``tau_e`` = 2.7 ms and membrane ``C_m / g`` = 2.8 ms, integrated exactly over a step,
    over its ``soma_steps_per_tau``, 2.5: 1.08 ms, so ``tau_syn``'s 1 ms again; an area's
    ``lif_max_dt`` where finer: the memory circuit's 0.5 ms). At the spiking levels
    also ``1 / r_inh_max`` (135 Hz: 7.4 ms): an escape cell (interneurons at every spiking level)
    spikes with probability ``r dt``, at most once per step.
    """
    level, taus = get_level(options.neuron), _time_constants(options)
    soma = level.soma_steps_per_tau or level.steps_per_tau
    steps = {name: soma if name in _SOMA_TAUS else level.steps_per_tau for name in taus}
    name = min(taus, key=lambda k: taus[k] / steps[k])
    bound, why = taus[name] / steps[name], f"{name} = {taus[name]:g} s / {steps[name]:g}"
    if options.spiking:
        r = options.code_gains.r_inh_max
        if 1.0 / r < bound:
            bound, why = 1.0 / r, f"1 / r_inh_max = 1 / {r:g} Hz: an escape cell spikes at most once per step"
    area_dt = _area_dt(options.circuit, level)
    if area_dt is not None and area_dt < bound:
        bound, why = area_dt, f"circuit={options.circuit!r} at the lif level: its read path needs {area_dt:g} s"
    return bound, why


def min_window(options: CircuitOptions, dt: float) -> tuple[float, str]:
    """The shortest measurement window (s) of a spiking level, and why.

    Spike counts are taken in :data:`N_CHUNKS` equal chunks whose spread gives the Fano factors
    behind the noise floor; a chunk shorter than the slowest time constant of the cells that
    carry the code (``tau_m``, ``tau_d``, ``tau_int``, ``tau_syn``: 10 ms by default) holds
    correlated counts, and a window of a few steps holds almost none (measured: 1.5 ms gave
    q, k, v a noise floor of 0 beside an NRMSE of 0.9). Hence ``N_CHUNKS`` times that time
    constant (0.1 s by default), and at least one step per chunk.
    """
    taus = _time_constants(options)
    name = max(taus, key=taus.get)
    t_min = max(N_CHUNKS * taus[name], N_CHUNKS * dt)
    return t_min, (f"spike counts are taken in {N_CHUNKS} chunks, whose spread gives the noise floor, each "
                   f"at least the slowest cell time constant {name} = {taus[name]:g} s and one step")


def settling_constant(options: CircuitOptions, model: bool = False) -> tuple[float, str]:
    """The time constant (s) in which one attention pathway of ``options`` (or one block of a
    transformer model, ``model=True``) starts to follow a new token set, and its name.

    The slowest dynamics a change must pass: the cells' ``tau_m``, ``tau_d``, the interneurons'
    loop ``tau_int`` (at the lif level ``tau_int`` + 50 ms,
    :data:`ctmhsa.neurons.models.TAU_LOOP_LIF`), the spiking levels' ``tau_syn``, and in a
    model's blocks the normalising relays' ``tau_relay`` (their TRN loop), and at the lif level
    the somata's dendro-somatic coupling ``tau_c``. 10 ms with the default cells (40 ms in a
    model's block: the relays), 0.2 s at the lif level (its couplings; 60 ms before version 0.15,
    which counted the interneurons' loop only). The circuit
    reaches 50 % of a change after about four of them (38 ms rate, 53 ms escape: docs/timescale.md).
    """
    p = options.params
    # the loop integrates over twice tau_int where the interneurons also shunt the apical dendrites
    taus = dict(tau_int=p.tau_int * (2.0 if getattr(options, "apical_inhibition", None) else 1.0),
                tau_m=p.tau_m, tau_d=p.tau_d)   # a tie names the loop
    if options.spiking:
        taus["tau_syn"] = p.tau_syn
    if options.level.lif:
        taus["the interneurons' loop tau_int + 50 ms"] = taus.pop("tau_int") + TAU_LOOP_LAG
        taus["the lif somata's dendro-somatic coupling tau_c"] = max(s.params.tau_c for s in LIF_SOMATA.values())
    if model:
        taus["tau_relay"] = p.tau_relay
    name = max(taus, key=taus.get)
    return taus[name], name


def min_presentation(options: CircuitOptions, blocks: int | None = None) -> tuple[float, str]:
    """The shortest presentation (s) of a stream at the level of ``options``, and why.

    A presentation is decoded from a window that opens at half the presentation at the latest
    (:func:`decode_lag`; a model's default lag is half of it). Before it opens, the circuit must
    have had one :func:`settling_constant` to follow the new set, or the window reads the
    previous set (measured: 4 ms presentations at the escape level gave r = NaN and NRMSE 1.5; a
    one-block model at 8 ms, 85-106 % output error). A model's ``blocks`` settle one after
    another: one constant each. Hence ``2 * blocks * settling_constant`` (pathway: 20 ms at
    the rate and escape levels with the default cells, 0.4 s at lif: its somata's 0.2 s
    coupling, 0.12 s before version 0.15; a model's block: 80 ms with the default 40 ms relays,
    20 ms with the digits circuit's 5 ms cells and relays).
    A lower bound, not a guarantee: presentations of 0.2 s or longer leave the transient a
    small part of the window (docs/timescale.md, docs/digits.md).
    """
    depth = 1 if blocks is None else int(blocks)
    tau, name = settling_constant(options, model=blocks is not None)
    if get_area(options.circuit).stream:   # settle on a token, then write it in the gate's window
        return 2 * tau + WRITE_WINDOW, (f"each token is read after the circuit has settled on it (twice {name} = "
                                        f"{tau:g} s at the least) and then written in a window of {WRITE_WINDOW:g} s")
    what = ("the pathway" if blocks is None else "the block" if depth == 1
            else f"each of the {depth} blocks (one after another)")
    return 2 * depth * tau, (f"the decoding window opens at half the presentation at the latest, and {what} "
                             f"needs one settling time constant ({name} = {tau:g} s) to follow a new set first")


def check_presentation(options: CircuitOptions, presentation: float, dt: float, blocks: int | None = None) -> None:
    """``ValueError`` (naming ``presentation``) unless a stream's ``presentation`` (s) is a whole
    number of steps ``dt`` whose decoding window holds two steps or more, and at least the
    circuit's minimum presentation (:func:`min_presentation`; ``blocks``: a model's)."""
    window = presentation - decode_lag(presentation)
    if window < 2 * dt * (1 - 1e-9) or abs(presentation / dt - round(presentation / dt)) > 1e-6:
        raise ValueError(f"presentation: {presentation:g} s must be a whole number of steps dt = {dt:g} s "
                         f"whose decoding window (after {decode_lag(presentation):g} s) holds two steps or more")
    t_min, why = min_presentation(options, blocks)
    if presentation < t_min * (1 - 1e-9):
        raise ValueError(f"presentation: {presentation:g} s is shorter than the minimum presentation of "
                         f"{t_min:g} s at the {options.neuron} level ({why}); use presentation >= {t_min:g} "
                         "(0.2 s or longer to decode each set well: docs/timescale.md)")


def check_run(options: CircuitOptions, run_options: RunOptions, blocks: int | None = None) -> None:
    """Check resolved ``run_options`` against the cells of ``options``: ``dt`` at most
    :func:`max_dt`, a spiking level's window at least :func:`min_window`, a stream's
    presentation at least :func:`min_presentation` (of a model of ``blocks`` blocks, or of one
    pathway: ``None``).

    Raises
    ------
    ValueError
        Naming ``dt``, ``duration`` or ``presentation`` and the bound.
    """
    ro, level = run_options, options.neuron
    if options.coupling and ro.scheduler is not None:
        raise ValueError("scheduler: a split run builds every head on its worker with its soma types' own couplings; "
                         "run coupling= with scheduler=None (runtime or standalone device)")
    if options.dale and ro.scheduler is not None:
        raise ValueError("scheduler: a split run rebuilds every head on its worker without Dale's law's "
                         "followers; run dale=True with scheduler=None (runtime or standalone device)")
    if not get_firing(options.firing).poisson and ro.scheduler is not None:
        raise ValueError(f"scheduler: a split run's workers replay the relays' spikes with a Poisson variance; "
                         f"run firing={options.firing!r} with scheduler=None (runtime or standalone device)")
    bound, why = max_dt(options)
    if ro.dt > bound * (1 + 1e-9):
        raise ValueError(f"dt: {ro.dt:g} s is too coarse for the {level} level's cells: at most {bound:g} s "
                         f"({why}); use dt <= {bound:g}")
    if ro.presentation is not None:
        check_presentation(options, ro.presentation, ro.dt, blocks)
    elif options.spiking:
        t_min, why = min_window(options, ro.dt)
        if ro.duration < t_min * (1 - 1e-9):
            raise ValueError(f"duration: {ro.duration:g} s is shorter than the minimum measurement window of "
                             f"{t_min:g} s at the {level} level ({why}); use duration >= {t_min:g}")


RUN_KINDS = ("set", "stream", "model")
"""The kinds of run: one token set through the attention pathway (``X`` of shape ``(n, de)``), a
stream of sets shown one after another to one built pathway (``(T, n, de)``), and a transformer
model (:func:`ctmhsa.sims.simulate_model`, on one set or a stream)."""

_ALL = RUN_KINDS
_PATHWAY = ("set", "stream")

APPLIES = {
    # option: (kinds it applies to, values that change nothing where it does not apply, why not)
    # -- what is built (CircuitOptions)
    "neuron": (_ALL, (), ""),
    "phi": (_ALL, (), ""),
    "causal": (_PATHWAY, (False,), "a transformer model's attention has no causal mask (transformer_forward "
                                   "has none); simulate one attention layer with causal=True"),
    "normalize": (_PATHWAY, (True,), "a transformer model's attention is always normalised (its TRN pools)"),
    "circuit": (_PATHWAY, ("quadratic",), "a model's blocks are built by the model (a transformer's on the quadratic "
                                          "circuit, a causal model's on the memory, a Co4 model's on the co4 area)"),
    "tau_mem": (("stream",), (), "the memory's time constant applies to a stream of tokens (circuit='memory')"),
    "coupling": (_ALL, (), ""),
    "apical_inhibition": (_PATHWAY, (None, False), "a transformer model's blocks divide at the soma only (their "
                                                   "interneurons and TRN pools); the apical stage is one pathway's"),
    "law": (_PATHWAY, ("product",), "a model's L5 IT somata multiply (law='product'; a Co4 model's triad follows "
                                    "the Cooperation Equation by construction)"),
    "signed": (_PATHWAY, ("onoff",), "a transformer model's signed streams use the on/off code"),
    "P": (_ALL, (), ""),
    "n_inh": (_ALL, (), ""),
    "fold": (_ALL, (), ""),
    "dale": (_ALL, (), ""),
    "firing": (_ALL, (), ""),
    "params": (_ALL, (), ""),
    "gains": (_ALL, (), ""),
    "input_range": (_ALL, (), ""),
    # -- how it runs (RunOptions)
    "duration": (("set", "model"), (), "a stream lasts T x presentation; give presentation (s per token set) "
                                       "instead"),
    "dt": (_ALL, (), ""),
    "warmup": (_ALL, (), ""),
    "seed": (_ALL, (), ""),
    "checkpoints": (("set",), ((),), "a stream is decoded from each presentation's own window "
                                     "(res.presentation_metrics()) and a model from one window; use presentation "
                                     "windows for the error over time"),
    "codegen": (_ALL, (), ""),
    "device": (_ALL, (), ""),
    "threads": (_ALL, (), ""),
    "scheduler": (("set",), (), "a split run rebuilds every head on its own; streams and models run as one "
                                "network"),
    "record_spikes": (_ALL, (), ""),
    "max_memory": (_ALL, (), ""),
    "max_runtime": (_ALL, (), ""),
    "report": (_ALL, (), ""),
    "presentation": (("stream", "model"), (), "a presentation period needs a stream of token sets, X of shape "
                                             "(T, n, de)"),
    # -- a model's own (simulate_model)
    "lag": (("model",), (), "the decoding lag of simulate_model's streams (a pathway's stream decodes after "
                            "decode_lag(presentation))"),
    "latency": (("model",), (), "the read-out delays of simulate_model's stream windows (a pathway's stream "
                                "reads every population in one window)"),
    "calibration": (("model",), (), "calibration sets are a transformer model's (simulate_model)"),
    # -- the attention pathway's weights and inputs (ctmhsa run)
    "weights": (_PATHWAY, (), "a model file carries its own weights (--model)"),
    "layer": (_PATHWAY, (), "a model file carries its own weights (--model)"),
    "heads": (_PATHWAY, (), "a model file carries its own weights (--model)"),
    "n_heads": (_PATHWAY, (), "a model file carries its own weights (--model)"),
    "layout": (_PATHWAY, (), "a model file carries its own weights (--model)"),
    "WS": (_PATHWAY, (), "a transformer model's blocks have residual streams, not a skip input"),
    "Y": (_PATHWAY, (), "a transformer model is self-attention; cross-attention is one pathway's"),
    "perturbations": (_PATHWAY, (), "lesions and drive are placed in one attention pathway's circuit"),
}
"""Which option applies to which kind of run (:data:`RUN_KINDS`): option name -> ``(kinds,
inert, reason)``. An option given outside its kinds is refused by :func:`check_applies` with
``reason``, unless its value is one of ``inert`` (the value that kind always runs with, e.g.
``causal=False`` on a model). A model shown a stream of sets is a ``"model"`` run whose timing
is a stream's: ``presentation`` and ``lag`` apply, ``duration`` does not (checked as a
``"stream"`` for ``duration``). Options not listed apply everywhere."""


_KIND_NAMES = {"set": "one token set", "stream": "a stream of sets", "model": "a transformer model"}


def check_applies(kind: str, given: dict, flags: dict | None = None) -> None:
    """Refuse every option of ``given`` that does not apply to a run of ``kind`` (:data:`APPLIES`).

    Parameters
    ----------
    kind : {"set", "stream", "model"}
    given : dict
        Option name -> the value the user gave (``None``: not given or the default). A name may be
        qualified by the object that carries it (``"run_options.duration"``): the table is read by
        its last part, the message names it whole.
    flags : dict, optional
        Option name -> the command-line flag that gave it (``"--record-spikes"``): the message
        names the flag.

    Raises
    ------
    ValueError
        ``"<option or flag>: does not apply to <kind>, only to <kinds>: <reason>"``.
    """
    if kind not in RUN_KINDS:
        raise ValueError(f"kind: expected one of {list(RUN_KINDS)}, got {kind!r}")
    for name, value in given.items():
        if value is None:
            continue
        kinds, inert, reason = APPLIES.get(name.rsplit(".", 1)[-1], (_ALL, (), ""))
        if kind in kinds or _inert(value, inert):
            continue
        label = (flags or {}).get(name, name)
        raise ValueError(f"{label}: does not apply to {_KIND_NAMES[kind]}, only to "
                         f"{' and '.join(_KIND_NAMES[k] for k in kinds)}: {reason}")


def _inert(value, inert) -> bool:
    """``value`` is one of ``inert`` (a sequence compares as a tuple; a bool only with a bool)."""
    value = tuple(value) if isinstance(value, list) else value
    return any(isinstance(value, (bool, np.bool_)) == isinstance(v, bool) and _equal(value, v) for v in inert)


def _equal(a, b) -> bool:
    try:
        return bool(a == b)
    except Exception:   # arrays, objects without a truth value
        return False


def given_options(circuit_options=None, run_options=None, **kwargs) -> dict:
    """The options a call gave, as :func:`check_applies` reads them: every keyword not ``None``,
    and every field of ``circuit_options``/``run_options`` that differs from its default, named
    ``"circuit_options.<field>"``/``"run_options.<field>"``."""
    given = {k: v for k, v in kwargs.items() if v is not None}
    for prefix, obj, cls in (("circuit_options", circuit_options, CircuitOptions),
                             ("run_options", run_options, RunOptions)):
        if isinstance(obj, cls):
            default = cls()
            for f in fields(cls):
                v = getattr(obj, f.name)
                # a keyword left at None leaves the field in force (split_options), so it is given
                if kwargs.get(f.name) is None and v is not None and not _equal(v, getattr(default, f.name)):
                    given[f"{prefix}.{f.name}"] = v
    return given


CIRCUIT_FIELDS = tuple(f.name for f in fields(CircuitOptions))
RUN_FIELDS = tuple(f.name for f in fields(RunOptions))
_NONE_DEFAULT = {cls: {f.name: f.default is None for f in fields(cls)} for cls in (CircuitOptions, RunOptions)}
"""Per option object, field -> whether its default is ``None`` (a keyword ``None`` then leaves the field)."""


def split_options(circuit_options: CircuitOptions | None = None, run_options: RunOptions | None = None,
                  **kwargs) -> tuple[CircuitOptions, RunOptions]:
    """Today's flat keywords of :func:`ctmhsa.sims.simulate_mhsa` as the two option objects.

    ``circuit_options``/``run_options`` give a starting point (default: the defaults); keywords
    override their fields, except ``None`` for a field whose default is ``None`` (or ``params``,
    ``gains``), which leaves the object's value. The keyword ``circuit`` names the variant
    (``"quadratic"``/``"linear"``). An unknown keyword is a ``TypeError`` naming it.
    """
    for name, obj, cls in (("circuit_options", circuit_options, CircuitOptions),
                           ("run_options", run_options, RunOptions)):
        if obj is not None and not isinstance(obj, cls):
            raise TypeError(f"{name}: expected ctmhsa.sims.options.{cls.__name__}, got {type(obj).__name__}")
    unknown = sorted(set(kwargs) - set(CIRCUIT_FIELDS) - set(RUN_FIELDS))
    if unknown:
        raise TypeError(f"unexpected keyword argument {unknown[0]!r}; circuit options are {list(CIRCUIT_FIELDS)}, "
                        f"run options {list(RUN_FIELDS)}")
    c = {k: v for k, v in kwargs.items() if k in CIRCUIT_FIELDS}
    r = {k: v for k, v in kwargs.items() if k in RUN_FIELDS}
    # None means "the default" for the object-valued options, as it always has, and for every field
    # whose default is None (dt, warmup, presentation, input_range, ...): a keyword left at None
    # must not replace what circuit_options/run_options set
    for opts, cls in ((c, CircuitOptions), (r, RunOptions)):
        for k in [k for k, v in opts.items() if v is None and (k in ("params", "gains") or _NONE_DEFAULT[cls][k])]:
            del opts[k]
    co = (circuit_options or CircuitOptions()).replace(**c)
    ro = (run_options or RunOptions()).replace(**r)
    return co, ro
