"""Splitting a step into tasks for the thread pool: each task one slice of the output.

A convolution of one image whose output channels are outermost (NCHW, or a blocked ``NCHW<b>c``)
splits along them: task ``i`` is the same convolution for a run of output channels (the kernel
specialised to fewer channels, pointers moved to its slice of the packed ``[K/L][C][R][S][L]``
weights, of the bias, per-channel epilogue operands ([K, 1, 1] too) and output; a depthwise one's
input too). Any other (NHWC, grouped, several images), or one whose rows share better between two
threads as the pool deals the tasks (3 blocks in 2 tasks: 1.33x the even share; 3 rows in 2 too),
cuts its output rows into bands (an epilogue that reads a tensor, a residual, runs as a pass over
each band's rows; where channel runs share evenly it keeps those): each task the same kernel over
its rows, the input and weights read whole (so do LRN's runs of channels and
a Transpose's bands of its output's leading axis); of the counts the cost rule allows, the one
that shares best, the most tasks on a tie, channels before rows. The other
families cut the output along one axis whose leading dims are 1 (so each run is contiguous), each
input cut the same way or read whole where it is broadcast along that axis: a GEMM by runs of
output rows (B, packed once, read whole by every task) or, with fewer rows than columns and B
over L2 or under 64 rows, by runs of B's packed panels (A read whole, each task writing its
columns of every row), a batched MatMul (attention's heads) by runs of its matrices (A, B and C
cut with them), pooling of one image by channels (or channel blocks), Softmax/LogSoftmax/
LayerNormalization by runs of whole rows, Resize of one image by channels, ConvTranspose of one
image by output-channel vectors (its packed weights cut with them), a Relayout between NCHW and
NCHW<b>c by channel blocks, a Concat along its leading axis (where that is the joined axis, each
task copies the runs of the inputs in its band), and elementwise steps along their leading axis
(seen flat where each input is the output's shape or one element). Nothing is reduced across
tasks, so the split is exact and the tasks can run on any number of threads.

The cost rule decides whether a step splits and into how many tasks, from the step alone (never
from the thread count, so the code, and so the output bits, are the same for any ``threads``): at
least :data:`MIN_TASK_FLOPS` per task (a task must outweigh the pool's dispatch, ~1 us; a
memory-bound step counts :data:`ELEMENT_FLOPS` per element it moves, what that costs beside a
convolution's FMAs, plus 1 per elementwise op, 20 for the transcendental and dividing ones, and
:data:`TAP_FLOPS` per pooling tap; a depthwise conv adds the elements it moves), at most
:data:`MAX_TASKS`, even above 2 (two threads' equal shares), whole channel vectors per conv task.
Anything else (transposed GEMMs, a GEMM whose tasks would want B packed otherwise) is one call.

The int8 kernels (guard.compiler.codegen.quant) split by the same rule with their own cost: a
multiply-accumulate counts :data:`INT8_MAC_FLOPS`, not the two FLOPs of a float FMA, and each byte
the convolution packs as a quarter of a moved element. A convolution (any images, any groups) cuts
into bands of output rows, each packing its own pixels; a matrix product into runs of rows of A and
Y, B read whole as packed for the whole node, or, with fewer than 8 rows (a GEMV), into runs of B's
packed panels, A read whole.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from guard.compiler.codegen.conv.schedule import Geometry, tensor_reads
from guard.compiler.codegen.kernel_plan import Operand, Step
from guard.compiler.codegen.quant.dot import DotClass
from guard.compiler.codegen.quant.geometry import QConvGeometry
from guard.compiler.codegen.split_cuts import (
    balance,
    channel_tasks,
    column_tasks,
    concat_bands,
    even,
)
from guard.compiler.codegen.split_cuts import cut as _cut
from guard.compiler.codegen.split_cuts import leading_axis as _leading_axis
from guard.compiler.codegen.split_cuts import operand_axis as _operand_axis
from guard.compiler.codegen.split_cuts import overlaps as _overlaps
from guard.compiler.codegen.split_cuts import row_tasks as _row_tasks
from guard.compiler.ir.layout import block_of
from guard.compiler.ir.ops import ELEMENTWISE_OPS

MIN_TASK_FLOPS = 500_000  # ~2.5 us of one core's FMAs: a dispatch to a spinning worker
# costs about a microsecond (guard.compiler.codegen.threadpool); ShuffleNet at 2 threads on a
# 2-vCPU znver4 guest: 4.14 ms at 2 MFLOP, 3.68 at 1, 3.44 at 0.5
MAX_TASKS = 8
# What a memory-bound step costs per element it reads and writes, in FLOPs of a
# convolution at full rate (~200 GFLOP/s): measured at 1 thread on znver5, relayouts
# took 0.15-0.26 ns an element and a 3x3 max pooling 0.65 ns an output (0.07 a tap).
ELEMENT_FLOPS = 32
TAP_FLOPS = 8


def conv_tasks(step: Step, width: int) -> tuple[Step, ...]:
    """The tasks of a Conv/FusedConv step, or () when it stays one call."""
    x, w = step.inputs[0], step.inputs[1]
    if x is None or w is None or step.may_alias or x.dtype != "float32":
        return ()
    lay = str(step.attrs.get("layout", "NCHW"))
    blk = block_of(lay)
    geo = Geometry(step.attrs, x.shape, w.shape, width)
    depthwise = geo.mode == "depthwise"
    y = step.outputs[0]
    cost = geo.flops  # a depthwise conv moves as much as it computes: count both
    cost += (math.prod(x.shape) + math.prod(y.shape)) * ELEMENT_FLOPS if depthwise else 0
    want = even(min(MAX_TASKS, cost // MIN_TASK_FLOPS))
    if want < 2:
        return ()
    anchor = int(step.attrs.get("anchor_inputs", len(step.inputs)))
    prog = step.attrs.get("program", ())
    if any(isinstance(r, int) and r < anchor for p in prog for r in p["args"]):
        return ()  # the epilogue reads the conv's own input whole: no slice of it is its
    channels = (lay == "NCHW" or bool(blk and blk % width == 0)) and geo.N == 1
    channels = channels and (geo.g == 1 or depthwise)  # runs of output channels
    unit = blk or width  # channels per slice unit: whole vectors, whole blocks
    units = -(-geo.K // unit)
    # Runs of output channels or bands of output rows (an epilogue that reads a tensor runs
    # its pass over the band, but keeps channel runs where they share evenly): the count
    # that shares best between two threads as the pool deals the tasks, the most tasks on a
    # tie, channels before rows.
    cuts = [(balance(units, n), -n, 0) for n in range(2, min(want, units) + 1, 2) if channels]
    even_runs = min(cuts, default=(2.0,))[0] == 1.0
    rows = geo.OH >= 2 and not (even_runs and tensor_reads(prog, step.inputs))
    cuts += [(balance(geo.OH, n), -n, 1) for n in range(2, min(want, geo.OH) + 1, 2) if rows]
    band = -min((c for c in cuts if c[2]), default=(0, 0, 1))[1]
    bands = _row_tasks(step, geo.OH, band) if band else ()
    if not cuts or min(cuts)[2]:
        return bands
    return channel_tasks(step, -min(cuts)[1], units, unit, depthwise) or bands


def _tasks_along(
    step: Step,
    axis: int,
    cost: int,
    unit: int = 1,
    rule: Callable[[int, Operand], int | str | None] | None = None,
) -> tuple[Step, ...]:
    """Tasks that each write a run of the output along ``axis`` (runs of ``unit``), every
    input cut the same way or read whole; () when the cost rule keeps it one call."""
    y = step.outputs[0]
    units = y.shape[axis]
    n = even(min(MAX_TASKS, units // unit, cost // MIN_TASK_FLOPS))
    if n < 2 or len(step.outputs) != 1:
        return ()
    how = []
    for j, o in enumerate(step.inputs):
        h = (
            None
            if o is None
            else (rule(j, o) if rule else _operand_axis(o, len(y.shape), axis, units))
        )
        if o is not None and h is None:
            return ()
        if o is not None and h == "whole" and _overlaps(o, y):
            return ()  # a task would read what another one writes
        how.append(h)
    chunks = units // unit
    tasks = []
    for i in range(n):
        d0 = chunks * i // n * unit
        d1 = units if i == n - 1 else chunks * (i + 1) // n * unit
        ins = tuple(
            o if o is None or h == "whole" else _cut(o, int(h), d0, d1)  # type: ignore[arg-type]
            for o, h in zip(step.inputs, how, strict=True)
        )
        out = (_cut(y, axis, d0, d1),)
        tasks.append(Step(f"{step.node}#{i}", step.op, "", ins, out, step.attrs, step.may_alias))
    return tuple(tasks)


_HEAVY = frozenset({"Exp", "Log", "Tanh", "Sigmoid", "Erf", "Gelu", "Pow", "Elu", "Selu",
                    "Swish", "Softsign", "Div", "Sqrt", "Reciprocal"})  # fmt: skip


def elementwise_tasks(step: Step) -> tuple[Step, ...]:
    """Elementwise steps cut along the output's leading axis longer than 1; where every
    input has the output's shape or one element, along the output seen flat (runs of
    whole 64-byte lines), so a short leading axis (3 channel blocks) still cuts evenly."""
    y = step.outputs[0]
    prog = step.attrs.get("program") or [{"op": step.op}]
    per = ELEMENT_FLOPS + sum(20 if p["op"] in _HEAVY else 1 for p in prog)
    if "q_lut" in step.attrs and "q_lut_prefix" not in step.attrs:  # a byte table lookup
        per = ELEMENT_FLOPS // 4
    size = math.prod(y.shape)
    line = 64 // np.dtype(y.dtype).itemsize
    if size % line == 0 and all(
        o is None or o.shape == y.shape or math.prod(o.shape) == 1 for o in step.inputs
    ):
        ins = tuple(
            o and dataclasses.replace(o, shape=(size if o.shape == y.shape else 1,))
            for o in step.inputs
        )
        out = tuple(dataclasses.replace(o, shape=(size,)) for o in step.outputs)
        step = dataclasses.replace(step, inputs=ins, outputs=out)
        return _tasks_along(step, 0, size * per, line)
    axis = _leading_axis(y.shape, len(y.shape))
    return () if axis is None else _tasks_along(step, axis, size * per)


def pool_tasks(step: Step) -> tuple[Step, ...]:
    """Pooling of one image in NCHW or NCHW<b>c, cut along channels (or channel blocks)."""
    x, y = step.inputs[0], step.outputs[0]
    lay = str(step.attrs.get("layout", "NCHW"))
    if x is None or y.shape[0] != 1 or (lay != "NCHW" and not block_of(lay)):
        return ()
    window = math.prod(step.attrs.get("kernel_shape", x.shape[2:4]))
    cost = math.prod(y.shape) * ELEMENT_FLOPS + math.prod(y.shape) * window * TAP_FLOPS
    return _tasks_along(step, 1, cost, rule=lambda j, o: 1 if j == 0 else "whole")


def norm_tasks(step: Step) -> tuple[Step, ...]:
    """Softmax, LogSoftmax, LayerNormalization cut into runs of whole rows (the normalised
    axes stay in one task); scale and bias are read whole. Softmax's exp of every element
    counts as a transcendental op does in elementwise steps (20)."""
    x, y = step.inputs[0], step.outputs[0]
    if x is None or x.shape != y.shape:
        return ()
    rank = len(y.shape)
    norm_axis = int(step.attrs.get("axis", -1)) % rank
    axis = _leading_axis(y.shape, norm_axis)
    if axis is None:
        return ()
    return _tasks_along(
        step,
        axis,
        math.prod(y.shape) * (ELEMENT_FLOPS + (20 if step.op == "LayerNormalization" else 40)),
        rule=lambda j, o: axis if j == 0 else "whole",
    )


def gemm_tasks(step: Step, width: int) -> tuple[Step, ...]:
    """A GEMM of one matrix (Gemm without transA, MatMul with a 2-D B and A's leading dims 1)
    cut into runs of output rows (B and row-broadcast operands read whole) or, where
    gemm.emitter.column_ready says so (B packed), into runs of B's panels (A read whole). Only
    where the tasks' kernels take B packed as the whole GEMM's is (same ``nr``). A batched
    MatMul (equal batch dims) by runs of its matrices along its first batch axis longer than 1."""
    from guard.compiler.codegen.gemm.emitter import GemmShape, column_ready, same_panels
    from guard.compiler.tuning.dispatch import gemm_schedule

    a, b, y = step.inputs[0], step.inputs[1], step.outputs[0]
    if a is None or b is None or step.attrs.get("transA", 0) or y.dtype != "float32":
        return ()
    shapes = [None if o is None else o.shape for o in step.inputs]
    gs = GemmShape(step.op, step.attrs, shapes)
    if gs.ok and gs.batch > 1 and (bx := _leading_axis(y.shape, len(y.shape) - 2)) is not None:
        return _tasks_along(step, bx, 2 * gs.batch * gs.M * gs.N * gs.K)
    if not gs.ok or gs.batch != 1 or any(d != 1 for d in y.shape[:-2]) or len(b.shape) != 2:
        return ()
    axis = len(y.shape) - 2
    whole = gemm_schedule(gs, width, record=False)  # a what-if: not counted as a look-up

    def rule(j: int, o: Operand) -> int | str | None:
        return "whole" if j == 1 else _operand_axis(o, len(y.shape), axis, gs.M)

    if b.space == "packed" and column_ready(
        step.op, step.attrs, shapes, whole, width, 8 * MAX_TASKS
    ):
        tasks = _column_tasks(step, gs.N, whole.nr, 2 * gs.M * gs.N * gs.K)
    else:
        tasks = _tasks_along(step, axis, 2 * gs.M * gs.N * gs.K, 8, rule)
    return tasks if all(same_panels(t.op, t.attrs, t.inputs, whole, width) for t in tasks) else ()


def transpose_tasks(step: Step, width: int) -> tuple[Step, ...]:
    """A Transpose cut into bands of one output axis (``band``: axis, start, end), its
    leading one or the next, whichever shares best between two threads (48 channels in
    vectors of 16 would go 16 and 32), the leading one on a tie, then the most tasks; in
    whole vectors where that axis is either side's innermost (its vector tiles still fit)."""
    x, y = step.inputs[0], step.outputs[0]
    lead = _leading_axis(y.shape, len(y.shape))
    if x is None or lead is None or step.may_alias:
        return ()
    perm = step.attrs.get("perm") or list(range(len(y.shape)))[::-1]
    most = min(MAX_TASKS, math.prod(y.shape) * ELEMENT_FLOPS // MIN_TASK_FLOPS)
    cuts = []
    for axis in range(lead, min(lead + 2, len(y.shape))):
        unit = width if len(y.shape) - 1 in (axis, perm[axis]) else 1
        for n in range(2, min(most, -(-y.shape[axis] // unit)) + 1, 2):
            cuts.append((balance(y.shape[axis], n, unit), axis, -n, unit))
    if not cuts:
        return ()
    _, axis, n, unit = min(cuts)
    return _row_tasks(step, y.shape[axis], -n, "band", (axis,), unit)


def lrn_tasks(step: Step) -> tuple[Step, ...]:
    """LRN cut into runs of output channels (``channels``), the whole input read."""
    y = step.outputs[0]
    per = ELEMENT_FLOPS + 2 * int(step.attrs.get("size", 1)) + 20  # the window, a pow
    n = even(min(MAX_TASKS, y.shape[1], math.prod(y.shape) * per // MIN_TASK_FLOPS))
    return _row_tasks(step, y.shape[1], n, "channels") if n > 1 and len(y.shape) == 4 else ()


def conv_transpose_tasks(step: Step, width: int) -> tuple[Step, ...]:
    """A ConvTranspose of one image, group 1, cut into runs of whole output-channel
    vectors: the packed weights ``[K/L][R][S][C][L]`` and the bias are cut with it; one
    whose stride is its kernel (and ConvTransposeInteger) into bands of input rows."""
    from guard.compiler.codegen.conv.transpose import TransposeGeometry
    from guard.compiler.ir.conv_transpose import blockwise

    x, w, y = step.inputs[0], step.inputs[1], step.outputs[0]
    if x is None or w is None or step.may_alias or w.space != "packed":
        return ()
    geo = TransposeGeometry.of(step.attrs, x.shape, w.shape, y.shape)
    if geo.N != 1 or geo.g != 1:
        return ()
    if blockwise(step.attrs, x.shape, w.shape):  # conv/transpose_blocks.py
        n = min(MAX_TASKS, geo.IH, geo.flops // MIN_TASK_FLOPS)
        return _row_tasks(step, geo.IH, n) if n > 1 else ()
    units = geo.padded_kg(width) // width
    n = min(MAX_TASKS, units, geo.flops // MIN_TASK_FLOPS)
    if n < 2:
        return ()
    per = geo.vector_floats(width) * 4
    tasks = []
    for i in range(n):
        u0, u1 = units * i // n, units * (i + 1) // n
        k0, k1 = u0 * width, min(geo.K, u1 * width)
        wshape = (w.shape[0], k1 - k0, *w.shape[2:])
        wt = dataclasses.replace(w, offset=w.offset + u0 * per, shape=wshape)
        ins: list[Operand | None] = [x, wt]
        if len(step.inputs) > 2 and step.inputs[2] is not None:
            ins.append(_cut(step.inputs[2], 0, k0, k1))
        out = (_cut(y, 1, k0, k1),)
        tasks.append(Step(f"{step.node}#{i}", step.op, "", tuple(ins), out, step.attrs, False))
    return tuple(tasks)


def resize_tasks(step: Step) -> tuple[Step, ...]:
    """Resize cut along the output's leading axis longer than 1 when that axis is not
    resized (the channels of one NCHW image): the input is cut the same way."""
    x, y = step.inputs[0], step.outputs[0]
    axis = _leading_axis(y.shape, len(y.shape))
    if x is None or axis is None or x.shape[axis] != y.shape[axis]:
        return ()
    resized = sum(a != b for a, b in zip(x.shape, y.shape, strict=True))
    taps = {"nearest": 1, "linear": 2, "cubic": 4}.get(str(step.attrs.get("mode")), 4)
    cost = math.prod(y.shape) * (ELEMENT_FLOPS + 4 * taps**resized)
    return _tasks_along(step, axis, cost, rule=lambda j, o: axis if j == 0 else "whole")


def concat_tasks(step: Step) -> tuple[Step, ...]:
    """Concat cut along the output's leading axis longer than 1: every input cut the same
    way where that axis comes before the joined one, else into bands of the joined axis,
    each task copying the runs of the inputs in its band."""
    y = step.outputs[0]
    axis, lead = int(step.attrs.get("axis", 0)) % len(y.shape), _leading_axis(y.shape, len(y.shape))
    if lead is None or step.may_alias or any(o is None for o in step.inputs):
        return ()
    cost = math.prod(y.shape) * ELEMENT_FLOPS
    if lead < axis:
        return _tasks_along(step, lead, cost)
    n = even(min(MAX_TASKS, y.shape[axis], cost // MIN_TASK_FLOPS))
    return concat_bands(step, axis, n) if n > 1 and lead == axis else ()


def relayout_tasks(step: Step) -> tuple[Step, ...]:
    """A Relayout of one image between NCHW and NCHW<b>c (C a multiple of b) cut into
    runs of whole channel blocks: the blocked side cut along its blocks, the NCHW side
    along the same channels."""
    x, y = step.inputs[0], step.outputs[0]
    src, dst = str(step.attrs.get("from")), str(step.attrs.get("to"))
    blk = block_of(dst) or block_of(src)
    if x is None or not blk or {src, dst} != {"NCHW", f"NCHW{blk}c"} or x.shape[0] != 1:
        return ()
    flat, blocked = (x, y) if src == "NCHW" else (y, x)
    if flat.shape[1] != blocked.shape[1] * blk:
        return ()
    units = blocked.shape[1]
    n = min(MAX_TASKS, units, math.prod(y.shape) * ELEMENT_FLOPS // MIN_TASK_FLOPS)
    if n < 2:
        return ()
    tasks = []
    for i in range(n):
        u0, u1 = units * i // n, units * (i + 1) // n
        cut = {id(blocked): (u0, u1), id(flat): (u0 * blk, u1 * blk)}
        ins = (_cut(x, 1, *cut[id(x)]),)
        out = (_cut(y, 1, *cut[id(y)]),)
        tasks.append(Step(f"{step.node}#{i}", step.op, "", ins, out, step.attrs, False))
    return tuple(tasks)


# What one int8 multiply-accumulate costs in the rule's float FLOPs: vpdpbusd does 64
# where a float FMA does 16 (32 FLOPs), vpmaddwd 16 per two instructions.
INT8_MAC_FLOPS = 0.5
INT8_CONVS = ("QLinearConv", "ConvInteger", "FusedConvInteger")


def int8_tasks(step: Step, width: int) -> tuple[Step, ...]:
    """The int8 convolution of one or more images cut into bands of output rows (each task
    packs its own pixels; the weights and the input are read whole), the int8 matrix
    product into runs of rows of A and Y (B, packed, read whole) or of B's columns. A MAC
    costs :data:`INT8_MAC_FLOPS`, a packed or streamed byte a quarter element moved."""
    x, y = step.inputs[0], step.outputs[0]
    if x is None or step.may_alias:
        return ()
    if step.op in INT8_CONVS:
        w = step.inputs[3 if step.op == "QLinearConv" else 1]
        if w is None:
            return ()
        geo = QConvGeometry.of(step.attrs, x.shape, w.shape)
        direct = bool(step.attrs.get("q_dw") or step.attrs.get("q_dwdot"))  # quant/depthwise*
        cost = geo.task_cost(direct, INT8_MAC_FLOPS, ELEMENT_FLOPS)
        want = even(min(MAX_TASKS, cost // MIN_TASK_FLOPS, geo.OH))
        if want < 2:
            return ()
        return _row_tasks(step, geo.OH, want)
    if len(y.shape) < 2:
        return ()
    axis = len(y.shape) - 2
    m, n, k = math.prod(y.shape[:-1]), y.shape[-1], x.shape[-1]
    if m < 8 and "q_nv" in step.attrs:  # a GEMV: streaming B is its cost
        nr = int(step.attrs["q_nv"]) * DotClass(str(step.attrs["q_dot"]), width).width
        return _column_tasks(
            step, n, nr, int(m * n * k * INT8_MAC_FLOPS) + n * k * ELEMENT_FLOPS // 4
        )
    if any(d != 1 for d in y.shape[:-2]):
        return ()
    cost = int(m * n * k * INT8_MAC_FLOPS) + m * k * ELEMENT_FLOPS // 4
    return _tasks_along(step, axis, cost, 4, lambda j, o: axis if j == 0 else "whole")


def _column_tasks(step: Step, n: int, nr: int, cost: int) -> tuple[Step, ...]:
    """A matrix product cut into runs of B's packed panels (split_cuts.column_tasks)."""
    want = even(min(MAX_TASKS, -(-n // nr), cost // MIN_TASK_FLOPS))
    return column_tasks(step, n, nr, want) if want > 1 else ()


def split_step(step: Step, width: int) -> tuple[Step, ...]:
    """The step's tasks by the cost rule, () to run it as one call."""
    if step.op in INT8_CONVS or step.op in ("QLinearMatMul", "MatMulInteger"):
        return int8_tasks(step, width)
    if step.op in ("Conv", "FusedConv"):
        return conv_tasks(step, width)
    if step.op in ("Gemm", "FusedGemm", "MatMul", "FusedMatMul"):
        return gemm_tasks(step, width)
    if step.op in ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"):
        return pool_tasks(step)
    if step.op in ("Softmax", "LogSoftmax", "LayerNormalization"):
        return norm_tasks(step)
    if step.op in ("LRN", "Transpose"):
        return lrn_tasks(step) if step.op == "LRN" else transpose_tasks(step, width)
    if step.op == "Resize":
        return resize_tasks(step)
    if step.op in ("ConvTranspose", "ConvTransposeInteger", "FusedConvTransposeInteger"):
        return conv_transpose_tasks(step, width)
    if step.op == "Relayout" and not step.may_alias:
        return relayout_tasks(step)
    if step.op == "Concat":
        return concat_tasks(step)
    if step.op in ELEMENTWISE_OPS or step.op == "FusedElementwise":
        return elementwise_tasks(step)
    return ()
