"""The bundled runtime: one preallocated arena, one weights blob, partitions in order.

:class:`Runtime` only reads the frozen plans (guard.compiler.plan.CompiledPlan, or the
same plans loaded from an artefact). At run time every arena tensor is a numpy view at its
planned offset; feeds are copied in, each partition runs on its backend's executor in
schedule order, and outputs are copied out (the arena is reused by the next run). Nodes
the MemoryPlan elides (views, concat/split slices) do nothing: their inputs were written
in place.

Executors: a per-node executor (``cpu``, the fallback, is the reference interpreter) or a
partition executor (generated code: one call runs every node of a native partition).
Either way the partitions, their boundaries and the arena are the real ones, so a wrong
plan (two live tensors sharing bytes, an unsafe alias) shows up as outputs that differ
from ``run_reference``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from guard.compiler.memory import MemoryPlan
from guard.compiler.schedule import ALIGNMENT, GraphView
from guard.compiler.weights import WeightsLayout, pack_weights, weight_views
from guard.errors import InternalError, ModelError

if TYPE_CHECKING:
    from guard.compiler.plan import CompiledPlan

RUNTIME_NAME = "guard-runtime"  # one arena, partitions in order


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
