"""The result object of :func:`ctmhsa.sims.simulate_mhsa` and its accuracy metrics."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# the stages' order, symbols and names: one table, re-exported here
from ctmhsa.circuits.parts import PARTS
from ctmhsa.mapping.decode import count_noise_floor, nrmse_scale
from ctmhsa.maths.stages import STAGE_LABELS, STAGE_ORDER
from ctmhsa.neurons.levels import get_level

from .physiology import spikes_between

__all__ = ["SimulationResult", "stage_metrics", "STAGE_ORDER", "STAGE_LABELS"]


def stage_metrics(decoded: np.ndarray, reference: np.ndarray) -> dict:
    """Accuracy of one decoded stage against the exact reference.

    Returns
    -------
    dict
        ``nrmse`` = RMSE / std(reference) (RMSE / RMS(reference) when the reference is
        constant), ``r`` Pearson correlation (NaN when either side is constant),
        ``max_abs_error``, ``max_rel_error`` = ``max |error| / max |reference|``, ``n`` compared
        entries. Entries that cannot be decoded (NaN, e.g. keys no query attends) are skipped.
    """
    d = np.asarray(decoded, float).ravel()
    ref = np.asarray(reference, float).ravel()
    if d.shape != ref.shape:
        raise ValueError(f"decoded shape {np.shape(decoded)} differs from reference {np.shape(reference)}")
    ok = np.isfinite(d)
    d, ref = d[ok], ref[ok]
    if d.size == 0:
        return dict(nrmse=float("nan"), r=float("nan"), max_abs_error=float("nan"),
                    max_rel_error=float("nan"), n=0)
    err = d - ref
    rmse = float(np.sqrt(np.mean(err ** 2)))
    scale = nrmse_scale(ref)
    if np.std(d) > 0 and np.std(ref) > 0:
        r = float(np.corrcoef(d, ref)[0, 1])
    else:
        r = float("nan")
    max_abs = float(np.max(np.abs(err)))
    return dict(nrmse=rmse / scale, r=r, max_abs_error=max_abs,
                max_rel_error=max_abs / (float(np.max(np.abs(ref))) or 1.0), n=int(d.size))


@dataclass
class SimulationResult:
    """Outcome of one simulation: decoded stages, the exact reference, rates, spikes, provenance.

    Attributes
    ----------
    x_tilde : ndarray (n, de)
        Block output decoded from nucleus-2 rates.
    reference : ndarray (n, de)
        Exact linear MHSA output for the same inputs.
    stages, reference_stages : dict
        Decoded and exact values of every stage (``q, k, v, s, kappa, Z, y, v_tilde, x_tilde``;
        per head where relevant, shapes as in :func:`ctmhsa.maths.reference.linear_mhsa`).
    rates : dict
        Population -> rates (Hz) over the measurement window, on the population's full index
        grid, e.g. ``rates["l23"]`` has shape ``(H, n, m, dk)`` indexed ``(head, i, j, cell)``;
        absent cells are NaN.
    spikes : dict
        Population -> ``(cell_index, time_s)`` arrays of the recorded populations at spiking
        levels; empty at the rate level. Times are on the network's clock: t = 0 at the start of
        the warm-up, so the warm-up's spikes come before :attr:`t_start` and the measurement
        window is ``[t_start, t_stop)``; :meth:`window_spikes` keeps the window's, whose counts
        / :attr:`duration` are ``rates``.
    level : str
        Fidelity level that produced it.
    config : dict
        The arguments of the run, as resolved.
    diagnostics : dict
        ``range`` (cells outside their working range, per population), ``rates`` (the rate
        table, :meth:`rate_table`), ``convergence``
        (rate level: relative change of x̃ over the last 10 % of the run), ``fano`` (per
        population), ``checkpoints`` (spiking levels: ``[{"T", "metrics"}]`` at each checkpoint
        and the full window).
    timings : dict
        Wall-clock seconds: ``build`` (Brian2 objects), ``compile`` (code generation and
        compilers; ``compiled``: how many modules), ``run``, ``decode`` (the stages from the
        observables), ``total`` (the whole call), and ``estimated_run``, the run-time estimate
        ``max_runtime`` was checked against (:func:`ctmhsa.sims.cost.estimate_runtime`).
    counts : dict
        ``neurons``, ``synapses`` and per-population / per-projection counts.
    noise_variance : dict
        Stage -> per-entry variance expected from spike-count noise alone
        (:func:`ctmhsa.mapping.noise.stage_noise_variance`); empty at the rate level.
    """

    x_tilde: np.ndarray
    reference: np.ndarray
    stages: dict
    reference_stages: dict
    rates: dict
    spikes: dict
    level: str
    config: dict
    diagnostics: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    counts: dict = field(default_factory=dict)
    noise_variance: dict = field(default_factory=dict)

    def metrics(self) -> dict:
        """Per-stage accuracy: ``{stage: {nrmse, r, max_abs_error, max_rel_error, n,
        noise_floor}}``. ``noise_floor`` is the NRMSE expected from spike-count noise alone
        (0 at the rate level, which has no spikes). At a spiking level a floor is estimated
        from the window's spike counts: where none informs it (no variance, or a variance of 0
        everywhere: no spikes counted, as in a window of a few steps) it is unknown, NaN, never 0."""
        out = {}
        for name in STAGE_ORDER:
            if name in self.stages and name in self.reference_stages:
                m = stage_metrics(self.stages[name], self.reference_stages[name])
                var = self.noise_variance.get(name)
                if not get_level(self.level).spiking and var is None:
                    m["noise_floor"] = 0.0
                else:
                    m["noise_floor"] = count_noise_floor(var, self.stages[name], self.reference_stages[name])
                out[name] = m
        return out

    @property
    def stream(self) -> dict | None:
        """A stream of token sets (``X`` of shape ``(T, n, de)``): ``presentation`` (s),
        ``count`` (T), ``window`` (the decoding window ``[lag, presentation)`` inside each
        presentation, s) and ``starts`` (each presentation's start on the network's clock, s);
        ``None`` for one token set."""
        return self.diagnostics.get("stream")

    def presentation_metrics(self) -> list[dict]:
        """A stream's metrics per presentation (as :meth:`metrics`, each against its own token
        set's reference and noise floor); :meth:`metrics` pools every presentation.

        Raises
        ------
        ValueError
            Not a stream.
        """
        if self.stream is None:
            raise ValueError("presentation_metrics: this result is one token set, not a stream (X of shape (T, n, de))")
        out = []
        for k in range(self.stream["count"]):
            one = SimulationResult(
                x_tilde=self.x_tilde[k], reference=self.reference[k],
                stages={n: v[k] for n, v in self.stages.items()},
                reference_stages={n: v[k] for n, v in self.reference_stages.items()},
                rates={}, spikes={}, level=self.level, config={},
                noise_variance={n: v[k] for n, v in self.noise_variance.items()})
            out.append(one.metrics())
        return out

    @property
    def memory(self) -> np.ndarray | None:
        """The memory circuit's key-value memory after each token, ``M_t`` of shape ``(T, H, dv, dk)``
        as L5 reads it (``stages["S"]``, ``(T, H, dk, dv)``, transposed; the reference's:
        ``reference_stages["S"]``); ``None`` for the other circuits."""
        S = self.stages.get("S")
        stream = S is not None and getattr(PARTS.get(self.config.get("circuit")), "stream", False)
        return np.swapaxes(S, -1, -2) if stream else None

    @property
    def warmup(self) -> float:
        """Simulated and discarded before the measurement window (s; 0 at the rate level)."""
        return float(self.config.get("warmup") or 0.0)

    @property
    def duration(self) -> float:
        """The measurement window (s; at the rate level the simulated time)."""
        return float(self.config["duration"])

    @property
    def t_start(self) -> float:
        """Start of the measurement window on the clock of :attr:`spikes` (s): the warm-up."""
        return self.warmup

    @property
    def t_stop(self) -> float:
        """End of the run (s): ``warmup + duration``, everything simulated."""
        return self.warmup + self.duration

    def window_spikes(self, population: str) -> tuple[np.ndarray, np.ndarray]:
        """``(cell_index, time_s)`` of the recorded spikes of ``population`` in the measurement
        window ``[t_start, t_stop)`` (times on the clock of :attr:`spikes`). Per cell, their
        count / :attr:`duration` is its rate in :attr:`rates`."""
        if population not in self.spikes:
            raise KeyError(f"population: {population!r} was not recorded; recorded: {sorted(self.spikes)}")
        # spikes fall on step times; half a step of tolerance against rounding (as the counters)
        half = 0.5 * float(self.config.get("dt") or 0.0)
        return spikes_between({population: self.spikes[population]}, self.t_start - half,
                              self.t_stop - half)[population]

    def rate_table(self):
        """Firing rates per population beside the range recorded in vivo for its cell type
        (:func:`ctmhsa.sims.physiology.rate_table`; ``str()`` of it is a text table)."""
        from .physiology import RateTable

        return RateTable(self.diagnostics.get("rates", []))

    def metrics_table(self) -> str:
        """The metrics as an aligned text table."""
        rows = [f"{'stage':<8} {'NRMSE':>10} {'r':>9} {'max abs err':>12} {'max rel err':>12} {'noise floor':>12}"]
        for name, m in self.metrics().items():
            rows.append(f"{name:<8} {m['nrmse']:>10.3e} {m['r']:>9.6f} {m['max_abs_error']:>12.3e} "
                        f"{m['max_rel_error']:>12.3e} {m['noise_floor']:>12.3e}")
        return "\n".join(rows)

    def __repr__(self) -> str:
        x = self.metrics().get("x_tilde", {})
        window = (f" window=[{self.t_start:g}, {self.t_stop:g}) s" if "duration" in self.config else "")
        return (f"<SimulationResult level={self.level} neurons={self.counts.get('neurons')} "
                f"synapses={self.counts.get('synapses')}{window} x_tilde NRMSE={x.get('nrmse', float('nan')):.2e}>")
