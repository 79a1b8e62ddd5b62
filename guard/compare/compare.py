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
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TypeVar

import numpy as np

from guard.compare import crossarch, int8_outputs
from guard.compare.attribution import attribute
from guard.compare.written import ComparisonDocumentJson, ComparisonRowJson, ManifestDiff
from guard.core.errors import UsageError
from guard.counting.rows import counted_rows
from guard.counting.rows import summary as counted_summary
from guard.manifest.diff import diff_manifests
from guard.manifest.pins import is_pinned
from guard.results.cross_arch import CrossArchRow
from guard.results.documents import (
    COMPARISON_SCHEMA_VERSION,
    ComparisonDocument,
    ComparisonRow,
    ResultsDocument,
)
from guard.results.load import PROBES
from guard.results.load import validate_comparison as validate_comparison
from guard.results.manifest import Manifest
from guard.results.record import Json
from guard.results.result import Result, ResultKey, Round
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


def _host_class(m: Manifest) -> tuple[object, ...]:
    """The manifest's HOST_FIELDS, in that order."""
    return (m.host.arch, m.host.cpu, m.host.threads)


def host_incompatibility(base_m: Manifest, head_m: Manifest) -> str | None:
    """Why two manifests' hosts cannot be compared, or None when they can."""
    bh, hh = _host_class(base_m), _host_class(head_m)
    for f, b, h in zip(HOST_FIELDS, bh, hh, strict=True):
        if b != h:
            return f"host.{f} differs: baseline {b!r}, head {h!r}"
    return None


def manifest_diff(base_m: Manifest, head_m: Manifest) -> ManifestDiff:
    """Pinned fields that differ, as {dotted.field: [base, head]}.

    Host pins are left out: they decide compatibility (a mismatch is refused) rather than
    being the subject. Recorded facts (tuning hits, guard commit, paths) are not pins.
    """
    # every pin, whatever the backend called it: the manifests' JSON, diffed
    base_j, head_j = base_m.to_json(), head_m.to_json()
    return {
        f: pair
        for f, pair in diff_manifests(base_j, head_j).items()
        if is_pinned(f) and not f.startswith("host.")
    }


def _hit_rate(r: Result) -> float | None:
    return r.manifest.tuning_cache.hit_rate


def _contention(r: Result) -> float | None:
    """Share of spare CPU other processes used while this result was timed (guard.measure)."""
    c = r.measurement.contention
    return float(c) if c is not None else None


def _samples(r: Result) -> list[float] | None:
    s = [x for x in r.samples_ms if x is not None]
    return [float(x) for x in s] if s and len(s) == len(r.samples_ms) else None


def round_p50s(r: Result) -> list[float] | None:
    """The result's round medians (ms), or None for a result measured without rounds."""
    p50s = [rd.p50 for rd in r.rounds]
    if not p50s or any(p is None for p in p50s):
        return None
    return [float(p) for p in p50s if p is not None]


def round_contention(r: Result) -> list[float | None]:
    return [rd.contention for rd in r.rounds]


def _every_round(r: Result, value: Callable[[Round], float | None]) -> list[float] | None:
    """Every round's ``value``; None where the result has no rounds or any lacks it."""
    if not r.rounds:
        return None
    out = [float(x) for rd in r.rounds if (x := value(rd)) is not None]
    return out if len(out) == len(r.rounds) else None


_T = TypeVar("_T")


def round_host(result: Result) -> list[tuple[float, ...]] | None:
    """Per-round host-speed readings (ms), one tuple per round of every probe that each
    round has; None where no probe is in every round (older files, an injected clock)."""
    readers = [lambda rd, i=i: rd.probes[i] for i in range(len(PROBES))]
    cols = [c for c in (_every_round(result, read) for read in readers) if c is not None]
    return [tuple(x) for x in zip(*cols, strict=True)] if cols else None


def round_host_error(r: Result) -> list[tuple[float, ...]] | None:
    """Per-round error variance of each probe's log mean reading (the variance of the
    round's log readings over their count); None where any round has fewer than two."""
    rounds, means = r.rounds, round_host(r)
    if not rounds or means is None:
        return None
    out = []
    for rd, mean in zip(rounds, means, strict=True):
        readings = rd.host_readings
        if len(readings) < 2:
            return None
        try:
            logs = np.log(np.asarray(readings, dtype=float))
        except (TypeError, ValueError):
            return None
        if logs.ndim != 2 or logs.shape[1] != len(mean) or not np.all(np.isfinite(logs)):
            return None
        out.append(tuple(float(v) for v in logs.var(axis=0, ddof=1) / logs.shape[0]))
    return out


def round_cpu(r: Result) -> list[float] | None:
    """Per-round CPU time per call (ms) of a 1-thread result; None where any is missing.

    With more threads a process's CPU time sums its threads' (spinning included): it is
    no stand-in for one call's latency, so it is not offered.
    """
    if r.manifest.host.threads != 1:
        return None
    return _every_round(r, lambda rd: rd.cpu_ms_per_call)


def _measured(value: float | None) -> float | None:
    return float(value) if value is not None else None


def latency_comparison(
    base_r: Result, head_r: Result, config: RegressConfig
) -> tuple[Comparison | None, str]:
    """(comparison, reason) of two results' latency; (None, why not) when it cannot be judged."""
    bp, hp = round_p50s(base_r), round_p50s(head_r)
    if bp is None or hp is None:
        side = "base" if bp is None else "head"
        why = (base_r if bp is None else head_r).measurement.why_no_rounds
        if why is not None:  # the reader said why (a pytest-benchmark file's summary)
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
        cpu_share=(_measured(base_r.measurement.cpu_share),
                   _measured(head_r.measurement.cpu_share)),
        preempted=(_measured(base_r.measurement.preempted_fraction),
                   _measured(head_r.measurement.preempted_fraction)),
        cpu=_both(round_cpu(base_r), round_cpu(head_r)),
        host=host,
        host_error=_both(round_host_error(base_r), round_host_error(head_r)) if host else None,
    )  # fmt: skip
    if note:
        comp = replace(comp, reason=comp.reason + note)
    return comp, comp.reason


def _probe(r: Result) -> str | None:
    return r.measurement.host_probe


def _both(b: _T | None, h: _T | None) -> tuple[_T, _T] | None:
    return (b, h) if b is not None and h is not None else None


def _p90_ratio(b: list[float] | None, h: list[float] | None) -> float | None:
    if not b or not h:
        return None
    return float(np.percentile(h, 90) / np.percentile(b, 90))


def _p50(r: Result) -> float | None:
    return r.latency_ms.p50 if r.latency_ms is not None else None


def compare_rows(base_r: Result, head_r: Result, config: RegressConfig) -> ComparisonRowJson:
    """One comparison row (comparison contract keys in docs/ARCHITECTURE.md, plus stats detail)."""
    bs, hs = _samples(base_r), _samples(head_r)
    comp, reason = latency_comparison(base_r, head_r, config)
    if comp is None:
        verdict, ratio, ci = INCONCLUSIVE, math.nan, [math.nan, math.nan]
        bp50, hp50 = _p50(base_r), _p50(head_r)
        if bp50 and hp50:
            ratio = float(hp50) / float(bp50)
    else:
        verdict, ratio, ci = comp.verdict, comp.ratio, list(comp.ci)
    bnum, hnum = base_r.numerics, head_r.numerics
    bpart, hpart = base_r.partitions, head_r.partitions
    row: ComparisonRowJson = {
        "model": base_r.model,
        "backend": base_r.backend,
        "target": base_r.key.target,
        "verdict": verdict,
        "ratio": ratio,
        "ci": ci,
        "p90_ratio": _p90_ratio(bs, hs),
        "arena_bytes": [base_r.arena_bytes, head_r.arena_bytes],
        "partitions": [bpart.count if bpart else None, hpart.count if hpart else None],
        "numerics": {
            "output_sha256_changed": (
                bnum.output_sha256 is not None and bnum.output_sha256 != hnum.output_sha256
            ),
            "max_abs_err": [bnum.max_abs_err, hnum.max_abs_err],
            "max_rel_err": [bnum.max_rel_err, hnum.max_rel_err],
        },
        "tuning_hit_rate": [_hit_rate(base_r), _hit_rate(head_r)],
        "contention": [_contention(base_r), _contention(head_r)],
        "noise_pct": [base_r.noise_pct, head_r.noise_pct],
        "rounds": [len(base_r.rounds), len(head_r.rounds)],
        "manifest_diff": manifest_diff(base_r.manifest, head_r.manifest),
        "stats": comp.to_dict() if comp else {"reason": reason},
        "reason": reason,
    }
    row["attribution"] = attribute(ComparisonRow.from_json(row), base_r, head_r)
    return row


def _suite_threshold(cfg: RegressConfig, head_r: Result) -> RegressConfig:
    for c in head_r.checks:
        if c.name == "latency.regress":
            bound = c.bound
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
    base: ResultsDocument,
    head: ResultsDocument,
    config: RegressConfig | None = None,
    *,
    noise: Mapping[str, float] | None = None,
    run_noise: Mapping[str, float] | None = None,
    suite_thresholds: bool = True,
    base_label: str = "base",
    head_label: str = "head",
) -> ComparisonDocumentJson:
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
    same_run = crossarch.is_same_run(base, head)
    bdoc, hdoc = base, head
    bsuite, hsuite = bdoc.suite, hdoc.suite
    if bsuite and hsuite and bsuite != hsuite:
        raise UsageError(
            f"{base_label} is a run of suite {bsuite!r}, {head_label} of suite {hsuite!r}: "
            "guard compares two runs of one suite",
            where=base_label,
            hint="Pass a baseline of the same suite (its `suite:` name).",
        )
    b_rows = {r.key: r for r in bdoc.results}
    h_rows = {r.key: r for r in hdoc.results}
    both = [k for k in h_rows if k in b_rows]
    # A pair on two architectures, or with an emulated side, is compared for consistency
    # (guard.compare.crossarch: outputs, partitions, arena), never for latency, so it is
    # not refused here either.
    both = [k for k in both if not crossarch.is_consistency_pair(b_rows[k], h_rows[k])]
    for k in both:
        why = host_incompatibility(b_rows[k].manifest, h_rows[k].manifest)
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
    cross = crossarch.cross_arch_rows(bdoc, hdoc, same_doc=same_run)
    counted = counted_rows(bdoc, hdoc)
    int8 = int8_outputs.int8_rows(base, head)
    doc_diff: ManifestDiff = {}
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
        "base": {"label": base_label, "suite": bdoc.suite, "git": _git(bdoc)},
        "head": {"label": head_label, "suite": hdoc.suite, "git": _git(hdoc)},
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


def _git(doc: ResultsDocument) -> Json:
    """The document's ``git`` block as it was written (None where it has none)."""
    return doc.git.to_json() if doc.git.read else None


def exit_code(doc: ComparisonDocument, *, strict: bool = False) -> int:
    """1 when any row regressed or two architectures' outputs drifted apart (or, with
    strict, a row is inconclusive or a cross-architecture row differs); 0 otherwise."""
    bad = {REGRESSED, INCONCLUSIVE} if strict else {REGRESSED}
    drifted = crossarch.failing([CrossArchRow.of(r) for r in doc.cross_arch], strict=strict)
    counted = any(r.verdict == REGRESSED for r in doc.counted)
    return 1 if drifted or counted or any(r.verdict in bad for r in doc.rows) else 0
