"""A tensor's observed range, and the clipping range each calibration method takes from it.

``TensorStats`` keeps min, max and a ``BINS``-bin histogram over [min, max] across samples.
When a sample widens the range, the old counts move to the new bins by their bin centres
(Glow's profile rescaling, lib/Quantization/Base/Profile.cpp): counts are conserved, each
within one new bin width of where it was.

Methods (``clip_range``):

- ``minmax``: the observed min and max.
- ``percentile``: ``100 - p`` percent of the values cut, half from each tail (p = 99.99
  by default; onnxruntime's HistogramCollector cuts the same), read off the histogram's
  cumulative counts. A non-negative tensor keeps its minimum.
- ``entropy``: TensorRT's KL calibration as Glow and onnxruntime do it: on the histogram of
  |x|, for each candidate threshold t the clipped distribution P (outliers added to the last
  bin) is merged into 128 levels and expanded back over P's non-empty bins as Q; the t with
  the least KL(P || Q) is the threshold, and the range is [max(min, -t), min(max, t)].

Affine parameters (``activation_params``): the range always contains 0 (so zero padding
and ReLU's zeros are exact); u8 asymmetric by default (scale = (hi - lo) / 255, zero point
round(-lo / scale)), s8 with zero point 0 when symmetric. A range of zero width has no
scale: the caller keeps that tensor fp32 (a zero scale divides by zero in QuantizeLinear).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypedDict

import numpy as np

from guard.core.json_types import Json

BINS = 2048
METHODS = ("minmax", "percentile", "entropy")
DEFAULT_PERCENTILE = 99.99
KL_LEVELS = 128  # TensorRT's 128 quantised bins for an 8-bit (sign + 7 bits) magnitude
KL_STRIDE = 16  # candidate thresholds every 16 bins: 121 candidates, within 1/128 of the best
# Samples a method wants before its answer means much (warn below; entropy refuses one).
MIN_SAMPLES = {"minmax": 1, "percentile": 8, "entropy": 8}


class TensorStatsJson(TypedDict):
    """A tensor's stats as a profile file keeps them (TensorStats.to_json)."""

    min: float | None
    max: float | None
    count: int
    nonfinite: int
    hist: list[list[int]]  # sparse: [bin, count] pairs


@dataclass
class TensorStats:
    """Min, max and histogram of one tensor over every sample profiled so far."""

    lo: float = float("inf")
    hi: float = float("-inf")
    hist: np.ndarray = field(default_factory=lambda: np.zeros(BINS, dtype=np.float64))
    count: int = 0
    nonfinite: int = 0

    def edges(self) -> tuple[float, float]:
        return (self.lo, self.hi if self.hi > self.lo else self.lo + 1.0)

    def update(self, x: np.ndarray) -> None:
        x = np.asarray(x, dtype=np.float64).reshape(-1)
        finite = np.isfinite(x)
        if not finite.all():
            self.nonfinite += int(x.size - finite.sum())
            x = x[finite]
        if x.size == 0:
            return
        lo, hi = float(x.min()), float(x.max())
        if self.count == 0:
            self.lo, self.hi = lo, hi
        elif lo < self.lo or hi > self.hi:
            old_lo, old_hi = self.edges()
            centres = old_lo + (np.arange(BINS) + 0.5) * (old_hi - old_lo) / BINS
            self.lo, self.hi = min(lo, self.lo), max(hi, self.hi)
            centres = np.clip(centres, self.lo, self.hi)
            self.hist, _ = np.histogram(centres, BINS, self.edges(), weights=self.hist)
        self.hist += np.histogram(x, BINS, self.edges())[0]
        self.count += int(x.size)

    def to_json(self) -> TensorStatsJson:
        nz = np.nonzero(self.hist)[0]
        return {
            "min": self.lo if self.count else None,
            "max": self.hi if self.count else None,
            "count": self.count,
            "nonfinite": self.nonfinite,
            # sparse: [bin, count] pairs (most bins of a ReLU output are empty)
            "hist": [[int(i), int(round(self.hist[i]))] for i in nz],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Json]) -> TensorStats:
        """A profile file's entry as read (Profile.load turns a malformed one into its error)."""
        s = cls()
        s.count = int(d["count"])
        s.nonfinite = int(d["nonfinite"])
        if s.count:
            s.lo, s.hi = float(d["min"]), float(d["max"])
        for i, c in d["hist"]:
            s.hist[int(i)] = float(c)
        return s


def _cdf_value(stats: TensorStats, q: float) -> float:
    """The value below which a fraction ``q`` of the histogram's counts lie."""
    lo, hi = stats.edges()
    cdf = np.cumsum(stats.hist)
    total = cdf[-1]
    idx = int(np.searchsorted(cdf, q * total, side="left"))
    idx = min(max(idx, 0), BINS - 1)
    # the bin's far edge for the upper tail, its near edge for the lower: never cuts data
    # that sits in the chosen bin
    width = (hi - lo) / BINS
    return lo + (idx + (1 if q >= 0.5 else 0)) * width


def _abs_hist(stats: TensorStats) -> tuple[np.ndarray, float]:
    lo, hi = stats.edges()
    top = max(abs(lo), abs(hi))
    centres = lo + (np.arange(BINS) + 0.5) * (hi - lo) / BINS
    hist, _ = np.histogram(np.abs(centres), BINS, (0.0, top), weights=stats.hist)
    return hist, top


def kl_threshold(hist: np.ndarray, top: float, levels: int = KL_LEVELS) -> float:
    """TensorRT's entropy threshold for a histogram of |x| over [0, top] (module doc)."""
    n = hist.size
    best_t, best_kl = top, float("inf")
    for i in range(levels, n + 1, KL_STRIDE):
        p = hist[:i].astype(np.float64).copy()
        p[-1] += hist[i:].sum()
        nonzero = p > 0
        # merge i bins into `levels` groups, then spread each group's sum evenly over the
        # group's non-empty bins (empty reference bins stay empty in Q)
        groups = np.minimum((np.arange(i) * levels) // i, levels - 1)
        sums = np.bincount(groups, weights=hist[:i], minlength=levels)
        used = np.bincount(groups, weights=nonzero.astype(np.float64), minlength=levels)
        q = np.where(nonzero, sums[groups] / np.maximum(used[groups], 1), 0.0)
        ps, qs = p.sum(), q.sum()
        if ps == 0 or qs == 0:
            continue
        pn, qn = p / ps, q / qs
        mask = pn > 0
        # P's mass where Q is empty (the last bin's outliers) is smoothed, as TensorRT does
        qn_m = np.where(qn[mask] > 0, qn[mask], 1e-12)
        kl = float(np.sum(pn[mask] * np.log(pn[mask] / qn_m)))
        if kl < best_kl:
            best_kl, best_t = kl, (i / n) * top
    return best_t


def clip_range(
    stats: TensorStats, method: str, percentile: float = DEFAULT_PERCENTILE
) -> tuple[float, float]:
    """The (lo, hi) range ``method`` keeps for a tensor (module doc)."""
    if method == "minmax" or stats.hi <= stats.lo:
        return stats.lo, stats.hi
    if method == "percentile":
        tail = (100.0 - percentile) / 200.0
        lo = stats.lo if stats.lo >= 0 else _cdf_value(stats, tail)
        hi = _cdf_value(stats, 1.0 - tail)
        return max(lo, stats.lo), min(hi, stats.hi)
    if method == "entropy":
        hist, top = _abs_hist(stats)
        t = kl_threshold(hist, top)
        return max(stats.lo, -t), min(stats.hi, t)
    raise ValueError(f"unknown calibration method {method!r}")


def activation_params(lo: float, hi: float, symmetric: bool) -> tuple[float, int, bool] | None:
    """(scale, zero point, signed) for a clipping range, or None when it has no width."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    if not (np.isfinite(lo) and np.isfinite(hi)) or hi - lo <= 0:
        return None
    if symmetric:
        scale = max(-lo, hi) / 127.0
        return float(np.float32(scale)), 0, True
    scale = float(np.float32((hi - lo) / 255.0))
    zp = int(np.clip(round(-lo / scale), 0, 255))
    return scale, zp, False


def weight_scales(w: np.ndarray, axis: int | None) -> np.ndarray:
    """Symmetric s8 scales (max |w| / 127) per slice along ``axis``, or one for the tensor.

    An all-zero slice gets scale 1 (its values quantise to 0 exactly): never a zero scale."""
    a = np.abs(w.astype(np.float64))
    if axis is None:
        m = np.array(a.max() if a.size else 0.0)
    else:
        m = np.moveaxis(a, axis, 0).reshape(w.shape[axis], -1).max(axis=1)
    scales = np.where(m > 0, m / 127.0, 1.0).astype(np.float32)
    return scales
