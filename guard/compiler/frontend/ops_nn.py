"""Converters for NN ops: Conv and ConvTranspose, pooling, Gemm/MatMul, the softmax family
and the losses built on it (normalizations are in ops_norm)."""

from __future__ import annotations

import numpy as np

from guard.compiler.frontend.context import Converter, ImportContext
from guard.compiler.ir.core import Attrs


def _resolve_pads(
    ctx: ImportContext,
    in_sp: tuple[int, ...],
    ks: list[int],
    strides: list[int],
    dil: list[int],
    auto_pad: str,
    pads: list[int] | None,
    ceil_mode: int = 0,
) -> list[int]:
    k = len(ks)
    if auto_pad in ("NOTSET", ""):
        return list(pads) if pads else [0] * (2 * k)
    if auto_pad == "VALID":
        return [0] * (2 * k)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for i in range(k):
            out = -(-in_sp[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + dil[i] * (ks[i] - 1) + 1 - in_sp[i])
            small, big = total // 2, total - total // 2
            if auto_pad == "SAME_UPPER":
                begin.append(small)
                end.append(big)
            else:
                begin.append(big)
                end.append(small)
        return begin + end
    raise ctx.error(
        f"unknown auto_pad {auto_pad!r}", hint="Use NOTSET, SAME_UPPER, SAME_LOWER or VALID."
    )


def conv_attrs(
    ctx: ImportContext,
    ins: list[str],
    w_index: int,
    auto_pad: str,
    dilations: list[int] | None,
    group: int,
    kernel_shape: list[int] | None,
    pads: list[int] | None,
    strides: list[int] | None,
) -> Attrs:
    """The IR attributes of a Conv-like op (Conv, ConvInteger, QLinearConv): explicit pads.

    ``w_index`` is where the weights sit in ``ins`` (1 for Conv, 3 for QLinearConv); the
    kernel shape defaults to theirs.
    """
    x, w = ctx.type(ins[0]), ctx.type(ins[w_index])
    k = len(x.shape) - 2
    ks = list(kernel_shape or w.shape[2:])
    st = list(strides or [1] * k)
    dil = list(dilations or [1] * k)
    p = _resolve_pads(ctx, x.shape[2:], ks, st, dil, auto_pad, pads)
    return {"group": group, "pads": p, "strides": st, "dilations": dil}


def conv(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> None:
    attrs = conv_attrs(ctx, ins, 1, auto_pad, dilations, group, kernel_shape, pads, strides)
    if len(ctx.type(ins[0]).shape) == 3:
        _conv_1d(ctx, ins, outs, attrs)
        return
    ctx.emit("Conv", [i for i in ins[:3] if i], attrs, outs)


def _conv_1d(ctx: ImportContext, ins: list[str], outs: list[str], attrs: Attrs) -> None:
    """A 1-D convolution as a 2-D one over a single row, between two Reshapes (views):
    the code generator, the layout pass and the thread split then treat it as any other
    convolution."""
    n, c, w = ctx.type(ins[0]).shape
    x4 = ctx.emit("Reshape", [ins[0]], {"shape": [n, c, 1, w]})[0]
    wt = ctx.type(ins[1])
    shape4 = [wt.shape[0], wt.shape[1], 1, wt.shape[2]]
    data = ctx.g.const(ins[1])
    if data is not None:
        w4 = ctx.add_const(ctx.fresh(f"{ins[1]}_2d"), np.asarray(data).reshape(shape4))
    else:
        w4 = ctx.emit("Reshape", [ins[1]], {"shape": shape4})[0]
    (p0, p1), (s,), (d,) = attrs["pads"], attrs["strides"], attrs["dilations"]
    attrs2 = {"group": attrs["group"], "pads": [0, p0, 0, p1], "strides": [1, s],
              "dilations": [1, d]}  # fmt: skip
    y4 = ctx.emit("Conv", [x4, w4, *[i for i in ins[2:3] if i]], attrs2)[0]
    yshape = ctx.type(y4).shape
    ctx.emit("Reshape", [y4], {"shape": [yshape[0], yshape[1], yshape[3]]}, outs)


def _pool(op: str) -> Converter:
    def conv_pool(
        ctx: ImportContext,
        ins: list[str],
        outs: list[str],
        auto_pad: str = "NOTSET",
        ceil_mode: int = 0,
        count_include_pad: int = 0,
        dilations: list[int] | None = None,
        kernel_shape: list[int] | None = None,
        pads: list[int] | None = None,
        storage_order: int = 0,
        strides: list[int] | None = None,
        p: int = 2,
    ) -> None:
        x = ctx.type(ins[0])
        assert kernel_shape is not None
        k = len(kernel_shape)
        strides = list(strides or [1] * k)
        dil = list(dilations or [1] * k)
        pp = _resolve_pads(ctx, x.shape[2:], list(kernel_shape), strides, dil, auto_pad, pads)
        attrs: Attrs = {
            "kernel_shape": list(kernel_shape),
            "pads": pp,
            "strides": strides,
            "dilations": dil,
            "ceil_mode": ceil_mode,
        }
        if op == "AveragePool":
            attrs["count_include_pad"] = count_include_pad
        if op == "LpPool":
            attrs["p"] = p
        if len(outs) > 1 and outs[1]:
            raise ctx.error(
                "MaxPool's Indices output is not supported",
                hint="Export without the indices output.",
            )
        ctx.emit(op, ins[:1], attrs, outs[:1])

    return conv_pool


def global_pool(op: str) -> Converter:
    def conv_gp(ctx: ImportContext, ins: list[str], outs: list[str]) -> None:
        ctx.emit(op, ins[:1], {}, outs)

    return conv_gp


def gemm(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    alpha: float = 1.0,
    beta: float = 1.0,
    transA: int = 0,
    transB: int = 0,
    broadcast: int = 0,
) -> None:  # noqa: N803
    args = [i for i in ins[:3] if i]
    ctx.emit("Gemm", args, {"alpha": alpha, "beta": beta, "transA": transA, "transB": transB}, outs)


def matmul(ctx: ImportContext, ins: list[str], outs: list[str]) -> None:
    ctx.emit("MatMul", ins[:2], {}, outs)


def _softmax(op: str, new_semantics: bool) -> Converter:
    def conv_sm(
        ctx: ImportContext, ins: list[str], outs: list[str], axis: int | None = None
    ) -> None:
        x = ctx.type(ins[0])
        r = len(x.shape)
        if new_semantics:
            ax = -1 if axis is None else axis
            ctx.emit(op, ins[:1], {"axis": ax % r if r else 0}, outs)
            return
        ax = (1 if axis is None else axis) % max(r, 1)
        if ax == r - 1:
            ctx.emit(op, ins[:1], {"axis": ax}, outs)
            return
        # Opset < 13 coerces to 2-D at `axis`: flatten, softmax over the last dim, restore.
        rows = int(np.prod(x.shape[:ax], dtype=np.int64))
        (flat,) = ctx.emit(
            "Reshape", ins[:1], {"shape": [rows, int(np.prod(x.shape[ax:], dtype=np.int64))]}
        )
        (y,) = ctx.emit(op, [flat], {"axis": 1})
        ctx.emit("Reshape", [y], {"shape": list(x.shape)}, outs)

    return conv_sm


def nll_loss(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    ignore_index: int | None = None,
    reduction: str = "mean",
) -> None:
    ctx.emit(
        "NegativeLogLikelihoodLoss",
        [i for i in ins[:3] if i],
        {"ignore_index": ignore_index, "reduction": reduction},
        outs,
    )


def softmax_ce_loss(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    ignore_index: int | None = None,
    reduction: str = "mean",
) -> None:
    # loss = NLL(log_softmax(scores, axis=1), labels, weights)
    log_prob = outs[1:2] if len(outs) > 1 and outs[1] else None
    (lp,) = ctx.emit("LogSoftmax", ins[:1], {"axis": 1}, log_prob)
    ctx.emit(
        "NegativeLogLikelihoodLoss",
        [lp, *[i for i in ins[1:3] if i]],
        {"ignore_index": ignore_index, "reduction": reduction},
        outs[:1],
    )


def conv_transpose(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    output_padding: list[int] | None = None,
    output_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> None:
    x, w = ctx.type(ins[0]), ctx.type(ins[1])
    k = len(x.shape) - 2
    ks = list(kernel_shape or w.shape[2:])
    s = list(strides or [1] * k)
    d = list(dilations or [1] * k)
    op = list(output_padding or [0] * k)
    p = list(pads or [0] * (2 * k))
    if output_shape or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = (
            list(output_shape)[-k:] if output_shape else [x.shape[2 + i] * s[i] for i in range(k)]
        )
        p = [0] * (2 * k)
        for i in range(k):
            total = s[i] * (x.shape[2 + i] - 1) + op[i] + (ks[i] - 1) * d[i] + 1 - target[i]
            half = total // 2
            if auto_pad == "SAME_UPPER":
                p[i], p[i + k] = half, total - half
            else:
                p[i], p[i + k] = total - half, half
    elif auto_pad == "VALID":
        p = [0] * (2 * k)
    attrs = {"group": group, "strides": s, "dilations": d, "output_padding": op, "pads": p}
    out = [ctx.type(ins[0]).shape[0], w.shape[1] * group] + [
        s[i] * (x.shape[2 + i] - 1) + op[i] + (ks[i] - 1) * d[i] + 1 - p[i] - p[i + k]
        for i in range(k)
    ]
    ctx.inferred[outs[0]] = (tuple(out), x.dtype)
    ctx.emit("ConvTranspose", [i for i in ins[:3] if i], attrs, outs)


CONVERTERS: dict[str, dict[int, Converter]] = {
    "Conv": {1: conv},
    "MaxPool": {1: _pool("MaxPool")},
    "AveragePool": {1: _pool("AveragePool")},
    "LpPool": {2: _pool("LpPool")},
    "GlobalAveragePool": {1: global_pool("GlobalAveragePool")},
    "GlobalMaxPool": {1: global_pool("GlobalMaxPool")},
    "Gemm": {1: gemm},
    "MatMul": {1: matmul},
    "Softmax": {1: _softmax("Softmax", False), 13: _softmax("Softmax", True)},
    "LogSoftmax": {1: _softmax("LogSoftmax", False), 13: _softmax("LogSoftmax", True)},
    "Hardmax": {1: _softmax("Hardmax", False), 13: _softmax("Hardmax", True)},
    "NegativeLogLikelihoodLoss": {12: nll_loss},
    "SoftmaxCrossEntropyLoss": {12: softmax_ce_loss},
    "ConvTranspose": {1: conv_transpose},
}
