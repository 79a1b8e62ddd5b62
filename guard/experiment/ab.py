"""Interleaved A/B: run base and head in one process, alternating, and judge paired ratios.

On a shared runner a contention burst slows whatever runs during it. Measured one after
the other, base and head see different bursts; interleaved, each pair sees the same one,
and the per-pair ratio cancels it. The order alternates (AB, BA, AB, ...) so that a
"second call is warmer" effect cancels too.

Each sample times ``inner`` consecutive calls (chosen so a sample lasts at least
``min_sample_s``), which keeps the per-sample timer overhead negligible for fast models
without letting the pair drift apart in time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from guard.backends.base import Session
from guard.compare.attribution import attribute
from guard.compare.compare import SCHEMA_VERSION, host_incompatibility, manifest_diff
from guard.compare.written import (
    ComparisonDocumentJson,
    ComparisonRowJson,
    ManifestDiff,
    RowNumerics,
)
from guard.core.errors import UsageError
from guard.measure.calls import choose_inner, warm_up
from guard.measure.preflight import contention_between, read_cpu_times
from guard.results.documents import ComparisonRow
from guard.results.manifest import Manifest
from guard.results.result import Partitions, Result, ResultKey
from guard.stats.regress import (
    AdaptiveResult,
    RegressConfig,
    Sampler,
    measure_until_conclusive,
    with_noise,
)

Clock = Callable[[], float]


def interleaved_sampler(
    base_fn: Callable[[], object],
    head_fn: Callable[[], object],
    *,
    inner: int = 1,
    clock: Clock = time.perf_counter,
) -> Sampler:
    """A ``sample(n) -> (base_ms, head_ms)`` that times n adjacent pairs, order alternating."""
    if inner < 1:
        raise UsageError(f"inner must be >= 1, got {inner}")
    count = [0]

    def timed(fn: Callable[[], object]) -> float:
        t0 = clock()
        for _ in range(inner):
            fn()
        return (clock() - t0) * 1000.0 / inner

    def sample(n: int) -> tuple[list[float], list[float]]:
        b: list[float] = []
        h: list[float] = []
        for _ in range(n):
            if count[0] % 2 == 0:
                tb = timed(base_fn)
                th = timed(head_fn)
            else:
                th = timed(head_fn)
                tb = timed(base_fn)
            count[0] += 1
            b.append(tb)
            h.append(th)
        return b, h

    return sample


@dataclass
class ABOutcome:
    result: AdaptiveResult
    inner: int
    contention: float | None


def run_ab(
    base_fn: Callable[[], object],
    head_fn: Callable[[], object],
    config: RegressConfig | None = None,
    *,
    budget_s: float = 20.0,
    warmup_s: float = 0.5,
    min_sample_s: float = 1e-3,
    initial: int = 50,
    max_looks: int = 7,
    clock: Clock = time.perf_counter,
) -> ABOutcome:
    """Warm both, pick ``inner``, then measure interleaved until conclusive or out of budget.

    ``budget_s`` covers both sides' measurement (so <= budget_s/2 per side).
    """
    warm_up(base_fn, warmup_s, clock, min_calls=1)
    warm_up(head_fn, warmup_s, clock, min_calls=1)
    inner = min(
        choose_inner(base_fn, min_sample_s, clock), choose_inner(head_fn, min_sample_s, clock)
    )
    before = read_cpu_times()
    res = measure_until_conclusive(
        interleaved_sampler(base_fn, head_fn, inner=inner, clock=clock),
        config=config,
        budget_s=budget_s,
        initial=initial,
        max_looks=max_looks,
        clock=clock,
    )
    return ABOutcome(res, inner, contention_between(before, read_cpu_times()))


@dataclass(frozen=True)
class CaseFacts:
    """What a loaded case can say besides time: the result fields it knows (its manifest,
    partitions and arena, as a result carries them; None where it cannot say) and the
    outputs of one run on its feeds."""

    result: Result
    outputs: list[np.ndarray] | None = None


def case_facts(case: object) -> CaseFacts:
    """The facts of a case (duck-typed: a guard.run.case.Case, or a worker's stand-in;
    ``manifest`` its manifest's JSON, ``session`` and ``feeds`` where it has them)."""
    manifest = Manifest.of(getattr(case, "manifest", None) or {})
    session: Session | None = getattr(case, "session", None)
    if session is None:
        return CaseFacts(Result(manifest=manifest))
    partitions = arena = outputs = None
    try:
        partitions = Partitions.from_json(session.partitions().to_dict())
    except Exception:  # noqa: BLE001 - a backend that cannot describe them still gets timed
        pass
    try:
        arena = session.memory().arena_bytes
    except Exception:  # noqa: BLE001
        pass
    feeds = getattr(case, "feeds", None)
    if feeds is not None:
        try:
            outputs = [np.asarray(o) for o in session.run(feeds)]
        except Exception:  # noqa: BLE001
            pass
    return CaseFacts(Result(manifest=manifest, partitions=partitions, arena_bytes=arena), outputs)


def _output_diff(b: CaseFacts, h: CaseFacts) -> RowNumerics:
    ob, oh = b.outputs, h.outputs
    if ob is None or oh is None:
        return {"output_sha256_changed": False, "max_abs_err": [None, None], "max_abs_diff": None}
    changed = len(ob) != len(oh) or any(
        x.shape != y.shape or x.dtype != y.dtype or x.tobytes() != y.tobytes()
        for x, y in zip(ob, oh, strict=False)
    )
    diffs = [
        float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64))))
        for x, y in zip(ob, oh, strict=False)
        if x.shape == y.shape and x.size and np.issubdtype(x.dtype, np.number)
    ]
    return {
        "output_sha256_changed": changed,
        "max_abs_err": [None, None],
        "max_abs_diff": max(diffs) if diffs else None,
    }


def ab_row(key: ResultKey, outcome: ABOutcome, bf: CaseFacts, hf: CaseFacts) -> ComparisonRowJson:
    """A comparison row (docs/ARCHITECTURE.md) for one interleaved A/B measurement:
    ``bf`` and ``hf`` are what ``case_facts`` says of each side."""
    c = outcome.result.comparison
    br, hr = bf.result, hf.result
    bman, hman = br.manifest, hr.manifest
    p90 = None
    if outcome.result.base and outcome.result.head:
        p90 = float(np.percentile(outcome.result.head, 90) / np.percentile(outcome.result.base, 90))
    stats = outcome.result.to_dict()
    stats["inner"] = outcome.inner
    stats["contention"] = outcome.contention
    row: ComparisonRowJson = {
        "model": key.model,
        "backend": key.backend,
        "target": key.target,
        "verdict": c.verdict,
        "ratio": c.ratio,
        "ci": list(c.ci),
        "p90_ratio": p90,
        "arena_bytes": [br.arena_bytes, hr.arena_bytes],
        "partitions": [
            br.partitions.count if br.partitions else None,
            hr.partitions.count if hr.partitions else None,
        ],
        "numerics": _output_diff(bf, hf),
        "tuning_hit_rate": [None, None],
        "contention": [outcome.contention, outcome.contention],
        "manifest_diff": manifest_diff(bman, hman),
        "stats": stats,
        "reason": c.reason,
    }
    row["attribution"] = attribute(ComparisonRow.from_json(row), br, hr)
    return row


def ab_document(
    rows: Sequence[ComparisonRowJson], config: RegressConfig, labels: tuple[str, str]
) -> ComparisonDocumentJson:
    """Wrap A/B rows into a comparison document (same contract as ``guard compare``)."""
    doc_diff: ManifestDiff = {}
    for r in rows:
        for f, pair in r["manifest_diff"].items():
            doc_diff.setdefault(f, pair)
    by = {
        v: sum(r["verdict"] == v for r in rows)
        for v in ("pass", "regressed", "improved", "inconclusive")
    }
    ratios = [r["ratio"] for r in rows if math.isfinite(r["ratio"])]
    gm = math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else None
    return {
        "schema_version": SCHEMA_VERSION,
        "mode": "interleaved-ab",
        "base": {"label": labels[0]},
        "head": {"label": labels[1]},
        "config": {
            "regress_pct": config.regress_pct,
            "alpha": config.alpha,
            "noise_k": config.noise_k,
        },
        "manifest_diff": doc_diff,
        "rows": list(rows),
        "summary": {
            "compared": len(rows),
            "by_verdict": by,
            "geomean_ratio": gm,
            "only_base": [],
            "only_head": [],
        },
    }


def run_case_pairs(
    pairs: Sequence[tuple[Any, Any]],
    config: RegressConfig,
    *,
    noise: Mapping[str, float] | None = None,
    budget_s: float = 20.0,
    warmup_s: float = 0.5,
    labels: tuple[str, str] = ("base", "head"),
    suite_thresholds: bool = True,
) -> ComparisonDocumentJson:
    """A/B over matched pipeline cases (``.model .backend .target .run_once() .manifest``).

    With ``suite_thresholds``, a head case's ``checks.latency.regress_pct`` replaces
    ``config.regress_pct`` for its row.
    """
    rows = []
    for b, h in pairs:
        why = host_incompatibility(Manifest.of(b.manifest or {}), Manifest.of(h.manifest or {}))
        if why:
            raise UsageError(f"{b.model}/{b.backend}: cannot A/B across hosts: {why}")
        key = ResultKey.of(
            {"model": b.model, "backend": b.backend, "target": b.target, "manifest": b.manifest}
        )
        cfg = config
        checks = getattr(getattr(h, "entry", None), "checks", None)
        latency = checks.latency if checks is not None else None
        suite_pct = latency.regress_pct if latency is not None else None
        if suite_thresholds and isinstance(suite_pct, int | float):
            cfg = replace(cfg, regress_pct=float(suite_pct))
        cfg = with_noise(cfg, (noise or {}).get(str(key)))
        outcome = run_ab(b.run_once, h.run_once, cfg, budget_s=budget_s, warmup_s=warmup_s)
        rows.append(ab_row(key, outcome, case_facts(b), case_facts(h)))
    return ab_document(rows, config, labels)


def match_cases(base_cases: Sequence[Any], head_cases: Sequence[Any]) -> list[tuple[Any, Any]]:
    """Pair cases by (model, backend, target); refuse when nothing matches."""
    heads = {(c.model, c.backend, c.target): c for c in head_cases}
    pairs = [(b, heads[k]) for b in base_cases if (k := (b.model, b.backend, b.target)) in heads]
    if not pairs:
        raise UsageError(
            "base and head share no (model, backend, target)",
            hint="Point --base and --head at variants of the same suite.",
        )
    return pairs
