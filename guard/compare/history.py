"""Change points in a model's history, and how much headroom a slow creep has eaten.

A step (a regression that landed in one commit) and a creep (many commits, each under the
threshold) need different tools. Steps: ruptures' PELT on the metric series, in log
space so a step is a ratio, with a BIC-like penalty scaled by a robust noise estimate
(MAD of first differences) so that run-to-run jitter does not split the series. Creep:
the consumed share of the headroom the first segment had to its bound,
``(last - first) / (bound - first)``, from the medians of the first and last segments
(or first and last few points when there is no step).

Counted metrics (``--metric counted.instructions`` or ``counted.bytes_moved``) need no
detector: counts do not move between processes, so consecutive runs are compared exactly
(guard.counting.verdict, against the suite's counted bound) and each change past it is a
step at the very run that made it; where the counted fingerprint changed, the history
says so instead of comparing.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import numpy as np

from guard.core.errors import UsageError
from guard.core.fsutil import atomic_write_text
from guard.counting.logged import FINGERPRINT_COLUMN, counted_block, parse_fingerprint
from guard.counting.verdict import DEFAULT_COUNTED_REGRESS_PCT, count_changes
from guard.results.counted import Counted
from guard.suite import Suite, load_suite
from guard.track import find_runs, resolve_uri

SCHEMA_VERSION = 1


class Trend(TypedDict):
    """Theil-Sen slope of the log values (% per run) and whether Kendall's tau finds it."""

    pct_per_run: float
    p_value: float
    significant: bool


class Step(TypedDict):
    """A step of a series: where (its index and label), from, to, and by how much."""

    index: int
    at: str
    before: float
    after: float
    ratio: float
    pct: float
    message: NotRequired[str | None]  # counted: compare_counted's line


class Break(TypedDict):
    """Where a counted series' fingerprint changed: counts are not compared across it."""

    index: int
    at: str
    why: str | None


class Analysis(TypedDict):
    """One series' history (``analyse``, ``analyse_counted``)."""

    schema_version: int
    points: int
    first: float
    last: float
    change_pct: float
    steps: list[Step]
    breaks: NotRequired[list[Break]]
    exact: NotRequired[bool]
    regress_pct: NotRequired[float]
    trend: Trend
    bound: float | None
    headroom_consumed: float | None


class SeriesReport(TypedDict):
    backend: str
    target: str
    arch: str
    analysis: dict[str, object]  # the analysis, infinities written as null


class HistoryReport(TypedDict):
    """``guard history --json``: every (backend, target, arch) series' analysis."""

    schema_version: int
    suite: str
    model: str
    metric: str
    series: list[SeriesReport]


SIGMA_FLOOR = 0.01  # log units: 1%


def noise_sigma(logs: np.ndarray) -> float:
    """Robust per-point noise from first differences (a step moves only one difference)."""
    if logs.size < 3:
        return 0.0
    d = np.diff(logs)
    return float(1.4826 * np.median(np.abs(d - np.median(d))) / math.sqrt(2))


def default_min_size(points: int) -> int:
    """The shortest segment PELT may cut: 3 runs in a long history, fewer in a short one.

    A history of 5 runs whose newest run is 2x slower has its step in the last run; with
    segments of 3 it could never be found until three more runs had landed.
    """
    return 3 if points >= 12 else 2 if points >= 6 else 1


def change_points(
    values: Sequence[float], *, penalty: float | None = None, min_size: int | None = None
) -> list[int]:
    """Indices where a new segment starts (PELT, L2 cost on log values)."""
    import ruptures  # heavy (and scipy below): imported when a series is analysed

    y = np.log(np.asarray(values, dtype=float))
    min_size = default_min_size(y.size) if min_size is None else min_size
    if y.size < 2 * min_size or y.size < 3:
        return []
    # No latency is steadier than ~1% from one process to the next (5.7% measured here on a
    # quiet machine): a floor keeps short, lucky-quiet histories from splitting on jitter.
    sigma = max(noise_sigma(y), SIGMA_FLOOR)
    pen = penalty if penalty is not None else 3.0 * sigma**2 * math.log(y.size)
    bkps = (
        ruptures.Pelt(model="l2", min_size=min_size, jump=1).fit(y.reshape(-1, 1)).predict(pen=pen)
    )
    return [b for b in bkps if b < y.size]


def trend(values: Sequence[float], alpha: float = 0.01) -> Trend:
    """Theil-Sen slope of log values (% per run) and whether Kendall's tau finds a trend."""
    from scipy import stats  # heavy: imported when a trend is tested

    y = np.log(np.asarray(values, dtype=float))
    if y.size < 4:
        return {"pct_per_run": 0.0, "p_value": 1.0, "significant": False}
    x = np.arange(y.size)
    slope = float(stats.theilslopes(y, x).slope)
    p = float(stats.kendalltau(x, y).pvalue)
    return {"pct_per_run": (math.exp(slope) - 1) * 100, "p_value": p, "significant": p < alpha}


def analyse(
    values: Sequence[float],
    *,
    labels: Sequence[str] | None = None,
    bound: float | None = None,
    penalty: float | None = None,
    min_size: int | None = None,
) -> Analysis:
    """Steps (where, from, to, ratio) and creep (headroom consumed) for one metric series."""
    v = [float(x) for x in values]
    if any(not math.isfinite(x) or x <= 0 for x in v):
        raise UsageError("history values must be finite and positive")
    if len(v) < 2:
        raise UsageError(f"history needs at least 2 points, got {len(v)}")
    labels = list(labels) if labels is not None else [str(i) for i in range(len(v))]
    cps = change_points(v, penalty=penalty, min_size=min_size)
    edges = [0, *cps, len(v)]
    segments = [v[a:b] for a, b in zip(edges, edges[1:], strict=False)]
    steps: list[Step] = []
    for i, cp in enumerate(cps):
        before, after = statistics.median(segments[i]), statistics.median(segments[i + 1])
        steps.append({"index": cp, "at": labels[cp], "before": before, "after": after,
                      "ratio": after / before, "pct": (after / before - 1) * 100})  # fmt: skip
    k = max(1, min(10, len(v) // 4))
    first = statistics.median(segments[0]) if cps else statistics.median(v[:k])
    last = statistics.median(segments[-1]) if cps else statistics.median(v[-k:])
    out: Analysis = {
        "schema_version": SCHEMA_VERSION,
        "points": len(v),
        "first": first,
        "last": last,
        "change_pct": (last / first - 1) * 100,
        "steps": steps,
        "trend": trend(v),
        "bound": bound,
        "headroom_consumed": None,
    }
    if bound is not None:
        if bound <= first:
            out["headroom_consumed"] = math.inf if last >= first else 0.0
        else:
            out["headroom_consumed"] = (last - first) / (bound - first)
    return out


def analyse_counted(
    blocks: Sequence[Counted],
    values: Sequence[float],
    *,
    labels: Sequence[str],
    regress_pct: float = DEFAULT_COUNTED_REGRESS_PCT,
) -> Analysis:
    """``analyse``'s answer for a counted metric: exact steps between consecutive counts
    (``values`` the metric per block) and the breaks where the fingerprint changed."""
    steps: list[Step] = []
    breaks: list[Break] = []
    for c in count_changes(blocks, regress_pct):
        i, j = c.index, c.previous
        if c.row.verdict == "not comparable":
            breaks.append({"index": i, "at": labels[i], "why": c.row.message})
            continue
        steps.append({"index": i, "at": labels[i], "before": values[j], "after": values[i],
                      "ratio": values[i] / values[j], "pct": (values[i] / values[j] - 1) * 100,
                      "message": c.row.message})  # fmt: skip
    return {
        "schema_version": SCHEMA_VERSION,
        "points": len(values),
        "first": values[0],
        "last": values[-1],
        "change_pct": (values[-1] / values[0] - 1) * 100,
        "steps": steps,
        "breaks": breaks,
        "exact": True,
        "regress_pct": regress_pct,
        "trend": trend(values),
        "bound": None,
        "headroom_consumed": None,
    }


def format_history(name: str, a: Analysis) -> str:
    lines = [
        f"{name}: {a['points']} runs, {a['first']:.4g} → {a['last']:.4g} ({a['change_pct']:+.1f}%)"
    ]
    if not a["steps"]:
        exact = f"no change past {a['regress_pct']:g}% (counted, exact)" if a.get("exact") else ""
        lines.append(f"  {exact or 'no step detected'}")
    for s in a["steps"]:
        lines.append(
            f"  step at {s['at']}: {s['before']:.4g} → {s['after']:.4g} ({s['pct']:+.1f}%)"
            + (f": {s['message']}" if s.get("message") else "")
        )
    for b in a.get("breaks") or ():
        lines.append(f"  counts {b['why']} at {b['at']}: not compared across it")
    t = a.get("trend") or {}
    if t.get("significant"):
        lines.append(f"  creep: {t['pct_per_run']:+.2f}% per run (Kendall p={t['p_value']:.2g})")
    hc = a.get("headroom_consumed")
    if hc is not None:
        shown = (
            "all of it (already at or past the bound)"
            if not math.isfinite(hc) or hc >= 1
            else f"{hc:.0%}"
        )
        lines.append(f"  headroom to the bound {a['bound']:.4g} consumed: {shown}")
    return "\n".join(lines)


def series_from_runs(frame: Any, metric: str) -> tuple[list[float], list[str]]:
    """Oldest-first metric values and "commit@time" labels from a find_runs DataFrame."""
    f = _runs_with(frame, metric)
    if f is None:
        return [], []
    commits = (
        f["tags.guard.git.commit"] if "tags.guard.git.commit" in f.columns else [None] * len(f)
    )
    # A run logged outside git has no commit tag: pandas fills that cell with NaN (a float),
    # so anything but a non-empty string is "nogit".
    labels = [
        f"{c[:10] if isinstance(c, str) and c else 'nogit'}@{t:%Y-%m-%d %H:%M}"
        for c, t in zip(commits, f["start_time"], strict=False)
    ]
    return [float(x) for x in f[f"metrics.{metric}"]], labels


def _runs_with(frame: Any, metric: str) -> Any:
    """The runs of ``frame`` that have ``metric``, oldest first (None: no such run)."""
    col = f"metrics.{metric}"
    if frame is None or len(frame) == 0 or col not in frame.columns:
        return None
    return frame.dropna(subset=[col]).sort_values("start_time")


def counted_blocks(frame: Any, metric: str) -> list[Counted]:
    """The counted blocks (counts and fingerprint) of the runs ``series_from_runs`` reads."""
    f = _runs_with(frame, metric)
    if f is None:
        return []

    out = []
    for _, row in f.iterrows():

        def logged(name: str, row: Any = row) -> Any:
            return _cell(row, f"metrics.{name}")

        out.append(counted_block(logged, parse_fingerprint(_cell(row, FINGERPRINT_COLUMN))))
    return out


def _cell(row: Any, col: str) -> Any:
    """A frame row's value, None where the run has none (pandas fills NaN)."""
    v = row.get(col)
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def suite_counted_bound(suite: Suite | None, model: str) -> float:
    """The model's ``checks.counted.regress_pct``, else the counted check's default."""
    for entry in getattr(suite, "models", ()):
        if entry.name == model:
            counted = entry.checks.counted
            pct = counted.regress_pct if counted is not None else None
            if isinstance(pct, int | float):
                return float(pct)
    return DEFAULT_COUNTED_REGRESS_PCT


def suite_bound(
    suite: Suite | None, model: str, metric: str, arch: str | None = None
) -> float | None:
    """The suite's latency bound for ``latency_ms.pNN`` (per-arch bounds: this machine's)."""
    if not metric.startswith("latency_ms.p"):
        return None
    key = metric.split(".", 1)[1] + "_ms"
    for entry in getattr(suite, "models", ()):
        if entry.name != model:
            continue
        latency = entry.checks.latency
        bound = dict(latency.bounds()).get(key) if latency is not None else None
        if isinstance(bound, Mapping):
            bound = bound.get(arch or platform.machine())
        return float(bound) if isinstance(bound, int | float) else None
    return None


SERIES_TAGS = ("tags.guard.backend", "tags.guard.target", "tags.guard.arch")


def split_series(frame: Any) -> list[tuple[dict[str, str], Any]]:
    """One frame per (backend, target, arch): backends are different series, never one.

    Runs logged before children carried ``guard.arch`` group under arch "".
    """
    if frame is None or len(frame) == 0:
        return []
    f = frame.copy()
    for col in SERIES_TAGS:
        f[col] = f[col].fillna("").astype(str) if col in f.columns else ""
    out = []
    for key, group in f.groupby(list(SERIES_TAGS), sort=True):
        out.append(({"backend": key[0], "target": key[1], "arch": key[2]}, group))
    return out


def history_command(args: argparse.Namespace) -> int:
    suite = args.suite
    bound = args.bound
    loaded = None
    if suite.endswith((".yaml", ".yml")):
        loaded = load_suite(Path(suite))
        suite = loaded.name
    uri = resolve_uri(args.tracking_uri, Path.cwd())
    frame = find_runs(
        uri, suite, model=args.model, backend=args.backend, branch=args.branch or None
    )
    report: HistoryReport = {
        "schema_version": SCHEMA_VERSION, "suite": suite, "model": args.model,
        "metric": args.metric, "series": [],
    }  # fmt: skip
    blocks = []
    for key, group in split_series(frame):
        values, labels = series_from_runs(group, args.metric)
        name = f"{args.model} [{key['backend']}] {key['target']}" + (
            f" ({key['arch']})" if key["arch"] else ""
        )
        if len(values) < 2:
            blocks.append(f"{name} {args.metric}: {len(values)} run(s); history needs 2")
            continue
        b = bound
        if b is None and loaded is not None:
            b = suite_bound(loaded, args.model, args.metric, key["arch"] or None)
        if args.metric.startswith("counted."):
            a = analyse_counted(counted_blocks(group, args.metric), values, labels=labels,
                                regress_pct=suite_counted_bound(loaded, args.model))  # fmt: skip
        else:
            a = analyse(values, labels=labels, bound=b, penalty=args.penalty)
        blocks.append(format_history(f"{name} {args.metric}", a))
        safe = {
            k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in a.items()
        }
        report["series"].append(
            {
                "backend": key["backend"],
                "target": key["target"],
                "arch": key["arch"],
                "analysis": safe,
            }  # fmt: skip
        )
    if not report["series"]:
        n = 0 if frame is None else len(frame)
        raise UsageError(
            f"{n} runs of {args.model} with metric {args.metric!r} in suite {suite!r} "
            f"on branch {args.branch or '(any)'}, and no (backend, target) series with 2; "
            "history needs at least 2 per series",
            hint="Check --model/--backend/--branch/--metric, or run the suite with tracking on.",
        )
    print("\n".join(blocks))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.json, json.dumps(report, indent=2) + "\n")
    return 0
