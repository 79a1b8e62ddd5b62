"""Converters for reductions, ArgMax/ArgMin and CumSum/CumProd: axes (attribute or, from
opset 18 and ReduceSum-13, a constant input) normalised and sorted; empty axes reduce
everything unless ``noop_with_empty_axes``."""

from __future__ import annotations

from guard.compiler.frontend.context import Converter, ImportContext
from guard.compiler.ir.shapes import REDUCE

REDUCE_AXES_INPUT_SINCE = {"ReduceSum": 13}


def _reduce(op: str, axes_as_input_since: int) -> Converter:
    def conv(
        ctx: ImportContext,
        ins: list[str],
        outs: list[str],
        axes: list[int] | None = None,
        keepdims: int = 1,
        noop_with_empty_axes: int = 0,
    ) -> None:
        x = ctx.type(ins[0])
        r = len(x.shape)
        if ctx.opset >= axes_as_input_since and len(ins) > 1 and ins[1]:
            axes = ctx.const_ints(ins[1], "axes")
        if not axes:
            if noop_with_empty_axes:
                ctx.emit("Identity", ins[:1], {}, outs)
                return
            axes = list(range(r))
        ctx.emit(op, ins[:1], {"axes": sorted(a % r for a in axes), "keepdims": keepdims}, outs)

    return conv


def _arg(op: str) -> Converter:
    def conv(
        ctx: ImportContext,
        ins: list[str],
        outs: list[str],
        axis: int = 0,
        keepdims: int = 1,
        select_last_index: int = 0,
    ) -> None:
        r = len(ctx.type(ins[0]).shape)
        ctx.emit(
            op,
            ins[:1],
            {"axes": [axis % r], "keepdims": keepdims, "select_last_index": select_last_index},
            outs,
        )

    return conv


def cumulative(op: str) -> Converter:
    """CumSum and CumProd: the axis is a constant input."""

    def conv(
        ctx: ImportContext, ins: list[str], outs: list[str], exclusive: int = 0, reverse: int = 0
    ) -> None:
        r = len(ctx.type(ins[0]).shape)
        ax = int(ctx.const_scalar(ins[1], "axis")) % r
        ctx.emit(op, ins[:1], {"axis": ax, "exclusive": exclusive, "reverse": reverse}, outs)

    return conv


CONVERTERS: dict[str, dict[int, Converter]] = {
    **{op: {1: _reduce(op, REDUCE_AXES_INPUT_SINCE.get(op, 18))} for op in REDUCE},
    "ArgMax": {1: _arg("ArgMax")},
    "ArgMin": {1: _arg("ArgMin")},
    "CumSum": {11: cumulative("CumSum")},
    "CumProd": {26: cumulative("CumProd")},
}
