"""QuantizeLinear and DequantizeLinear, per tensor or per axis, as generated loops.

The arithmetic is the reference kernel's, step for step in float32, so results are
bit-identical to it (guard/compiler/reference/quant.py):

    DequantizeLinear:  y = (float(x) - float(zp)) * scale
    QuantizeLinear:    q = saturate(roundeven(x / scale) + float(zp))

The division stays a division (``x * (1/scale)`` rounds differently). Saturation clamps in
float before the conversion, so the conversion never sees a value outside the type; a NaN
becomes 0 (what numpy's cast of NaN gives on x86, which the reference inherits).
Per-axis scales and zero points are read with a stride along their axis (0 elsewhere),
as a broadcast operand of the pointwise loop.

DynamicQuantizeLinear (float32 -> u8, its scale and zero point) is two loops: the range
(NaN tracked apart, so a NaN anywhere makes the scale NaN as numpy's max does), then the
quantisation above with the computed scale; every step is the reference's float32 op.

Declines, with the reason: scales that are not float32, quantized types other than
u8/s8 (and s32 for DequantizeLinear, the bias), block quantisation. int4, int16 and
float8 (de)quantisation therefore run on the ``cpu`` partition, never approximated.
"""

from __future__ import annotations

from collections.abc import Sequence

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen import emit_typed as t
from guard.compiler.codegen.base import Emitter, Kernel, bcast_strides
from guard.compiler.codegen.irutil import F32, I1, elem_ptr, entry_alloca, intrinsic, loop
from guard.compiler.graph.view import GraphView, OpNode
from guard.compiler.ir.core import value_range

QUANTIZED = {"QuantizeLinear": ("uint8", "int8"), "DequantizeLinear": ("uint8", "int8", "int32")}


def quant_decline(op: str, dtypes: Sequence[str | None], block_size: int) -> str | None:
    """Why this (de)quantisation has no generated code; ``dtypes`` are x, scale, zp, y."""
    x, scale, zp, y = dtypes
    q = y if op == "QuantizeLinear" else x
    f = x if op == "QuantizeLinear" else y
    if block_size:
        return f"{op} with block quantisation (block_size={block_size}) runs on the cpu partition"
    if q not in QUANTIZED[op]:
        return (
            f"{op} to/from {q} runs on the cpu partition (generated code takes "
            f"{'/'.join(QUANTIZED[op])})"
        )
    if scale != "float32" or f != "float32":
        return f"{op} with a {scale} scale on {f} runs on the cpu partition (needs float32)"
    if zp is not None and zp != q:
        return f"{op}'s zero point is {zp}, the quantized tensor {q}"
    return None


def _axis_strides(shape: tuple[int, ...], out_shape: Sequence[int], axis: int) -> list[int]:
    """Strides of a scale/zero point (scalar or per ``axis``) read at ``out_shape``."""
    if int(np.prod(shape, dtype=np.int64)) <= 1:
        return [0] * len(out_shape)
    full = [1] * len(out_shape)
    full[axis] = int(np.prod(shape, dtype=np.int64))
    return bcast_strides(full, out_shape)


class Quant(Emitter):
    ops = frozenset({*QUANTIZED, "DynamicQuantizeLinear"})

    def decline(self, node: OpNode, g: GraphView) -> str | None:
        if node.op == "DynamicQuantizeLinear":
            dt = g.tensors[node.args[0]].dtype
            return None if dt == "float32" else f"no emitter for DynamicQuantizeLinear on {dt}"
        args = list(node.args) + [""] * (3 - len(node.args))
        dts = [g.tensors[a].dtype if a else None for a in args[:3]]
        return quant_decline(
            node.op, [*dts, g.tensors[node.outputs[0]].dtype], int(node.attrs.get("block_size", 0))
        )

    def emit(
        self, b: ir.IRBuilder, ins: list[ir.Value | None], outs: list[ir.Value], k: Kernel
    ) -> None:
        if k.op == "DynamicQuantizeLinear":
            assert ins[0] is not None and k.inputs[0] is not None
            _dynamic(b, ins[0], outs, int(np.prod(k.inputs[0].shape, dtype=np.int64)))
            return
        out = k.outputs[0]
        axis = int(k.attrs.get("axis", 1))
        x_op, s_op = k.inputs[0], k.inputs[1]
        assert x_op is not None and s_op is not None and ins[0] is not None and ins[1] is not None
        z_op = k.inputs[2] if len(k.inputs) > 2 else None
        z_ptr = ins[2] if len(ins) > 2 else None
        operands = [
            (ins[0], bcast_strides(x_op.shape, out.shape), np.dtype(x_op.dtype)),
            (ins[1], _axis_strides(s_op.shape, out.shape, axis), np.dtype(np.float32)),
        ]
        if z_op is not None and z_ptr is not None:
            operands.append(
                (z_ptr, _axis_strides(z_op.shape, out.shape, axis), np.dtype(z_op.dtype))
            )
        out_dt = np.dtype(out.dtype)
        f32 = np.dtype(np.float32)
        zero = ir.Constant(F32, 0.0)

        def dequantize(vals: list[t.TV]) -> t.TV:
            x = t.convert(b, vals[0], f32)
            if len(vals) > 2:
                x = b.fsub(x, t.convert(b, vals[2], f32))
            return b.fmul(x, vals[1][0]), f32

        lo, hi = (float(v) for v in value_range(out_dt))

        def quantize(vals: list[t.TV]) -> t.TV:
            q = intrinsic(b, "roundeven", F32, [b.fdiv(vals[0][0], vals[1][0])])
            if len(vals) > 2:
                q = b.fadd(q, t.convert(b, vals[2], f32))
            nan = b.fcmp_unordered("uno", q, q)
            q = intrinsic(
                b,
                "minnum",
                F32,
                [intrinsic(b, "maxnum", F32, [q, ir.Constant(F32, lo)]), ir.Constant(F32, hi)],
            )
            return b.select(nan, zero, q), f32

        compute = quantize if k.op == "QuantizeLinear" else dequantize
        t.emit_typed_pointwise(b, out.shape, operands, (outs[0], out_dt), compute)


def _clamp(b: ir.IRBuilder, q: ir.Value, lo: float, hi: float) -> ir.Value:
    return intrinsic(
        b,
        "minnum",
        F32,
        [intrinsic(b, "maxnum", F32, [q, ir.Constant(F32, lo)]), ir.Constant(F32, hi)],
    )


def _dynamic(b: ir.IRBuilder, x: ir.Value, outs: list[ir.Value], n: int) -> None:
    """outs: y (u8[n]), y_scale (f32 scalar), y_zero_point (u8 scalar)."""
    zero, u8 = ir.Constant(F32, 0.0), ir.IntType(8)
    hi_slot, lo_slot, nan_slot = entry_alloca(b, F32), entry_alloca(b, F32), entry_alloca(b, I1)
    b.store(zero, hi_slot)
    b.store(zero, lo_slot)
    b.store(ir.Constant(I1, 0), nan_slot)
    with loop(b, 0, n, 1, "r") as i:
        v = b.load(elem_ptr(b, x, i, F32), typ=F32)
        hi, lo = b.load(hi_slot, typ=F32), b.load(lo_slot, typ=F32)
        b.store(b.select(b.fcmp_ordered(">", v, hi), v, hi), hi_slot)
        b.store(b.select(b.fcmp_ordered("<", v, lo), v, lo), lo_slot)
        b.store(b.or_(b.load(nan_slot, typ=I1), b.fcmp_unordered("uno", v, v)), nan_slot)
    nan = ir.Constant(F32, float("nan"))
    seen = b.load(nan_slot, typ=I1)
    hi = b.select(seen, nan, b.load(hi_slot, typ=F32))
    lo = b.select(seen, nan, b.load(lo_slot, typ=F32))
    span = b.select(b.fcmp_ordered("==", hi, lo), ir.Constant(F32, 1.0), b.fsub(hi, lo))
    scale = b.fdiv(span, ir.Constant(F32, 255.0))
    zp = intrinsic(b, "roundeven", F32, [_clamp(b, b.fsub(zero, b.fdiv(lo, scale)), 0.0, 255.0)])
    b.store(scale, outs[1])
    b.store(b.fptoui(zp, u8), elem_ptr(b, outs[2], 0, u8))
    with loop(b, 0, n, 1, "q") as i:
        v = b.load(elem_ptr(b, x, i, F32), typ=F32)
        q = b.fadd(intrinsic(b, "roundeven", F32, [b.fdiv(v, scale)]), zp)
        q = _clamp(b, q, 0.0, 255.0)
        q = b.select(b.fcmp_unordered("uno", q, q), zero, q)
        b.store(b.fptoui(q, u8), elem_ptr(b, outs[0], i, u8))
