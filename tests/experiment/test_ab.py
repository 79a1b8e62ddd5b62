"""Interleaved A/B with a fake clock: functions 'take time' by advancing it."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from guard.core.errors import UsageError
from guard.experiment import ab
from guard.measure.calls import choose_inner, warm_up
from guard.results.result import Result
from guard.stats.regress import RegressConfig
from guard.suite.check_blocks import CheckBlocks, LatencyBounds


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def costly(clock, ms, rng=None, log=None, name=None, sigma=0.03):
    def fn():
        if log is not None:
            log.append(name)
        jitter = np.exp(rng.normal(0, sigma)) if rng is not None else 1.0
        clock.t += ms * jitter / 1000.0

    return fn


def test_sampler_alternates_order_and_times_inner_calls():
    clock, log = Clock(), []
    sample = ab.interleaved_sampler(
        costly(clock, 1.0, log=log, name="b"),
        costly(clock, 2.0, log=log, name="h"),
        inner=3,
        clock=clock,
    )
    b, h = sample(2)
    assert log == ["b"] * 3 + ["h"] * 3 + ["h"] * 3 + ["b"] * 3
    assert b == pytest.approx([1.0, 1.0]) and h == pytest.approx([2.0, 2.0])
    with pytest.raises(UsageError):
        ab.interleaved_sampler(lambda: None, lambda: None, inner=0)


def test_choose_inner_reaches_min_sample_time():
    clock = Clock()
    assert choose_inner(costly(clock, 0.1), 1e-3, clock) == 16  # 16 x 0.1 ms >= 1 ms
    assert choose_inner(costly(clock, 5.0), 1e-3, clock) == 1


def test_warm_calls_at_least_once():
    clock = Clock()
    assert warm_up(costly(clock, 100.0), 0.0, clock, min_calls=1) == 1
    assert warm_up(costly(clock, 1.0), 0.01, clock, min_calls=1) == 10


@pytest.mark.parametrize(
    "head_ms,verdict", [(1.0, "pass"), (1.10, "regressed"), (0.85, "improved")]
)
def test_run_ab_verdicts(head_ms, verdict):
    clock, rng = Clock(), np.random.default_rng(0)
    out = ab.run_ab(
        costly(clock, 1.0, rng),
        costly(clock, head_ms, rng),
        RegressConfig(),
        budget_s=5.0,
        warmup_s=0.01,
        clock=clock,
    )
    c = out.result.comparison
    assert c.verdict == verdict, c.reason
    assert c.method == "wilcoxon-paired" and out.inner == (1 if head_ms >= 1.0 else 2)
    assert out.result.elapsed_s <= 5.0 + 1e-9


def test_contention_bursts_cancel_in_pairs():
    """A burst that slows both sides 2x for stretches must not look like a regression."""
    clock, rng = Clock(), np.random.default_rng(1)
    state = {"calls": 0}

    def bursty(ms):
        def fn():
            state["calls"] += 1
            burst = 2.0 if (state["calls"] // 40) % 3 == 0 else 1.0
            clock.t += ms * burst * np.exp(rng.normal(0, 0.02)) / 1000.0

        return fn

    out = ab.run_ab(
        bursty(1.0), bursty(1.0), RegressConfig(), budget_s=5, warmup_s=0.0, clock=clock
    )
    assert out.result.comparison.verdict == "pass"


def case(model, ms, clock, rng, runtime="1.32.0", threads=1):
    return SimpleNamespace(
        model=model,
        backend="onnxruntime",
        target="host",
        run_once=costly(clock, ms, rng),
        manifest={
            "runtime": {"version": runtime},
            "host": {"arch": "x86_64", "cpu": "c", "threads": threads},
        },
    )


def test_run_case_pairs_document_and_attribution(monkeypatch):
    clock, rng = Clock(), np.random.default_rng(2)
    real = ab.run_ab
    monkeypatch.setattr(ab, "run_ab", lambda b, h, cfg, **kw: real(b, h, cfg, clock=clock, **kw))
    pairs = ab.match_cases(
        [case("mlp", 1.0, clock, rng), case("cnn", 2.0, clock, rng), case("gone", 1.0, clock, rng)],
        [case("mlp", 1.0, clock, rng, "1.31.1"), case("cnn", 2.5, clock, rng, "1.31.1")],
    )
    doc = ab.run_case_pairs(pairs, RegressConfig(), budget_s=5, warmup_s=0.01)
    assert doc["schema_version"] == 1 and doc["mode"] == "interleaved-ab"
    assert doc["manifest_diff"] == {"runtime.version": ["1.32.0", "1.31.1"]}
    verdicts = {r["model"]: r["verdict"] for r in doc["rows"]}
    assert verdicts == {"mlp": "pass", "cnn": "regressed"}
    cnn = next(r for r in doc["rows"] if r["model"] == "cnn")
    assert cnn["attribution"] == "p50 +25%: runtime.version 1.32.0 → 1.31.1"


def test_cases_must_match_and_share_a_host():
    clock, rng = Clock(), np.random.default_rng(3)
    with pytest.raises(UsageError, match="share no"):
        ab.match_cases([case("a", 1, clock, rng)], [case("b", 1, clock, rng)])
    pairs = ab.match_cases([case("a", 1, clock, rng)], [case("a", 1, clock, rng, threads=2)])
    with pytest.raises(UsageError, match="host.threads differs"):
        ab.run_case_pairs(pairs, RegressConfig())


class FakeSession:
    def __init__(self, count, arena, out, unsupported=()):
        self.count, self.arena, self.out, self.unsupported = count, arena, out, list(unsupported)

    def partitions(self):
        d = {"count": self.count, "details": [{"unsupported": self.unsupported}]}
        return SimpleNamespace(to_dict=lambda: d)

    def memory(self):
        return SimpleNamespace(arena_bytes=self.arena)

    def run(self, feeds):
        return [np.array(self.out, dtype=np.float32)]


def test_case_facts_feed_partitions_arena_numerics_and_attribution(monkeypatch):
    clock, rng = Clock(), np.random.default_rng(4)
    real = ab.run_ab
    monkeypatch.setattr(ab, "run_ab", lambda b, h, cfg, **kw: real(b, h, cfg, clock=clock, **kw))
    b = case("bert", 1.0, clock, rng)
    h = case("bert", 1.3, clock, rng)
    b.session, b.feeds = FakeSession(1, 1000, [1.0, 2.0]), {}
    h.session, h.feeds = FakeSession(3, 1000, [1.0, 2.5], ["Erf"]), {}
    doc = ab.run_case_pairs([(b, h)], RegressConfig(), budget_s=5, warmup_s=0.01)
    row = doc["rows"][0]
    assert row["verdict"] == "regressed" and row["partitions"] == [1, 3]
    assert row["arena_bytes"] == [1000, 1000]
    assert row["numerics"]["output_sha256_changed"] is True
    assert row["numerics"]["max_abs_diff"] == pytest.approx(0.5)
    assert "partitions 1 → 3, Erf unsupported on the delegate" in row["attribution"]
    # a case without a session still gets timed; its facts are just unknown
    assert ab.case_facts(SimpleNamespace(manifest={})) == ab.CaseFacts(Result())


def test_suite_regress_pct_sets_the_ab_threshold(monkeypatch):
    clock, rng = Clock(), np.random.default_rng(5)
    real = ab.run_ab
    monkeypatch.setattr(ab, "run_ab", lambda b, h, cfg, **kw: real(b, h, cfg, clock=clock, **kw))
    b, h = case("mlp", 1.0, clock, rng), case("mlp", 1.06, clock, rng)
    h.entry = SimpleNamespace(checks=CheckBlocks(latency=LatencyBounds(regress_pct=10)))
    doc = ab.run_case_pairs([(b, h)], RegressConfig(), budget_s=5, warmup_s=0.01)
    assert doc["rows"][0]["stats"]["threshold_pct"] == 10.0
    assert doc["rows"][0]["verdict"] != "regressed"
    doc = ab.run_case_pairs(
        [(b, h)], RegressConfig(), budget_s=5, warmup_s=0.01, suite_thresholds=False
    )
    assert doc["rows"][0]["verdict"] == "regressed"
