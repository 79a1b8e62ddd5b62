"""Numerics against goldens: errors, NaN, shapes, hashes, top-1."""

from __future__ import annotations

import numpy as np

from guard.golden import array_sha256, compare_outputs, outputs_sha256, top1_accuracy


def test_identical_outputs_are_bit_exact():
    a = [np.arange(20, dtype=np.float32).reshape(2, 10)]
    r = compare_outputs([a[0].copy()], a, rtol=0, atol=0)
    assert r["allclose"] and r["bit_exact"] and r["max_abs_err"] == 0 and r["top1"] == 1.0


def test_small_drift_passes_tolerance_but_changes_the_hash():
    want = np.linspace(-1, 1, 50, dtype=np.float32).reshape(5, 10)
    got = want + np.float32(1e-6)
    r = compare_outputs([got], [want], rtol=1e-4, atol=1e-5)
    assert r["allclose"] and not r["bit_exact"]
    assert r["output_sha256"] != r["golden_sha256"]
    assert 5e-7 < r["max_abs_err"] < 2e-6


def test_large_error_fails_and_reports_relative_error():
    want = np.ones((1, 4), np.float32)
    got = want.copy()
    got[0, 2] = 1.5
    r = compare_outputs([got], [want], rtol=1e-4, atol=1e-5)
    assert not r["allclose"] and r["max_abs_err"] == 0.5 and r["max_rel_err"] == 0.5


def test_nan_where_golden_has_none_fails():
    want = np.zeros((1, 3), np.float32)
    got = want.copy()
    got[0, 1] = np.nan
    r = compare_outputs([got], [want], rtol=1, atol=1)
    assert not r["allclose"] and r["max_abs_err"] == float("inf")


def test_shape_mismatch_and_output_count():
    r = compare_outputs([np.zeros((2, 3))], [np.zeros((3, 2))], rtol=1, atol=1)
    assert not r["allclose"] and "shape" in r["error"]
    r = compare_outputs([], [np.zeros(1)], rtol=1, atol=1)
    assert not r["allclose"] and "outputs" in r["error"]


def test_top1_agreement_and_accuracy():
    want = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]], np.float32)
    got = np.array([[0.2, 0.8], [0.4, 0.6], [0.1, 0.9]], np.float32)
    r = compare_outputs([got], [want], rtol=1, atol=1)
    assert r["top1"] == 2 / 3
    assert top1_accuracy(want, np.array([1, 0, 0])) == 2 / 3


def test_hash_covers_dtype_and_shape():
    a = np.zeros(4, np.float32)
    assert array_sha256(a) != array_sha256(a.reshape(2, 2))
    assert array_sha256(a) != array_sha256(a.astype(np.int32))
    assert array_sha256(np.float32(1.0).reshape(())) != array_sha256(np.ones(1, np.float32))
    assert outputs_sha256([a, a]) != outputs_sha256([a])
