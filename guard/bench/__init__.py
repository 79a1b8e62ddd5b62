"""guard.bench: the measurement harness.

- timer: MeasureConfig, measure() with an injected clock, Timings (raw samples kept),
  measure_rounds() over freshly loaded sessions
- stats: summarize() raw samples into min/p50/p90/p99/mean/stdev/cv/n
- preflight: machine facts (load, governor, affinity, contention) and their warnings
"""

from guard.bench.preflight import CpuTimes, preflight, read_cpu_times, set_threads
from guard.bench.stats import summarize
from guard.bench.timer import MeasureConfig, RoundTimings, Timings, measure, measure_rounds

__all__ = [
    "CpuTimes",
    "MeasureConfig",
    "RoundTimings",
    "Timings",
    "measure",
    "measure_rounds",
    "preflight",
    "read_cpu_times",
    "set_threads",
    "summarize",
]
