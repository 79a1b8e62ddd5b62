"""Manifest pins and graph changes, as one-line summaries for the Markdown and HTML reports."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from guard.report._summary import DASH, as_number, document, label, one_line, text
from guard.results.documents import ResultsDocument
from guard.results.manifest import Component, TuningCache
from guard.results.record import Json

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


def _name_version(value: Component) -> str:
    """``onnxruntime 1.32.0 (graph_optimization_level=all)``: other scalar pins follow."""
    name, version = value.name, value.version
    # the backend's own pins, whatever they are called: every scalar beside name and version
    extra = [
        f"{k}={_short_pin(v)}"
        for k, v in sorted(value.extra.items(), key=lambda kv: str(kv[0]))
        if v is not None and not isinstance(v, Mapping | list)
    ]
    if name is None and version is None and not extra:
        return DASH
    head = f"{text(name, '?')} {text(version, '?')}"
    return f"{head} ({', '.join(extra)})" if extra else head


def _short_pin(value: Any, limit: int = 100) -> str:
    """A pin's value for a table cell: target strings shortened, anything cut at 100."""
    raw = str(value)
    shown = short_target(raw) if "-mattr=" in raw or "-mtriple=" in raw else text(value)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def _driver(value: Mapping[str, Json]) -> str:
    """``blas=scipy-openblas 0.3.31, cpu=AMD EPYC, kernel=6.18``: nested pins by name+version."""
    items = []
    # the driver block is the host's pins by name (blas, cpu, kernel, gpu, ...)
    for k, v in sorted(value.items(), key=lambda kv: str(kv[0])):
        if v is None:
            continue
        if isinstance(v, Mapping) and ("name" in v or "version" in v):
            pin = Component.from_json(v)
            v = f"{text(pin.name, '?')} {text(pin.version, '?')}"
        items.append(f"{k}={text(v)}")
    return ", ".join(items) or DASH


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


def _tuning(value: TuningCache) -> str:
    sha = value.sha256
    parts = [str(sha)[:12]] if sha else []
    hits, misses = as_number(value.hits), as_number(value.misses)
    if hits is not None or misses is not None:
        parts.append(f"{int(hits or 0)} hits / {int(misses or 0)} misses")
    elif value.entries is not None:
        parts.append(f"{text(value.entries)} entries")
    return ", ".join(parts) or DASH


def pins(doc: ResultsDocument | Any) -> list[list[str]]:
    """Manifest pins per (model, backend), first-seen order; identical rows merged.

    The model column says which artefact a row pins (its manifest hash covers the model's
    own hash); targets are shortened (short_target), the full string is in the JSON.
    """
    doc = document(doc)
    seen: dict[tuple[str, ...], None] = {}
    for r in doc.results:
        m = r.manifest
        if not m.read:  # no manifest: an error before the build
            continue
        sha = m.sha256
        key = (
            text(r.model, "?"),
            text(r.backend, "?"),
            _name_version(m.compiler),
            _name_version(m.runtime),
            _driver(m.driver),
            short_target(m.target.canonical or m.target.raw or r.target),
            _tuning(m.tuning_cache),
            str(sha)[:12] if sha else DASH,
        )
        seen.setdefault(key, None)
    return [list(k) for k in seen]


def _op_total(ops: Mapping[str, int] | None) -> int | None:
    if ops is None:
        return None
    total = 0
    for n in ops.values():
        x = as_number(n)
        if x is None:
            return None
        total += int(x)
    return total


def _op_counts(ops: Mapping[str, int] | None) -> str:
    if not ops:
        return ""
    items = sorted(ops.items(), key=lambda kv: (-(as_number(kv[1]) or 0), str(kv[0])))
    return ", ".join(f"{k} ×{text(v)}" for k, v in items)


def graph_summaries(doc: ResultsDocument | Any) -> list[tuple[str, str]]:
    """(label, one line): ops before → after, ops the compiler added, passes that changed."""
    doc = document(doc)
    out = []
    for r in doc.results:
        g = r.graph
        if g is None:
            continue
        parts = []
        before, after = _op_total(g.ops_before), _op_total(g.ops_after)
        if before is not None or after is not None:
            parts.append(f"{text(before)} → {text(after)} ops")
        added = _op_counts(g.added)
        parts.append(f"added {added}" if added else "no ops added")
        changed = [text(p.name, "?") for p in g.passes or () if p.changed]
        if changed:
            parts.append(f"passes that changed it: {', '.join(changed)}")
        out.append((label(r), "; ".join(parts)))
    return out
