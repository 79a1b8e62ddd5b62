"""One line saying what probably moved a row, when guard can tell.

Rules look at what the results carry, most specific first: partition count (each boundary
costs a sync and a copy, and names the unsupported ops), tuning-cache hit rate (a miss is a
2-10x slower schedule), graph op counts after optimisation (an inserted Transpose, a
LayerNorm no longer fused), arena size, output hash; then the manifest pins; last the
contention the timing saw. The line leads with the latency move (the larger of p50 and
p90) and names the first two, e.g. "p90 +14%: partitions 1 → 3, Erf unsupported on the
delegate". Rows that did not move only name what changed in the artefact.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from guard.results.documents import ComparisonRow
from guard.results.manifest import MissedKey
from guard.results.result import Result

# guard.measure.preflight warns above 20%; a verdict measured like that deserves a note.
CONTENTION_NOTE = 0.2
_MANIFEST_ORDER = ("runtime.", "compiler.", "driver.", "tuning_cache.", "model.", "target.")


def _pct(ratio: float | None) -> float | None:
    if ratio is None or not math.isfinite(ratio):
        return None
    return (ratio - 1.0) * 100.0


def _unsupported_ops(r: Result) -> list[str]:
    """Op types a backend reported as unsupported (partition details, any shape we know)."""
    ops: list[str] = []
    for d in r.partitions.details if r.partitions else ():
        for val in (d.unsupported, d.unsupported_ops, d.fallback_ops):
            items = val.items() if isinstance(val, Mapping) else (val or [])
            for it in items:
                name = it[0] if isinstance(it, tuple) else it
                if isinstance(name, Mapping):
                    name = name.get("op_type") or name.get("op")
                if isinstance(name, str) and name not in ops:
                    ops.append(name)
    return ops


def _ops_after(r: Result) -> Mapping[str, int]:
    return (r.graph.ops_after if r.graph else None) or {}


def _op_changes(base_r: Result, head_r: Result) -> list[str]:
    b, h = _ops_after(base_r), _ops_after(head_r)
    deltas = {op: int(h.get(op, 0)) - int(b.get(op, 0)) for op in set(b) | set(h)}
    moved = sorted((d for d in deltas.items() if d[1]), key=lambda kv: (-abs(kv[1]), kv[0]))
    return [f"{op} {n:+d}" for op, n in moved[:3]]


def _miss_cause(r: Result) -> str | None:
    """How the head's missed keys differ from the cache's nearest ones (a keyed cache, e.g.
    the bundled compiler's, records it per miss): the most common difference, with its
    count when not every miss shares it."""
    missed = r.manifest.tuning_cache.missed
    keys = [MissedKey.of(m) for m in missed if isinstance(m, Mapping)]
    diffs = [str(k.differs) for k in keys if k.differs]
    if not diffs:
        return None
    top = max(sorted(set(diffs)), key=diffs.count)
    n = diffs.count(top)
    return top if n == len(missed) else f"{n} of {len(missed)} misses: {top}"


def _mb(x: Any) -> str:
    return f"{x / 1e6:.1f} MB"


def causes(
    r: ComparisonRow,
    base_r: Result,
    head_r: Result,
    *,
    structural_only: bool = False,
) -> list[str]:
    """Every candidate cause, most specific first.

    ``structural_only`` keeps what changed in the artefact (partitions, tuning, ops,
    arena, outputs) and drops the context notes (contention, pins) that only help explain
    a latency move.
    """
    out: list[str] = []
    pb, ph = r.partitions
    if pb is not None and ph is not None and pb != ph:
        text = f"partitions {pb} → {ph}"
        new_ops = [op for op in _unsupported_ops(head_r) if op not in _unsupported_ops(base_r)]
        if new_ops:
            text += f", {', '.join(new_ops)} unsupported on the delegate"
        out.append(text)
    hb, hh = r.tuning_hit_rate or (None, None)
    if hb is not None and hh is not None and abs(hh - hb) >= 0.005:
        text = f"tuning hit rate {hb:.0%} → {hh:.0%}"
        why = _miss_cause(head_r) if hh < hb else None
        out.append(text + (f" ({why})" if why else ""))
    ops = _op_changes(base_r, head_r)
    if ops:
        out.append("ops after optimisation: " + ", ".join(ops))
    ab, ah = r.arena_bytes
    if ab and ah and abs(ah / ab - 1) >= 0.05:
        out.append(f"arena {_mb(ab)} → {_mb(ah)} ({(ah / ab - 1) * 100:+.0f}%)")
    if r.numerics.output_sha256_changed:
        eb, eh = r.numerics.max_abs_err
        out.append(
            "outputs changed"
            + (f" (max abs err {eb:.2g} → {eh:.2g})" if eb is not None and eh is not None else "")
        )
    if structural_only:
        return out
    md = r.manifest_diff
    for prefix in _MANIFEST_ORDER:
        for field, (vb, vh) in md.items():
            if field.startswith(prefix):
                out.append(f"{field} {vb} → {vh}")
                break
    cb, ch = r.contention or (None, None)
    busy = [
        side for side, c in (("base", cb), ("head", ch)) if c is not None and c > CONTENTION_NOTE
    ]
    if busy:
        shown = "/".join(f"{c:.0%}" for side, c in (("base", cb), ("head", ch)) if side in busy)
        who = "both sides" if len(busy) == 2 else busy[0]
        out.append(f"{who} timed under {shown} contention")
    return out


def attribute(r: ComparisonRow, base_r: Result, head_r: Result) -> str | None:
    """The attribution line, or None when nothing moved and nothing changed (``r`` the
    comparison row being built, read as a record)."""
    moved = r.verdict in ("regressed", "improved")
    found = causes(r, base_r, head_r, structural_only=not moved)
    p50, p90 = _pct(r.ratio), _pct(r.p90_ratio)
    lead = None
    if p90 is not None and (p50 is None or abs(p90) > abs(p50) + 2.0):
        lead = f"p90 {p90:+.0f}%"
    elif p50 is not None:
        lead = f"p50 {p50:+.0f}%"
    if not found:
        return (
            f"{lead}: no pinned field, partition, tuning or graph change recorded"
            if moved and lead
            else None
        )
    return f"{lead}: {', '.join(found[:2])}" if lead else ", ".join(found[:2])
