"""Regression statistics on synthetic samples: no real timing anywhere."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from guard.core.errors import UsageError
from guard.stats import regress as R
from guard.stats import verdicts as V


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


def test_aa_false_regressions_stay_under_alpha():
    rng = np.random.default_rng(7)
    cfg = R.RegressConfig(n_boot=400)
    verdicts = []
    for _ in range(200):
        b, h = paired(rng, 200)
        verdicts.append(R.compare_paired(b, h, cfg).verdict)
    assert verdicts.count(R.REGRESSED) <= 2  # <= 1%
    assert verdicts.count(R.PASS) >= 150  # and A/A is mostly conclusive, not a shrug


def test_ten_percent_slowdown_is_regressed_and_improvement_mirrors():
    rng = np.random.default_rng(3)
    cfg = R.RegressConfig(n_boot=400)
    b, h = paired(rng, 300, 1.10)
    slow = R.compare_paired(b, h, cfg)
    fast = R.compare_paired(h, b, cfg)
    assert slow.verdict == R.REGRESSED, slow.reason
    assert 1.06 < slow.ratio < 1.14 and slow.ci[0] > 1.0
    assert fast.verdict == R.IMPROVED, fast.reason
    assert slow.p_slower < 0.01 and fast.p_faster < 0.01


def test_significant_but_small_is_not_a_regression():
    """The rule itself (guard.stats.verdicts.decide): p << alpha, CI above 1, yet +1%."""
    verdict, reason = V.decide(1.01, 1.008, 1.012, 1e-9, 1.0, R.RegressConfig(), 0.01)
    assert verdict == R.PASS and "below the 3.0% threshold" in reason


def test_large_but_not_significant_is_inconclusive():
    rng = np.random.default_rng(5)
    b, h = paired(rng, 10, 1.06)
    c = R.compare_paired(b * np.exp(rng.normal(0, 0.4, 10)), h, R.RegressConfig())
    assert c.verdict == R.INCONCLUSIVE
    assert c.mde_pct > 10  # and it says how blind it was
    verdict, _ = V.decide(1.08, 0.9, 1.3, 0.2, 0.8, R.RegressConfig(), 0.01)
    assert verdict == R.INCONCLUSIVE  # large, not significant: the rule on its own


def test_calibrated_noise_raises_the_threshold():
    rng = np.random.default_rng(6)
    b, h = paired(rng, 400, 1.05)
    plain = R.compare_paired(b, h, R.RegressConfig())
    noisy = R.compare_paired(b, h, R.RegressConfig(noise_pct=8.0))
    assert plain.verdict == R.REGRESSED
    assert noisy.threshold_pct == 8.0 and noisy.verdict != R.REGRESSED


def test_mde_shrinks_with_more_samples_and_never_undercuts_threshold():
    rng = np.random.default_rng(8)
    cfg = R.RegressConfig(regress_pct=0.5)
    small = R.compare_paired(*paired(rng, 20), cfg)
    big = R.compare_paired(*paired(rng, 2000), cfg)
    assert big.mde_pct < small.mde_pct
    assert big.mde_pct >= cfg.threshold_pct


def test_too_few_samples_is_inconclusive_with_reason():
    c = R.compare_paired([1.0, 1.1], [2.0, 2.1])
    assert c.verdict == R.INCONCLUSIVE and "too few" in c.reason and math.isinf(c.mde_pct)


def test_identical_constant_samples_pass():
    c = R.compare_paired([5.0] * 20, [5.0] * 20)
    assert c.verdict == R.PASS and c.ratio == 1.0


@pytest.mark.parametrize(
    "base,head",
    [([1.0] * 10, [1.0] * 9 + [-1.0]), ([1.0] * 10, [1.0] * 9 + [float("nan")])],
)
def test_bad_samples_are_usage_errors(base, head):
    with pytest.raises(UsageError):
        R.compare_paired(base, head)


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
        make_sampler(rng, 1.25, clock), budget_s=100, initial=40, clock=clock
    )
    assert res.stopped == "conclusive" and res.comparison.verdict == R.REGRESSED
    assert len(res.looks) == 1 and len(res.base) == 40


def test_adaptive_measures_more_when_inconclusive_then_respects_budget():
    rng = np.random.default_rng(11)
    clock = FakeClock()
    # 3.5% against a 3% threshold: needs many samples; the budget allows 10 s = 1000 pairs.
    res = R.measure_until_conclusive(
        make_sampler(rng, 1.035, clock),
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
            make_sampler(rng, 1.0, clock), budget_s=20, initial=20, clock=clock
        )
        regressed += res.comparison.verdict == R.REGRESSED
    assert regressed <= 1


def test_adaptive_to_dict():
    rng = np.random.default_rng(13)
    clock = FakeClock()
    res = R.measure_until_conclusive(make_sampler(rng, 0.8, clock, 0.001), clock=clock)
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

    res = R.measure_until_conclusive(sample, budget_s=5.0, initial=25, max_looks=12, clock=clock)
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


# Sides simulated without a run offset: judged on their rounds alone.
EXACT = R.RegressConfig(run_noise_pct=0.0)


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
    # The default run noise (a disturbance the rounds cannot see, 1.5% a side) leaves two
    # processes unable to rule out 3%: inconclusive, never regressed, and saying how much
    # they could have told.
    default = [R.compare_rounds(b, h) for b, h in pairs]
    assert not any(c.verdict == R.REGRESSED for c in default)
    assert all(c.verdict == R.PASS or "could detect a slowdown of" in c.reason for c in default)
    assert R.DEFAULT_RUN_NOISE_PCT == 1.5


def test_rounds_ten_percent_is_regressed_and_five_percent_mostly():
    rng = np.random.default_rng(41)
    ten = [
        R.compare_rounds(rounds_side(rng), rounds_side(rng, factor=1.10), EXACT).verdict
        for _ in range(200)
    ]
    five = [
        R.compare_rounds(rounds_side(rng), rounds_side(rng, factor=1.05), EXACT).verdict
        for _ in range(200)
    ]
    assert ten.count(R.REGRESSED) / 200 >= 0.95
    assert five.count(R.REGRESSED) / 200 >= 0.8
    # with the default run noise a side's level may be off by 1.5%: +10% still stands
    default = [
        R.compare_rounds(rounds_side(rng), rounds_side(rng, factor=1.10)).verdict
        for _ in range(200)
    ]
    assert default.count(R.REGRESSED) / 200 >= 0.95


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
    exact = R.RegressConfig(run_noise_pct=0.0)
    assert R.compare_rounds(b, h, exact).verdict == R.REGRESSED  # +5%: tight rounds, 3%
    c = R.compare_rounds(b, h, R.RegressConfig(noise_pct=8.0, run_noise_pct=0.0))
    assert c.verdict != R.REGRESSED and c.threshold_pct == 8.0
    assert c.mde_pct > 8.0


def test_too_few_rounds_is_inconclusive_and_says_which_key():
    c = R.compare_rounds([10.0, 10.1], [11.0, 11.2, 11.1])
    assert c.verdict == R.INCONCLUSIVE and "too few rounds" in c.reason
    assert "defaults.measure.rounds" in c.reason


def test_measuring_conditions_bound_the_verdict():
    rng = np.random.default_rng(42)
    b, h = rounds_side(rng), rounds_side(rng, factor=1.10)
    quiet = R.compare_rounds(b, h, EXACT, contention=([0.0] * 5, [0.05] * 5))
    assert quiet.verdict == R.REGRESSED  # 1.4% of possible bias: the +10% still stands
    busy = R.compare_rounds(b, h, EXACT, contention=([0.0] * 5, [1.0] * 5))
    assert busy.verdict == R.INCONCLUSIVE and "contention differs" in busy.reason
    pre = R.compare_rounds(b, h, EXACT, cpu_share=(1.0, 0.5))
    assert pre.verdict == R.INCONCLUSIVE and "head was preempted" in pre.reason
    # an A/A pass that the bias could hide a regression behind is not a pass either
    aa = R.compare_rounds(b, b, EXACT, contention=([0.0] * 5, [1.0] * 5))
    assert aa.verdict == R.INCONCLUSIVE and "would be pass" in aa.reason
    assert "could detect a slowdown of" in aa.reason


def host_runs(rng, n_rounds=10, level=1.0, speed=1.0, slope=0.5, wander=0.08, noise=0.01):
    """A run on a VM whose speed wanders from round to round: the probe's readings and the
    model's round medians, the model feeling ``slope`` of the machine's speed."""
    log_host = np.log(speed) + rng.normal(0.0, wander, n_rounds)
    host = list(4.0 * np.exp(log_host))
    medians = list(10.0 * level * np.exp(slope * log_host + rng.normal(0.0, noise, n_rounds)))
    return medians, host


def test_rounds_are_judged_at_equal_host_speed():
    """The machine ran 15% slower during head and the model feels half of that: unadjusted,
    an A/A reads as a regression; adjusted for the probe, each reads what the model did."""
    rng = np.random.default_rng(45)
    bm, bh = host_runs(rng)
    am, ah = host_runs(rng, speed=1.15)  # the same model, a slower machine
    sm, sh = host_runs(rng, level=1.10, speed=1.15)  # 10% slower, on the slower machine
    exact = R.RegressConfig(run_noise_pct=0.0)
    raw = R.compare_rounds(bm, am, exact)  # no readings: Welch on the medians alone
    assert raw.method == "welch-rounds" and raw.verdict == R.REGRESSED
    aa = R.compare_rounds(bm, am, exact, host=(bh, ah))
    assert aa.method == "ancova-rounds-host" and aa.verdict == R.PASS
    assert abs(aa.ratio - 1.0) < 0.015
    assert re.search(
        r"adjusted for host speed: the probes read \+\d+\.\d% \(interpreter\) during head, "
        r"slopes 0\.\d\d; unadjusted \+\d\.\d%",
        aa.reason,
    )
    slow = R.compare_rounds(bm, sm, exact, host=(bh, sh))
    assert slow.verdict == R.REGRESSED and slow.ci[0] < 1.10 < slow.ci[1]
    # every round needs a reading: one missing and the probe only bounds the verdict
    bounded = R.compare_rounds(bm, am, exact, host=(bh[:-1], ah))
    assert bounded.method == "welch-rounds" and bounded.verdict == R.INCONCLUSIVE
    assert re.search(r"the host ran 1\d% slower during head \(host-speed probe", bounded.reason)


def test_a_probe_that_moved_only_between_the_sides_widens_the_interval():
    """Readings flat within each side give no slope: the head's +10% could be the host's
    +15% or the model's own, and the comparison says it cannot tell."""
    rng = np.random.default_rng(46)
    bm, _ = host_runs(rng, wander=0.0)
    hm, _ = host_runs(rng, level=1.10, wander=0.0)
    flat = (
        list(4.0 * np.exp(rng.normal(0, 1e-4, 10))),
        list(4.6 * np.exp(rng.normal(0, 1e-4, 10))),
    )
    c = R.compare_rounds(bm, hm, R.RegressConfig(run_noise_pct=0.0), host=flat)
    assert c.method == "ancova-rounds-host" and c.verdict == R.INCONCLUSIVE
    assert c.ci[0] < 1.0 < c.ci[1] and "could detect a slowdown of" in c.reason


def test_each_probe_gets_its_own_slope():
    """A convolution feels the vector units' speed, not the interpreter's: the vector
    probe read 15% slower during head while the interpreter probe wandered on its own.
    With both probes the A/A is taken at equal speed; with the interpreter's alone it is
    not."""
    rng = np.random.default_rng(48)

    def side(vector_speed):
        interp = rng.normal(0.0, 0.08, 10)
        vector = np.log(vector_speed) + rng.normal(0.0, 0.08, 10)
        medians = list(10.0 * np.exp(0.8 * vector + rng.normal(0.0, 0.01, 10)))
        return medians, list(zip(4.0 * np.exp(interp), 0.8 * np.exp(vector), strict=True))

    (bm, bh), (hm, hh) = side(1.0), side(1.15)
    exact = R.RegressConfig(run_noise_pct=0.0)
    both = R.compare_rounds(bm, hm, exact, host=(bh, hh))
    assert both.method == "ancova-rounds-host" and both.verdict == R.PASS
    assert re.search(r"\(interpreter\) and \+1\d\.\d% \(vector\) during head, slopes", both.reason)
    one = R.compare_rounds(bm, hm, exact, host=([x[0] for x in bh], [x[0] for x in hh]))
    assert one.method == "ancova-rounds-host" and one.verdict == R.REGRESSED


def noisy_probe_runs(rng, speed, n_rounds=10, readings=3, slope=0.6):
    """A run whose probe readings are partly noise: the machine's real speed wanders 5%
    from round to round, each reading of it 6% on its own."""
    real = np.log(speed) + rng.normal(0.0, 0.05, n_rounds)
    logs = real[:, None] + rng.normal(0.0, 0.06, (n_rounds, readings))
    medians = list(10.0 * np.exp(slope * real + rng.normal(0.0, 0.01, n_rounds)))
    means = list(4.0 * np.exp(logs.mean(axis=1)))
    errors = list(logs.var(axis=1, ddof=1) / readings)
    return medians, means, errors


def test_readings_that_are_partly_noise_bound_the_adjusted_verdict():
    """Noisy readings flatten the fitted slope, so a machine 15% slower during head is
    under-corrected and A/As regress; each round's reading spread says by how much, and
    that bounds the verdict."""
    rng = np.random.default_rng(49)
    plain, bounded = [], []
    cfg = R.RegressConfig(run_noise_pct=0.0)
    for _ in range(300):
        b, h = noisy_probe_runs(rng, 1.0), noisy_probe_runs(rng, 1.15)
        plain.append(R.compare_rounds(b[0], h[0], cfg, host=(b[1], h[1])).verdict)
        c = R.compare_rounds(b[0], h[0], cfg, host=(b[1], h[1]), host_error=(b[2], h[2]))
        bounded.append(c)
    assert plain.count(R.REGRESSED) / len(plain) > 0.15
    assert [c.verdict for c in bounded].count(R.REGRESSED) / len(bounded) <= 0.05
    held = next(c for c in bounded if c.verdict == R.INCONCLUSIVE and "partly noise" in c.reason)
    assert re.search(
        r"\(\d+% real within the sides\), so the slopes, taken halfway to undiluted, can leave up to",
        held.reason,
    )
    # the same machine at the same speed for both runs: nothing left to bound
    b, h = noisy_probe_runs(rng, 1.0), noisy_probe_runs(rng, 1.0)
    same = R.compare_rounds(b[0], h[0], cfg, host=(b[1], h[1]), host_error=(b[2], h[2]))
    assert same.verdict != R.REGRESSED


def test_host_adjusted_aa_false_regressions_stay_under_alpha():
    """Many A/A pairs on a machine whose speed differs between the runs by up to 20%."""
    rng = np.random.default_rng(47)
    verdicts = []
    for _ in range(300):
        b = host_runs(rng, speed=float(np.exp(rng.normal(0, 0.08))), slope=0.5)
        h = host_runs(rng, speed=float(np.exp(rng.normal(0, 0.08))), slope=0.5)
        verdicts.append(R.compare_rounds(b[0], h[0], EXACT, host=(b[1], h[1])).verdict)
    assert verdicts.count(R.REGRESSED) / len(verdicts) <= 0.01
    assert verdicts.count(R.PASS) / len(verdicts) >= 0.8


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
    slower = R.compare_rounds(b_wall, h_wall, EXACT, cpu_share=(1.0, 0.5), cpu=(b_cpu, h_cpu))
    assert slower.verdict == R.REGRESSED and slower.method == "welch-rounds-cpu"
    assert slower.ratio == pytest.approx(
        float(np.exp(np.mean(np.log(h_cpu)) - np.mean(np.log(b_cpu))))
    )
    assert "judged on CPU time per call (head was preempted" in slower.reason
    same = R.compare_rounds(b_wall, h_wall, EXACT, cpu_share=(1.0, 0.5), cpu=(b_cpu, b_cpu))
    assert same.verdict == R.PASS and same.method == "welch-rounds-cpu"
    # a contention difference is not preemption: CPU time is slowed by a co-tenant too
    busy = R.compare_rounds(
        b_cpu, h_cpu, EXACT, contention=([0.0] * 5, [1.0] * 5), cpu=(b_cpu, h_cpu)
    )
    assert busy.verdict == R.INCONCLUSIVE and busy.method == "welch-rounds"
    # a quiet comparison is judged on wall time as before, CPU time or not
    quiet = R.compare_rounds(b_cpu, h_cpu, EXACT, cpu=(b_wall, h_wall))
    assert quiet.method == "welch-rounds" and quiet.verdict == R.REGRESSED
    # CPU time is slowed by a slower machine too: it is adjusted for the probe as well
    host = (list(np.full(5, 4.0) * np.exp(rng.normal(0, 0.1, 5))),) * 2
    adjusted = R.compare_rounds(
        b_wall, h_wall, EXACT, cpu_share=(1.0, 0.5), cpu=(b_cpu, h_cpu), host=host
    )
    assert adjusted.verdict == R.REGRESSED and adjusted.method == "ancova-rounds-host-cpu"


def test_adaptive_first_look_respects_the_budget_for_a_slow_model():
    """Each pair costs 0.5 s: the first look must not wait for all ``initial`` pairs."""
    rng = np.random.default_rng(15)
    clock = FakeClock()

    def sample(n):
        clock.t += n * 0.5
        return latencies(rng, n), latencies(rng, n)

    res = R.measure_until_conclusive(sample, budget_s=6.0, initial=50, clock=clock)
    assert res.stopped in ("budget", "conclusive") and len(res.looks) == 1
    assert 8 <= len(res.base) <= 20  # chunks of 10: stops within one chunk of the 6 s budget
    assert res.elapsed_s <= 6.0 + 10 * 0.5
