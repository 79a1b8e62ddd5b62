"""Counted rows of a comparison: instructions and bytes moved per inference, base vs head.

Every result present on both sides with a ``counted`` block gets a row, emulated ones
(AArch64) included: counts need no timing, so an artefact that can only be emulated is
compared like any other. The verdict is guard.counting.verdict's: exact for comparable
fingerprints, "not comparable: FIELD differs" otherwise (which does not fail the job).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict, cast

from guard.counting.verdict import DEFAULT_COUNTED_REGRESS_PCT, compare_counted
from guard.results.counted import Counted
from guard.results.documents import CountedRow, ResultsDocument
from guard.results.result import Result

VERDICTS = ("pass", "regressed", "improved", "not comparable", "missing")


def _bound(head_r: Result, default: float) -> float:
    for c in head_r.checks:
        if c.name == "counted":
            bound = c.bound
            if isinstance(bound, int | float) and bound >= 0:
                return float(bound)
    return default


def _block(r: Result) -> Counted | None:
    """The result's counted block, None when it has none (or an empty one)."""
    return r.counted if r.counted is not None and r.counted.to_json() else None


class CountedRowJson(TypedDict, total=False):
    """One counted row (a comparison's ``counted``) as written: the case, then
    ``compare_counted``'s judgement (``CountedRow.to_json``: verdict and message, and where
    both sides counted, the changes)."""

    model: str
    backend: str
    target: str
    counted_target: str | None
    verdict: str
    instructions: list[float | None]
    bytes_moved: list[float | None]
    instructions_pct: float
    bytes_moved_pct: float | None
    bound_pct: float
    same_artefact: bool
    message: str


def counted_row(
    model: str, backend: str, target: str, counted_on: str | None, judged: CountedRow
) -> CountedRowJson:
    """The row of one case: the case, where it was counted, then ``judged``
    (``compare_counted``'s row) as it wrote it."""
    row: CountedRowJson = {
        "model": model, "backend": backend, "target": target, "counted_target": counted_on
    }  # fmt: skip
    row.update(cast(CountedRowJson, judged.to_json()))
    return row


def counted_rows(
    base: ResultsDocument, head: ResultsDocument, regress_pct: float | None = None
) -> list[CountedRowJson]:
    """One row per result on both sides that carries a counted block on either side.

    ``regress_pct`` overrides every row's bound (else head's ``counted`` check bound,
    else 0.5%)."""
    b_rows = {r.key: r for r in base.results}
    rows: list[CountedRowJson] = []
    for h in head.results:
        key = h.key
        b = b_rows.get(key)
        if b is None or not (_block(b) or _block(h)):
            continue
        bound = regress_pct if regress_pct is not None else _bound(h, DEFAULT_COUNTED_REGRESS_PCT)
        cmp = compare_counted(_block(b), _block(h), bound)
        on = _block(h) or _block(b)
        counted_on = on.target if on is not None else None
        rows.append(counted_row(key.model, key.backend, key.target, counted_on, cmp))
    return rows


def summary(rows: Sequence[CountedRowJson]) -> dict[str, int]:
    return {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}


def _si(x: Any) -> str:
    if not isinstance(x, int | float):
        return "-"
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.4g} {prefix}"
    return f"{x:.4g}"


def _bytes(x: Any) -> str:
    """Bytes moved, or "-" where the engine counted none (the hardware counter)."""
    return f"{_si(x)}B" if isinstance(x, int | float) else "-"


def markdown_lines(rows: Sequence[CountedRow]) -> list[str]:
    """The counted table of ``guard compare`` (nothing when no row is counted)."""
    if not rows:
        return []
    lines = [
        "### Counted cost per inference (instructions, bytes moved; exact, not timed)",
        "",
        "| model / backend | target | verdict | instructions | Δ instr | bytes moved | Δ bytes |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        instr, moved = r.instructions or (None, None), r.bytes_moved or (None, None)
        d_i, d_b = r.instructions_pct, r.bytes_moved_pct
        verdict = r.verdict if r.instructions else f"{r.verdict}: {r.message}"
        lines.append(
            f"| {r.model} [{r.backend}] | {r.counted_target or r.target} | {verdict} | "
            f"{_si(instr[0])} → {_si(instr[1])} | "
            f"{'-' if d_i is None else f'{d_i:+.3f}%'} | {_bytes(moved[0])} → {_bytes(moved[1])} | "
            f"{'-' if d_b is None else f'{d_b:+.3f}%'} |"
        )
    return lines
