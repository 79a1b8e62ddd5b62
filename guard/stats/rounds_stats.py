"""Two results files judged on their rounds (Welch's t on log round medians, adjusted for
the host's speed where the rounds carry its probe).

The design is in guard.stats.regress's docstring: rounds as the independent units,
calibrated noise as a floor, the measuring conditions (contention, preemption) as a bias
bound on the verdict, and CPU time per call where preemption alone left it open.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy import stats

from guard.core.errors import UsageError
from guard.measure.preflight import CPU_SHARE_WARN
from guard.stats.verdicts import (
    IMPROVED,
    INCONCLUSIVE,
    PASS,
    REGRESSED,
    Comparison,
    RegressConfig,
    decide,
    too_few,
)

# How far a fully busy other core moved 1-thread medians on this kind of runner (FACTS.md:
# -17% to +28%): the latency shift a contention difference alone can explain, per unit.
CONTENTION_EFFECT = 0.28
# A round median is untouched by waiting that lands in fewer than half of its calls; a
# side whose preemptions touched fewer than this share of any round's calls is not
# discounted for them.
MEDIAN_SAFE = 0.25
# One-sided 99% normal quantile: calibrated noise is a 99% bound on |A/A ratio - 1|.
_Z99 = 2.3263478740408408
# Each side's per-round host-speed readings: a number per round, or a tuple of probes.
HostReadings = tuple[Sequence[Any], Sequence[Any]]


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


def _host_bias(host: HostReadings | None, alpha: float) -> tuple[float, list[str]]:
    """How far the host's own speed (guard.measure.host_speed) alone can move the ratio.

    The part of the probe's base-to-head change beyond its own noise (the one-sided
    ``alpha`` Welch bound on its log rounds): 0 when the machine ran as fast for both.
    """
    if host is None:
        return 0.0, []
    sides = [log_readings(x, len(x)) for x in host]
    if sides[0] is None or sides[1] is None:
        return 0.0, []
    hb, hh = sides[0][:, 0], sides[1][:, 0]  # the interpreter-and-memory probe
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


@dataclass(frozen=True)
class HostAdjusted:
    """A difference of mean log round medians adjusted for the host's speed (ANCOVA).

    ``d`` is the adjusted head - base difference; its variance is ``s2 * scale``, where
    ``s2`` is the residual variance of one round (``df`` degrees of freedom). ``slopes``
    are the pooled within-side slopes of log round median on each probe's log reading
    (taken halfway to undiluted where the readings' error is known) and ``dx`` each
    probe's head - base change in log.
    """

    d: float
    s2: float
    scale: float  # 1/n_base + 1/n_head + dx' (X'X)^-1 dx: the estimate's variance over s2
    df: int
    slopes: tuple[float, ...]
    dx: tuple[float, ...]
    reliability: tuple[float, ...] = ()  # each probe's real share of its within-side variance
    under: float = 0.0  # how far the slopes' dilution can still move the ratio (a bias bound)


def log_readings(x: Sequence[Any], n: int) -> np.ndarray | None:
    """One side's readings as an (n rounds, k probes) array of logs; None unless each of
    its n rounds has a finite positive reading of every probe."""
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        return None
    a = a.reshape(-1, 1) if a.ndim == 1 else a
    if a.ndim != 2 or a.shape[0] != n or a.shape[1] == 0:
        return None
    if not (np.all(np.isfinite(a)) and np.all(a > 0)):
        return None
    return np.log(a)


def _errors(x: Sequence[Any], n: int, k: int) -> np.ndarray | None:
    """One side's per-round error variances of the log mean reading, (n, k); None unless
    every round has a finite non-negative one for each of the k probes."""
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        return None
    a = a.reshape(-1, 1) if a.ndim == 1 else a
    if a.shape != (n, k) or not (np.all(np.isfinite(a)) and np.all(a >= 0)):
        return None
    return a


# The least real share of a probe's within-side variance (the rest its readings' own
# error) that the dilution bound assumes: below it, 1 / reliability - 1 has no bound.
MIN_RELIABILITY = 0.2


def pooled_slopes(
    ys: Sequence[np.ndarray], xs: Sequence[np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """The pooled within-group slopes of ``ys`` on ``xs`` (each group's (n, k) covariates
    centred on its own mean): (slopes, X'X, centred X, centred y), or None where X'X is
    singular (a covariate flat within every group, or two that move as one)."""
    cx = np.vstack([x - x.mean(axis=0) for x in xs])
    cy = np.concatenate([y - y.mean() for y in ys])
    xtx = cx.T @ cx
    if np.linalg.cond(xtx) > 1e12:
        return None
    return np.linalg.solve(xtx, cx.T @ cy), xtx, cx, cy


def host_adjusted(
    xb: np.ndarray,
    xh: np.ndarray,
    host: HostReadings | None,
    error: HostReadings | None = None,
) -> HostAdjusted | None:
    """The rounds' difference adjusted for host speed, or None where it cannot be estimated.

    Model: log round median = side level + sum_k slope_k x log reading_k + error, the
    slopes common to both sides and estimated from the rounds' variation within each side
    (the pooled within-group slopes of an analysis of covariance). The probes (guard.measure.
    host_speed) are read around and through every round, so a round on a slower machine
    has slower readings; the slopes say how much of that a model feels (on the 2-vCPU
    runner, 0.5-0.8 of the interpreter probe for a call dominated by interpreter overhead,
    0.1-0.3 for a convolution, which feels the vector-unit probe instead), and the adjusted
    difference is what is left once each side's mean readings are accounted for. Its
    variance carries the slopes' own uncertainty (``dx' (X'X)^-1 dx``), so probes that
    moved between the sides while staying flat within each widen the interval instead of
    deciding it. None unless every round of both sides has a reading of every probe, and
    there are at least 3 degrees of freedom left.

    ``error`` holds each round's error variance of its log mean reading per probe (the
    spread of the round's several readings over their count). A reading that is partly
    noise flattens a slope fitted on it by its reliability, the real share of its
    within-side variance (regression dilution: on the 2-vCPU runner the within-run slopes
    were half the between-run ones). The reliability estimated from the readings' spread
    is a lower bound on the real one (a round's readings also differ because the machine's
    speed really moved within it), so the true slope lies between the fitted one and the
    fitted one over the reliability (floored at ``MIN_RELIABILITY``). The adjustment takes
    each slope at the middle of that range, which halves the worst case either way, and
    ``under``, half the range times the probe's change, is what that can still leave of
    the host's change in the estimate: the comparison treats it as a bias bound, as it
    does contention. The slopes' own uncertainty is scaled with them.
    """
    if host is None:
        return None
    hb, hh = log_readings(host[0], xb.size), log_readings(host[1], xh.size)
    if hb is None or hh is None or hb.shape[1] != hh.shape[1]:
        return None
    k = hb.shape[1]
    df = int(xb.size + xh.size - 2 - k)
    if df < 3:
        return None
    fit = pooled_slopes([xb, xh], [hb, hh])
    if fit is None:
        return None  # a probe flat within both sides (or two probes that move as one)
    slopes, xtx, cx, cy = fit
    dx = hh.mean(axis=0) - hb.mean(axis=0)
    d = float(xh.mean() - xb.mean() - dx @ slopes)
    res = cy - cx @ slopes
    s2 = float(res @ res) / df
    sdx = dx  # the probes' change as the slopes' uncertainty sees it (scaled with them)
    eb = _errors(error[0], xb.size, k) if error is not None else None
    eh = _errors(error[1], xh.size, k) if error is not None else None
    reliability: tuple[float, ...] = ()
    under = 0.0
    if eb is not None and eh is not None:
        # E[centred sum of squares] = the real one + (n - 1) / n x the readings' error
        noise = eb.sum(axis=0) * (xb.size - 1) / xb.size + eh.sum(axis=0) * (xh.size - 1) / xh.size
        lam = np.clip(1.0 - noise / np.diag(xtx), MIN_RELIABILITY, 1.0)
        reliability = tuple(float(v) for v in lam)
        # A slope fitted on readings a share lam of which is real is lam x the true one,
        # lam at least the estimate: the true slope is in [slope, slope / lam]. Take the
        # middle; half the range, times the probe's change, is what can be left.
        stretch = (1.0 + 1.0 / lam) / 2.0
        under = float(np.abs(slopes * dx) @ (1.0 / lam - 1.0)) / 2.0
        d -= float(dx @ (slopes * (stretch - 1.0)))
        slopes = slopes * stretch
        sdx = stretch * dx
    scale = 1.0 / xb.size + 1.0 / xh.size + float(sdx @ np.linalg.solve(xtx, sdx))
    return HostAdjusted(
        d, s2, scale, df, tuple(float(b) for b in slopes), tuple(float(v) for v in dx),
        reliability, math.expm1(under),
    )  # fmt: skip


def _adjusted_note(adj: HostAdjusted, xb: np.ndarray, xh: np.ndarray) -> str:
    """What the host-speed adjustment did, for the verdict's reason."""
    raw = math.expm1(float(xh.mean() - xb.mean())) * 100.0
    names = ("interpreter", "vector")
    read = " and ".join(
        f"{math.expm1(v) * 100.0:+.1f}% ({names[i] if i < len(names) else f'probe {i}'})"
        for i, v in enumerate(adj.dx)
    )
    slopes = ", ".join(f"{b:.2f}" for b in adj.slopes)
    return (
        f" (adjusted for host speed: the probes read {read} during head, slopes {slopes}; "
        f"unadjusted {raw:+.1f}%)"
    )


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
    host: HostReadings | None = None,
    host_error: HostReadings | None = None,
) -> Comparison:
    """Judge two results files on their rounds: ``base``/``head`` are round medians (ms).

    ``contention`` holds each side's per-round contention and ``cpu_share`` each side's
    worst round's share of a core; either can make the comparison inconclusive (see the
    module docstring). ``cpu`` holds each side's per-round CPU time per call of a
    1-thread session: when preemption alone left the wall-time verdict inconclusive,
    the rounds are judged on it instead (method ``welch-rounds-cpu``). ``host`` holds each
    side's per-round host-speed readings: with one for every round, the difference is
    adjusted for the machine's own speed (``host_adjusted``, method
    ``ancova-rounds-host``; ``host_error`` holds each round's error variance of its mean
    readings, from which what the slopes' dilution can leave bounds the verdict);
    otherwise a change in the readings bounds the verdict as a contention difference does.
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
    floor = 0.0
    if cfg.noise_pct:
        # The calibrated A/A noise bounds |log ratio| of two loads at 99%; one load's own
        # variance is half of that ratio's.
        floor = (math.log1p(cfg.noise_pct / 100.0) / _Z99) ** 2 / 2.0
    run_var = math.log1p(cfg.run_noise_pct / 100.0) ** 2  # each side's run level
    adj = host_adjusted(xb, xh, host, host_error)
    if adj is not None:
        method = "ancova-rounds-host"
        d = adj.d
        est_var = max(adj.s2, floor) * adj.scale
        est_df = float(adj.df)
    else:
        d = float(xh.mean() - xb.mean())
        ub = max(float(xb.var(ddof=1)), floor) / b.size
        uh = max(float(xh.var(ddof=1)), floor) / h.size
        est_var = ub + uh
        # Welch-Satterthwaite degrees of freedom of the two sides' variances
        den = ub**2 / (b.size - 1) + uh**2 / (h.size - 1)
        est_df = est_var**2 / den if den > 0 else math.inf
    ratio = math.exp(d)
    total = est_var + 2.0 * run_var
    se = math.sqrt(total)
    if se == 0.0:
        lo = hi = ratio
        p_slower = 0.0 if d > 0 else 1.0
        p_faster = 0.0 if d < 0 else 1.0
        t_a = t_p = 0.0
    else:
        # The run term is a known variance: it adds to the total but nothing to the
        # estimate's own uncertainty (Satterthwaite with one known term).
        df = total**2 / (est_var**2 / est_df) if est_var > 0 and est_df > 0 else math.inf
        t_a, t_p = float(stats.t.ppf(1 - a, df)), float(stats.t.ppf(cfg.power, df))
        lo, hi = math.exp(d - t_a * se), math.exp(d + t_a * se)
        p_slower, p_faster = float(stats.t.sf(d / se, df)), float(stats.t.cdf(d / se, df))
    verdict, reason = decide(ratio, lo, hi, p_slower, p_faster, cfg, a)
    thr = math.log1p(cfg.threshold_pct / 100.0)
    mde = (math.exp(max(thr + t_p * se, (t_a + t_p) * se)) - 1.0) * 100.0
    conditions = (_mean(contention[0]), _mean(contention[1]))
    bias, why = _bias(conditions, cpu_share, preempted)
    preemption_bias = bias - _bias(conditions, (None, None))[0]
    if adj is None:
        host_bias, host_why = _host_bias(host, a)
        bias, why = bias + host_bias, why + host_why
    else:
        host_why = []
        if adj.under >= 0.005:
            bias += adj.under
            why.append(
                f"the probes' readings are partly noise ({', '.join(f'{r:.0%}' for r in adj.reliability)} "
                f"real within the sides), so the slopes, taken halfway to undiluted, can "
                f"leave up to {adj.under:.0%} of the host's change"
            )
    was = verdict
    verdict, reason = _discount(verdict, reason, ratio, lo, hi, bias, why, cfg)
    if adj is not None:
        reason += _adjusted_note(adj, xb, xh)
    if verdict == INCONCLUSIVE and cpu is not None and not host_why:
        by_cpu = _on_cpu_time(cpu, cfg, a, contention, preemption_bias, host, host_error)
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
    host: HostReadings | None,
    host_error: HostReadings | None = None,
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
    comp = compare_rounds(
        list(cb), list(ch), cfg, alpha=alpha, contention=contention, host=host,
        host_error=host_error,
    )  # fmt: skip
    if comp.verdict == INCONCLUSIVE:
        return None
    return replace(comp, method=f"{comp.method}-cpu")
