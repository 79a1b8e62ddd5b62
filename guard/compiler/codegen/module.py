"""Emit the LLVM module for a kernel plan, optimise it (new pass builder, O3), and lower it
to an object for the plan's target; and map such an object back, with no compilation.

Functions in the module:

- one per distinct kernel (``k<i>_<op>``: ``void(ptr in..., ptr out...)``), emitted by
  the op's emitter (guard.compiler.codegen.emitters) and specialised to its shapes;
- ``guard_part<P>(ptr arena, ptr weights, ptr packed)`` per native partition: computes
  every operand's address from the kernel plan's offsets and calls the kernels in order;
- ``guard_part<P>_prof(..., ptr cycles)``: the same, adding each call's cycle count
  (``llvm.readcyclecounter``) to ``cycles[step]``: the per-kernel profile;
- ``guard_main(ptr arena, ptr weights, ptr packed, ptr inputs, ptr outputs)`` (and
  ``guard_main_prof``) when every partition is native: copies the inputs in, runs every
  partition, copies the outputs out: one foreign call per inference;
- ``t<i>_<op>(i64 task, ptr arena, ptr weights, ptr packed)`` per split step (its tasks'
  kernels, each on one slice of the output), called through ``guard_pool_run``;
- ``guard_pool_start/stop/run``: the thread pool (guard.compiler.codegen.threadpool), linked in.
"""

from __future__ import annotations

import ctypes
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import llvmlite.ir as ir

from guard.compiler.codegen.base import Kernel
from guard.compiler.codegen.irutil import I64, PTR, VOID, byte_ptr, declare, i64
from guard.compiler.codegen.kernel_plan import KernelPlan, Operand, Step
from guard.compiler.codegen.llvm_target import CodegenTarget
from guard.compiler.codegen.threadpool import pool_ir
from guard.core.errors import InternalError


@dataclass(frozen=True)
class Generated:
    ir_text: str  # the optimised module
    object_code: bytes
    compile_s: float
    kernels: int  # distinct kernel functions


def _kernel_fn(
    module: ir.Module, step: Step, target: CodegenTarget, emitter_for: Callable
) -> ir.Function:
    existing = module.globals.get(step.kernel)
    if existing is not None:
        return existing
    n_in, n_out = len(step.inputs), len(step.outputs)
    fn = ir.Function(module, ir.FunctionType(VOID, [PTR] * (n_in + n_out)), step.kernel)
    fn.linkage = "internal"
    fn.attributes.add("noinline")  # one symbol per kernel: profiles and IR diffs see it
    fn.attributes.add("nounwind")
    if not step.may_alias:
        for a in fn.args:
            a.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    kernel = Kernel(step.op, step.attrs, step.inputs, step.outputs, target.vector_width)
    ins = [None if o is None else fn.args[j] for j, o in enumerate(step.inputs)]
    emitter_for(step.op).emit(b, ins, list(fn.args[n_in:]), kernel)
    if not b.block.is_terminated:
        b.ret_void()
    return fn


def _operand_ptr(b: ir.IRBuilder, spaces: dict[str, ir.Value], o: Operand) -> ir.Value:
    return byte_ptr(b, spaces[o.space], o.offset)


def _cycles(b: ir.IRBuilder) -> ir.Value:
    fn = b.module.globals.get("llvm.readcyclecounter")
    if fn is None:
        fn = ir.Function(b.module, ir.FunctionType(I64, []), "llvm.readcyclecounter")
    return b.call(fn, [])


def _task_fn(module: ir.Module, step: Step, kernels: dict[str, ir.Function]) -> ir.Function:
    """``void t<i>(i64 task, ptr arena, ptr weights, ptr packed)``: calls the kernel of
    task ``task`` of a split step with that task's operand pointers."""
    fn = ir.Function(module, ir.FunctionType(VOID, [I64, PTR, PTR, PTR]), step.kernel)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    entry = fn.append_basic_block("entry")
    done = fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    sw = b.switch(fn.args[0], done)
    spaces = {"arena": fn.args[1], "weights": fn.args[2], "packed": fn.args[3]}
    for i, t in enumerate(step.parts):
        blk = fn.append_basic_block(f"task{i}")
        sw.add_case(i64(i), blk)
        b.position_at_end(blk)
        args = [
            ir.Constant(PTR, None) if o is None else _operand_ptr(b, spaces, o)
            for o in (*t.inputs, *t.outputs)
        ]
        b.call(kernels[t.kernel], args)
        b.branch(done)
    b.position_at_end(done)
    b.ret_void()
    return fn


def _call_step(
    b: ir.IRBuilder, step: Step, spaces: dict[str, ir.Value], fns: dict[str, ir.Function]
) -> None:
    if step.parts:  # on the pool: each task one slice of the output
        run = b.module.globals.get("guard_pool_run")
        if run is None:
            run = ir.Function(
                b.module, ir.FunctionType(VOID, [PTR, PTR, PTR, PTR, I64]), "guard_pool_run"
            )
        args = [fns[step.kernel], spaces["arena"], spaces["weights"], spaces["packed"]]
        b.call(run, [*args, i64(len(step.parts))])
        return
    args = [
        ir.Constant(PTR, None) if o is None else _operand_ptr(b, spaces, o)
        for o in (*step.inputs, *step.outputs)
    ]
    b.call(fns[step.kernel], args)


def build_module(plan: KernelPlan, target: CodegenTarget, emitter_for: Callable) -> ir.Module:
    module = ir.Module(name="guard")
    module.triple = target.triple
    kernels: dict[str, ir.Function] = {}
    for s in plan.steps():
        for t in s.parts or (s,):
            kernels[t.kernel] = _kernel_fn(module, t, target, emitter_for)
    for s in plan.steps():
        if s.parts:
            kernels[s.kernel] = _task_fn(module, s, kernels)
    memcpy = declare(module, "llvm.memcpy.p0.p0.i64", VOID, [PTR, PTR, I64, ir.IntType(1)])
    step_index = 0
    parts: dict[int, tuple[ir.Function, ir.Function, int]] = {}
    for p in plan.partitions:
        first = step_index
        for prof in (False, True):
            name = p.entry + ("_prof" if prof else "")
            fn = ir.Function(module, ir.FunctionType(VOID, [PTR] * (4 if prof else 3)), name)
            b = ir.IRBuilder(fn.append_basic_block("entry"))
            spaces = {"arena": fn.args[0], "weights": fn.args[1], "packed": fn.args[2]}
            for j, s in enumerate(p.steps):
                t0 = _cycles(b) if prof else None
                _call_step(b, s, spaces, kernels)
                if prof:
                    dt = b.sub(_cycles(b), t0)
                    slot = b.gep(fn.args[3], [i64(first + j)], source_etype=I64)
                    b.store(b.add(b.load(slot, typ=I64), dt), slot)
            b.ret_void()
            if prof:
                prof_fn = fn
            else:
                plain_fn = fn
        parts[p.partition] = (plain_fn, prof_fn, first)
        step_index += len(p.steps)
    if plan.main:
        for prof in (False, True):
            name = plan.main + ("_prof" if prof else "")
            fn = ir.Function(module, ir.FunctionType(VOID, [PTR] * (6 if prof else 5)), name)
            b = ir.IRBuilder(fn.append_basic_block("entry"))
            arena, weights, packed, inputs, outputs = fn.args[:5]
            spaces = {"arena": arena, "weights": weights, "packed": packed}
            for j, o in enumerate(plan.inputs):
                src = b.load(b.gep(inputs, [i64(j)], source_etype=PTR), typ=PTR)
                b.call(
                    memcpy,
                    [_operand_ptr(b, spaces, o), src, i64(o.nbytes), ir.Constant(ir.IntType(1), 0)],
                )
            for p in plan.partitions:
                plain_fn, prof_fn, _ = parts[p.partition]
                if prof:
                    b.call(prof_fn, [arena, weights, packed, fn.args[5]])
                else:
                    b.call(plain_fn, [arena, weights, packed])
            for j, o in enumerate(plan.outputs):
                dst = b.load(b.gep(outputs, [i64(j)], source_etype=PTR), typ=PTR)
                b.call(
                    memcpy,
                    [dst, _operand_ptr(b, spaces, o), i64(o.nbytes), ir.Constant(ir.IntType(1), 0)],
                )
            b.ret_void()
    return module


def compile_module(module: ir.Module, target: CodegenTarget) -> Generated:
    """Verify, optimise at O3 with the new pass builder, and emit the target's object."""
    import llvmlite.binding as llvm

    t0 = time.perf_counter()
    tm = target.target_machine()
    module.data_layout = str(tm.target_data)
    try:
        mod = llvm.parse_assembly(str(module))
        mod.verify()
        # The thread pool (guard.compiler.codegen.threadpool) in every object: the runtime
        # starts and stops it whether or not a step was split.
        pool = llvm.parse_assembly(
            f'target triple = "{target.triple}"\ntarget datalayout = "{tm.target_data}"\n'
            + pool_ir(target.triple)
        )
        pool.verify()
        mod.link_in(pool)
    except RuntimeError as exc:  # an emitter wrote invalid IR: guard's bug, not the model's
        raise InternalError(
            f"code generator produced invalid LLVM IR: {str(exc).splitlines()[0]}"
        ) from exc
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    text = str(mod)
    obj = tm.emit_object(mod)
    n_kernels = sum(1 for f in module.functions if f.name.startswith("k") and not f.is_declaration)
    return Generated(text, bytes(obj), time.perf_counter() - t0, n_kernels)


def _stop_pool(stop: Callable[[], None], engine: object) -> None:
    stop()


class LoadedObject:
    """An object file mapped into this process (MCJIT over an empty module): no compiling."""

    def __init__(self, object_code: bytes, target: CodegenTarget) -> None:
        import llvmlite.binding as llvm

        tm = target.target_machine()  # owned by the engine from here on
        empty = llvm.parse_assembly(f'target triple = "{target.triple}"\n')
        self.engine = llvm.create_mcjit_compiler(empty, tm)
        self.engine.add_object_file(llvm.ObjectFileRef.from_data(object_code))
        self.engine.finalize_object()
        self.threads = 1
        # The pool's workers run this object's code: join them before it is unmapped
        # (the finalizer holds the engine until then).
        stop = self.engine.get_function_address("guard_pool_stop")
        if stop:
            weakref.finalize(self, _stop_pool, ctypes.CFUNCTYPE(None)(stop), self.engine)

    def start_threads(self, n: int) -> int:
        """Start the object's thread pool with ``n`` threads (the caller's included) unless
        started; the threads it runs (1 for an object without a pool)."""
        addr = self.engine.get_function_address("guard_pool_start")
        if addr and n > 1:
            self.threads = int(ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32)(addr)(n))
        return self.threads

    def address(self, name: str) -> int:
        addr = int(self.engine.get_function_address(name))
        if not addr:
            raise InternalError(f"generated object has no function {name!r}")
        return addr
