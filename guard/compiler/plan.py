"""The frozen compile-time decisions: :class:`CompiledPlan` and :func:`plan`.

:func:`plan` partitions the optimised graph over the profile's backends, schedules it
(partition-contiguous) and plans one arena. Everything after it (the artefact writer, the
runtime, the code generator) only reads the result.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from guard.compiler.memory import MemoryPlan, plan_memory
from guard.compiler.partition import PartitionPlan, format_report, partition, report_dict
from guard.compiler.schedule import GraphView, Schedule, schedule, view_of_graph
from guard.compiler.support import PartitionTarget, backends_for

COMPILER_NAME = "guard-compiler"


@dataclass(frozen=True)
class CompiledPlan:
    """Everything decided at compile time; frozen, read by the runtime and the artefact."""

    graph: Any  # guard.compiler.ir.Graph, the optimised graph
    view: GraphView
    partitions: PartitionPlan
    schedule: Schedule
    memory: MemoryPlan
    backends: tuple[PartitionTarget, ...]
    profile: str  # "native" or the profile's name
    partition_report: Mapping[str, Any] = field(default_factory=dict)

    @property
    def arena_bytes(self) -> int:
        return self.memory.arena_bytes

    @property
    def lower_bound_bytes(self) -> int:
        return self.memory.lower_bound_bytes

    def partition_text(self, title: str = "") -> str:
        return format_report(dict(self.partition_report), title)

    def memory_report(self) -> dict[str, Any]:
        return {**self.memory.summary(), "schedule": self.schedule.to_dict()}


def plan(graph: Any, profile: str | Path | PartitionTarget | None = None) -> CompiledPlan:
    """Partition, schedule (partition-contiguous) and memory-plan an IR graph."""
    view = view_of_graph(graph)
    backends = tuple(backends_for(profile))
    parts = partition(view, backends)
    sched = schedule(view, parts.group_of)
    mem = plan_memory(view, sched.order)
    return CompiledPlan(
        graph=graph,
        view=view,
        partitions=parts,
        schedule=sched,
        memory=mem,
        backends=backends,
        profile=backends[0].name,
        partition_report=MappingProxyType(report_dict(parts, view)),
    )


def compile_model(
    model_path: str | Path,
    input_shapes: Mapping[str, Any] | None,
    *,
    pipeline: str = "O2",
    profile: str | Path | PartitionTarget | None = None,
) -> tuple[CompiledPlan, Any]:
    """Import, optimise with ``pipeline`` and plan: (plan, the pipeline's report)."""
    from guard.compiler import import_onnx, optimize

    graph = import_onnx(model_path, dict(input_shapes or {}))
    optimised, report = optimize(graph, pipeline)
    return plan(optimised, profile), report
