"""Transfer-function calibration: measure a cell's rate against its encoded product, fit, cache.

A cell's encoded product ``p`` is its basal factor times its apical gain (in encoded units: the
quantity an escape cell's rate is proportional to). :func:`calibrate` sweeps ``p`` in Brian2 —
each grid point reached with basal = apical = sqrt(p) and replicated on ``n_rep`` independent
cells — and fits:

- ``escape``: the closed form ``rate = c p`` (least squares through the origin);
- ``lif``: a monotone lookup table (isotonic regression of rate on p, linear interpolation),
  inverted for decoding above ``min_rate``, the documented lower bound of the working range.

Results are cached in ``cache_dir()/calibration`` under a SHA-256 of everything that determines
them (the model's rendered equations, the parameters, the protocol and a format version): any
parameter change gives a new key. A cache file also stores a SHA-256 of its values (``checksum``:
the key, the grid and the measured rates); one that fails to load, stores another key, lacks
the checksum or whose values no longer match it (altered, damaged) is never trusted: a
``RuntimeWarning`` names the file and the calibration is measured anew.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from dataclasses import asdict, dataclass, field

import numpy as np

from .backend import cache_dir
from .cellsim import Drive, simulate_cells
from .levels import LEVELS, get_level
from .models import get_model
from .params import DEFAULT_PARAMS, CellParams, lif_soma

__all__ = ["TransferTable", "Protocol", "calibrate", "isotonic", "calibration_key"]

FORMAT_VERSION = 1
DRIVE_RATE = 10.0   # Hz per synapse per encoded unit (100 synapses)
N_SYN = 100


@dataclass(frozen=True)
class Protocol:
    """How a calibration sweep is measured.

    Attributes
    ----------
    grid : tuple of float
        Encoded products p swept (geometric by default).
    n_rep : int
        Independent cells per grid point.
    duration, warmup, dt : float
        Measurement window, discarded warm-up and time step (s).
    seed : int
        Brian2 seed.
    rho : float
        Nominal gain (Hz per unit) written into the cell's ``rho``.
    min_rate : float, optional
        Lower bound of the working range (Hz) for inversion. ``None``: the cell's own, at the
        lif level the bottom of its soma type's law, its baseline ``r_base`` (1 Hz for L2/3 and
        L5 since version 0.15, 20 Hz for the default soma; every shipped calibration's working
        range starts at or below it), at the escape level 7 Hz (the lif default soma's bend at
        6.8 Hz, until version 0.14 the bound of every level and cell). It reads the table and does
        not enter the calibration's key.
    """

    grid: tuple = tuple(np.round(np.geomspace(0.3, 6.0, 20), 6))
    n_rep: int = 8
    duration: float = 10.0
    warmup: float = 0.3
    dt: float = 1e-4
    seed: int = 12345
    rho: float = 20.0
    min_rate: float | None = None
    codegen: str = "numpy"


@dataclass(frozen=True)
class TransferTable:
    """A measured transfer function ``rate = F(p)`` and its inverse.

    Attributes
    ----------
    level, cell_type : str
    product : ndarray
        Grid of encoded products.
    rate : ndarray
        Fitted (monotone) rates at ``product`` (Hz).
    raw_rate : ndarray
        Measured mean rates at ``product`` (Hz).
    slope : float
        Closed-form slope ``c`` (Hz per unit) for the escape level; NaN for lookup tables.
    min_rate : float
        Lower bound of the working range (Hz).
    key : str
        Cache key (hash of model, parameters and protocol).
    """

    level: str
    cell_type: str
    product: np.ndarray
    rate: np.ndarray
    raw_rate: np.ndarray
    slope: float
    min_rate: float
    key: str
    meta: dict = field(default_factory=dict)

    def forward(self, p):
        """Rate (Hz) of a cell whose encoded product is ``p``."""
        p = np.asarray(p, float)
        if np.isfinite(self.slope):
            return self.slope * p
        return np.interp(p, self.product, self.rate)

    @property
    def lower_bound(self) -> float:
        """Smallest encoded product whose fitted rate reaches ``min_rate``."""
        if np.isfinite(self.slope):
            return self.min_rate / self.slope
        above = np.nonzero(self.rate >= self.min_rate)[0]
        if above.size == 0:
            return float("inf")
        k = above[0]
        if k == 0:
            return float(self.product[0])
        return float(np.interp(self.min_rate, self.rate[k - 1:k + 1], self.product[k - 1:k + 1]))

    def inverse(self, rate):
        """Encoded product for a measured ``rate``; NaN below ``min_rate`` (outside the range)."""
        rate = np.asarray(rate, float)
        if np.isfinite(self.slope):
            return rate / self.slope
        ok = self.rate >= 0.5 * self.min_rate
        r, p = self.rate[ok], self.product[ok]
        r = np.maximum.accumulate(r) + 1e-9 * np.arange(r.size)   # strictly increasing
        out = np.interp(rate, r, p, left=np.nan, right=np.nan)
        return np.where(rate >= self.min_rate, out, np.nan)


def isotonic(y: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
    """Non-decreasing least-squares fit (pool-adjacent-violators)."""
    y = np.asarray(y, float)
    w = np.ones_like(y) if w is None else np.asarray(w, float)
    vals, wts, sizes = [], [], []
    for yi, wi in zip(y, w):
        vals.append(yi)
        wts.append(wi)
        sizes.append(1)
        while len(vals) > 1 and vals[-2] > vals[-1]:
            v2, w2, s2 = vals.pop(), wts.pop(), sizes.pop()
            v1, w1, s1 = vals.pop(), wts.pop(), sizes.pop()
            vals.append((v1 * w1 + v2 * w2) / (w1 + w2))
            wts.append(w1 + w2)
            sizes.append(s1 + s2)
    return np.repeat(vals, sizes)


def _cell_params(cell_type: str, rho: float) -> dict:
    model = get_model("rate", cell_type)
    return {p: (rho if p == "rho" else 0.0) for p in model.parameters}


def _drives(cell_type: str, p: np.ndarray, w: float) -> dict:
    model = get_model("rate", cell_type)
    if "apical" in model.inputs:
        f = np.sqrt(p)
        return {"basal": Drive(DRIVE_RATE * f, w, N_SYN), "apical": Drive(DRIVE_RATE * f, w, N_SYN)}
    return {"soma": Drive(DRIVE_RATE * p, w, N_SYN)}


def calibration_key(level: str, cell_type: str, params: CellParams, protocol: Protocol,
                    phi: str = "elu1") -> str:
    """SHA-256 of everything that determines a calibration."""
    model = get_model(level, cell_type)
    comps = {c: [f"drive_{c}"] for c in _drives(cell_type, np.ones(1), 1.0)}
    blob = json.dumps(dict(version=FORMAT_VERSION, level=level, cell_type=cell_type, phi=phi,
                           equations=model.render(phi, comps), threshold=model.threshold,
                           reset=model.reset, refractory=model.refractory, regular=model.regular,
                           pre_threshold=model.pre_threshold,
                           params=params.to_dict(),
                           # min_rate reads the table and never the measurement: not in the key
                           protocol={k: v for k, v in asdict(protocol).items() if k != "min_rate"}),
                      sort_keys=True, default=float)
    return hashlib.sha256(blob.encode()).hexdigest()


def _measure(level, cell_type, params, protocol, phi) -> np.ndarray:
    grid = np.asarray(protocol.grid, float)
    p = np.repeat(grid, protocol.n_rep)
    w = params.u / (N_SYN * DRIVE_RATE)
    out = simulate_cells(level, cell_type, p.size, _drives(cell_type, p, w), duration=protocol.duration,
                         warmup=protocol.warmup, dt=protocol.dt, seed=protocol.seed, phi=phi,
                         cell_params=_cell_params(cell_type, protocol.rho), params=params,
                         codegen=protocol.codegen)
    return out["rate"].reshape(grid.size, protocol.n_rep).mean(axis=1)


def _min_rate(level, cell_type, protocol) -> float:
    """The protocol's ``min_rate``, or the cell's own (:class:`Protocol`)."""
    if protocol.min_rate is not None:
        return float(protocol.min_rate)
    if not get_level(level).lif:
        return 7.0
    return float(lif_soma(cell_type).r_base)


def _fit(level, cell_type, grid, raw, protocol, key) -> TransferTable:
    if get_level(level).escape:   # escape noise: proportional to the intensity
        slope = float(grid @ raw / (grid @ grid))
        fitted = slope * grid
    else:
        slope = float("nan")
        fitted = isotonic(raw)
    return TransferTable(level, cell_type, grid, fitted, raw, slope, _min_rate(level, cell_type, protocol), key,
                         meta=dict(protocol=asdict(protocol)))


def _path(level, cell_type, key) -> str:
    d = os.path.join(cache_dir(), "calibration")
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, f"{level}-{cell_type}-{key[:20]}.npz")


def _checksum(key: str, grid: np.ndarray, raw: np.ndarray) -> str:
    """SHA-256 of a cache file's values: its key and the bytes of its float64 arrays."""
    h = hashlib.sha256(key.encode())
    for a in (grid, raw):
        h.update(np.ascontiguousarray(a, dtype="<f8").tobytes())
    return h.hexdigest()


def _load(path: str, key: str):
    try:
        with np.load(path, allow_pickle=False) as z:
            if str(z["key"]) != key:
                raise ValueError("key mismatch")
            if "checksum" not in z.files:
                raise ValueError("no checksum of its values")
            grid, raw = np.array(z["product"], float), np.array(z["raw_rate"], float)
            checksum = str(z["checksum"])
        if grid.ndim != 1 or grid.shape != raw.shape or not np.all(np.isfinite(raw)):
            raise ValueError("malformed arrays")
        if checksum != _checksum(key, grid, raw):
            raise ValueError("its values do not match their checksum")
        return grid, raw
    except Exception as exc:  # a corrupt, altered or foreign file is rebuilt, never trusted
        warnings.warn(f"calibration cache {path} is unusable ({exc}); recalibrating", RuntimeWarning)
        return None


def calibrate(cell_type: str = "l5it", level: str = "lif", params: CellParams = DEFAULT_PARAMS,
              protocol: Protocol = Protocol(), phi: str = "elu1", use_cache: bool = True) -> TransferTable:
    """Measure (or load from the cache) the transfer function of ``cell_type`` at ``level``.

    Returns
    -------
    TransferTable
        ``meta["from_cache"]`` says whether it was loaded.
    """
    if level not in LEVELS or not get_level(level).spiking:
        raise ValueError(f"level: calibration applies to the spiking levels 'escape' and 'lif', got {level!r}")
    key = calibration_key(level, cell_type, params, protocol, phi)
    path = _path(level, cell_type, key)
    cached = _load(path, key) if (use_cache and os.path.exists(path)) else None
    if cached is not None:
        grid, raw = cached
        table = _fit(level, cell_type, grid, raw, protocol, key)
        table.meta["from_cache"] = True
        return table
    grid = np.asarray(protocol.grid, float)
    raw = _measure(level, cell_type, params, protocol, phi)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".npz")
    os.close(fd)
    np.savez(tmp, key=np.array(key), product=grid, raw_rate=raw, checksum=np.array(_checksum(key, grid, raw)))
    os.replace(tmp, path)
    table = _fit(level, cell_type, grid, raw, protocol, key)
    table.meta["from_cache"] = False
    table.meta["path"] = path
    return table
