"""Ranges: the histogram across samples, the three methods, and the affine parameters."""

from __future__ import annotations

import numpy as np
import pytest

from guard.quantize.ranges import (
    BINS,
    TensorStats,
    activation_params,
    clip_range,
    weight_scales,
)


def test_stats_take_every_sample_and_keep_counts_when_the_range_widens():
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0, 1, 1000), rng.uniform(-3, 5, 1000)
    s = TensorStats()
    s.update(a)
    s.update(b)
    assert (s.lo, s.hi) == (min(a.min(), b.min()), max(a.max(), b.max()))
    assert s.count == 2000 and s.hist.sum() == pytest.approx(2000)
    # the first sample's counts moved into the new bins covering [0, 1] (one bin of slack)
    width = (s.hi - s.lo) / BINS
    lo_bin, hi_bin = int((0 - s.lo) / width), int((1 - s.lo) / width)
    direct = np.histogram(b, BINS, (s.lo, s.hi))[0]
    assert s.hist[lo_bin - 1 : hi_bin + 2].sum() - direct[lo_bin - 1 : hi_bin + 2].sum() == (
        pytest.approx(1000)
    )


def test_stats_count_nonfinite_values_and_round_trip_through_json():
    s = TensorStats()
    s.update(np.array([1.0, np.nan, -2.0, np.inf]))
    assert s.nonfinite == 2 and (s.lo, s.hi) == (-2.0, 1.0)
    back = TensorStats.from_json(s.to_json())
    assert (back.lo, back.hi, back.count, back.nonfinite) == (-2.0, 1.0, 2, 2)
    assert np.array_equal(back.hist, s.hist)


def _with_outliers() -> TensorStats:
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.normal(0, 1, 200_000), [400.0, -350.0]])
    s = TensorStats()
    s.update(x)
    return s


def test_minmax_keeps_the_outliers_percentile_and_entropy_clip_them():
    s = _with_outliers()
    assert clip_range(s, "minmax") == (-350.0, 400.0)
    lo, hi = clip_range(s, "percentile", 99.99)
    assert -10 < lo < -2 and 2 < hi < 10  # the 0.01% tails of N(0,1) are near +-3.9
    lo, hi = clip_range(s, "entropy")
    assert -60 < lo < -2 and 2 < hi < 60
    assert clip_range(s, "percentile", 100.0) == pytest.approx((-350.0, 400.0), abs=0.5)


def test_percentile_never_moves_a_non_negative_minimum():
    s = TensorStats()
    s.update(np.abs(np.random.default_rng(2).normal(0, 1, 10_000)))
    lo, _ = clip_range(s, "percentile")
    assert lo == s.lo >= 0


def test_activation_params_u8_s8_and_no_width():
    scale, zp, signed = activation_params(0.0, 2.55, symmetric=False)
    assert (zp, signed) == (0, False) and scale == pytest.approx(0.01)
    scale, zp, signed = activation_params(-1.0, 1.0, symmetric=False)
    assert zp in (127, 128) and not signed
    scale, zp, signed = activation_params(-2.0, 1.0, symmetric=True)
    assert (zp, signed) == (0, True) and scale == pytest.approx(2 / 127)
    # the range always contains zero: a positive-only range still gets zp 0
    assert activation_params(1.0, 3.0, symmetric=False)[1] == 0
    assert activation_params(0.0, 0.0, symmetric=False) is None
    assert activation_params(0.0, float("nan"), symmetric=False) is None


def test_weight_scales_per_channel_and_never_zero():
    w = np.zeros((3, 2, 2, 2), np.float32)
    w[0] = 1.27
    w[2, 0, 0, 0] = -2.54
    s = weight_scales(w, axis=0)
    assert s.tolist() == pytest.approx([0.01, 1.0, 0.02])
    assert weight_scales(w, axis=None).shape == () or weight_scales(w, None).size == 1
    assert float(weight_scales(w, None).reshape(-1)[0]) == pytest.approx(0.02)
