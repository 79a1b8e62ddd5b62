"""The cuts the thread split (guard.compiler.codegen.split) shares: bands of a step that
reads its inputs whole, a run of an operand along one axis, the first axis to cut, how an
operand is read when the output is cut, and an even task count."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from guard.compiler.codegen.kernel_plan import Operand, Step


def row_tasks(
    step: Step, rows: int, n: int, attr: str = "rows", axis: tuple[int, ...] = (), unit: int = 1
) -> tuple[Step, ...]:
    """A step cut into ``n`` bands of its ``rows`` rows (a convolution's output rows, LRN's
    channels, a Transpose's output axis), each a whole number of ``unit`` rows but the
    last: each task the same kernel over its band (attribute ``attr``: ``(*axis, start,
    end)``), reading its inputs whole."""
    chunks = -(-rows // unit)
    tasks = []
    for i in range(n):
        band = (chunks * i // n * unit, min(rows, chunks * (i + 1) // n * unit))
        attrs = {**step.attrs, attr: (*axis, *band)}
        tasks.append(Step(f"{step.node}#{i}", step.op, "", step.inputs, step.outputs, attrs, False))
    return tuple(tasks)


def even(n: int) -> int:
    """``n`` tasks made even where more than 2: two threads take equal shares."""
    return n - n % 2 if n > 2 else n


def cut(o: Operand, axis: int, d0: int, d1: int) -> Operand:
    """``o`` cut to [d0, d1) along ``axis`` (every dim before it is 1: a contiguous run)."""
    stride = math.prod(o.shape[axis + 1 :]) * np.dtype(o.dtype).itemsize
    shape = (*o.shape[:axis], d1 - d0, *o.shape[axis + 1 :])
    return dataclasses.replace(o, offset=o.offset + d0 * stride, shape=shape)


def overlaps(a: Operand, b: Operand) -> bool:
    same = a.space == b.space == "arena"
    return same and a.offset < b.offset + b.nbytes and b.offset < a.offset + a.nbytes


def leading_axis(shape: tuple[int, ...], before: int) -> int | None:
    """The first axis (below ``before``) longer than 1 with only 1s before it."""
    for d in range(min(before, len(shape))):
        if shape[d] > 1:
            return d
    return None


def operand_axis(o: Operand, out_rank: int, axis: int, units: int) -> int | None | str:
    """How a task reads ``o`` when the output is cut along ``axis`` (right-aligned
    broadcasting): its own axis to cut, "whole" when it is broadcast along the cut, or
    None when neither is contiguous."""
    own = axis - (out_rank - len(o.shape))
    if own < 0 or o.shape[own] == 1:
        return "whole"
    if o.shape[own] == units and all(d == 1 for d in o.shape[:own]):
        return own
    return None


def concat_bands(step: Step, axis: int, n: int) -> tuple[Step, ...]:
    """A Concat cut into ``n`` bands of its output along its own ``axis`` (every dim before
    it 1): each task concatenates the runs of the inputs that fall in its band."""
    y = step.outputs[0]
    size, tasks = y.shape[axis], []
    for i in range(n):
        d0, d1 = size * i // n, size * (i + 1) // n
        ins, off = [], 0
        for o in step.inputs:
            assert o is not None
            lo, hi = max(d0, off), min(d1, off + o.shape[axis])
            if lo < hi:
                ins.append(cut(o, axis, lo - off, hi - off))
            off += o.shape[axis]
        out = (cut(y, axis, d0, d1),)
        tasks.append(Step(f"{step.node}#{i}", step.op, "", tuple(ins), out, step.attrs, False))
    return tuple(tasks)


def column_tasks(step: Step, n: int, nr: int, want: int) -> tuple[Step, ...]:
    """A matrix product cut into ``want`` runs of B's packed panels ``nr`` columns wide
    (attribute ``cols``): each task reads A whole and B's panels of its columns, and
    writes those columns of every row of Y (a strided, disjoint run of each row)."""
    units = -(-n // nr)
    tasks = []
    for i in range(want):
        cols = (units * i // want * nr, min(n, units * (i + 1) // want * nr))
        attrs = {**step.attrs, "cols": cols}
        tasks.append(Step(f"{step.node}#{i}", step.op, "", step.inputs, step.outputs, attrs, False))
    return tuple(tasks)


def balance(total: int, n: int, unit: int = 1) -> float:
    """How long two threads take the ``n`` tasks :func:`row_tasks` cuts ``total`` into
    (whole ``unit`` runs but the last) as the pool deals them (threadpool: each thread
    its own half of the tasks first, then the other's), over half of ``total``: 1.0 for
    equal halves; 3 in 2 tasks 1.33; 12 channels in vectors of 8, 8 and 4: 1.33."""
    chunks, t = -(-total // unit), [0, 0]
    sizes = [min(total, chunks * (i + 1) // n * unit) - chunks * i // n * unit for i in range(n)]
    runs = [sizes[: n // 2], sizes[n // 2 :]]
    while runs[0] or runs[1]:
        r = t.index(min(t))
        t[r] += (runs[r] or runs[1 - r]).pop(0)
    return round(max(t) * 2 / total, 2)


def channel_tasks(step: Step, n: int, units: int, unit: int, depthwise: bool) -> tuple[Step, ...]:
    """A convolution of one image cut into ``n`` runs of its ``units`` output-channel units
    (``unit`` channels each: whole vectors, or a blocked layout's blocks): each task the
    convolution of its channels, its packed weights, bias, per-channel epilogue operands
    and output cut with them (a depthwise one's input and group too); () where an
    epilogue operand is neither per channel nor broadcast along the channels."""
    x, y = step.inputs[0], step.outputs[0]
    assert x is not None
    blocked = len(y.shape) == 5
    k_all = step.inputs[1].shape[0] if step.inputs[1] is not None else 0
    anchor = int(step.attrs.get("anchor_inputs", len(step.inputs)))
    tasks = []
    for i in range(n if n > 1 else 0):
        u0, u1 = units * i // n, units * (i + 1) // n
        k0, k1 = u0 * unit, min(k_all, u1 * unit)
        d0, d1 = (u0, u1) if blocked else (k0, k1)  # dim-1 units of the activations
        ins: list[Operand | None] = []
        for j, o in enumerate(step.inputs):
            if o is None:
                ins.append(None)
            elif j == 0:
                ins.append(cut(o, 1, d0, d1) if depthwise else o)
            elif j == 1:  # packed weights, the operand keeps OIHW [K, C/g, R, S]
                per = math.prod(o.shape[1:]) * 4
                shape = (k1 - k0, *o.shape[1:])
                ins.append(dataclasses.replace(o, offset=o.offset + k0 * per, shape=shape))
            elif j == 2 and j < anchor:  # bias [K]
                ins.append(dataclasses.replace(o, offset=o.offset + k0 * 4, shape=(k1 - k0,)))
            elif isinstance(h := operand_axis(o, len(y.shape), 1, y.shape[1]), int):
                ins.append(cut(o, h, d0, d1))  # a residual, a per-channel constant
            elif math.prod(o.shape) == 1 or (len(o.shape) == len(y.shape) and o.shape[1] == 1):
                ins.append(o)  # broadcast along channels: every task reads it whole
            else:
                return ()
        attrs = {**step.attrs, "group": k1 - k0} if depthwise else dict(step.attrs)
        out = (cut(y, 1, d0, d1),)
        tasks.append(Step(f"{step.node}#{i}", step.op, "", tuple(ins), out, attrs, False))
    return tuple(tasks)
