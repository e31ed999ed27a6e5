"""Noise floors of a transformer model's stages: the error spike-count noise alone would give.

Every spiking population of :mod:`ctmhsa.circuits.transformer` reads a value out as a window
count; with Poisson counts (the escape cells', Fano factor 1) a decoded value carried by ``P``
copies of ON/OFF pairs at code ``rho`` has variance ``(r_on + r_off) / (T P rho^2)`` (``r`` the
copies' mean rates, measured); perfect integrators (``meta.firing``) count within one spike,
their variance scaled by :func:`ctmhsa.mapping.noise.quantisation_fano`. The next stage integrates those same spikes, so its window mean
carries that error forward: the floor of every stage is estimated by running the block maths
(:func:`ctmhsa.maths.transformer.transformer_forward`) ``samples`` times with every read-out
stage perturbed by independent Gaussian noise of its variance and carried through the later
stages (the three relay sets independently, as their cells spike independently). A stage whose
error is at its floor is at the limit of its window; above it, the excess is bias (or noise
the floor does not model: fluctuations *within* the window passed through a curved function).
The reference enters only as the point around which the noise is propagated: an analysis of a
finished run, never a setting of the circuit.
"""

from __future__ import annotations

import numpy as np

from ctmhsa.circuits.graph import copies
from ctmhsa.circuits.transformer import RELAY_SETS, block_prefix, stream_source
from ctmhsa.neurons.firing import get_firing
from ctmhsa.neurons.models import get_model

from .decode import nrmse_scale, per_dimension
from .noise import quantisation_fano
from ctmhsa.maths.reference import FEATURE_MAPS
from ctmhsa.maths.transformer import normalise

__all__ = ["model_floors"]


def _fano(circuit, obs, pop: str, T: float) -> float:
    """Fano factor of a population's counts: 1 (Poisson), or the quantisation of perfect
    integrators (``meta.firing``, :func:`ctmhsa.mapping.noise.quantisation_fano`)."""
    p = circuit.population(pop)
    firing = get_model("escape", p.cell_type, circuit.meta.firing).firing
    return 1.0 if get_firing(firing).poisson else quantisation_fano(p, obs[pop]["r"], T, firing)


def _signed_var(circuit, obs, pop: str, rho: float, T: float) -> np.ndarray:
    """Variance of a decoded ON/OFF value (shape of the value)."""
    p = circuit.population(pop)
    d = per_dimension(p, obs[pop]["r"])
    return _fano(circuit, obs, pop, T) * (d[..., 0] + d[..., 1]) / (T * copies(p) * rho ** 2)


def _plain_var(circuit, obs, pop: str, scale, T: float) -> np.ndarray:
    """Variance of a decoded single-cell value ``r / scale``."""
    p = circuit.population(pop)
    return _fano(circuit, obs, pop, T) * per_dimension(p, obs[pop]["r"]) / (T * copies(p) * np.asarray(scale, float) ** 2)


def model_floors(circuit, menc, obs: dict, reference: dict, model, T: float, phi: str = "elu1",
                 samples: int = 32, seed: int = 0) -> dict:
    """Floors (NRMSE, as :func:`ctmhsa.sims.result.stage_metrics`) of every stage of every block.

    Parameters
    ----------
    circuit, menc
        The model's circuit and its :class:`ctmhsa.mapping.blocks.ModelEncoding`.
    obs : dict
        The window's observables (measured rates ``r`` per population).
    reference : dict
        ``transformer_forward(tokens, model, stages=True)`` of one token set.
    model : Model
        The weights.
    T : float
        Window (s).
    samples : int
        Noise draws.

    Returns
    -------
    dict
        ``blocks``: per block ``{stage: floor}``; ``output``; ``logits`` where there is a read-out.
    """
    f = FEATURE_MAPS[phi][0]
    g = np.random.default_rng(seed)
    meta = circuit.meta
    err: dict = {}

    def noisy(value, var):
        return value + np.sqrt(np.maximum(var, 0.0)) * g.standard_normal(np.shape(value))

    def record(key, value, ref):
        err.setdefault(key, []).append(np.mean((value - ref) ** 2))

    for _ in range(samples):
        x = None
        for l, (b, bm, ref) in enumerate(zip(model.blocks, meta.blocks, reference["blocks"])):
            p, enc = block_prefix(l), menc.blocks[l]
            c = enc.consts
            src = stream_source(l, meta.blocks)
            if x is None:      # the input relays
                x = noisy(ref["x"], _signed_var(circuit, obs, src, menc.rho[src], T))
            record((l, "x"), x, ref["x"])
            sets = {w: noisy(normalise(x), _signed_var(circuit, obs, p + r, menc.rho[p + r], T))
                    for w, r in RELAY_SETS.items()}
            record((l, "x_norm"), np.mean(list(sets.values()), axis=0), ref["x_norm"])
            q = np.einsum("hce,ne->hnc", b.WQ, sets["q"])
            k = np.einsum("hce,ne->hnc", b.WK, sets["k"])
            v = np.einsum("hce,ne->hnc", b.WV, sets["v"])
            for key, val in (("q", q), ("k", k), ("v", v)):
                record((l, key), val, ref[key])
            u = f(k)[:, None, :, :] * f(q)[:, :, None, :]            # (H, n, m, dk)
            Z = u.sum(axis=(2, 3))
            record((l, "Z"), Z, ref["Z"])
            R = c["R_set"][:, :, None, None]
            s = noisy(u / Z[..., None, None], _plain_var(circuit, obs, p + "l23", R, T))
            record((l, "s"), s, ref["s"])
            kappa = s.sum(axis=-1)
            record((l, "kappa"), kappa, ref["kappa"])
            a = c["a"][:, :, None, None]
            y = noisy(kappa[..., None] * v[:, None, :, :],
                      _signed_var(circuit, obs, p + "l5it", 1.0, T) / (c["gains"]["rho_it"] * a) ** 2)
            record((l, "y"), y, ref["y"])
            vt = noisy(y.sum(axis=2), _signed_var(circuit, obs, p + "l5pt", c["gains"]["rho_pt"], T))
            record((l, "v_tilde"), vt, ref["v_tilde"])
            h = noisy(x + np.einsum("hec,hnc->ne", b.WO, vt),
                      _signed_var(circuit, obs, p + "nucleus2", menc.rho[p + "nucleus2"], T))
            record((l, "h"), h, ref["h"])
            if b.mlp is not None:
                hn = noisy(normalise(h), _signed_var(circuit, obs, p + "mlp_relay", menc.rho[p + "mlp_relay"], T))
                record((l, "h_norm"), hn, ref["h_norm"])
                hid = noisy(np.maximum(hn @ b.mlp.W1.T + b.mlp.b1, 0.0),
                            _plain_var(circuit, obs, p + "hidden", menc.rho[p + "hidden"], T))
                record((l, "hidden"), hid, ref["hidden"])
                x = noisy(h + hid @ b.mlp.W2.T + b.mlp.b2, _signed_var(circuit, obs, p + "out", menc.rho[p + "out"], T))
            else:
                x = h
            record((l, "out"), x, ref["out"])
        record("output", x, reference["output"])
        if reference.get("logits") is not None:
            pooled = noisy(x.mean(axis=0), _signed_var(circuit, obs, "readout_pool", menc.rho["readout_pool"], T))
            rn = noisy(normalise(pooled), _signed_var(circuit, obs, "readout_relay", menc.rho["readout_relay"], T))
            logits = noisy(rn.reshape(-1) @ model.readout_W.T + model.readout_b,
                           _signed_var(circuit, obs, "classes", menc.rho["classes"], T))
            record("logits", logits, reference["logits"])

    def floor(key, ref):
        return float(np.sqrt(np.mean(err[key]))) / nrmse_scale(ref)

    blocks = [{} for _ in model.blocks]
    for key in err:
        if isinstance(key, tuple):
            blocks[key[0]][key[1]] = floor(key, reference["blocks"][key[0]][key[1]])
    out = dict(blocks=blocks, output=floor("output", reference["output"]))
    if "logits" in err:
        out["logits"] = floor("logits", reference["logits"])
    return out
