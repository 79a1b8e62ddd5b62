"""Plan, then emit: a CompiledPlan in, machine code for its native partitions out.

:func:`generate` builds the kernel plan from the frozen plans only (guard.compiler.partition.plan),
packs the constants the kernels want re-laid, emits one LLVM module, optimises it at O3
with the new pass builder and lowers it to an object for the canonical target. The
result is what the artefact stores: the object, the optimised IR text, the kernel plan
and the packed constants.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen.emitters import emitter_for
from guard.compiler.codegen.kernel_plan import KernelPlan, build_kernel_plan
from guard.compiler.codegen.llvm_target import CodegenTarget, host_target
from guard.compiler.codegen.module import Generated, LoadedObject, build_module, compile_module
from guard.compiler.codegen.split import split_step
from guard.compiler.ir.isa_table import using_table
from guard.compiler.partition.plan import CompiledPlan
from guard.compiler.runtime.control import control_executor
from guard.compiler.runtime.engine import Runtime
from guard.compiler.runtime.weights import WeightsLayout, pack_weights

PackMemo = dict[tuple[Any, ...], tuple[np.ndarray, "np.ndarray | None"]]


@dataclass(frozen=True)
class NativeCode:
    plan: KernelPlan
    packed: np.ndarray  # uint8 blob of packed constants
    generated: Generated
    target: CodegenTarget


def generate(
    compiled: CompiledPlan, weights_layout: WeightsLayout, target: CodegenTarget
) -> NativeCode:
    """Machine code for every native partition of ``compiled`` (a CompiledPlan)."""
    kplan, packed = plan_kernels(compiled, weights_layout, target)
    return NativeCode(kplan, packed, compile_module(emit_module(kplan, target), target), target)


def plan_kernels(
    compiled: CompiledPlan,
    weights_layout: WeightsLayout,
    target: CodegenTarget,
    *,
    packs: PackMemo | None = None,
) -> tuple[KernelPlan, np.ndarray]:
    """The kernel plan and the packed constants of :func:`generate`. ``packs`` (one dict
    for several plans of one graph's constants, one target) keeps each re-laid constant,
    so a second plan that packs the same constant for the same kernel shapes does not pack
    it again."""
    view = compiled.view
    constants = {k: c.data for k, c in compiled.graph.constants.items()}
    offsets = {e.name: e.offset for e in weights_layout.entries}
    width = target.vector_width

    def pack(op: str, attrs: Any, index: int, value: np.ndarray, shapes: Any) -> np.ndarray | None:
        if packs is None:
            return emitter_for(op).pack(op, attrs, index, value, shapes, width)
        # the array itself is held in the entry, so its id names it while the memo lives
        key = (target, op, pickle.dumps(sorted(attrs.items())), index, id(value), repr(shapes))
        if key not in packs:
            packs[key] = (value, emitter_for(op).pack(op, attrs, index, value, shapes, width))
        return packs[key][1]

    def plan_constants(op: str, attrs: Any, values: Any, ins: Any, outs: Any) -> Any:
        planner = getattr(emitter_for(op), "plan_constants", None)
        return None if planner is None else planner(op, attrs, values, ins, outs, width, target)

    backends = tuple(p.backend for p in compiled.partitions.partitions)
    # Every heuristic (conv and GEMM tiles, cache blocks) reads this target's table.
    with using_table(target.table):
        return build_kernel_plan(
            view, compiled.memory, compiled.partitions.group_of, backends, offsets, constants,
            pack, lambda s: split_step(s, width), plan_constants,
        )  # fmt: skip


def emit_module(kplan: KernelPlan, target: CodegenTarget) -> ir.Module:
    """The LLVM module of a kernel plan (every emitter reads ``target``'s table)."""
    with using_table(target.table):
        return build_module(kplan, target, emitter_for)


class NativeProgram:
    """A kernel plan with its object mapped into this process: what the runtime calls."""

    def __init__(
        self, plan: KernelPlan, packed: np.ndarray, object_code: bytes, target: CodegenTarget
    ) -> None:
        self.plan = plan
        self.packed = packed
        self._obj = LoadedObject(object_code, target)

    def address(self, name: str) -> int:
        return self._obj.address(name)

    def start_threads(self, n: int) -> int:
        """Run split steps on ``n`` threads from here on (a pool started once per load)."""
        return self._obj.start_threads(n)


def jit(
    compiled: CompiledPlan,
    target: CodegenTarget | None = None,
    threads: int = 1,
    code: NativeCode | None = None,
    weights: tuple[np.ndarray, WeightsLayout] | None = None,
) -> tuple[Runtime, NativeCode]:
    """A Runtime for ``compiled`` running generated code on ``threads`` threads (tests,
    benchmarks, guard fit's timing; no artefact); ``code``, from an earlier call on the
    same plan (or from guard.compiler.codegen.object_cache), is loaded instead of
    generated again (a second thread count, a second load); ``weights``: the plan's
    pack_weights, when the caller made it already."""
    target = code.target if code is not None else target or host_target()
    blob, layout = weights or pack_weights({k: c.data for k, c in compiled.graph.constants.items()})
    code = code if code is not None else generate(compiled, layout, target)
    program = NativeProgram(code.plan, code.packed, code.generated.object_code, target)
    program.start_threads(threads)
    backends = tuple(p.backend for p in compiled.partitions.partitions)
    # Control flow: each branch or loop body is its own compiled Runtime, called by the host.
    subs = {id(sp.graph): jit(sp, target, threads)[0] for sp in compiled.subplans.values()}
    rt = Runtime(
        compiled.view,
        compiled.memory,
        compiled.partitions.group_of,
        backends,
        blob,
        layout,
        executors={"cpu": control_executor(subs)} if subs else None,
        native=program,
    )
    return rt, code
