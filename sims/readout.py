"""From what a run measured to a :class:`ctmhsa.sims.result.SimulationResult`.

Decodes every stage from the observations (at every checkpoint), estimates each stage's
spike-count noise variance, checks the operating range per macrocolumn (raising at the rate
level, warning at the spiking levels) and gathers the configuration, counts, timings and
diagnostics. The reference enters only here, for comparison.
"""

from __future__ import annotations

import warnings

import numpy as np

from ctmhsa.circuits.parts import get_area, part_job
from ctmhsa.mapping.baseline import remove_baselines
from ctmhsa.mapping.decode import count_noise_floor, decode, range_report
from ctmhsa.mapping.noise import spike_generation_fano, stage_noise_variance, warn_noise_dominated
from ctmhsa.mapping.operating import OperatingRangeWarning, check_operating, enforce
from ctmhsa.maths.stages import CIRCUIT_STAGES
from ctmhsa.neurons.conductance import rate_range_of
from ctmhsa.neurons.models import get_model
from ctmhsa.neurons.window import fano_factors

from .options import decode_lag, settling_constant
from .physiology import rate_table, spikes_between
from .result import SimulationResult

__all__ = ["read_out", "QUADRATIC_STAGES", "LINEAR_STAGES"]

QUADRATIC_STAGES, LINEAR_STAGES = CIRCUIT_STAGES["quadratic"], CIRCUIT_STAGES["linear"]


def read_out(sim, obs, run_options) -> SimulationResult:
    """The result of ``sim`` (a :class:`ctmhsa.sims.build.Simulation`) from its observations ``obs``
    (:class:`ctmhsa.sims.runners.Observations`) of a run under ``run_options``."""
    if obs.stream:
        return _read_out_stream(sim, obs, run_options)
    circuit, enc, o, ro, x = sim.circuit, sim.encoding, sim.options, run_options, sim.inputs
    ref = sim.reference
    ref_stages = _compared(ref, o)
    for snap in [s for _, s in obs.snapshots] + ([obs.early] if obs.early is not None else []):
        remove_baselines(circuit, enc.values, snap)    # lif: rates above the somata's baseline
    final = obs.final
    stages = decode(circuit, enc, final)
    change, fano, noise_var, checkpoints = float("nan"), {}, {}, []
    if not o.spiking:
        if obs.early is not None:   # how much x̃ still moved over the last 10 % of the run
            early = decode(circuit, enc, obs.early)["x_tilde"]
            change = float(np.max(np.abs(stages["x_tilde"] - early)) / (np.max(np.abs(stages["x_tilde"])) or 1.0))
    else:
        fano = fano_factors(obs.chunks) if obs.fano is None else dict(obs.fano)
        own_fano = spike_generation_fano(circuit, o.neuron, fano, dt=ro.dt)
        for mark, snap in obs.snapshots:
            st = stages if snap is final else decode(circuit, enc, snap)
            nv = stage_noise_variance(circuit, enc, snap, own_fano, mark, st, x.block, o.phi, level=o.neuron)
            checkpoints.append(dict(T=mark, metrics=SimulationResult(
                x_tilde=st["x_tilde"], reference=ref["x_tilde"], stages=st, reference_stages=ref_stages,
                rates={}, spikes={}, level=o.neuron, config={}, noise_variance=nv).metrics()))
        noise_var = nv
        _warn_output_noise(noise_var, stages, ref, o.neuron, f"{ro.duration:g} s window", stacklevel=5)
    max_rate, rate_range = _rate_limits(sim.circuit, o, ro)
    # did the circuit work where it claims to (per macrocolumn)? raises at the rate level,
    # warns and flags at the spiking levels
    operating = check_operating(circuit, enc, final, o.neuron, o.code_gains, early=obs.early, T=ro.duration,
                                max_rate=max_rate, rate_range=rate_range)
    diagnostics = dict(range=range_report(circuit, final, max_rate), convergence=change, fano=fano,
                       checkpoints=checkpoints)
    return _result(sim, obs, ro, stages, ref["x_tilde"], ref_stages, _rates(circuit, final), noise_var,
                   operating, diagnostics)


def _compared(ref: dict, o) -> dict:
    """The reference's stages the circuit is compared on: its attention area's (no Z, z without
    interneurons; the memory circuit's are the linear circuit's, per token)."""
    keys = get_area(o.circuit).stages
    return {k: ref[k] for k in keys if o.normalize or k not in ("Z", "z")}


def _carried_noise(circuit: str):
    """The area's ``carried_noise`` job (count noise a stream's state carries between
    presentations, :mod:`ctmhsa.mapping.kvmemory`), or ``None`` where it has none."""
    return part_job(get_area(circuit), "carried_noise")


def _one_token(res: SimulationResult) -> SimulationResult:
    """The memory circuit's result on its stream's grid: every stage's token slot (a one-token
    set per presentation) dropped, ``x_tilde`` and ``reference`` of shape ``(T, de)``."""
    def squeeze(stages):
        return {k: (v if k in ("S", "z") else v[:, :, 0] if v.ndim > 2 and k != "x_tilde" else v[:, 0])
                for k, v in stages.items()}

    res.stages, res.reference_stages = squeeze(res.stages), squeeze(res.reference_stages)
    res.noise_variance = squeeze(res.noise_variance)
    res.x_tilde, res.reference = res.stages["x_tilde"], res.reference_stages["x_tilde"]
    return res


def _warn_output_noise(noise_var: dict, stages: dict, ref: dict, neuron: str, window: str, stacklevel: int) -> None:
    """The noise-floor warning of one layer's output x̃ (:func:`ctmhsa.mapping.noise.warn_noise_dominated`),
    its floor from the decoded and exact x̃ (``window``: what the counts were read over)."""
    warn_noise_dominated(count_noise_floor(noise_var.get("x_tilde"), stages["x_tilde"], ref["x_tilde"]),
                         neuron, "the output x̃", window, stacklevel=stacklevel)


def _rate_limits(circuit, o, ro) -> tuple:
    """``(max_rate, rate_range)`` of the operating check: an escape cell spikes at most once per
    step; a lif soma is affine over its type's calibrated range (per population; the
    calibrations are cached)."""
    rate_range = None
    if o.level.lif:
        types = {name: pop.cell_type for name, pop in circuit.populations.items()
                 if get_model(o.neuron, pop.cell_type).lif_soma}
        ranges = {ct: rate_range_of(ct, ro.dt) for ct in set(types.values())}   # one per soma type
        rate_range = {name: ranges[ct] for name, ct in types.items()}
    return 1.0 / ro.dt if o.level.escape else None, rate_range


def _rates(circuit, obs: dict) -> dict:
    """Spike rates as measured (every spike, a lif soma's baseline included); the rate level's
    rates, on every population's full grid."""
    return {name: pop.to_dense(obs[name].get("rate", obs[name]["r"]), fill=np.nan)
            for name, pop in circuit.populations.items()}


def _result(sim, obs, ro, stages, x_ref, ref_stages, rates, noise_var, operating, diagnostics) -> SimulationResult:
    """The result: the operating report enforced (a perturbed circuit is studied where it leaves
    its range: flagged, not raised), configuration, counts and timings gathered."""
    circuit, enc, o, x = sim.circuit, sim.encoding, sim.options, sim.inputs
    enforce(operating, o.neuron, perturbed=bool(circuit.meta.perturbations))
    if enc.consts["operating"] is not None:
        operating["operating_point"] = enc.consts["operating"].summary()
    diagnostics.update(operating=operating, in_range=not operating["violations"],
                       memory_estimate_bytes=sim.memory_estimate,
                       encoding=dict(v0=enc.consts["v0"].tolist(), x0=enc.consts["x0"], xb=enc.consts["xb"]))
    n = sim.sizes
    config = dict(**{k: n[k] for k in ("n", "m", "H", "dk", "dv", "de")}, **o.to_dict(), **ro.to_dict(),
                  cross=x.Y is not None, skip=x.block.WS is not None,
                  perturbations=[dict(d) for d in circuit.meta.perturbations])
    config.update(sim.runner.config())
    for k in ("report", "max_memory", "max_runtime", "checkpoints", "record_spikes"):
        config.pop(k)
    counts = dict(neurons=circuit.n_neurons(), synapses=circuit.n_synapses(), simulated_synapses=sim.simulated_synapses,
                  populations={k: p.N for k, p in circuit.populations.items()},
                  projections=circuit.n_synapses(by_projection=True))
    timings = dict(build=obs.build, compile=obs.compile, compiled=obs.compiled, run=obs.run)
    stream = diagnostics.get("stream")
    # each rate's counting time: the window, or a stream's window per presentation
    window = ro.duration if stream is None else float(np.mean([t for t, _ in obs.snapshots]))
    # the window's recorded spikes, for the single cells' irregularity (ISI CV)
    spikes = spikes_between(obs.spikes or {}, ro.warmup - 0.5 * ro.dt, ro.warmup + ro.duration - 0.5 * ro.dt)
    diagnostics["rates"] = rate_table(rates, {k: p.cell_type for k, p in circuit.populations.items()},
                                      roles={k: p.role for k, p in circuit.populations.items()},
                                      window=window if o.spiking else None, fano=diagnostics.get("fano"),
                                      spikes=spikes if o.spiking else None)
    return SimulationResult(
        x_tilde=stages["x_tilde"], reference=x_ref, stages=stages, reference_stages=ref_stages,
        rates=rates, spikes=obs.spikes, level=o.neuron, config=config, diagnostics=diagnostics,
        timings=timings, counts=counts, noise_variance=noise_var)


STREAM_SETTLED = 1e-5
"""Largest estimated relative distance of a rate-level stream's x̃ from its fixed point at the
end of a presentation before a warning (the tolerance of a single presentation's settling check,
:func:`ctmhsa.mapping.operating.enforce`)."""


def _read_out_stream(sim, obs, ro) -> SimulationResult:
    """A stream: every presentation decoded from its own window, compared with its own token
    set's reference; stages, reference, rates and noise variances stacked ``(T, ...)``, the
    metrics pooled (``res.metrics()``) and per presentation (``res.presentation_metrics()``)."""
    circuit, enc, o, x = sim.circuit, sim.encoding, sim.options, sim.inputs
    max_rate, rate_range = _rate_limits(sim.circuit, o, ro)
    per, fano = [], {}
    if o.spiking:   # pooled over every window: each window's chunk spread, summed
        fano = fano_factors(obs.chunks) if obs.fano is None else dict(obs.fano)
        own_fano = spike_generation_fano(circuit, o.neuron, fano, dt=ro.dt)
    violations, moved = [], []
    for k, (T_win, snap) in enumerate(obs.snapshots):
        remove_baselines(circuit, enc.values, snap)    # lif: rates above the somata's baseline
        st = decode(circuit, enc, snap)
        if obs.early:   # rate level: how much x̃ still moved over the last 10 % of the presentation
            late = np.asarray(st["x_tilde"], float)
            moved.append((float(np.max(np.abs(late - decode(circuit, enc, obs.early[k])["x_tilde"]))),
                          float(np.max(np.abs(late)))))
        nv = (stage_noise_variance(circuit, enc, snap, own_fano, T_win, st, x.block, o.phi, level=o.neuron)
              if o.spiking else {})
        op = check_operating(circuit, enc, snap, o.neuron, o.code_gains, T=T_win, max_rate=max_rate,
                             rate_range=rate_range)
        violations += [f"presentation {k}: {v}" for v in op["violations"]]
        per.append(dict(stages=st, noise=nv, operating=op, range=range_report(circuit, snap, max_rate),
                        rates=_rates(circuit, snap)))

    carried = _carried_noise(o.circuit) if o.spiking else None
    if carried is not None:   # noise a stream area carries from one presentation to the next
        carried(circuit, enc, [snap for _, snap in obs.snapshots], per, own_fano, x.block, o.phi)

    def stack(key):
        names = set.intersection(*(set(p[key]) for p in per)) if per else set()
        return {k: np.stack([p[key][k] for p in per]) for k in names}

    stages, noise_var, rates = stack("stages"), stack("noise"), stack("rates")
    ref = sim.reference
    if o.spiking:   # pooled over the presentations: each one's noise against the stream's spread
        _warn_output_noise(noise_var, stages, ref, o.neuron, f"windows of {obs.snapshots[0][0]:g} s per presentation",
                           stacklevel=6)
    operating = dict(violations=violations, presentations=[p["operating"] for p in per])
    P = ro.presentation
    # relative to the presentation's own x̃, but never below a thousandth of the stream's largest:
    # a presentation silenced to ~1e-13 (a lesion) would otherwise read its rounding as unsettled
    top = max((m for _, m in moved), default=0.0)
    settled = [d / (max(m, 1e-3 * top) or 1.0) for d, m in moved]
    convergence = max(settled) if settled else float("nan")
    # what is left to settle: a change over the last 10 % of the presentation, extrapolated as a
    # decay in the slowest settling constant tau (measured on the memory circuit at 0.2, 0.25 and
    # 0.3 s: 1.3x, 2.3x and 1.8x the actual error of x̃ against the reference)
    tau, _ = settling_constant(o)
    residual = [c / np.expm1(0.1 * ro.presentation / tau) for c in settled]
    if residual and max(residual) > STREAM_SETTLED:
        k = int(np.argmax(residual))
        warnings.warn(f"rate-level stream not settled: x̃ of presentation {k} still changed by {settled[k]:.3g} "
                      f"(relative) over the last 10 % of it, about {residual[k]:.2g} left to settle (more than "
                      f"{STREAM_SETTLED:g}); its values are not the circuit's fixed point to the rate level's "
                      f"precision: present each token longer (presentation)", OperatingRangeWarning, stacklevel=3)
    diagnostics = dict(range=[p["range"] for p in per], convergence=convergence, fano=fano, checkpoints=[],
                       stream=dict(presentation=P, count=len(per),
                                   window=[decode_lag(P) if sim.runner.lag is None else sim.runner.lag, P],
                                   starts=[round(ro.warmup + k * P, 12) for k in range(len(per))],
                                   settled=settled, residual=residual))
    res = _result(sim, obs, ro, stages, ref["x_tilde"], _compared(ref, o), rates, noise_var, operating,
                  diagnostics)
    return _one_token(res) if get_area(o.circuit).stream else res
