"""Graph diff: the input graph vs the final graph, for people (text) and machines (JSON).

``graph_diff`` returns ``{"ops_before", "ops_after", "added", "removed", "folded", "fused",
"eliminated", "passes": [{"name", "changed", ...stats, "notes"}], "warnings"}``; a pass's
notes (at most 20) say why it declined a match or what it inserted; ``added`` counts
the ops the compiler introduced that cost bytes moved (transposes, relayouts, casts,
copies, quantize/dequantize pairs) beyond what the input had.
"""

from __future__ import annotations

from typing import Any

from guard.compiler.ir.core import Graph
from guard.compiler.passes.pipeline import PipelineReport

ADDED_KINDS = (
    "Transpose",
    "Relayout",
    "Cast",
    "Identity",
    "Copy",
    "QuantizeLinear",
    "DequantizeLinear",
    "Split",
    "Concat",
)

_FOLDED = {"num_folded", "num_folded_conv", "num_folded_gemm", "num_to_affine"}
_FUSED = {"num_ops_fused", "num_recomposed", "num_ops_merged"}
_ELIMINATED = {
    "num_removed",
    "num_eliminated",
    "num_identity",
    "num_mul_one",
    "num_add_zero",
    "num_transpose_transpose",
    "num_reshape_reshape",
}


def graph_diff(before: Graph, after: Graph, report: PipelineReport | None = None) -> dict[str, Any]:
    ob, oa = before.op_counts(), after.op_counts()
    added = {
        op: oa.get(op, 0) - ob.get(op, 0) for op in ADDED_KINDS if oa.get(op, 0) > ob.get(op, 0)
    }
    removed = {op: ob[op] - oa.get(op, 0) for op in ob if ob[op] > oa.get(op, 0)}
    passes: list[dict[str, Any]] = []
    folded = fused = eliminated = 0
    by_pass: dict[str, dict[str, int]] = {}
    warns: list[str] = []
    if report is not None:
        for rec in report.passes:
            d = rec.to_dict()
            d.pop("why", None)
            passes.append(d)  # notes (capped) say why a rewrite fired, declined or inserted
            agg = by_pass.setdefault(rec.name, {})
            for k, v in rec.stats.items():
                agg[k] = agg.get(k, 0) + v
                folded += v if k in _FOLDED else 0
                fused += v if k in _FUSED else 0
                eliminated += v if k in _ELIMINATED else 0
        warns = list(report.warnings)
    return {
        "ops_before": ob,
        "ops_after": oa,
        "nodes_before": len(before.nodes),
        "nodes_after": len(after.nodes),
        "added": added,
        "removed": removed,
        "folded": folded,
        "fused": fused,
        "eliminated": eliminated,
        "by_pass": by_pass,
        "passes": passes,
        "pipeline": getattr(report, "pipeline", None),
        "warnings": warns,
    }


def format_diff(diff: dict[str, Any]) -> str:
    """The diff as a short table for people."""
    lines = [
        f"graph diff ({diff.get('pipeline') or 'no pipeline'}): "
        f"{diff['nodes_before']} -> {diff['nodes_after']} nodes; folded {diff['folded']}, "
        f"fused {diff['fused']}, eliminated {diff['eliminated']}"
    ]
    ops = sorted(set(diff["ops_before"]) | set(diff["ops_after"]))
    for op in ops:
        b, a = diff["ops_before"].get(op, 0), diff["ops_after"].get(op, 0)
        if a != b:
            lines.append(f"  {op:<24} {b:>5} -> {a:<5}")
    if diff["added"]:
        lines.append(
            "  added by the compiler: " + ", ".join(f"{k} x{v}" for k, v in diff["added"].items())
        )
    for name, stats in diff.get("by_pass", {}).items():
        nz = {k: v for k, v in stats.items() if v}
        if nz:
            lines.append(f"  {name}: " + ", ".join(f"{k}={v}" for k, v in nz.items()))
    for p in diff.get("passes", []):
        for note in p.get("notes", [])[:3]:
            lines.append(f"  {p['name']}: {note}")
    for w in diff.get("warnings", []):
        lines.append(f"  warning: {w}")
    return "\n".join(lines)
