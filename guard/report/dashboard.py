"""A per-suite dashboard built from MLflow runs: one self-contained HTML page.

For every (model, backend, target) it shows the latest verdict and numbers and a trend
line per metric over the suite's history (p50, p90, arena bytes, partitions, max abs error),
oldest to newest; below, the invocations (commit, branch, verdict). Inline SVG and CSS
only: no scripts, no external assets, so the page can be uploaded as a CI artefact or
served from anywhere. ``guard dashboard SUITE_NAME`` writes it.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from guard.report._io import atomic_write_text

SERIES = (
    ("latency_ms.p50", "p50 ms", "{:.4g}"),
    ("latency_ms.p90", "p90 ms", "{:.4g}"),
    ("arena_bytes", "arena MiB", "{:.3g}"),
    ("partitions.count", "partitions", "{:.0f}"),
    ("numerics.max_abs_err", "max abs err", "{:.2g}"),
)
_SCALE = {"arena_bytes": 1 / 2**20}
_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #1f2328; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.pass { color: #1a7f37; } .fail, .error { color: #cf222e; } .inconclusive { color: #9a6700; }
svg polyline { fill: none; stroke: #0969da; stroke-width: 1.5; }
svg circle { fill: #0969da; }
.muted { color: #656d76; }
"""


def _num(x: Any) -> float | None:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def sparkline(values: Sequence[float | None], width: int = 120, height: int = 28) -> str:
    """An inline SVG polyline of the finite values, oldest left; empty when none."""
    pts = [(i, v) for i, v in enumerate(values) if v is not None]
    if not pts:
        return '<span class="muted">-</span>'
    lo = min(v for _, v in pts)
    hi = max(v for _, v in pts)
    span = hi - lo or 1.0
    n = max(len(values) - 1, 1)
    coords = [(2 + (width - 4) * i / n, height - 2 - (height - 4) * (v - lo) / span)
              for i, v in pts]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
    last_x, last_y = coords[-1]
    return (f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'role="img"><polyline points="{path}"/>'
            f'<circle cx="{last_x:.1f}" cy="{last_y:.1f}" r="2"/></svg>')


def series_from_runs(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, str],
                                                                 list[Mapping[str, Any]]]:
    """Group child-run rows (dicts of MLflow columns) by result key, oldest first."""
    groups: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for r in rows:
        key = (str(r.get("tags.guard.model")), str(r.get("tags.guard.backend")),
               str(r.get("tags.guard.target")))
        groups.setdefault(key, []).append(r)
    for v in groups.values():
        v.sort(key=lambda r: str(r.get("start_time")))
    return dict(sorted(groups.items()))


def to_dashboard_html(suite: str, results: Sequence[Mapping[str, Any]],
                      invocations: Sequence[Mapping[str, Any]], uri: str) -> str:
    e = html.escape
    out = [f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"/><title>guard {e(suite)}"
           f"</title><style>{_CSS}</style></head><body>",
           f"<h1>guard dashboard: {e(suite)}</h1>",
           f'<p class="muted">{len(invocations)} invocation(s), {len(results)} result run(s) '
           f"from {e(uri)}</p>"]
    groups = series_from_runs(results)
    if not groups:
        out.append("<p>No results logged for this suite yet.</p></body></html>")
        return "\n".join(out)
    head = "".join(f"<th>{e(label)}</th><th>trend</th>" for _, label, _ in SERIES)
    out.append(f"<table><tr><th>model [backend] target</th><th>runs</th><th>verdict</th>"
               f"{head}<th>commit</th></tr>")
    for (model, backend, target), rows in groups.items():
        last = rows[-1]
        verdict = str(last.get("tags.guard.verdict") or "?")
        cells = []
        for metric, _, fmt in SERIES:
            scale = _SCALE.get(metric, 1.0)
            vals = [None if (v := _num(r.get(f"metrics.{metric}"))) is None else v * scale
                    for r in rows]
            cur = vals[-1]
            cells.append(f"<td>{'-' if cur is None else e(fmt.format(cur))}</td>"
                         f"<td>{sparkline(vals)}</td>")
        commit = str(last.get("tags.guard.git.commit") or "")[:12]
        out.append(f"<tr><td>{e(model)} [{e(backend)}] {e(target)}</td><td>{len(rows)}</td>"
                   f'<td class="{e(verdict)}">{e(verdict)}</td>{"".join(cells)}'
                   f"<td>{e(commit)}</td></tr>")
    out.append("</table>")
    out.append("<h2>Invocations</h2><table><tr><th>started</th><th>commit</th><th>branch</th>"
               "<th>arch</th><th>verdict</th></tr>")
    for inv in sorted(invocations, key=lambda r: str(r.get("start_time")), reverse=True):
        v = str(inv.get("tags.guard.verdict") or "?")
        out.append(f"<tr><td>{e(str(inv.get('start_time')))}</td>"
                   f"<td>{e(str(inv.get('tags.guard.git.commit') or '')[:12])}</td>"
                   f"<td>{e(str(inv.get('tags.guard.git.branch') or ''))}</td>"
                   f"<td>{e(str(inv.get('tags.guard.arch') or ''))}</td>"
                   f'<td class="{e(v)}">{e(v)}</td></tr>')
    out.append("</table></body></html>")
    return "\n".join(out)


def write_dashboard(suite: str, uri: str, path: Path) -> dict[str, int]:
    """Query MLflow for ``guard/<suite>`` and write the dashboard; returns counts."""
    from guard.track import find_runs

    def records(df: Any) -> list[dict[str, Any]]:
        return [] if df is None or df.empty else df.to_dict("records")

    results = records(find_runs(uri, suite, level="result"))
    invocations = records(find_runs(uri, suite, level="invocation"))
    atomic_write_text(Path(path), to_dashboard_html(suite, results, invocations, uri))
    return {"results": len(results), "invocations": len(invocations),
            "series": len(series_from_runs(results))}
