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
see guard.measure.preflight) so a contended run can be told from a clean one, and so is this
process's own share of a core (``cpu_share``: below 1 it was preempted, so the samples
hold time it spent waiting).

Rounds: a result is measured in ``rounds`` rounds, each on a freshly loaded session
(guard.run.case measures each in a round worker and gathers them in ``RoundTimings``).
The loop's time and iteration targets are totals over the rounds: each round warms up
for ``warmup_s / rounds`` and times ``min_time_s / rounds`` (at most ``max_time_s / rounds``) and at least ``ceil(min_iters / rounds)`` calls. Two processes
differ by more than two halves of one loop (memory placement, allocator state, a
co-tenant arriving); the spread between rounds is what a comparison of two results files
can honestly lean on, not the thousands of iterations inside one round.

That only holds if the rounds differ the way two processes do. Measured on the 2-core
runner (squeezenet on onnxruntime, 1 thread, 8 medians of 1 s each): eight separate
processes spread 4.2% (SD of log medians), eight fresh sessions in one process 0.9-1.2%,
eight sessions each loaded in a forked child 1.3-4.1%: what a fork inherits (code and
library pages at the same addresses, the interpreter's heap) is common to every round.
guard.run.runner therefore measures each round in a round worker, a fresh interpreter of its
own (guard.measure.round_runner), and interleaves the rounds of all results, so that a result's
rounds also span the run. With ten `guard run` processes of three models (flow_power),
the spread of the processes' means over what their rounds predict (F = between / within
variance of the mean) fell from 2-20 with forked rounds to 1.4-3.8. What is left is a
disturbance that lasts longer than a run; benchmarks/README.md (flow_power) measures how
often that decides a two-process comparison.
"""

from __future__ import annotations

import difflib
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import cast

from guard.core.errors import UsageError
from guard.core.json_types import Json
from guard.measure.calls import warm_up
from guard.measure.host_speed import READ_EVERY_S
from guard.measure.json_shapes import HostReadings, RoundJson, TimingsJson
from guard.measure.preflight import (
    CpuTimes,
    contention_between,
    contention_warning,
    cpu_share_between,
    cpu_share_warning,
    preemptions_between,
    read_cpu_times,
    round_contended,
)
from guard.measure.summary import summarize
from guard.results.load import PROBES
from guard.suite.blocks import measure_range_error

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
    rounds: int = 10

    def __post_init__(self) -> None:
        _validate(self, "measure")

    def per_round(self) -> MeasureConfig:
        """The loop targets of one of ``rounds`` rounds (see the module docstring)."""
        r = self.rounds
        return MeasureConfig(
            warmup_s=self.warmup_s / r,
            min_iters=max(1, math.ceil(self.min_iters / r)),
            min_time_s=self.min_time_s / r,
            max_time_s=self.max_time_s / r,
            max_warmup_iters=self.max_warmup_iters,
            max_iters=max(1, self.max_iters // r),
            rounds=1,
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Json] | None, where: str) -> MeasureConfig:
        """Build from a suite's ``measure:`` mapping as the user wrote it (each value checked
        here); errors name ``where`` and the key."""
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
            if key not in known and key != "counted":  # counted runs: guard.run.counted
                close = difflib.get_close_matches(str(key), known, n=1)
                hint = (
                    f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(known)}."
                )
                raise UsageError(f"unknown key {key!r}", where=f"{where}.{key}", hint=hint)
        merged = {f.name: d.get(f.name, f.default) for f in fields(cls)}
        _validate_values(merged, where)
        return cls(**merged)


_FLOAT_KEYS = ("warmup_s", "min_time_s", "max_time_s")
_INT_KEYS = ("min_iters", "max_warmup_iters", "max_iters", "rounds")


def _validate(cfg: MeasureConfig, where: str) -> None:
    _validate_values({f.name: getattr(cfg, f.name) for f in fields(cfg)}, where)


def _validate_values(v: Mapping[str, Json], where: str) -> None:
    """The values of MeasureConfig's fields by name, as the user gave them."""
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
    for key in (*_FLOAT_KEYS, *_INT_KEYS):
        why = measure_range_error(key, v[key])
        if why:
            raise UsageError(why, where=f"{where}.{key}")
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
    cpu_share: float | None = None  # own CPU time / wall time over the loop (1.0: never preempted)
    preemptions: int | None = None  # involuntary context switches during the loop
    cpu_per_call_s: float | None = None  # own CPU time over the loop / calls (no waiting)
    # the host-speed probes' geometric means over the round (guard.measure.host_speed.read)
    host: tuple[float, ...] | None = None
    host_readings: list[tuple[float, ...]] = field(default_factory=list)  # every reading

    @property
    def preempted_fraction(self) -> float | None:
        """Share of the timed calls a preemption can have touched: the call it interrupted
        and the cache-cold call after it (2 per switch), at most 1."""
        if self.preemptions is None or not self.samples_s:
            return None
        return min(1.0, 2.0 * self.preemptions / len(self.samples_s))

    def stats(self) -> dict[str, float | int | None]:
        """min/p50/p90/p99/mean/stdev in ms, cv and n (see guard.measure.summary)."""
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
        sw = cpu_share_warning(self.cpu_share)
        if sw:
            out.append(sw)
        return out

    def to_dict(self) -> TimingsJson:
        """The JSON form kept in results files: raw samples plus derived stats."""
        return {
            "samples_s": list(self.samples_s),
            "warmup_iters": self.warmup_iters,
            "truncated": self.truncated,
            "stopped_by": self.stopped_by,
            "contention": self.contention,
            "cpu_share": self.cpu_share,
            "stats": self.stats(),
            "warnings": self.warnings,
        }


def measure(
    fn: Callable[[], object],
    cfg: MeasureConfig,
    clock: Clock = time.perf_counter,
    *,
    cpu_times: Callable[[], CpuTimes | None] = read_cpu_times,
    host: Callable[[], float | tuple[float, ...]] | None = None,
) -> Timings:
    """Warm up ``fn`` (discarded), then time it per call until the targets in ``cfg`` hold.

    Each sample is ``clock()`` after the call minus ``clock()`` before it, so the loop's
    own bookkeeping is outside the samples. The elapsed-time targets count only timed
    calls' wall time from the start of the timed loop (bookkeeping included), which is
    what bounds how long a benchmark takes. ``host`` (guard.measure.host_speed.read: one
    reading per probe) is read before the warm-up (which then re-warms the caches it
    touched), every ``READ_EVERY_S`` of the timed loop (each reading followed by one
    untimed call that re-warms the caches, the pair kept out of the samples and of the
    elapsed-time targets) and after the loop; ``Timings.host`` holds each probe's geometric
    mean. The machine's speed moves within seconds here (consecutive readings correlate at
    0.7-0.8), so readings spread through the loop see the speed the samples saw.
    """
    readings: list[tuple[float, ...]] = []
    if host is not None:
        readings.append(_reading(host()))
    warmup_iters = warm_up(fn, cfg.warmup_s, clock, max_calls=cfg.max_warmup_iters)

    samples: list[float] = []
    before = cpu_times()
    loop_start = clock()
    stopped_by = "target"
    aside = 0.0  # probe readings and their re-warming calls: not the loop's own time
    probe_cpu, rewarms = 0.0, 0
    next_probe = loop_start + READ_EVERY_S
    while True:
        t0 = clock()
        fn()
        t1 = clock()
        samples.append(t1 - t0)
        elapsed = t1 - loop_start - aside
        n = len(samples)
        if n >= cfg.min_iters and elapsed >= cfg.min_time_s:
            break
        if elapsed >= cfg.max_time_s:
            stopped_by = "max_time_s"
            break
        if n >= cfg.max_iters:
            stopped_by = "max_iters"
            break
        if host is not None and t1 >= next_probe:
            c0 = time.process_time()
            readings.append(_reading(host()))
            probe_cpu += time.process_time() - c0
            fn()
            rewarms += 1
            t2 = clock()
            aside += t2 - t1
            next_probe = t2 + READ_EVERY_S
    after = cpu_times()
    means = None
    if readings and host is not None:
        readings.append(_reading(host()))
        means = tuple(
            math.exp(sum(math.log(r[k]) for r in readings) / len(readings))
            for k in range(len(readings[0]))
        )
    return Timings(
        samples_s=samples,
        warmup_iters=warmup_iters,
        truncated=stopped_by == "max_time_s" and len(samples) < cfg.min_iters,
        contention=contention_between(before, after),
        stopped_by=stopped_by,
        config=cfg,
        cpu_share=cpu_share_between(before, after),
        preemptions=preemptions_between(before, after),
        cpu_per_call_s=cpu_per_call(before, after, len(samples) + rewarms, probe_cpu),
        host=means,
        host_readings=readings,
    )


@dataclass
class RoundTimings:
    """A result measured in rounds: one ``Timings`` per freshly loaded session."""

    rounds: list[Timings]
    config: MeasureConfig

    @property
    def samples_s(self) -> list[float]:
        """Every round's samples, pooled (the per-iteration view the stats summarise)."""
        return [s for t in self.rounds for s in t.samples_s]

    @property
    def truncated(self) -> bool:
        return any(t.truncated for t in self.rounds)

    @property
    def warmup_iters(self) -> int:
        return sum(t.warmup_iters for t in self.rounds)

    @property
    def stopped_by(self) -> str:
        ends = {t.stopped_by for t in self.rounds}
        return next((e for e in ("max_time_s", "max_iters") if e in ends), "target")

    @property
    def contention(self) -> float | None:
        """The highest contention any round saw (a comparison is as good as its worst round)."""
        seen = [t.contention for t in self.rounds if t.contention is not None]
        return max(seen) if seen else None

    @property
    def cpu_share(self) -> float | None:
        """The lowest share of a core any round got."""
        seen = [t.cpu_share for t in self.rounds if t.cpu_share is not None]
        return min(seen) if seen else None

    @property
    def preempted_fraction(self) -> float | None:
        """The largest share of a round's calls that preemption can have touched."""
        seen = [t.preempted_fraction for t in self.rounds if t.preempted_fraction is not None]
        return max(seen) if seen else None

    def stats(self) -> dict[str, float | int | None]:
        return summarize(self.samples_s)

    def noise_pct(self) -> float | None:
        """Between-round spread: 100 x the standard deviation of the rounds' log medians."""
        return round_noise_pct([summarize(t.samples_s)["p50"] for t in self.rounds])

    @property
    def warnings(self) -> list[str]:
        """One line per kind of weakness, naming how many rounds had it and the worst."""
        n, out = len(self.rounds), []
        truncated = [t for t in self.rounds if t.truncated]
        if truncated:
            out.append(f"{len(truncated)} of {n} rounds: {truncated[0].warnings[0]}")
        contended = [t for t in self.rounds if contention_warning(t.contention)]
        if contended:
            out.append(f"{len(contended)} of {n} rounds: {contention_warning(self.contention)}")
        preempted = [t for t in self.rounds if cpu_share_warning(t.cpu_share)]
        if preempted:
            out.append(f"{len(preempted)} of {n} rounds: {cpu_share_warning(self.cpu_share)}")
        return out

    def rounds_dict(self) -> list[RoundJson]:
        """The results file's per-round records (milliseconds)."""
        out: list[RoundJson] = []
        for t in self.rounds:
            st = summarize(t.samples_s)
            out.append(
                {
                    "samples_ms": [s * 1e3 for s in t.samples_s],
                    "p50": st["p50"],
                    "n": st["n"],
                    "warmup_iters": t.warmup_iters,
                    "stopped_by": t.stopped_by,
                    "contention": t.contention,
                    "cpu_share": t.cpu_share,
                    "contended": round_contended(t.contention, t.cpu_share),
                    "preemptions": t.preemptions,
                    "cpu_ms_per_call": (
                        None if t.cpu_per_call_s is None else t.cpu_per_call_s * 1e3
                    ),
                    **host_fields(t.host),
                    "host_readings": [list(r) for r in t.host_readings],
                }
            )
        return out


def _reading(r: float | tuple[float, ...]) -> tuple[float, ...]:
    return tuple(r) if isinstance(r, tuple) else (r,)


def host_fields(host: tuple[float, ...] | None) -> HostReadings:
    """A round's probe readings as the results file keeps them (``PROBES``, HostReadings'
    keys, in the order guard.measure.host_speed takes them)."""
    vals = tuple(host or ())
    return cast(
        HostReadings, {n: (vals[i] if i < len(vals) else None) for i, n in enumerate(PROBES)}
    )


def cpu_per_call(
    before: CpuTimes | None, after: CpuTimes | None, calls: int, aside_s: float = 0.0
) -> float | None:
    """This process's CPU time per timed call (seconds); None if unknown or not measurable.

    It is the work of a call without the time spent waiting for a core: what a 1-thread
    round can still be judged on when another process preempted it (guard.stats.regress).
    ``aside_s`` is CPU time spent between ``before`` and ``after`` on other work (the
    host-speed probe's readings).
    """
    if before is None or after is None or calls < 1:
        return None
    own = after.own_s - before.own_s - aside_s
    return own / calls if own > 0 else None


def round_noise_pct(round_p50s: list[float | int | None]) -> float | None:
    """100 x sample standard deviation of log round medians; None with fewer than 2 rounds."""
    logs = [math.log(x) for x in round_p50s if isinstance(x, int | float) and x > 0]
    if len(logs) < 2:
        return None
    mean = sum(logs) / len(logs)
    return 100.0 * math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
