"""The bundled runtime: one preallocated arena, one weights blob, partitions in order.

:class:`Runtime` only reads the frozen plans (guard.compiler.partition.plan.CompiledPlan, or the
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

import ctypes
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

import numpy as np

from guard.compiler.codegen.kernel_plan import KernelPlan
from guard.compiler.graph.memory import MemoryPlan
from guard.compiler.graph.view import ALIGNMENT, GraphView
from guard.compiler.ir.core import Attrs
from guard.compiler.reference import run_node
from guard.compiler.runtime.weights import WeightsLayout, pack_weights, weight_views
from guard.core.errors import InternalError, ModelError

if TYPE_CHECKING:
    from guard.compiler.partition.plan import CompiledPlan

RUNTIME_NAME = "guard-runtime"  # one arena, partitions in order


# An executor runs one node: (op, inputs, attrs) -> outputs. Generated code runs whole
# native partitions instead (see the module docstring).
Executor = Callable[[str, list[np.ndarray | None], Attrs], list[np.ndarray]]


def reference_executor(op: str, inputs: list[np.ndarray | None], attrs: Attrs) -> list[np.ndarray]:
    return run_node(op, inputs, attrs)


class KernelProfile(TypedDict):
    """One generated kernel in :meth:`Runtime.profile`: its steps' nodes, cycles over the
    profiled runs, share of all cycles and milliseconds per inference."""

    kernel: str
    op: str
    nodes: list[str]
    cycles: int
    share: float
    ms: float


class NativeEntries(Protocol):
    """What the runtime reads of generated code mapped into this process
    (guard.compiler.codegen.build.NativeProgram, which builds Runtimes in ``jit``)."""

    plan: KernelPlan
    packed: np.ndarray

    def address(self, name: str) -> int: ...


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
        native: NativeEntries | None = None,
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
        self._weights_blob = weights_blob
        self._native: NativeCalls | None = None
        if native is not None:
            self._native = NativeCalls(native, self.arena, weights_blob)
            # A native partition is one call, made when its first node comes up.
            first: dict[int, str] = {}
            steps: list[tuple[Any, Any]] = []
            for i in memory.order:
                pid = partition_of[i]
                if partition_backend[pid] != "native":
                    steps.append((view.nodes[i], self.executors[partition_backend[pid]]))
                elif pid not in first:
                    first[pid] = view.nodes[i].name
                    steps.append((None, self._native.partition_call(pid)))
            self._steps = steps

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
        if self._native is not None and self._native.main is not None:
            return self._native.run_main(self._checked_feeds(feeds), self.view, self.output_names)
        return self._run_steps(feeds)

    def _feed(self, feeds: Mapping[str, np.ndarray], name: str) -> tuple[Any, np.ndarray]:
        """Input ``name``'s tensor info and its feed, refused when missing or misshapen."""
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
        return info, arr

    def _checked_feeds(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        out = []
        for name in self.input_names:
            info, arr = self._feed(feeds, name)
            if name in self._slot_views:
                out.append(np.ascontiguousarray(arr, dtype=info.dtype))
        return out

    def profile(self, feeds: Mapping[str, np.ndarray], runs: int = 10) -> list[KernelProfile]:
        """Cycles per generated kernel over ``runs`` inferences, by share of the total."""
        if self._native is None:
            return []
        if self._native.main is None:
            # Mixed native/cpu: one full run leaves every partition's inputs in the arena,
            # then the profiled entries re-run the native partitions on them.
            self._run_steps(feeds)
        return self._native.profile(self._checked_feeds(feeds), self.view, self.output_names, runs)

    def _run_steps(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        for name in self.input_names:
            info, arr = self._feed(feeds, name)
            if name in self._slot_views:
                self._slot_views[name][...] = arr.astype(info.dtype, copy=False)
        for node, execute in self._steps:
            if node is None:  # a native partition: one call into the generated code
                execute()
                continue
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


class NativeCalls:
    """The generated entry points of one artefact, bound to this runtime's buffers.

    Addresses are read once here (``ndarray.ctypes.data`` costs microseconds per access);
    an inference with every partition native is one foreign call of ``guard_main``.
    """

    def __init__(self, native: NativeEntries, arena: np.ndarray, weights: np.ndarray) -> None:
        self._ct = ctypes
        self.native = native
        self.plan = native.plan
        self._keep = (arena, weights, native.packed)
        vp = ctypes.c_void_p
        self._bufs = (
            vp(arena.__array_interface__["data"][0]),
            vp(weights.__array_interface__["data"][0] if weights.size else 0),
            vp(native.packed.__array_interface__["data"][0] if native.packed.size else 0),
        )
        self.main: Callable[..., None] | None = None  # guard_main, when every partition is native
        n_in, n_out = len(self.plan.inputs), len(self.plan.outputs)
        self._in = (vp * max(n_in, 1))()
        self._out = (vp * max(n_out, 1))()
        if self.plan.main:
            proto = ctypes.CFUNCTYPE(None, vp, vp, vp, vp, vp)
            self.main = proto(native.address(self.plan.main))
            self._main_prof = ctypes.CFUNCTYPE(None, vp, vp, vp, vp, vp, vp)(
                native.address(self.plan.main + "_prof")
            )
        self._parts = {
            p.partition: ctypes.CFUNCTYPE(None, vp, vp, vp)(native.address(p.entry))
            for p in self.plan.partitions
        }
        self._parts_prof = {
            p.partition: ctypes.CFUNCTYPE(None, vp, vp, vp, vp)(native.address(p.entry + "_prof"))
            for p in self.plan.partitions
        }

    def partition_call(self, pid: int) -> Callable[[], None]:
        fn = self._parts.get(pid)
        bufs = self._bufs
        if fn is None:  # a native partition whose nodes were all elided
            return lambda: None
        return lambda: fn(*bufs)

    def _bind(
        self, inputs: list[np.ndarray], view: GraphView, output_names: list[str]
    ) -> dict[str, np.ndarray]:
        for j, a in enumerate(inputs):
            self._in[j] = a.__array_interface__["data"][0]
        outs = {}
        for j, (name, o) in enumerate(zip(output_names, self.plan.outputs, strict=True)):
            arr = np.empty(o.shape, np.dtype(o.dtype))
            outs[name] = arr
            self._out[j] = arr.__array_interface__["data"][0] if arr.size else None
        return outs

    def run_main(
        self, inputs: list[np.ndarray], view: GraphView, output_names: list[str]
    ) -> dict[str, np.ndarray]:
        if self.main is None:
            raise InternalError(
                "run_main on an artefact without guard_main (a partition is not native)"
            )
        outs = self._bind(inputs, view, output_names)
        self.main(*self._bufs, self._in, self._out)
        return outs

    def profile(
        self, inputs: list[np.ndarray], view: GraphView, output_names: list[str], runs: int
    ) -> list[KernelProfile]:
        steps = self.plan.steps()
        cycles = np.zeros(max(len(steps), 1), np.uint64)
        ptr = self._ct.c_void_p(cycles.__array_interface__["data"][0])
        t0 = time.perf_counter()
        for _ in range(runs):
            if self.main is not None:
                outs = self._bind(inputs, view, output_names)  # alive until the call returns
                self._main_prof(*self._bufs, self._in, self._out, ptr)
                del outs
            else:
                for p in self.plan.partitions:
                    self._parts_prof[p.partition](*self._bufs, ptr)
        wall_ms = (time.perf_counter() - t0) * 1e3 / max(runs, 1)
        total = float(cycles.sum()) or 1.0
        rows: dict[str, KernelProfile] = {}
        for s, c in zip(steps, cycles, strict=False):
            r = rows.setdefault(
                s.kernel,
                {"kernel": s.kernel, "op": s.op, "nodes": [], "cycles": 0, "share": 0.0, "ms": 0.0},
            )
            r["nodes"].append(s.node)
            r["cycles"] += int(c)
        out = sorted(rows.values(), key=lambda r: -r["cycles"])
        for r in out:
            r["share"] = round(r["cycles"] / total, 6)
            # Per inference, the wall time split by cycle share (profiling adds ~20 ns/kernel).
            r["ms"] = round(wall_ms * r["cycles"] / total, 6)
        return out
