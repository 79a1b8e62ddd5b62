"""Checks: value, bound, status and a one-line message each; verdicts from them."""

from __future__ import annotations

from guard.checks import evaluate as ck
from guard.results.manifest import TuningCache
from guard.results.result import Contention, Latency, Numerics, Partitions
from guard.suite.check_blocks import (
    AccuracyBound,
    ArenaBound,
    CheckBlocks,
    LatencyBounds,
    PartitionsBound,
    Tolerance,
    TuningBound,
)

STATS = {
    "min": 1.0,
    "p50": 2.0,
    "p90": 3.0,
    "p99": 4.0,
    "mean": 2.1,
    "stdev": 0.5,
    "cv": 0.2,
    "n": 30,
}


def test_latency_bounds_per_arch():
    cfg = LatencyBounds(p50_ms={"x86_64": 2.5, "aarch64": 1.0}, p90_ms=2.0)
    c50, c90 = ck.latency_checks(cfg, Latency.of(STATS), "x86_64", truncated=False)
    assert (c50.name, c50.status, c50.value, c50.bound) == ("latency.p50", "pass", 2.0, 2.5)
    assert c90.status == "fail" and "3 ms > bound 2 ms" in c90.message
    (a50, _) = ck.latency_checks(cfg, Latency.of(STATS), "aarch64", truncated=False)
    assert a50.status == "fail" and "aarch64" in a50.message
    (only,) = ck.latency_checks(
        LatencyBounds(p50_ms={"aarch64": 1.0}), Latency.of(STATS), "x86_64", False
    )
    assert only.status == "skip" and "no p50_ms bound for arch x86_64" in only.message


def test_truncated_measurement_is_inconclusive():
    (c,) = ck.latency_checks(LatencyBounds(p50_ms=1.0), Latency.of(STATS), "x86_64", truncated=True)
    assert c.status == "inconclusive" and ck.verdict([c]) == "inconclusive"


def test_partitions_arena_tuning():
    p = ck.partitions_check(
        PartitionsBound(max=1), Partitions.of({"count": 3, "fallback_nodes": 2})
    )
    assert p.status == "fail" and "3 partition(s) > max 1" in p.message
    a = ck.arena_check(ArenaBound(max_bytes=1000), 1500, 1200)
    assert a.status == "fail" and "lower bound 1,200 B" in a.message
    assert ck.arena_check(ArenaBound(max_bytes=1000), None, None).status == "skip"
    t = ck.tuning_check(
        TuningBound(min_hit_rate=1.0), TuningCache.of({"hits": 3, "misses": 1}), "tvm"
    )
    assert t.status == "fail" and t.value == 0.75 and "1 op(s) fell back" in t.message
    ok = ck.tuning_check(
        TuningBound(min_hit_rate=0.5), TuningCache.of({"hits": 3, "misses": 1}), "tvm"
    )
    assert ok.status == "pass"
    none = ck.tuning_check(
        TuningBound(min_hit_rate=1.0), TuningCache.of({"hits": None, "misses": None}), "tvm"
    )
    assert none.status == "fail" and "options.tvm.tuning_cache" in none.message
    ort = ck.tuning_check(
        TuningBound(min_hit_rate=1.0), TuningCache.of({"hits": None, "misses": None}), "onnxruntime"
    )
    assert ort.status == "skip"


def test_tolerance_and_accuracy():
    good = {
        "allclose": True,
        "max_abs_err": 1e-7,
        "max_rel_err": 1e-6,
        "bit_exact": False,
        "golden_status": "compared",
    }
    t = ck.tolerance_check(Tolerance(rtol=1e-4, atol=1e-5), Numerics.of(good))
    assert t.status == "pass" and "output hash differs" in t.message
    created = ck.tolerance_check(None, Numerics.of({**good, "golden_status": "created"}))
    assert created.status == "created" and ck.verdict([created]) == "pass"
    bad = ck.tolerance_check(None, Numerics.of({**good, "allclose": False, "max_abs_err": 0.5}))
    assert bad.status == "fail" and "outside" in bad.message
    acc = ck.accuracy_check(AccuracyBound("zoo:digits-test", min_top1=0.95), 0.9, 359)
    assert acc.status == "fail" and "0.9000 on zoo:digits-test (n=359) < 0.9500" in acc.message
    err = ck.accuracy_check(AccuracyBound("zoo:x"), None, None, "no such dataset")
    assert err.status == "error" and ck.verdict([err]) == "error"


def test_verdict_precedence():
    mk = lambda s: ck.Check("x", s, None, None, "")  # noqa: E731
    assert ck.verdict([mk("pass"), mk("skip")]) == "pass"
    assert ck.verdict([mk("inconclusive"), mk("fail")]) == "fail"
    assert ck.verdict([mk("fail"), mk("error")]) == "error"
    assert ck.verdict([mk("pass")], error="boom") == "error"


# Issue 28 items 4 and 6: a bound missed under contention is inconclusive, unless strict.
CONTENDED = {"flagged": True, "rounds_flagged": 4, "rounds": 10, "load_max": 0.63,
             "cpu_share_min": 0.97, "load_threshold": 0.2, "cpu_share_threshold": 0.9}  # fmt: skip


def test_a_bound_missed_under_contention_is_inconclusive():
    (c,) = ck.latency_checks(
        LatencyBounds(p50_ms=1.0), Latency.of(STATS), "x86_64", False, Contention.of(CONTENDED)
    )
    assert c.status == "inconclusive" and ck.verdict([c]) == "inconclusive"
    assert "inconclusive (contention: 4 of 10 rounds contended: others used up to 63%" in (
        c.message
    )
    assert "strict: true" in c.message


def test_strict_latency_fails_under_contention_and_a_met_bound_passes():
    (c,) = ck.latency_checks(
        LatencyBounds(p50_ms=1.0, strict=True),
        Latency.of(STATS),
        "x86_64",
        False,
        Contention.of(CONTENDED),
    )
    assert c.status == "fail"
    (ok,) = ck.latency_checks(
        LatencyBounds(p50_ms=2.5), Latency.of(STATS), "x86_64", False, Contention.of(CONTENDED)
    )
    assert ok.status == "pass"
    quiet = {**CONTENDED, "flagged": False, "rounds_flagged": 0}
    (miss,) = ck.latency_checks(
        LatencyBounds(p50_ms=1.0), Latency.of(STATS), "x86_64", False, Contention.of(quiet)
    )
    assert miss.status == "fail"


def test_evaluate_reads_contention_from_the_facts():
    facts = ck.Facts(backend="onnxruntime", arch="x86_64",
                     numerics=Numerics.from_json({"golden_status": "created"}),
                     latency_ms=Latency.of(STATS), contention=Contention.of(CONTENDED))  # fmt: skip
    latency = [
        c
        for c in ck.evaluate(CheckBlocks(latency=LatencyBounds(p50_ms=1.0)), facts)
        if c.name.startswith("latency")
    ]
    assert [c.status for c in latency] == ["inconclusive"]


def test_contention_block_counts_flagged_rounds():
    from types import SimpleNamespace as R

    from guard.measure.preflight import contention_block

    rounds = [R(contention=0.05, cpu_share=1.0), R(contention=0.5, cpu_share=1.0),
              R(contention=None, cpu_share=0.6), R(contention=None, cpu_share=None)]  # fmt: skip
    b = contention_block(rounds)
    assert (b.flagged, b.rounds_flagged, b.rounds) == (True, 2, 4)
    assert (b.load_max, b.cpu_share_min) == (0.5, 0.6)
    assert contention_block(rounds[:1]).flagged is False
