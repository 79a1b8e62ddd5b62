"""The frozen compile-time decisions: :class:`CompiledPlan` and :func:`plan`.

:func:`plan` partitions the optimised graph over the profile's backends, schedules it
(partition-contiguous) and plans one arena. Everything after it (the artefact writer, the
runtime, the code generator) only reads the result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from guard.compiler import import_onnx, optimize
from guard.compiler.codegen.kernel_plan import build_kernel_plan
from guard.compiler.frontend.specialise import Specialised
from guard.compiler.graph.exec_order import Schedule, schedule
from guard.compiler.graph.memory import MemoryPlan, plan_memory
from guard.compiler.graph.view import GraphView, view_of_graph
from guard.compiler.ir.core import Graph
from guard.compiler.partition.assign import PartitionPlan, format_report, partition, report_dict
from guard.compiler.partition.report_json import (
    ControlFlow,
    MemoryReport,
    PartitionCommandReport,
    PartitionReport,
)
from guard.compiler.partition.support import PartitionTarget, backends_for

COMPILER_NAME = "guard-compiler"


@dataclass(frozen=True)
class CompiledPlan:
    """Everything decided at compile time; frozen, read by the runtime and the artefact."""

    graph: Any  # guard.compiler.ir.core.Graph, the optimised graph
    view: GraphView
    partitions: PartitionPlan
    schedule: Schedule
    memory: MemoryPlan
    backends: tuple[PartitionTarget, ...]
    profile: str  # "native" or the profile's name
    partition_report: PartitionReport
    # Control flow: "<node>/<attr>" -> the plan of that branch or loop body, compiled as a
    # graph of its own (the If/Loop node runs on the host and calls it).
    subplans: Mapping[str, CompiledPlan] = field(default_factory=dict)

    @property
    def arena_bytes(self) -> int:
        return self.memory.arena_bytes

    @property
    def lower_bound_bytes(self) -> int:
        return self.memory.lower_bound_bytes

    def partition_text(self, title: str = "") -> str:
        return format_report(self.partition_report, title)

    def memory_report(self) -> MemoryReport:
        return {**self.memory.summary(), "schedule": self.schedule.to_dict()}


def plan(graph: Graph, profile: str | Path | PartitionTarget | None = None) -> CompiledPlan:
    """Partition, schedule (partition-contiguous) and memory-plan an IR graph."""
    view = view_of_graph(graph)
    backends = tuple(backends_for(profile))
    parts = partition(view, backends)
    sched = schedule(view, parts.group_of)
    mem = plan_memory(view, sched.order)
    subplans: dict[str, CompiledPlan] = {}
    for node in view.nodes:
        for attr, sub in node.attrs.items():
            if isinstance(sub, Graph):
                subplans[f"{node.name}/{attr}"] = plan(sub, profile)
    report = report_dict(parts, view)
    if subplans:
        report["control_flow"] = control_flow_report(parts, view, subplans)
    return CompiledPlan(
        graph=graph,
        view=view,
        partitions=parts,
        schedule=sched,
        memory=mem,
        backends=backends,
        profile=backends[0].name,
        partition_report=report,
        subplans=MappingProxyType(subplans),
    )


def control_flow_report(
    parts: PartitionPlan, view: GraphView, subplans: Mapping[str, CompiledPlan]
) -> list[ControlFlow]:
    """Where control flow cut the model: per If/Loop node, the host partition it runs in
    and the partitions of each branch or body it calls (their own reports, nested); a
    specialised If also its guard, why it was specialised and which branches were refused."""
    out = []
    for i, node in enumerate(view.nodes):
        subs = {
            k.rsplit("/", 1)[1]: p for k, p in subplans.items() if k.rsplit("/", 1)[0] == node.name
        }
        if not subs:
            continue
        pid = parts.group_of[i]
        entry: ControlFlow = {
            "node": node.name,
            "op": node.op,
            "partition": pid,
            "backend": parts.partitions[pid].backend,
            "subgraphs": {a: p.partition_report.copy() for a, p in sorted(subs.items())},
        }
        if "specialised" in node.attrs:  # guard.compiler.frontend.specialise
            spec: Specialised = node.attrs["specialised"]
            entry["specialised"] = spec.copy()
        out.append(entry)
    return out


def compile_model(
    model_path: str | Path,
    input_shapes: Mapping[str, Sequence[int]] | None,
    *,
    pipeline: str = "O2",
    profile: str | Path | PartitionTarget | None = None,
) -> tuple[CompiledPlan, Any]:
    """Import, optimise with ``pipeline`` and plan: (plan, the pipeline's report)."""
    graph = import_onnx(model_path, dict(input_shapes or {}))
    optimised, report = optimize(graph, pipeline)
    return plan(optimised, profile), report


def partition_report(
    model_path: str | Path,
    input_shapes: Mapping[str, Sequence[int]] | None,
    profile: str | Path | None = None,
    *,
    pipeline: str = "O2",
) -> tuple[PartitionCommandReport, str]:
    """What ``guard partition MODEL [--profile P]`` prints: (report dict, text).

    Imports, optimises (``pipeline``) and plans the model; the dict is the artefact's
    partitions.json plus a ``memory`` summary.
    """
    compiled, _ = compile_model(model_path, input_shapes, pipeline=pipeline, profile=profile)
    rep: PartitionCommandReport = {
        **compiled.partition_report,
        "memory": compiled.memory_report(),
    }
    text = compiled.partition_text(f"{Path(model_path).name} on {compiled.profile}")
    m = compiled.memory
    text += (
        f"\n  arena: {m.arena_bytes} B (lower bound {m.lower_bound_bytes} B, fragmentation "
        f"{m.fragmentation:.1%}, naive {m.naive_bytes} B, {len(m.elided_nodes)} elided, "
        f"{len(m.inplace_nodes)} in place, {len(m.copies)} view-able node(s) kept as copies)"
    )
    for node, why in list(m.copies.items())[:10]:
        text += f"\n    copy: {node}: {why}"
    kernels = _kernel_listing(compiled)
    if kernels:
        rep["kernels"] = kernels
        distinct = len({k for _, k, _ in kernels})
        text += (
            f"\n  generated kernels: {distinct} distinct for {len(kernels)} node(s) "
            "(node -> kernel)"
        )
        for node, kernel, op in kernels[:40]:
            text += f"\n    {node} -> {kernel} ({op})"
        if len(kernels) > 40:
            text += f"\n    ... {len(kernels) - 40} more"
    return rep, text


def _kernel_listing(compiled: CompiledPlan) -> list[list[str]]:
    """[node, kernel symbol, op] per generated step (the kernel plan; nothing is compiled)."""
    if not any(p.backend == "native" for p in compiled.partitions.partitions):
        return []
    consts = {k: c.data for k, c in compiled.graph.constants.items()}
    offsets = dict.fromkeys(consts, 0)  # names only: no addresses are listed
    backends = tuple(p.backend for p in compiled.partitions.partitions)
    kplan, _ = build_kernel_plan(
        compiled.view, compiled.memory, compiled.partitions.group_of, backends, offsets, consts,
        lambda *a: None,
    )  # fmt: skip
    return [[s.node, s.kernel, s.op] for s in kplan.steps()]
