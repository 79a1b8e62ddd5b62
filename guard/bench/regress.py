"""Regression statistics: is HEAD slower than BASE, beyond noise?

A verdict needs two things (asv's rule): the difference is *significant* (a one-sided
non-parametric test rejects "no change" at ``alpha`` and the confidence interval of the
ratio excludes 1) and it is *large* (the point estimate of head/base exceeds
``1 + threshold``). Either alone is wrong on shared runners: significance alone flags a
real but harmless 0.3% on 50,000 samples; size alone is a coin toss on one noisy mean.

Three designs, three estimators:

- rounds (two results files, two processes measured at different times): the independent
  units are the *rounds* (each a freshly loaded session, see guard.bench.timer), not the
  iterations. Within one process, thousands of iterations share one memory placement,
  one clock state and one co-tenant; between two processes those differ, and treating
  every iteration as independent turns a 5% process-to-process offset into p=1e-159.
  The estimate is the difference of the mean log round medians; its standard error is
  Welch's from the two sides' round-to-round variances, floored by the calibrated noise
  when ``guard calibrate`` measured one (``noise_pct``); the test is Welch's t on the log
  round medians, with its CI and minimum detectable effect from the t distribution.
- unpaired samples (``compare_unpaired``, iterations as units): ratio of medians,
  Mann-Whitney U each way, percentile bootstrap CI. Only sound when the samples are
  independent draws (simulations, tests); results files are judged on rounds.
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
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace

import numpy as np
from scipy import stats

from guard.bench.preflight import CPU_SHARE_WARN
from guard.errors import UsageError

PASS = "pass"
REGRESSED = "regressed"
IMPROVED = "improved"
INCONCLUSIVE = "inconclusive"
VERDICTS = (PASS, REGRESSED, IMPROVED, INCONCLUSIVE)

# A 3% creep is the kind a fixed percentage on one mean misses; suites may raise it.
# ``guard compare`` and ``guard run --baseline`` use it for a model whose suite sets no
# ``checks.latency.regress_pct``.
DEFAULT_REGRESS_PCT = 3.0

# How far a fully busy other core moved 1-thread medians on this kind of runner (FACTS.md:
# -17% to +28%): the latency shift a contention difference alone can explain, per unit.
CONTENTION_EFFECT = 0.28
# A round median is untouched by waiting that lands in fewer than half of its calls; a
# side whose preemptions touched fewer than this share of any round's calls is not
# discounted for them.
MEDIAN_SAFE = 0.25
# One-sided 99% normal quantile: calibrated noise is a 99% bound on |A/A ratio - 1|.
_Z99 = 2.3263478740408408


@dataclass(frozen=True)
class RegressConfig:
    """How a comparison is judged. ``alpha`` is one-sided per direction."""

    regress_pct: float = DEFAULT_REGRESS_PCT
    alpha: float = 0.01
    noise_pct: float | None = None
    noise_k: float = 1.0
    power: float = 0.8
    n_boot: int = 2000
    min_samples: int = 8
    min_rounds: int = 3
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 0.5:
            raise UsageError(f"alpha must be in (0, 0.5), got {self.alpha}")
        if self.regress_pct < 0:
            raise UsageError(f"regress_pct must be >= 0, got {self.regress_pct}")
        if self.noise_pct is not None and self.noise_pct < 0:
            raise UsageError(f"noise_pct must be >= 0, got {self.noise_pct}")

    @property
    def threshold_pct(self) -> float:
        noise = (self.noise_pct or 0.0) * self.noise_k
        return max(self.regress_pct, noise)


@dataclass(frozen=True)
class Comparison:
    """One head-vs-base judgement. ``ratio`` is head/base latency (>1 is slower)."""

    verdict: str
    ratio: float
    ci: tuple[float, float]
    p_slower: float
    p_faster: float
    threshold_pct: float
    mde_pct: float
    n_base: int
    n_head: int
    method: str
    alpha: float
    reason: str

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ci"] = list(self.ci)
        return d


def _clean(samples: Sequence[float], side: str) -> np.ndarray:
    a = np.asarray(samples, dtype=float).ravel()
    if a.size and (not np.all(np.isfinite(a)) or np.any(a <= 0)):
        raise UsageError(f"{side} samples must be finite and positive latencies")
    return a


def _decide(
    ratio: float,
    lo: float,
    hi: float,
    p_slower: float,
    p_faster: float,
    cfg: RegressConfig,
    alpha: float,
) -> tuple[str, str]:
    t = cfg.threshold_pct / 100.0
    slower = p_slower < alpha and lo > 1.0
    faster = p_faster < alpha and hi < 1.0
    pct = (ratio - 1.0) * 100.0
    if slower and ratio >= 1.0 + t:
        return REGRESSED, f"{pct:+.1f}% is significant (p={p_slower:.2g}) and above {t * 100:.1f}%"
    if faster and ratio <= 1.0 / (1.0 + t):
        return IMPROVED, f"{pct:+.1f}% is significant (p={p_faster:.2g}) and beyond -{t * 100:.1f}%"
    if hi < 1.0 + t:
        return PASS, f"CI upper bound {(hi - 1) * 100:+.1f}% is below the {t * 100:.1f}% threshold"
    if slower:
        why = f"significantly slower ({pct:+.1f}%) but the estimate is under {t * 100:.1f}%"
    else:
        why = f"CI [{(lo - 1) * 100:+.1f}%, {(hi - 1) * 100:+.1f}%] straddles the {t * 100:.1f}% threshold"
    return INCONCLUSIVE, why


def _mde_pct(lo: float, hi: float, cfg: RegressConfig, alpha: float) -> float:
    """Smallest slowdown flagged with probability ``cfg.power``, from the CI's width.

    Both conditions must hold with that probability: the estimate clears the threshold
    (log(1+t) + z_power * se) and the test is significant ((z_alpha + z_power) * se).
    """
    if not (math.isfinite(lo) and math.isfinite(hi) and lo > 0):
        return math.inf
    z_a, z_p = stats.norm.ppf(1 - alpha), stats.norm.ppf(cfg.power)
    se = (math.log(hi) - math.log(lo)) / (2 * z_a)
    t = math.log1p(cfg.threshold_pct / 100.0)
    return (math.exp(max(t + z_p * se, (z_a + z_p) * se)) - 1.0) * 100.0


def _too_few(n_base: int, n_head: int, cfg: RegressConfig, method: str, alpha: float) -> Comparison:
    return Comparison(
        verdict=INCONCLUSIVE,
        ratio=math.nan,
        ci=(math.nan, math.nan),
        p_slower=1.0,
        p_faster=1.0,
        threshold_pct=cfg.threshold_pct,
        mde_pct=math.inf,
        n_base=n_base,
        n_head=n_head,
        method=method,
        alpha=alpha,
        reason=f"too few samples ({n_base} base, {n_head} head; need {cfg.min_samples})",
    )


def compare_unpaired(
    base: Sequence[float],
    head: Sequence[float],
    config: RegressConfig | None = None,
    *,
    alpha: float | None = None,
) -> Comparison:
    """Judge two independent sample sets (ms). ``alpha`` overrides ``config.alpha``."""
    cfg = config or RegressConfig()
    a = cfg.alpha if alpha is None else alpha
    method = "mann-whitney+bootstrap"
    b, h = _clean(base, "base"), _clean(head, "head")
    if min(b.size, h.size) < cfg.min_samples:
        return _too_few(b.size, h.size, cfg, method, a)
    ratio = float(np.median(h) / np.median(b))
    p_slower = float(stats.mannwhitneyu(h, b, alternative="greater").pvalue)
    p_faster = float(stats.mannwhitneyu(h, b, alternative="less").pvalue)
    if np.all(h == h[0]) and np.all(b == b[0]):
        lo = hi = ratio  # degenerate: no spread, the bootstrap has nothing to say
    else:
        res = stats.bootstrap(
            (h, b),
            lambda x, y, axis: np.median(x, axis=axis) / np.median(y, axis=axis),
            paired=False,
            vectorized=True,
            n_resamples=cfg.n_boot,
            batch=max(1, int(2e7 // max(h.size, b.size))),
            confidence_level=1 - 2 * a,
            method="percentile",
            rng=np.random.default_rng(cfg.seed),
        )
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    verdict, reason = _decide(ratio, lo, hi, p_slower, p_faster, cfg, a)
    return Comparison(
        verdict, ratio, (lo, hi), p_slower, p_faster, cfg.threshold_pct,
        _mde_pct(lo, hi, cfg, a), int(b.size), int(h.size), method, a, reason,
    )  # fmt: skip


def _finite_positive(values: Sequence[float], side: str) -> np.ndarray:
    a = np.asarray(values, dtype=float).ravel()
    if a.size and (not np.all(np.isfinite(a)) or np.any(a <= 0)):
        raise UsageError(f"{side} round medians must be finite and positive latencies")
    return a


def _mean(values: Sequence[float | None]) -> float | None:
    seen = [float(v) for v in values if isinstance(v, int | float) and math.isfinite(v)]
    return sum(seen) / len(seen) if seen else None


def _bias(
    contention: tuple[float | None, float | None],
    cpu_share: tuple[float | None, float | None],
    preempted: tuple[float | None, float | None] = (None, None),
) -> tuple[float, list[str]]:
    """How far (as a fraction) the sides' measuring conditions alone can move the ratio.

    A contention difference moves 1-thread latency by up to CONTENTION_EFFECT per unit; a
    preempted side's samples hold up to 1/share - 1 of waiting, unless its preemptions
    touched fewer than MEDIAN_SAFE of its calls: then the round medians never saw them.
    """
    bias, why = 0.0, []
    cb, ch = contention
    if cb is not None and ch is not None and abs(cb - ch) > 0:
        b = CONTENTION_EFFECT * abs(cb - ch)
        bias += b
        if b >= 0.005:
            why.append(
                f"contention differs (base {cb:.0%}, head {ch:.0%} of the spare CPU "
                f"used by other processes: up to {b:.0%} from a co-tenant alone)"
            )
    for side, share, frac in zip(("base", "head"), cpu_share, preempted, strict=True):
        if frac is not None and frac < MEDIAN_SAFE:
            continue  # waiting sat in a few calls: outliers the round medians ignore
        if share is not None and 0 < share < CPU_SHARE_WARN:
            b = 1.0 / share - 1.0
            bias += b
            why.append(
                f"{side} was preempted (its worst round got {share:.0%} of a core: up "
                f"to {b:.0%} of waiting in its samples)"
            )
    return bias, why


def _discount(
    verdict: str,
    reason: str,
    ratio: float,
    lo: float,
    hi: float,
    bias: float,
    why: list[str],
    cfg: RegressConfig,
) -> tuple[str, str]:
    """The verdict once the measuring conditions' bias is allowed for (see module docstring)."""
    if bias <= 0 or verdict == INCONCLUSIVE:
        return verdict, reason
    f, t = 1.0 + bias, cfg.threshold_pct / 100.0
    holds = {
        REGRESSED: lo / f > 1.0 and ratio / f >= 1.0 + t,
        IMPROVED: hi * f < 1.0 and ratio * f <= 1.0 / (1.0 + t),
        PASS: hi * f < 1.0 + t,
    }[verdict]
    if holds:
        return verdict, f"{reason} (holds with {'; '.join(why)})" if why else reason
    return INCONCLUSIVE, (
        f"{'; '.join(why)}: the measured {(ratio - 1) * 100:+.1f}% cannot be told from the "
        f"measuring conditions at a {t * 100:.1f}% threshold (would be {verdict})"
    )


def compare_rounds(
    base: Sequence[float],
    head: Sequence[float],
    config: RegressConfig | None = None,
    *,
    alpha: float | None = None,
    contention: tuple[Sequence[float | None], Sequence[float | None]] = ((), ()),
    cpu_share: tuple[float | None, float | None] = (None, None),
    preempted: tuple[float | None, float | None] = (None, None),
    cpu: tuple[Sequence[float], Sequence[float]] | None = None,
) -> Comparison:
    """Judge two results files on their rounds: ``base``/``head`` are round medians (ms).

    ``contention`` holds each side's per-round contention and ``cpu_share`` each side's
    worst round's share of a core; either can make the comparison inconclusive (see the
    module docstring). ``cpu`` holds each side's per-round CPU time per call of a
    1-thread session: when preemption alone left the wall-time verdict inconclusive,
    the rounds are judged on it instead (method ``welch-rounds-cpu``).
    """
    cfg = config or RegressConfig()
    a = cfg.alpha if alpha is None else alpha
    method = "welch-rounds"
    b, h = _finite_positive(base, "base"), _finite_positive(head, "head")
    if min(b.size, h.size) < cfg.min_rounds:
        c = _too_few(b.size, h.size, cfg, method, a)
        return replace(
            c,
            reason=f"too few rounds ({b.size} base, {h.size} head; need "
            f"{cfg.min_rounds}): set defaults.measure.rounds",
        )
    xb, xh = np.log(b), np.log(h)
    d = float(xh.mean() - xb.mean())
    ratio = math.exp(d)
    vb, vh = float(xb.var(ddof=1)), float(xh.var(ddof=1))
    if cfg.noise_pct:
        # The calibrated A/A noise bounds |log ratio| of two loads at 99%; one load's own
        # variance is half of that ratio's.
        floor = (math.log1p(cfg.noise_pct / 100.0) / _Z99) ** 2 / 2.0
        vb, vh = max(vb, floor), max(vh, floor)
    ub, uh = vb / b.size, vh / h.size
    se = math.sqrt(ub + uh)
    if se == 0.0:
        lo = hi = ratio
        p_slower = 0.0 if d > 0 else 1.0
        p_faster = 0.0 if d < 0 else 1.0
        t_a = t_p = 0.0
    else:
        df = (ub + uh) ** 2 / (ub**2 / (b.size - 1) + uh**2 / (h.size - 1))
        t_a, t_p = float(stats.t.ppf(1 - a, df)), float(stats.t.ppf(cfg.power, df))
        lo, hi = math.exp(d - t_a * se), math.exp(d + t_a * se)
        p_slower, p_faster = float(stats.t.sf(d / se, df)), float(stats.t.cdf(d / se, df))
    verdict, reason = _decide(ratio, lo, hi, p_slower, p_faster, cfg, a)
    thr = math.log1p(cfg.threshold_pct / 100.0)
    mde = (math.exp(max(thr + t_p * se, (t_a + t_p) * se)) - 1.0) * 100.0
    conditions = (_mean(contention[0]), _mean(contention[1]))
    bias, why = _bias(conditions, cpu_share, preempted)
    was = verdict
    verdict, reason = _discount(verdict, reason, ratio, lo, hi, bias, why, cfg)
    if verdict == INCONCLUSIVE and cpu is not None:
        by_cpu = _on_cpu_time(cpu, cfg, a, contention, bias - _bias(conditions, (None, None))[0])
        if by_cpu is not None:
            preempted_why = "; ".join(w for w in why if "preempted" in w)
            return replace(
                by_cpu,
                reason=f"judged on CPU time per call ({preempted_why}; wall time said "
                f"{was} {(ratio - 1) * 100:+.1f}%): {by_cpu.reason}",
            )
    if verdict == INCONCLUSIVE:
        reason += f"; these rounds could detect a slowdown of {mde:.1f}% or more"
    return Comparison(
        verdict, ratio, (lo, hi), p_slower, p_faster, cfg.threshold_pct, mde,
        int(b.size), int(h.size), method, a, reason,
    )  # fmt: skip


def _on_cpu_time(
    cpu: tuple[Sequence[float], Sequence[float]],
    cfg: RegressConfig,
    alpha: float,
    contention: tuple[Sequence[float | None], Sequence[float | None]],
    preemption_bias: float,
) -> Comparison | None:
    """The rounds judged on CPU time per call, when that settles what preemption did not.

    Only where preemption was what made the wall-time verdict inconclusive, every round of
    both sides has a CPU time, and the CPU-time verdict is conclusive; a contention
    difference still discounts it (a co-tenant slows a call's work too, through the
    shared caches and memory).
    """
    cb, ch = (np.asarray(x, dtype=float) for x in cpu)
    if preemption_bias <= 0 or min(cb.size, ch.size) < cfg.min_rounds:
        return None
    if not (np.all(np.isfinite(cb)) and np.all(np.isfinite(ch))):
        return None
    if np.any(cb <= 0) or np.any(ch <= 0):
        return None
    comp = compare_rounds(list(cb), list(ch), cfg, alpha=alpha, contention=contention)
    if comp.verdict == INCONCLUSIVE:
        return None
    return replace(comp, method="welch-rounds-cpu")


def median_ci(x: np.ndarray, alpha: float) -> tuple[float, float]:
    """Distribution-free CI for the median with coverage >= 1 - 2*alpha (order statistics)."""
    s = np.sort(x)
    n = s.size
    k = int(stats.binom.ppf(alpha, n, 0.5))  # P(Bin(n, 1/2) <= k-1) < alpha
    if k < 1:
        return -math.inf, math.inf
    return float(s[k - 1]), float(s[n - k])


def compare_paired(
    base: Sequence[float],
    head: Sequence[float],
    config: RegressConfig | None = None,
    *,
    alpha: float | None = None,
) -> Comparison:
    """Judge interleaved pairs: ``base[i]`` and ``head[i]`` were measured side by side."""
    cfg = config or RegressConfig()
    a = cfg.alpha if alpha is None else alpha
    method = "wilcoxon-paired"
    b, h = _clean(base, "base"), _clean(head, "head")
    if b.size != h.size:
        raise UsageError(f"paired samples need equal lengths, got {b.size} base and {h.size} head")
    if b.size < cfg.min_samples:
        return _too_few(b.size, h.size, cfg, method, a)
    logr = np.log(h) - np.log(b)
    ratio = float(math.exp(np.median(logr)))
    if np.all(logr == 0):
        p_slower = p_faster = 1.0
    else:
        p_slower = float(stats.wilcoxon(logr, alternative="greater").pvalue)
        p_faster = float(stats.wilcoxon(logr, alternative="less").pvalue)
    llo, lhi = median_ci(logr, a)
    lo, hi = math.exp(llo), math.exp(lhi)
    verdict, reason = _decide(ratio, lo, hi, p_slower, p_faster, cfg, a)
    return Comparison(
        verdict, ratio, (lo, hi), p_slower, p_faster, cfg.threshold_pct,
        _mde_pct(lo, hi, cfg, a), int(b.size), int(h.size), method, a, reason,
    )  # fmt: skip


# --- adaptive measurement ----------------------------------------------------------------

Sampler = Callable[[int], tuple[Sequence[float], Sequence[float]]]


@dataclass(frozen=True)
class Look:
    n: int
    elapsed_s: float
    verdict: str
    ratio: float


@dataclass
class AdaptiveResult:
    comparison: Comparison
    base: list[float]
    head: list[float]
    looks: list[Look] = field(default_factory=list)
    elapsed_s: float = 0.0
    stopped: str = ""  # "conclusive" | "budget" | "max_looks"

    def to_dict(self) -> dict:
        d = self.comparison.to_dict()
        d.update(
            looks=[asdict(lk) for lk in self.looks],
            elapsed_s=self.elapsed_s,
            stopped=self.stopped,
        )
        return d


def measure_until_conclusive(
    sample: Sampler,
    *,
    paired: bool,
    config: RegressConfig | None = None,
    budget_s: float = 10.0,
    initial: int = 50,
    max_looks: int = 6,
    clock: Callable[[], float] = time.monotonic,
) -> AdaptiveResult:
    """Draw samples from ``sample(n) -> (base, head)`` until a verdict is conclusive.

    Looks happen at ``initial * 2**k`` samples per side. Each look tests at
    ``alpha / max_looks`` so the whole procedure keeps its false-positive rate. Samples
    are drawn in chunks of ``initial // 5`` (at least ``min_samples``) until ``budget_s``
    (wall time for both sides together, measured with ``clock``) is spent; the look after
    the deadline is the last, with what was drawn by then. A model slow enough that the
    first look's samples overrun the budget is judged on fewer than ``initial``.
    """
    cfg = config or RegressConfig()
    if initial < 1 or max_looks < 1:
        raise UsageError("initial and max_looks must be >= 1")
    judge = compare_paired if paired else compare_unpaired
    look_alpha = cfg.alpha / max_looks
    chunk = min(initial, max(cfg.min_samples, initial // 5))
    base: list[float] = []
    head: list[float] = []
    looks: list[Look] = []
    t0 = clock()
    want = initial
    comp: Comparison | None = None
    stopped = "max_looks"
    for _ in range(max_looks):
        # Draw in chunks and stop at the deadline, so a slow model or a machine that turns
        # busy mid-batch overruns the budget by at most one chunk.
        while len(base) < want and (len(base) < chunk or clock() - t0 < budget_s):
            nb, nh = sample(min(chunk, want - len(base)))
            base.extend(float(x) for x in nb)
            head.extend(float(x) for x in nh)
        comp = judge(base, head, cfg, alpha=look_alpha)
        elapsed = clock() - t0
        looks.append(Look(len(base), elapsed, comp.verdict, comp.ratio))
        if comp.verdict != INCONCLUSIVE:
            stopped = "conclusive"
            break
        if elapsed >= budget_s:
            stopped = "budget"
            break
        want = 2 * len(base)
    assert comp is not None
    return AdaptiveResult(comp, base, head, looks, clock() - t0, stopped)


def judge(
    base: Sequence[float],
    head: Sequence[float],
    config: RegressConfig | None = None,
    *,
    paired: bool = False,
) -> Comparison:
    """Dispatch to the paired or unpaired comparison."""
    return (compare_paired if paired else compare_unpaired)(base, head, config)


def with_noise(config: RegressConfig, noise_pct: float | None) -> RegressConfig:
    """The same config with a calibrated noise level (None keeps the old one)."""
    return config if noise_pct is None else replace(config, noise_pct=noise_pct)
