"""Two results files judged on their rounds (Welch's t on log round medians).

The design is in guard.bench.regress's docstring: rounds as the independent units,
calibrated noise as a floor, the measuring conditions (contention, preemption) as a bias
bound on the verdict, and CPU time per call where preemption alone left it open.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
from scipy import stats

from guard.bench.preflight import CPU_SHARE_WARN
from guard.bench.verdicts import (
    IMPROVED,
    INCONCLUSIVE,
    PASS,
    REGRESSED,
    Comparison,
    RegressConfig,
    decide,
    too_few,
)
from guard.errors import UsageError

# How far a fully busy other core moved 1-thread medians on this kind of runner (FACTS.md:
# -17% to +28%): the latency shift a contention difference alone can explain, per unit.
CONTENTION_EFFECT = 0.28
# A round median is untouched by waiting that lands in fewer than half of its calls; a
# side whose preemptions touched fewer than this share of any round's calls is not
# discounted for them.
MEDIAN_SAFE = 0.25
# One-sided 99% normal quantile: calibrated noise is a 99% bound on |A/A ratio - 1|.
_Z99 = 2.3263478740408408


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


def _host_bias(
    host: tuple[Sequence[float], Sequence[float]] | None, alpha: float
) -> tuple[float, list[str]]:
    """How far the host's own speed (guard.bench.host_speed) alone can move the ratio.

    The part of the probe's base-to-head change beyond its own noise (the one-sided
    ``alpha`` Welch bound on its log rounds): 0 when the machine ran as fast for both.
    """
    if host is None:
        return 0.0, []
    hb, hh = (np.log(np.asarray(x, dtype=float)) for x in host)
    if min(hb.size, hh.size) < 2:
        return 0.0, []
    d = float(hh.mean() - hb.mean())
    ub, uh = float(hb.var(ddof=1)) / hb.size, float(hh.var(ddof=1)) / hh.size
    den = ub**2 / (hb.size - 1) + uh**2 / (hh.size - 1)
    t = float(stats.t.ppf(1 - alpha, (ub + uh) ** 2 / den)) if den > 0 else 0.0
    excess = abs(d) - t * math.sqrt(ub + uh)
    if excess <= 0:
        return 0.0, []
    b = math.expm1(excess)
    if b < 0.005:
        return b, []
    way = "slower" if d > 0 else "faster"
    return b, [
        f"the host ran {math.expm1(abs(d)):.0%} {way} during head (host-speed probe "
        f"{math.exp(hb.mean()):.2f} -> {math.exp(hh.mean()):.2f} ms: up to {b:.0%} from "
        "the machine alone)"
    ]


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
    host: tuple[Sequence[float], Sequence[float]] | None = None,
) -> Comparison:
    """Judge two results files on their rounds: ``base``/``head`` are round medians (ms).

    ``contention`` holds each side's per-round contention and ``cpu_share`` each side's
    worst round's share of a core; either can make the comparison inconclusive (see the
    module docstring). ``cpu`` holds each side's per-round CPU time per call of a
    1-thread session: when preemption alone left the wall-time verdict inconclusive,
    the rounds are judged on it instead (method ``welch-rounds-cpu``). ``host`` holds each
    side's per-round host-speed readings: a change in the machine's own speed bounds the
    verdict as a contention difference does.
    """
    cfg = config or RegressConfig()
    a = cfg.alpha if alpha is None else alpha
    method = "welch-rounds"
    b, h = _finite_positive(base, "base"), _finite_positive(head, "head")
    if min(b.size, h.size) < cfg.min_rounds:
        c = too_few(b.size, h.size, cfg, method, a)
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
    run_var = math.log1p(cfg.run_noise_pct / 100.0) ** 2  # each side's run level
    se = math.sqrt(ub + uh + 2.0 * run_var)
    if se == 0.0:
        lo = hi = ratio
        p_slower = 0.0 if d > 0 else 1.0
        p_faster = 0.0 if d < 0 else 1.0
        t_a = t_p = 0.0
    else:
        # Welch-Satterthwaite degrees of freedom; the run term is a known variance, so it
        # adds to the total but nothing to the estimate's own uncertainty.
        den = ub**2 / (b.size - 1) + uh**2 / (h.size - 1)
        df = (ub + uh + 2.0 * run_var) ** 2 / den if den > 0 else math.inf
        t_a, t_p = float(stats.t.ppf(1 - a, df)), float(stats.t.ppf(cfg.power, df))
        lo, hi = math.exp(d - t_a * se), math.exp(d + t_a * se)
        p_slower, p_faster = float(stats.t.sf(d / se, df)), float(stats.t.cdf(d / se, df))
    verdict, reason = decide(ratio, lo, hi, p_slower, p_faster, cfg, a)
    thr = math.log1p(cfg.threshold_pct / 100.0)
    mde = (math.exp(max(thr + t_p * se, (t_a + t_p) * se)) - 1.0) * 100.0
    conditions = (_mean(contention[0]), _mean(contention[1]))
    bias, why = _bias(conditions, cpu_share, preempted)
    preemption_bias = bias - _bias(conditions, (None, None))[0]
    host_bias, host_why = _host_bias(host, a)
    bias, why = bias + host_bias, why + host_why
    was = verdict
    verdict, reason = _discount(verdict, reason, ratio, lo, hi, bias, why, cfg)
    if verdict == INCONCLUSIVE and cpu is not None and not host_why:
        by_cpu = _on_cpu_time(cpu, cfg, a, contention, preemption_bias)
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
