"""One reading of a results document, shared by the console, Markdown and HTML reports.

A results document (DESIGN.md, results contract v1) comes from a run that may have failed
half-way: an ``error`` result can lack any field, and any value can be None. Everything here
reads through :func:`get`, so a missing or mistyped field shows as a dash, never a crash.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

DASH = "—"
MIB = 1024 * 1024
FAILED_STATUSES = ("fail", "error")
VERDICT_ORDER = ("fail", "error", "inconclusive", "pass")
_VERDICT_WORDS = {
    "pass": "passed",
    "fail": "failed",
    "error": "errored",
    "inconclusive": "inconclusive",
}
_MAX_MESSAGE = 300
_WS = re.compile(r"\s+")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ufffe\uffff]")


def get(obj: Any, *keys: str) -> Any:
    """``obj[k1][k2]...``, or None as soon as a level is missing or not a mapping."""
    for key in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def results(doc: Any) -> list[Mapping[str, Any]]:
    """The result entries that are mappings (anything else in the list is skipped)."""
    items = get(doc, "results")
    if not isinstance(items, Sequence) or isinstance(items, str | bytes):
        return []
    return [r for r in items if isinstance(r, Mapping)]


def checks(result: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    items = result.get("checks")
    if not isinstance(items, Sequence) or isinstance(items, str | bytes):
        return []
    return [c for c in items if isinstance(c, Mapping)]


def text(value: Any, default: str = DASH) -> str:
    """A value as one line of text."""
    if value is None or value == "":
        return default
    return one_line(str(value))


def one_line(message: str, limit: int = _MAX_MESSAGE) -> str:
    """Collapse whitespace (a message may carry a traceback) and cap the length.

    Control characters become U+FFFD: XML and HTML cannot hold them, and an escape sequence
    in a message would restyle the terminal.
    """
    line = _CONTROL.sub("\ufffd", _WS.sub(" ", message)).strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


def verdict(result: Mapping[str, Any]) -> str:
    """The result's verdict; a result without one is an error (it never got that far)."""
    return text(result.get("verdict"), "error")


def label(result: Mapping[str, Any]) -> str:
    """``model[backend]``, the name used for a result in every report."""
    return f"{text(result.get('model'), '?')}[{text(result.get('backend'), '?')}]"


def _number(value: Any) -> float | None:
    """A finite float, or None for anything else (bools, strings, NaN, missing)."""
    if isinstance(value, np.integer | np.floating):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def fmt_num(value: Any) -> str:
    """A magnitude with about three significant figures, without exponent for >= 0.001."""
    x = _number(value)
    if x is None:
        return DASH if value is None else text(value)
    ax = abs(x)
    if ax >= 100:
        return f"{x:.0f}"
    if ax >= 10:
        return f"{x:.1f}"
    if ax >= 1 or ax == 0:
        return f"{x:.2f}"
    if ax >= 0.001:
        return f"{x:.3f}"
    return f"{x:.2e}"


def fmt_err(value: Any) -> str:
    x = _number(value)
    if x is None:
        return DASH if value is None else text(value)
    return "0" if x == 0 else f"{x:.2e}"


def fmt_mib(value: Any) -> str:
    x = _number(value)
    return DASH if x is None else fmt_num(x / MIB)


def verdict_counts(doc: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in results(doc):
        v = verdict(r)
        counts[v] = counts.get(v, 0) + 1
    return counts


def overall(doc: Any) -> str:
    """``pass``, ``fail`` (a failure or error) or ``inconclusive`` (or nothing ran)."""
    counts = verdict_counts(doc)
    if not counts:
        return "inconclusive"
    if any(v != "pass" and v != "inconclusive" for v in counts):
        return "fail"
    return "inconclusive" if counts.get("inconclusive") else "pass"


OVERALL_ICON = {"pass": "✅", "fail": "❌", "inconclusive": "⚠️"}


def headline_counts(doc: Any) -> str:
    """``1 failed, 1 error, 2 passed of 4 results``."""
    counts = verdict_counts(doc)
    total = sum(counts.values())
    if not total:
        return "no results"
    order = [v for v in VERDICT_ORDER if v in counts] + sorted(set(counts) - set(VERDICT_ORDER))
    parts = [f"{counts[v]} {_VERDICT_WORDS.get(v, v)}" for v in order]
    return f"{', '.join(parts)} of {total} result{'s' if total != 1 else ''}"


def provenance(doc: Any) -> str:
    """``commit abc1234 (dirty) on main · started ... · exit code 1``, as far as known."""
    parts = []
    commit = get(doc, "git", "commit")
    if commit:
        c = f"commit {str(commit)[:12]}"
        if get(doc, "git", "dirty"):
            c += " (dirty)"
        branch = get(doc, "git", "branch")
        if branch:
            c += f" on {text(branch)}"
        parts.append(c)
    if get(doc, "started"):
        parts.append(f"started {text(get(doc, 'started'))}")
    if get(doc, "exit_code") is not None:
        parts.append(f"exit code {text(get(doc, 'exit_code'))}")
    return " · ".join(parts)


@dataclass(frozen=True)
class Row:
    """One result as display strings, in the column order of TABLE_COLUMNS."""

    model: str
    backend: str
    verdict: str
    p50: str
    p90: str
    partitions: str
    arena: str
    max_abs_err: str
    failed: str

    def cells(self) -> list[str]:
        return [
            self.model,
            self.backend,
            self.verdict,
            self.p50,
            self.p90,
            self.partitions,
            self.arena,
            self.max_abs_err,
            self.failed,
        ]


TABLE_COLUMNS = [
    "model",
    "backend",
    "verdict",
    "p50 ms",
    "p90 ms",
    "partitions",
    "arena MiB (lower bound)",
    "max abs err",
    "failed checks",
]
NUMERIC_COLUMNS = {3, 4, 5, 6, 7}


def failed_check_names(result: Mapping[str, Any]) -> list[str]:
    names = [text(c.get("name"), "?") for c in checks(result) if c.get("status") in FAILED_STATUSES]
    if not names and verdict(result) == "error":
        names = ["error"]
    return names


def row(result: Mapping[str, Any]) -> Row:
    count = get(result, "partitions", "count")
    partitions = fmt_num(count) if _number(count) is None else str(int(_number(count) or 0))
    fallback = _number(get(result, "partitions", "fallback_nodes"))
    if fallback:
        partitions += f" ({int(fallback)} fallback)"
    arena = fmt_mib(result.get("arena_bytes"))
    lower = result.get("arena_lower_bound_bytes")
    if _number(lower) is not None:
        arena += f" ({fmt_mib(lower)})"
    return Row(
        model=text(result.get("model"), "?"),
        backend=text(result.get("backend"), "?"),
        verdict=verdict(result),
        p50=fmt_num(get(result, "latency_ms", "p50")),
        p90=fmt_num(get(result, "latency_ms", "p90")),
        partitions=partitions,
        arena=arena,
        max_abs_err=fmt_err(get(result, "numerics", "max_abs_err")),
        failed=", ".join(failed_check_names(result)),
    )


@dataclass(frozen=True)
class Failure:
    """One failed or errored check (or a result that errored before its checks ran)."""

    label: str
    check: str
    status: str
    message: str


def check_message(check: Mapping[str, Any]) -> str:
    msg = check.get("message")
    if msg:
        return one_line(str(msg))
    value, bound = check.get("value"), check.get("bound")
    if value is None and bound is None:
        return f"{text(check.get('name'), 'check')} {text(check.get('status'), 'failed')}"
    return f"value {text(value)}, bound {text(bound)}"


def failures(doc: Any) -> list[Failure]:
    out = []
    for r in results(doc):
        failed = [c for c in checks(r) if c.get("status") in FAILED_STATUSES]
        for c in failed:
            out.append(
                Failure(label(r), text(c.get("name"), "?"), text(c.get("status")), check_message(c))
            )
        error = r.get("error")
        # The pipeline repeats a result's error as an errored check: list it once.
        repeated = error and any(check_message(c) == text(error) for c in failed)
        if (error and not repeated) or (verdict(r) == "error" and not failed):
            out.append(Failure(label(r), "error", "error", text(error, "error (no message)")))
    return out


def warnings(doc: Any) -> list[tuple[str, str]]:
    """Preflight warnings as (label, one-line message)."""
    out = []
    for r in results(doc):
        items = get(r, "preflight", "warnings")
        if isinstance(items, Sequence) and not isinstance(items, str | bytes):
            out.extend((label(r), text(w)) for w in items if w)
    return out


PIN_COLUMNS = [
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
            f"{k}={text(v)}"
            for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))
            if k not in ("name", "version") and v is not None and not isinstance(v, Mapping | list)
        ]
        if name is None and version is None and not extra:
            return DASH
        head = f"{text(name, '?')} {text(version, '?')}"
        return f"{head} ({', '.join(extra)})" if extra else head
    return text(value)


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
    hits, misses = _number(value.get("hits")), _number(value.get("misses"))
    if hits is not None or misses is not None:
        parts.append(f"{int(hits or 0)} hits / {int(misses or 0)} misses")
    elif value.get("entries") is not None:
        parts.append(f"{text(value.get('entries'))} entries")
    return ", ".join(parts) or DASH


def pins(doc: Any) -> list[list[str]]:
    """Distinct manifest pins per backend, in first-seen order."""
    seen: dict[tuple[str, ...], None] = {}
    for r in results(doc):
        m = r.get("manifest")
        if not isinstance(m, Mapping):
            continue
        sha = m.get("sha256")
        key = (
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
        x = _number(n)
        if x is None:
            return None
        total += int(x)
    return total


def _op_counts(ops: Any) -> str:
    if not isinstance(ops, Mapping) or not ops:
        return ""
    items = sorted(ops.items(), key=lambda kv: (-(_number(kv[1]) or 0), str(kv[0])))
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
