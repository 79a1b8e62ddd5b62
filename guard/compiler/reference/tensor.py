"""Reference kernels for data-movement and reduction ops (shape-like operands are attrs)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np

from guard.compiler.ir.core import dtype_from_name, value_range
from guard.compiler.reference.base import Attrs, Kernel, Xs, arg


def _slice(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x = arg(xs)
    idx = [slice(None)] * x.ndim
    for ax, s, e, st in zip(a["axes"], a["starts"], a["ends"], a["steps"], strict=True):
        idx[ax] = slice(s, e, st)
    return [x[tuple(idx)]]


def _split(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x = arg(xs)
    cuts = np.cumsum(a["split"])[:-1]
    return list(np.split(x, cuts, axis=a["axis"]))


def _reduce(fn: Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray | np.generic]) -> Kernel:
    def k(xs: Xs, a: Attrs) -> list[np.ndarray]:
        x = arg(xs)
        with np.errstate(all="ignore"):
            y = fn(x, tuple(a["axes"]), bool(a.get("keepdims", 1)))
        return [np.asarray(y).astype(x.dtype, copy=False)]

    return k


def _arg(fn: Callable[..., np.ndarray]) -> Kernel:
    def k(xs: Xs, a: Attrs) -> list[np.ndarray]:
        x = arg(xs)
        (ax,) = a["axes"]
        if a.get("select_last_index", 0):
            flipped = np.flip(x, ax)
            y = x.shape[ax] - 1 - fn(flipped, axis=ax)
        else:
            y = fn(x, axis=ax)
        if a.get("keepdims", 1):
            y = np.expand_dims(y, ax)
        return [np.asarray(y, dtype=np.int64)]

    return k


def cumulative(
    scan: Callable[..., np.ndarray], identity_like: Callable[[np.ndarray], np.ndarray]
) -> Kernel:
    """A CumSum-like kernel: ``scan`` (np.cumsum, np.cumprod) along ``axis``, honouring
    ``reverse`` and ``exclusive`` (shift by one, ``identity_like`` fills the first slot)."""

    def k(xs: Xs, a: Attrs) -> list[np.ndarray]:
        x = arg(xs)
        ax = a["axis"]
        if a.get("reverse", 0):
            x = np.flip(x, ax)
        y = scan(x, axis=ax, dtype=x.dtype)
        if a.get("exclusive", 0):
            y = np.concatenate(
                [identity_like(np.take(y, [0], axis=ax)), np.delete(y, -1, axis=ax)], axis=ax
            )
        if a.get("reverse", 0):
            y = np.flip(y, ax)
        return [np.asarray(y, order="C")]

    return k


_PAD_MODES: dict[str, Literal["reflect", "edge", "wrap"]] = {
    "reflect": "reflect",
    "edge": "edge",
    "wrap": "wrap",
}


def _pad(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x = arg(xs)
    n = x.ndim
    pads = a["pads"]
    # Negative pads crop; do the positive part with np.pad, then slice.
    widths = [(max(pads[i], 0), max(pads[i + n], 0)) for i in range(n)]
    mode = a.get("mode", "constant")
    if mode == "constant":
        y = np.pad(x, widths, constant_values=np.asarray(a.get("value", 0), x.dtype))
    else:
        y = np.pad(x, widths, mode=_PAD_MODES[mode])
    idx = tuple(slice(max(-pads[i], 0), y.shape[i] - max(-pads[i + n], 0)) for i in range(n))
    return [y[idx]]


def _gather_elements(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x, idx = arg(xs), arg(xs, 1)
    ax = a["axis"]
    idx = np.where(idx < 0, idx + x.shape[ax], idx)
    return [np.take_along_axis(x, idx, axis=ax)]


def _lowest(dt: np.dtype) -> float:
    return value_range(dt)[0]


def _highest(dt: np.dtype) -> float:
    return value_range(dt)[1]


KERNELS = {
    "Reshape": lambda xs, a: [arg(xs).reshape(a["shape"])],
    "Transpose": lambda xs, a: [np.asarray(np.transpose(arg(xs), a["perm"]), order="C")],
    "Concat": lambda xs, a: [np.concatenate([x for x in xs if x is not None], axis=a["axis"])],
    "Split": _split,
    "Slice": _slice,
    "Gather": lambda xs, a: [np.take(arg(xs), arg(xs, 1).astype(np.int64), axis=a["axis"])],
    "GatherElements": _gather_elements,
    "Expand": lambda xs, a: [np.array(arg(xs) * np.ones(a["shape"], arg(xs).dtype))],
    "Tile": lambda xs, a: [np.tile(arg(xs), a["repeats"])],
    "Pad": _pad,
    "Fill": lambda xs, a: [np.full(a["shape"], a["value"], dtype=dtype_from_name(a["dtype"]))],
    "CumSum": cumulative(np.cumsum, np.zeros_like),
    "CumProd": cumulative(np.cumprod, np.ones_like),
    "ReduceMean": _reduce(lambda x, ax, k: np.mean(x, axis=ax, keepdims=k)),
    "ReduceSum": _reduce(lambda x, ax, k: np.sum(x, axis=ax, keepdims=k)),
    # An empty reduction yields the identity (-inf / +inf, or the dtype's extremes).
    "ReduceMax": _reduce(lambda x, ax, k: np.max(x, axis=ax, keepdims=k, initial=_lowest(x.dtype))),
    "ReduceMin": _reduce(
        lambda x, ax, k: np.min(x, axis=ax, keepdims=k, initial=_highest(x.dtype))
    ),
    "ReduceProd": _reduce(lambda x, ax, k: np.prod(x, axis=ax, keepdims=k)),
    "ReduceL1": _reduce(lambda x, ax, k: np.sum(np.abs(x), axis=ax, keepdims=k)),
    "ReduceL2": _reduce(lambda x, ax, k: np.sqrt(np.sum(np.square(x), axis=ax, keepdims=k))),
    "ReduceLogSum": _reduce(lambda x, ax, k: np.log(np.sum(x, axis=ax, keepdims=k))),
    "ReduceLogSumExp": _reduce(
        lambda x, ax, k: np.log(np.sum(np.exp(x.astype(np.float64)), axis=ax, keepdims=k))
    ),
    "ReduceSumSquare": _reduce(lambda x, ax, k: np.sum(np.square(x), axis=ax, keepdims=k)),
    "ArgMax": _arg(np.argmax),
    "ArgMin": _arg(np.argmin),
}
