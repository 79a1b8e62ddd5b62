"""Splitting a step into tasks for the thread pool: each task one slice of the output.

A convolution of one image whose output channels are outermost (NCHW, or a blocked
``NCHW<b>c``) splits along them: task ``i`` is the same convolution for a run of output
channels, i.e. the same kernel specialised to fewer channels, called with pointers moved
to its slice of the packed weights (``[K/L][C][R][S][L]``: a slice of whole vectors is
contiguous), of the bias, of per-channel epilogue operands and of the output. A
depthwise convolution slices its input the same way. Nothing is reduced across tasks, so
the split is exact and the tasks can run on any number of threads.

The cost rule decides whether a step splits and into how many tasks, from the step alone
(never from the thread count, so the code, and so the output bits, are the same for any
``threads``): at least :data:`MIN_TASK_FLOPS` per task (a task must dwarf the pool's
dispatch, a few microseconds), at most :data:`MAX_TASKS`, whole channel vectors per task.
Anything else (several images, NHWC, grouped convolutions, in-place outputs) stays one
serial call.
"""

from __future__ import annotations

import dataclasses
import math

from guard.compiler.codegen.conv.schedule import Geometry
from guard.compiler.codegen.kernel_plan import Operand, Step
from guard.compiler.ir.layout import block_of

MIN_TASK_FLOPS = 4_000_000  # ~0.1 ms of one core's FMAs; dispatch is a few us
MAX_TASKS = 8


def _slice(o: Operand, d0: int, d1: int) -> Operand:
    """``o`` cut to [d0, d1) along dim 1 (every dim before it is 1)."""
    stride = math.prod(o.shape[2:]) * (4 if o.dtype == "float32" else 8)
    shape = (o.shape[0], d1 - d0, *o.shape[2:])
    return dataclasses.replace(o, offset=o.offset + d0 * stride, shape=shape)


def conv_tasks(step: Step, width: int) -> tuple[Step, ...]:
    """The tasks of a Conv/FusedConv step, or () when it stays one call."""
    x, w = step.inputs[0], step.inputs[1]
    if x is None or w is None or step.may_alias or x.dtype != "float32":
        return ()
    lay = str(step.attrs.get("layout", "NCHW"))
    blk = block_of(lay)
    if lay != "NCHW" and not (blk and blk % width == 0):
        return ()
    geo = Geometry(step.attrs, x.shape, w.shape, width)
    depthwise = geo.mode == "depthwise"
    if geo.N != 1 or not (geo.g == 1 or depthwise):
        return ()
    unit = blk or width  # channels per slice unit: whole vectors, whole blocks
    units = -(-geo.K // unit)
    n = min(MAX_TASKS, units, geo.flops // MIN_TASK_FLOPS)
    if n < 2:
        return ()
    y = step.outputs[0]
    anchor = int(step.attrs.get("anchor_inputs", len(step.inputs)))
    refs = {r for p in step.attrs.get("program", ()) for r in p["args"] if isinstance(r, int)}
    if any(r < anchor for r in refs):
        return ()  # the epilogue reads the conv's own input whole: no slice of it is its

    tasks = []
    for i in range(n):
        u0, u1 = units * i // n, units * (i + 1) // n
        k0, k1 = u0 * unit, min(geo.K, u1 * unit)
        d0, d1 = (u0, u1) if blk else (k0, k1)  # dim-1 units of the activations
        ins: list[Operand | None] = []
        for j, o in enumerate(step.inputs):
            if o is None:
                ins.append(None)
            elif j == 0:
                ins.append(_slice(o, d0, d1) if depthwise else o)
            elif j == 1:  # packed weights, the operand keeps OIHW [K, C/g, R, S]
                per = math.prod(o.shape[1:]) * 4
                shape = (k1 - k0, *o.shape[1:])
                ins.append(dataclasses.replace(o, offset=o.offset + k0 * per, shape=shape))
            elif j == 2 and j < anchor:  # bias [K]
                ins.append(dataclasses.replace(o, offset=o.offset + k0 * 4, shape=(k1 - k0,)))
            elif len(o.shape) == len(y.shape) and o.shape[0] == 1 and o.shape[1] == y.shape[1]:
                ins.append(_slice(o, d0, d1))  # a residual or a per-channel constant
            elif math.prod(o.shape) == 1 or (len(o.shape) == len(y.shape) and o.shape[1] == 1):
                ins.append(o)  # broadcast along channels: every task reads it whole
            else:
                return ()
        attrs = dict(step.attrs)
        if depthwise:
            attrs["group"] = k1 - k0
        out = (_slice(y, d0, d1),)
        tasks.append(Step(f"{step.node}#{i}", step.op, "", tuple(ins), out, attrs, False))
    return tuple(tasks)


def split_step(step: Step, width: int) -> tuple[Step, ...]:
    """The step's tasks by the cost rule, () to run it as one call."""
    if step.op in ("Conv", "FusedConv"):
        return conv_tasks(step, width)
    return ()
