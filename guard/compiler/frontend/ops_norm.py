"""Converters for normalizations: BatchNormalization, InstanceNormalization, LRN,
LayerNormalization (with its training outputs as plain ops), LpNormalization,
RMSNormalization, GroupNormalization and MeanVarianceNormalization."""

from __future__ import annotations

from typing import Any

import numpy as np

from guard.compiler.frontend.context import Converter, ImportContext


def batch_norm(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    epsilon: float = 1e-5,
    momentum: float = 0.9,
    spatial: int = 1,
    training_mode: int = 0,
    is_test: int = 0,
    consumed_inputs: Any = None,
) -> None:
    if training_mode or any(o for o in outs[1:]):
        raise ctx.error(
            "BatchNormalization in training mode is not compiled",
            hint="Export the model in eval mode.",
        )
    ctx.emit("BatchNormalization", ins[:5], {"epsilon": epsilon}, outs[:1])


def instance_norm(
    ctx: ImportContext, ins: list[str], outs: list[str], epsilon: float = 1e-5
) -> None:
    ctx.emit("InstanceNormalization", ins[:3], {"epsilon": epsilon}, outs)


def lrn(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    alpha: float = 1e-4,
    beta: float = 0.75,
    bias: float = 1.0,
    size: int = 1,
) -> None:
    ctx.emit("LRN", ins[:1], {"alpha": alpha, "beta": beta, "bias": bias, "size": size}, outs)


def layer_norm(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    axis: int = -1,
    epsilon: float = 1e-5,
    stash_type: int = 1,
) -> None:
    x = ctx.type(ins[0])
    r = len(x.shape)
    ctx.emit(
        "LayerNormalization",
        [i for i in ins[:3] if i],
        {"axis": axis % r, "epsilon": epsilon},
        outs[:1],
    )
    if any(o for o in outs[1:]):
        # Mean and InvStdDev (training outputs) as plain ops over the normalised axes.
        axes = list(range(axis % r, r))
        (mean,) = ctx.emit(
            "ReduceMean",
            ins[:1],
            {"axes": axes, "keepdims": 1},
            outs[1:2] if len(outs) > 1 and outs[1] else None,
        )
        (d,) = ctx.emit("Sub", [ins[0], mean], {})
        (sq,) = ctx.emit("Mul", [d, d], {})
        (var,) = ctx.emit("ReduceMean", [sq], {"axes": axes, "keepdims": 1})
        eps = ctx.add_const(ctx.fresh("ln_eps"), np.asarray(epsilon, x.dtype))
        (ve,) = ctx.emit("Add", [var, eps], {})
        (sd,) = ctx.emit("Sqrt", [ve], {})
        if len(outs) > 2 and outs[2]:
            ctx.emit("Reciprocal", [sd], {}, outs[2:3])


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


CONVERTERS: dict[str, dict[int, Converter]] = {
    "BatchNormalization": {1: batch_norm}, "InstanceNormalization": {1: instance_norm},
    "LRN": {1: lrn}, "LayerNormalization": {17: layer_norm},
    "LpNormalization": {1: lp_norm}, "RMSNormalization": {23: rms_norm},
    "GroupNormalization": {18: group_norm}, "MeanVarianceNormalization": {9: mvn},
}  # fmt: skip
