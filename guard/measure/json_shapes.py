"""A measurement as the results file keeps it: the TypedDicts guard.measure.timer writes
(a result's ``rounds``, one loop's timings, a round's host-speed readings)."""

from __future__ import annotations

from typing import TypedDict


class HostReadings(TypedDict):
    """A round's host-speed probe readings (ms), in the results file's names (``PROBES``)."""

    host_ms: float | None
    simd_ms: float | None


class RoundJson(HostReadings):
    """One of a result's ``rounds``, as the results file keeps it (milliseconds)."""

    samples_ms: list[float]
    p50: float | int | None
    n: float | int | None
    warmup_iters: int
    stopped_by: str
    contention: float | None
    cpu_share: float | None
    contended: bool
    preemptions: int | None
    cpu_ms_per_call: float | None
    host_readings: list[list[float]]


class TimingsJson(TypedDict):
    """One measurement loop's samples and how it ended (Timings.to_dict)."""

    samples_s: list[float]
    warmup_iters: int
    truncated: bool
    stopped_by: str
    contention: float | None
    cpu_share: float | None
    stats: dict[str, float | int | None]
    warnings: list[str]
