"""Affine codes between signed attention quantities and non-negative neural variables.

A code maps a quantity ``x`` to a neural variable ``gain * (offset + x)`` and back. Every code
of the circuit is one of these, with its parameters fixed *before* the simulation from the
tokens and the weights only — never from an intermediate stage of the reference — so nothing of
the answer leaks into the circuit. The offsets that keep signed quantities non-negative are
worst-case bounds (``|W| |x|``), so by construction no rate is rectified.

Codes used by :mod:`ctmhsa.mapping.encode` (symbols as in :mod:`ctmhsa.maths.reference`):

=================  =========================================  ================================
quantity           neural variable                            code
=================  =========================================  ================================
token x            nucleus-1 relay rate (Hz), ON/OFF pair     ``rho_in * [±x]_+``
q, k               L2/3 basal / apical potential (V)          ``u * q``, ``u * k``
v                  L5 IT basal potential (V)                  ``u * (v_0 + v)``
s                  L2/3 rate (Hz)                             ``R_set * s``
kappa              L5 IT apical potential (V)                 ``u * a * kappa``
y = kappa v        L5 IT rate (Hz), ON/OFF pair               ``rho_it * a * [±y]_+``
ṽ                  L5 PT rate (Hz), ON/OFF pair               ``rho_pt * [±ṽ]_+``
x̃                  nucleus-2 relay rate (Hz), ON/OFF pair     ``rho_out * [±x̃]_+``
=================  =========================================  ================================

With ``signed="offset"`` these four are single cells on worst-case offsets:
``rho_in/2 * (x_b + x)``, ``rho_it/2 * a * (v_0 kappa + y)``, ``rho_pt/2 * (v_0 + ṽ)``, ``rho_out/2 * (x_0 + x̃)``;
``v_0`` passes through the attention unchanged because ``Σ_j κ_ij = 1`` and is removed once,
at decoding. The offset makes every cell fire for the offset, not for the signal, so
its spike-count noise is far larger (README, "signed codes").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

import numpy as np

__all__ = ["AffineCode", "TransferCode", "CodeGains", "DEFAULT_GAINS", "LEVEL_GAINS", "default_gains"]


@dataclass(frozen=True)
class AffineCode:
    """``variable = gain * (offset + quantity)``; ``offset`` and ``gain`` broadcast."""

    gain: np.ndarray | float
    offset: np.ndarray | float = 0.0

    def encode(self, x):
        return np.asarray(self.gain) * (np.asarray(self.offset) + np.asarray(x, dtype=float))

    def decode(self, r):
        return np.asarray(r, dtype=float) / np.asarray(self.gain) - np.asarray(self.offset)


@dataclass(frozen=True)
class TransferCode:
    """Code through a measured transfer function (:class:`ctmhsa.neurons.calibration.TransferTable`).

    ``encode(p)`` is the rate a cell fires for encoded product ``p``; ``decode(rate)`` inverts
    the calibrated table and returns NaN below its documented lower bound (outside the working
    range, nothing is guessed).
    """

    table: object

    def encode(self, p):
        return self.table.forward(p)

    def decode(self, r):
        return self.table.inverse(r)


@dataclass(frozen=True)
class CodeGains:
    """Gains of the circuit's codes (SI units). See the module table.

    Attributes
    ----------
    rho_in : float
        Nucleus-1 relay rate per unit of token (Hz; ON/OFF code, halved in the offset code).
        80 Hz since version 0.13 (40 before): the dendrites' shot-noise variance falls as
        1/rho_in, and at 40 Hz it reached 0.6-3 (in units of u², L2/3 apical, default problem),
        where the feature map's second-order correction fails: cells with phi(k) far below 1
        fired 41-48 % below their intended rate (k < -1.5; docs/phi_bias.md). Relays then fire
        30 Hz on average on the default problem (the largest token entries ~190 Hz).
    rho_l23 : float
        Unshunted L2/3 rate per unit of ``phi(q) phi(k)`` (Hz): the default gain of every head,
        kept where all its macrocolumns divide within the interneurons' range.
    r_l23 : float
        Mean L2/3 rate per cell held by the interneurons (Hz); the set point of a macrocolumn
        is ``R_set = r_l23 x`` (its number of L2/3 cells). Normalisation needs
        ``rho * mean(phi(q) phi(k)) > r_l23`` in every macrocolumn: the encoder moves a head's
        L2/3 gain off ``rho_l23`` where that fails (:mod:`ctmhsa.mapping.operating`).
    g_sh : float
        Shunting conductance (relative to the leak) per Hz of interneuron rate (s). With
        ``n_inh`` = 30 interneurons per macrocolumn, 0.6 s puts their population mean in the
        range of fast-spiking interneurons in vivo (34 Hz on the n = d = 8 problem, 22 Hz on a
        barrel head, against 97 and 64 Hz with 0.2 s and 10 cells; docs/physiology.md): a
        spike then shunts 3× more, spread over 3× more cells, so the shunt's noise is unchanged.
    g_apical : float
        Shunt of the apical dendrite per Hz of interneuron rate (s), where the interneurons also
        target it (the second division stage, ``CircuitOptions(apical_inhibition=...)``): the
        division is then ``(1 + g_sh r)(1 + g_apical r)``; equal to ``g_sh``, so each stage spans
        the same range and the two together its square (2.0-6,700 by default, 3,300x).
    r_pool_min : float
        Smallest pooled set point of a macrocolumn (Hz): ``R_set,i = max(r_l23 N_i, r_pool_min)``.
        The interneurons' feedback counts the pool's spikes; below ~200 Hz each spike moves
        their error by more than 1/(tau_syn R_set) = 1, the loop divides in pulses and, at the
        spiking levels, drove the interneurons of 9-cell macrocolumns past 400 Hz (measured).
        Barrel size (R_set = 5445 Hz) and n = d = 8 (320 Hz) are unaffected.
    g_trn : float
        Shunt of a thalamic relay's soma per Hz of its TRN pool's rate (s): the normalisation of a
        transformer block's tokens (:mod:`ctmhsa.mapping.blocks`) divides by ``1 + g_trn r`` for
        ``r`` in ``[r_trn_min, r_inh_max]``, 2.4-271 with 2.0 s (113x: 10.6x either side of the
        centre, where the median calibration token sits). Its own gain because a block's tokens
        spread more than one head's macrocolumns: on Shakespeare, block 0's MLP relays need
        divisions 9.4x below the calibration's median (10 windows of 1,000 characters; 9.6x at
        worst over 39), beyond the 7.6x of the attention's ``g_sh`` (1.42-82); 0.6 s until
        version 0.15. The TRN's loop moves ``ln(1 + g_trn r)`` at the same speed for every
        ``g_trn`` (:mod:`ctmhsa.neurons.models`); a larger one makes each TRN spike shunt more,
        so a division is held by fewer spikes (docs/transformer.md).
    r_trn_min : float
        Lowest mean rate of a TRN pool (Hz), the lower end of its divisions. The same 0.7 Hz as
        ``r_inh_min`` at every level: the relays a TRN pool divides are escape cells at the lif
        level too, where ``r_inh_min`` rises for the thresholded L2/3 cells.
    r_inh_min, r_inh_max : float
        Range of the divisive interneurons' mean rate per macrocolumn (Hz): 135 Hz is well
        inside what fast-spiking interneurons sustain; the lower bound keeps every macrocolumn's
        pool active (at 0 Hz the integral feedback sits at its rectification). With ``g_sh`` it
        is the range of divisions ``1 + g_sh r_inh`` (1.42-82 by default), hence the largest
        spread of ``Z_i / N_i`` across one head's macrocolumns that can be normalised (58×); see
        :mod:`ctmhsa.mapping.operating`.
    rho_it, rho_pt, rho_out : float
        L5 IT, L5 PT and nucleus-2 rates per unit of y·n, ṽ and x̃ (Hz) in the ON/OFF code
        (the default); the offset code uses half of each (equal worst-case rate). The defaults
        suit unit-variance tokens and weights of scale 1/sqrt(de): at barrel size the busiest
        L5 IT, PT and nucleus-2 cells then fire ~100, ~50 and ~50 Hz (see ``diagnostics
        ["range"]``); each read-out's count noise falls as 1/sqrt(rho T).
    rho_outer, rho_memory : float
        Linear circuit (``circuit="linear"``): outer-product cells' rate per unit of
        ``phi(k) v`` and memory cells' rate per unit of ``S/m``, ``z/m`` (Hz; ON/OFF code, halved
        in the offset code). Its read-out cells use ``rho_l23`` and ``r_l23`` like L2/3.
    rho_coop : float
        Co4 area (``circuit="co4"``): the triad's cooperation cells' rate per unit of the
        Cooperation Equation (Hz; at most 6 units, its ReLU6: 60 Hz at the default).
    margin : float
        Multiplier (>= 1) on the worst-case bounds used as offsets.
    """

    rho_in: float = 80.0
    rho_l23: float = 25.0
    r_l23: float = 5.0
    g_sh: float = 0.6
    g_apical: float = 0.6
    g_trn: float = 2.0
    r_trn_min: float = 0.7
    r_inh_min: float = 0.7
    r_pool_min: float = 200.0
    r_inh_max: float = 135.0
    rho_it: float = 20.0
    rho_pt: float = 100.0
    rho_out: float = 100.0
    rho_outer: float = 20.0
    rho_memory: float = 100.0
    rho_coop: float = 10.0
    margin: float = 1.1

    def __post_init__(self):
        for f in fields(self):
            val = getattr(self, f.name)
            if isinstance(val, bool) or not isinstance(val, (int, float)) or not np.isfinite(val) or val <= 0:
                raise ValueError(f"gains.{f.name}: expected a positive finite number, got {val!r}")
        for low in ("r_inh_min", "r_trn_min"):
            if self.r_inh_max <= getattr(self, low):
                raise ValueError(f"gains.r_inh_max: must exceed {low} = {getattr(self, low)} Hz, got {self.r_inh_max}")
        if self.margin < 1:
            raise ValueError(f"gains.margin: must be >= 1 (offsets are worst-case bounds), got {self.margin}")

    def to_dict(self) -> dict:
        return asdict(self)


DEFAULT_GAINS = CodeGains()

LEVEL_GAINS = {"lif": replace(DEFAULT_GAINS, rho_l23=17.5, r_l23=3.5, r_inh_min=3.4, rho_out=50.0,
                              rho_memory=50.0)}
"""Default gains where a level departs from :data:`DEFAULT_GAINS`.

- ``r_l23`` = 3.5 Hz, ``rho_l23`` = 17.5 Hz: the lif L2/3 somata fire a 1 Hz baseline
  (:data:`ctmhsa.neurons.params.L23_SOMA`) plus 3.5 Hz per cell, 4.5 Hz in all, inside the
  0.1-5 Hz of L2/3 in vivo; ``rho_l23`` keeps the escape level's ratio to ``r_l23`` (25 / 5), so
  the divisions start where the escape level's do (the encoder then keeps them inside this
  level's narrower range; interneurons at 27.8 Hz against 34 Hz at escape on the default
  problem). The interneurons pool the baseline with the signal and hold the total, so an error
  of the total counts against the signal in proportion ``1 + r_base / r_l23`` (1.3 here; 2.3
  with the former 20 Hz baseline and 15 Hz per cell, version 0.10). The linear circuit's
  read-out cells use ``rho_l23`` and ``r_l23`` too but keep the default soma (20 Hz baseline):
  6.7 for them where their set point is ``r_l23`` per cell (on small problems it is
  ``r_pool_min``).
- ``r_inh_min`` = 3.4 Hz (with ``g_sh`` = 0.6 s): thresholded cells need busier interneurons. A
  macrocolumn of lif cells held its pooled rate within 1 % of the set point at divisions 4-14
  but 9 % low at 2; this makes the smallest division 3 and the encoder keep a head's divisions
  above 6 where it can. The TRN pools keep ``r_trn_min`` (their relays are escape cells here too).
- ``rho_out`` = 50 Hz: the lif somata follow their affine law only up to about 136-145 Hz
  (:func:`ctmhsa.neurons.conductance.affine_range`); with 100 Hz the nucleus-2 relays of a
  three-head pathway reached 176 Hz and x̃ was compressed (slope 0.58, 2.1x its floor; n = 7,
  H = 3, dk = 3, dv = 5, de = 6); 50 kept them below 113 Hz (x̃ 1.24x).
- ``rho_memory`` = 50 Hz, for the same range: with 100 the linear circuit's memory cells reached
  181-183 Hz (n = d = 6, H = 2, input seeds 21 and 22, flagged), with 50 they stayed in range and
  seed 21's S, z and Z went from 1.44, 2.16 and 1.43 of their floors to 1.00, 1.05 and 0.75."""


def default_gains(level: str) -> CodeGains:
    """The default gains of fidelity ``level``."""
    return LEVEL_GAINS.get(level, DEFAULT_GAINS)
