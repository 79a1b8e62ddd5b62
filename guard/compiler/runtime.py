"""The bundled runtime: one preallocated arena, one weights blob, partitions in order.

:func:`plan` freezes the decisions (partition, partition-contiguous schedule, memory plan)
into a :class:`CompiledPlan`; :class:`Runtime` only reads it. At run time every arena
tensor is a numpy view at its planned offset; feeds are copied in, each partition runs its
nodes in schedule order on its backend's executor, and outputs are copied out (the arena
is reused by the next run). Elided nodes (views, concat/split slices) do nothing: their
inputs were written in place.

Executors: ``native`` partitions run the reference kernels until generated code lands
(part 3 registers its own executor); ``cpu``, the fallback, is the reference interpreter.
Either way the partitions, their boundaries and the arena are the real ones, so a wrong
plan (two live tensors sharing bytes, an unsafe alias) shows up as outputs that differ
from ``run_reference``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from guard.compiler.memory import MemoryPlan, plan_memory
from guard.compiler.partition import PartitionPlan, format_report, partition, report_dict
from guard.compiler.schedule import ALIGNMENT, GraphView, Schedule, align, schedule, view_of_graph
from guard.compiler.support import Backend, backends_for
from guard.errors import InternalError, ModelError

COMPILER_NAME = "guard-compiler"
RUNTIME_NAME = "guard-runtime"  # one arena, partitions in order (reference kernels for now)


WEIGHTS_SCHEMA_VERSION = 1  # of weights.json, the index WeightsLayout.to_dict writes


@dataclass(frozen=True)
class WeightsIndexEntry:
    name: str
    offset: int
    nbytes: int
    dtype: str
    shape: tuple[int, ...]
    sha256: str


@dataclass(frozen=True)
class WeightsLayout:
    """Every constant at a 64-byte aligned offset in one flat blob."""

    total_bytes: int
    entries: tuple[WeightsIndexEntry, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": WEIGHTS_SCHEMA_VERSION,
            "alignment": ALIGNMENT,
            "total_bytes": self.total_bytes,
            "tensors": [
                {"name": e.name, "offset": e.offset, "nbytes": e.nbytes, "dtype": e.dtype,
                 "shape": list(e.shape), "sha256": e.sha256}
                for e in self.entries
            ],
        }  # fmt: skip

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WeightsLayout:
        """The inverse of :meth:`to_dict`; the caller checks schema_version and the blob."""
        return cls(
            d["total_bytes"],
            tuple(
                WeightsIndexEntry(
                    e["name"], e["offset"], e["nbytes"], e["dtype"], tuple(e["shape"]), e["sha256"]
                )
                for e in d["tensors"]
            ),
        )


def pack_weights(constants: Mapping[str, np.ndarray]) -> tuple[np.ndarray, WeightsLayout]:
    """The weights blob (uint8) and its index, constants in name order."""
    entries, off = [], 0
    arrays = {k: np.ascontiguousarray(v) for k, v in sorted(constants.items())}
    for name, arr in arrays.items():
        digest = hashlib.sha256(arr.tobytes()).hexdigest()
        entries.append(
            WeightsIndexEntry(name, off, arr.nbytes, arr.dtype.name, tuple(arr.shape), digest)
        )
        off += align(arr.nbytes)
    blob = np.zeros(off, np.uint8)
    for e in entries:
        blob[e.offset : e.offset + e.nbytes] = np.frombuffer(arrays[e.name].tobytes(), np.uint8)
    return blob, WeightsLayout(off, tuple(entries))


def weight_views(blob: np.ndarray, layout: WeightsLayout) -> dict[str, np.ndarray]:
    """Read-only array views of every constant inside the blob."""
    out = {}
    for e in layout.entries:
        a = blob[e.offset : e.offset + e.nbytes].view(np.dtype(e.dtype)).reshape(e.shape)
        a.flags.writeable = False
        out[e.name] = a
    return out


@dataclass(frozen=True)
class CompiledPlan:
    """Everything decided at compile time; frozen, read by the runtime and the artefact."""

    graph: Any  # guard.compiler.ir.Graph, the optimised graph
    view: GraphView
    partitions: PartitionPlan
    schedule: Schedule
    memory: MemoryPlan
    backends: tuple[Backend, ...]
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


def plan(graph: Any, profile: str | Path | Backend | None = None) -> CompiledPlan:
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
    profile: str | Path | Backend | None = None,
) -> tuple[CompiledPlan, Any]:
    """Import, optimise with ``pipeline`` and plan: (plan, the pipeline's report)."""
    from guard.compiler import import_onnx, optimize

    graph = import_onnx(model_path, dict(input_shapes or {}))
    optimised, report = optimize(graph, pipeline)
    return plan(optimised, profile), report


def partition_report(
    model_path: str | Path,
    input_shapes: Mapping[str, Any] | None,
    profile: str | Path | None = None,
    *,
    pipeline: str = "O2",
) -> tuple[dict[str, Any], str]:
    """What ``guard partition MODEL [--profile P]`` prints: (report dict, text)."""
    compiled, _ = compile_model(model_path, input_shapes, pipeline=pipeline, profile=profile)
    rep = dict(compiled.partition_report)
    rep["memory"] = compiled.memory_report()
    text = compiled.partition_text(f"{Path(model_path).name} on {compiled.profile}")
    m = compiled.memory
    text += (
        f"\n  arena: {m.arena_bytes} B (lower bound {m.lower_bound_bytes} B, fragmentation "
        f"{m.fragmentation:.1%}, naive {m.naive_bytes} B, {len(m.elided_nodes)} elided, "
        f"{len(m.inplace_nodes)} in place, {len(m.copies)} view-able node(s) kept as copies)"
    )
    for node, why in list(m.copies.items())[:10]:
        text += f"\n    copy: {node}: {why}"
    return rep, text


# -- the runtime --------------------------------------------------------------------------

# An executor runs one node: (op, inputs, attrs) -> outputs. Part 3 registers generated code.
Executor = Callable[[str, list[np.ndarray | None], dict[str, Any]], list[np.ndarray]]


def reference_executor(
    op: str, inputs: list[np.ndarray | None], attrs: dict[str, Any]
) -> list[np.ndarray]:
    from guard.compiler.reference import run_node

    return run_node(op, inputs, attrs)


class Runtime:
    """Runs a CompiledPlan (or a loaded artefact) over one preallocated arena."""

    def __init__(
        self,
        view: GraphView,
        memory: MemoryPlan,
        partition_of: tuple[int, ...],
        partition_backend: tuple[str, ...],
        weights_blob: np.ndarray,
        weights_layout: WeightsLayout,
        executors: Mapping[str, Executor] | None = None,
    ) -> None:
        self.view = view
        self.memory = memory
        self.arena = np.zeros(memory.arena_bytes + ALIGNMENT, np.uint8)
        self.weights = weight_views(weights_blob, weights_layout)
        self.input_names = list(view.inputs)
        self.output_names = list(view.outputs)
        self.executors: dict[str, Executor] = {
            b: reference_executor for b in set(partition_backend)
        }
        self.executors.update(executors or {})
        self._elided = set(memory.elided_nodes)
        self._slot_views = {t: self._at(t) for t in memory.slots}
        # Steps: (node, executor) in schedule order; partitions are contiguous runs of it.
        self._steps = [
            (view.nodes[i], self.executors[partition_backend[partition_of[i]]])
            for i in memory.order
        ]

    @classmethod
    def from_plan(
        cls, compiled: CompiledPlan, executors: Mapping[str, Executor] | None = None
    ) -> Runtime:
        blob, layout = pack_weights({k: c.data for k, c in compiled.graph.constants.items()})
        backends = tuple(p.backend for p in compiled.partitions.partitions)
        return cls(
            compiled.view,
            compiled.memory,
            compiled.partitions.group_of,
            backends,
            blob,
            layout,
            executors,
        )

    def _at(self, name: str) -> np.ndarray:
        s = self.memory.slots[name]
        info = self.view.tensors[name]
        if s.offset + s.nbytes > self.memory.arena_bytes:
            raise ModelError(f"tensor {name!r} lies outside the arena in the memory plan")
        return (
            self.arena[s.offset : s.offset + s.nbytes]
            .view(np.dtype(info.dtype))
            .reshape(info.shape)
        )

    def _value(self, name: str) -> np.ndarray | None:
        if not name:
            return None
        if name in self._slot_views:
            return self._slot_views[name]
        return self.weights[name]

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Outputs by name, as fresh arrays."""
        for name in self.input_names:
            if name not in feeds:
                raise ModelError(
                    f"no feed for input {name!r}", hint=f"Inputs: {', '.join(self.input_names)}."
                )
            info = self.view.tensors[name]
            arr = np.asarray(feeds[name])
            if tuple(arr.shape) != tuple(info.shape):
                raise ModelError(
                    f"feed {name!r} has shape {list(arr.shape)}, the artefact was built for "
                    f"{list(info.shape)}",
                    hint="Rebuild for this shape or feed the bound shape.",
                )
            if name in self._slot_views:
                self._slot_views[name][...] = arr.astype(info.dtype, copy=False)
        for node, execute in self._steps:
            if node.name in self._elided:
                continue
            # node.args: the IR's inputs (the view appends subgraph captures for liveness).
            outs = execute(node.op, [self._value(v) for v in node.args], dict(node.attrs))
            for name, arr in zip(node.outputs, outs, strict=True):
                dst = self._slot_views[name]
                arr = np.asarray(arr)
                if arr.shape != dst.shape or arr.dtype != dst.dtype:
                    raise InternalError(
                        f"runtime: {node.op} node {node.name!r} produced {arr.dtype}"
                        f"{list(arr.shape)} for {name!r}, the plan holds {dst.dtype}{list(dst.shape)}"
                    )
                dst[...] = arr  # numpy buffers overlapping copies (in-place slots)
        return {o: np.array(self._value(o), copy=True) for o in self.output_names}
