"""Activation layouts: ``NCHW`` (the IR's native one), ``NHWC`` and blocked ``NCHW<b>c``.

Only 4-D activations change layout. ``NCHW16c`` stores ``[N, C/16, H, W, 16]``: 16
channels side by side, the vector width of an AVX-512 fp32 lane set, as onnxruntime's
NCHWc kernels do; the block is the target table's (guard.compiler.ir.isa_table): NCHW8c on
AVX2, NCHW4c on NEON. Ops that carry ``attrs["layout"] = L`` (see LAYOUT_OPS) read their
first input and write their output in L; weights stay OIHW.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import numpy as np

from guard.compiler.ir import ops
from guard.compiler.ir.core import AttrValue

LAYOUT_OPS = ops.LAYOUT_OPS  # the ops whose traits say "layout" (guard.compiler.ir.ops)
_BLOCKED = re.compile(r"NCHW(\d+)c")


def block_of(layout: str) -> int | None:
    m = _BLOCKED.fullmatch(layout)
    return int(m.group(1)) if m else None


def to_layout_shape(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    if layout == "NCHW":
        return shape
    n, c, h, w = shape
    if layout == "NHWC":
        return (n, h, w, c)
    b = block_of(layout)
    assert b and c % b == 0, (layout, shape)
    return (n, c // b, h, w, b)


def from_layout_shape(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    if layout == "NCHW":
        return shape
    if layout == "NHWC":
        n, h, w, c = shape
        return (n, c, h, w)
    n, cb, h, w, b = shape
    return (n, cb * b, h, w)


def to_layout(x: np.ndarray, layout: str) -> np.ndarray:
    if layout == "NCHW":
        return x
    if layout == "NHWC":
        return np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    b = block_of(layout)
    assert b
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2))


def to_nchw(x: np.ndarray, layout: str) -> np.ndarray:
    if layout == "NCHW":
        return x
    if layout == "NHWC":
        return np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    n, cb, h, w, b = x.shape
    return np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3).reshape(n, cb * b, h, w))


def channel_axis(layout: str) -> int:
    return 3 if layout == "NHWC" else 1


def relayout_constant(c: np.ndarray, layout: str, channels: int) -> np.ndarray | None:
    """A constant that broadcasts against NCHW [.., C, H, W], re-laid to broadcast against
    ``layout``; None when it cannot (e.g. a per-channel vector in a blocked layout whose
    channel count is not the region's)."""
    if layout == "NCHW" or c.ndim == 0 or c.size == 1:
        return c if c.ndim <= 4 else None
    if c.ndim > 4:
        return None
    full = c.reshape((1,) * (4 - c.ndim) + c.shape)
    if layout == "NHWC":
        return np.ascontiguousarray(full.transpose(0, 2, 3, 1))
    b = block_of(layout)
    assert b
    n, cc, h, w = full.shape
    if cc == 1:
        return full.reshape(n, 1, h, w, 1)
    if cc != channels:
        return None
    return np.ascontiguousarray(full.reshape(n, cc // b, b, h, w).transpose(0, 1, 3, 4, 2))


_NHWC_PERMS = ([0, 2, 3, 1], [0, 3, 1, 2])


def count_conversions(nodes: Iterable[tuple[str, Mapping[str, AttrValue]]]) -> int:
    """Layout conversions among ``(op, attrs)`` nodes: every ``Relayout`` and every
    NCHW<->NHWC ``Transpose`` (what the layout pass inserts; a model's own NHWC transposes
    convert a layout too). The results' ``layout_conversions``."""
    return sum(
        1
        for op, attrs in nodes
        if op == "Relayout" or (op == "Transpose" and list(attrs.get("perm") or ()) in _NHWC_PERMS)
    )
