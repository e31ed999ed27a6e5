"""``train_mhsa``: the circuit learns with the paper's §5 gradients, formed from its own activity.

Every step simulates the circuit once per sequence of the batch, decodes what its cells
measured — presynaptic token rates at nucleus 1, the dendritic potentials that carry q (L2/3
basal), k (L2/3 apical) and v (L5 IT basal) in every macrocolumn, the L2/3 somatic rates that
carry κ, the division Z of the interneurons, the L5 PT rates (ṽ) and the nucleus-2 rates (x̃) —
forms the updates of eqs. (2)–(5) from those measurements
(:func:`ctmhsa.maths.gradients.gradients_from_stages`) and applies them. The error ``e_i = t_i − x̃_i``
is formed at nucleus 2 from the decoded output and fed back to the L5 cells of macrocolumn i
through ``WOᵀ`` (see ``docs/learning.md`` for which factor of every update is local to its
synapse and which needs that feedback). The exact reference (:func:`ctmhsa.maths.reference.linear_mhsa`,
:func:`ctmhsa.maths.gradients.formal_gradients`) is computed only to REPORT the exact loss and the
cosine between the circuit's gradient and the exact one; nothing of it enters an update.

Weights are duplicated across macrocolumns (macrocolumn i holds its own synapses of WQ, WK, WV
onto its microcolumns and of WO onto nucleus 2). ``tied=True`` (default): every copy receives the
sum of all copies' updates (weight sharing; the sum is the formal gradient). ``tied=False``: every
copy learns from its own activity only (its term of the sum, the exact gradient of an untied
circuit); the copies are installed into their macrocolumns' synapses before every run and their
divergence is reported.
"""

from __future__ import annotations

import json
import logging
import numbers
import os
import time
from dataclasses import dataclass, field

import numpy as np

from ctmhsa.devices.registry import get_device
from ctmhsa.devices.standalone import release
from ctmhsa.circuits.fold import fold_plan, simulated_synapse_count
from ctmhsa.circuits.parts import get_area
from ctmhsa.mapping.decode import key_value_potentials, signed_rate
from ctmhsa.mapping.encode import cell_weights
from ctmhsa.maths.gradients import formal_gradients, gradients_from_stages, mhsa_loss
from ctmhsa.maths.reference import _as_real_array, check_attention_inputs, linear_mhsa
from ctmhsa.neurons.models import FIDELITY_LEVELS
from ctmhsa.neurons.law_registry import get_law
from ctmhsa.neurons.levels import get_level

from ctmhsa.circuits.instantiate import assign

from .build import _build, _check_runtime, _wall
from .config import check_output_dir
from .options import check_applies, check_record_spikes, check_scheduler, given_options, split_options
from .runners import Runner, RuntimeRunner, StandaloneRunner

__all__ = ["train_mhsa", "TrainingResult", "default_lr", "WEIGHT_NAMES", "measured_stages", "teacher_student",
           "curve_summary", "exact_descent", "estimate_training_bytes"]

log = logging.getLogger(__name__)

WEIGHT_NAMES = ("WQ", "WK", "WV", "WO")

DEFAULT_LR0 = 0.1
"""``lr=None`` takes ``DEFAULT_LR0 / (B n)``: the loss is a sum over the B n tokens of a batch, so
this is a step of 0.1 per token (measured on teacher–student problems with n = 4–8, H = 2: exact
gradient descent reaches ≤ 0.2× its loss in 60 steps; 0.5 diverges on some)."""

#: projection -> (weight, side that names the macrocolumn of a synapse, gain key of its code)
_COPY_PROJECTIONS = (("core_q", 0, "post", "rho_in"), ("matrix_k", 1, "post", "rho_in"),
                     ("matrix_v", 2, "post", "rho_in"), ("pt_out", 3, "pre", "rho_pt"))


def default_lr(B: int, n: int) -> float:
    """The learning rate of ``lr=None``: ``0.1 / (B n)`` (per squared unit of the tokens)."""
    return DEFAULT_LR0 / (B * n)


@dataclass
class TrainingResult:
    """Outcome of :func:`train_mhsa`.

    Attributes
    ----------
    loss : ndarray (steps,)
        Loss ``Σ_b Σ_i ½‖t_i − x̃_i‖²`` from the circuit's decoded output at every step, before
        that step's update (units of the tokens, squared).
    exact_loss : ndarray (steps + 1,)
        The same loss of the exact reference at the weights before every step and after the
        last (a report; never an input).
    weights : tuple of ndarray
        ``(WQ, WK, WV, WO)`` after training (``tied=False``: the mean over the copies).
    gradients : list of tuple
        Per step, ``(−∂E/∂WQ, −∂E/∂WK, −∂E/∂WV, −∂E/∂WO)`` formed from the circuit's activity,
        summed over the batch (``tied=False``: one per copy, a leading axis of length n).
    cosines : ndarray (steps, 4)
        Cosine between each circuit gradient and the exact gradient at the same weights
        (:func:`ctmhsa.maths.gradients.formal_gradients`; ``tied=False``: of every copy's own term,
        all copies flattened together).
    spread : ndarray (steps + 1, 4)
        Divergence of the copies: ``sqrt(mean_i ‖W_i − W̄‖²) / ‖W̄‖`` per matrix (0 when tied).
    copies : tuple of ndarray or None
        ``tied=False``: the copies ``(n, *W.shape)`` after training.
    lr : float
        Learning rate used.
    level : str
    tied : bool
    step_time : ndarray (steps,)
        Wall-clock seconds of every step (simulations, read-out and update).
    build_time : ndarray (steps,)
        The part of ``step_time`` spent validating, encoding and building (the first run) or
        rewriting (every later run) the network, s; code generation and simulation excluded.
    config : dict
        The arguments, as resolved.
    """

    loss: np.ndarray
    exact_loss: np.ndarray
    weights: tuple
    gradients: list
    cosines: np.ndarray
    spread: np.ndarray
    copies: tuple | None
    lr: float
    level: str
    tied: bool
    step_time: np.ndarray
    build_time: np.ndarray = field(default_factory=lambda: np.zeros(0))
    config: dict = field(default_factory=dict)

    def ratio(self, step: int = -1, exact: bool = True) -> float:
        """Loss after ``step`` steps over the initial loss (exact loss by default; the circuit's
        decoded loss, which is measured before every update, with ``exact=False``)."""
        arr = self.exact_loss if exact else self.loss
        return float(arr[step] / arr[0])

    def __repr__(self) -> str:
        return (f"<TrainingResult {self.level} tied={self.tied} steps={len(self.loss)} "
                f"exact loss {self.exact_loss[0]:.3g} -> {self.exact_loss[-1]:.3g}>")


def _batched(name: str, a) -> np.ndarray:
    a = _as_real_array(name, a)
    if a.ndim == 2:
        return a[None]
    if a.ndim != 3:
        raise ValueError(f"{name}: expected shape (batch, n, de) or (n, de); got {a.shape}")
    return a


def _check(X, T, W, neuron, steps, lr, seed, tied, Y, options):
    if isinstance(neuron, bool) or not isinstance(neuron, str) or neuron not in FIDELITY_LEVELS:
        raise ValueError(f"neuron: expected one of {sorted(FIDELITY_LEVELS)}; got {neuron!r}")
    if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps < 1:
        raise ValueError(f"steps: expected an integer >= 1; got {steps!r}")
    if lr is not None and (isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not np.isfinite(lr)
                           or lr <= 0):
        raise ValueError(f"lr: expected None or a finite number > 0; got {lr!r}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed: expected a non-negative integer; got {seed!r}")
    if not isinstance(tied, bool):
        raise TypeError(f"tied: expected True or False; got {tied!r}")
    if "WS" in options:
        raise TypeError("WS: not supported by train_mhsa (eqs. 2-5 have no skip connection)")
    for name in ("circuit_options", "run_options"):   # neuron= and seed= would silently replace their fields
        if name in options:
            raise TypeError(f"{name}: train_mhsa takes its options as keywords (neuron=, seed=, duration=, "
                            f"...); pass the fields of the {name} object as keywords instead")
    check_applies("set", given_options(**options))    # every run is one token set: presentation, ... refused
    X, T = _batched("X", X), _batched("T", T)
    if T.shape != X.shape:
        raise ValueError(f"T: expected the shape of X {X.shape} (targets of the block output); got {T.shape}")
    Yb = None if Y is None else _batched("Y", Y)
    if Yb is not None and Yb.shape[0] != X.shape[0]:
        raise ValueError(f"Y: expected {X.shape[0]} sequences like X; got {Yb.shape[0]}")
    co, ro = split_options(None, None, neuron=neuron, seed=int(seed), **options)
    if "kappa" not in get_area(co.circuit).stages or get_area(co.circuit).stream:
        raise ValueError(f"circuit: train_mhsa needs a circuit that measures κ over a token set (Algorithm 1's, "
                         f"'quadratic'); got {co.circuit!r}")
    if not get_law(co.law).product:
        raise ValueError(f"law: eqs. 2-5 are the gradients of the product law; got {co.law!r}")
    a = check_attention_inputs(X, *W, Y=Yb, causal=co.causal, normalize=co.normalize)
    if not tied:
        if co.signed != "onoff":
            raise ValueError("signed: tied=False installs every copy's weights into its synapses, which "
                             "needs the ON/OFF code (signed='onoff'; the offset code's biases depend on the weights)")
        if get_device(ro.device).compiles or ro.scheduler is not None:
            raise ValueError("device: tied=False sets the synapses of the built network; it needs the runtime "
                             "device and no scheduler")
        if options.get("fold"):
            raise ValueError("fold: tied=False gives every macrocolumn its own key and value synapses, which "
                             "cannot be folded; leave fold unset")
    _check_training_runtime(co, ro, a, int(steps), tied, Yb is not None)
    return X, T, Yb, co, ro, a


def _check_training_runtime(co, ro, a, steps: int, tied: bool, cross: bool) -> float:
    """The whole training's estimated wall time (s): ``steps`` x batch runs, each estimated as
    :func:`ctmhsa.sims.build_mhsa` estimates one (:func:`ctmhsa.sims.estimate_runtime`, building
    excluded); a ``ValueError`` naming ``steps`` and ``max_runtime`` past the limit, before
    anything is built (each run is also held to the limit when it is built)."""
    ro = ro.resolved(co.neuron, co.circuit)
    circuit = co.as_built(co.describe(a["n"], a["dk"], a["dv"], a["de"], H=a["H"], m=a["m"], cross=cross))
    synapses = simulated_synapse_count(circuit, fold_plan(circuit, co.neuron) if co.fold and tied else {})
    per = a["H"] if ro.scheduler is not None else 1       # a split run's heads run in parallel
    sim_steps = int(round((ro.warmup + ro.duration) / ro.dt))
    run = _check_runtime(circuit, co, ro.replace(max_runtime=None), synapses, per)    # one run, not held to the limit
    total = steps * a["B"] * run
    limit = float("inf") if ro.max_runtime is None else ro.max_runtime
    if total > limit:
        raise ValueError(
            f"max_runtime: the training is estimated to take {_wall(total)} of wall time, past max_runtime = "
            f"{limit:g} s: steps = {steps:,} gradient steps x {a['B']} run(s) (batch) of about {_wall(run)} each "
            f"({sim_steps:,} steps of {'warmup ' + format(ro.warmup, 'g') + ' s + ' if ro.warmup else ''}"
            f"duration {ro.duration:g} s at dt = {ro.dt:g} s, {circuit.n_neurons():,} neurons and {synapses:,} "
            "synapses); reduce steps, shorten duration, raise dt, or raise the limit (max_runtime=<seconds>, "
            "or max_runtime=None for none)")
    return total


def measured_stages(sim, res) -> tuple[np.ndarray, np.ndarray, dict]:
    """What the circuit of ``sim`` (a :class:`ctmhsa.sims.build.Simulation` that has run, giving ``res``)
    measured, decoded per macrocolumn: ``(x, y, stages)``.

    ``x (n, de)``, ``y (m, de)``: the tokens decoded from the relay rates of nucleus 1 (the
    presynaptic rates of every core and matrix synapse). ``stages``: ``q (H, n, dk)`` (L2/3
    basal dendrites of macrocolumn i), ``k (H, n, m, dk)`` and ``v (H, n, m, dv)`` (L2/3 apical
    and L5 IT basal dendrites of microcolumn j *in macrocolumn i*: every macrocolumn's own copy),
    ``kappa (H, n, m)`` (L2/3 somatic rates), ``Z (H, n)`` (the interneurons' division),
    ``v_tilde (H, n, dv)`` (L5 PT), ``x_tilde (n, de)`` (nucleus 2).
    """
    circuit, enc, obs = sim.circuit, sim.encoding, sim.observations.final
    pops, codes = circuit.populations, enc.codes
    n = circuit.meta.n
    with np.errstate(invalid="ignore"):
        va, vb = key_value_potentials(circuit, obs)                 # (H, n, m, d), NaN: absent
        k = np.stack([codes["k"].decode(va[:, i]) for i in range(n)], axis=1)
        v = np.stack([codes["v"].decode(vb[:, i]) for i in range(n)], axis=1)
        x = codes["tokens"].decode(signed_rate(pops["nucleus1"], obs["nucleus1"]["r"]))
        y = x if "nucleus1_kv" not in pops else codes["tokens"].decode(
            signed_rate(pops["nucleus1_kv"], obs["nucleus1_kv"]["r"]))
    stages = dict(q=res.stages["q"], k=k, v=v, kappa=res.stages["kappa"], v_tilde=res.stages["v_tilde"],
                  x_tilde=res.stages["x_tilde"])
    if "Z" in res.stages:
        stages["Z"] = res.stages["Z"]
    return x, y, stages


def _install_copies(sim, copies) -> None:
    """Give the synapses of every macrocolumn i its own copy ``copies[w][i]`` of WQ, WK, WV
    (onto its microcolumns) and WO (its L5 PT onto nucleus 2): the encoding of
    :func:`ctmhsa.mapping.encode.encode` (``u W / rho`` through :func:`ctmhsa.mapping.encode.cell_weights`),
    per macrocolumn."""
    circuit, enc = sim.circuit, sim.encoding
    u, gains = enc.consts["u"], enc.consts["gains"]
    synapses = sim.runner.built.synapses
    for pname, wi, side, gain in _COPY_PROJECTIONS:
        proj = circuit.projections[pname]
        i, j = circuit.pairs(proj)
        pop = circuit.population(proj.source if side == "pre" else proj.target)
        mac = pop.axis("i")[i if side == "pre" else j]
        w = np.empty(len(i))
        for c in range(copies[wi].shape[0]):
            arr = cell_weights(circuit, proj, u * copies[wi][c] / gains[gain])
            sel = mac == c
            w[sel] = circuit.synapse_weights(proj, arr, i[sel], j[sel])
        synapses[pname].w_[:] = w


_INITIAL = "ctmhsa_train_initial"
"""Name of the kept network's stored state: as built, before its first run."""


class _KeptRunner(RuntimeRunner):
    """The runtime device's runner on a kept network: its state as built is restored (Brian2
    ``Network.restore``: every variable, monitor and the clock, t = 0), then the run's values
    and seed are written by :func:`ctmhsa.circuits.instantiate.assign`, as a new build writes
    them, so the run equals one on a network built afresh (the same escape draws and spikes)."""

    def __init__(self, built, *args):
        Runner.__init__(self, *args)          # the run's checks; no network
        t0 = time.perf_counter()
        built.network.restore(_INITIAL)
        assign(built, self.encoding.values, self.run_options.seed)
        built.build_time = time.perf_counter() - t0
        self._built = built

    def run(self, run_options):
        # its code objects were generated and compiled for its first run: no second preparation
        # (a zero-length run, which changes no state); Brian2 is seeded when the run starts
        built = self._built
        built.preparation, built.compiled = 0.0, dict(modules=0, seconds=0.0, loaded=0)
        built.prepare = lambda bar=None: 0.0
        try:
            return super().run(run_options)
        finally:
            del built.prepare


class _Network:
    """The networks of a training's runs (``make_runner`` of :func:`ctmhsa.sims.build._build`): one
    per structure of the circuit, built once.

    On the runtime device a run whose circuit (:meth:`ctmhsa.circuits.graph.Circuit.to_dict`) is new
    builds its network and stores its state; every later run of that structure restores it and
    writes its own values (:class:`_KeptRunner`). Two structures alternate when the apical division
    stage, resolved per run from the weights and tokens where ``apical_inhibition`` is not given,
    is on for some runs and off for others: each keeps its network. On a standalone device the
    compiled project of each structure keeps its network in this process (``run_project``'s
    ``rebind``): a later run writes its values, seed and first draws as run arguments and only
    runs the binary; :meth:`close` drops them. Other runners build as they do."""

    def __init__(self):
        self.kept = {}

    def runner(self, cls, circuit, *args):
        if cls is StandaloneRunner:
            runner = cls(circuit, *args)
            runner.rebind = lambda built, run_args: assign(built, runner.encoding.values, runner.run_options.seed,
                                                           run_args)
            return runner
        if cls is not RuntimeRunner:
            return cls(circuit, *args)
        structure = json.dumps(circuit.to_dict(), sort_keys=True, default=str)
        if structure in self.kept:
            return _KeptRunner(self.kept[structure], circuit, *args)
        runner = cls(circuit, *args)
        runner.built.network.store(_INITIAL)
        self.kept[structure] = runner.built
        return runner

    def close(self) -> None:
        """Drop the networks a standalone device kept for this training."""
        release()


def _exact_untied(X, Y, T, copies, phi, causal, normalize):
    """Exact loss and per-copy gradients of the untied block (row i of the output depends on
    macrocolumn i's copies only)."""
    n = X.shape[0]
    loss, grads = 0.0, [np.zeros_like(c) for c in copies]
    for i in range(n):
        W = [c[i] for c in copies]
        st = linear_mhsa(X, *W, phi=phi, Y=Y, causal=causal, normalize=normalize)
        e = T - st["x_tilde"]
        loss += 0.5 * float(np.sum(e[i] ** 2))
        stages = {k: st[k] for k in ("q", "k", "v", "kappa", "Z", "v_tilde") if k in st}
        g = gradients_from_stages(X, X if Y is None else Y, stages, e, W[3], phi=phi, causal=causal,
                                  normalize=normalize, per_query=True)
        for acc, gi in zip(grads, g):
            acc[i] += gi[i]
    return loss, grads


def _cos(a, b) -> float:
    a, b = np.ravel(a), np.ravel(b)
    d = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b / d) if d > 0 else float("nan")


def _spread(copies) -> np.ndarray:
    out = []
    for c in copies:
        mean = c.mean(axis=0)
        out.append(float(np.sqrt(np.mean(np.sum((c - mean) ** 2, axis=tuple(range(1, c.ndim)))))
                         / (np.linalg.norm(mean) or 1.0)))
    return np.array(out)


def train_mhsa(X, T, WQ, WK, WV, WO, neuron: str = "rate", steps: int = 100, lr: float | None = None,
               seed: int = 0, tied: bool = True, Y=None, progress=None, **options) -> TrainingResult:
    """Train the weights of the attention circuit with eqs. (2)–(5), measured from its activity.

    Parameters
    ----------
    X : array, shape (batch, n, de) or (n, de)
        Tokens (rates of thalamic nucleus 1 encode them), one sequence per batch item.
    T : array, shape like ``X``
        Targets of the block output x̃ (nucleus 2), same units as the tokens.
    WQ, WK : array, shape (H, dk, de)
    WV : array, shape (H, dv, de)
    WO : array, shape (H, de, dv)
        Initial weights (dimensionless; not modified).
    neuron : {"rate", "escape", "lif"}
        Fidelity level of the simulated circuit (default ``"rate"``). At the spiking levels every
        factor is decoded from spike counts and window means.
    steps : int
        Gradient steps (>= 1); each simulates every batch item once.
    lr : float, optional
        Learning rate (units: 1 / token units squared). Default :func:`default_lr`:
        ``0.1 / (B n)``, a step of 0.1 per token of the batch.
    seed : int
        Seed of the spiking levels: run b of step s gets a seed drawn from
        ``SeedSequence([seed, s, b])`` (same seed, same result).
    tied : bool
        ``True``: all macrocolumn copies of a weight receive the sum of their updates (the
        formal gradient). ``False``: every copy learns from its own activity; their divergence
        is reported in ``spread`` (runtime device, ``signed="onoff"``, no folding).
    Y : array, shape (batch, m, de) or (m, de), optional
        Key/value tokens (cross-attention).
    progress : callable, optional
        ``progress(step, result_so_far_dict)`` after every step (e.g. to print).
    **options
        Options of :func:`ctmhsa.sims.simulate_mhsa` (``phi``, ``duration``, ``dt``, ``warmup``, ``P``,
        ``causal``, ``normalize``, ``device``, ``codegen``, ...). ``WS``, ``circuit="linear"``
        and laws other than the product are refused. ``max_runtime`` limits the whole training
        (``steps`` x batch runs, estimated before anything is built) as well as every run.

    Returns
    -------
    TrainingResult

    Raises
    ------
    ValueError, TypeError
        Bad arguments (naming the argument), before any network is built; or a circuit that
        left its working range during training (the step is named).

    Notes
    -----
    The network is built once. Every run encodes its weights and tokens as
    :func:`ctmhsa.sims.build_mhsa` does (the same code); on the runtime device the first run of a
    circuit structure builds its network and stores its state (Brian2 ``Network.store``), and
    every later run restores that state (t = 0, every variable and monitor), writes its values,
    seed and escape cells' first draws into it (:func:`ctmhsa.circuits.instantiate.assign`) and
    runs the code generated and compiled for the first run. The results are those of a network
    built per run (the same spikes for the same seed). A run whose circuit is built otherwise
    (the apical division stage, resolved per run from the weights and tokens when
    ``apical_inhibition`` is not given) gets a network of its own, kept as well; ``tied=False``
    installs the copies after each rewrite. ``build_time`` in the result says what building and
    rewriting cost. On a standalone device every run reuses the compiled project of its shape
    (``ctmhsa.devices.standalone.run_project``); a split run (``scheduler``) builds its heads on
    the workers.
    """
    W0 = (WQ, WK, WV, WO)
    X, T, Yb, co, ro, a = _check(X, T, W0, neuron, steps, lr, seed, tied, Y, options)
    B, n = X.shape[0], X.shape[1]
    lr = default_lr(B, n) if lr is None else float(lr)
    W = [np.array(a[k], float) for k in WEIGHT_NAMES]
    copies = None if tied else [np.repeat(w[None], n, axis=0) for w in W]
    phi, causal, normalize = co.phi, co.causal, co.normalize
    run_opts = dict(options)
    if not tied:
        run_opts["fold"] = False
    losses, exact, grads, cosines, spread, times, build_times = [], [], [], [], [], [], []

    def exact_now():
        if tied:
            Lx = mhsa_loss(X, T, *W, phi=phi, Y=Yb, causal=causal, normalize=normalize)
            return Lx, formal_gradients(X, T, *W, phi=phi, Y=Yb, causal=causal, normalize=normalize)
        Lx, gx = 0.0, [np.zeros_like(c) for c in copies]
        for b in range(B):
            lb, gb = _exact_untied(X[b], None if Yb is None else Yb[b], T[b], copies, phi, causal, normalize)
            Lx += lb
            for acc, g in zip(gx, gb):
                acc += g
        return Lx, gx

    spread.append(np.zeros(4) if tied else _spread(copies))
    network = _Network()
    for s in range(steps):
        t0 = time.perf_counter()
        g_sum = [np.zeros_like(w) for w in (W if tied else copies)]
        L, t_build = 0.0, 0.0
        for b in range(B):
            run_seed = int(np.random.SeedSequence([int(seed), s, b]).generate_state(1)[0] % (2**31 - 1))
            try:
                tb = time.perf_counter()
                sim = _build(X[b], *W, Y=None if Yb is None else Yb[b], neuron=neuron, seed=run_seed,
                             make_runner=network.runner, **run_opts)
                if not tied:
                    _install_copies(sim, copies)
                t_build += time.perf_counter() - tb
                res = sim.run()
            except ValueError as exc:
                raise ValueError(f"step {s}, batch item {b}: {exc}") from exc
            x, y, st = measured_stages(sim, res)
            e = T[b] - st["x_tilde"]                         # the error at nucleus 2
            L += 0.5 * float(np.sum(e ** 2))
            WOf = W[3] if tied else copies[3]                # the feedback pathway WOᵀ e_i
            g = gradients_from_stages(x, y, st, e, WOf, phi=phi, causal=causal, normalize=normalize,
                                      per_query=not tied)
            for acc, gi in zip(g_sum, g):
                acc += gi
        # the exact loss and gradient at the same weights: a report, computed after the update
        # was formed and never used in it
        Lx, gx = exact_now()
        losses.append(L)
        exact.append(Lx)
        grads.append(tuple(g_sum))
        cosines.append([_cos(gc, ge) for gc, ge in zip(g_sum, gx)])
        if tied:
            W = [w + lr * g for w, g in zip(W, g_sum)]
            spread.append(np.zeros(4))
        else:
            copies = [c + lr * g for c, g in zip(copies, g_sum)]
            W = [c.mean(axis=0) for c in copies]
            spread.append(_spread(copies))
        times.append(time.perf_counter() - t0)
        build_times.append(t_build)
        log.info("step %d: loss %.4g (exact %.4g), cosines %s, %.2f s", s, L, Lx,
                 np.round(cosines[-1], 4).tolist(), times[-1])
        if progress is not None:
            progress(s, dict(loss=L, exact_loss=Lx, cosines=cosines[-1], step_time=times[-1],
                             build_time=build_times[-1]))
    network.close()
    exact.append(exact_now()[0])
    config = dict(neuron=neuron, steps=int(steps), lr=lr, seed=int(seed), tied=tied, B=B,
                  **{k: a[k] for k in ("n", "m", "H", "dk", "dv", "de")}, phi=phi, causal=causal,
                  normalize=normalize, cross=Yb is not None, options=dict(run_opts))
    return TrainingResult(
        loss=np.array(losses), exact_loss=np.array(exact), weights=tuple(W), gradients=grads,
        cosines=np.array(cosines), spread=np.array(spread),
        copies=None if tied else tuple(copies), lr=lr, level=neuron, tied=tied, step_time=np.array(times),
        build_time=np.array(build_times), config=config)


def teacher_student(n: int = 4, H: int = 2, dk: int = 3, dv: int = 3, de: int = 4, batch: int = 1,
                    seed: int = 0) -> dict:
    """A teacher–student problem: tokens ``X (batch, n, de)`` ~ N(0, 1), a random teacher of the
    given shape (projections scaled by 1/sqrt(de), WO by 1/sqrt(dv)), targets ``T`` = the
    teacher's exact output, and a student drawn alike with another seed (``W0``)."""
    for name, val in dict(n=n, H=H, dk=dk, dv=dv, de=de, batch=batch).items():
        if isinstance(val, bool) or not isinstance(val, numbers.Integral) or val < 1:
            raise ValueError(f"{name}: expected an integer >= 1; got {val!r}")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 1]))

    def weights(r):
        s = 1.0 / np.sqrt(de)
        return (r.normal(size=(H, dk, de)) * s, r.normal(size=(H, dk, de)) * s,
                r.normal(size=(H, dv, de)) * s, r.normal(size=(H, de, dv)) / np.sqrt(dv))

    X = rng.normal(size=(batch, n, de))
    teacher = weights(rng)
    student = weights(np.random.default_rng(np.random.SeedSequence([int(seed), 2])))
    T = linear_mhsa(X, *teacher)["x_tilde"]
    return dict(X=X, T=T, W0=student, teacher=teacher)


def exact_descent(X, T, WQ, WK, WV, WO, steps: int, lr: float | None = None, phi: str = "elu1", Y=None,
                  causal: bool = False, normalize: bool = True) -> np.ndarray:
    """Exact gradient descent on the reference (:func:`ctmhsa.maths.gradients.formal_gradients`):
    the loss before every step and after the last, ``(steps + 1,)`` (the comparison curve of
    the circuit's learning; ``lr=None``: :func:`default_lr`)."""
    X, T = _batched("X", X), _batched("T", T)
    lr = default_lr(X.shape[0], X.shape[1]) if lr is None else float(lr)
    W = [np.array(w, float) for w in (WQ, WK, WV, WO)]
    out = [mhsa_loss(X, T, *W, phi=phi, Y=Y, causal=causal, normalize=normalize)]
    for _ in range(int(steps)):
        g = formal_gradients(X, T, *W, phi=phi, Y=Y, causal=causal, normalize=normalize)
        W = [w + lr * gi for w, gi in zip(W, g)]
        out.append(mhsa_loss(X, T, *W, phi=phi, Y=Y, causal=causal, normalize=normalize))
    return np.array(out)


# --- ``ctmhsa train CONFIG``: configuration and results directory ---------------------------

TRAIN_DEFAULTS = {
    "problem": dict(n=4, H=2, dk=3, dv=3, de=4, batch=1, seed=0),
    "train": dict(levels=["rate", "escape"], steps=100, lr=None, tied=True),
    "circuit": {},
    "run": {},
    "output": dict(dir="results/train"),
}
"""Tables of a training configuration: ``[problem]`` the teacher–student sizes, ``[train]``
(``steps``: an integer or a table per level; ``lr`` omitted = :func:`default_lr`),
``[circuit]``/``[run]`` options of the circuit runs (:class:`ctmhsa.sims.options.CircuitOptions` /
:class:`ctmhsa.sims.options.RunOptions` fields; ``neuron`` and ``seed`` come from ``[train]`` and
``[problem]``), ``[output]``."""


def default_train_config_path() -> str:
    """Path of the shipped training configuration (``sims/configs/train.toml``)."""
    from importlib import resources

    return str(resources.files("ctmhsa.sims.configs").joinpath("train.toml"))


def resolve_train_config(raw: dict) -> dict:
    """Merge a training configuration's tables into :data:`TRAIN_DEFAULTS`, validating every
    key (a bad one is a ``ValueError`` naming it) before anything is simulated."""
    import copy

    cfg = copy.deepcopy(TRAIN_DEFAULTS)
    for table, values in raw.items():
        if table not in cfg:
            raise ValueError(f"config: unknown table [{table}]; expected {sorted(cfg)}")
        if not isinstance(values, dict):
            raise ValueError(f"config: [{table}] must be a table")
        for key, val in values.items():
            if table in ("problem", "train", "output") and key not in cfg[table]:
                raise ValueError(f"config: unknown key {table}.{key}; expected one of {sorted(cfg[table])}")
            if table in ("circuit", "run") and key in ("neuron", "seed"):
                raise ValueError(f"config: {table}.{key} is set by [train] levels / [problem] seed")
            if (table, key) == ("run", "scheduler"):     # named as the file's key, before the options check it
                check_scheduler(val, name="run.scheduler")
            cfg[table][key] = val
    p, t = cfg["problem"], cfg["train"]
    for key, val in p.items():
        if isinstance(val, bool) or not isinstance(val, int) or val < (0 if key == "seed" else 1):
            raise ValueError(f"config: problem.{key} must be a positive integer, got {val!r}")
    levels = t["levels"]
    if not isinstance(levels, list) or not levels or any(lv not in FIDELITY_LEVELS for lv in levels):
        raise ValueError(f"config: train.levels must be a list of {sorted(FIDELITY_LEVELS)}, got {levels!r}")
    steps = t["steps"] if isinstance(t["steps"], dict) else {lv: t["steps"] for lv in levels}
    for lv in levels:
        s = steps.get(lv)
        if isinstance(s, bool) or not isinstance(s, int) or s < 1:
            raise ValueError(f"config: train.steps of {lv!r} must be an integer >= 1, got {s!r}")
    t["steps"] = {lv: steps[lv] for lv in levels}
    if t["lr"] is not None and (isinstance(t["lr"], bool) or not isinstance(t["lr"], (int, float))
                                or not np.isfinite(t["lr"]) or t["lr"] <= 0):
        raise ValueError(f"config: train.lr must be a positive finite number (or omitted), got {t['lr']!r}")
    if not isinstance(t["tied"], bool):
        raise ValueError(f"config: train.tied must be true or false, got {t['tied']!r}")
    for lv in levels:    # the options of every level, validated now
        split_options(None, None, neuron=lv, seed=p["seed"], **_level_options(dict(cfg["circuit"], **cfg["run"]), lv))
    co = split_options(None, None, **cfg["circuit"])[0]
    populations = co.describe(p["n"], p["dk"], p["dv"], p["de"], H=p["H"]).populations
    check_record_spikes(cfg["run"].get("record_spikes"), populations, name="run.record_spikes")
    check_output_dir(cfg["output"]["dir"])
    return cfg


def estimate_training_bytes(cfg: dict, figure: bool = True) -> int:
    """Size (bytes) of the results directory of :func:`run_training` for a resolved configuration,
    for :func:`ctmhsa.sims.io.check_output`: with ``W = H (2 dk de + 2 dv de)`` weights and ``S``
    steps at a level, ``training.npz`` holds ``11 S + W`` numbers per level (losses, 4 cosines,
    4 spreads, times; the trained weights), ``S_max + 1 + 2 W + 2 B n de`` more (exact descent,
    teacher, initial student, X, T), 8 bytes each; plus 256 kB of text and 1 MB for the figure."""
    p, t = cfg["problem"], cfg["train"]
    W = p["H"] * (2 * p["dk"] * p["de"] + 2 * p["dv"] * p["de"])
    steps = t["steps"] if isinstance(t["steps"], dict) else {lv: t["steps"] for lv in t["levels"]}
    numbers = (sum(11 * s + W for s in steps.values()) + max(steps.values()) + 1 + 2 * W
               + 2 * p["batch"] * p["n"] * p["de"])
    return int(8 * numbers + 256e3 + (1e6 if figure else 0))


def _level_options(opts: dict, level: str) -> dict:
    """The shared ``[circuit]``/``[run]`` options of a training config for one level: the rate
    level has no spikes, window or warm-up, so the spiking levels' ``warmup``, ``record_spikes``
    and ``checkpoints`` are left out of its runs (and kept for the others)."""
    if get_level(level).spiking:
        return dict(opts)
    return {k: v for k, v in opts.items() if k not in ("warmup", "record_spikes", "checkpoints")}


def run_training(cfg: dict, out: str, draw=None, progress=None, what: str = "out") -> str:
    """Train the teacher–student problem of a resolved configuration at every level of
    ``[train] levels`` beside exact gradient descent, and write the results directory ``out``
    (one directory, atomically): ``config.toml``, ``training.npz`` (per level
    ``<level>.loss``, ``.exact_loss``, ``.cosines``, ``.spread``, ``.step_time``, ``.WQ`` ...;
    ``exact_gd.loss``; the teacher ``teacher.W*`` and initial student ``initial.W*``),
    ``summary.json`` and, with ``draw(directory)``, a figure. ``progress(level, step, info)``
    after every step. Returns the absolute path.

    ``out`` is checked before anything is trained (:func:`ctmhsa.sims.io.check_output`: it must
    be new, empty or a results directory of this project; writable, with room for the results)
    and written as one directory, atomically (:func:`ctmhsa.sims.io.results_directory`); ``what``
    names the argument or setting ``out`` came from in the messages."""
    from .config import dumps_toml
    from .io import check_output, dumps_json, git_commit, results_directory, versions

    out = check_output(out, estimate_training_bytes(cfg, figure=draw is not None), what=what)
    p, t = cfg["problem"], cfg["train"]
    prob = teacher_student(n=p["n"], H=p["H"], dk=p["dk"], dv=p["dv"], de=p["de"], batch=p["batch"], seed=p["seed"])
    X, T, W0 = prob["X"], prob["T"], prob["W0"]
    lr = default_lr(p["batch"], p["n"]) if t["lr"] is None else float(t["lr"])
    opts = dict(cfg["circuit"], **cfg["run"])
    co = split_options(None, None, **opts)[0]
    ref = exact_descent(X, T, *W0, steps=max(t["steps"].values()), lr=lr, phi=co.phi, causal=co.causal,
                        normalize=co.normalize)
    arrays = {"exact_gd.loss": ref, **{f"teacher.{k}": w for k, w in zip(WEIGHT_NAMES, prob["teacher"])},
              **{f"initial.{k}": w for k, w in zip(WEIGHT_NAMES, W0)}, "X": X, "T": T}
    summary = dict(lr=lr, levels={}, exact_gd=curve_summary([], ref, [], []))
    for lv in t["levels"]:
        tr = train_mhsa(X, T, *W0, neuron=lv, steps=t["steps"][lv], lr=lr, seed=p["seed"], tied=t["tied"],
                        progress=None if progress is None else (lambda s, d, lv=lv: progress(lv, s, d)),
                        **_level_options(opts, lv))
        arrays.update({f"{lv}.loss": tr.loss, f"{lv}.exact_loss": tr.exact_loss, f"{lv}.cosines": tr.cosines,
                       f"{lv}.spread": tr.spread, f"{lv}.step_time": tr.step_time,
                       **{f"{lv}.{k}": w for k, w in zip(WEIGHT_NAMES, tr.weights)}})
        summary["levels"][lv] = dict(curve_summary(tr.loss, tr.exact_loss, tr.cosines, tr.step_time),
                                     spread_end=dict(zip(WEIGHT_NAMES, tr.spread[-1].tolist())))
    summary.update(versions=versions(), git=git_commit())
    with results_directory(out, what, kind="train") as tmp:
        with open(os.path.join(tmp, "config.toml"), "w") as fh:
            fh.write(dumps_toml({k: ({kk: vv for kk, vv in v.items() if vv is not None} if isinstance(v, dict) else v)
                                 for k, v in cfg.items() if not k.startswith("_") and v}))
        np.savez_compressed(os.path.join(tmp, "training.npz"), **arrays)
        with open(os.path.join(tmp, "summary.json"), "w") as fh:
            fh.write(dumps_json(summary))
        if draw is not None:
            draw(tmp)
    return out


def curve_summary(loss, exact, cosines, times) -> dict:
    """Ratios, cosines and timings of one training curve (plain numbers for JSON)."""
    exact, cosines = np.asarray(exact, float), np.asarray(cosines, float).reshape(-1, 4)
    steps = len(exact) - 1
    out = dict(steps=steps, exact_loss_0=float(exact[0]), exact_ratio_end=float(exact[-1] / exact[0]),
               exact_ratio_60=float(exact[60] / exact[0]) if steps >= 60 else None,
               exact_ratio_300=float(exact[300] / exact[0]) if steps >= 300 else None,
               wall_per_step_s=float(np.mean(times)) if len(times) else None)
    if len(loss):
        out["circuit_loss_0"] = float(loss[0])
        k = max(1, min(10, len(loss) // 5))    # decoded loss is noisy at spiking levels: the mean of the last k
        out["circuit_ratio_end"] = float(np.mean(loss[-k:]) / loss[0])
    if len(cosines):
        out["cos_first"] = dict(zip(WEIGHT_NAMES, cosines[0].tolist()))
        out["cos_median"] = dict(zip(WEIGHT_NAMES, np.median(cosines, axis=0).tolist()))
    return out
