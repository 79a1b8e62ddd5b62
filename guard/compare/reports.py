"""Comparison and dependency-bump reports: Markdown, HTML and the JSON contract.

Every report opens with what changed in the stack (the manifest diff), because that is
the subject of the comparison; the per-model rows follow, then the aggregates.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from guard.compare import crossarch, int8_outputs
from guard.compare.written import ComparisonDocumentJson
from guard.core.fsutil import atomic_write_text
from guard.counting import rows as counted_rows
from guard.results.cross_arch import CrossArchRow
from guard.results.documents import ComparisonDocument, ComparisonRow, Side
from guard.stats.verdicts import on_rounds

_ICON = {
    "pass": "pass",
    "regressed": "**REGRESSED**",
    "improved": "improved",
    "inconclusive": "inconclusive",
}


def _clean(x: Any) -> Any:
    """JSON has no NaN or Infinity: write them as null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, Mapping):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    return x


def write_json(doc: ComparisonDocumentJson, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(p, json.dumps(_clean(doc), indent=2, sort_keys=False) + "\n")
    return p


def _pct(r: Any) -> str:
    if not isinstance(r, int | float) or not math.isfinite(r):
        return "n/a"
    return f"{(r - 1) * 100:+.1f}%"


def _pair(p: Any, fmt: str = "{}") -> str:
    if not isinstance(p, list | tuple) or len(p) != 2:
        return "n/a"
    a, b = ("n/a" if v is None else fmt.format(v) for v in p)
    return a if a == b else f"{a} → {b}"


def _md(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def manifest_lines(diff: Mapping[str, Sequence[Any]]) -> list[str]:
    if not diff:
        return ["- no pinned field changed (same compiler, runtime, driver, target, tuning cache)"]
    return [f"- `{k}`: {_md(v[0])} → {_md(v[1])}" for k, v in diff.items()]


def row_cells(r: ComparisonRow) -> list[str]:
    ci = r.ci or (None, None)
    stats = r.stats
    mde = stats.mde_pct
    n = f"{_or_q(stats.n_base)}/{_or_q(stats.n_head)}" if stats.n_base is not None else "n/a"
    if on_rounds(stats.method):
        n += " rounds"
    num = r.numerics
    return [
        f"{r.model} / {r.backend}",
        _ICON.get(str(r.verdict), str(r.verdict)),
        _pct(r.ratio),
        f"[{_pct(ci[0])}, {_pct(ci[1])}]",
        "n/a" if mde is None or not math.isfinite(mde) else f"{mde:.1f}%",
        n,
        _pair(r.arena_bytes),
        _pair(r.partitions),
        ("changed" if num.output_sha256_changed else "same")
        + (
            f"; head-base {num.max_abs_diff:.2g}"  # interleaved A/B: outputs side by side
            if num.max_abs_diff is not None
            else f"; {_pair(num.max_abs_err, '{:.2g}')}"
        ),
        _pair(r.tuning_hit_rate, "{:.0%}"),
        r.attribution or "",
    ]


def _or_q(n: int | None) -> str:
    return "?" if n is None else str(n)


def unresolved_rounds(cmp: ComparisonDocument) -> str:
    """A line for rows judged on two runs' rounds that could not resolve their threshold:
    what those runs could see, and the comparison that can (one runner, interleaved).
    Empty when there are none."""
    mdes = []
    for r in cmp.rows:
        mde, thr = r.stats.mde_pct, r.stats.threshold_pct
        if (
            r.verdict == "inconclusive"
            and on_rounds(r.stats.method)
            and mde is not None
            and thr is not None
            and math.isfinite(mde)
            and mde > thr
        ):
            mdes.append(mde)
    if not mdes:
        return ""
    span = f"{min(mdes):.1f}%" if len(mdes) == 1 else f"{min(mdes):.1f}-{max(mdes):.1f}%"
    return (
        f"{len(mdes)} inconclusive row(s) could only have flagged a slowdown of {span} or "
        "more (their rounds' spread plus what a machine does between two runs). To gate a change, time both commits interleaved on one runner: "
        "`guard ab SUITE --base-ref BASE`."
    )


HEADERS = [
    "model / backend", "verdict", "latency", "CI", "MDE", "n", "arena bytes",
    "partitions", "outputs; max abs err", "tuning hits", "attribution",
]  # fmt: skip


def to_markdown(doc: ComparisonDocument, title: str = "guard compare") -> str:
    s = doc.summary
    bv = s.by_verdict
    # The manifest diff is the first thing a reader sees: it is what the comparison is about.
    lines = ["## Manifest diff", "", *manifest_lines(doc.manifest_diff), ""]
    base, head = doc.base, doc.head
    lines += [
        f"## {title}: {_md(_label(head, 'head'))} vs {_md(_label(base, 'base'))}",
        "",
        f"{s.compared if s.compared is not None else 0} compared: "
        f"{bv.get('regressed', 0)} regressed, "
        f"{bv.get('improved', 0)} improved, {bv.get('pass', 0)} pass, "
        f"{bv.get('inconclusive', 0)} inconclusive; geometric-mean latency ratio "
        f"{_pct(s.geomean_ratio)} (models present on both sides only).",
        "",
        "| " + " | ".join(HEADERS) + " |",
        "|" + "---|" * len(HEADERS),
    ]
    for r in doc.rows:
        lines.append("| " + " | ".join(_md(c) for c in row_cells(r)) + " |")
    for only, what in ((s.only_base, "only in base"), (s.only_head, "only in head")):
        if only:
            lines += ["", f"{what.capitalize()} (not aggregated): " + ", ".join(only)]
    cross = crossarch.markdown_lines([CrossArchRow.of(r) for r in doc.cross_arch])
    if cross:
        lines += ["", *cross]
    counted = counted_rows.markdown_lines(doc.counted)
    if counted:
        lines += ["", *counted]
    int8 = int8_outputs.markdown_lines(doc.int8)
    if int8:
        lines += ["", *int8]
    unresolved = unresolved_rounds(doc)
    if unresolved:
        lines += ["", unresolved]
    cfg = doc.config
    lines += [
        "",
        f"A row regresses when head is significantly slower (alpha {cfg.alpha}) *and* "
        f"the median ratio exceeds the threshold (regress_pct {cfg.regress_pct}%, or "
        "the calibrated noise when larger). MDE: the smallest slowdown this data would flag.",
    ]
    return "\n".join(lines) + "\n"


def _label(side: Side, default: str) -> str:
    """A side's label as the document gives it (``default`` where it gives none)."""
    return default if "label" not in side.to_json() else str(side.label)


def to_html(doc: ComparisonDocument, title: str = "guard compare") -> str:
    e = html.escape
    items = "".join(
        f"<li><code>{e(k)}</code>: {e(str(v[0]))} &rarr; {e(str(v[1]))}</li>"
        for k, v in doc.manifest_diff.items()
    )
    if not items:
        items = "<li>no pinned field changed</li>"
    head = "".join(f"<th>{e(h)}</th>" for h in HEADERS)
    body = []
    for r in doc.rows:
        cls = e(str(r.verdict))
        cells = "".join(f"<td>{e(c.replace('**', ''))}</td>" for c in row_cells(r))
        body.append(f'<tr class="{cls}">{cells}</tr>')
    md_summary = to_markdown(doc, title).split("\n")
    summary = next((ln for ln in md_summary if " compared: " in ln), "")
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{e(title)}</title><style>"
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;font-size:90%}"
        "tr.regressed{background:#fdd}tr.improved{background:#dfd}tr.inconclusive{background:#ffd}"
        "</style></head><body>"
        f"<h2>Manifest diff</h2><ul>{items}</ul>"
        f"<h2>{e(title)}</h2><p>{e(summary)}</p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        "</body></html>\n"
    )


def write_reports(
    cmp: ComparisonDocumentJson,
    *,
    json_path: str | Path | None = None,
    md_path: str | Path | None = None,
    html_path: str | Path | None = None,
    title: str = "guard compare",
) -> list[Path]:
    written = []
    if json_path:
        written.append(write_json(cmp, json_path))
    doc = ComparisonDocument.from_json(cmp)
    for path, render in ((md_path, to_markdown), (html_path, to_html)):
        if path:
            p = Path(path)
            p.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(p, render(doc, title))
            written.append(p)
    return written
