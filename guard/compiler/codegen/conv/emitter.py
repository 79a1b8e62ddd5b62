"""Conv and FusedConv: a direct convolution, register-tiled, in the graph's layout.

The one convolution emitter of the code generator. Vector lanes run along output
channels (``L`` = the target's width; the weights are packed at build time as
``[K/L][C/g][R][S][L]``, zero-padded past K, so a weight vector is one aligned-in-order
load). A tile is ``T`` output columns of one output row times ``KB`` output-channel
vectors: ``KB * T`` accumulators stay in registers while the reduction runs over input
channels, kernel rows and kernel columns; each step loads ``KB`` weight vectors and
``T`` input scalars (broadcast; an embedded-broadcast memory operand on AVX-512) and
issues ``KB * T`` FMAs. ``T``, ``KB``, the unroll of the input-channel loop and the loop
order (channel blocks outside rows, or rows outside blocks) are the schedule
(conv/schedule.py: :class:`ConvSchedule`, its default heuristic and the space the tuner
searches); the tuning cache supplies it on a hit (guard/compiler/tuning/dispatch.py).

Modes: ``dense`` (group 1, or channels per group a multiple of L), ``depthwise``
(one input and one output channel per group, in a layout whose channels are contiguous:
the input is a vector load too), and ``grouped`` (anything else: each group's output
channels get their own vectors, the last one of each group masked; weights packed
``[g][K/g/L][C/g][R][S][L]``; in a blocked output a vector that straddles a block is
stored lane by lane).

Padding: columns whose taps all fall inside the input are the interior, tiled ``T`` wide
in a loop without bounds checks; the border tiles sit at compile-time columns, so each
tap of each of their columns is known to be inside or outside the input and the outside
ones are simply not emitted (peeled, no run-time checks, still ``T`` columns wide).
Rows are checked once per kernel row, outside the column loop.

Outputs go to NCHW<b>c / NHWC as vector stores (the last vector masked when K is not a
multiple of L), to NCHW transposed in registers L columns at a time and stored as runs of
whole vectors (AVX-512, and stride 1 on narrower vectors; lane-strided stores otherwise). Vectors of a tile that lie in different
groups read their own input channels (one broadcast per vector); K not a multiple of
``KB`` vectors ends in one shorter block. The bias (input 2) starts the
accumulators; an epilogue program that reads no other tensor, or only single-element ones
(a scalar scale and shift, loaded once and broadcast), runs in registers before the
store, any other runs as one pointwise pass over the output (a row task's: over its band
of rows, every operand read at the band's offset).

Files: this one is the emitter (decline, weight packing, the epilogue, the schedule from
the tuning cache); conv/direct.py emits the loop nest and the register tile;
conv/schedule.py holds the geometry, the knobs and the default heuristic.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, cast

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen.base import Emitter, Kernel, bcast_strides, float32_only
from guard.compiler.codegen.conv.direct import DirectConv
from guard.compiler.codegen.conv.schedule import ConvSchedule, Geometry, tensor_reads
from guard.compiler.codegen.emit_elementwise import emit_pointwise, program_decline, run_program
from guard.compiler.codegen.irutil import F32, I64, elem_ptr, i64, load, splat
from guard.compiler.graph.exec_order import GraphView, OpNode
from guard.compiler.ir.layout import block_of
from guard.compiler.tuning.dispatch import conv_schedule
from guard.core.errors import InternalError


def conv_function(module: ir.Module, name: str, k: Kernel, sched: ConvSchedule) -> ir.Function:
    """``void name(ptr x, ptr packed_w, ptr bias_or_null, ptr y)``: one Conv kernel with
    ``sched``, outside any model (the tests' and benchmarks' entry)."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.PointerType()] * 4), name)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    xo, wo = k.inputs[0], k.inputs[1]
    assert xo is not None and wo is not None
    geo = Geometry(k.attrs, xo.shape, wo.shape, k.vector_width)
    ins: list[ir.Value | None] = [fn.args[0], fn.args[1], fn.args[2] if len(k.inputs) > 2 else None]
    Conv().emit_scheduled(b, ins, [fn.args[3]], k, geo, sched)
    b.ret_void()
    return fn


def _row_body(
    module: ir.Module, geo: Geometry, sched: ConvSchedule, prog: list, has_bias: bool
) -> ir.Function:
    """``void body(ptr x, ptr w, ptr bias, ptr y, i64 r0, i64 r1, float s...)``: output rows
    ``[r0, r1)`` of one convolution (its epilogue in registers, ``s...`` the values of the
    single-element operands it reads, in input order), declared once per module,
    geometry and schedule. The row tasks of a thread split (guard.compiler.codegen.split)
    differ only in their rows, and so do the tasks of the strips of one band shape that
    guard.compiler.passes.tile_strips makes: each task's kernel is a call of this one body
    with its rows, instead of a copy of the whole loop nest compiled per task. The rows
    bound the outer loop only (each tap's row is checked at run time either way), so the
    body computes what the per-task copies did, in the same order."""
    cache = module.__dict__.setdefault("_guard_conv_rows", {})
    full = copy.copy(geo)
    full.rows = (0, geo.OH)
    key = repr((sorted(vars(full).items()), sched, prog, has_bias))
    if key in cache:
        return cast(ir.Function, cache[key])
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    ptr = ir.PointerType()
    refs = _refs(prog)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr] * 4 + [I64, I64] + [F32] * len(refs)),
                     f"guard.conv.rows.{geo.R}x{geo.S}.c{geo.C}k{geo.K}.{geo.H}x{geo.W}.{digest}")  # fmt: skip
    cache[key] = fn
    fn.linkage = "internal"
    fn.attributes.add("noinline")  # one copy for every task
    fn.attributes.add("nounwind")
    x, w, bias, y, r0, r1 = fn.args[:6]
    for a in (x, w, bias, y):  # as the task kernels' own arguments (a row task never aliases)
        a.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    epilogue = _epilogue(prog, dict(zip(refs, fn.args[6:], strict=True))) if prog else None
    DirectConv(full, sched, b, x, w, bias if has_bias else None, y, epilogue, (r0, r1)).emit()
    b.ret_void()
    return fn


def _program_parts(attrs: Mapping[str, Any], inputs: Sequence[Any]) -> tuple[list, bool]:
    """The epilogue program and whether it reads a tensor of more than one element."""
    prog = list(attrs.get("program", []))
    return prog, bool(tensor_reads(prog, inputs))


def _refs(prog: list) -> list[int]:
    return sorted({r for s in prog for r in s["args"] if isinstance(r, int)})


def _epilogue(prog: list, scalars: Mapping[int, ir.Value]) -> Any:
    """The program in registers on a vector of accumulators, each single-element operand
    it reads (``scalars``: input index -> its value) broadcast to the vector's lanes."""

    def run(bld: ir.IRBuilder, v: ir.Value) -> ir.Value:
        lanes = v.type.count if isinstance(v.type, ir.VectorType) else 1
        return run_program(bld, prog, v, lambda j: splat(bld, scalars[j], lanes))

    return run


class Conv(Emitter):
    ops = frozenset({"Conv", "FusedConv"})

    def decline(self, node: OpNode, g: GraphView) -> str | None:
        why = float32_only(node, g)
        if why:
            return why
        w = g.tensors[node.args[1]]
        if len(w.shape) != 4:
            return f"no emitter for {node.op} with {len(w.shape) - 2} spatial dims (2-D only)"
        if w.kind != "const":
            return f"no emitter for {node.op} with run-time weights"
        # Input 2 is the bias of a Conv, and of a FusedConv whose anchor had one; else it
        # is an epilogue operand (a residual), which may be computed at run time.
        has_bias = node.op == "Conv" or int(node.attrs["anchor_inputs"]) > 2
        bias = node.args[2] if has_bias and len(node.args) > 2 else None
        if bias and g.tensors[bias].kind != "const":
            return f"no emitter for {node.op} with a run-time bias"
        lay = node.attrs.get("layout", "NCHW")
        if lay not in ("NCHW", "NHWC") and not block_of(lay):
            return f"no emitter for {node.op} in layout {lay}"
        if node.op == "FusedConv":
            return program_decline(node.attrs["program"])
        return None

    def pack(
        self, op: str, attrs: Mapping[str, Any], index: int, value: np.ndarray,
        shapes: Sequence[tuple[int, ...] | None], vector_width: int,
    ) -> np.ndarray | None:  # fmt: skip
        if index != 1 or shapes[0] is None:
            return None
        return Geometry(attrs, shapes[0], value.shape, vector_width).pack(value)

    def emit(
        self, b: ir.IRBuilder, ins: list[ir.Value | None], outs: list[ir.Value], k: Kernel
    ) -> None:
        xo, wo = k.inputs[0], k.inputs[1]
        assert xo is not None and wo is not None  # w packed; its Operand keeps OIHW
        geo = Geometry(k.attrs, xo.shape, wo.shape, k.vector_width)
        # The tuning cache's schedule on a hit, else the default heuristic.
        self.emit_scheduled(b, ins, outs, k, geo, conv_schedule(geo))

    def emit_scheduled(
        self, b: ir.IRBuilder, ins: list[ir.Value | None], outs: list[ir.Value], k: Kernel,
        geo: Geometry, sched: ConvSchedule,
    ) -> None:  # fmt: skip
        """``emit`` with an explicit schedule (tests and benchmarks sweep the space)."""
        sched.validate(geo.L)
        if geo.block and geo.block % geo.L:
            raise InternalError(
                f"{k.op} in {geo.layout} emitted for {geo.L}-lane vectors: the layout pass "
                "and the code generator read different target tables"
            )
        prog, reads = _program_parts(k.attrs, k.inputs) if k.op == "FusedConv" else ([], False)
        has_bias = (
            len(ins) > 2
            and ins[2] is not None
            and (k.op == "Conv" or int(k.attrs["anchor_inputs"]) > 2)
        )
        # Single-element operands (a scalar scale and shift): loaded once, at the entry.
        scalars = {j: load(b, ins[j], 0) for j in _refs(prog)} if prog and not reads else {}
        epilogue = _epilogue(prog, scalars) if prog and not reads else None
        bias = ins[2] if has_bias else None
        if "rows" in k.attrs and not reads:  # a row task: the shared body over its rows
            fn = _row_body(b.module, geo, sched, prog, has_bias)
            null = ir.Constant(ir.PointerType(), None)
            rows = (i64(r) for r in geo.rows)
            b.call(fn, [ins[0], ins[1], bias or null, outs[0], *rows, *scalars.values()])
        else:
            DirectConv(geo, sched, b, ins[0], ins[1], bias, outs[0], epilogue).emit()
        if prog and reads:  # a pass over the output's rows this kernel wrote (a row task's band)
            out = k.outputs[0]
            r0, r1 = geo.rows
            axis = 1 if geo.layout == "NHWC" else 2  # the rows' axis: N H W C, N C H W (c)
            band = [*out.shape[:axis], r1 - r0, *out.shape[axis + 1 :]]
            refs = sorted({r for s in prog for r in s["args"] if isinstance(r, int)})
            full = bcast_strides(out.shape, out.shape)
            y = elem_ptr(b, outs[0], r0 * full[axis])
            operands = [(y, full)]
            for j in refs:
                o = k.inputs[j]
                assert o is not None and ins[j] is not None
                st = bcast_strides(o.shape, out.shape)
                operands.append((elem_ptr(b, ins[j], r0 * st[axis]), st))

            def compute(vals: list[ir.Value]) -> ir.Value:
                return run_program(b, prog, vals[0], lambda j: vals[1 + refs.index(j)])

            emit_pointwise(b, band, operands, y, k.vector_width, compute, out_strides=full)
