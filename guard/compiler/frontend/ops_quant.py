"""Converters for quantization: QuantizeLinear / DequantizeLinear (per tensor or per axis)
and the integer ops (MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv)."""

from __future__ import annotations

from typing import Any

import numpy as np

from guard.compiler.frontend.context import Converter, ImportContext, np_dtype
from guard.compiler.frontend.ops_nn import conv_attrs
from guard.compiler.ir.core import dtype_name


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
    attrs = {"axis": axis % max(r, 1), "to": dtype_name(to), "block_size": block_size}
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
    ctx.emit("DequantizeLinear", ins[:3], attrs, outs)


def matmul_integer(ctx: ImportContext, ins: list[str], outs: list[str]) -> None:
    ctx.emit("MatMulInteger", list(ins), {}, outs)


def qlinear_matmul(ctx: ImportContext, ins: list[str], outs: list[str]) -> None:
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
        ctx.emit(op, list(ins), attrs, outs)

    return conv


CONVERTERS: dict[str, dict[int, Converter]] = {
    "QuantizeLinear": {10: quantize}, "DequantizeLinear": {10: dequantize},
    "MatMulInteger": {10: matmul_integer}, "QLinearMatMul": {10: qlinear_matmul},
    "ConvInteger": {10: _integer_conv("ConvInteger", 1)},
    "QLinearConv": {10: _integer_conv("QLinearConv", 3)},
}  # fmt: skip
