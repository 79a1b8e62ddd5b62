"""guard.measure: the measurement harness.

- timer: MeasureConfig, measure() with an injected clock, Timings (raw samples kept),
  RoundTimings over the rounds of one result
- summary: summarize() raw samples into min/p50/p90/p99/mean/stdev/cv/n
- preflight: machine facts (load, governor, affinity, contention) and their warnings
- host_speed: the host-speed probes timed beside every round
- round_runner, round_worker: where rounds run (a fresh interpreter each, or in process)
- json_shapes: rounds and timings as the results file keeps them (TypedDicts)
"""

from guard.measure.preflight import CpuTimes, preflight, read_cpu_times, set_threads
from guard.measure.summary import summarize
from guard.measure.timer import MeasureConfig, RoundTimings, Timings, measure

__all__ = [
    "CpuTimes",
    "MeasureConfig",
    "RoundTimings",
    "Timings",
    "measure",
    "preflight",
    "read_cpu_times",
    "set_threads",
    "summarize",
]
