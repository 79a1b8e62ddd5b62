"""Manifest pins and graph changes, as one-line summaries for the Markdown and HTML reports."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from guard.report._summary import DASH, as_number, get, label, one_line, results, text

PIN_COLUMNS = [
    "model",
    "backend",
    "compiler",
    "runtime",
    "driver",
    "target (canonical)",
    "tuning cache",
    "manifest",
]


def _name_version(value: Any) -> str:
    """``onnxruntime 1.32.0 (graph_optimization_level=all)``: other scalar pins follow."""
    if isinstance(value, Mapping):
        name, version = value.get("name"), value.get("version")
        extra = [
            f"{k}={_short_pin(v)}"
            for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))
            if k not in ("name", "version") and v is not None and not isinstance(v, Mapping | list)
        ]
        if name is None and version is None and not extra:
            return DASH
        head = f"{text(name, '?')} {text(version, '?')}"
        return f"{head} ({', '.join(extra)})" if extra else head
    return text(value)


def _short_pin(value: Any, limit: int = 100) -> str:
    """A pin's value for a table cell: target strings shortened, anything cut at 100."""
    raw = str(value)
    shown = short_target(raw) if "-mattr=" in raw or "-mtriple=" in raw else text(value)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def _driver(value: Any) -> str:
    """``blas=scipy-openblas 0.3.31, cpu=AMD EPYC, kernel=6.18``: nested pins by name+version."""
    if isinstance(value, Mapping):
        items = []
        for k, v in sorted(value.items(), key=lambda kv: str(kv[0])):
            if v is None:
                continue
            if isinstance(v, Mapping) and ("name" in v or "version" in v):
                v = f"{text(v.get('name'), '?')} {text(v.get('version'), '?')}"
            items.append(f"{k}={text(v)}")
        return ", ".join(items) or DASH
    return text(value)


MAX_ATTRS = 6


def short_target(target: Any) -> str:
    """A target string with long attribute lists cut down: ``-mattr=+aes,+avx,… (+30)``.

    The full string is in the results JSON; a summary table only needs to show which
    target it is (cpu, triple) and that the feature list is long.
    """
    if target is None:
        return DASH
    parts = []
    for token in one_line(str(target), limit=100_000).split(" "):
        key, eq, val = token.partition("=")
        items = val.split(",")
        if eq and len(items) > MAX_ATTRS:
            token = f"{key}={','.join(items[:4])},… (+{len(items) - 4})"
        parts.append(token)
    return " ".join(parts) or DASH


def _tuning(value: Any) -> str:
    if not isinstance(value, Mapping):
        return text(value)
    sha = value.get("sha256")
    parts = [str(sha)[:12]] if sha else []
    hits, misses = as_number(value.get("hits")), as_number(value.get("misses"))
    if hits is not None or misses is not None:
        parts.append(f"{int(hits or 0)} hits / {int(misses or 0)} misses")
    elif value.get("entries") is not None:
        parts.append(f"{text(value.get('entries'))} entries")
    return ", ".join(parts) or DASH


def pins(doc: Any) -> list[list[str]]:
    """Manifest pins per (model, backend), first-seen order; identical rows merged.

    The model column says which artefact a row pins (its manifest hash covers the model's
    own hash); targets are shortened (short_target), the full string is in the JSON.
    """
    seen: dict[tuple[str, ...], None] = {}
    for r in results(doc):
        m = r.get("manifest")
        if not isinstance(m, Mapping):
            continue
        sha = m.get("sha256")
        key = (
            text(r.get("model"), "?"),
            text(r.get("backend"), "?"),
            _name_version(m.get("compiler")),
            _name_version(m.get("runtime")),
            _driver(m.get("driver")),
            short_target(
                get(m, "target", "canonical") or get(m, "target", "raw") or r.get("target")
            ),
            _tuning(m.get("tuning_cache")),
            str(sha)[:12] if sha else DASH,
        )
        seen.setdefault(key, None)
    return [list(k) for k in seen]


def _op_total(ops: Any) -> int | None:
    if not isinstance(ops, Mapping):
        return None
    total = 0
    for n in ops.values():
        x = as_number(n)
        if x is None:
            return None
        total += int(x)
    return total


def _op_counts(ops: Any) -> str:
    if not isinstance(ops, Mapping) or not ops:
        return ""
    items = sorted(ops.items(), key=lambda kv: (-(as_number(kv[1]) or 0), str(kv[0])))
    return ", ".join(f"{k} ×{text(v)}" for k, v in items)


def graph_summaries(doc: Any) -> list[tuple[str, str]]:
    """(label, one line): ops before → after, ops the compiler added, passes that changed."""
    out = []
    for r in results(doc):
        g = r.get("graph")
        if not isinstance(g, Mapping):
            continue
        parts = []
        before, after = _op_total(g.get("ops_before")), _op_total(g.get("ops_after"))
        if before is not None or after is not None:
            parts.append(f"{text(before)} → {text(after)} ops")
        added = _op_counts(g.get("added"))
        parts.append(f"added {added}" if added else "no ops added")
        passes = g.get("passes")
        if isinstance(passes, Sequence) and not isinstance(passes, str | bytes):
            changed = [
                text(get(p, "name"), "?")
                for p in passes
                if isinstance(p, Mapping) and p.get("changed")
            ]
            if changed:
                parts.append(f"passes that changed it: {', '.join(changed)}")
        out.append((label(r), "; ".join(parts)))
    return out
