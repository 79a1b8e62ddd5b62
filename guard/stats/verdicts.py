"""What a comparison says: the verdicts, the judging config and the rule.

guard.stats.regress explains the three designs (rounds, unpaired samples, paired); this
module holds what they share: ``RegressConfig`` (threshold, alpha, power, calibrated
noise), the ``Comparison`` record, the rule that turns a test into a verdict
(``decide``: significant *and* large), and the unpaired samples test.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NotRequired, TypedDict

import numpy as np
from scipy import stats

from guard.core.errors import UsageError
from guard.stats.defaults import DEFAULT_REGRESS_PCT, DEFAULT_RUN_NOISE_PCT

PASS = "pass"
REGRESSED = "regressed"
IMPROVED = "improved"
INCONCLUSIVE = "inconclusive"
VERDICTS = (PASS, REGRESSED, IMPROVED, INCONCLUSIVE)


@dataclass(frozen=True)
class RegressConfig:
    """How a comparison is judged. ``alpha`` is one-sided per direction."""

    regress_pct: float = DEFAULT_REGRESS_PCT
    alpha: float = 0.01
    noise_pct: float | None = None
    noise_k: float = 1.0
    # SD (%) of a run's level that its rounds cannot see (a disturbance longer than the
    # run): added to each side's variance of the mean (guard.stats.rounds_stats).
    run_noise_pct: float = DEFAULT_RUN_NOISE_PCT
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
        if not 0 <= self.run_noise_pct < 100:
            raise UsageError(f"run_noise_pct must be in [0, 100), got {self.run_noise_pct}")

    @property
    def threshold_pct(self) -> float:
        noise = (self.noise_pct or 0.0) * self.noise_k
        return max(self.regress_pct, noise)


class LookJson(TypedDict):
    """One look of an adaptive measurement, as its comparison writes it."""

    n: int
    elapsed_s: float
    verdict: str
    ratio: float


class ComparisonJson(TypedDict):
    """A comparison's JSON (a comparison row's ``stats``): ``Comparison.to_dict``'s keys,
    then what an adaptive or A/B measurement adds."""

    verdict: str
    ratio: float
    ci: list[float]
    p_slower: float
    p_faster: float
    threshold_pct: float
    mde_pct: float
    n_base: int
    n_head: int
    method: str
    alpha: float
    reason: str
    looks: NotRequired[list[LookJson]]
    elapsed_s: NotRequired[float]
    stopped: NotRequired[str]
    inner: NotRequired[int]
    contention: NotRequired[float | None]


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

    def to_dict(self) -> ComparisonJson:
        return {
            "verdict": self.verdict, "ratio": self.ratio, "ci": list(self.ci),
            "p_slower": self.p_slower, "p_faster": self.p_faster,
            "threshold_pct": self.threshold_pct, "mde_pct": self.mde_pct,
            "n_base": self.n_base, "n_head": self.n_head, "method": self.method,
            "alpha": self.alpha, "reason": self.reason,
        }  # fmt: skip


def on_rounds(method: str | None) -> bool:
    """Whether a comparison's units are rounds (``welch-rounds``, ``ancova-rounds-host``...)."""
    return "rounds" in str(method or "").split("-")


def clean_samples(samples: Sequence[float], side: str) -> np.ndarray:
    a = np.asarray(samples, dtype=float).ravel()
    if a.size and (not np.all(np.isfinite(a)) or np.any(a <= 0)):
        raise UsageError(f"{side} samples must be finite and positive latencies")
    return a


def decide(
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


def mde_pct(lo: float, hi: float, cfg: RegressConfig, alpha: float) -> float:
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


def too_few(n_base: int, n_head: int, cfg: RegressConfig, method: str, alpha: float) -> Comparison:
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


def with_noise(config: RegressConfig, noise_pct: float | None) -> RegressConfig:
    """The same config with a calibrated noise level (None keeps the old one)."""
    return config if noise_pct is None else replace(config, noise_pct=noise_pct)
