"""int8 outputs across machines: ``identical`` or ``differ``, with the first differing tensor.

An int8 model's integer arithmetic is exact, so its outputs on one input are the same bytes
on every ISA class and backend that implement it correctly (what onnxruntime issue 5849's
16-bit saturation on non-VNNI hosts broke). Two results of an int8 row (one with a
``quantization`` block, guard.run.int8) are compared by their output hashes; when the
hashes differ, the first output whose stored values (``numerics.outputs``,
guard.compare.crossarch) differ is named, or none when the stored sample of a large output
does not reach the difference.

``int8_rows(base, head)`` pairs the int8 results of two results documents: the same
(model, backend, target), or, for a (model, backend) that has no common target, its one
result on each side (a host run against an ``x86-64-v3`` run of one suite).
``agreement`` is the comparison both that and the ``int8_agreement`` check use.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from guard.compare.crossarch import decode_outputs
from guard.compare.written import Int8RowJson
from guard.results.documents import Int8Row, ResultsDocument
from guard.results.result import Result

IDENTICAL, DIFFER, UNKNOWN = "identical", "differ", "unknown"


def is_int8(r: Result) -> bool:
    return r.quantization is not None


def agreement(a: Result, b: Result) -> tuple[str, str | None]:
    """(identical | differ | unknown, the first differing output's name or None)."""
    na, nb = a.numerics, b.numerics
    ha, hb = na.output_sha256, nb.output_sha256
    if not ha or not hb:
        return UNKNOWN, None
    if ha == hb:
        return IDENTICAL, None
    da, db = decode_outputs(na.outputs), decode_outputs(nb.outputs)
    for ta, tb in zip(da or [], db or [], strict=False):
        if ta.shape != tb.shape or ta.stride != tb.stride:
            return DIFFER, str(ta.name)
        if not np.array_equal(np.asarray(ta.values), np.asarray(tb.values), equal_nan=True):
            return DIFFER, str(ta.name)
    return DIFFER, None


def int8_rows(base: ResultsDocument, head: ResultsDocument) -> list[Int8RowJson]:
    """One row per paired int8 result (module doc)."""
    b: dict[tuple[str, str], list[Result]] = defaultdict(list)
    h: dict[tuple[str, str], list[Result]] = defaultdict(list)
    for side, doc in ((b, base), (h, head)):
        for r in doc.results:
            if r.quantization is not None:
                side[(r.model, r.backend)].append(r)
    rows: list[Int8RowJson] = []
    for k in sorted(set(b) & set(h)):
        pairs = _pairs(b[k], h[k])
        for rb, rh in pairs:
            verdict, first = agreement(rb, rh)
            rows.append(
                {
                    "model": k[0],
                    "backend": k[1],
                    "base_target": rb.target,
                    "head_target": rh.target,
                    "outputs": verdict,
                    "first_differing": first,
                }
            )
    return rows


def _pairs(bs: Sequence[Result], hs: Sequence[Result]) -> list[tuple[Result, Result]]:
    by_b = {r.target: r for r in bs}
    same = [(by_b[r.target], r) for r in hs if r.target in by_b]
    if same:
        return same
    if len(bs) == 1 and len(hs) == 1:
        return [(bs[0], hs[0])]
    return []


def line(row: Int8Row) -> str:
    where = (
        row.base_target
        if row.base_target == row.head_target
        else f"{row.base_target} vs {row.head_target}"
    )
    text = f"{row.model} [{row.backend}] int8 outputs {row.outputs} ({where})"
    if row.outputs == DIFFER:
        text += (
            f": first differing tensor {row.first_differing}"
            if row.first_differing
            else ": in elements the results do not store (the output hashes differ)"
        )
    return text


def summary_line(rows: Sequence[Int8Row]) -> str:
    """One line a bump or compare report leads its int8 section with."""
    moved = [r for r in rows if r.outputs == DIFFER]
    if not moved:
        return f"int8 outputs unchanged: identical bytes on all {len(rows)} int8 result(s)."
    first = moved[0]
    where = f" (first: {first.model} [{first.backend}]" + (
        f", tensor {first.first_differing})" if first.first_differing else ")"
    )
    return f"int8 outputs moved on {len(moved)} of {len(rows)} int8 result(s){where}."


def markdown_lines(rows: Sequence[Int8Row]) -> list[str]:
    if not rows:
        return []
    return ["### int8 outputs", "", summary_line(rows), "", *(f"- {line(r)}" for r in rows)]
