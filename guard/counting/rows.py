"""Counted rows of a comparison: instructions and bytes moved per inference, base vs head.

Every result present on both sides with a ``counted`` block gets a row, emulated ones
(AArch64) included: counts need no timing, so an artefact that can only be emulated is
compared like any other. The verdict is guard.counting.verdict's: exact for comparable
fingerprints, "not comparable: FIELD differs" otherwise (which does not fail the job).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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


def counted_rows(
    base: ResultsDocument, head: ResultsDocument, regress_pct: float | None = None
) -> list[dict[str, Any]]:
    """One row per result on both sides that carries a counted block on either side.

    ``regress_pct`` overrides every row's bound (else head's ``counted`` check bound,
    else 0.5%)."""
    b_rows = {r.key: r for r in base.results}
    rows = []
    for h in head.results:
        key = h.key
        b = b_rows.get(key)
        if b is None or not (_block(b) or _block(h)):
            continue
        bound = regress_pct if regress_pct is not None else _bound(h, DEFAULT_COUNTED_REGRESS_PCT)
        cmp = compare_counted(_block(b), _block(h), bound)
        on = _block(h) or _block(b)
        counted_on = on.target if on is not None else None
        rows.append({"model": key.model, "backend": key.backend, "target": key.target,
                     "counted_target": counted_on, **cmp.to_json()})  # fmt: skip
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, int]:
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
