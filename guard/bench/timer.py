"""The timing loop: warm-up discarded, iterations adapted to time and count, raw samples kept.

The clock is a parameter (``time.perf_counter`` by default) so that tests drive the loop
with a fake clock and assert exact iteration counts instead of timing real code.

The loop, in order:

1. Warm-up: call ``fn`` while less than ``warmup_s`` has elapsed and fewer than
   ``max_warmup_iters`` calls were made. These calls are discarded: they pay for lazy
   initialisation, allocator growth, JIT and cold caches.
2. Timed: call ``fn`` and record each call's duration until at least ``min_iters``
   samples *and* ``min_time_s`` of timed calls are reached. It stops early at
   ``max_time_s`` (then ``truncated`` is true if ``min_iters`` was not reached) and at
   ``max_iters`` (enough samples; bounds memory for very fast functions).

Other processes' CPU use is sampled around the timed loop (``contention``,
see guard.bench.preflight) so a contended run can be told from a clean one.
"""

from __future__ import annotations

import difflib
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from guard.bench.preflight import CpuTimes, contention_between, contention_warning, read_cpu_times
from guard.bench.stats import summarize
from guard.errors import UsageError

Clock = Callable[[], float]


@dataclass(frozen=True)
class MeasureConfig:
    """How long to warm up and how many iterations to time (the suite's ``measure:``)."""

    warmup_s: float = 0.5
    min_iters: int = 20
    min_time_s: float = 1.0
    max_time_s: float = 20.0
    max_warmup_iters: int = 1000
    max_iters: int = 100_000

    def __post_init__(self) -> None:
        _validate(self, "measure")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None, where: str) -> MeasureConfig:
        """Build from a suite's ``measure:`` mapping; errors name ``where`` and the key."""
        if d is None:
            return cls()
        if not isinstance(d, Mapping):
            raise UsageError(
                f"must be a mapping, got {type(d).__name__}",
                where=where,
                hint="write e.g. measure: {warmup_s: 0.5, min_iters: 20}.",
            )
        known = [f.name for f in fields(cls)]
        for key in d:
            if key not in known:
                close = difflib.get_close_matches(str(key), known, n=1)
                hint = (
                    f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(known)}."
                )
                raise UsageError(f"unknown key {key!r}", where=f"{where}.{key}", hint=hint)
        merged = {f.name: d.get(f.name, f.default) for f in fields(cls)}
        _validate_values(merged, where)
        return cls(**merged)


_FLOAT_KEYS = ("warmup_s", "min_time_s", "max_time_s")
_INT_KEYS = ("min_iters", "max_warmup_iters", "max_iters")


def _validate(cfg: MeasureConfig, where: str) -> None:
    _validate_values({f.name: getattr(cfg, f.name) for f in fields(cfg)}, where)


def _validate_values(v: dict[str, Any], where: str) -> None:
    for key in _FLOAT_KEYS:
        x = v[key]
        if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
            raise UsageError(
                f"must be a number of seconds, got {x!r}",
                where=f"{where}.{key}",
                hint="write a plain number, e.g. 1.0.",
            )
    for key in _INT_KEYS:
        x = v[key]
        if isinstance(x, bool) or not isinstance(x, int):
            raise UsageError(
                f"must be an integer, got {x!r}",
                where=f"{where}.{key}",
                hint="write a whole number, e.g. 20.",
            )
    for key, lo, strict in (
        ("warmup_s", 0, False),
        ("min_time_s", 0, False),
        ("max_time_s", 0, True),
        ("max_warmup_iters", 0, False),
        ("min_iters", 1, False),
        ("max_iters", 1, False),
    ):
        x = v[key]
        if x < lo or (strict and x == lo):
            rel = ">" if strict else ">="
            raise UsageError(f"must be {rel} {lo}, got {x!r}", where=f"{where}.{key}")
    if v["min_time_s"] > v["max_time_s"]:
        raise UsageError(
            f"min_time_s ({v['min_time_s']}) exceeds max_time_s ({v['max_time_s']})",
            where=f"{where}.min_time_s",
            hint="lower min_time_s or raise max_time_s.",
        )
    if v["min_iters"] > v["max_iters"]:
        raise UsageError(
            f"min_iters ({v['min_iters']}) exceeds max_iters ({v['max_iters']})",
            where=f"{where}.min_iters",
            hint="lower min_iters or raise max_iters.",
        )


@dataclass
class Timings:
    """Raw per-iteration samples (seconds) and how the loop ended."""

    samples_s: list[float]
    warmup_iters: int
    truncated: bool  # stopped at max_time_s before min_iters samples
    contention: float | None  # other processes' share of spare CPU during the loop
    stopped_by: str = "target"  # "target" | "max_time_s" | "max_iters"
    config: MeasureConfig = field(default_factory=MeasureConfig)

    def stats(self) -> dict[str, float | int | None]:
        """min/p50/p90/p99/mean/stdev in ms, cv and n (see guard.bench.stats)."""
        return summarize(self.samples_s)

    @property
    def warnings(self) -> list[str]:
        """One line per reason these numbers are weaker than asked for."""
        out: list[str] = []
        if self.truncated:
            out.append(
                f"stopped at max_time_s={self.config.max_time_s:g}s after "
                f"{len(self.samples_s)} iterations (< min_iters={self.config.min_iters}): "
                "percentiles rest on few samples; raise max_time_s or lower min_iters"
            )
        cw = contention_warning(self.contention)
        if cw:
            out.append(cw)
        return out

    def to_dict(self) -> dict[str, Any]:
        """The JSON form kept in results files: raw samples plus derived stats."""
        return {
            "samples_s": list(self.samples_s),
            "warmup_iters": self.warmup_iters,
            "truncated": self.truncated,
            "stopped_by": self.stopped_by,
            "contention": self.contention,
            "stats": self.stats(),
            "warnings": self.warnings,
        }


def measure(
    fn: Callable[[], object],
    cfg: MeasureConfig,
    clock: Clock = time.perf_counter,
    *,
    cpu_times: Callable[[], CpuTimes | None] = read_cpu_times,
) -> Timings:
    """Warm up ``fn`` (discarded), then time it per call until the targets in ``cfg`` hold.

    Each sample is ``clock()`` after the call minus ``clock()`` before it, so the loop's
    own bookkeeping is outside the samples. The elapsed-time targets count only timed
    calls' wall time from the start of the timed loop (bookkeeping included), which is
    what bounds how long a benchmark takes.
    """
    warmup_iters = 0
    start = clock()
    while warmup_iters < cfg.max_warmup_iters and clock() - start < cfg.warmup_s:
        fn()
        warmup_iters += 1

    samples: list[float] = []
    before = cpu_times()
    loop_start = clock()
    stopped_by = "target"
    while True:
        t0 = clock()
        fn()
        t1 = clock()
        samples.append(t1 - t0)
        elapsed = t1 - loop_start
        n = len(samples)
        if n >= cfg.min_iters and elapsed >= cfg.min_time_s:
            break
        if elapsed >= cfg.max_time_s:
            stopped_by = "max_time_s"
            break
        if n >= cfg.max_iters:
            stopped_by = "max_iters"
            break
    after = cpu_times()
    return Timings(
        samples_s=samples,
        warmup_iters=warmup_iters,
        truncated=stopped_by == "max_time_s" and len(samples) < cfg.min_iters,
        contention=contention_between(before, after),
        stopped_by=stopped_by,
        config=cfg,
    )
