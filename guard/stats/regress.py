"""Regression statistics: is HEAD slower than BASE, beyond noise?

The rule, stated as asv states ``_is_result_better`` (asv/commands/compare.py: "a is better
than b" when ``a < b / factor`` and, where statistics are available,
``statistics.is_different`` says the two differ):

    HEAD regressed against BASE  iff  head/base >= 1 + t  (large)
                                 and  p_slower < alpha and CI_low(head/base) > 1  (significant)

with ``t = max(regress_pct, noise_k * noise_pct) / 100``; ``improved`` is the mirror
(head/base <= 1 / (1 + t), p_faster < alpha, CI_high < 1). One place applies it:
guard.stats.verdicts.decide, whichever design produced the estimate. Either half alone is
wrong on shared runners: significance alone flags a real but harmless 0.3% on 50,000
samples; size alone is a coin toss on one noisy mean.

Two designs, two estimators (iterations of one process are never the units: they share
its memory placement, clock state and co-tenant):

- rounds (two results files, two runs measured at different times): the independent
  units are the *rounds* (each in a round worker of its own, interleaved over the run's
  results: see guard.measure.timer and guard.measure.round_runner), not the iterations. Within one
  process, thousands of iterations share one memory placement, one clock state and one
  co-tenant; between two processes those differ, and treating every iteration as
  independent turns a 5% process-to-process offset into p=1e-159. The estimate is the
  difference of the mean log round medians; its standard error is Welch's from the two
  sides' round-to-round variances, floored by the calibrated noise when ``guard
  calibrate`` measured one (``noise_pct``), plus for each side the variance of a whole
  run's level that no round of it can see (``run_noise_pct``, default
  ``DEFAULT_RUN_NOISE_PCT``: a disturbance that outlasts the run moves every round of it);
  the test is Welch's t on the log round medians, with its CI and minimum detectable
  effect from the t distribution. When every round of both sides carries a host-speed
  reading (guard.measure.host_speed), the difference is taken at equal host speed instead:
  an analysis of covariance of the log round medians on the log readings, its slope
  pooled from the rounds within each side, its standard error the residual one plus the
  slope's own uncertainty (method ``ancova-rounds-host``). A shared VM's speed drifts by
  5-25% over minutes, so two runs minutes apart differ by that much before any change to
  the model; the probe sees most of it.
- paired (interleaved A/B in one process): per-pair log ratios log(h_i / b_i), whose
  median is the estimate; Wilcoxon signed-rank each way; a distribution-free CI for that
  median from binomial order statistics. Pairing cancels drift and contention bursts that
  hit both sides, which is why interleaving needs far fewer samples.

The threshold is ``max(regress_pct, noise_k * noise_pct)``: ``noise_pct`` is the A/A
spread that ``guard calibrate`` measured for this benchmark, so a benchmark known to swing
8% between identical runs is not judged on a 3% threshold.

Verdicts: ``regressed`` (significantly slower and large), ``improved`` (the mirror),
``pass`` (the CI rules out a regression beyond the threshold), ``inconclusive`` (none of
these: measure more). ``mde_pct`` is the smallest slowdown this comparison would flag with
probability ``power``: the larger of the threshold and what the noise allows.

A rounds comparison also allows for its measuring conditions. A contention difference
between the sides (other processes' mean share of the spare CPU) can move 1-thread latency
by up to ``CONTENTION_EFFECT`` per unit (+28% for a fully busy other core on this kind of
runner, FACTS.md), and a side whose worst round got a share s < ``CPU_SHARE_WARN`` of a
core holds up to 1/s - 1 of waiting, unless its involuntary context switches touched
fewer than ``MEDIAN_SAFE`` of a round's calls (two calls per switch: the one interrupted
and the cache-cold one after it): a round median ignores waiting that sits in a few
outlying calls, which is how a short model stays measurable on a busy runner while a
long one, preempted inside every call, does not. Their sum is a bias bound B: a verdict stands only if
it still holds with the ratio and its CI moved by a factor 1 + B against it; otherwise the
row is ``inconclusive`` and says which condition it could not see past. A rounds row that
stays inconclusive names the smallest slowdown its rounds could have detected.

Preemption has a second estimator. A 1-thread session's CPU time per call (the process's
CPU time over a round's timed loop, divided by its calls) is the call's work without the
time it spent waiting for a core. When preemption is what left the wall-time verdict
inconclusive and both sides carry it for every round, the rounds are judged on it with
the same test (method ``welch-rounds-cpu``, the reason saying so); a contention
difference still discounts that verdict, since a co-tenant slows the work itself through
shared caches and memory bandwidth. With more threads a process's CPU time sums every
thread's (spinning included), so it is not used.

Optional stopping inflates false positives, so the adaptive driver spends ``alpha`` over
its looks (Bonferroni over a geometric schedule of at most ``max_looks`` looks).

Where each lives, all in this package: guard.stats.verdicts (the config, the
``Comparison`` record, the rule above), guard.stats.rounds_stats (rounds) and
guard.stats.paired (paired, and the adaptive driver); this module names them all.
"""

from __future__ import annotations

from guard.stats.paired import (
    AdaptiveResult,
    Look,
    Sampler,
    compare_paired,
    measure_until_conclusive,
    median_ci,
)
from guard.stats.rounds_stats import CONTENTION_EFFECT, MEDIAN_SAFE, compare_rounds
from guard.stats.verdicts import (
    DEFAULT_REGRESS_PCT,
    DEFAULT_RUN_NOISE_PCT,
    IMPROVED,
    INCONCLUSIVE,
    PASS,
    REGRESSED,
    VERDICTS,
    Comparison,
    RegressConfig,
    with_noise,
)

__all__ = [
    "CONTENTION_EFFECT",
    "DEFAULT_REGRESS_PCT",
    "DEFAULT_RUN_NOISE_PCT",
    "IMPROVED",
    "INCONCLUSIVE",
    "MEDIAN_SAFE",
    "PASS",
    "REGRESSED",
    "VERDICTS",
    "AdaptiveResult",
    "Comparison",
    "Look",
    "RegressConfig",
    "Sampler",
    "compare_paired",
    "compare_rounds",
    "measure_until_conclusive",
    "median_ci",
    "with_noise",
]
