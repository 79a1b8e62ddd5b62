"""The doctor document as Markdown and as a rich console listing (one finding per step)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from guard.doctor.doctor import DoctorCase, DoctorDocument
from guard.doctor.finding import LABELS

_STYLE = {
    "ok": "green",
    "suspect": "yellow",
    "cause_found": "bold red",
    "not_applicable": "dim",
    "unknown": "magenta",
}
_ICON = {"ok": "✅", "suspect": "⚠️", "cause_found": "❌", "not_applicable": "➖", "unknown": "❔"}


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True, default=str)
    return str(v)


def _title(case: DoctorCase, doc: DoctorDocument) -> str:
    t = f"{case['model']} [{case['backend']}] {case['target']}"
    r = case.get("p50_ratio")
    b, h = case.get("p50_ms") or [None, None]
    if r is not None:
        t += f": p50 {b:.4g} -> {h:.4g} ms ({r:.2f}x)"
    elif h is not None:
        t += f": p50 {h:.4g} ms"
    return t


def _validity(case: DoctorCase) -> str | None:
    """What the noise hides, said before any step (None for older documents)."""
    v = case.get("validity")
    if not isinstance(v, Mapping):
        return None
    hidden = v.get("hidden_below_pct")
    if v.get("valid"):
        return f"comparison valid; noise hides effects below {hidden:.0f}%" if hidden else None
    return "comparison not valid: " + "; ".join(str(i.get("fact")) for i in v.get("invalid") or ())


def _headline(case: DoctorCase) -> str:
    first = case.get("first_cause")
    if first is None:
        return "no step found a cause" + (
            f"; suspect: step {', '.join(map(str, case['suspects']))}"
            if case.get("suspects")
            else ""
        )
    f = case["findings"][first - 1]
    return f"first cause: step {first} ({f['title']}): {f['summary']}"


def to_markdown(doc: DoctorDocument) -> str:
    pair = doc.get("base") is not None
    lines = [f"# guard doctor: {doc.get('suite')}", ""]
    lines.append(
        f"{doc.get('base')} → {doc.get('head')}"
        if pair
        else f"{doc.get('head')} (one run's health)"
    )
    lines.append("")
    for case in doc.get("cases") or []:
        lines += [f"## {_title(case, doc)}", ""]
        if _validity(case):
            lines += [f"**{_validity(case)}**", ""]
        lines += [f"**{_headline(case)}**", ""]
        for f in case["findings"]:
            lines.append(
                f"### {f['step']}. {f['title']}: {_ICON[f['status']]} {LABELS[f['status']]}"
            )
            lines.append("")
            lines.append(f["summary"])
            lines.append("")
            if f["evidence"]:
                lines += [
                    "| fact | base | head |" if pair else "| fact | value |",
                    "|---|---|---|" if pair else "|---|---|",
                ]
                for e in f["evidence"]:
                    cells = (
                        [e["fact"], _fmt(e["base"]), _fmt(e["head"])]
                        if pair
                        else [e["fact"], _fmt(e["head"])]
                    )
                    lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
                lines.append("")
            if f["missing"]:
                lines += [f"Not recorded: {'; '.join(f['missing'])}", ""]
            if f["action"]:
                lines += [f"What to do: {f['action']}", ""]
    return "\n".join(lines).rstrip() + "\n"


def render_console(doc: DoctorDocument, console: Console | None = None) -> None:
    con = console or Console()
    pair = doc.get("base") is not None
    for case in doc.get("cases") or []:
        con.print(Text(_title(case, doc), style="bold"))
        valid = _validity(case)
        if valid:
            con.print(
                Text(valid, style="green" if valid.startswith("comparison valid") else "bold red")
            )
        con.print(Text(_headline(case), style="bold red" if case.get("first_cause") else "green"))
        for f in case["findings"]:
            line = Text(f"{f['step']:>2}. {f['title']}: ", style="bold")
            line.append(LABELS[f["status"]], style=_STYLE[f["status"]])
            line.append(f" — {f['summary']}")
            con.print(line)
            if f["evidence"] and f["status"] not in ("ok", "not_applicable"):
                t = Table(show_header=True, box=None, padding=(0, 1), pad_edge=False)
                t.add_column("    fact")
                if pair:
                    t.add_column("base")
                t.add_column("head")
                for e in f["evidence"]:
                    row = [
                        "    " + e["fact"],
                        *([_fmt(e["base"])] if pair else []),
                        _fmt(e["head"]),
                    ]
                    t.add_row(*row)
                con.print(t)
            if f["missing"] and f["status"] != "unknown":
                con.print(Text(f"    not recorded: {'; '.join(f['missing'])}", style="dim"))
            if f["action"] and f["status"] in ("cause_found", "suspect", "unknown"):
                con.print(Text(f"    → {f['action']}", style="cyan"))
        con.print()
