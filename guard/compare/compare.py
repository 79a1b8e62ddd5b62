"""Compare two results documents into a comparison document (docs/ARCHITECTURE.md).

Rows are matched by (model, backend, canonical target). A baseline is only usable when the
host class matches (arch, CPU model, threads): a latency ratio across two machines says
nothing about the code; and only when both documents are runs of the same suite.
Everything else in the manifest (compiler, runtime, driver, tuning cache, model) is the
subject of the comparison and is listed first.

Latency is judged on the results' *rounds* (guard.stats.regress.compare_rounds): each
round is one freshly loaded session, so rounds, not iterations, are the independent units
of two processes. A result without rounds (a results file written before guard measured
in rounds) gets no latency verdict: its row is ``inconclusive`` and says so, because its
iterations all shared one session and cannot tell a real change from a process-to-process
offset.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np

from guard.compare import crossarch, int8_outputs
from guard.compare.attribution import attribute
from guard.core.errors import UsageError
from guard.counting.rows import counted_rows
from guard.counting.rows import summary as counted_summary
from guard.manifest.diff import diff_manifests
from guard.manifest.pins import is_pinned
from guard.results.documents import COMPARISON_SCHEMA_VERSION
from guard.results.load import PROBES
from guard.results.load import validate_comparison as validate_comparison
from guard.results.result import ResultKey
from guard.stats.regress import (
    IMPROVED,
    INCONCLUSIVE,
    PASS,
    REGRESSED,
    Comparison,
    RegressConfig,
    compare_rounds,
    with_noise,
)

SCHEMA_VERSION = COMPARISON_SCHEMA_VERSION  # the comparison document (guard.results.documents)
HOST_FIELDS = ("arch", "cpu", "threads")


class IncompatibleBaselineError(UsageError):
    """The baseline was measured on a different host class; the reason says which field."""


def host_incompatibility(base_m: Mapping[str, Any], head_m: Mapping[str, Any]) -> str | None:
    """Why two manifests' hosts cannot be compared, or None when they can."""
    bh, hh = base_m.get("host") or {}, head_m.get("host") or {}
    for f in HOST_FIELDS:
        if bh.get(f) != hh.get(f):
            return f"host.{f} differs: baseline {bh.get(f)!r}, head {hh.get(f)!r}"
    return None


def manifest_diff(base_m: Mapping[str, Any], head_m: Mapping[str, Any]) -> dict[str, list[Any]]:
    """Pinned fields that differ, as {dotted.field: [base, head]}.

    Host pins are left out: they decide compatibility (a mismatch is refused) rather than
    being the subject. Recorded facts (tuning hits, guard commit, paths) are not pins.
    """
    return {
        f: pair
        for f, pair in diff_manifests(base_m, head_m).items()
        if is_pinned(f) and not f.startswith("host.")
    }


def _hit_rate(r: Mapping[str, Any]) -> float | None:
    tc = (r.get("manifest") or {}).get("tuning_cache") or {}
    hits, misses = tc.get("hits"), tc.get("misses")
    if hits is None or misses is None or hits + misses == 0:
        return None
    return hits / (hits + misses)


def _contention(r: Mapping[str, Any]) -> float | None:
    """Share of spare CPU other processes used while this result was timed (guard.measure)."""
    c = (r.get("measurement") or {}).get("contention")
    return float(c) if isinstance(c, int | float) else None


def _samples(r: Mapping[str, Any]) -> list[float] | None:
    s = r.get("samples_ms")
    return [float(x) for x in s] if isinstance(s, list) and s else None


def round_p50s(r: Mapping[str, Any]) -> list[float] | None:
    """The result's round medians (ms), or None for a result measured without rounds."""
    rounds = r.get("rounds")
    if not isinstance(rounds, list) or not rounds:
        return None
    return [float(rd["p50"]) for rd in rounds]


def round_contention(r: Mapping[str, Any]) -> list[float | None]:
    return [rd.get("contention") for rd in r.get("rounds") or () if isinstance(rd, Mapping)]


def _every_round(r: Mapping[str, Any], key: str) -> list[float] | None:
    """Every round's numeric ``key``; None where the result has no rounds or any lacks it."""
    rounds = r.get("rounds")
    if not isinstance(rounds, list) or not rounds:
        return None
    out = [
        float(x)
        for rd in rounds
        if isinstance(rd, Mapping) and isinstance(x := rd.get(key), int | float)
    ]
    return out if len(out) == len(rounds) else None


_T = TypeVar("_T")


def round_host(r: Mapping[str, Any]) -> list[tuple[float, ...]] | None:
    """Per-round host-speed readings (ms), one tuple per round of every probe that each
    round has; None where no probe is in every round (older files, an injected clock)."""
    cols = [c for c in (_every_round(r, p) for p in PROBES) if c is not None]
    return [tuple(x) for x in zip(*cols, strict=True)] if cols else None


def round_host_error(r: Mapping[str, Any]) -> list[tuple[float, ...]] | None:
    """Per-round error variance of each probe's log mean reading (the variance of the
    round's log readings over their count); None where any round has fewer than two."""
    rounds, means = r.get("rounds"), round_host(r)
    if not isinstance(rounds, list) or means is None:
        return None
    out = []
    for rd, mean in zip(rounds, means, strict=True):
        readings = rd.get("host_readings") if isinstance(rd, Mapping) else None
        if not isinstance(readings, list) or len(readings) < 2:
            return None
        try:
            logs = np.log(np.asarray(readings, dtype=float))
        except (TypeError, ValueError):
            return None
        if logs.ndim != 2 or logs.shape[1] != len(mean) or not np.all(np.isfinite(logs)):
            return None
        out.append(tuple(float(v) for v in logs.var(axis=0, ddof=1) / logs.shape[0]))
    return out


def round_cpu(r: Mapping[str, Any]) -> list[float] | None:
    """Per-round CPU time per call (ms) of a 1-thread result; None where any is missing.

    With more threads a process's CPU time sums its threads' (spinning included): it is
    no stand-in for one call's latency, so it is not offered.
    """
    threads = ((r.get("manifest") or {}).get("host") or {}).get("threads")
    return _every_round(r, "cpu_ms_per_call") if threads == 1 else None


def _measured(r: Mapping[str, Any], key: str) -> float | None:
    c = (r.get("measurement") or {}).get(key)
    return float(c) if isinstance(c, int | float) and not isinstance(c, bool) else None


def latency_comparison(
    base_r: Mapping[str, Any], head_r: Mapping[str, Any], config: RegressConfig
) -> tuple[Comparison | None, str]:
    """(comparison, reason) of two results' latency; (None, why not) when it cannot be judged."""
    bp, hp = round_p50s(base_r), round_p50s(head_r)
    if bp is None or hp is None:
        side = "base" if bp is None else "head"
        why = ((base_r if bp is None else head_r).get("measurement") or {}).get("why_no_rounds")
        if isinstance(why, str):  # the reader said why (a pytest-benchmark file's summary)
            return None, f"{side} result has no rounds: {why}"
        return None, (
            f"{side} result has no rounds (a results file from a guard that measured in one "
            "session): its iterations are not independent, so no latency verdict; re-run "
            "`guard run --json` with this guard"
        )
    host = _both(round_host(base_r), round_host(head_r))
    probes = (_probe(base_r), _probe(head_r))
    note = ""
    if host is not None and probes[0] != probes[1]:
        # Readings of two different probes (another interpreter, another guard) say
        # nothing about how the machine's speed changed between the runs.
        host = None
        note = (
            f"; host speed not allowed for: the probes differ (base {probes[0] or 'unnamed'}, "
            f"head {probes[1] or 'unnamed'})"
        )
    comp = compare_rounds(
        bp, hp, config,
        contention=(round_contention(base_r), round_contention(head_r)),
        cpu_share=(_measured(base_r, "cpu_share"), _measured(head_r, "cpu_share")),
        preempted=(_measured(base_r, "preempted_fraction"),
                   _measured(head_r, "preempted_fraction")),
        cpu=_both(round_cpu(base_r), round_cpu(head_r)),
        host=host,
        host_error=_both(round_host_error(base_r), round_host_error(head_r)) if host else None,
    )  # fmt: skip
    if note:
        comp = replace(comp, reason=comp.reason + note)
    return comp, comp.reason


def _probe(r: Mapping[str, Any]) -> str | None:
    p = (r.get("measurement") or {}).get("host_probe")
    return p if isinstance(p, str) else None


def _both(b: _T | None, h: _T | None) -> tuple[_T, _T] | None:
    return (b, h) if b is not None and h is not None else None


def _p90_ratio(b: list[float] | None, h: list[float] | None) -> float | None:
    if not b or not h:
        return None
    return float(np.percentile(h, 90) / np.percentile(b, 90))


def compare_rows(
    base_r: Mapping[str, Any], head_r: Mapping[str, Any], config: RegressConfig
) -> dict[str, Any]:
    """One comparison row (comparison contract keys in docs/ARCHITECTURE.md, plus stats detail)."""
    bm, hm = base_r.get("manifest") or {}, head_r.get("manifest") or {}
    bs, hs = _samples(base_r), _samples(head_r)
    comp, reason = latency_comparison(base_r, head_r, config)
    if comp is None:
        verdict, ratio, ci = INCONCLUSIVE, math.nan, [math.nan, math.nan]
        bp50 = (base_r.get("latency_ms") or {}).get("p50")
        hp50 = (head_r.get("latency_ms") or {}).get("p50")
        if bp50 and hp50:
            ratio = float(hp50) / float(bp50)
    else:
        verdict, ratio, ci = comp.verdict, comp.ratio, list(comp.ci)
    bnum, hnum = base_r.get("numerics") or {}, head_r.get("numerics") or {}
    bpart, hpart = base_r.get("partitions") or {}, head_r.get("partitions") or {}
    row: dict[str, Any] = {
        "model": base_r["model"],
        "backend": base_r["backend"],
        "target": ResultKey.of(base_r).target,
        "verdict": verdict,
        "ratio": ratio,
        "ci": ci,
        "p90_ratio": _p90_ratio(bs, hs),
        "arena_bytes": [base_r.get("arena_bytes"), head_r.get("arena_bytes")],
        "partitions": [bpart.get("count"), hpart.get("count")],
        "numerics": {
            "output_sha256_changed": (
                bnum.get("output_sha256") is not None
                and bnum.get("output_sha256") != hnum.get("output_sha256")
            ),
            "max_abs_err": [bnum.get("max_abs_err"), hnum.get("max_abs_err")],
            "max_rel_err": [bnum.get("max_rel_err"), hnum.get("max_rel_err")],
        },
        "tuning_hit_rate": [_hit_rate(base_r), _hit_rate(head_r)],
        "contention": [_contention(base_r), _contention(head_r)],
        "noise_pct": [base_r.get("noise_pct"), head_r.get("noise_pct")],
        "rounds": [len(base_r.get("rounds") or ()), len(head_r.get("rounds") or ())],
        "manifest_diff": manifest_diff(bm, hm),
        "stats": comp.to_dict() if comp else {"reason": reason},
        "reason": reason,
    }
    row["attribution"] = attribute(row, base_r, head_r)
    return row


def _suite_threshold(cfg: RegressConfig, head_r: Mapping[str, Any]) -> RegressConfig:
    for c in head_r.get("checks") or ():
        if isinstance(c, Mapping) and c.get("name") == "latency.regress":
            bound = c.get("bound")
            if isinstance(bound, int | float) and bound >= 0:
                return replace(cfg, regress_pct=float(bound))
    return cfg


def _noise_for(noise: Mapping[str, float] | None, key: ResultKey) -> float | None:
    if not noise:
        return None
    return noise.get(str(key))


def _with_run_noise(cfg: RegressConfig, run_noise_pct: float | None) -> RegressConfig:
    return cfg if run_noise_pct is None else replace(cfg, run_noise_pct=run_noise_pct)


def compare_docs(
    base: Mapping[str, Any],
    head: Mapping[str, Any],
    config: RegressConfig | None = None,
    *,
    noise: Mapping[str, float] | None = None,
    run_noise: Mapping[str, float] | None = None,
    suite_thresholds: bool = True,
    base_label: str = "base",
    head_label: str = "head",
) -> dict[str, Any]:
    """The comparison document (schema_version 1) for two results documents.

    ``noise`` maps "model/backend/target" to a calibrated A/A noise percentage
    (``guard calibrate``); it raises that row's threshold. ``run_noise`` maps the same keys
    to a calibrated run noise (``guard calibrate --runs``: the SD of a whole run's level
    beyond its rounds), which replaces ``config.run_noise_pct`` for that row. With
    ``suite_thresholds``, a
    model's ``checks.latency.regress_pct`` (carried in HEAD's results as the
    ``latency.regress`` check's bound) replaces ``config.regress_pct`` for its row. Raises
    IncompatibleBaselineError when a matched pair ran on different host classes.
    """
    cfg = config or RegressConfig()
    bsuite, hsuite = base.get("suite"), head.get("suite")
    if bsuite and hsuite and bsuite != hsuite:
        raise UsageError(
            f"{base_label} is a run of suite {bsuite!r}, {head_label} of suite {hsuite!r}: "
            "guard compares two runs of one suite",
            where=base_label,
            hint="Pass a baseline of the same suite (its `suite:` name).",
        )
    b_rows = {ResultKey.of(r): r for r in base["results"]}
    h_rows = {ResultKey.of(r): r for r in head["results"]}
    both = [k for k in h_rows if k in b_rows]
    # A pair on two architectures, or with an emulated side, is compared for consistency
    # (guard.compare.crossarch: outputs, partitions, arena), never for latency, so it is
    # not refused here either.
    both = [k for k in both if not crossarch.is_consistency_pair(b_rows[k], h_rows[k])]
    for k in both:
        why = host_incompatibility(b_rows[k].get("manifest") or {}, h_rows[k].get("manifest") or {})
        if why:
            raise IncompatibleBaselineError(
                f"baseline for {k} is not comparable: {why}",
                where=base_label,
                hint="Compare against a baseline measured on the same host class.",
            )
    rows = [
        compare_rows(
            b_rows[k],
            h_rows[k],
            _with_run_noise(
                with_noise(
                    _suite_threshold(cfg, h_rows[k]) if suite_thresholds else cfg,
                    _noise_for(noise, k),
                ),
                _noise_for(run_noise, k),
            ),
        )
        for k in both
    ]
    cross = crossarch.cross_arch_rows(base, head)
    counted = counted_rows(base, head)
    int8 = int8_outputs.int8_rows(base, head)
    doc_diff: dict[str, list[Any]] = {}
    for row in rows:
        for f, pair in row["manifest_diff"].items():
            doc_diff.setdefault(f, pair)
    by_verdict = {
        v: sum(r["verdict"] == v for r in rows) for v in (PASS, REGRESSED, IMPROVED, INCONCLUSIVE)
    }
    ratios = [
        r["ratio"] for r in rows if isinstance(r["ratio"], float) and math.isfinite(r["ratio"])
    ]
    return {
        "schema_version": SCHEMA_VERSION,
        "base": {"label": base_label, "suite": base.get("suite"), "git": base.get("git")},
        "head": {"label": head_label, "suite": head.get("suite"), "git": head.get("git")},
        "config": {
            "regress_pct": cfg.regress_pct,
            "alpha": cfg.alpha,
            "noise_k": cfg.noise_k,
            "run_noise_pct": cfg.run_noise_pct,
            "calibrated_noise": dict(noise or {}),
            "calibrated_run_noise": dict(run_noise or {}),
        },
        "manifest_diff": doc_diff,
        "rows": rows,
        "cross_arch": cross,
        "counted": counted,
        "int8": int8,
        "summary": {
            # Aggregates only over rows present on both sides: a model that appears or
            # disappears says nothing about speed.
            "compared": len(rows),
            "by_verdict": by_verdict,
            "geomean_ratio": float(np.exp(np.mean(np.log(ratios)))) if ratios else None,
            "only_base": [str(k) for k in b_rows if k not in h_rows],
            "only_head": [str(k) for k in h_rows if k not in b_rows],
            "cross_arch": {v: sum(r["verdict"] == v for r in cross) for v in crossarch.VERDICTS},
            "counted": counted_summary(counted),
            "int8": {v: sum(r["outputs"] == v for r in int8) for v in ("identical", "differ")},
            "without_rounds": [
                str(ResultKey.of(r)) for r in rows if r["stats"].get("method") is None
            ],
        },
    }


def exit_code(comparison: Mapping[str, Any], *, strict: bool = False) -> int:
    """1 when any row regressed or two architectures' outputs drifted apart (or, with
    strict, a row is inconclusive or a cross-architecture row differs); 0 otherwise."""
    bad = {REGRESSED, INCONCLUSIVE} if strict else {REGRESSED}
    drifted = crossarch.failing(comparison.get("cross_arch") or [], strict=strict)
    counted = any(r.get("verdict") == REGRESSED for r in comparison.get("counted") or [])
    return 1 if drifted or counted or any(r["verdict"] in bad for r in comparison["rows"]) else 0
