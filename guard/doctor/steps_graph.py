"""Steps 4, 5 and 7: what the compiler added, the layout, dynamic shapes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import onnx

from guard.doctor.facts import Context, Side, layout_notes, optimised_onnx_ops, splits
from guard.doctor.finding import CAUSE, SUSPECT, Finding, unknown
from guard.suite.model import graph_inputs

LAYOUT_OPS = ("Transpose", "Relayout", "ReorderInput", "ReorderOutput")  # ORT's NCHWc: Reorder*
OVERHEAD_OPS = ("QuantizeLinear", "DequantizeLinear", "Cast", "Identity", "Copy",
                "MemcpyToHost", "MemcpyFromHost")  # fmt: skip


def _ops_after(s: Side) -> tuple[dict[str, int] | None, str]:
    ops = s.r.graph.ops_after if s.r.graph else None
    if ops is not None:
        return dict(ops), "result graph.ops_after"
    ort = optimised_onnx_ops(s)
    if ort is not None:
        return ort, "the artefact's optimised graph (model.opt.onnx)"
    return None, ""


def _bare(op: str) -> str:
    """The op type without its domain (com.microsoft.nchwc.ReorderInput -> ReorderInput)."""
    return op.rsplit(".", 1)[-1]


def _delta(b: Mapping[str, int], h: Mapping[str, int]) -> dict[str, list[int]]:
    return {
        op: [b.get(op, 0), h.get(op, 0)] for op in sorted({*b, *h}) if b.get(op, 0) != h.get(op, 0)
    }


def step4_graph_diff(base: Side | None, head: Side, ctx: Context) -> Finding:
    f = Finding(4, "graph diff (what the compiler added)")
    ha, hwhere = _ops_after(head)
    ba, _ = _ops_after(base) if base else (None, "")
    if ha is None or (base is not None and ba is None):
        miss = [
            f"{s.label} graph.ops_after"
            for s, a in ((base, ba), (head, ha))
            if s is not None and a is None
        ]
        return unknown(
            4,
            f.title,
            miss,
            "This backend records no optimised graph; keep its "
            "artefact next to the results file to read it.",
        )
    bm = base.r.manifest.model.sha256 if base else None
    hm = head.r.manifest.model.sha256
    f.add("input model sha256", bm[:12] if bm else None, hm[:12] if hm else None)
    f.add("nodes after", sum(ba.values()) if ba else None, sum(ha.values()))
    f.add("read from", None, hwhere)
    if base is None:
        added = dict((head.r.graph.added if head.r.graph else None) or {})
        f.add("ops added vs the input graph", None, added)
        overhead = {op: n for op, n in added.items() if op in OVERHEAD_OPS}
        if overhead:
            f.status = SUSPECT
            f.summary = f"the compiler added {overhead}"
            f.action = "Check why each was needed (passes' notes in the artefact's report)."
        else:
            f.summary = (
                f"{sum(ha.values())} node(s) after optimisation; no copies or (de)quantise added"
            )
        return f
    d = _delta(ba or {}, ha)
    f.add("op counts that changed [base, head]", None, d)
    if bm and hm and bm != hm:
        bb = (base.r.graph.ops_before if base.r.graph else None) or {}
        hb = (head.r.graph.ops_before if head.r.graph else None) or {}
        f.add("input graph op counts that changed", None, _delta(bb, hb))
    over = {op: v for op, v in d.items() if _bare(op) in OVERHEAD_OPS and v[1] > v[0]}
    lost = {op: v for op, v in d.items() if _bare(op).startswith("Fused") and v[1] < v[0]}
    layout = {op: v for op, v in d.items() if _bare(op) in LAYOUT_OPS}
    # One op swapped for its variant in another domain (ORT's NCHWc Conv for a Conv): a
    # kernel choice, reported as such, not as an op added and another removed.
    variants = {}
    for op, (a, b) in d.items():
        plain = _bare(op)
        if op != plain and plain in d and a - b == d[plain][1] - d[plain][0] != 0:
            variants[plain] = f"{op} {a}->{b} for {plain} {d[plain][0]}->{d[plain][1]}"
    swapped = {*variants, *(op for op in d if _bare(op) in variants and op not in variants)}
    if variants:
        f.add("kernel variants swapped", None, list(variants.values()))
    rest = {
        op: v for op, v in d.items() if op not in over and op not in layout and op not in swapped
    }
    same_input = bool(bm and hm and bm == hm)
    grew = sum(ha.values()) - sum((ba or {}).values())
    if same_input and grew > 0 and not lost:
        # The same input graph optimised into more nodes: rewrites that fired on base did
        # not on head (ORT fuses an activation into its NCHWc Conv: count the nodes).
        lost = {op: v for op, v in rest.items() if v[1] > v[0]}
    if over or lost:
        f.status = CAUSE
        parts = (
            [f"head adds {', '.join(f'{op} {a}->{b}' for op, (a, b) in over.items())}"]
            if over
            else []
        )
        if lost:
            parts.append(
                "fusion lost: "
                + ", ".join(f"{op} {a}->{b}" for op, (a, b) in lost.items())
                + (f" ({grew} more node(s) from the same input graph)" if grew > 0 else "")
                + (f"; kernels swapped: {'; '.join(variants.values())}" if variants else "")
            )
        f.summary = "; ".join(parts)
        f.action = (
            "Find the pass whose counts changed (graph.passes in both results) and the "
            "node it no longer matches; `guard reduce` gives the smallest such graph."
        )
    elif rest:
        f.status = SUSPECT
        f.summary = "op counts changed: " + ", ".join(
            f"{op} {a}->{b}" for op, (a, b) in rest.items()
        )
        f.action = "Check the passes' counts in both results for the rewrite that changed."
    else:
        f.summary = "same ops after optimisation" + (
            " (layout conversions: step 5)" if layout else ""
        )
    return f


def _conversions(s: Side) -> tuple[int | None, str]:
    added = s.r.graph.added if s.r.graph else None
    if added is not None:
        return sum(int(n) for op, n in added.items() if _bare(op) in LAYOUT_OPS), "graph.added"
    ops, where = _ops_after(s)
    if ops is not None and s.r.graph is None:
        return sum(n for op, n in ops.items() if _bare(op) in LAYOUT_OPS), where
    return None, ""


def _transposes_inserted(s: Side) -> Any:
    """The layout pass's own count of the transposes it inserted (its by_pass stats)."""
    stats = (s.r.graph.by_pass if s.r.graph else {}).get("assign_layout")
    return stats.get("num_transposes_inserted") if isinstance(stats, Mapping) else None


def step5_layout(base: Side | None, head: Side, ctx: Context) -> Finding:
    f = Finding(5, "layout (transposes and relayouts)")
    hc, where = _conversions(head)
    bc, _ = _conversions(base) if base else (None, "")
    if hc is None or (base is not None and bc is None):
        miss = [s for s, c in ((base, bc), (head, hc)) if s is not None and c is None]
        ort = head.r.backend == "onnxruntime"
        return unknown(
            5,
            f.title,
            [
                f"{m.label} graph.added"
                + (
                    " (onnxruntime exposes no per-node layout; its "
                    "optimised graph was not found either)"
                    if ort
                    else ""
                )
                for m in miss
            ],
            "Keep the onnxruntime artefact (model.opt.onnx) with the results, or "
            "compare on the bundled backend, which records its layout pass."
            if ort
            else "This backend records no optimised graph.",
        )
    f.add("layout conversions in the optimised graph", bc, hc)
    f.add("read from", None, where)
    ins = [_transposes_inserted(s) for s in (base, head) if s is not None]
    if any(v is not None for v in ins):
        f.add("inserted by assign_layout", ins[0] if base else None, ins[-1])
    notes_h = layout_notes(head)
    notes_b = set(layout_notes(base)) if base else set()
    new_notes = [n for n in notes_h if n not in notes_b]
    for n in new_notes[:5]:
        f.add("region", None, n)
    if base is not None and hc > (bc or 0):
        f.status = CAUSE
        f.summary = f"head inserts {hc - (bc or 0)} more layout conversion(s) ({bc} -> {hc})" + (
            f"; forced at {new_notes[0]}" if new_notes else ""
        )
        f.action = (
            "A layout-bound op (Reshape, Gemm, Softmax, a graph output) now sits inside "
            "a conv region, or the region's layout changed: keep the region in one "
            "layout (move the op out) or make the op layout-aware."
        )
    elif base is None and hc:
        f.summary = f"{hc} layout conversion(s), where the layout pass judged they pay"
    else:
        f.summary = f"{hc} layout conversion(s)" + (
            "" if base is None else ", unchanged" if hc == bc else f" (base {bc}: fewer on head)"
        )
    return f


# -- step 7 -----------------------------------------------------------------------------------


def _declared_dims(s: Side, ctx: Context) -> dict[str, list[Any]] | None:
    """The model's own input dims (dim_param names kept), when its file can be found."""
    rec = s.r.manifest.model.inputs
    if rec is not None and all(isinstance(v, Mapping) and "dims" in v for v in rec.values()):
        return {k: list(v["dims"]) for k, v in rec.items()}
    path = ctx.model_path(s)
    if path is None:
        return None
    try:
        ins = graph_inputs(onnx.load(str(path), load_external_data=False))
    except Exception:  # noqa: BLE001 - an unreadable model is a missing fact
        return None
    return {i.name: list(i.dims) for i in ins}


def step7_dynamic_shapes(base: Side | None, head: Side, ctx: Context) -> Finding:
    f = Finding(7, "dynamic shapes")
    bound = head.r.manifest.model.inputs
    if bound is None:
        return unknown(7, f.title, ["manifest.model.inputs"])
    shapes = {k: v.get("shape") for k, v in bound.items() if isinstance(v, Mapping)}
    fixed = all(isinstance(d, int) for v in shapes.values() for d in v or [])
    f.add("bound input shapes (what was compiled)", None, shapes)
    declared = _declared_dims(head, ctx)
    dynamic = (
        {k: d for k, d in declared.items() if any(not isinstance(x, int) for x in d)}
        if declared is not None
        else None
    )
    if declared is None:
        f.missing.append(
            "the model's declared input dims (manifest.model.inputs.*.dims; the "
            "model file was not found to read them)"
        )
    else:
        f.add("dynamic dims declared by the model", None, dynamic or "none")
    hs, _ = splits(head)
    dyn_splits = [s for s in hs or [] if "dynamic" in " ".join(s.declined.values())]
    for s in dyn_splits[:5]:
        f.add(
            f"declined for dynamic shapes: {s.op} node {s.node!r}",
            None,
            "; ".join(s.declined.values()),
        )
    if dyn_splits:
        f.status = CAUSE
        f.summary = (
            f"{len(dyn_splits)} node(s) fell back because a shape is dynamic after "
            "binding the inputs (data-dependent)"
        )
        f.action = (
            "Bind the shape (suite inputs) or make it static in the model (e.g. fold the "
            "Shape/Reshape chain), then compare the fixed-shape build as a control."
        )
    elif not fixed:
        f.status = SUSPECT
        f.summary = f"inputs compiled with unbound dims {shapes}"
        f.action = "Bind every dim in the suite's inputs block."
    else:
        f.summary = "compiled at fixed shapes" + (
            f" (the model declares {sorted(dynamic)} dynamic: this build is the fixed-shape "
            "control)"
            if dynamic
            else ""
        )
        if declared is None:
            f.summary += "; the model's own dims were not checked (model file not found)"
    return f
