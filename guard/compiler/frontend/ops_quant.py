"""Converters for quantization: QuantizeLinear / DequantizeLinear (per tensor or per axis)
and the integer ops (MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv).

Every constant scale and zero point is checked here, where the node and tensor can be
named: a scale that is zero, negative, NaN or infinite, a zero point whose type is not the
quantized tensor's, and a per-axis scale or zero point whose length is not the axis' are
bad input (exit 2), never a silently wrong answer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from guard.compiler.frontend.context import Converter, ImportContext, np_dtype
from guard.compiler.frontend.ops_nn import conv_attrs
from guard.compiler.ir.core import dtype_name


def check_qparams(
    ctx: ImportContext,
    scale: str,
    zero_point: str,
    qtype: np.dtype | None,
    data: str | None = None,
    axis: int | None = None,
    block_size: int = 0,
) -> None:
    """Raise a ModelError naming the node and tensor when a constant scale or zero point
    cannot quantize anything: see the module docstring."""
    s = ctx.try_const(scale) if scale else None
    if s is not None:
        sf = np.asarray(s, np.float64)
        bad = ~np.isfinite(sf) | (sf <= 0)
        if np.any(bad):
            v = sf.reshape(-1)[int(np.argmax(bad.reshape(-1)))]
            raise ctx.error(
                f"scale {scale!r} holds {v:g}: a quantization scale must be finite and > 0",
                hint="Re-run the quantiser (a zero scale comes from a tensor that is constant "
                "in the calibration data).",
            )
    z = ctx.try_const(zero_point) if zero_point else None
    if zero_point and qtype is not None and ctx.type(zero_point).dtype != qtype:
        raise ctx.error(
            f"zero point {zero_point!r} is {ctx.type(zero_point).dtype}, but the quantized "
            f"tensor is {qtype}: the zero point must lie in (and have) the tensor's type",
            hint="Write the zero point in the quantized type.",
        )
    if data is None or axis is None or block_size:
        return
    dim = ctx.type(data).shape[axis] if ctx.type(data).shape else 1
    for name, arr in ((scale, s), (zero_point, z)):
        if arr is None or np.ndim(arr) == 0 or np.size(arr) == 1:
            continue
        if np.ndim(arr) != 1 or np.size(arr) != dim:
            raise ctx.error(
                f"per-axis {'scale' if name == scale else 'zero point'} {name!r} has shape "
                f"{list(np.shape(arr))}, but axis {axis} of {data!r} has {dim} elements",
                hint="Give one value per element along the axis (or a scalar).",
            )


def quantize(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    axis: int = 1,
    saturate: int = 1,
    block_size: int = 0,
    output_dtype: int = 0,
    precision: int = 0,
) -> None:
    r = len(ctx.type(ins[0]).shape)
    if len(ins) > 2 and ins[2]:
        to = ctx.type(ins[2]).dtype
    else:
        to = np_dtype(output_dtype, ctx.where()) if output_dtype else np.dtype(np.uint8)
    ax = axis % max(r, 1)
    attrs = {"axis": ax, "to": dtype_name(to), "block_size": block_size}
    zp = ins[2] if len(ins) > 2 else ""
    check_qparams(ctx, ins[1], zp, np.dtype(to), ins[0], ax, block_size)
    ctx.emit("QuantizeLinear", ins[:3], attrs, outs)


def dequantize(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    axis: int = 1,
    block_size: int = 0,
    output_dtype: int = 0,
) -> None:
    r = len(ctx.type(ins[0]).shape)
    attrs = {"axis": axis % max(r, 1), "block_size": block_size}
    zp = ins[2] if len(ins) > 2 else ""
    check_qparams(ctx, ins[1], zp, ctx.type(ins[0]).dtype, ins[0], attrs["axis"], block_size)
    ctx.emit("DequantizeLinear", ins[:3], attrs, outs)


def matmul_integer(ctx: ImportContext, ins: list[str], outs: list[str]) -> None:
    ctx.emit("MatMulInteger", list(ins), {}, outs)


def _check_qlinear(
    ctx: ImportContext, ins: list[str], groups: tuple[tuple[int, int, int | None], ...]
) -> None:
    """(scale index, tensor index or -1 for the output, per-axis axis or None) per operand;
    the zero point follows its scale."""
    for k, d, axis in groups:
        data = ins[d] if d >= 0 else ""
        zp = ins[k + 1] if k + 1 < len(ins) else ""
        qtype = ctx.type(data).dtype if data else (ctx.type(zp).dtype if zp else None)
        if axis is not None and data:
            axis = axis % max(len(ctx.type(data).shape), 1)
        check_qparams(ctx, ins[k], zp, qtype, data or None, axis)


def qlinear_matmul(ctx: ImportContext, ins: list[str], outs: list[str]) -> None:
    _check_qlinear(ctx, ins, ((1, 0, None), (4, 3, -1), (6, -1, None)))
    ctx.emit("QLinearMatMul", list(ins), {}, outs)


def _integer_conv(op: str, w_index: int) -> Converter:
    """ConvInteger (weights at input 1) and QLinearConv (weights at input 3)."""

    def conv(
        ctx: ImportContext,
        ins: list[str],
        outs: list[str],
        auto_pad: str = "NOTSET",
        dilations: Any = None,
        group: int = 1,
        kernel_shape: Any = None,
        pads: Any = None,
        strides: Any = None,
    ) -> None:
        attrs = conv_attrs(
            ctx, ins, w_index, auto_pad, dilations, group, kernel_shape, pads, strides
        )
        if op == "QLinearConv":
            _check_qlinear(ctx, ins, ((1, 0, None), (4, 3, 0), (6, -1, None)))
        ctx.emit(op, list(ins), attrs, outs)

    return conv


CONVERTERS: dict[str, dict[int, Converter]] = {
    "QuantizeLinear": {10: quantize}, "DequantizeLinear": {10: dequantize},
    "MatMulInteger": {10: matmul_integer}, "QLinearMatMul": {10: qlinear_matmul},
    "ConvInteger": {10: _integer_conv("ConvInteger", 1)},
    "QLinearConv": {10: _integer_conv("QLinearConv", 3)},
}  # fmt: skip
