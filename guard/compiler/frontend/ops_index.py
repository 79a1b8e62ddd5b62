"""Converters for index-driven ops: Trilu, OneHot, GatherND, Scatter/ScatterElements,
ScatterND, TopK and ReverseSequence (shape-like operands such as k and depth must be
constants; output types come from ONNX shape inference)."""

from __future__ import annotations

import numpy as np

from guard.compiler.frontend.context import Converter, ImportContext


def trilu(ctx: ImportContext, ins: list[str], outs: list[str], upper: int = 1) -> None:
    k = int(ctx.const_scalar(ins[1], "k")) if len(ins) > 1 and ins[1] else 0
    ctx.emit("Trilu", ins[:1], {"upper": upper, "k": k}, outs)


def one_hot(ctx: ImportContext, ins: list[str], outs: list[str], axis: int = -1) -> None:
    depth = int(ctx.const_scalar(ins[1], "depth"))
    r = len(ctx.type(ins[0]).shape) + 1
    ctx.emit("OneHot", [ins[0], "", ins[2]], {"depth": depth, "axis": axis % r}, outs)


def gather_nd(ctx: ImportContext, ins: list[str], outs: list[str], batch_dims: int = 0) -> None:
    ctx.emit("GatherND", ins[:2], {"batch_dims": batch_dims}, outs)


def scatter_elements(
    ctx: ImportContext, ins: list[str], outs: list[str], axis: int = 0, reduction: str = "none"
) -> None:
    r = len(ctx.type(ins[0]).shape)
    ctx.emit("ScatterElements", ins[:3], {"axis": axis % r, "reduction": reduction}, outs)


def scatter_nd(
    ctx: ImportContext, ins: list[str], outs: list[str], reduction: str = "none"
) -> None:
    ctx.emit("ScatterND", ins[:3], {"reduction": reduction}, outs)


def top_k(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    axis: int = -1,
    largest: int = 1,
    sorted: int = 1,
    k: int | None = None,
) -> None:  # noqa: A002
    kk = int(ctx.const_scalar(ins[1], "k")) if len(ins) > 1 and ins[1] else int(k or 0)
    r = len(ctx.type(ins[0]).shape)
    names = [o if o else ctx.fresh("topk_unused") for o in outs]
    if len(names) == 1:
        names.append(ctx.fresh("topk_idx"))
    for o in names:
        if o not in ctx.inferred or ctx.inferred[o][0] is None:
            x = ctx.type(ins[0])
            shape = list(x.shape)
            shape[axis % r] = kk
            ctx.inferred[o] = (tuple(shape), x.dtype if o == names[0] else np.dtype(np.int64))
    ctx.emit("TopK", ins[:1], {"k": kk, "axis": axis % r, "largest": largest}, names)


def reverse_sequence(
    ctx: ImportContext, ins: list[str], outs: list[str], batch_axis: int = 1, time_axis: int = 0
) -> None:
    ctx.emit("ReverseSequence", ins[:2], {"batch_axis": batch_axis, "time_axis": time_axis}, outs)


CONVERTERS: dict[str, dict[int, Converter]] = {
    "Trilu": {14: trilu}, "OneHot": {9: one_hot}, "GatherND": {11: gather_nd},
    "ScatterElements": {11: scatter_elements}, "Scatter": {9: scatter_elements},
    "ScatterND": {11: scatter_nd}, "TopK": {1: top_k}, "ReverseSequence": {10: reverse_sequence},
}  # fmt: skip
