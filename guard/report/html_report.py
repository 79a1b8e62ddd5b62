"""A self-contained HTML report: one file, inline CSS, no scripts, no external assets.

It says what the Markdown report says, for dashboards and compare reports to link to or
embed. The output is well-formed XHTML-compatible markup (every element closed, only the
``&amp; &lt; &gt; &quot;`` entities), so it can be checked with an XML parser.
"""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Any

from guard.report import _details as D
from guard.report import _summary as S
from guard.report._io import atomic_write_text, check_target
from guard.results.documents import ResultsDocument

_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1f2328; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.5em; }
table { border-collapse: collapse; } th, td { border: 1px solid #d0d7de; padding: 3px 8px; }
th { background: #f6f8fa; text-align: left; } td.num { text-align: right; }
.pass { color: #1a7f37; } .fail, .error { color: #cf222e; font-weight: 600; }
.inconclusive { color: #9a6700; } .muted { color: #656d76; }
""".strip()


def _e(value: Any) -> str:
    return html.escape(S.text(value, ""), quote=True) or S.DASH


def _table(
    header: list[str],
    rows: list[list[str]],
    numeric: set[int] | frozenset[int] = frozenset(),
    verdict_col: int | None = None,
) -> list[str]:
    out = ["<table>", "<tr>" + "".join(f"<th>{_e(h)}</th>" for h in header) + "</tr>"]
    for r in rows:
        cells = []
        for i, c in enumerate(r):
            cls = []
            if i in numeric:
                cls.append("num")
            if i == verdict_col:
                cls.append(c if c in ("pass", "fail", "error", "inconclusive") else "error")
            attr = f' class="{" ".join(cls)}"' if cls else ""
            cells.append(f"<td{attr}>{_e(c)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    return out


def _list(items: list[tuple[str, str]]) -> list[str]:
    return ["<ul>"] + [f"<li><b>{_e(a)}</b>: {_e(b)}</li>" for a, b in items] + ["</ul>"]


def to_html(doc: ResultsDocument | Any) -> str:
    """The report as one HTML document string."""
    doc = S.document(doc)
    overall = S.overall(doc)
    suite = S.text(doc.suite, "guard")
    title = f"guard {suite}: {S.headline_counts(doc)}"
    body = [f'<h1 class="{overall}">{S.OVERALL_ICON[overall]} {_e(title)}</h1>']
    prov = S.provenance(doc)
    if prov:
        body.append(f'<p class="muted">{_e(prov)}</p>')
    rows = [S.row(r).cells() for r in doc.results]
    if rows:
        body += _table(S.TABLE_COLUMNS, rows, S.NUMERIC_COLUMNS, verdict_col=2)
    fails = S.failures(doc)
    if fails:
        body += ["<h2>Failed checks</h2>"] + _list(
            [(f"{f.label} {f.check}", f.message) for f in fails]
        )
    warns = S.warnings(doc)
    if warns:
        body += ["<h2>Preflight warnings</h2>"] + _list(warns)
    pins = D.pins(doc)
    if pins:
        body += ["<h2>Manifest pins</h2>"] + _table(D.PIN_COLUMNS, pins)
    graphs = D.graph_summaries(doc)
    if graphs:
        body += ["<h2>Graph changes</h2>"] + _list(graphs)
    head = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8"/>',
        f"<title>{_e(title)}</title>",
        f"<style>\n{_CSS}\n</style>",
        "</head>",
        "<body>",
    ]
    return "\n".join(head + body + ["</body>", "</html>"]) + "\n"


def write_html(doc: Any, path: str | os.PathLike[str]) -> Path:
    """Write :func:`to_html` to ``path`` atomically; return the path."""
    check_target(path)
    return atomic_write_text(path, to_html(doc))
