"""The divisive normalisation's operating range: where the interneurons can divide, and proof
that they did.

The interneurons of macrocolumn i hold its pooled L2/3 rate at the set point ``R_set,i``
(integral feedback, :mod:`ctmhsa.neurons.models`). Each L2/3 soma relaxes to ``u phi(q) / D_i`` with
``D_i = 1 + g_i`` the total somatic conductance relative to the leak, so at the fixed point

    D_i = rho_h a_i,      a_i = Z_i / R_set,i,

where ``rho_h`` is the L2/3 gain of head h (Hz per unit of ``phi(q) phi(k)``) and ``R_set,i =
max(r_l23 N_i, r_pool_min)`` the set point of the macrocolumn's ``N_i`` L2/3 cells
(:func:`set_points`), so ``a_i`` is its unshunted pooled drive per Hz of set point. A conductance cannot be negative: ``D_i >= 1``. Below it
the interneurons fall silent and the macrocolumn is *not divided* — before this module the
circuit then settled at a fixed point of the rectified system and returned a silent wrong answer.
The shunt is ``g_i = g_sh r_inh,i`` (``r_inh,i`` the macrocolumn's mean interneuron rate), so a
physiological range of interneuron rates ``[r_inh_min, r_inh_max]`` (:class:`ctmhsa.maths.codes.CodeGains`)
is a range of divisions ``[D_min, D_max]``. Where the interneurons also shunt the apical dendrites
(``circuit.meta.apical``, the second division stage) the apical factor is divided by
``1 + g_apical r_inh,i`` too: ``D_i = (1 + g_sh r)(1 + g_apical r)`` (:func:`division`), the same
rates spanning the square of the range; :func:`apical_needed` says where a pathway needs it.

**Operating point.** :func:`operating_point` chooses one L2/3 gain per head from the drive the
*declared input range* predicts (:func:`expected_drive`: the weights and the range's statistics,
never the tokens shown): the feasible gains are ``[D_min / min_i a_i, D_max / max_i a_i]`` and
the gain is their geometric centre, so tokens whose drive departs from the expectation by up
to ``sqrt(D_max / D_min)`` either way are still divided. A head whose expected drive ratio
``max_i a_i / min_i a_i`` (from causal masks and set points) exceeds ``D_max / D_min`` has no
physiological setting: :class:`OperatingRangeError` (a ``ValueError``) is raised before anything
is built. The tokens shown are then *checked* (:func:`check_division`), never used to set the
gain: a token set whose macrocolumns need a division outside ``[D_min, D_max]`` at that gain is
refused before building, with the range of drives the circuit is exact for. The expected drive
is a mean, and heavy-tailed ``phi(q) phi(k)`` puts most token sets far below it: where another
gain divides more of :data:`SAMPLES` token sets drawn from the range's statistics
(:func:`sampled_drive`), :func:`recentre` moves the head's gain there (issue 46 item 6); heads
whose sets the centred gain already divides as well keep it, circuit unchanged.

What the gain may know, and what it must not: ``a`` enters only through its minimum and maximum
per head, which set one gain per head — the setting a slow homeostatic process would reach for the
head's input statistics. Each macrocolumn's division by its own ``Z_i`` is done by its
interneurons; the result does not depend on the gain chosen inside the feasible interval (tested:
the rate level gives the same salience for every feasible gain), so nothing of the answer leaks.

**Checks.** :func:`check_operating` reads a finished run and reports, per macrocolumn, whether
the pooled L2/3 rate reached the set point, silent or saturated interneurons, the division's
distance from its bounds, rectified and saturated cells, and the settling of every observable
over the last part of the run (a fixed point of the wrong system is stationary too, so
stationarity alone proves nothing: the set point must be reached). :func:`enforce` raises at the
rate level, where any violation means a wrong answer, and warns at spiking levels.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass

import numpy as np

from ctmhsa.circuits.builders import CIRCUITS  # noqa: F401 - registers the area parts hooked below
from ctmhsa.circuits.graph import copies  # noqa: F401 - re-exported to encode and blocks
from ctmhsa.circuits.parts import area_hook, get_part, part_job, register_hook
from ctmhsa.neurons.levels import get_level

from .decode import per_dimension
from ctmhsa.maths.reference import FEATURE_MAPS

__all__ = ["OperatingPoint", "OperatingRangeError", "CircuitRangeError", "OperatingRangeWarning",
           "division_bounds", "trn_division_bounds", "division", "interneuron_rate", "apical_needed", "divided_sets", "pooled_drive", "expected_drive", "set_points", "l23_cells", "copies",
           "operating_point", "check_division", "check_operating", "enforce", "RATE_TOLERANCE", "ROOM_BELOW",
           "SAMPLES", "sampled_drive", "sampled_sets", "recentre"]

RATE_TOLERANCE = 1e-5
"""Rate level: largest relative departure of a macrocolumn's pooled L2/3 rate from its set
point, and largest relative change of any observable over the last 10 % of the run, that still
counts as settled (the rate level's stages then match the reference to ~1e-5)."""


ROOM_BELOW = 30.0
"""Largest factor by which the chosen gain puts the expected division above ``D_min`` (the
geometric centre of ``[D_min, D_max]`` is 7.6 above it with the default gains, so the cap only
acts for ranges wider than 900: with the apical stage, 3,300, it puts the gain at 30)."""


SAMPLES = 64
"""Token sets drawn from the declared range (:func:`sampled_drive`) on which :func:`recentre`
measures how often the gain divides a whole set."""


class OperatingRangeError(ValueError):
    """No physiological setting of the circuit divides every macrocolumn (raised before any
    network is built)."""


class CircuitRangeError(RuntimeError):
    """A finished rate-level run left its working range: its answer would be wrong."""


class OperatingRangeWarning(UserWarning):
    """A finished spiking run left its working range somewhere (see ``diagnostics['operating']``)."""


@dataclass(frozen=True)
class OperatingPoint:
    """The normalisation's operating point of every head.

    Attributes
    ----------
    rho : ndarray (H,)
        L2/3 (or linear read-out) gain per head (Hz per unit of ``phi(q) phi(k)``).
    drive : ndarray (H, n)
        Unshunted pooled drive per Hz of set point of every macrocolumn, ``a_i = Z_i / R_set,i``
        (units of ``phi(q) phi(k)`` per Hz).
    division : ndarray (H, n)
        Expected steady-state division ``D_i = rho_h a_i`` (>= 1).
    bounds : tuple of float
        ``(D_min, D_max)`` from the interneurons' rate range.
    g_sh : float
        Somatic shunt per Hz of mean interneuron rate (s).
    g_apical : float
        Apical shunt per Hz of mean interneuron rate (s); 0 where the interneurons shunt the
        soma only (one division stage).
    """

    rho: np.ndarray
    drive: np.ndarray
    division: np.ndarray
    bounds: tuple
    g_sh: float
    g_apical: float = 0.0

    @property
    def apical(self) -> bool:
        """Whether the division has its second, apical stage."""
        return self.g_apical > 0

    @property
    def interneuron_rate(self) -> np.ndarray:
        """Expected mean interneuron rate per macrocolumn (Hz) at the rate level: the ``r`` of
        ``D = (1 + g_sh r)(1 + g_apical r)`` (:func:`interneuron_rate`)."""
        return interneuron_rate(self.division, self.g_sh, self.g_apical)

    def summary(self) -> dict:
        """Plain data for provenance: per-head gain, the range of the division and of the drive."""
        return dict(rho_l23=self.rho.tolist(), division_min=float(np.min(self.division)),
                    division_max=float(np.max(self.division)), bounds=list(self.bounds),
                    drive_ratio=[float(np.max(d) / np.min(d)) for d in self.drive])


def division(rate, gains, apical: bool = False):
    """The division interneurons firing ``rate`` (Hz, their mean per macrocolumn) exert:
    ``1 + g_sh r`` at the soma, times ``1 + g_apical r`` at the apical dendrite where they shunt
    it too (``apical``: ``circuit.meta.apical``)."""
    r = np.asarray(rate, float)
    return (1.0 + gains.g_sh * r) * ((1.0 + gains.g_apical * r) if apical else 1.0)


def interneuron_rate(D, g_sh: float, g_apical: float = 0.0):
    """The mean interneuron rate (Hz) that exerts division ``D``: the inverse of
    :func:`division` (the positive root of ``g_sh g_apical r^2 + (g_sh + g_apical) r + 1 - D``)."""
    D = np.asarray(D, float)
    if not g_apical:
        return (D - 1.0) / g_sh
    b, c = g_sh + g_apical, g_sh * g_apical
    # the positive root, written without cancellation for D near 1
    return 2.0 * (D - 1.0) / (b + np.sqrt(b * b + 4.0 * c * (D - 1.0)))


def division_bounds(gains, apical: bool = False) -> tuple[float, float]:
    """``(D_min, D_max)``: the divisions the interneurons can exert within their physiological
    rate range ``[r_inh_min, r_inh_max]`` (:func:`division`): ``1 + g_sh r`` with one stage,
    ``(1 + g_sh r)(1 + g_apical r)`` with the apical stage (1.42-82 and 2.0-6,700 by default)."""
    return float(division(gains.r_inh_min, gains, apical)), float(division(gains.r_inh_max, gains, apical))


def trn_division_bounds(gains) -> tuple[float, float]:
    """``(D_min, D_max)``: the divisions a TRN pool can exert on its thalamic relays,
    ``1 + g_trn r`` for ``r`` in ``[r_trn_min, r_inh_max]`` (2.4-271 by default, at every level;
    :mod:`ctmhsa.mapping.blocks`)."""
    return tuple(float(1.0 + gains.g_trn * r) for r in (gains.r_trn_min, gains.r_inh_max))


def set_points(circuit, gains) -> np.ndarray:
    """Pooled set point of every macrocolumn, ``R_set,i = max(r_l23 N_i, r_pool_min)`` (Hz).

    ``N_i``: the cells the macrocolumn's interneurons pool (the area's ``"pool_cells"`` hook:
    Algorithm 1's L2/3 cells present, population-coding copies excluded, so causal masks count;
    the linear circuit's ``dk`` read-out-z cells).

    Returns
    -------
    ndarray (H, n)
    """
    return np.maximum(gains.r_l23 * area_hook(circuit, "pool_cells")(circuit), gains.r_pool_min)


@register_hook("quadratic", "pool_cells")
def l23_cells(circuit) -> np.ndarray:
    """L2/3 cells of every macrocolumn (H, n) of Algorithm 1's circuit: ``dk`` per microcolumn
    present (causal masks count), population-coding copies excluded."""
    l23 = circuit.populations["l23"]
    cells = np.zeros((circuit.meta.H, circuit.meta.n))
    np.add.at(cells, (l23.axis("head"), l23.axis("i")), 1.0)
    return cells / copies(l23)


@register_hook("linear", "pool_cells")
def _readout_z_cells(circuit) -> np.ndarray:
    """The linear circuit's ``dk`` read-out-z cells per macrocolumn (H, n)."""
    return np.full((circuit.meta.H, circuit.meta.n), float(circuit.meta.dk))


def pooled_drive(circuit, X, Yk, weights, phi: str) -> np.ndarray:
    """Unshunted pooled drive of every macrocolumn per unit of gain (units of ``phi(q) phi(k)``)
    for tokens ``X`` (queries) and ``Yk`` (keys) under ``weights`` (anything with ``WQ``, ``WK``:
    a :class:`ctmhsa.maths.model.Block`).

    Quadratic circuit: ``Z_i``, the sum of ``phi(q_i) phi(k_j)`` over the L2/3 cells of
    macrocolumn i (only the microcolumns present). Linear circuit: its read-out-z cells of
    macrocolumn i are driven by ``phi(q_i) z / m`` (mean over tokens), hence ``Z_i / m``.

    Returns
    -------
    ndarray (H, n)
    """
    features = part_job(get_part(circuit.meta.circuit), "features")
    if features is not None:   # an area whose queries and keys are not the relays' WQ x, WK y (Co4's triad)
        fq, fk = features(circuit, X, Yk, weights, phi)
    else:
        f = FEATURE_MAPS[phi][0]
        fq = f(np.einsum("hce,ne->hnc", weights.WQ, X))        # (H, n, dk)
        fk = f(np.einsum("hce,me->hmc", weights.WK, Yk))       # (H, m, dk)
    return area_hook(circuit, "pooled_drive")(circuit, fq, fk)


@register_hook("quadratic", "pooled_drive")
def _microcolumn_drive(circuit, fq, fk) -> np.ndarray:
    """Σ of ``fq[h,i,c] fk[h,j,c]`` over the L2/3 cells (h, i, j, c) present, copies averaged."""
    l23 = circuit.populations["l23"]
    if l23.mask is None:   # every microcolumn present, each cell ``copies`` times
        return np.einsum("hic,hjc->hi", fq, fk)
    # cells present per (h, i, j, c) (counted once per circuit): a dense product, not a sum over
    # 3.6 M cells per token set (6.2 s of a 100-head cortex's checks, measured)
    cells = l23.cells_over(("head", "i", "j", "c"))
    return np.einsum("hijc,hic,hjc->hi", cells, fq, fk) / copies(l23)


@register_hook("linear", "pooled_drive")
def _memory_drive(circuit, fq, fk) -> np.ndarray:
    """``phi(q_i) · mean_j phi(k_j)``: what the read-out-z cells of macrocolumn i pool."""
    return np.einsum("hnc,hmc->hn", fq, fk) / circuit.meta.m


def expected_drive(circuit, weights, input_range, phi: str) -> np.ndarray:
    """The pooled drive of every macrocolumn that the declared input range predicts (units of
    ``phi(q) phi(k)``), from the weights and the range's statistics only: every L2/3 cell of
    microcolumn (i, j) contributes ``E[phi(q_c)] E[phi(k_c)]`` with ``q = WQ x``, ``k = WK y`` for
    independent tokens of the range (:func:`ctmhsa.maths.inputs.expected_feature`). The
    area's own pooled drive of those expected features (every query and key alike), so it and
    :func:`pooled_drive` differ only by the tokens.

    Returns
    -------
    ndarray (H, n)
    """
    from ctmhsa.maths.inputs import expected_feature, projection_moments

    own = part_job(get_part(circuit.meta.circuit), "expected_drive")
    if own is not None:   # an area whose features have no closed-form moments
        return own(circuit, weights, input_range, phi)
    m = circuit.meta
    fq = expected_feature(phi, *projection_moments(weights.WQ, input_range))      # (H, dk)
    fk = expected_feature(phi, *projection_moments(weights.WK, input_range))
    return area_hook(circuit, "pooled_drive")(circuit, np.repeat(fq[:, None], m.n, axis=1),
                                              np.repeat(fk[:, None], m.m, axis=1))


def check_division(op: OperatingPoint, drive: np.ndarray, where: str = "X", remedy: str | None = None) -> None:
    """Refuse tokens whose pooled drive the built circuit cannot divide.

    The gain ``rho_h`` was fixed from the weights and the declared input range; macrocolumn i of
    these tokens divides exactly where ``D_min <= rho_h a_i <= D_max``. A check, never a setting:
    nothing of ``drive`` enters the circuit. ``remedy``: what the message proposes (default: one
    pathway's, declaring the tokens' range, smaller weights, the apical stage).

    Raises
    ------
    OperatingRangeError
        Naming the head, the query, the division these tokens need and the range.
    """
    d_min, d_max = op.bounds
    need = op.rho[:, None] * np.asarray(drive, float)
    bad = (need < d_min * (1 - 1e-9)) | (need > d_max * (1 + 1e-9))
    if np.any(bad):
        h, i = (int(v[0]) for v in np.nonzero(bad))
        low = need[h, i] < d_min
        raise OperatingRangeError(
            f"{where}: macrocolumn (head {h}, query {i}) of these tokens needs a division of {need[h, i]:.4g}, "
            f"{'below' if low else 'above'} what its interneurons can exert ({d_min:.4g}-{d_max:.4g}) at the "
            f"gain fixed from the weights and the declared input range (rho = {op.rho[h]:.4g} Hz); "
            f"{int(bad.sum())} of {bad.size} macrocolumns are outside. The circuit is exact for tokens whose "
            f"pooled drive Z_i/R_set,i lies in [{d_min / op.rho[h]:.4g}, {d_max / op.rho[h]:.4g}]: "
            + (remedy if remedy is not None else
               "declare the statistics of these tokens (input_range=InputRange.from_tokens(data)), or scale down "
               "WQ and WK" + ("" if op.apical else "; or let the interneurons shunt the apical dendrites too "
                                                   "(apical_inhibition=True: a second division stage)")))


def operating_point(drive: np.ndarray, gains, apical: bool = False) -> OperatingPoint:
    """Choose every head's L2/3 gain so that all its macrocolumns divide within bounds.

    Parameters
    ----------
    drive : ndarray (H, n)
        Pooled drive per Hz of set point, :func:`pooled_drive` / :func:`set_points`.
    gains : ctmhsa.maths.codes.CodeGains
    apical : bool
        The interneurons shunt the apical dendrites too (``circuit.meta.apical``): the divisions
        of :func:`division_bounds` with both stages.

    Raises
    ------
    OperatingRangeError
        A head whose drive ratio exceeds ``D_max / D_min`` (message: head, ratio, bound, remedies),
        or a macrocolumn with no drive at all (``Z_i = 0``: nothing to divide).
    """
    d_min, d_max = division_bounds(gains, apical)
    drive = np.asarray(drive, float)
    lo_a, hi_a = drive.min(axis=1), drive.max(axis=1)
    for h in range(drive.shape[0]):
        if not lo_a[h] > 0:
            i = int(np.argmin(drive[h]))
            raise OperatingRangeError(
                f"X, WQ, WK: macrocolumn (head {h}, query {i}) receives no L2/3 drive (Z = 0; phi(q)·phi(k) "
                f"= 0 for all its keys): there is nothing for its interneurons to divide. Use a feature map "
                f"that is positive everywhere (phi='elu1', 'softplus' or 'exp')")
        ratio = hi_a[h] / lo_a[h]
        if ratio > d_max / d_min:
            need = interneuron_rate(ratio * d_min, gains.g_sh, gains.g_apical if apical else 0.0)
            wider = "" if apical else ("; or let the interneurons shunt the apical dendrites too "
                                       "(apical_inhibition=True: divisions up to "
                                       f"{np.divide(*division_bounds(gains, True)[::-1]):.4g}x)")
            raise OperatingRangeError(
                f"WQ, WK: in head {h} the L2/3 drive per set point Z_i/R_set,i spans a ratio of {ratio:.4g} across "
                f"macrocolumns (query {int(np.argmin(drive[h]))}: {lo_a[h]:.4g}, query "
                f"{int(np.argmax(drive[h]))}: {hi_a[h]:.4g}), but interneurons firing "
                f"{gains.r_inh_min:g}-{gains.r_inh_max:g} Hz divide by {d_min:.4g}-{d_max:.4g}, a ratio of at "
                f"most {d_max / d_min:.4g}. Scale down WQ and WK (the spread of phi(q) phi(k) grows with "
                f"their scale), or widen the interneurons' range: gains=CodeGains(r_inh_max={need:.4g}) "
                f"(the interneurons' rates then leave the range recorded in vivo; docs/physiology.md){wider}")
    lo = d_min / lo_a
    hi = d_max / hi_a
    # the geometric centre of the feasible gains: the drive is an expectation from the declared
    # input range (expected_drive), and the tokens shown scatter around it by factors either way,
    # so the gain keeps the largest factor sqrt(D_max/D_min) (7.6 by default) on both sides; the
    # tokens are then checked against the bounds (check_division). At most ROOM_BELOW above the
    # lowest division: an unbounded range (r_inh_max -> inf) would put the centre at absurd
    # divisions, whose transients take long to settle (measured: D ~ 1e7 unsettled after 0.3 s)
    rho = lo * np.minimum(np.sqrt(hi / lo), ROOM_BELOW)
    return OperatingPoint(rho=rho, drive=drive, division=rho[:, None] * drive, bounds=(d_min, d_max),
                          g_sh=gains.g_sh, g_apical=gains.g_apical if apical else 0.0)


def sampled_drive(circuit, weights, input_range, phi: str, k: int = SAMPLES) -> np.ndarray:
    """The pooled drive of every macrocolumn (units of ``phi(q) phi(k)``) for ``k`` token sets
    drawn from the declared range's statistics (:func:`ctmhsa.maths.inputs.sample_tokens`,
    seeds 0 for queries and 1 for cross-attention keys): weights and range only.

    Returns
    -------
    ndarray (k, H, n)
    """
    X, Y = sampled_sets(circuit, input_range, k)
    return np.stack([pooled_drive(circuit, X[s], Y[s], weights, phi) for s in range(k)])


def sampled_sets(circuit, input_range, k: int = SAMPLES) -> tuple:
    """``(X, Y)``: ``k`` query sets ``(k, n, de)`` and key sets ``(k, m, de)`` drawn from the
    declared range's statistics (:func:`ctmhsa.maths.inputs.sample_tokens`, seeds 0 and 1; the
    queries' own sets where the circuit is not cross-attention). Every gain fixed from the range
    (:func:`sampled_drive`, :func:`ctmhsa.mapping.triad.memory_gains`) reads these."""
    from ctmhsa.maths.inputs import sample_tokens

    m = circuit.meta
    X = sample_tokens(input_range, m.de, (k, m.n), seed=0)
    return X, (sample_tokens(input_range, m.de, (k, m.m), seed=1) if m.cross else X)


def recentre(op: OperatingPoint, samples: np.ndarray, gains) -> OperatingPoint:
    """Move a head's gain where it divides more of the declared range's token sets.

    The expected drive (:func:`expected_drive`) is a mean; with heavy-tailed ``phi(q) phi(k)``
    (exp, softplus or elu1 at weight scales ~1) most token sets lie far below it, and the gain
    centred on it refused them. Each sampled set ``s`` (drives per Hz of set point ``a_s``) is
    divided exactly for ``log rho`` in ``[log D_min - log min_i a_s,i, log D_max - log max_i
    a_s,i]``; the gain that lies in the most of these intervals (the middle of its plateau)
    replaces ``op.rho[h]`` only where it divides strictly more sets, so a head whose sets the
    expected drive's gain already divides as well keeps it (its circuit is unchanged).

    Parameters
    ----------
    op : OperatingPoint
        From :func:`operating_point` on the expected drive (any other is returned unchanged).
    samples : ndarray (k, H, n)
        :func:`sampled_drive` per Hz of set point.
    gains : ctmhsa.maths.codes.CodeGains
    """
    if not np.allclose(op.rho, operating_point(op.drive, gains, op.apical).rho, rtol=1e-12, atol=0):
        return op        # a gain not chosen by the expected-drive rule (e.g. set by hand) is kept
    d_min, d_max = op.bounds
    with np.errstate(divide="ignore", invalid="ignore"):
        la = np.log(np.asarray(samples, float))
        left = np.log(d_min) - np.nanmin(la, axis=2)         # (k, H): log rho dividing set s
        right = np.log(d_max) - np.nanmax(la, axis=2)
    ok = np.isfinite(left) & np.isfinite(right) & (left <= right)
    rho = op.rho.astype(float).copy()
    for h in range(rho.size):
        lo, hi = left[ok[:, h], h], right[ok[:, h], h]
        if lo.size == 0:
            continue
        tol = 1e-12
        cover = lambda x: int(np.sum((lo <= x + tol) & (hi >= x - tol)))   # noqa: E731
        count = np.array([cover(x) for x in lo])
        if count.max() <= cover(np.log(rho[h])):
            continue                                        # today's gain divides as many sets
        x = lo[np.argmax(count)]                            # a left end of the best plateau
        inside = (lo <= x + tol) & (hi >= x - tol)
        x_hi = np.min(hi[inside])
        # the best plateau is [max of the covering left ends, min of their right ends]
        rho[h] = np.exp((np.max(lo[inside]) + x_hi) / 2)
    if np.array_equal(rho, op.rho):
        return op
    return dataclasses.replace(op, rho=rho, division=rho[:, None] * op.drive)


def divided_sets(op: OperatingPoint, samples: np.ndarray) -> int:
    """How many of the sampled token sets ``samples`` ((k, H, n) drives per Hz of set point)
    the operating point ``op`` divides in every head and macrocolumn."""
    d_min, d_max = op.bounds
    need = op.rho[None, :, None] * np.asarray(samples, float)
    ok = (need >= d_min * (1 - 1e-9)) & (need <= d_max * (1 + 1e-9))
    return int(np.count_nonzero(ok.reshape(ok.shape[0], -1).all(axis=1)))


def apical_needed(circuit, weights, input_range, phi: str, gains) -> bool:
    """Whether the divisive interneurons should shunt the apical dendrites too (the second
    division stage, ``apical_inhibition=None``): where the somatic stage alone, at its best gain
    (:func:`operating_point`, :func:`recentre`), does not divide every one of the :data:`SAMPLES`
    token sets drawn from the declared range, and both stages divide more of them. Weights and
    range only, never the tokens shown: two token sets of one range build the same circuit.

    Parameters
    ----------
    circuit : ctmhsa.circuits.graph.Circuit
        The description (its set points and pooled drive; the stage it has is ignored).
    weights : ctmhsa.maths.model.Block
    input_range : ctmhsa.maths.inputs.InputRange
    phi : str
    gains : ctmhsa.maths.codes.CodeGains
    """
    R_set = set_points(circuit, gains)
    expected = expected_drive(circuit, weights, input_range, phi) / R_set
    samples = sampled_drive(circuit, weights, input_range, phi) / R_set

    def divided(apical: bool) -> int:
        try:
            op = operating_point(expected, gains, apical)
        except OperatingRangeError:   # no gain at all: the expected drive spreads too far
            return -1
        return divided_sets(recentre(op, samples, gains), samples)

    one = divided(False)
    return one < samples.shape[0] and divided(True) > one


def _macrocolumn_sum(pop, values, fill=0.0):
    """Sum of per-cell ``values`` over each macrocolumn (head, i) of ``pop``, copies averaged."""
    d = per_dimension(pop, values, fill=fill)
    return d.reshape(d.shape[0], d.shape[1], -1).sum(axis=2)


PHI_CORRECTED_CELLS = ("l23", "kv_read")
"""Escape cells whose somatic drive is a phi-bias-corrected feature map (a shunted soma), which
can fall below rest when the correction leaves its range (:func:`_over_intensity`)."""

RECTIFIED_BY_LAW = {"l23", "kv_read"}
"""Cell types whose somatic drive below rest is part of their law, not a working range left: the
shunted somata (they receive phi >= 0) and cells that add their type here (the Co4 area's
cooperation cells, whose ReLU6 is the seed's law, :mod:`ctmhsa.mapping.triad`)."""


def _intensity_gap(o: dict, level: str, T: float | None):
    """Escape level: each cell's spike rate less its window-mean intensity, and the margin beyond
    which the gap is not counting noise: ``z`` standard deviations of Poisson counting over ``T``
    plus 2 %, ``z = sqrt(2 ln(N / 0.01))`` for ``N`` cells (a Gaussian tail bound: under 1 % of
    runs flag a cell by chance); ``None`` where this cannot be measured (other levels, no spike
    counts)."""
    if not get_level(level).escape or "rate" not in o or "expected_r" not in o:
        return None
    T = 1.0 if T is None else T
    rate, inten = np.asarray(o["rate"], float), np.asarray(o["expected_r"], float)
    z = np.sqrt(2.0 * np.log(max(rate.size, 1) / 0.01))
    return rate - inten, z * np.sqrt(np.maximum(rate, 1.0 / T) / T) + 0.02 * np.abs(rate)


def _over_intensity(o: dict, level: str, T: float | None):
    """Escape level: cells whose spike rate exceeds their window-mean intensity beyond counting
    noise (:func:`_intensity_gap`): their intensity was negative part of the time while their
    spikes were clipped at 0 (boolean per cell; ``None`` where this cannot be measured)."""
    gap = _intensity_gap(o, level, T)
    return None if gap is None else gap[0] > gap[1]


def _under_intensity(o: dict, level: str, T: float | None):
    """Escape level: cells whose window-mean intensity exceeds their spike rate beyond counting
    noise (:func:`_intensity_gap`): their intensity passed ``1/dt`` in brief peaks, where a cell
    spikes once a step at most (boolean per cell; ``None`` where this cannot be measured)."""
    gap = _intensity_gap(o, level, T)
    return None if gap is None else -gap[0] > gap[1]


def _saturated(o: dict, max_rate) -> int:
    """Escape level: how many cells are driven past ``max_rate`` (1/dt); 0 where unchecked."""
    if max_rate is None or "r" not in o or not np.size(o["r"]):
        return 0
    return int(np.count_nonzero(np.asarray(o.get("expected_r", o["r"]), float) > max_rate))


def _outside_range(o: dict, bounds, T) -> tuple[int, int]:
    """lif level: how many cells fire above and below their somata's range ``bounds`` (Hz) by more
    than three Poisson standard deviations of their count over ``T``; ``(0, 0)`` where unchecked."""
    if bounds is None or "rate" not in o:
        return 0, 0
    r = np.asarray(o["rate"], float)            # every spike, baseline included
    tol = 3.0 * np.sqrt(np.maximum(r, 1.0) / (1.0 if T is None else T))
    return int(np.count_nonzero(r > bounds[1] + tol)), int(np.count_nonzero(r < bounds[0] - tol))


def _bounds(encoding, name: str, rate_range):
    """The lif somata's range of population ``name`` (``None``: none, or no baseline to judge)."""
    if "r_base" not in encoding.values.params.get(name, {}):
        return None
    if isinstance(rate_range, dict) and name not in rate_range:
        raise ValueError(f"rate_range: no range for the lif population {name!r}; "
                         f"expected one per population with a baseline")
    return rate_range.get(name) if isinstance(rate_range, dict) else rate_range


def _negative_product(o: dict, level: str):
    """lif level (no intensity to compare the spikes with): cells whose window-mean product ``P``
    of phi-bias-corrected features is negative (boolean per cell). The exact product is never
    negative, nor is the corrected one while the correction stays in its range (elu1's and
    softplus's negative branch ``exp(x) (1 - σ²/2)`` is positive for σ² < 2, relu's and exp's
    always): a negative mean is proof that it left it. ``None`` where ``P`` is not observed."""
    if not get_level(level).spiking or "P" not in o:
        return None
    return np.asarray(o["P"], float) < 0


NEGLIGIBLE = 1e-9
"""A population whose largest magnitude of an observable is below this fraction of that
observable's largest magnitude in the network holds nothing measurable: its change is judged
against that floor (a potential decaying to an exact zero, e.g. below a cell clipped at 0 by its
law, changes by a constant fraction of itself however long the run)."""


def _settling(early: dict, late: dict) -> tuple[float, str]:
    """Largest relative change of any observable between two snapshots (relative to the
    population's largest magnitude of that observable, at least :data:`NEGLIGIBLE` of its
    largest in the network), and where it is."""
    top = {}
    for obs in late.values():
        for var, val in obs.items():
            if np.size(val):
                top[var] = max(top.get(var, 0.0), float(np.max(np.abs(np.asarray(val, float)))))
    worst, where = 0.0, ""
    for pop, obs in late.items():
        for var, val in obs.items():
            a = np.asarray(val, float)
            b = np.asarray(early.get(pop, {}).get(var, a), float)
            if a.size == 0 or a.shape != b.shape:
                continue
            scale = max(float(np.max(np.abs(a))), NEGLIGIBLE * top[var])
            if scale == 0:
                continue
            ch = float(np.max(np.abs(a - b))) / scale
            if ch > worst:
                worst, where = ch, f"{pop}.{var}"
    return worst, where


GAIN_OF = {"l23": "rho_l23", "l5it": "rho_it", "l5pt": "rho_pt", "relay_out": "rho_out",
           "kv_write": "rho_outer", "memory": "rho_memory", "memory_z": "rho_memory",
           "kv_read": "rho_l23"}
"""The :class:`ctmhsa.maths.codes.CodeGains` field that sets each cell type's rate per unit."""


def check_operating(circuit, encoding, obs: dict, level: str, gains, early: dict | None = None,
                    T: float | None = None, max_rate: float | None = None,
                    rate_range: tuple | dict | None = None) -> dict:
    """Check that a finished run worked where it claims to: per macrocolumn and per population.

    Parameters
    ----------
    circuit, encoding
        The run's description and :class:`ctmhsa.mapping.encode.Encoding`.
    obs : dict
        Observables of the run (final state at the rate level, window means at spiking levels;
        ``expected_r`` is used for the pooled rate where present: the intensity, free of count
        noise).
    level : str
        ``"rate"`` or a spiking level.
    gains : ctmhsa.maths.codes.CodeGains
    early : dict, optional
        Rate level: the observables at 90 % of the run (settling check).
    T : float, optional
        Spiking levels: the window (s), for the pooled rate's count-noise tolerance.
    max_rate : float, optional
        Escape level: ``1/dt``, the most an escape cell can fire.
    rate_range : (float, float) or dict, optional
        lif level: the measured rates (Hz) over which the somata follow their affine law
        (:func:`ctmhsa.neurons.conductance.affine_range`), one pair for every population or a
        pair per population name (soma types differ); a cell outside it by more than three
        Poisson standard deviations of its count over ``T`` is reported (its decoded rate is
        compressed).

    Returns
    -------
    dict
        ``violations`` (list of messages, empty when everything is in range), ``pooled_error``
        (H, n) relative departure of the pooled L2/3 rate from its set point, ``interneuron_rate``
        (H, n) mean rate (Hz), ``division`` (H, n) the division implied by it, ``settling`` and
        ``settling_where`` (rate level), ``rectified`` and ``saturated`` per population.
    """
    pops, consts = circuit.populations, encoding.consts
    out = {"violations": []}
    viol = out["violations"]
    rate_level = not get_level(level).spiking
    # per population: cells saturated (escape) and above / below their somata's range (lif), once
    # for the report below and for a macrocolumn's cause
    ranges = {name: (_saturated(obs.get(name, {}), max_rate),
                     _outside_range(obs.get(name, {}), _bounds(encoding, name, rate_range), T)) for name in pops}
    out_of_range = {name for name, (k, (hi, lo)) in ranges.items() if k or hi or lo}
    if "interneuron" in pops:
        src = circuit.projections["pool"].source    # the cells the interneurons pool
        o = obs[src]
        r = np.asarray(o.get("expected_r", o["r"]), float)
        pooled = _macrocolumn_sum(pops[src], r)
        R_set = np.asarray(consts["R_set"], float)
        err = pooled / R_set - 1.0
        inh = _macrocolumn_sum(pops["interneuron"], np.asarray(obs["interneuron"]["r"], float)) \
            / circuit.meta.n_inh
        apical = circuit.meta.apical
        out.update(pooled_error=err, interneuron_rate=inh, division=division(inh, gains, apical))
        over = _over_intensity(o, level, T)
        over_mc = _macrocolumn_sum(pops[src], over.astype(float)) if over is not None else np.zeros(err.shape)
        under = _under_intensity(o, level, T)
        under_mc = _macrocolumn_sum(pops[src], under.astype(float)) if under is not None else np.zeros(err.shape)
        if rate_level:
            tol = np.full(err.shape, RATE_TOLERANCE)
        else:   # the pooled intensity follows the spike input: allow 5 % or 3 sigma of the pool's
            # count noise over the window (short windows can only detect large departures)
            T = 1.0 if T is None else T
            tol = np.maximum(0.05, 3.0 / np.sqrt(np.maximum(R_set * T, 1e-12)))
        d_min, d_max = division_bounds(gains, apical)
        for h, i in zip(*np.nonzero(np.abs(err) > tol)):
            what = "below" if err[h, i] < 0 else "above"
            if inh[h, i] <= 0 and err[h, i] < 0:   # (silent above it: the pathway's cause below)
                cause = ("its interneurons are silent: the drive cannot reach the set point, so the "
                         "macrocolumn is not divided")
            elif over_mc[h, i] > 0:
                cause = (f"{over_mc[h, i]:g} of its {src} cells fire above their intensity (rectified part "
                         "of the time, see below): a bias that a longer run does not remove")
            elif out_of_range:
                cause = (f"cells of {', '.join(sorted(out_of_range))} fire outside their range (below): "
                         "the pathway is saturated, which a longer run does not mend")
            elif err[h, i] > 0 and under_mc[h, i] > 0:   # the pooled count is what the loop holds
                cause = (f"{under_mc[h, i]:g} of its {src} cells fire fewer spikes than their intensity: "
                         "it passes 1/dt in brief peaks, where a cell spikes once a step at most, so the "
                         "loop holds their count, not their intensity, and their shares read low; lower "
                         "the gains or dt")
            else:
                cause = "the interneurons' loop has not settled: run longer (duration)"
            viol.append(f"macrocolumn (head {h}, query {i}): pooled {src} rate {pooled[h, i]:.6g} Hz is "
                        f"{abs(err[h, i]):.3g} {what} its set point {R_set[h, i]:.6g} Hz; {cause}")
        for h, i in zip(*np.nonzero(inh > gains.r_inh_max * (1 + 1e-9))):
            viol.append(f"macrocolumn (head {h}, query {i}): interneurons fire {inh[h, i]:.4g} Hz, above "
                        f"r_inh_max = {gains.r_inh_max:g} Hz (saturated): the drive spread exceeds what "
                        f"they can divide")
        if rate_level:   # silence is only a violation where the set point was missed (reported above)
            silent = (inh <= 0) & (np.abs(err) <= tol)
            for h, i in zip(*np.nonzero(silent)):
                viol.append(f"macrocolumn (head {h}, query {i}): interneurons silent at the set point "
                            f"(division 1, at the edge of the range: D_min = {d_min:.3g})")
    rect, sat = {}, {}
    for name, pop in pops.items():
        o = obs.get(name, {})
        if "U" in o and "sign" not in pop.axes and pop.cell_type not in RECTIFIED_BY_LAW:
            # an ON/OFF pair is rectified by design; shunted somata receive phi >= 0
            k = int(np.count_nonzero(np.asarray(o["U"], float) < 0))
            if k:
                rect[name] = k
                why = ("the offset code's worst-case bound was exceeded; use signed='onoff'"
                       if circuit.meta.signed == "offset" else
                       "a baseline removed downstream of cells that fire outside their range, or a drive "
                       "beyond what the circuit was built for")
                viol.append(f"{name}: {k} cell(s) rectified (somatic drive below rest, rate clipped at 0): {why}")
        over = _over_intensity(o, level, T) if pop.cell_type in PHI_CORRECTED_CELLS else None
        negative = _negative_product(o, level) if pop.cell_type in PHI_CORRECTED_CELLS and over is None else None
        if negative is not None and negative.any():
            rect[name] = int(negative.sum())
            viol.append(f"{name}: {rect[name]} cell(s) have a negative phi-bias-corrected product (window mean of "
                        "P): the correction is past its second-order range (dendritic variance of 2 or more "
                        "for elu1 and softplus turns their negative branch below 0), so these cells are driven "
                        "below their baseline and their rates are biased; scale down the weights or the "
                        "declared input range")
        if over is not None and over.any():
            rect[name] = int(over.sum())
            viol.append(f"{name}: {rect[name]} cell(s) fire more spikes than their intensity predicts: their "
                        "phi-bias-corrected drive is below rest part of the time (the correction is past its "
                        "second-order range: dendritic fluctuations too large), so their rates are biased "
                        "upward; scale down the weights or the declared input range")
        k, (k_hi, k_lo) = ranges[name]
        if k:
            sat[name] = k
            viol.append(f"{name}: {k} cell(s) driven past {max_rate:g} Hz (1/dt; saturated escape "
                        f"cells spike every step): lower the gains or dt")
        if k_hi or k_lo:
            bounds = _bounds(encoding, name, rate_range)
            r = np.asarray(o["rate"], float)
            sat[name] = k_hi + k_lo
            gain = GAIN_OF.get(pop.cell_type, "its gain")
            viol.append(f"{name}: {k_hi + k_lo} cell(s) fire outside the somata's affine range "
                        f"{bounds[0]:.3g}–{bounds[1]:.3g} Hz (measured {r.min():.3g}–{r.max():.3g} Hz), where their "
                        f"rate no longer follows the drive: lower {gain} (gains=...) or the input scale")
    out.update(rectified=rect, saturated=sat)
    if rate_level and early is not None:
        ch, where = _settling(early, obs)
        out.update(settling=ch, settling_where=where)
        if not ch <= RATE_TOLERANCE:
            viol.append(f"not settled: {where} changed by {ch:.3g} (relative) over the last 10 % of the "
                        f"run (tolerance {RATE_TOLERANCE:g}); run longer (duration)")
    return out


def enforce(report: dict, level: str, perturbed: bool = False) -> None:
    """Raise :class:`CircuitRangeError` at the rate level if ``report`` has violations; warn
    (:class:`OperatingRangeWarning`) at spiking levels and for a perturbed circuit (studied where
    a lesion takes it out of its range: flagged, not raised)."""
    viol = report["violations"]
    if not viol:
        return
    head = viol[0] if len(viol) == 1 else f"{viol[0]} (and {len(viol) - 1} more)"
    if perturbed:
        level = f"perturbed {level}"
    elif not get_level(level).spiking:
        raise CircuitRangeError("the circuit left its working range, its answer would be wrong: " +
                                "; ".join(viol[:10]) + ("" if len(viol) <= 10 else f"; ... {len(viol) - 10} more"))
    warnings.warn(f"{level} run outside its working range: {head}; see "
                  f"res.diagnostics['operating']", OperatingRangeWarning, stacklevel=3)
