"""The dashboard's data: MLflow result runs -> points -> one series per (model, backend,
target, arch), with the change points ``guard history`` finds and the manifest pins that
changed between two points. guard.report.dashboard draws and pages them.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from guard.compare.history import Step, analyse
from guard.counting.logged import FINGERPRINT_COLUMN, counted_block, parse_fingerprint
from guard.counting.verdict import DEFAULT_COUNTED_REGRESS_PCT, count_changes
from guard.results.counted import Fingerprint

# The pins whose change is drawn as a marker: a manifest section (its params' prefix).
PIN_FIELDS = ("compiler", "runtime", "driver", "tuning_cache", "model")
_PIN_SKIP = (
    "tuning_cache.hits",
    "tuning_cache.misses",
    "tuning_cache.entries",
    "tuning_cache.path",
    "model.sha256",
)  # fmt: skip (inputs say what changed)


@dataclass
class Point:
    run_id: str
    parent_run_id: str | None
    time: _dt.datetime
    commit: str
    branch: str
    manifest_sha256: str
    verdict: str
    metrics: dict[str, float]
    pins: dict[str, str]
    # The counted figure's fingerprint (what its counts mean), when the run was counted.
    counted_fingerprint: Fingerprint | None = None

    @property
    def short(self) -> str:
        return self.commit[:10] if self.commit else "nogit"


# One row of guard.track.find_runs' table (a run): column ("metrics.X", "params.Y",
# "tags.Z", "start_time", ...) -> its cell, whatever pandas holds there.
RunRow = Mapping[str, object]


class PinChange(TypedDict):
    """Where a pinned field differs from the previous point, and what changed."""

    index: int
    time: _dt.datetime
    changes: list[str]
    commit: str


class Where(TypedDict):
    """Where a step or break is: its point, and the runs on either side of it."""

    point: int
    time: _dt.datetime
    from_commit: str
    to_commit: str
    from_time: _dt.datetime
    run_id: str


class CountedBreak(Where):
    why: str  # which fingerprint field differs (compare_counted's message)


class CountedStep(Where):
    metric: str
    kind: str  # regression | improvement
    pct: float | None
    bytes_pct: float | None
    before: float | None
    after: float | None


class LatencyStep(Step):
    """A change point of the p50 series (guard.compare.history.analyse), placed."""

    point: int
    time: _dt.datetime
    from_commit: str
    to_commit: str
    from_time: _dt.datetime
    run_id: str


@dataclass
class Series:
    model: str
    backend: str
    target: str
    arch: str
    points: list[Point]
    bound: float | None = None
    steps: list[LatencyStep] = field(default_factory=list)
    pin_changes: list[PinChange] = field(default_factory=list)
    # Exact steps of the counted series, and where its fingerprint changed (no step there).
    counted_steps: list[CountedStep] = field(default_factory=list)
    counted_breaks: list[CountedBreak] = field(default_factory=list)
    counted_regress_pct: float = DEFAULT_COUNTED_REGRESS_PCT
    analysis_note: str = ""

    @property
    def key(self) -> str:
        return f"{self.model} [{self.backend}] {self.target} ({self.arch})"

    @property
    def slug(self) -> str:
        return "s" + hashlib.sha256(self.key.encode()).hexdigest()[:12]


def as_number(x: Any) -> float | None:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def as_text(x: Any) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    return str(x)


def as_time(x: Any) -> _dt.datetime:
    if isinstance(x, _dt.datetime):
        return x if x.tzinfo else x.replace(tzinfo=_dt.UTC)
    if hasattr(x, "to_pydatetime"):
        return as_time(x.to_pydatetime())
    try:
        return _dt.datetime.fromisoformat(str(x)).astimezone(_dt.UTC)
    except ValueError:
        return _dt.datetime.fromtimestamp(0, _dt.UTC)


def point_from_row(row: RunRow) -> Point:
    """One child run (a row of find_runs) as a point of its series."""
    metrics = {
        k[len("metrics.") :]: v
        for k, raw in row.items()
        if isinstance(k, str) and k.startswith("metrics.") and (v := as_number(raw)) is not None
    }
    pins = {}
    for k, raw in row.items():
        if not (isinstance(k, str) and k.startswith("params.")):
            continue
        name = k[len("params.") :]
        if name.split(".", 1)[0] in PIN_FIELDS and name not in _PIN_SKIP and as_text(raw):
            pins[name] = as_text(raw)
    return Point(
        run_id=as_text(row.get("run_id")),
        parent_run_id=as_text(row.get("tags.mlflow.parentRunId")) or None,
        time=as_time(row.get("start_time")),
        commit=as_text(row.get("tags.guard.git.commit")),
        branch=as_text(row.get("tags.guard.git.branch")),
        manifest_sha256=as_text(row.get("tags.guard.manifest_sha256")),
        verdict=as_text(row.get("tags.guard.verdict")) or "?",
        metrics=metrics,
        pins=pins,
        counted_fingerprint=parse_fingerprint(row.get(FINGERPRINT_COLUMN)),
    )


def _arch(row: RunRow) -> str:
    return as_text(row.get("tags.guard.arch")) or as_text(row.get("params.host.arch")) or "?"


def group_series(rows: Sequence[RunRow]) -> list[Series]:
    """Child-run rows grouped per (model, backend, target, arch), oldest point first."""
    groups: dict[tuple[str, str, str, str], list[Point]] = {}
    for r in rows:
        key = (as_text(r.get("tags.guard.model")) or "?", as_text(r.get("tags.guard.backend")) or "?",
               as_text(r.get("tags.guard.target")) or "?", _arch(r))  # fmt: skip
        groups.setdefault(key, []).append(point_from_row(r))
    out = []
    for (model, backend, target, arch), points in sorted(groups.items()):
        points.sort(key=lambda p: p.time)
        out.append(Series(model, backend, target, arch, points))
    return out


def pin_changes(points: Sequence[Point]) -> list[PinChange]:
    """Where a pinned field differs from the previous point: index, time and what changed."""
    out: list[PinChange] = []
    for i in range(1, len(points)):
        before, after = points[i - 1].pins, points[i].pins
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        if changed:
            what = [f"{k}: {before.get(k, '-')} → {after.get(k, '-')}" for k in changed]
            out.append({"index": i, "time": points[i].time, "changes": what,
                        "commit": points[i].short})  # fmt: skip
    return out


CONTENDED = 0.2  # preflight's threshold: other processes' share of the spare CPU


def contended(p: Point) -> bool:
    """A run measured under contention: its result's ``contention.flagged`` (runs logged
    before results carried the block: its preflight contention above the threshold)."""
    flagged = p.metrics.get("contention.flagged")
    if flagged is not None:
        return flagged > 0
    return (p.metrics.get("preflight.contention") or 0.0) > CONTENDED


def counted_changes(series: Series) -> None:
    """The counted series' steps: consecutive counted points compared exactly
    (guard.counting.verdict.count_changes, the series' ``counted_regress_pct``), as
    ``guard compare`` compares two runs.

    Counts do not move between processes, so every change past the bound is a step at
    that very commit, however loaded the machine was. Where the fingerprint changed
    (another emulator, plugin, target or inputs) the counts before and after mean
    different things: that is a break, drawn and named, never a step."""
    blocks = [counted_block(p.metrics.get, p.counted_fingerprint) for p in series.points]
    for c in count_changes(blocks, series.counted_regress_pct):
        before, p, row = series.points[c.previous], series.points[c.index], c.row
        where: Where = {"point": c.index, "time": p.time, "from_commit": before.short,
                 "to_commit": p.short, "from_time": before.time, "run_id": p.run_id}  # fmt: skip
        if row.verdict == "not comparable":
            series.counted_breaks.append({**where, "why": row.message or ""})
            continue
        series.counted_steps.append({
            **where, "metric": "counted",
            "kind": "regression" if row.verdict == "regressed" else "improvement",
            "pct": row.instructions_pct, "bytes_pct": row.bytes_moved_pct,
            "before": row.instructions[0], "after": row.instructions[1],
        })  # fmt: skip


def analyse_series(series: Series) -> None:
    """Change points of p50 (guard.compare.history.analyse), the bound's creep, pin markers,
    and the counted series' exact steps (``counted_changes``).

    Runs flagged as contended are drawn but left out of the change points: a step made of
    a loaded machine's runs is the machine's, not the code's. The note says how many."""
    series.pin_changes = pin_changes(series.points)
    counted_changes(series)
    measured = [p for p in series.points if (p.metrics.get("latency_ms.p50") or 0) > 0]
    pts = [p for p in measured if not contended(p)]
    left_out = len(measured) - len(pts)
    ignored = f"change points ignore {left_out} run(s) flagged as contended" if left_out else ""
    if len(pts) < 2:
        series.analysis_note = (
            ignored or "one run so far: a trend and change points need at least two"
        )
        return
    values = [p.metrics["latency_ms.p50"] for p in pts]
    a = analyse(values, labels=[p.short for p in pts], bound=series.bound)
    for step in a["steps"]:
        i = step["index"]
        series.steps.append({
            **step,
            "point": series.points.index(pts[i]),
            "time": pts[i].time,
            "from_commit": pts[i - 1].short,
            "to_commit": pts[i].short,
            "from_time": pts[i - 1].time,
            "run_id": pts[i].run_id,
        })  # fmt: skip
    consumed = a.get("headroom_consumed")
    notes = [ignored] if ignored else []
    if consumed is not None and math.isfinite(consumed):
        notes.insert(0, f"headroom to the bound consumed: {max(0.0, consumed):.0%}")
    elif consumed is not None:
        notes.insert(0, "at or past the bound")
    series.analysis_note = "; ".join(notes)
