"""One reading of a results document, shared by the console, Markdown and HTML reports.

A results document (docs/ARCHITECTURE.md, results contract v1) comes from a run that may have failed
half-way: an ``error`` result can lack any field, and any value can be None. Everything here
reads the typed document (guard.results: ``document`` reads a dict once), where a missing or
mistyped field is None or empty, so it shows as a dash, never a crash.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from guard.results.documents import ResultsDocument
from guard.results.result import Check, Result

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
# A warning may end in the command that fixes it (guard golden update ... --reason '...'):
# kept whole up to this length.
_MAX_WARNING = 1000
_WS = re.compile(r"\s+")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ufffe\uffff]")


def document(doc: ResultsDocument | Any) -> ResultsDocument:
    """The typed document of what a writer was given (a dict is read once, leniently)."""
    return doc if isinstance(doc, ResultsDocument) else ResultsDocument.from_json(doc)


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
    if len(line) <= limit:
        return line
    # Cut between words (a command or a path cut mid-word reads as a different one); a
    # single word longer than a third of the limit is cut where it must be.
    cut = line[: limit - 1].rsplit(" ", 1)[0]
    return (cut if len(cut) >= limit // 3 else line[: limit - 1]).rstrip(" ,;:") + " …"


def verdict(result: Result) -> str:
    """The result's verdict; a result without one is an error (it never got that far)."""
    return text(result.verdict, "error")


def label(result: Result) -> str:
    """``model[backend]``, the name used for a result in every report."""
    return f"{text(result.model, '?')}[{text(result.backend, '?')}]"


def as_number(value: Any) -> float | None:
    """A finite float, or None for anything else (bools, strings, NaN, missing)."""
    if isinstance(value, np.integer | np.floating):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def fmt_num(value: Any) -> str:
    """A magnitude with about three significant figures, without exponent for >= 0.001."""
    x = as_number(value)
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
    x = as_number(value)
    if x is None:
        return DASH if value is None else text(value)
    return "0" if x == 0 else f"{x:.2e}"


def fmt_mib(value: Any) -> str:
    x = as_number(value)
    return DASH if x is None else fmt_num(x / MIB)


def verdict_counts(doc: ResultsDocument | Any) -> dict[str, int]:
    doc = document(doc)
    counts: dict[str, int] = {}
    for r in doc.results:
        v = verdict(r)
        counts[v] = counts.get(v, 0) + 1
    return counts


def overall(doc: ResultsDocument | Any) -> str:
    """``pass``, ``fail`` (a failure or error), ``interrupted`` (stopped by a signal, nothing
    failed) or ``inconclusive`` (or nothing ran)."""
    doc = document(doc)
    counts = verdict_counts(doc)
    if any(v != "pass" and v != "inconclusive" for v in counts):
        return "fail"
    if doc.interrupted:  # a run cut short never reads as a pass
        return "interrupted"
    if not counts:
        return "inconclusive"
    return "inconclusive" if counts.get("inconclusive") else "pass"


OVERALL_ICON = {"pass": "✅", "fail": "❌", "inconclusive": "⚠️", "interrupted": "⏹️"}


def headline_counts(doc: ResultsDocument | Any) -> str:
    """``1 failed, 1 error, 2 passed of 4 results``, after ``interrupted by SIGINT:`` for a
    run a signal stopped."""
    doc = document(doc)
    counts = verdict_counts(doc)
    total = sum(counts.values())
    stopped = doc.interrupted
    prefix = f"interrupted by {text(stopped)}: " if stopped else ""
    if not total:
        return f"{prefix}no results"
    order = [v for v in VERDICT_ORDER if v in counts] + sorted(set(counts) - set(VERDICT_ORDER))
    parts = [f"{counts[v]} {_VERDICT_WORDS.get(v, v)}" for v in order]
    return f"{prefix}{', '.join(parts)} of {total} result{'s' if total != 1 else ''}"


def provenance(doc: ResultsDocument | Any) -> str:
    """``commit abc1234 (dirty) on main · started ... · exit code 1``, as far as known."""
    doc = document(doc)
    parts = []
    commit = doc.git.commit
    if commit:
        c = f"commit {str(commit)[:12]}"
        if doc.git.dirty:
            c += " (dirty)"
        branch = doc.git.branch
        if branch:
            c += f" on {text(branch)}"
        parts.append(c)
    if doc.started:
        parts.append(f"started {text(doc.started)}")
    if doc.exit_code is not None:
        parts.append(f"exit code {text(doc.exit_code)}")
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


def failed_check_names(result: Result) -> list[str]:
    names = [text(c.name, "?") for c in result.checks if c.status in FAILED_STATUSES]
    if not names and verdict(result) == "error":
        names = ["error"]
    return names


def _code_arch(result: Result) -> str | None:
    """The architecture of a result's code, from its canonical target's -mtriple."""
    canonical = result.manifest.target.canonical
    for part in str(canonical or "").split():
        if part.startswith("-mtriple="):
            return part.split("=", 1)[1].split("-")[0]
    return None


def row(result: Result) -> Row:
    parts = result.partitions
    count = parts.count if parts else None
    partitions = fmt_num(count) if as_number(count) is None else str(int(as_number(count) or 0))
    fallback = as_number(parts.fallback_nodes if parts else None)
    if fallback:
        partitions += f" ({int(fallback)} fallback)"
    arena = fmt_mib(result.arena_bytes)
    lower = result.arena_lower_bound_bytes
    if as_number(lower) is not None:
        arena += f" ({fmt_mib(lower)})"
    # A foreign-architecture build run under emulation has no latency: say so, and for
    # which architecture, in the latency cells (the row is otherwise the host one's twin).
    emulated = result.latency_status == "emulated"
    latency = result.latency_ms
    return Row(
        model=text(result.model, "?"),
        backend=text(result.backend, "?"),
        verdict=verdict(result),
        p50="emulated" if emulated else fmt_num(latency.p50 if latency else None),
        p90=(_code_arch(result) or "emulated")
        if emulated
        else fmt_num(latency.p90 if latency else None),
        partitions=partitions,
        arena=arena,
        max_abs_err=fmt_err(result.numerics.max_abs_err),
        failed=", ".join(failed_check_names(result)),
    )


@dataclass(frozen=True)
class Failure:
    """One failed or errored check (or a result that errored before its checks ran)."""

    label: str
    check: str
    status: str
    message: str


def check_message(check: Check) -> str:
    msg = check.message
    if msg:
        return one_line(str(msg))
    value, bound = check.value, check.bound
    if value is None and bound is None:
        return f"{text(check.name, 'check')} {text(check.status, 'failed')}"
    return f"value {text(value)}, bound {text(bound)}"


def counted_lines(doc: ResultsDocument | Any) -> list[tuple[str, str]]:
    """(label, "242.5 k instructions, 2.195 MB moved per inference on TARGET") per result
    with a counted block (guard run --counted), its error otherwise."""
    doc = document(doc)
    from guard.checks.evaluate import counted_summary

    out = []
    for r in doc.results:
        block = r.counted
        if block is None:
            continue
        if block.failed:
            out.append((label(r), f"error: {text(block.error)}"))
            continue
        try:
            summary = counted_summary(block)
        except (KeyError, TypeError, ValueError):
            continue
        latency = "emulated latency: none; " if r.latency_status == "emulated" else ""
        out.append((label(r), f"{latency}counted: {summary} per inference "
                              f"({text(block.target)})"))  # fmt: skip
    return out


def failures(doc: ResultsDocument | Any) -> list[Failure]:
    doc = document(doc)
    out = []
    for r in doc.results:
        failed = [c for c in r.checks if c.status in FAILED_STATUSES]
        for c in failed:
            out.append(Failure(label(r), text(c.name, "?"), text(c.status), check_message(c)))
        error = r.error
        # The pipeline repeats a result's error as an errored check: list it once.
        repeated = error and any(check_message(c) == text(error) for c in failed)
        if (error and not repeated) or (verdict(r) == "error" and not failed):
            out.append(Failure(label(r), "error", "error", text(error, "error (no message)")))
    return out


# Preflight's contention findings (load average, other processes' share, this process's
# share): said once per suite, not once per result and round.
_CONTENTION = re.compile(
    r"load average [\d.]+ exceeds|other processes used \d+% of the spare CPU|"
    r"this process got \d+% of a core"
)
_ROUND = re.compile(r"^round \d+/\d+: ")


def _contention_line(hits: dict[str, list[str]], total: int) -> str:
    others = [int(m) for ws in hits.values() for w in ws
              for m in re.findall(r"other processes used (\d+)%", w)]  # fmt: skip
    own = [int(m) for ws in hits.values() for w in ws
           for m in re.findall(r"this process got (\d+)% of a core", w)]  # fmt: skip
    loads = [float(m) for ws in hits.values() for w in ws
             for m in re.findall(r"load average ([\d.]+) exceeds", w)]  # fmt: skip
    worst = []
    if others:
        worst.append(f"other processes used up to {max(others)}% of the spare CPU")
    if own:
        worst.append(f"this process got as little as {min(own)}% of a core")
    if loads:
        worst.append(f"load average up to {max(loads):g}")
    names = list(hits)
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return (f"CPU contention while measuring {len(names)} of {total} result(s) ({shown}): "
            f"{'; '.join(worst)}. Latencies may be off by 2x; re-run on a quiet machine.")  # fmt: skip


def warnings(doc: ResultsDocument | Any) -> list[tuple[str, str]]:
    """Preflight warnings as (label, one-line message).

    Contention warnings (every round of every result of a busy machine repeats them) become
    one line labelled with the suite name, first; the others stay per result, deduplicated.
    """
    doc = document(doc)
    out: list[tuple[str, str]] = []
    contention: dict[str, list[str]] = {}
    all_results = doc.results
    for r in all_results:
        items = r.preflight.warnings
        seen: set[str] = set()
        for w in items:
            if not w:
                continue
            msg = one_line(str(w), _MAX_WARNING)
            if _CONTENTION.search(msg):
                contention.setdefault(label(r), []).append(msg)
                continue
            if _ROUND.sub("", msg) not in seen:
                seen.add(_ROUND.sub("", msg))
                out.append((label(r), msg))
    if contention:
        suite = text(doc.suite, "guard")
        out.insert(0, (suite, _contention_line(contention, len(all_results))))
    return out
