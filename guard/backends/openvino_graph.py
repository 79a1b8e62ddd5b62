"""What OpenVINO's compiled model says about itself: partitions, memory, per-layer times.

The runtime graph (``CompiledModel.get_runtime_model()``) has one node per executed layer,
each with runtime information: ``layerType`` (Convolution, Reorder, Subgraph ...),
``primitiveType`` (the implementation: ``brgconv_avx512_f32``, ``jit_avx2_f32``,
``gemm_mlas_f32``; ``ref_f32`` or ``ref_any_f32`` for OpenVINO's reference, plain C++
implementations; ``unknown_*`` for layers that do no work, such as an in-place Reshape),
``execOrder`` and ``outputPrecisions``.

Partitions: every layer that does work is on an optimised implementation (delegated) or
a reference one (fallback); connected same-kind subgraphs are grouped with the compiler's
grouping (guard.compiler.graph.grouping), as onnxruntime's providers are, and every group
counts, so ``partitions: {max: 1}`` fails a graph with a reference layer in its middle.
Input, Output and Const layers are not counted. A Concatenation or Split that is not done
in place is labelled ``ref_*`` by the CPU plugin although that is its only implementation
there (a copy of each input into its slice, nothing slower beside it): measured on
OpenVINO 2026.4.1 it is the only ``ref_*`` layer of SqueezeNet (8), Inception-v1 (9),
ShuffleNet (3) and DenseNet-121 (58), so counting it would fail ``partitions: {max: 1}`` on
every concatenating model for a layer nothing can improve. Those copies count as delegated.

Memory: OpenVINO's CPU plugin reports no memory statistic (the GPU plugin's
``GPU_MEMORY_STATISTICS`` has no CPU counterpart), so ``arena_bytes`` is None. The lower
bound is the liveness of the runtime graph: each layer's outputs (shape x precision) live
from its execution until their last consumer runs, graph outputs to the end; constants and
layers that do no work (in place) are not counted, so it stays a lower bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from guard.backends.base import KernelRow, MemoryJson, PartitionDetail, PartitionInfo
from guard.backends.ort_profile import NodeTime, top_nodes
from guard.compiler.graph.grouping import group_connected, merge_while_acyclic

OPTIMISED = "CPU"
REFERENCE = "CPU:reference"
_NOT_LAYERS = {"Input", "Output", "Const", "Parameter", "Result", "Constant"}


def _info(op: Any, key: str) -> str:
    rt = op.get_rt_info()
    return str(rt[key].astype(str)) if key in rt else ""


# Layers whose ``ref_*`` label is the plugin's only (copying) implementation: see above.
_COPY_LAYERS = {"Concatenation", "Split"}


def is_reference(primitive: str, layer_type: str = "") -> bool:
    """``ref_f32``, ``ref_any_i32``: one of OpenVINO's reference implementations (a
    Concatenation's or Split's copy is not one: the module docstring)."""
    if layer_type in _COPY_LAYERS:
        return False
    return primitive == "ref" or primitive.startswith("ref_")


def _layers(runtime_model: Any) -> tuple[list[Any], list[str], list[str]]:
    """(layers that are not inputs/outputs/constants, their layer types, their primitives)."""
    ops = [
        op for op in runtime_model.get_ordered_ops() if _info(op, "layerType") not in _NOT_LAYERS
    ]
    return ops, [_info(op, "layerType") for op in ops], [_info(op, "primitiveType") for op in ops]


def partitions(runtime_model: Any) -> PartitionInfo:
    """Optimised and reference partitions of the runtime graph (the module docstring)."""
    ops, types, prims = _layers(runtime_model)
    by_name = {op.get_friendly_name(): i for i, op in enumerate(ops)}
    preds: list[list[int]] = []
    for i, op in enumerate(ops):
        ps = set()
        for inp in op.inputs():
            src = inp.get_source_output().get_node()
            j = by_name.get(src.get_friendly_name())
            if j is not None and j != i:
                ps.add(j)
        preds.append(sorted(ps))
    kind = [
        REFERENCE if is_reference(p, t) else OPTIMISED for p, t in zip(prims, types, strict=True)
    ]
    groups, _ = group_connected(preds, kind)
    merge_while_acyclic(groups, kind)
    members = sorted((sorted(m) for m in groups.members.values()), key=lambda m: (-len(m), m[0]))
    details: list[PartitionDetail] = []
    for m in members:
        ops_in: dict[str, int] = {}
        for i in m:
            ops_in[types[i]] = ops_in.get(types[i], 0) + 1
        details.append({"provider": kind[m[0]], "nodes": len(m), "ops": ops_in})
    by_provider = {k: kind.count(k) for k in (OPTIMISED, REFERENCE) if k in kind}
    reorders = sum(1 for t in types if t == "Reorder")
    return PartitionInfo(
        count=len(members),
        delegated_nodes=kind.count(OPTIMISED),
        fallback_nodes=kind.count(REFERENCE),
        by_provider=by_provider,
        details=details,
        how="OpenVINO's runtime graph (compiled_model.get_runtime_model()): layers on a "
        "reference implementation (primitiveType ref_*, but a Concatenation's or Split's "
        "copy) are fallback nodes, the rest "
        "delegated; connected same-kind subgraphs grouped as onnxruntime's providers are; "
        "count = every group. Input, Output and Const layers not counted.",
        layout_conversions=reorders,
    )


def _bytes(output: Any) -> int | None:
    shape = output.get_partial_shape()
    if not shape.is_static:
        return None
    return int(np.prod([d.get_length() for d in shape], dtype=np.int64)) * int(
        output.get_element_type().size
    )


def memory_facts(runtime_model: Any) -> MemoryJson:
    """{arena_bytes: None, lower_bound_bytes, how, extra} of the runtime graph."""
    ops = sorted(runtime_model.get_ordered_ops(), key=lambda op: int(_info(op, "execOrder") or 0))
    last: dict[str, int] = {}
    for s, op in enumerate(ops):
        for inp in op.inputs():
            src = inp.get_source_output().get_node().get_friendly_name()
            last[src] = max(last.get(src, -1), s)
    frees = [0] * (len(ops) + 1)
    live = peak = weights = unknown = 0
    for s, op in enumerate(ops):
        layer, prim = _info(op, "layerType"), _info(op, "primitiveType")
        size = 0
        for out in op.outputs():
            b = _bytes(out)
            if b is None:
                unknown += 1
            else:
                size += b
        if layer == "Const":
            weights += size
            continue
        if layer in _NOT_LAYERS or prim.startswith("unknown"):
            continue
        live += size
        feeds_output = any(
            c.get_node().get_type_name() == "Result" or _info(c.get_node(), "layerType") == "Output"
            for out in op.outputs()
            for c in out.get_target_inputs()
        )
        if not feeds_output:
            frees[max(last.get(op.get_friendly_name(), s), s)] += size
        peak = max(peak, live)
        live -= frees[s]
        frees[s] = 0
    return {
        "arena_bytes": None,
        "lower_bound_bytes": peak,
        "how": "OpenVINO's CPU plugin reports no memory statistic: no arena. Lower bound: "
        "liveness of the runtime graph in execOrder (each layer's outputs, shape x "
        "precision, until their last consumer; constants and in-place layers not counted).",
        "extra": {"constant_bytes": weights, "unknown_shape_outputs": unknown},
    }


def profile_rows(infos: Sequence[Sequence[Any]], top: int) -> list[KernelRow]:
    """The ``top`` layers by mean real time per inference from PERF_COUNT records (one
    list of ProfilingInfo per inference), as result ``kernels`` rows."""
    per: dict[str, NodeTime] = {}
    for run in infos:
        for p in run:
            if str(p.status).endswith("NOT_RUN") or str(p.status).endswith("OPTIMIZED_OUT"):
                continue
            row = per.setdefault(p.node_name, NodeTime(p.node_type, p.exec_type))
            row.us.append(p.real_time.total_seconds() * 1e6)
    return top_nodes(per, top, source="openvino PERF_COUNT")
