"""Options of a simulation, as validated frozen parameter objects.

Two objects, as NetPyNE separates ``netParams`` from ``simConfig``:

- :class:`CircuitOptions` — *what is built*: the fidelity level, the dendritic feature map, the
  circuit variant and its structure, the physiological constants and the gains of the codes.
  They decide the Brian2 network and the encoded values.
- :class:`RunOptions` — *how it runs*: simulated time, step, warm-up, seed, code generation,
  device, threads, scheduler, recording. The same built circuit can run under different ones.

Every default is written here once (the TOML tables ``[circuit]`` and ``[run]`` of
:mod:`ctmhsa.sims.config` are these fields). Every field is checked when the object is made, so a bad
option raises a ``ValueError``/``TypeError`` naming it before anything is built. Times accept
Brian2 quantities (``500*ms``) or floats in seconds, and are stored in seconds.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
from dataclasses import dataclass, field, fields

import numpy as np

from ctmhsa.circuits.builders import CIRCUITS, DEFAULT_N_INH, SIGNED_CODES, pathway
from ctmhsa.mapping.codes import CodeGains, default_gains
from ctmhsa.neurons.laws import check_law
from ctmhsa.neurons.models import FIDELITY_LEVELS, PHI_EXPRESSIONS
from ctmhsa.neurons.params import DEFAULT_PARAMS, CellParams, seconds

__all__ = ["CircuitOptions", "RunOptions", "split_options", "seconds", "DEFAULT_DT", "DEFAULT_WARMUP",
           "N_CHUNKS", "AUTO_CYTHON_SYNAPSES", "CODEGEN", "DEVICES"]

DEFAULT_DT = {"rate": 1e-3, "escape": 1e-3, "lif": 1e-4}
"""Default integration step per level (s). The rate level's steady state does not depend on
dt (exponential Euler is exact for its linear compartments); escape cells spike with
probability r dt, exact in expectation while r dt < 1 (1 ms: rates up to a few hundred Hz);
LIF somata need 0.1 ms for their threshold crossings."""

DEFAULT_WARMUP = {"rate": 0.0, "escape": 0.5, "lif": 0.5}
"""Discarded warm-up before the measurement window (s): the interneurons settle in ~0.1 s."""

N_CHUNKS = 10
"""Spike counts are taken at this many equal chunks of the measurement window (one run, see
:func:`ctmhsa.neurons.window.measure`); the spread of the chunk counts gives each population's Fano
factor."""

AUTO_CYTHON_SYNAPSES = 200_000
"""With ``codegen="auto"``, networks with at least this many synapses use Cython (compiled once
per code object and cached); smaller ones use Brian2's numpy target, which needs no compiler."""

CODEGEN = ("auto", "numpy", "cython")
REPORTS = ("progress", "text", "stdout", "stderr")
DEVICES = ("runtime", "cpp_standalone", "cuda_standalone")


def _choice(name, value, allowed):
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name}: expected one of {list(allowed)}, got {value!r}")


def _flag(name, value, expected="True or False"):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected {expected}, got {value!r}")


def _set(obj, name, value):
    object.__setattr__(obj, name, value)   # frozen: only __post_init__ normalises a field


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
    normalize : bool
        ``False``: the unnormalised variant (no interneurons).
    circuit : {"quadratic", "linear"}
        Algorithm 1, or the linear-time key-value-memory circuit.
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
    params : CellParams
        Physiological constants.
    gains : CodeGains, optional
        Gains of the affine codes; ``None``: the level's default
        (:func:`ctmhsa.mapping.codes.default_gains`), see :attr:`code_gains`.
    """

    neuron: str = "escape"
    phi: str = "elu1"
    causal: bool = False
    normalize: bool = True
    circuit: str = "quadratic"
    law: str = "product"
    P: int | dict = 1
    n_inh: int = DEFAULT_N_INH
    signed: str = "onoff"
    fold: bool = True
    params: CellParams = DEFAULT_PARAMS
    gains: CodeGains | None = None

    def __post_init__(self):
        _choice("neuron", self.neuron, FIDELITY_LEVELS)
        if not isinstance(self.phi, str):
            raise TypeError(
                f"phi: the circuit implements named feature maps {sorted(PHI_EXPRESSIONS)} "
                f"(dendritic nonlinearities); got {type(self.phi).__name__}. Custom callables work in "
                "ctmhsa.mapping.reference only")
        if self.phi not in PHI_EXPRESSIONS:
            raise ValueError(f"phi: unknown feature map {self.phi!r}; expected one of {sorted(PHI_EXPRESSIONS)}")
        for name in ("causal", "normalize", "fold"):
            _flag(name, getattr(self, name), "a bool" if name == "fold" else "True or False")
            _set(self, name, bool(getattr(self, name)))
        _choice("circuit", self.circuit, CIRCUITS)
        check_law(self.law)
        if self.law != "product" and self.circuit == "linear":
            raise ValueError("law: the linear circuit has no L5 IT cells; two-point-neuron laws apply "
                             "to circuit='quadratic'")
        if self.causal and self.circuit == "linear":
            raise ValueError("causal: the linear key-value-memory circuit stores one memory per head; "
                             "it has no causal variant (use circuit='quadratic')")
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
            raise TypeError(f"gains: expected ctmhsa.mapping.codes.CodeGains, got {type(self.gains).__name__}")

    def __hash__(self):   # P may be a dict
        return hash(repr(self.to_dict()))

    def describe(self, n: int, dk: int, dv: int, de: int, H: int = 1, m: int | None = None,
                 cross: bool = False, skip: bool = False):
        """The pathway these options build for the given sizes (:func:`ctmhsa.circuits.builders.pathway`;
        ``cross``: a second input nucleus, ``skip``: the core -> L5 PT skip connection)."""
        return pathway(n, dk, dv, de, H=H, m=m, cross=cross, causal=self.causal, normalize=self.normalize,
                       P=self.P, n_inh=self.n_inh, signed=self.signed, skip=skip, circuit=self.circuit)

    @classmethod
    def from_config(cls, config: dict) -> "CircuitOptions":
        """The options recorded in a result's flat configuration (``SimulationResult.config``)."""
        return cls(**{k: config[k] for k in CIRCUIT_FIELDS if k in config and k not in ("params", "gains")})

    @property
    def code_gains(self) -> CodeGains:
        """The gains in use: ``gains``, or the level's default when ``gains`` is None."""
        return default_gains(self.neuron) if self.gains is None else self.gains

    def to_dict(self) -> dict:
        out = super().to_dict()
        out["gains"] = self.code_gains.to_dict()    # what was used, not "default"
        return out

    @property
    def spiking(self) -> bool:
        return self.neuron != "rate"


@dataclass(frozen=True)
class RunOptions(_Options):
    """How a built circuit runs.

    Attributes
    ----------
    duration : float
        Simulated biological time (s): the final state at the rate level, the measurement
        window (after ``warmup``) at the spiking levels.
    dt : float, optional
        Integration step (s); ``None``: :data:`DEFAULT_DT` of the level.
    warmup : float, optional
        Discarded time before the measurement window (s); ``None``: :data:`DEFAULT_WARMUP`.
    seed : int
        Random seed of the spiking levels.
    checkpoints : tuple of float
        Window lengths (s, < ``duration``) at which every stage is also decoded (runtime device).
    codegen : {"auto", "numpy", "cython"}
        Brian2 code-generation target of the runtime device.
    device : {"runtime", "cpp_standalone", "cuda_standalone"}
        Brian2 device (see :mod:`ctmhsa.sims.runners`); ``"cuda_standalone"`` needs brian2cuda and a
        GPU (checked here: a ``ValueError`` naming ``device`` otherwise).
    threads : int, optional
        OpenMP threads of the standalone device (``None``: all cores, or 1 per task in a split
        run on dask workers; 0 or 1: one thread, compiled without OpenMP).
    scheduler : None, "serial", "local", address or ``distributed.Client``
        Split the pathway at its nuclei and run every head as its own task.
    record_spikes : bool or tuple of str
        Keep spike times (all populations or the named ones).
    max_memory : int, optional
        Refuse networks whose estimated memory exceeds this many bytes (``None``: 80 % of the
        available memory).
    report : None, "progress", "text", "stdout", "stderr" or callable
        Progress during the run: ``"progress"`` draws a tqdm bar over the biological time
        (:class:`ctmhsa.sims.progress.RunProgress`; on the standalone device read from the binary's
        report), ``"text"`` prints Brian2's text report, a callable is Brian2's
        ``report(elapsed, completed, start, duration)``.
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
    max_memory: int | None = None
    report: object = field(default=None, compare=False)

    def __post_init__(self):
        _set(self, "duration", seconds("duration", self.duration))
        _set(self, "dt", seconds("dt", self.dt, allow_none=True))
        try:
            _set(self, "warmup", seconds("warmup", self.warmup, allow_none=True, allow_zero=True))
        except TypeError as exc:   # a ValueError, as warmup has always raised
            raise ValueError(f"warmup: expected a non-negative finite time in seconds; {exc}") from None
        if self.dt is not None and self.dt > self.duration:
            raise ValueError(f"dt: {self.dt} s is longer than duration = {self.duration} s")
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral) or self.seed < 0:
            raise ValueError(f"seed: expected a non-negative integer, got {self.seed!r}")
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
        if self.device not in DEVICES:
            raise ValueError(f"device: expected 'runtime', 'cpp_standalone' or 'cuda_standalone', "
                             f"got {self.device!r}")
        if self.device == "cuda_standalone":
            from ctmhsa.circuits.standalone import check_device

            check_device(self.device)
        if self.threads is not None and (isinstance(self.threads, bool)
                                         or not isinstance(self.threads, (int, np.integer)) or self.threads < 0):
            raise ValueError(f"threads: expected an integer >= 0 (0 = no OpenMP), got {self.threads!r}")
        s = self.scheduler
        if s is not None:
            if not (isinstance(s, str) or type(s).__name__ == "Client"):
                raise ValueError(f"scheduler: expected None, 'serial', 'local', an address or a "
                                 f"distributed.Client; got {s!r}")
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
        if self.max_memory is not None and (isinstance(self.max_memory, bool)
                                            or not isinstance(self.max_memory, numbers.Real) or self.max_memory <= 0):
            raise ValueError(f"max_memory: expected a positive number of bytes, got {self.max_memory!r}")

    def records(self, population: str) -> bool:
        """Whether the spike times of ``population`` are kept (``record_spikes``)."""
        return self.record_spikes is True or (bool(self.record_spikes) and population in self.record_spikes)

    def resolved(self, level: str) -> "RunOptions":
        """A copy with the level's defaults filled in: ``dt``, ``warmup`` (0 at the rate level,
        which has no window) and ``threads`` (all cores; 1 per task on dask workers)."""
        if self.checkpoints and level == "rate":
            raise ValueError("checkpoints: the rate level has no counting window; use a spiking level")
        warm = 0.0 if level == "rate" else (DEFAULT_WARMUP[level] if self.warmup is None else self.warmup)
        if self.threads is not None:
            threads = int(self.threads)
        elif self.scheduler is None or self.scheduler == "serial":
            threads = os.cpu_count() or 1
        else:   # heads as dask tasks: one task per worker thread, one thread per task
            threads = 1
        return self.replace(dt=self.dt or DEFAULT_DT[level], warmup=warm, threads=threads)

    def to_dict(self) -> dict:
        out = super().to_dict()
        s = self.scheduler
        out["scheduler"] = None if s is None else (s if isinstance(s, str) else "client")
        out["report"] = None if self.report is None else (self.report if isinstance(self.report, str) else "callable")
        return out


CIRCUIT_FIELDS = tuple(f.name for f in fields(CircuitOptions))
RUN_FIELDS = tuple(f.name for f in fields(RunOptions))


def split_options(circuit_options: CircuitOptions | None = None, run_options: RunOptions | None = None,
                  **kwargs) -> tuple[CircuitOptions, RunOptions]:
    """Today's flat keywords of :func:`ctmhsa.sims.simulate_mhsa` as the two option objects.

    ``circuit_options``/``run_options`` give a starting point (default: the defaults); keywords
    override their fields. The keyword ``circuit`` names the variant (``"quadratic"``/``"linear"``).
    An unknown keyword is a ``TypeError`` naming it.
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
    # None means "the default" for the object-valued options, as it always has
    for k in ("params", "gains"):
        if k in c and c[k] is None:
            del c[k]
    co = (circuit_options or CircuitOptions()).replace(**c)
    ro = (run_options or RunOptions()).replace(**r)
    return co, ro
