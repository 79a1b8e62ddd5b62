"""Summary statistics of raw per-iteration latency samples.

Everything is derived from the raw samples (seconds), so a results file that keeps them
can be re-summarised later with exactly the numbers a live run printed.

Conventions, fixed here so that every report agrees:

- Output is in milliseconds.
- Percentiles use numpy's ``method="linear"`` (type 7 of Hyndman & Fan, numpy's and R's
  default): the q-th percentile of n sorted samples interpolates linearly between ranks
  floor(h) and ceil(h) with h = (n - 1) * q / 100. p50 is therefore the ordinary median.
- ``stdev`` is the sample standard deviation (ddof=1); with a single sample it is 0.0.
- ``cv`` is stdev / mean as a fraction (0.05 means 5%); None when the mean is 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from guard.core.errors import UsageError

STAT_KEYS = ("min", "p50", "p90", "p99", "mean", "stdev", "cv", "n")


def summarize(
    samples_s: Sequence[float], *, where: str = "samples"
) -> dict[str, float | int | None]:
    """min/p50/p90/p99/mean/stdev (ms), cv (fraction) and n of raw samples in seconds."""
    arr = np.asarray(samples_s, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise UsageError(
            "no latency samples to summarise", where=where, hint="re-run the benchmark."
        )
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise UsageError(
            "latency samples must be finite, non-negative seconds",
            where=where,
            hint="the results file is corrupt; re-run the benchmark.",
        )
    ms = arr * 1e3
    p50, p90, p99 = np.percentile(ms, [50.0, 90.0, 99.0], method="linear")
    mean = float(ms.mean())
    stdev = float(ms.std(ddof=1)) if ms.size > 1 else 0.0
    return {
        "min": float(ms.min()),
        "p50": float(p50),
        "p90": float(p90),
        "p99": float(p99),
        "mean": mean,
        "stdev": stdev,
        "cv": stdev / mean if mean > 0 else None,
        "n": int(ms.size),
    }
