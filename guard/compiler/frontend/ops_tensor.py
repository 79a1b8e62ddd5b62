"""Converters for data movement, shape arithmetic, constants and reductions.

Shape-like operands become attributes: the IR's Reshape carries its full target shape
(no 0 / -1 left), Slice its clamped python-style starts/ends/steps for every sliced axis,
reductions their normalised axes. ``Shape`` and ``Size`` become Constants (every dim is
static), so shape arithmetic on them folds.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from guard.compiler.frontend.context import Converter, ImportContext, np_dtype
from guard.compiler.ir.core import dtype_name

INT64_MAX = np.iinfo(np.int64).max


def resolve_reshape(
    ctx: ImportContext, in_shape: tuple[int, ...], target: list[int], allowzero: int = 0
) -> list[int]:
    out = list(target)
    if not allowzero:
        out = [in_shape[i] if d == 0 else d for i, d in enumerate(out)]
    if out.count(-1) > 1:
        raise ctx.error(f"Reshape target {target} has more than one -1", hint="Fix the model.")
    total = int(np.prod(in_shape, dtype=np.int64))
    if -1 in out:
        rest = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        out[out.index(-1)] = total // rest if rest else 0
    if int(np.prod(out, dtype=np.int64)) != total:
        raise ctx.error(
            f"Reshape of {list(in_shape)} to {target} changes the element count",
            hint="Fix the model's target shape.",
        )
    return out


def reshape_v1(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    shape: list[int] | None = None,
    consumed_inputs: Any = None,
) -> None:
    x = ctx.type(ins[0])
    ctx.emit("Reshape", ins[:1], {"shape": resolve_reshape(ctx, x.shape, list(shape or []))}, outs)


def reshape_v5(ctx: ImportContext, ins: list[str], outs: list[str], allowzero: int = 0) -> None:
    x = ctx.type(ins[0])
    target = ctx.const_ints(ins[1], "target shape")
    ctx.emit("Reshape", ins[:1], {"shape": resolve_reshape(ctx, x.shape, target, allowzero)}, outs)


def flatten(ctx: ImportContext, ins: list[str], outs: list[str], axis: int = 1) -> None:
    x = ctx.type(ins[0])
    ax = axis + len(x.shape) if axis < 0 else axis
    rows = int(np.prod(x.shape[:ax], dtype=np.int64))
    cols = int(np.prod(x.shape[ax:], dtype=np.int64))
    ctx.emit("Reshape", ins[:1], {"shape": [rows, cols]}, outs)


def _squeeze(ctx: ImportContext, ins: list[str], outs: list[str], axes: list[int] | None) -> None:
    x = ctx.type(ins[0])
    r = len(x.shape)
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    ax = {a % r for a in axes}
    ctx.emit("Reshape", ins[:1], {"shape": [d for i, d in enumerate(x.shape) if i not in ax]}, outs)


def squeeze_v1(
    ctx: ImportContext, ins: list[str], outs: list[str], axes: list[int] | None = None
) -> None:
    _squeeze(ctx, ins, outs, axes)


def squeeze_v13(ctx: ImportContext, ins: list[str], outs: list[str]) -> None:
    axes = ctx.const_ints(ins[1], "axes") if len(ins) > 1 and ins[1] else None
    _squeeze(ctx, ins, outs, axes)


def _unsqueeze(ctx: ImportContext, ins: list[str], outs: list[str], axes: list[int]) -> None:
    x = ctx.type(ins[0])
    r = len(x.shape) + len(axes)
    ax = sorted(a % r for a in axes)
    shape = list(x.shape)
    for a in ax:
        shape.insert(a, 1)
    ctx.emit("Reshape", ins[:1], {"shape": shape}, outs)


def unsqueeze_v1(
    ctx: ImportContext, ins: list[str], outs: list[str], axes: list[int] | None = None
) -> None:
    _unsqueeze(ctx, ins, outs, list(axes or []))


def unsqueeze_v13(ctx: ImportContext, ins: list[str], outs: list[str]) -> None:
    _unsqueeze(ctx, ins, outs, ctx.const_ints(ins[1], "axes"))


def transpose(
    ctx: ImportContext, ins: list[str], outs: list[str], perm: list[int] | None = None
) -> None:
    r = len(ctx.type(ins[0]).shape)
    ctx.emit("Transpose", ins[:1], {"perm": list(perm) if perm else list(range(r))[::-1]}, outs)


def concat(ctx: ImportContext, ins: list[str], outs: list[str], axis: int = 1) -> None:
    args = [i for i in ins if i]
    r = len(ctx.type(args[0]).shape)
    ctx.emit("Concat", args, {"axis": axis % r}, outs)


def _split(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    axis: int,
    split: list[int] | None,
    num_outputs: int | None = None,
) -> None:
    x = ctx.type(ins[0])
    ax = axis % len(x.shape)
    n = len(outs)
    if not split:
        dim = x.shape[ax]
        if num_outputs:
            chunk = -(-dim // num_outputs)
            split = [min(chunk, dim - i * chunk) for i in range(num_outputs)]
        else:
            split = [dim // n] * n
    names = [o if o else ctx.fresh("split_unused") for o in outs]
    ctx.emit("Split", ins[:1], {"axis": ax, "split": list(split)}, names)


def split_v1(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    axis: int = 0,
    split: list[int] | None = None,
) -> None:
    if len(ins) > 1 and ins[1]:
        split = ctx.const_ints(ins[1], "split")
    _split(ctx, ins, outs, axis, split)


def split_v13(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    axis: int = 0,
    num_outputs: int | None = None,
) -> None:
    split = ctx.const_ints(ins[1], "split") if len(ins) > 1 and ins[1] else None
    _split(ctx, ins, outs, axis, split, num_outputs)


def _slice(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    starts: list[int],
    ends: list[int],
    axes: list[int] | None,
    steps: list[int] | None,
) -> None:
    x = ctx.type(ins[0])
    r = len(x.shape)
    axes = list(axes) if axes is not None else list(range(len(starts)))
    steps = list(steps) if steps is not None else [1] * len(starts)
    norm_s, norm_e = [], []
    for ax, s, e, st in zip(axes, starts, ends, steps, strict=True):
        dim = x.shape[ax % r]
        if st == 0:
            raise ctx.error("Slice step 0 is invalid", hint="Fix the model.")
        # Clamp the way the spec does, then express as a python slice that never wraps.
        s = s + dim if s < 0 else s
        e = e + dim if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), dim), min(max(e, 0), dim)
        else:
            s = min(max(s, -1), dim - 1)
            e = min(max(e, -1), dim - 1)
        norm_s.append(s)
        norm_e.append(e if e >= 0 else None)
    attrs = {
        "axes": [a % r for a in axes],
        "starts": norm_s,
        "ends": [e if e is not None else -(2**62) for e in norm_e],
        "steps": steps,
    }
    ctx.emit("Slice", ins[:1], attrs, outs)


def slice_v1(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    starts: list[int] | None = None,
    ends: list[int] | None = None,
    axes: list[int] | None = None,
) -> None:
    _slice(ctx, ins, outs, list(starts or []), list(ends or []), axes, None)


def slice_v10(ctx: ImportContext, ins: list[str], outs: list[str]) -> None:
    starts = ctx.const_ints(ins[1], "starts")
    ends = ctx.const_ints(ins[2], "ends")
    axes = ctx.const_ints(ins[3], "axes") if len(ins) > 3 and ins[3] else None
    steps = ctx.const_ints(ins[4], "steps") if len(ins) > 4 and ins[4] else None
    _slice(ctx, ins, outs, starts, ends, axes, steps)


def gather(ctx: ImportContext, ins: list[str], outs: list[str], axis: int = 0) -> None:
    r = len(ctx.type(ins[0]).shape)
    ctx.emit("Gather", ins[:2], {"axis": axis % r}, outs)


def gather_elements(ctx: ImportContext, ins: list[str], outs: list[str], axis: int = 0) -> None:
    r = len(ctx.type(ins[0]).shape)
    ctx.emit("GatherElements", ins[:2], {"axis": axis % r}, outs)


def expand(ctx: ImportContext, ins: list[str], outs: list[str]) -> None:
    ctx.emit("Expand", ins[:1], {"shape": ctx.const_ints(ins[1], "shape")}, outs)


def tile(ctx: ImportContext, ins: list[str], outs: list[str]) -> None:
    ctx.emit("Tile", ins[:1], {"repeats": ctx.const_ints(ins[1], "repeats")}, outs)


def pad_v2(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    mode: str = "constant",
    pads: list[int] | None = None,
    paddings: list[int] | None = None,
    value: float = 0.0,
) -> None:
    ctx.emit(
        "Pad", ins[:1], {"mode": mode, "pads": list(pads or paddings or []), "value": value}, outs
    )


def pad_v11(ctx: ImportContext, ins: list[str], outs: list[str], mode: str = "constant") -> None:
    x = ctx.type(ins[0])
    r = len(x.shape)
    pads = ctx.const_ints(ins[1], "pads")
    value = 0.0
    if len(ins) > 2 and ins[2]:
        value = ctx.const_scalar(ins[2], "constant_value")
    if len(ins) > 3 and ins[3]:
        axes = [a % r for a in ctx.const_ints(ins[3], "axes")]
        full = [0] * (2 * r)
        for k, a in enumerate(axes):
            full[a], full[a + r] = pads[k], pads[k + len(axes)]
        pads = full
    ctx.emit("Pad", ins[:1], {"mode": mode, "pads": pads, "value": value}, outs)


def shape(
    ctx: ImportContext, ins: list[str], outs: list[str], start: int = 0, end: int | None = None
) -> None:
    dims = list(ctx.type(ins[0]).shape)
    ctx.add_const(outs[0], np.asarray(dims[slice(start, end)], dtype=np.int64))


def size(ctx: ImportContext, ins: list[str], outs: list[str]) -> None:
    ctx.add_const(outs[0], np.asarray(ctx.type(ins[0]).size, dtype=np.int64))


def constant(ctx: ImportContext, ins: list[str], outs: list[str], **kw: Any) -> None:
    ((key, v),) = kw.items()
    if key == "value":
        arr = np.asarray(v)
    elif key in ("value_float", "value_int"):
        arr = np.asarray(v, dtype=np.float32 if key == "value_float" else np.int64)
    elif key in ("value_floats", "value_ints"):
        arr = np.asarray(v, dtype=np.float32 if key == "value_floats" else np.int64)
    else:
        raise ctx.error(f"Constant with {key!r} is not supported", hint="Use a dense tensor value.")
    try:
        ctx.add_const(outs[0], arr)
    except KeyError:
        raise ctx.error(
            f"Constant of dtype {arr.dtype} is not supported",
            hint="Supported: float16/32/64, integers, bool.",
        ) from None


def constant_of_shape(
    ctx: ImportContext, ins: list[str], outs: list[str], value: Any = None
) -> None:
    shp = ctx.const_ints(ins[0], "shape")
    v = np.asarray(value if value is not None else np.zeros(1, np.float32)).reshape(-1)
    ctx.emit("Fill", [], {"shape": shp, "value": v[0].item(), "dtype": dtype_name(v.dtype)}, outs)


def range_(ctx: ImportContext, ins: list[str], outs: list[str]) -> None:
    start, limit, delta = (ctx.const(i, "range bound") for i in ins[:3])
    dtype = np.asarray(start).dtype
    s0, l0, d0 = (np.asarray(v).reshape(-1)[0].item() for v in (start, limit, delta))
    n = max(int(np.ceil((l0 - s0) / d0)), 0)
    ctx.add_const(outs[0], (s0 + d0 * np.arange(n)).astype(dtype))


def depth_to_space(
    ctx: ImportContext, ins: list[str], outs: list[str], blocksize: int = 1, mode: str = "DCR"
) -> None:
    n, c, h, w = ctx.type(ins[0]).shape
    b = blocksize
    if mode == "DCR":
        (t,) = ctx.emit("Reshape", ins[:1], {"shape": [n, b, b, c // (b * b), h, w]})
        (t,) = ctx.emit("Transpose", [t], {"perm": [0, 3, 4, 1, 5, 2]})
    else:
        (t,) = ctx.emit("Reshape", ins[:1], {"shape": [n, c // (b * b), b, b, h, w]})
        (t,) = ctx.emit("Transpose", [t], {"perm": [0, 1, 4, 2, 5, 3]})
    ctx.emit("Reshape", [t], {"shape": [n, c // (b * b), h * b, w * b]}, outs)


def space_to_depth(
    ctx: ImportContext, ins: list[str], outs: list[str], blocksize: int = 1, mode: str = "DCR"
) -> None:
    if mode not in ("DCR", "CRD"):
        raise ctx.error(f"SpaceToDepth mode {mode!r} is not supported", hint="Use DCR or CRD.")
    n, c, h, w = ctx.type(ins[0]).shape
    b = blocksize
    (t,) = ctx.emit("Reshape", ins[:1], {"shape": [n, c, h // b, b, w // b, b]})
    # DCR: output channel = (block row, block col, c); CRD: (c, block row, block col).
    perm = [0, 3, 5, 1, 2, 4] if mode == "DCR" else [0, 1, 3, 5, 2, 4]
    (t,) = ctx.emit("Transpose", [t], {"perm": perm})
    ctx.emit("Reshape", [t], {"shape": [n, c * b * b, h // b, w // b]}, outs)


def eye_like(
    ctx: ImportContext, ins: list[str], outs: list[str], dtype: int | None = None, k: int = 0
) -> None:
    x = ctx.type(ins[0])
    dt = np_dtype(dtype, ctx.where()) if dtype is not None else x.dtype
    ctx.add_const(outs[0], np.eye(x.shape[0], x.shape[1], k=k, dtype=dt))


CONVERTERS: dict[str, dict[int, Converter]] = {
    "Reshape": {1: reshape_v1, 5: reshape_v5},
    "Flatten": {1: flatten},
    "Squeeze": {1: squeeze_v1, 13: squeeze_v13},
    "Unsqueeze": {1: unsqueeze_v1, 13: unsqueeze_v13},
    "Transpose": {1: transpose},
    "Concat": {1: concat},
    "Split": {1: split_v1, 13: split_v13},
    "Slice": {1: slice_v1, 10: slice_v10},
    "Gather": {1: gather},
    "GatherElements": {11: gather_elements},
    "Expand": {8: expand},
    "Tile": {6: tile},
    "Pad": {2: pad_v2, 11: pad_v11},
    "Shape": {1: shape},
    "Size": {1: size},
    "Constant": {1: constant},
    "ConstantOfShape": {9: constant_of_shape},
    "Range": {11: range_},
    "DepthToSpace": {1: depth_to_space},
    "SpaceToDepth": {1: space_to_depth},
    "EyeLike": {9: eye_like},
}
