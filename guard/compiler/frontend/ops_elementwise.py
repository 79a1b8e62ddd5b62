"""Converters for elementwise ops (unary, binary, variadic, Where, Cast, Clip, Dropout)."""

from __future__ import annotations

from typing import Any

import numpy as np

from guard.compiler.frontend.context import Converter, ImportContext, np_dtype
from guard.compiler.ir.core import Attrs, dtype_name

UNARY_NO_ATTRS = [
    "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "Erf", "Reciprocal",
    "Floor", "Ceil", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh",
    "Acosh", "Atanh", "Sign", "Round", "Not", "BitwiseNot", "Identity", "Softplus",
    "Softsign", "HardSwish", "Mish",
]  # fmt: skip

BINARY = [
    "Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater", "LessOrEqual",
    "GreaterOrEqual", "And", "Or", "Xor", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "PRelu",
]  # fmt: skip


def _unary(op: str) -> Converter:
    def conv(ctx: ImportContext, ins: list[str], outs: list[str]) -> None:
        ctx.emit(op, ins[:1], {}, outs)

    return conv


def _binary(op: str) -> Converter:
    def conv(ctx: ImportContext, ins: list[str], outs: list[str], **legacy: Any) -> None:
        b = ins[1]
        if legacy.get("broadcast") and legacy.get("axis") is not None:
            # Opset < 7: B's dims line up with A's starting at `axis`; pad B with trailing 1s.
            ra, vb = len(ctx.type(ins[0]).shape), ctx.type(ins[1])
            ax = legacy["axis"] % ra
            trailing = ra - ax - len(vb.shape)
            if trailing > 0:
                (b,) = ctx.emit("Reshape", [b], {"shape": list(vb.shape) + [1] * trailing})
        ctx.emit(op, [ins[0], b], {}, outs)

    return conv


def _variadic(op: str) -> Converter:
    def conv(ctx: ImportContext, ins: list[str], outs: list[str]) -> None:
        args = [i for i in ins if i]
        if len(args) == 1:
            ctx.emit("Identity", args, {}, outs)
            return
        binop = {"Sum": "Add", "Mean": "Add", "Max": "Max", "Min": "Min"}[op]
        acc = args[0]
        for k, x in enumerate(args[1:]):
            last = k == len(args) - 2 and op != "Mean"
            (acc,) = ctx.emit(binop, [acc, x], {}, outs if last else None)
        if op == "Mean":
            dt = ctx.type(acc).dtype
            n = ctx.add_const(ctx.fresh("mean_n"), np.asarray(len(args), dt))
            ctx.emit("Div", [acc, n], {}, outs)

    return conv


def prelu_v1(
    ctx: ImportContext, ins: list[str], outs: list[str], consumed_inputs: Any = None
) -> None:
    # Before opset 7 a 1-D slope of size C applies per channel (axis 1), not numpy-style.
    x, slope = ctx.type(ins[0]), ctx.type(ins[1])
    s = ins[1]
    if len(slope.shape) == 1 and len(x.shape) > 2 and slope.shape[0] == x.shape[1] != x.shape[-1]:
        (s,) = ctx.emit("Reshape", [s], {"shape": [slope.shape[0]] + [1] * (len(x.shape) - 2)})
    ctx.emit("PRelu", [ins[0], s], {}, outs)


def leaky_relu(ctx: ImportContext, ins: list[str], outs: list[str], alpha: float = 0.01) -> None:
    ctx.emit("LeakyRelu", ins[:1], {"alpha": alpha}, outs)


def elu(ctx: ImportContext, ins: list[str], outs: list[str], alpha: float = 1.0) -> None:
    ctx.emit("Elu", ins[:1], {"alpha": alpha}, outs)


def celu(ctx: ImportContext, ins: list[str], outs: list[str], alpha: float = 1.0) -> None:
    ctx.emit("Celu", ins[:1], {"alpha": alpha}, outs)


def selu(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    alpha: float = 1.67326319217681884765625,
    gamma: float = 1.05070102214813232421875,
) -> None:
    ctx.emit("Selu", ins[:1], {"alpha": alpha, "gamma": gamma}, outs)


def thresholded_relu(
    ctx: ImportContext, ins: list[str], outs: list[str], alpha: float = 1.0
) -> None:
    ctx.emit("ThresholdedRelu", ins[:1], {"alpha": alpha}, outs)


def hard_sigmoid(
    ctx: ImportContext, ins: list[str], outs: list[str], alpha: float = 0.2, beta: float = 0.5
) -> None:
    ctx.emit("HardSigmoid", ins[:1], {"alpha": alpha, "beta": beta}, outs)


def shrink(
    ctx: ImportContext, ins: list[str], outs: list[str], bias: float = 0.0, lambd: float = 0.5
) -> None:
    ctx.emit("Shrink", ins[:1], {"bias": bias, "lambd": lambd}, outs)


def gelu(ctx: ImportContext, ins: list[str], outs: list[str], approximate: str = "none") -> None:
    ctx.emit("Gelu", ins[:1], {"approximate": approximate}, outs)


def mod(ctx: ImportContext, ins: list[str], outs: list[str], fmod: int = 0) -> None:
    ctx.emit("Mod", ins[:2], {"fmod": fmod}, outs)


def bitshift(ctx: ImportContext, ins: list[str], outs: list[str], direction: str = "") -> None:
    ctx.emit("BitShift", ins[:2], {"direction": direction}, outs)


def where(ctx: ImportContext, ins: list[str], outs: list[str]) -> None:
    ctx.emit("Where", ins[:3], {}, outs)


def cast(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    to: int = 1,
    saturate: int = 1,
    round_mode: str = "up",
) -> None:
    dt = np_dtype(to, ctx.where())
    attrs: Attrs = {"to": dtype_name(dt)}
    if dtype_name(dt).startswith("f8"):
        attrs["saturate"] = saturate
    ctx.emit("Cast", ins[:1], attrs, outs)


def cast_like(
    ctx: ImportContext, ins: list[str], outs: list[str], saturate: int = 1, round_mode: str = "up"
) -> None:
    to = dtype_name(ctx.type(ins[1]).dtype)
    attrs: Attrs = {"to": to}
    if to.startswith("f8"):
        attrs["saturate"] = saturate
    ctx.emit("Cast", ins[:1], attrs, outs)


def clip_v1(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    min: float | None = None,
    max: float | None = None,
    consumed_inputs: Any = None,
) -> None:
    ctx.emit("Clip", ins[:1], {"min": min, "max": max}, outs)


def clip_v11(ctx: ImportContext, ins: list[str], outs: list[str]) -> None:
    bounds: dict[str, float | None] = {"min": None, "max": None}
    extra: list[str] = []
    for key, name in zip(("min", "max"), ins[1:3], strict=False):
        if not name:
            continue
        v = ctx.try_const(name)
        if v is None:
            extra = ins[1:3]
            break
        bounds[key] = v.item()
    if extra:
        ctx.emit("Clip", [ins[0], *extra], {}, outs)
    else:
        ctx.emit("Clip", ins[:1], bounds, outs)


def dropout(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    ratio: float = 0.5,
    seed: int = 0,
    is_test: int = 0,
    consumed_inputs: Any = None,
) -> None:
    # Inference: Dropout is the identity (ratio and training_mode are ignored unless training).
    if len(ins) > 2 and ins[2]:
        training = ctx.const(ins[2], "training_mode")
        if bool(np.asarray(training)):
            raise ctx.error(
                "Dropout in training mode is not compiled", hint="Export the model in eval mode."
            )
    ctx.emit("Identity", ins[:1], {}, outs[:1])
    if len(outs) > 1 and outs[1]:
        shape = list(ctx.type(ins[0]).shape)
        ctx.emit("Fill", [], {"shape": shape, "value": True, "dtype": "bool"}, outs[1:2])


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


def swish(ctx: ImportContext, ins: list[str], outs: list[str], alpha: float = 1.0) -> None:
    ctx.emit("Swish", ins[:1], {"alpha": alpha}, outs)


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


CONVERTERS: dict[str, dict[int, Converter]] = {
    **{op: {1: _unary(op)} for op in UNARY_NO_ATTRS},
    **{op: {1: _binary(op)} for op in BINARY},
    **{op: {1: _variadic(op)} for op in ("Sum", "Mean", "Max", "Min")},
    "PRelu": {1: prelu_v1, 7: _binary("PRelu")},
    "LeakyRelu": {1: leaky_relu},
    "Elu": {1: elu},
    "Celu": {12: celu},
    "Selu": {1: selu},
    "ThresholdedRelu": {10: thresholded_relu},
    "HardSigmoid": {1: hard_sigmoid},
    "Shrink": {9: shrink},
    "Gelu": {20: gelu},
    "Mod": {10: mod},
    "BitShift": {11: bitshift},
    "Where": {9: where},
    "Cast": {1: cast},
    "CastLike": {15: cast_like},
    "Clip": {1: clip_v1, 11: clip_v11},
    "Dropout": {1: dropout},
    "IsNaN": {9: is_nan},
    "IsInf": {10: is_inf},
    "Swish": {24: swish},
    "BitCast": {26: bit_cast},
}
