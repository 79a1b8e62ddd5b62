"""Regression statistics on synthetic samples: no real timing anywhere."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from guard.bench import regress as R
from guard.errors import UsageError


def latencies(rng: np.random.Generator, n: int, factor: float = 1.0, sigma: float = 0.05):
    """Lognormal body with a 5% heavy right tail, like a contended runner."""
    body = np.exp(rng.normal(0.0, sigma, n))
    tail = 1.0 + (rng.random(n) < 0.05) * rng.exponential(0.5, n)
    return 10.0 * factor * body * tail


def paired(rng: np.random.Generator, n: int, factor: float = 1.0):
    """Pairs share a per-pair contention level, as interleaved runs do."""
    contention = np.exp(rng.normal(0.0, 0.2, n))
    b = latencies(rng, n) * contention
    h = latencies(rng, n, factor) * contention
    return b, h


@pytest.mark.parametrize("mode", ["unpaired", "paired"])
def test_aa_false_regressions_stay_under_alpha(mode):
    rng = np.random.default_rng(7)
    cfg = R.RegressConfig(n_boot=400)
    verdicts = []
    for _ in range(200):
        if mode == "paired":
            b, h = paired(rng, 200)
            verdicts.append(R.compare_paired(b, h, cfg).verdict)
        else:
            verdicts.append(
                R.compare_unpaired(latencies(rng, 200), latencies(rng, 200), cfg).verdict
            )
    assert verdicts.count(R.REGRESSED) <= 2  # <= 1%
    assert verdicts.count(R.PASS) >= 150  # and A/A is mostly conclusive, not a shrug


@pytest.mark.parametrize("mode", ["unpaired", "paired"])
def test_ten_percent_slowdown_is_regressed_and_improvement_mirrors(mode):
    rng = np.random.default_rng(3)
    cfg = R.RegressConfig(n_boot=400)
    if mode == "paired":
        b, h = paired(rng, 300, 1.10)
        slow = R.compare_paired(b, h, cfg)
        fast = R.compare_paired(h, b, cfg)
    else:
        b, h = latencies(rng, 300), latencies(rng, 300, 1.10)
        slow = R.compare_unpaired(b, h, cfg)
        fast = R.compare_unpaired(h, b, cfg)
    assert slow.verdict == R.REGRESSED, slow.reason
    assert 1.06 < slow.ratio < 1.14 and slow.ci[0] > 1.0
    assert fast.verdict == R.IMPROVED, fast.reason
    assert slow.p_slower < 0.01 and fast.p_faster < 0.01


def test_significant_but_small_is_not_a_regression():
    rng = np.random.default_rng(4)
    b, h = latencies(rng, 20000, sigma=0.01), latencies(rng, 20000, 1.01, sigma=0.01)
    c = R.compare_unpaired(b, h, R.RegressConfig(n_boot=200))
    assert c.p_slower < 1e-6  # clearly significant ...
    assert c.verdict == R.PASS  # ... and clearly under 3%


def test_large_but_not_significant_is_inconclusive():
    rng = np.random.default_rng(5)
    b, h = latencies(rng, 10, sigma=0.4), latencies(rng, 10, 1.06, sigma=0.4)
    c = R.compare_unpaired(b, h, R.RegressConfig(n_boot=400))
    assert c.verdict == R.INCONCLUSIVE
    assert c.mde_pct > 10  # and it says how blind it was


def test_calibrated_noise_raises_the_threshold():
    rng = np.random.default_rng(6)
    b, h = latencies(rng, 400), latencies(rng, 400, 1.05)
    plain = R.compare_unpaired(b, h, R.RegressConfig(n_boot=400))
    noisy = R.compare_unpaired(b, h, R.RegressConfig(n_boot=400, noise_pct=8.0))
    assert plain.verdict == R.REGRESSED
    assert noisy.threshold_pct == 8.0 and noisy.verdict != R.REGRESSED


def test_mde_shrinks_with_more_samples_and_never_undercuts_threshold():
    rng = np.random.default_rng(8)
    cfg = R.RegressConfig(n_boot=400, regress_pct=0.5)
    small = R.compare_unpaired(latencies(rng, 20), latencies(rng, 20), cfg)
    big = R.compare_unpaired(latencies(rng, 2000), latencies(rng, 2000), cfg)
    assert big.mde_pct < small.mde_pct
    assert big.mde_pct >= cfg.threshold_pct


def test_too_few_samples_is_inconclusive_with_reason():
    c = R.compare_unpaired([1.0, 1.1], [2.0, 2.1])
    assert c.verdict == R.INCONCLUSIVE and "too few" in c.reason and math.isinf(c.mde_pct)


def test_identical_constant_samples_pass():
    c = R.compare_paired([5.0] * 20, [5.0] * 20)
    assert c.verdict == R.PASS and c.ratio == 1.0
    c = R.compare_unpaired([5.0] * 20, [5.0] * 20)
    assert c.verdict == R.PASS


@pytest.mark.parametrize(
    "base,head",
    [([1.0] * 10, [1.0] * 9 + [-1.0]), ([1.0] * 10, [1.0] * 9 + [float("nan")])],
)
def test_bad_samples_are_usage_errors(base, head):
    with pytest.raises(UsageError):
        R.compare_unpaired(base, head)


def test_paired_needs_equal_lengths():
    with pytest.raises(UsageError, match="equal lengths"):
        R.compare_paired([1.0] * 10, [1.0] * 11)


def test_config_validation():
    with pytest.raises(UsageError):
        R.RegressConfig(alpha=0.7)
    with pytest.raises(UsageError):
        R.RegressConfig(regress_pct=-1)


def test_median_ci_covers_the_median():
    rng = np.random.default_rng(9)
    hits = 0
    for _ in range(400):
        lo, hi = R.median_ci(rng.normal(0, 1, 51), 0.025)  # >= 95% coverage
        hits += lo <= 0.0 <= hi
    assert hits >= 0.93 * 400
    assert R.median_ci(np.array([1.0, 2.0]), 0.01) == (-math.inf, math.inf)


class FakeClock:
    """Advances by a fixed cost per sample drawn, so budgets are exact."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def make_sampler(rng, factor, clock, cost_per_pair=0.01):
    def sample(n):
        clock.t += n * cost_per_pair
        return paired(rng, n, factor)

    return sample


def test_adaptive_stops_as_soon_as_conclusive():
    rng = np.random.default_rng(10)
    clock = FakeClock()
    res = R.measure_until_conclusive(
        make_sampler(rng, 1.25, clock), paired=True, budget_s=100, initial=40, clock=clock
    )
    assert res.stopped == "conclusive" and res.comparison.verdict == R.REGRESSED
    assert len(res.looks) == 1 and len(res.base) == 40


def test_adaptive_measures_more_when_inconclusive_then_respects_budget():
    rng = np.random.default_rng(11)
    clock = FakeClock()
    # 3.5% against a 3% threshold: needs many samples; the budget allows 10 s = 1000 pairs.
    res = R.measure_until_conclusive(
        make_sampler(rng, 1.035, clock),
        paired=True,
        budget_s=10.0,
        initial=20,
        max_looks=10,
        clock=clock,
    )
    ns = [lk.n for lk in res.looks]
    assert ns == sorted(ns) and ns[:3] == [20, 40, 80]
    assert res.elapsed_s <= 10.0
    assert len(res.base) == len(res.head) == ns[-1]
    if res.comparison.verdict == R.INCONCLUSIVE:
        assert res.stopped == "budget"
    # alpha is spent across the looks
    assert res.comparison.alpha == pytest.approx(0.01 / 10)


def test_adaptive_aa_false_regressions_under_alpha():
    rng = np.random.default_rng(12)
    regressed = 0
    for _ in range(150):
        clock = FakeClock()
        res = R.measure_until_conclusive(
            make_sampler(rng, 1.0, clock), paired=True, budget_s=20, initial=20, clock=clock
        )
        regressed += res.comparison.verdict == R.REGRESSED
    assert regressed <= 1


def test_adaptive_unpaired_and_to_dict():
    rng = np.random.default_rng(13)
    clock = FakeClock()

    def sample(n):
        clock.t += n * 0.001
        return latencies(rng, n), latencies(rng, n, 0.8)

    res = R.measure_until_conclusive(
        sample, paired=False, config=R.RegressConfig(n_boot=300), clock=clock
    )
    d = res.to_dict()
    assert d["verdict"] == R.IMPROVED and d["stopped"] == "conclusive"
    assert d["looks"][0]["n"] == 50 and isinstance(d["ci"], list)


def test_adaptive_budget_holds_when_the_machine_turns_busy():
    """Costs jump 20x after 2 s: the old 'predict the next batch' rule overran here."""
    rng = np.random.default_rng(14)
    clock = FakeClock()

    def sample(n):
        cost = 0.005 if clock.t < 2.0 else 0.1
        clock.t += n * cost
        # very noisy and right at the threshold: stays inconclusive
        return latencies(rng, n, sigma=0.6), latencies(rng, n, 1.03, sigma=0.6)

    res = R.measure_until_conclusive(
        sample, paired=True, budget_s=5.0, initial=25, max_looks=12, clock=clock
    )
    assert res.stopped == "budget"
    assert res.elapsed_s <= 5.0 + 25 * 0.1  # at most one chunk past the deadline


def test_mde_is_calibrated_a_slowdown_of_the_mde_is_flagged_about_80_percent():
    rng = np.random.default_rng(15)
    cfg = R.RegressConfig(n_boot=300, regress_pct=3.0)
    probe = R.compare_paired(*paired(rng, 300), cfg)
    factor = 1 + probe.mde_pct / 100
    assert probe.mde_pct > cfg.threshold_pct  # never below the threshold: it must clear it
    hits = sum(
        R.compare_paired(*paired(rng, 300, factor), cfg).verdict == R.REGRESSED for _ in range(100)
    )
    assert 65 <= hits <= 95


# -- rounds (two processes) ----------------------------------------------------------------


def rounds_side(rng, n_rounds=5, factor=1.0, round_sigma=0.01, offset_sigma=0.0):
    """Round medians of one process: a per-process offset plus per-round wander."""
    offset = rng.normal(0.0, offset_sigma)
    return list(10.0 * factor * np.exp(offset + rng.normal(0.0, round_sigma, n_rounds)))


def test_rounds_aa_false_regressions_stay_under_alpha():
    rng = np.random.default_rng(40)
    pairs = [(rounds_side(rng), rounds_side(rng)) for _ in range(400)]
    exact = R.RegressConfig(run_noise_pct=0.0)  # these runs share no offset: trust the rounds
    verdicts = [R.compare_rounds(b, h, exact).verdict for b, h in pairs]
    assert verdicts.count(R.REGRESSED) / len(verdicts) <= 0.01
    assert verdicts.count(R.PASS) / len(verdicts) >= 0.9
    # The default run noise (a disturbance the rounds cannot see) costs some passes only.
    default = [R.compare_rounds(b, h).verdict for b, h in pairs]
    assert default.count(R.REGRESSED) == 0 and default.count(R.PASS) / len(default) >= 0.75


def test_rounds_ten_percent_is_regressed_and_five_percent_mostly():
    rng = np.random.default_rng(41)
    ten = [
        R.compare_rounds(rounds_side(rng), rounds_side(rng, factor=1.10)).verdict
        for _ in range(200)
    ]
    five = [
        R.compare_rounds(rounds_side(rng), rounds_side(rng, factor=1.05)).verdict
        for _ in range(200)
    ]
    assert ten.count(R.REGRESSED) / 200 >= 0.95
    assert five.count(R.REGRESSED) / 200 >= 0.8


def test_run_noise_covers_an_offset_that_every_round_of_a_run_shares():
    """A disturbance that outlasts a run moves all its rounds: the rounds cannot see it,
    ``run_noise_pct`` can. Trusting the rounds alone (0) flags such A/A pairs far more
    often than alpha; with the run's level counted the rate is back at alpha (1%, one-sided;
    the rounds' estimated variance adds a little)."""
    rng = np.random.default_rng(43)
    pairs = [
        (rounds_side(rng, 10, offset_sigma=0.02), rounds_side(rng, 10, offset_sigma=0.02))
        for _ in range(1000)
    ]
    blind = [R.compare_rounds(b, h, R.RegressConfig(run_noise_pct=0.0)).verdict for b, h in pairs]
    seen = [R.compare_rounds(b, h, R.RegressConfig(run_noise_pct=2.0)).verdict for b, h in pairs]
    assert blind.count(R.REGRESSED) / 1000 >= 0.05
    assert seen.count(R.REGRESSED) / 1000 <= 0.02
    c = R.compare_rounds(*pairs[0], R.RegressConfig(run_noise_pct=2.0))
    assert c.mde_pct > R.compare_rounds(*pairs[0], R.RegressConfig(run_noise_pct=0.0)).mde_pct
    with pytest.raises(UsageError, match="run_noise_pct"):
        R.RegressConfig(run_noise_pct=-1.0)


def test_calibrated_noise_floors_the_round_variance():
    """Rounds that agree by chance (or a process whose rounds share one offset) do not
    make a small difference significant when calibration says loads differ by 8%."""
    b, h = [10.0, 10.01, 9.99, 10.0, 10.02], [10.5, 10.49, 10.52, 10.5, 10.51]
    assert R.compare_rounds(b, h).verdict == R.REGRESSED  # +5%: tight rounds, 3% threshold
    c = R.compare_rounds(b, h, R.RegressConfig(noise_pct=8.0))
    assert c.verdict != R.REGRESSED and c.threshold_pct == 8.0
    assert c.mde_pct > 8.0


def test_too_few_rounds_is_inconclusive_and_says_which_key():
    c = R.compare_rounds([10.0, 10.1], [11.0, 11.2, 11.1])
    assert c.verdict == R.INCONCLUSIVE and "too few rounds" in c.reason
    assert "defaults.measure.rounds" in c.reason


def test_measuring_conditions_bound_the_verdict():
    rng = np.random.default_rng(42)
    b, h = rounds_side(rng), rounds_side(rng, factor=1.10)
    quiet = R.compare_rounds(b, h, contention=([0.0] * 5, [0.05] * 5))
    assert quiet.verdict == R.REGRESSED  # 1.4% of possible bias: the +10% still stands
    busy = R.compare_rounds(b, h, contention=([0.0] * 5, [1.0] * 5))
    assert busy.verdict == R.INCONCLUSIVE and "contention differs" in busy.reason
    pre = R.compare_rounds(b, h, cpu_share=(1.0, 0.5))
    assert pre.verdict == R.INCONCLUSIVE and "head was preempted" in pre.reason
    # an A/A pass that the bias could hide a regression behind is not a pass either
    aa = R.compare_rounds(b, b, contention=([0.0] * 5, [1.0] * 5))
    assert aa.verdict == R.INCONCLUSIVE and "would be pass" in aa.reason
    assert "could detect a slowdown of" in aa.reason


def test_a_slower_host_bounds_the_verdict_and_a_steady_one_does_not():
    """The host-speed probe: a machine that ran 15% slower during head can explain +10%."""
    rng = np.random.default_rng(45)
    b, h = rounds_side(rng, 10), rounds_side(rng, 10, factor=1.10)
    steady = (rounds_side(rng, 10, round_sigma=0.05), rounds_side(rng, 10, round_sigma=0.05))
    slowed = (steady[0], [x * 1.15 for x in steady[1]])
    assert R.compare_rounds(b, h, host=steady).verdict == R.REGRESSED
    c = R.compare_rounds(b, h, host=slowed)
    assert c.verdict == R.INCONCLUSIVE
    assert re.search(r"the host ran 1\d% slower during head \(host-speed probe", c.reason)
    # an A/A whose host wandered is not a pass either: the host could hide a regression
    aa = R.compare_rounds(b, b, host=slowed)
    assert aa.verdict == R.INCONCLUSIVE and "would be pass" in aa.reason
    # preempted wall time is not re-judged on CPU time when the host itself changed speed
    pre = R.compare_rounds(b, h, cpu_share=(1.0, 0.5), cpu=(b, h), host=slowed)
    assert pre.method == "welch-rounds" and pre.verdict == R.INCONCLUSIVE


def test_rounds_need_finite_positive_medians():
    with pytest.raises(UsageError):
        R.compare_rounds([1.0, float("nan"), 1.0], [1.0, 1.0, 1.0])
    with pytest.raises(UsageError):
        R.compare_rounds([1.0, 0.0, 1.0], [1.0, 1.0, 1.0])


def test_preemption_that_touched_few_calls_does_not_bound_the_verdict():
    """A short model on a busy core: the process got 10% of a core, but its context
    switches landed in 2% of its calls, outliers its round medians ignore."""
    rng = np.random.default_rng(43)
    b, h = rounds_side(rng), rounds_side(rng, factor=1.10)
    few = R.compare_rounds(b, h, cpu_share=(0.1, 0.1), preempted=(0.02, 0.03))
    assert few.verdict == R.REGRESSED
    many = R.compare_rounds(b, h, cpu_share=(0.1, 0.1), preempted=(0.02, 1.0))
    assert many.verdict == R.INCONCLUSIVE and "head was preempted" in many.reason
    unknown = R.compare_rounds(b, h, cpu_share=(0.1, 0.1))  # older files: no count, bounded
    assert unknown.verdict == R.INCONCLUSIVE


def test_preempted_rounds_are_judged_on_cpu_time_per_call():
    """Wall time of a preempted 1-thread side holds waiting; its CPU time per call does not."""
    rng = np.random.default_rng(44)
    b_wall, h_wall = rounds_side(rng), rounds_side(rng, factor=1.6)  # head waited for a core
    b_cpu, h_cpu = rounds_side(rng), rounds_side(rng, factor=1.10)  # and really is 10% slower
    slower = R.compare_rounds(b_wall, h_wall, cpu_share=(1.0, 0.5), cpu=(b_cpu, h_cpu))
    assert slower.verdict == R.REGRESSED and slower.method == "welch-rounds-cpu"
    assert slower.ratio == pytest.approx(
        float(np.exp(np.mean(np.log(h_cpu)) - np.mean(np.log(b_cpu))))
    )
    assert "judged on CPU time per call (head was preempted" in slower.reason
    same = R.compare_rounds(b_wall, h_wall, cpu_share=(1.0, 0.5), cpu=(b_cpu, b_cpu))
    assert same.verdict == R.PASS and same.method == "welch-rounds-cpu"
    # a contention difference is not preemption: CPU time is slowed by a co-tenant too
    busy = R.compare_rounds(b_cpu, h_cpu, contention=([0.0] * 5, [1.0] * 5), cpu=(b_cpu, h_cpu))
    assert busy.verdict == R.INCONCLUSIVE and busy.method == "welch-rounds"
    # a quiet comparison is judged on wall time as before, CPU time or not
    quiet = R.compare_rounds(b_cpu, h_cpu, cpu=(b_wall, h_wall))
    assert quiet.method == "welch-rounds" and quiet.verdict == R.REGRESSED


def test_adaptive_first_look_respects_the_budget_for_a_slow_model():
    """Each pair costs 0.5 s: the first look must not wait for all ``initial`` pairs."""
    rng = np.random.default_rng(15)
    clock = FakeClock()

    def sample(n):
        clock.t += n * 0.5
        return latencies(rng, n), latencies(rng, n)

    res = R.measure_until_conclusive(sample, paired=True, budget_s=6.0, initial=50, clock=clock)
    assert res.stopped in ("budget", "conclusive") and len(res.looks) == 1
    assert 8 <= len(res.base) <= 20  # chunks of 10: stops within one chunk of the 6 s budget
    assert res.elapsed_s <= 6.0 + 10 * 0.5
