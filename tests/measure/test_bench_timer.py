"""The timing loop, driven exactly by a fake clock: no real code is timed."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

import pytest

from guard.core.errors import UsageError
from guard.measure import CpuTimes, MeasureConfig, Timings, measure, summarize
from guard.measure.host_speed import READ_EVERY_S
from guard.measure.timer import RoundTimings, round_noise_pct


class FakeClock:
    """A clock that only moves when the fake workload says it took time."""

    def __init__(self) -> None:
        self.t = 0.0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.t


class Workload:
    """Calls advance the clock by the next cost (the last one repeats)."""

    def __init__(self, clock: FakeClock, costs: Iterable[float]) -> None:
        self.clock = clock
        self.costs: Iterator[float] = iter(costs)
        self.last = 0.0
        self.calls = 0

    def __call__(self) -> None:
        self.last = next(self.costs, self.last)
        self.clock.t += self.last
        self.calls += 1


def run(costs: Iterable[float], **cfg: float) -> tuple[Timings, Workload]:
    clock = FakeClock()
    work = Workload(clock, costs)
    t = measure(work, MeasureConfig(**cfg), clock, cpu_times=lambda: None)  # type: ignore[arg-type]
    return t, work


# Costs are powers of two so that elapsed time sums exactly in binary floating point.


def test_warmup_stops_when_warmup_time_has_elapsed() -> None:
    t, work = run([0.125], warmup_s=0.5, min_iters=3, min_time_s=0.0)
    assert t.warmup_iters == 4  # 0, .125, .25, .375 are < .5; .5 is not
    assert len(t.samples_s) == 3
    assert work.calls == 7


def test_warmup_stops_at_its_count_cap() -> None:
    t, _ = run([2**-10], warmup_s=10.0, max_warmup_iters=7, min_iters=1, min_time_s=0.0)
    assert t.warmup_iters == 7


def test_zero_warmup_time_means_no_warmup() -> None:
    t, work = run([0.25], warmup_s=0.0, min_iters=2, min_time_s=0.0)
    assert t.warmup_iters == 0
    assert work.calls == 2


def test_warmup_samples_are_discarded() -> None:
    # Two slow first calls (cold start) are the warm-up; the samples start after them.
    t, _ = run([4.0, 2.0, 0.25, 0.5, 0.125], warmup_s=5.0, min_iters=3, min_time_s=0.0)
    assert t.warmup_iters == 2
    assert t.samples_s == [0.25, 0.5, 0.125]


def test_min_iters_holds_when_min_time_is_already_met() -> None:
    t, _ = run([0.25], warmup_s=0.0, min_iters=3, min_time_s=0.5)
    assert len(t.samples_s) == 3  # min_time met after 2, min_iters needs a third
    assert t.stopped_by == "target" and not t.truncated


def test_min_time_holds_when_min_iters_is_already_met() -> None:
    t, _ = run([0.125], warmup_s=0.0, min_iters=2, min_time_s=1.0)
    assert len(t.samples_s) == 8
    assert t.stopped_by == "target" and not t.truncated


def test_max_time_truncates_before_min_iters_and_says_so() -> None:
    t, _ = run([1.0], warmup_s=0.0, min_iters=20, min_time_s=1.0, max_time_s=5.0)
    assert len(t.samples_s) == 5
    assert t.truncated and t.stopped_by == "max_time_s"
    assert len(t.warnings) == 1
    assert "max_time_s=5s after 5 iterations" in t.warnings[0]
    assert "min_iters=20" in t.warnings[0]


def test_one_call_longer_than_max_time_gives_one_truncated_sample() -> None:
    t, _ = run([30.0], warmup_s=0.0, min_iters=20, min_time_s=1.0, max_time_s=20.0)
    assert t.samples_s == [30.0]
    assert t.truncated


def test_max_iters_bounds_very_fast_functions_without_truncating() -> None:
    t, _ = run([2**-12], warmup_s=0.0, min_iters=5, min_time_s=1.0, max_iters=100)
    assert len(t.samples_s) == 100
    assert t.stopped_by == "max_iters" and not t.truncated
    assert t.warnings == []


def test_stats_come_from_the_raw_samples() -> None:
    t, _ = run([0.001, 0.002, 0.003, 0.004], warmup_s=0.0, min_iters=4, min_time_s=0.0)
    assert t.stats() == summarize([0.001, 0.002, 0.003, 0.004])
    d = t.to_dict()
    assert d["samples_s"] == [0.001, 0.002, 0.003, 0.004]
    assert d["stats"]["n"] == 4 and d["truncated"] is False


def test_contention_is_sampled_around_the_timed_loop() -> None:
    readings = iter(
        [
            CpuTimes(busy_s=10.0, total_s=100.0, own_s=1.0),
            # over the loop: 2 s of CPU in all, 1 s ours, 1.5 s busy -> others 0.5 of 1.0
            CpuTimes(busy_s=11.5, total_s=102.0, own_s=2.0),
        ]
    )
    clock = FakeClock()
    work = Workload(clock, [0.25])
    t = measure(
        work,
        MeasureConfig(warmup_s=0.5, min_iters=2, min_time_s=0.0),
        clock,
        cpu_times=lambda: next(readings),
    )
    assert t.contention == pytest.approx(0.5)
    assert any("other processes used 50%" in w for w in t.warnings)


def test_quiet_machine_has_low_contention_and_no_warning() -> None:
    readings = iter([CpuTimes(10.0, 100.0, 1.0), CpuTimes(11.0, 102.0, 2.0)])
    clock = FakeClock()
    t = measure(
        Workload(clock, [0.25]),
        MeasureConfig(warmup_s=0.0, min_iters=1, min_time_s=0.0),
        clock,
        cpu_times=lambda: next(readings),
    )
    assert t.contention == 0.0
    assert t.warnings == []


def test_unreadable_cpu_times_give_unknown_contention() -> None:
    t, _ = run([0.25], warmup_s=0.0, min_iters=1, min_time_s=0.0)
    assert t.contention is None


# -- configuration ------------------------------------------------------------------------


def test_defaults() -> None:
    cfg = MeasureConfig.from_dict(None, "smoke.yaml: defaults.measure")
    assert (cfg.warmup_s, cfg.min_iters, cfg.min_time_s, cfg.max_time_s) == (0.5, 20, 1.0, 20.0)
    assert MeasureConfig.from_dict({"min_iters": 5, "max_time_s": 3}, "w").max_time_s == 3


def test_unknown_key_is_rejected_with_a_suggestion() -> None:
    with pytest.raises(UsageError) as e:
        MeasureConfig.from_dict({"min_iter": 5}, "smoke.yaml: defaults.measure")
    msg = str(e.value)
    assert "smoke.yaml: defaults.measure.min_iter" in msg
    assert "did you mean 'min_iters'" in msg
    assert "\n" not in msg


@pytest.mark.parametrize(
    ("d", "key", "text"),
    [
        ({"min_iters": True}, "min_iters", "integer"),
        ({"min_iters": 2.5}, "min_iters", "integer"),
        ({"warmup_s": "1s"}, "warmup_s", "number of seconds"),
        ({"warmup_s": float("nan")}, "warmup_s", "number of seconds"),
        ({"warmup_s": -1}, "warmup_s", ">= 0"),
        ({"max_time_s": 0}, "max_time_s", "> 0"),
        ({"min_iters": 0}, "min_iters", ">= 1"),
        ({"min_time_s": 30, "max_time_s": 20}, "min_time_s", "exceeds max_time_s"),
        ({"min_iters": 50, "max_iters": 10}, "min_iters", "exceeds max_iters"),
    ],
)
def test_bad_values_name_the_key(d: dict[str, object], key: str, text: str) -> None:
    with pytest.raises(UsageError) as e:
        MeasureConfig.from_dict(d, "s.yaml: models[0].measure")
    assert f"s.yaml: models[0].measure.{key}" in str(e.value)
    assert text in str(e.value)


def test_non_mapping_is_rejected() -> None:
    with pytest.raises(UsageError, match="s.yaml: measure: must be a mapping"):
        MeasureConfig.from_dict([1, 2], "s.yaml: measure")  # type: ignore[arg-type]


def test_direct_construction_is_validated_too() -> None:
    with pytest.raises(UsageError, match="measure.min_iters"):
        MeasureConfig(min_iters=0)


# -- rounds ------------------------------------------------------------------------------


def measure_rounds(load, cfg, clock=time.perf_counter, *, cpu_times):
    """Rounds as a run gathers them: round i times ``load(i)`` with the per-round targets."""
    per = cfg.per_round()
    return RoundTimings(
        [measure(load(i), per, clock, cpu_times=cpu_times) for i in range(cfg.rounds)], cfg
    )


def test_rounds_split_the_loop_targets_and_load_a_session_each() -> None:
    clock = FakeClock()
    loads: list[int] = []
    work = Workload(clock, [0.125])

    def load(i: int) -> Workload:
        loads.append(i)
        return work

    cfg = MeasureConfig(warmup_s=0.5, min_iters=10, min_time_s=2.0, max_time_s=8.0, rounds=4)
    rt = measure_rounds(load, cfg, clock, cpu_times=lambda: None)
    assert loads == [0, 1, 2, 3]  # one fresh callable per round
    per = cfg.per_round()
    assert (per.warmup_s, per.min_iters, per.min_time_s, per.max_time_s) == (0.125, 3, 0.5, 2.0)
    # each round: 1 warm-up call (0.125 s), then 4 timed calls reach 0.5 s (and >= 3 iters)
    assert [len(t.samples_s) for t in rt.rounds] == [4, 4, 4, 4]
    assert rt.warmup_iters == 4 and rt.samples_s == [0.125] * 16
    assert rt.noise_pct() == 0.0 and not rt.truncated
    d = rt.rounds_dict()
    assert [r["p50"] for r in d] == [125.0] * 4 and d[0]["samples_ms"] == [125.0] * 4


def test_round_noise_is_the_spread_of_round_medians() -> None:
    import math

    assert round_noise_pct([1.0]) is None
    assert round_noise_pct([1.0, math.e**0.02]) == pytest.approx(100 * 0.02 / math.sqrt(2))
    clock = FakeClock()
    costs = {0: 0.25, 1: 0.5}  # the second session is twice as slow: that is round noise
    rt = measure_rounds(
        lambda i: Workload(clock, [costs[i]]),
        MeasureConfig(warmup_s=0.0, min_iters=2, min_time_s=0.0, rounds=2),
        clock,
        cpu_times=lambda: None,
    )
    assert rt.noise_pct() == pytest.approx(100 * math.log(2) / math.sqrt(2))


def test_rounds_report_worst_contention_and_cpu_share() -> None:
    # per round: before, after. Round 1 got its core; round 2 only half of it.
    readings = iter(
        [
            CpuTimes(10.0, 100.0, 1.0, wall_s=1.0),
            CpuTimes(11.0, 102.0, 2.0, wall_s=2.0),
            CpuTimes(20.0, 200.0, 3.0, wall_s=10.0),
            CpuTimes(22.0, 202.0, 3.5, wall_s=11.0),
        ]
    )
    clock = FakeClock()
    rt = measure_rounds(
        lambda i: Workload(clock, [0.25]),
        MeasureConfig(warmup_s=0.0, min_iters=2, min_time_s=0.0, rounds=2),
        clock,
        cpu_times=lambda: next(readings),
    )
    assert [t.cpu_share for t in rt.rounds] == [pytest.approx(1.0), pytest.approx(0.5)]
    assert rt.cpu_share == pytest.approx(0.5)
    assert rt.contention == pytest.approx(1.0)  # round 2: 1.5 s of others' in 1.5 s spare
    assert rt.warnings == [
        "1 of 2 rounds: other processes used 100% of the spare CPU during the timed loop "
        "(> 20%): latencies may be off by 2x; re-run on a quiet machine",
        "1 of 2 rounds: this process got 50% of a core during the timed loop (< 90%): it was "
        "preempted and its samples include waiting; re-run on a quiet machine",
    ]


def test_rounds_key_is_validated() -> None:
    with pytest.raises(UsageError, match="rounds"):
        MeasureConfig.from_dict({"rounds": 0}, where="suite.yaml: defaults.measure")
    with pytest.raises(UsageError, match="rounds"):
        MeasureConfig.from_dict({"rounds": 2.5}, where="suite.yaml: defaults.measure")
    assert MeasureConfig.from_dict({"rounds": 3}, where="m").rounds == 3
    assert MeasureConfig().rounds == 10


def test_preemptions_are_counted_per_round_as_a_share_of_calls() -> None:
    readings = iter(
        [
            CpuTimes(10.0, 100.0, 1.0, wall_s=1.0, switches=5),
            CpuTimes(11.0, 102.0, 2.0, wall_s=2.0, switches=6),  # 1 switch over 4 calls
            CpuTimes(20.0, 200.0, 3.0, wall_s=10.0, switches=6),
            CpuTimes(22.0, 202.0, 3.5, wall_s=11.0, switches=16),  # 10 switches: every call
        ]
    )
    clock = FakeClock()
    rt = measure_rounds(
        lambda i: Workload(clock, [0.25]),
        MeasureConfig(warmup_s=0.0, min_iters=8, min_time_s=0.0, rounds=2),
        clock,
        cpu_times=lambda: next(readings),
    )
    assert [t.preemptions for t in rt.rounds] == [1, 10]
    assert [t.preempted_fraction for t in rt.rounds] == [0.5, 1.0]
    assert rt.preempted_fraction == 1.0
    assert [r["preemptions"] for r in rt.rounds_dict()] == [1, 10]


def test_cpu_time_per_call_is_taken_over_the_timed_loop() -> None:
    readings = iter([CpuTimes(10.0, 100.0, 1.0), CpuTimes(11.0, 102.0, 1.5)])
    clock = FakeClock()
    t = measure(
        Workload(clock, [0.25]),
        MeasureConfig(warmup_s=0.0, min_iters=4, min_time_s=0.0),
        clock,
        cpu_times=lambda: next(readings),
    )
    assert len(t.samples_s) == 4 and t.cpu_per_call_s == pytest.approx(0.5 / 4)
    cfg = MeasureConfig(rounds=2, min_time_s=0.0)
    rt = measure_rounds(lambda i: lambda: None, cfg, cpu_times=lambda: None)
    assert [rd["cpu_ms_per_call"] for rd in rt.rounds_dict()] == [None, None]


def test_host_probe_is_read_through_the_loop_and_kept_out_of_its_samples() -> None:
    """Readings before the warm-up, every READ_EVERY_S of loop and after it; each one in the
    loop takes time and is followed by an untimed re-warming call, neither in the samples
    nor in the elapsed-time target."""
    clock = FakeClock()
    work = Workload(clock, [0.0625])
    values = iter([2.0, 8.0, 2.0, 8.0, 2.0, 8.0, 2.0, 8.0, 2.0, 8.0, 2.0, 8.0])
    taken: list[float] = []

    def probe() -> float:
        clock.t += 0.03125  # a reading costs time on the same clock
        taken.append(next(values))
        return taken[-1]

    cfg = MeasureConfig(warmup_s=0.0, min_iters=1, min_time_s=1.0)
    t = measure(work, cfg, clock, cpu_times=lambda: None, host=probe)
    assert t.samples_s == [0.0625] * 16  # 1 s of timed calls, the probe's time left out
    rewarms = work.calls - 16
    assert READ_EVERY_S == 0.2  # 4 calls of loop between readings: after calls 4, 8 and 12
    assert rewarms == 3 and len(taken) == rewarms + 2
    geo = 1.0
    for v in taken:
        geo *= v ** (1.0 / len(taken))
    assert t.host == pytest.approx((geo,))
    assert measure(Workload(FakeClock(), [0.0625]), cfg, FakeClock()).host is None


def test_each_probe_is_averaged_on_its_own_and_kept_under_its_name() -> None:
    clock = FakeClock()
    values = iter([(2.0, 1.0), (8.0, 4.0)] * 8)
    cfg = MeasureConfig(warmup_s=0.0, min_iters=3, min_time_s=0.0)  # 0.19 s: no reading inside
    t = measure(
        Workload(clock, [0.0625]), cfg, clock, cpu_times=lambda: None, host=lambda: next(values)
    )
    assert t.host == pytest.approx((4.0, 2.0))  # (2 x 8) ** 0.5 and (1 x 4) ** 0.5
    (rd,) = RoundTimings([t], cfg).rounds_dict()
    assert rd["host_ms"] == pytest.approx(4.0) and rd["simd_ms"] == pytest.approx(2.0)
    (bare,) = RoundTimings([measure(lambda: None, cfg)], cfg).rounds_dict()
    assert bare["host_ms"] is None and bare["simd_ms"] is None
