"""Converters for less common ops (see reference/extra.py); their output types come from
ONNX shape inference, shape-like operands (k, depth, axes) must be constants."""

from __future__ import annotations

from typing import Any

import numpy as np

from guard.compiler.frontend.context import ImportContext, np_dtype
from guard.compiler.frontend.ops_reduce import cumulative
from guard.compiler.ir import dtype_name


def trilu(ctx: ImportContext, ins: list[str], outs: list[str], upper: int = 1) -> None:
    k = int(ctx.const_scalar(ins[1], "k")) if len(ins) > 1 and ins[1] else 0
    ctx.emit("Trilu", ins[:1], {"upper": upper, "k": k}, outs)


def is_nan(ctx: ImportContext, ins: list[str], outs: list[str]) -> None:
    ctx.emit("IsNaN", ins[:1], {}, outs)


def is_inf(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    detect_negative: int = 1,
    detect_positive: int = 1,
) -> None:
    ctx.emit(
        "IsInf",
        ins[:1],
        {"detect_negative": detect_negative, "detect_positive": detect_positive},
        outs,
    )


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


def lp_norm(
    ctx: ImportContext, ins: list[str], outs: list[str], axis: int = -1, p: int = 2
) -> None:
    r = len(ctx.type(ins[0]).shape)
    ctx.emit("LpNormalization", ins[:1], {"axis": axis % r, "p": p}, outs)


def rms_norm(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    axis: int = -1,
    epsilon: float = 1e-5,
    stash_type: int = 1,
) -> None:
    r = len(ctx.type(ins[0]).shape)
    ctx.emit("RMSNormalization", ins[:2], {"axis": axis % r, "epsilon": epsilon}, outs)


def group_norm(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    epsilon: float = 1e-5,
    num_groups: int = 1,
    stash_type: int = 1,
) -> None:
    ctx.emit("GroupNormalization", ins[:3], {"epsilon": epsilon, "num_groups": num_groups}, outs)


def mvn(ctx: ImportContext, ins: list[str], outs: list[str], axes: list[int] | None = None) -> None:
    r = len(ctx.type(ins[0]).shape)
    ctx.emit(
        "MeanVarianceNormalization", ins[:1], {"axes": [a % r for a in (axes or [0, 2, 3])]}, outs
    )


def einsum(ctx: ImportContext, ins: list[str], outs: list[str], equation: str = "") -> None:
    ctx.emit("Einsum", ins, {"equation": equation.replace(" ", "")}, outs)


def det(ctx: ImportContext, ins: list[str], outs: list[str]) -> None:
    ctx.emit("Det", ins[:1], {}, outs)


def eye_like(
    ctx: ImportContext, ins: list[str], outs: list[str], dtype: int | None = None, k: int = 0
) -> None:
    x = ctx.type(ins[0])
    dt = np_dtype(dtype, ctx.where()) if dtype is not None else x.dtype
    ctx.add_const(outs[0], np.eye(x.shape[0], x.shape[1], k=k, dtype=dt))


CONVERTERS: dict[str, dict[int, Any]] = {
    "Trilu": {14: trilu}, "IsNaN": {9: is_nan}, "IsInf": {10: is_inf}, "OneHot": {9: one_hot},
    "GatherND": {11: gather_nd}, "ScatterElements": {11: scatter_elements},
    "Scatter": {9: scatter_elements}, "ScatterND": {11: scatter_nd}, "TopK": {1: top_k},
    "CumProd": {26: cumulative("CumProd")},
    "LpNormalization": {1: lp_norm}, "RMSNormalization": {23: rms_norm},
    "GroupNormalization": {18: group_norm}, "MeanVarianceNormalization": {9: mvn},
    "Einsum": {12: einsum},
    "Det": {11: det}, "EyeLike": {9: eye_like},
}  # fmt: skip


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


def _window(kind: str) -> Any:
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


def swish(ctx: ImportContext, ins: list[str], outs: list[str], alpha: float = 1.0) -> None:
    ctx.emit("Swish", ins[:1], {"alpha": alpha}, outs)


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


CONVERTERS.update({
    "NegativeLogLikelihoodLoss": {12: nll_loss}, "SoftmaxCrossEntropyLoss": {12: softmax_ce_loss},
    "HannWindow": {17: _window("hann")}, "HammingWindow": {17: _window("hamming")},
    "BlackmanWindow": {17: _window("blackman")}, "Swish": {24: swish},
    "ConvTranspose": {1: conv_transpose},
})  # fmt: skip


def bit_cast(ctx: ImportContext, ins: list[str], outs: list[str], to: int = 1) -> None:
    x = ctx.type(ins[0])
    dt = np_dtype(to, ctx.where())
    if dt.itemsize != x.dtype.itemsize:
        raise ctx.error(
            f"BitCast between {x.dtype} and {dt} changes the element size",
            hint="Only same-size bit casts are supported.",
        )
    ctx.inferred[outs[0]] = (x.shape, dt)
    ctx.emit("BitCast", ins[:1], {"to": dtype_name(dt)}, outs)


CONVERTERS["BitCast"] = {26: bit_cast}


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


CONVERTERS["DFT"] = {17: dft_v17, 20: dft_v20}


def reverse_sequence(
    ctx: ImportContext, ins: list[str], outs: list[str], batch_axis: int = 1, time_axis: int = 0
) -> None:
    ctx.emit("ReverseSequence", ins[:2], {"batch_axis": batch_axis, "time_axis": time_axis}, outs)


CONVERTERS["ReverseSequence"] = {10: reverse_sequence}
