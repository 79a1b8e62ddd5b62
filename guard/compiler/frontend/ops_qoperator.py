"""Converters for onnxruntime's QOperator contrib ops (domain ``com.microsoft``) and
ONNX's DynamicQuantizeLinear.

Each contrib op is defined by onnxruntime as "dequantize the inputs, compute in float,
quantize the result", and is imported as exactly that, ``DequantizeLinear`` -> the float
op -> ``QuantizeLinear``, so the oracle is the composition of reference kernels and every
piece has generated code:

    QLinearAdd / QLinearMul    Q(DQ(a) + DQ(b)) / Q(DQ(a) * DQ(b)), broadcasting
    QLinearConcat              Q(Concat(DQ(x_0), DQ(x_1), ...))
    QLinearGlobalAveragePool   Q(GlobalAveragePool(DQ(x))), NHWC when channels_last=1
    QLinearSigmoid             Q(Sigmoid(DQ(x)))
    QLinearLeakyRelu           Q(LeakyRelu(DQ(x), alpha))

A Concat or data movement whose scales agree is then run on int8 by fold_qdq. Hazard:
onnxruntime's own kernels approximate the float step with fixed-point or float lookup
tables, so they may differ from this composition by one quantization step (the whole
model tests report that deviation beside onnxruntime's own optimised/unoptimised one).

DynamicQuantizeLinear is its own IR op (three outputs: the u8 tensor, its scale, its zero
point), with a reference kernel and generated code.
"""

from __future__ import annotations

from typing import Any

from guard.compiler.frontend.context import Converter, ImportContext
from guard.compiler.frontend.ops_quant import check_qparams
from guard.compiler.ir.core import dtype_name

DOMAIN = "com.microsoft"


def _dq(ctx: ImportContext, x: str, scale: str, zp: str) -> str:
    check_qparams(ctx, scale, zp, ctx.type(x).dtype, x, None)
    ins = [x, scale, zp] if zp else [x, scale]
    (out,) = ctx.emit("DequantizeLinear", ins, {"axis": 1, "block_size": 0})
    return out


def _q(ctx: ImportContext, y: str, scale: str, zp: str, like: str, outs: list[str]) -> None:
    """Quantize ``y`` to the type of the zero point, or of ``like`` (onnxruntime's T) when
    it is omitted."""
    to = ctx.type(zp).dtype if zp else ctx.type(like).dtype
    check_qparams(ctx, scale, zp, to)
    ins = [y, scale, zp] if zp else [y, scale]
    ctx.emit("QuantizeLinear", ins, {"axis": 1, "to": dtype_name(to), "block_size": 0}, outs)


def _arg(ins: list[str], i: int) -> str:
    return ins[i] if len(ins) > i else ""


def _binary(op: str) -> Converter:
    def convert(ctx: ImportContext, ins: list[str], outs: list[str]) -> None:
        a = _dq(ctx, ins[0], ins[1], _arg(ins, 2))
        b = _dq(ctx, ins[3], ins[4], _arg(ins, 5))
        (y,) = ctx.emit(op, [a, b])
        _q(ctx, y, ins[6], _arg(ins, 7), ins[0], outs)

    return convert


def _unary(op: str, **defaults: Any) -> Converter:
    def convert(ctx: ImportContext, ins: list[str], outs: list[str], **attrs: Any) -> None:
        unknown = set(attrs) - set(defaults)
        if unknown:
            raise ctx.error(f"{op}: unknown attribute(s) {sorted(unknown)}")
        x = _dq(ctx, ins[0], ins[1], _arg(ins, 2))
        (y,) = ctx.emit(op, [x], {**defaults, **attrs})
        _q(ctx, y, ins[3], _arg(ins, 4), ins[0], outs)

    return convert


def qlinear_concat(ctx: ImportContext, ins: list[str], outs: list[str], axis: int = 1) -> None:
    """Inputs: Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input."""
    if (len(ins) - 2) % 3 or len(ins) < 5:
        raise ctx.error(
            f"QLinearConcat takes Y_scale, Y_zero_point and (X, scale, zero point) triples; "
            f"got {len(ins)} inputs"
        )
    xs = [_dq(ctx, ins[k], ins[k + 1], ins[k + 2]) for k in range(2, len(ins), 3)]
    r = len(ctx.type(xs[0]).shape)
    (y,) = ctx.emit("Concat", xs, {"axis": axis % r})
    _q(ctx, y, ins[0], ins[1], ins[2], outs)


def qlinear_global_average_pool(
    ctx: ImportContext, ins: list[str], outs: list[str], channels_last: int = 0
) -> None:
    x = _dq(ctx, ins[0], ins[1], _arg(ins, 2))
    r = len(ctx.type(x).shape)
    if channels_last:  # NHWC: pool over the middle axes, as NCHW between two transposes
        (x,) = ctx.emit("Transpose", [x], {"perm": [0, r - 1, *range(1, r - 1)]})
    (y,) = ctx.emit("GlobalAveragePool", [x])
    if channels_last:
        (y,) = ctx.emit("Transpose", [y], {"perm": [0, *range(2, r), 1]})
    _q(ctx, y, ins[3], _arg(ins, 4), ins[0], outs)


def dynamic_quantize_linear(ctx: ImportContext, ins: list[str], outs: list[str]) -> None:
    if ctx.type(ins[0]).dtype.name != "float32":
        raise ctx.error(
            f"DynamicQuantizeLinear takes float32 (got {ctx.type(ins[0]).dtype})",
            hint="Cast the input to float32 at export.",
        )
    ctx.emit("DynamicQuantizeLinear", ins[:1], {}, outs)


CONTRIB: dict[str, Converter] = {
    "QLinearAdd": _binary("Add"),
    "QLinearMul": _binary("Mul"),
    "QLinearConcat": qlinear_concat,
    "QLinearGlobalAveragePool": qlinear_global_average_pool,
    "QLinearSigmoid": _unary("Sigmoid"),
    "QLinearLeakyRelu": _unary("LeakyRelu", alpha=0.01),
}

CONVERTERS: dict[str, dict[int, Converter]] = {
    "DynamicQuantizeLinear": {11: dynamic_quantize_linear},
}
