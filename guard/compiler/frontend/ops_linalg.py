"""Converters for linear algebra and signal processing: Einsum, Det, DFT, and the
Hann/Hamming/Blackman windows (folded to constants: their size must be a constant)."""

from __future__ import annotations

import numpy as np

from guard.compiler.frontend.context import Converter, ImportContext, np_dtype


def einsum(ctx: ImportContext, ins: list[str], outs: list[str], equation: str = "") -> None:
    ctx.emit("Einsum", ins, {"equation": equation.replace(" ", "")}, outs)


def det(ctx: ImportContext, ins: list[str], outs: list[str]) -> None:
    ctx.emit("Det", ins[:1], {}, outs)


def _dft(
    ctx: ImportContext, ins: list[str], outs: list[str], axis: int, inverse: int, onesided: int
) -> None:
    x = ctx.type(ins[0])
    r = len(x.shape)
    ax = axis + r - 1 if axis < 0 else axis  # negative axes count the signal dims only
    length = int(ctx.const_scalar(ins[1], "dft_length")) if len(ins) > 1 and ins[1] else None
    shape = list(x.shape[:-1]) + [2]
    out_length = None
    if inverse and onesided:  # one-sided spectrum in, real signal out
        out_length = length or 2 * (x.shape[ax] - 1)
        shape[ax], shape[-1] = out_length, 1
    else:
        n = length or x.shape[ax]
        shape[ax] = n // 2 + 1 if onesided else n
    ctx.inferred[outs[0]] = (tuple(shape), x.dtype)
    attrs = {
        "axis": ax,
        "inverse": inverse,
        "onesided": onesided,
        "length": length,
        "out_length": out_length,
    }
    ctx.emit("DFT", ins[:1], attrs, outs)


def dft_v17(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    axis: int = 1,
    inverse: int = 0,
    onesided: int = 0,
) -> None:
    _dft(ctx, ins, outs, axis, inverse, onesided)


def dft_v20(
    ctx: ImportContext, ins: list[str], outs: list[str], inverse: int = 0, onesided: int = 0
) -> None:
    axis = int(ctx.const_scalar(ins[2], "axis")) if len(ins) > 2 and ins[2] else -2
    _dft(ctx, ins, outs, axis, inverse, onesided)


def _window(kind: str) -> Converter:
    def conv(
        ctx: ImportContext,
        ins: list[str],
        outs: list[str],
        periodic: int = 1,
        output_datatype: int = 1,
    ) -> None:
        size = int(ctx.const_scalar(ins[0], "size"))
        denom = size if periodic else size - 1
        t = 2 * np.pi * np.arange(size) / max(denom, 1)
        if kind == "hann":
            w = 0.5 - 0.5 * np.cos(t)
        elif kind == "hamming":
            w = 25 / 46 - 21 / 46 * np.cos(t)
        else:
            w = 0.42 - 0.5 * np.cos(t) + 0.08 * np.cos(2 * t)
        ctx.add_const(outs[0], w.astype(np_dtype(output_datatype, ctx.where())))

    return conv


CONVERTERS: dict[str, dict[int, Converter]] = {
    "Einsum": {12: einsum}, "Det": {11: det}, "DFT": {17: dft_v17, 20: dft_v20},
    "HannWindow": {17: _window("hann")}, "HammingWindow": {17: _window("hamming")},
    "BlackmanWindow": {17: _window("blackman")},
}  # fmt: skip
