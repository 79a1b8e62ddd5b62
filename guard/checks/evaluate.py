"""Checks: each gate records its value, bound, status and one line saying why.

Statuses: ``pass``, ``fail``, ``skip`` (not applicable here, with the reason), ``created``
(a golden was created on this run: nothing to compare against yet), ``error``.
A result's facts (numerics, accuracy, latency, baseline comparison, partitions, memory,
tuning) are gathered into one ``Facts`` record; ``evaluate`` runs every configured check
from it in one call. Adding a check means touching this module and the suite schema only.

A result's verdict is ``error`` if guard could not run it, ``fail`` if any check
failed, ``inconclusive`` if a latency bound was only met or missed on a truncated
measurement, or missed while rounds were contended (unless ``latency.strict``), else ``pass``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypedDict, TypeVar, cast

from guard.checks.arena import arena_verdict
from guard.checks.facts import Facts
from guard.checks.quantization import quantization_verdict
from guard.core.json_types import Json
from guard.measure.preflight import contention_text
from guard.results.counted import Counted
from guard.results.documents import CountedRow, RowStats
from guard.results.manifest import MissedKey, TuningCache
from guard.results.result import (
    Contention,
    Latency,
    MemoryBudget,
    Numerics,
    Partitions,
    Quantization,
)
from guard.stats.regress import DEFAULT_REGRESS_PCT
from guard.stats.verdicts import on_rounds
from guard.suite import latency_bound
from guard.suite.check_blocks import (
    AccuracyBound,
    ArenaBound,
    CheckBlocks,
    LatencyBounds,
    PartitionsBound,
    QuantizationBounds,
    Tolerance,
    TuningBound,
)

_T = TypeVar("_T")

# Backends whose speed depends on a tuned-schedule cache.
TUNED_BACKENDS = frozenset({"tvm"})


class CheckJson(TypedDict):
    """One check as a result writes it."""

    name: str
    status: str
    value: Json
    bound: Json
    message: str


@dataclass
class Check:
    name: str
    status: str
    value: Any
    bound: Any
    message: str

    def to_dict(self) -> CheckJson:
        return cast(CheckJson, asdict(self))  # its fields are CheckJson's keys


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def latency_checks(
    cfg: LatencyBounds,
    stats: Latency,
    arch: str,
    truncated: bool,
    contention: Contention | None = None,
) -> list[Check]:
    """One check per latency bound. A bound missed while rounds were contended is
    inconclusive (the machine, not the model, may have missed it) unless ``strict: true``."""
    out = []
    contended = bool(contention and contention.flagged) and not cfg.strict
    bounds = dict(cfg.bounds())
    for key, value in (("p50_ms", stats.p50), ("p90_ms", stats.p90), ("p99_ms", stats.p99)):
        if key not in bounds:
            continue
        bound = latency_bound(bounds[key], arch)
        name = f"latency.{key[:-3]}"
        if bound is None:
            out.append(Check(name, "skip", value, None, f"no {key} bound for arch {arch}"))
            continue
        value = _measured(value, key[:-3])
        ok = value <= bound
        status = "pass" if ok else "fail"
        msg = (
            f"{key[:-3]} {_fmt(value)} ms {'<=' if ok else '>'} bound {_fmt(bound)} ms "
            f"({arch}, n={stats.n})"
        )
        if truncated:
            status = "inconclusive"
            msg += "; measurement hit max_time_s before min_iters, so the verdict is inconclusive"
        elif not ok and contended:
            status = "inconclusive"
            msg += (
                f"; inconclusive (contention: {contention_text(contention or Contention())}): re-run on a "
                "quiet machine, or set checks.latency.strict: true to fail on it anyway"
            )
        out.append(Check(name, status, value, bound, msg))
    return out


def skipped_latency_checks(cfg: LatencyBounds, arch: str, reason: str) -> list[Check]:
    """The latency bounds of a result whose latency was not measured: skipped, never passed."""
    return [
        Check(f"latency.{key[:-3]}", "skip", None, latency_bound(bound, arch), reason)
        for key, bound in cfg.bounds()
    ]


def regress_check(
    bound_pct: float,
    comparison: RowStats | None,
    reason: str | None = None,
) -> Check:
    """Head vs baseline: a regression must be significant *and* larger than the bound."""
    if comparison is None:
        return Check(
            "latency.regress",
            "skip",
            None,
            bound_pct,
            reason or "no baseline given (guard run --baseline r.json, or guard compare)",
        )
    c = comparison
    v = str(c.verdict)
    status = {
        "regressed": "fail",
        "pass": "pass",
        "improved": "pass",
        "inconclusive": "inconclusive",
    }[v]
    lo, hi = c.ci
    units = "rounds" if on_rounds(c.method) else "n"
    msg = (
        f"latency ratio head/base {c.ratio:.3f} (CI {lo:.3f}-{hi:.3f}, "
        f"{units}={c.n_base}/{c.n_head}): {v} against a "
        f"{c.threshold_pct:.3g}% bound; detectable effect "
        f"{c.mde_pct:.3g}%; {c.reason}"
    )
    return Check("latency.regress", status, c.ratio, bound_pct, msg)


def tolerance_bounds(cfg: Tolerance | None) -> dict[str, float]:
    """The suite's tolerance block with the contract's defaults (rtol 1e-4, atol 1e-5)."""
    tol = cfg if cfg is not None else Tolerance()
    return {
        "rtol": 1e-4 if tol.rtol is None else tol.rtol,
        "atol": 1e-5 if tol.atol is None else tol.atol,
    }


def tolerance_check(cfg: Tolerance | None, numerics: Numerics) -> Check:
    bound = tolerance_bounds(cfg)
    if numerics.golden_status == "created":
        return Check(
            "tolerance",
            "created",
            numerics.max_abs_err,
            bound,
            "golden created on this run by the reference; nothing to compare yet",
        )
    if numerics.error is not None:
        return Check("tolerance", "fail", None, bound, numerics.error)
    ok = bool(_measured(numerics.allclose, "allclose"))
    msg = (
        f"max abs err {_g3(numerics.max_abs_err)}, max rel err "
        f"{_g3(numerics.max_rel_err, 'max_rel_err')} {'within' if ok else 'outside'} "
        f"rtol={bound['rtol']:g} atol={bound['atol']:g}"
    )
    if not numerics.bit_exact:
        msg += "; output hash differs from the golden's"
    if numerics.golden_status == "stale":
        msg += (
            f"; against the reference on the suite's new inputs ({numerics.golden_stale}):"
            " the stored golden is stale until guard golden update"
        )
    return Check("tolerance", "pass" if ok else "fail", numerics.max_abs_err, bound, msg)


def _measured(x: _T | None, name: str) -> _T:
    """A figure every compared output has (guard.golden.numerics writes it): a block
    without it is refused as it always was."""
    if x is None:
        raise KeyError(name)
    return x


def _g3(x: float | None, name: str = "max_abs_err") -> str:
    """An error to 3 significant digits."""
    return f"{_measured(x, name):.3g}"


def expected_check(cfg: Tolerance | None, expected: Numerics) -> Check:
    """The outputs against the expected ones of the suite's test_data (output_K.pb): a
    second golden, fixed by whoever wrote the test data, not by guard's reference run."""
    bound = tolerance_bounds(cfg)
    if expected.error is not None:
        return Check("expected", "fail", None, bound, f"test_data outputs: {expected.error}")
    ok = bool(_measured(expected.allclose, "allclose"))
    msg = (
        f"against test_data's output_K.pb: max abs err {_g3(expected.max_abs_err)} "
        f"{'within' if ok else 'outside'} rtol={bound['rtol']:g} atol={bound['atol']:g}"
    )
    return Check("expected", "pass" if ok else "fail", expected.max_abs_err, bound, msg)


def accuracy_check(
    cfg: AccuracyBound, accuracy: float | None, n: int | None, reason: str | None = None
) -> Check:
    bound = cfg.min_top1
    if accuracy is None:
        return Check("accuracy", "error", None, bound, reason or "accuracy was not measured")
    if bound is None:
        return Check(
            "accuracy",
            "pass",
            accuracy,
            None,
            f"top-1 {accuracy:.4f} on {cfg.dataset} (n={n}); no min_top1 bound",
        )
    ok = accuracy >= bound
    return Check(
        "accuracy",
        "pass" if ok else "fail",
        accuracy,
        bound,
        f"top-1 {accuracy:.4f} on {cfg.dataset} (n={n}) {'>=' if ok else '<'} {bound:.4f}",
    )


def partitions_check(cfg: PartitionsBound, partitions: Partitions) -> Check:
    bound = cfg.max
    count = partitions.count
    if count is None:
        return Check("partitions", "skip", None, bound, "backend does not report partitions")
    ok = count <= bound
    fallback = partitions.fallback_nodes
    msg = (
        f"{count} partition(s) {'<=' if ok else '>'} max {bound}; "
        f"{0 if fallback is None else fallback} node(s) on the fallback"
    )
    return Check("partitions", "pass" if ok else "fail", count, bound, msg)


def arena_check(
    cfg: ArenaBound | None,
    arena: int | None,
    lower: int | None,
    budget: MemoryBudget | None = None,
) -> Check:
    """``arena <= max_bytes`` (the budget when only a budget is set). With a budget's ladder
    it names the rung that made the arena fit, or the smallest reachable arena and the
    tensors that bound it (guard.checks.arena)."""
    return Check("arena", *arena_verdict(cfg, arena, lower, budget))


def tuning_check(cfg: TuningBound, tuning: TuningCache, backend: str) -> Check:
    bound = cfg.min_hit_rate
    hits, misses = tuning.hits, tuning.misses
    if hits is None or misses is None:
        if backend in TUNED_BACKENDS:
            # A backend that needs tuning, built without a cache, runs every op on the
            # untuned fallback schedule: that is a 0% hit rate, and it must be loud.
            return Check(
                "tuning",
                "fail",
                0.0,
                bound,
                f"backend {backend} was built without a tuning cache: every op runs "
                f"an untuned schedule; set options.{backend}.tuning_cache",
            )
        return Check("tuning", "skip", None, bound, f"backend {backend} uses no tuning cache here")
    total = hits + misses
    rate = hits / total if total else 1.0
    ok = rate >= bound
    return Check(
        "tuning",
        "pass" if ok else "fail",
        rate,
        bound,
        f"tuning-cache hit rate {rate:.3f} ({hits}/{total}) "
        f"{'>=' if ok else '<'} {bound:.3f}"
        + (
            f"; hit kernels measured {tuning.kernel_speedup:.2f}x faster than "
            "their default schedules"
            if tuning.kernel_speedup
            else ""
        )
        + (
            ""
            if ok
            else f"; {misses} op(s) fell back to untuned schedules" + _missed_text(tuning.missed)
        ),
    )


def _missed_text(missed: Sequence[Any], listed: int = 3) -> str:
    """'; missed: KEY (nearest KEY: target differs: +sve added), ...' for a keyed cache."""
    if not missed:
        return ""
    parts = []
    for item in missed[:listed]:
        if isinstance(item, dict):
            m = MissedKey.from_json(item)
            # Keys end in " target=<canonical target> compiler=<version>": the differs
            # phrase names what changed there, so the key is shown without them.
            s = str(m.key).split(" target=")[0]
            if m.differs:
                near = str(m.nearest or "").split(" target=")[0]
                s += f" ({m.differs}" + (f"; nearest {near})" if near else ")")
            parts.append(s)
        else:
            parts.append(str(item))
    more = f" and {len(missed) - listed} more" if len(missed) > listed else ""
    return "; missed: " + ", ".join(parts) + more


def verdict(checks: list[Check], error: str | None = None) -> str:
    if error:
        return "error"
    statuses = {c.status for c in checks}
    if "error" in statuses:
        return "error"
    if "fail" in statuses:
        return "fail"
    if "inconclusive" in statuses:
        return "inconclusive"
    return "pass"


def regress_bound(latency_cfg: LatencyBounds | None, baseline_given: bool) -> float | None:
    """The regress bound in percent: the suite's ``latency.regress_pct``; with a baseline
    given and no bound set, guard.stats.regress.DEFAULT_REGRESS_PCT (never nothing)."""
    if latency_cfg is not None and latency_cfg.regress_pct is not None:
        return float(latency_cfg.regress_pct)
    return DEFAULT_REGRESS_PCT if baseline_given else None


def _si(x: float, unit: str, sep: str = "") -> str:
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.4g} {prefix}{sep}{unit}"
    return f"{x:.4g} {unit}"


def counted_summary(c: Counted) -> str:
    """ "41.2 M instructions, 88 MB moved" per inference, or the block's error (ValueError
    for a block without a count)."""
    if c.failed:
        return str(c.error)
    if c.instructions is None:
        raise ValueError("a counted block without instructions")
    instructions = _si(float(c.instructions), "instructions", " ")
    if c.bytes_loaded is None and c.bytes_stored is None:
        return f"{instructions} (bytes: not counted)"
    moved = float(c.bytes_loaded or 0) + float(c.bytes_stored or 0)
    return f"{instructions}, {_si(moved, 'B')} moved"


def counted_check(
    block: Counted,
    cmp: CountedRow | None,
    bound: float | None,
) -> Check:
    """Counted cost against the baseline: fail when instructions or bytes moved per
    inference grew by more than ``bound`` percent; skipped when there is nothing to compare."""
    if block.failed:
        return Check("counted", "skipped", None, bound, str(block.error))
    value = block.instructions
    summary = counted_summary(block) + " per inference"
    if cmp is None:
        return Check("counted", "pass", value, bound, f"{summary} (no baseline to compare)")
    if cmp.verdict in ("not comparable", "missing"):
        return Check("counted", "skipped", value, bound, str(cmp.message))
    status = "fail" if cmp.verdict == "regressed" else "pass"
    return Check("counted", status, value, bound, f"{summary}: {cmp.message}")


def evaluate(cfg: CheckBlocks, facts: Facts) -> list[Check]:
    """Every check the suite configures for this entry, in report order, from the facts."""
    out = [tolerance_check(cfg.tolerance, facts.numerics)]
    if facts.numerics.expected is not None:
        out.append(expected_check(cfg.expected_tolerance(), facts.numerics.expected))
    if cfg.accuracy is not None:
        out.append(
            accuracy_check(cfg.accuracy, facts.accuracy, facts.accuracy_n, facts.accuracy_error)
        )
    latency = cfg.latency
    if latency is not None and facts.latency_ms is not None:
        out += latency_checks(
            latency, facts.latency_ms, facts.arch, facts.truncated, facts.contention
        )
    elif latency is not None and facts.latency_skipped:
        out += skipped_latency_checks(latency, facts.arch, facts.latency_skipped)
    bound = regress_bound(latency, facts.baseline_given)
    if bound is not None:
        out.append(regress_check(bound, facts.regress, facts.regress_reason))
    if cfg.partitions is not None:
        out.append(partitions_check(cfg.partitions, facts.partitions))
    if cfg.arena is not None or facts.arena_budget is not None:
        out.append(
            arena_check(
                cfg.arena,
                facts.arena_bytes,
                facts.arena_lower_bound_bytes,
                facts.arena_budget,
            )
        )
    if cfg.tuning is not None:
        out.append(tuning_check(cfg.tuning, facts.tuning, facts.backend))
    if facts.counted is not None:
        out.append(counted_check(facts.counted, facts.counted_cmp, facts.counted_bound))
    if cfg.quantization is not None and facts.quantization is not None:
        out.append(quantization_check(cfg.quantization, facts.quantization))
    return out


def quantization_check(cfg: QuantizationBounds, block: Quantization) -> Check:
    """An int8 row's ``quantization`` check (guard.checks.quantization)."""
    return Check("quantization", *quantization_verdict(cfg, block))
