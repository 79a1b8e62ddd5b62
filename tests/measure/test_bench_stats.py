"""Summary statistics against hand-computed values."""

from __future__ import annotations

import math

import pytest

from guard.core.errors import UsageError
from guard.measure import summarize


def test_four_samples_hand_computed() -> None:
    s = summarize([0.004, 0.001, 0.003, 0.002])  # seconds, unordered
    # sorted ms [1, 2, 3, 4]; linear percentiles at h = 3q/100
    assert s["min"] == pytest.approx(1.0)
    assert s["p50"] == pytest.approx(2.5)  # h=1.5
    assert s["p90"] == pytest.approx(3.7)  # h=2.7 -> 3 + 0.7
    assert s["p99"] == pytest.approx(3.97)  # h=2.97
    assert s["mean"] == pytest.approx(2.5)
    assert s["stdev"] == pytest.approx(math.sqrt(5 / 3))  # ddof=1: (2.25+.25+.25+2.25)/3
    assert s["cv"] == pytest.approx(math.sqrt(5 / 3) / 2.5)
    assert s["n"] == 4


def test_odd_count_median_is_the_middle_sample() -> None:
    s = summarize([0.010, 0.030, 0.020, 0.100, 0.040])
    assert s["p50"] == pytest.approx(30.0)
    assert s["p90"] == pytest.approx(40.0 + 0.6 * 60.0)  # h=3.6


def test_single_sample() -> None:
    s = summarize([0.005])
    assert s["min"] == s["p50"] == s["p99"] == s["mean"] == pytest.approx(5.0)
    assert s["stdev"] == 0.0 and s["cv"] == 0.0 and s["n"] == 1


def test_all_zero_samples_have_no_cv() -> None:
    assert summarize([0.0, 0.0])["cv"] is None


@pytest.mark.parametrize("bad", [[], [0.001, -0.001], [float("inf")], [float("nan")]])
def test_bad_samples_are_a_usage_error_naming_where(bad: list[float]) -> None:
    with pytest.raises(UsageError, match="results.json: results\\[0\\].samples_s"):
        summarize(bad, where="results.json: results[0].samples_s")
