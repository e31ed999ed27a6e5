"""Conductance-based adaptive integrate-and-fire somata in a high-conductance state.

The candidate spike generator for a ``lif`` level that computes attention (see docs/lif.md):

- membrane: C_m dv/dt = g_L (E_L − v) + g_e (E_e − v) + g_i (E_i − v) + I − w, threshold V_th,
  reset V_r, absolute refractoriness τ_ref;
- spike-frequency adaptation (Brette & Gerstner 2005, the AdEx without its exponential):
  τ_w dw/dt = a (v − E_L) − w, w += b at every spike. Strong, slow adaptation acts as negative
  feedback on the rate and linearises the f–I curve (Ermentrout 1998, *Neural Comput.* 10:1721);
- balanced synaptic background: the point-conductance model of Destexhe et al. (2001,
  *Neuroscience* 107:13): excitatory and inhibitory conductances g_e, g_i are Ornstein–Uhlenbeck
  processes (means g_e0, g_i0, standard deviations σ_e, σ_i, correlation times τ_e, τ_i), which
  put the cell in the high-conductance state of cortex in vivo. Scaling both means by β and both
  variances by β is the balanced-background gain control of Chance, Abbott & Reyes (2002,
  *Neuron* 35:773).

The OU conductances are advanced by their exact one-step update after every state update, so the
membrane can use exponential Euler (linear in v given the conductances).

:func:`fi_curve` measures the rate against a constant drive current with the shared measurement
window (:func:`neurons.window.measure`) and fits it with an affine law r = r0 + c I over a rate
range: the residual of that fit is how far the cell is from a linear spike generator.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import brian2 as b2
import numpy as np

from .backend import configure_brian2
from .params import seconds
from .window import Probe, measure

__all__ = ["ConductanceSoma", "BRETTE_GERSTNER_2005", "fi_curve", "affine_fit"]


@dataclass(frozen=True)
class ConductanceSoma:
    """Parameters of the conductance-based adaptive soma (SI units: F, S, V, A, s).

    Defaults: the regular-spiking AdEx cell of Brette & Gerstner (2005, *J. Neurophysiol.*
    94:3637; C_m, g_L, E_L, V_th = V_T, V_r, a, b, τ_w) and the point-conductance background of
    Destexhe et al. (2001; g_e0, g_i0, σ_e, σ_i, τ_e, τ_i, E_e, E_i).
    """

    C_m: float = 281e-12
    g_L: float = 30e-9
    E_L: float = -70.6e-3
    V_th: float = -50.4e-3
    V_r: float = -70.6e-3
    tau_ref: float = 2e-3
    a: float = 4e-9
    b: float = 80.5e-12
    tau_w: float = 144e-3
    g_e0: float = 12e-9
    g_i0: float = 57e-9
    sigma_e: float = 3e-9
    sigma_i: float = 6.6e-9
    tau_e: float = 2.7e-3
    tau_i: float = 10.5e-3
    E_e: float = 0.0
    E_i: float = -75e-3
    beta: float = 1.0
    """Balanced-background scale: both conductance means × β, both variances × β."""

    def without_adaptation(self) -> "ConductanceSoma":
        return ConductanceSoma(**{**asdict(self), "a": 0.0, "b": 0.0})

    def namespace(self) -> dict:
        u = b2
        return dict(C_m=self.C_m * u.farad, g_L=self.g_L * u.siemens, E_L=self.E_L * u.volt,
                    V_th=self.V_th * u.volt, V_r=self.V_r * u.volt, tau_ref=self.tau_ref * u.second,
                    a=self.a * u.siemens, b=self.b * u.amp, tau_w=self.tau_w * u.second,
                    g_e0=self.beta * self.g_e0 * u.siemens, g_i0=self.beta * self.g_i0 * u.siemens,
                    sigma_e=np.sqrt(self.beta) * self.sigma_e * u.siemens,
                    sigma_i=np.sqrt(self.beta) * self.sigma_i * u.siemens,
                    tau_e=self.tau_e * u.second, tau_i=self.tau_i * u.second,
                    E_e=self.E_e * u.volt, E_i=self.E_i * u.volt)

    def input_conductance(self) -> float:
        """Mean total membrane conductance (S): leak plus background."""
        return self.g_L + self.beta * (self.g_e0 + self.g_i0)


BRETTE_GERSTNER_2005 = ConductanceSoma()

EQUATIONS = """
dv/dt = (g_L*(E_L - v) + g_e*(E_e - v) + g_i*(E_i - v) + I_drive - w)/C_m : volt (unless refractory)
dw/dt = (a*(v - E_L) - w)/tau_w : amp
g_e : siemens
g_i : siemens
I_drive : amp
"""
BACKGROUND = ("g_e = g_e0 + (g_e - g_e0)*exp(-dt/tau_e) + sigma_e*sqrt(1 - exp(-2*dt/tau_e))*randn()\n"
              "g_i = g_i0 + (g_i - g_i0)*exp(-dt/tau_i) + sigma_i*sqrt(1 - exp(-2*dt/tau_i))*randn()")


def fi_curve(soma: ConductanceSoma, currents, duration=10.0, warmup=1.0, dt=1e-4, seed=0,
             codegen: str = "numpy") -> dict:
    """Rate of ``soma`` against constant drive currents, one cell per current.

    Parameters
    ----------
    soma : ConductanceSoma
    currents : array of float
        Drive currents (A).
    duration, warmup, dt : float or brian2 Quantity
        Measurement window, discarded warm-up and step (s).

    Returns
    -------
    dict
        ``current`` (A), ``rate`` (Hz, spike count / window), ``v_mean`` and ``v_std`` of the
        membrane over the window (V; the refractory clamp included), ``fano`` of the counts in
        10 chunks.
    """
    duration, warmup, dt = seconds("duration", duration), seconds("warmup", warmup, allow_zero=True), \
        seconds("dt", dt)
    currents = np.asarray(currents, float)
    configure_brian2(codegen)
    b2.seed(seed)
    clock = b2.Clock(dt=dt * b2.second)
    ns = soma.namespace()
    G = b2.NeuronGroup(len(currents), EQUATIONS + "acc_v : volt*second\nacc_v2 : volt**2*second\n",
                       threshold="v > V_th", reset="v = V_r; w += b", refractory="tau_ref",
                       method="exponential_euler", namespace=ns, clock=clock, name="somata")
    G.run_regularly(BACKGROUND, when="before_groups", clock=clock)
    G.run_regularly("acc_v += v*dt\nacc_v2 += v**2*dt", when="end", clock=clock)
    G.v = soma.E_L * b2.volt
    G.g_e, G.g_i = ns["g_e0"], ns["g_i0"]
    G.I_drive = currents * b2.amp
    mon = b2.SpikeMonitor(G, record=False)
    net = b2.Network(G, mon)

    def run(d, report):
        net.run(d * b2.second, namespace={}, report=report)
        return 0.0

    # window means of v and v² (integrated as acc_v, acc_v2): the membrane's mean and spread
    probe = Probe(mon, lambda v: np.array(getattr(G, v + "_")[:], dtype=float), ("v", "v2"))
    m = measure(net, {"somata": probe}, clock, run, warmup, duration, n_chunks=10)
    obs, chunks = m["snapshots"][-1][1]["somata"], m["chunks"]["somata"]
    mean_c = chunks.mean(axis=0)
    fano = np.full(len(currents), np.nan)
    fano[mean_c > 0] = chunks.var(axis=0, ddof=1)[mean_c > 0] / mean_c[mean_c > 0]
    return dict(current=currents, rate=obs["rate"], v_mean=obs["v"],
                v_std=np.sqrt(np.maximum(obs["v2"] - obs["v"] ** 2, 0.0)), fano=fano)


def affine_fit(current, rate, lo: float, hi: float) -> dict:
    """Least-squares affine law r = r0 + c I over the points with ``lo <= rate <= hi`` (Hz).

    Returns ``r0`` (Hz), ``c`` (Hz/A), ``max_residual`` and ``rms_residual`` (Hz), and
    ``relative`` = max residual / rate span (the nonlinearity over the range).
    """
    current, rate = np.asarray(current, float), np.asarray(rate, float)
    sel = (rate >= lo) & (rate <= hi)
    if sel.sum() < 3:
        raise ValueError(f"affine_fit: fewer than 3 rates within [{lo}, {hi}] Hz")
    A = np.vstack([np.ones(sel.sum()), current[sel]]).T
    coef, *_ = np.linalg.lstsq(A, rate[sel], rcond=None)
    res = rate[sel] - A @ coef
    return dict(r0=float(coef[0]), c=float(coef[1]), max_residual=float(np.abs(res).max()),
                rms_residual=float(np.sqrt(np.mean(res ** 2))),
                relative=float(np.abs(res).max() / np.ptp(rate[sel])), n=int(sel.sum()))
