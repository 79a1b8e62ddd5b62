"""Markdown report, written to be appended to ``$GITHUB_STEP_SUMMARY``.

GitHub-flavoured Markdown: a headline, one table row per result, then the failures, preflight
warnings, manifest pins and graph changes. Every piece of text from the document is escaped
(pipes would split table cells; ``<`` would start HTML), and long lists are capped because a
step summary is limited to 1 MiB.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from guard.report import _details as D
from guard.report import _summary as S
from guard.report._io import atomic_write_text, check_target
from guard.results.documents import ResultsDocument

VERDICT_ICON = {"pass": "✅", "fail": "❌", "error": "⛔", "inconclusive": "⚠️"}
MAX_LIST_ITEMS = 200
_MD_PUNCT = "\\`*_[]|"
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def escape(value: Any) -> str:
    """Text that renders literally in a GFM table cell or list item (one line)."""
    line = S.text(value, "")
    out = []
    for i, ch in enumerate(line):
        if ch == "_" and _intraword(line, i):
            # GFM never reads an intraword underscore as emphasis: keep x86_64 readable raw.
            out.append(ch)
        elif ch in _MD_PUNCT:
            out.append("\\" + ch)
        else:
            out.append(_ENTITIES.get(ch, ch))
    return "".join(out) or S.DASH


def _intraword(line: str, i: int) -> bool:
    return 0 < i < len(line) - 1 and line[i - 1].isalnum() and line[i + 1].isalnum()


def _table(
    header: list[str], rows: list[list[str]], numeric: set[int] | frozenset[int] = frozenset()
) -> list[str]:
    align = ["---:" if i in numeric else "---" for i in range(len(header))]
    lines = ["| " + " | ".join(escape(h) for h in header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(escape(c) for c in r) + " |" for r in rows]
    return lines


def _capped(items: list[str], what: str) -> list[str]:
    if len(items) <= MAX_LIST_ITEMS:
        return items
    rest = len(items) - MAX_LIST_ITEMS
    return items[:MAX_LIST_ITEMS] + [f"- … and {rest} more {what} (see the results JSON)"]


def to_markdown(doc: ResultsDocument | Any) -> str:
    """The whole report as a Markdown string (ends with a newline)."""
    doc = S.document(doc)
    overall = S.overall(doc)
    suite = escape(doc.suite or "guard")
    lines = [f"## {S.OVERALL_ICON[overall]} guard {suite}: {escape(S.headline_counts(doc))}", ""]
    prov = S.provenance(doc)
    if prov:
        lines += [escape(prov), ""]

    rows = []
    for r in doc.results:
        cells = S.row(r).cells()
        cells[2] = f"{VERDICT_ICON.get(cells[2], '')} {cells[2]}".strip()
        rows.append(cells)
    if rows:
        lines += _table(S.TABLE_COLUMNS, rows, S.NUMERIC_COLUMNS) + [""]

    counted = S.counted_lines(doc)
    if counted:
        items = [f"- **{escape(lbl)}**: {escape(msg)}" for lbl, msg in counted]
        lines += ["### Counted cost", ""] + _capped(items, "counts") + [""]

    fails = S.failures(doc)
    if fails:
        items = [
            f"- **{escape(f.label)}** {escape(f.check)}"
            f"{' (error)' if f.status == 'error' and f.check != 'error' else ''}: "
            f"{escape(f.message)}"
            for f in fails
        ]
        lines += ["### Failed checks", ""] + _capped(items, "failures") + [""]

    warns = S.warnings(doc)
    if warns:
        items = [f"- **{escape(lbl)}**: {escape(msg)}" for lbl, msg in warns]
        lines += ["### Preflight warnings", ""] + _capped(items, "warnings") + [""]

    pins = D.pins(doc)
    if pins:
        lines += ["### Manifest pins", ""] + _table(D.PIN_COLUMNS, pins) + [""]

    graphs = D.graph_summaries(doc)
    if graphs:
        items = [f"- **{escape(lbl)}**: {escape(summary)}" for lbl, summary in graphs]
        lines += ["### Graph changes", ""] + _capped(items, "graphs") + [""]

    return "\n".join(lines).rstrip("\n") + "\n"


def write_markdown(doc: Any, path: str | os.PathLike[str]) -> Path:
    """Write :func:`to_markdown` to ``path`` atomically; return the path."""
    check_target(path)
    return atomic_write_text(path, to_markdown(doc))
