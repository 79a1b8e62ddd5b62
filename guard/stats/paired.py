"""Interleaved A/B in one process: the paired test and the adaptive driver.

Per-pair log ratios, a Wilcoxon signed-rank test each way and an order-statistics CI
for their median (guard.stats.regress explains why pairing needs far fewer samples);
``measure_until_conclusive`` draws pairs until a verdict is conclusive or the budget is
spent, spending alpha over its looks.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from guard.core.errors import UsageError
from guard.stats.verdicts import (
    INCONCLUSIVE,
    Comparison,
    ComparisonJson,
    RegressConfig,
    clean_samples,
    decide,
    mde_pct,
    too_few,
)


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
    b, h = clean_samples(base, "base"), clean_samples(head, "head")
    if b.size != h.size:
        raise UsageError(f"paired samples need equal lengths, got {b.size} base and {h.size} head")
    if b.size < cfg.min_samples:
        return too_few(b.size, h.size, cfg, method, a)
    logr = np.log(h) - np.log(b)
    ratio = float(math.exp(np.median(logr)))
    if np.all(logr == 0):
        p_slower = p_faster = 1.0
    else:
        p_slower = float(stats.wilcoxon(logr, alternative="greater").pvalue)
        p_faster = float(stats.wilcoxon(logr, alternative="less").pvalue)
    llo, lhi = median_ci(logr, a)
    lo, hi = math.exp(llo), math.exp(lhi)
    verdict, reason = decide(ratio, lo, hi, p_slower, p_faster, cfg, a)
    return Comparison(
        verdict, ratio, (lo, hi), p_slower, p_faster, cfg.threshold_pct,
        mde_pct(lo, hi, cfg, a), int(b.size), int(h.size), method, a, reason,
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

    def to_dict(self) -> ComparisonJson:
        d = self.comparison.to_dict()
        d["looks"] = [
            {"n": lk.n, "elapsed_s": lk.elapsed_s, "verdict": lk.verdict, "ratio": lk.ratio}
            for lk in self.looks
        ]
        d["elapsed_s"] = self.elapsed_s
        d["stopped"] = self.stopped
        return d


def measure_until_conclusive(
    sample: Sampler,
    *,
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
        comp = compare_paired(base, head, cfg, alpha=look_alpha)
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
