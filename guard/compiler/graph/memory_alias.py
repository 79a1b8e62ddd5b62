"""Aliasing for the memory planner: which tensors share bytes, decided in schedule order.

Tensors are grouped into *buffers* (guard.compiler.graph.memory places the buffers):
- views: Reshape and Identity outputs share their input's bytes (the frontend imports
  Flatten, Squeeze and Unsqueeze as Reshape);
- split elision: Split outputs are consecutive slices of the input's bytes, and a Slice
  (one axis, step 1) is one such range;
- concat elision: each Concat input is written straight into its slice of the output;
- in-place: an elementwise op writes over an input of the same shape and dtype.
Each view-able node that stays a copy gets the reason (``Aliasing.copies``).

Hazards (why each alias is safe):
- Concat/Split slices are contiguous only when every dim before the axis is 1; each slice
  must start 64-byte aligned, its input must be a node output whose buffer is exactly
  that tensor (not a graph input, not already a slice of another buffer), and appear once.
- In-place writes destroy the input: allowed only when no tensor sharing that buffer is
  read after this step and the buffer holds no graph output (outputs must survive).
- Views of constants are not planned as views (constants live in the weights blob).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from guard.compiler.graph.view import ALIGNMENT, GraphView, Interval, OpNode
from guard.compiler.ir import ops

# Which ops may alias or write in place is the op-traits table's answer (guard.compiler.ir.ops);
# whether they do, for this schedule, is this module's, and the frozen MemoryPlan is the
# one record of it that the runtime and the code generator read.
VIEW_OPS = ops.ALIAS_OPS
INPLACE_OPS = ops.INPLACE_OPS
SLICE_VIEW_OPS = (
    ops.ops_where(view="concat") | ops.ops_where(view="split") | ops.ops_where(view="slice")
)


class Buffers:
    """Union of tensors into buffers, with each tensor's byte offset inside its buffer."""

    def __init__(self) -> None:
        self.of: dict[str, tuple[int, int]] = {}  # tensor -> (buffer, offset in buffer)
        self.size: dict[int, int] = {}
        # tuples, so a copy (the planner's trials resume from copies) shares them
        self.members: dict[int, tuple[str, ...]] = {}
        self.how: dict[str, str] = {}

    def new(self, name: str, nbytes: int, how: str = "own") -> None:
        b = len(self.size)
        while b in self.size:
            b += 1
        self.size[b] = nbytes
        self.members[b] = (name,)
        self.of[name] = (b, 0)
        self.how[name] = how

    def join(self, name: str, like: str, offset: int, how: str) -> None:
        b, base = self.of[like]
        self.of[name] = (b, base + offset)
        self.members[b] += (name,)
        self.how[name] = how

    def copy(self) -> Buffers:
        out = Buffers()
        out.of, out.size, out.how = dict(self.of), dict(self.size), dict(self.how)
        out.members = dict(self.members)
        return out

    def move(self, src: int, dst: int, offset: int) -> None:
        moved = self.members.pop(src)
        for t in moved:
            self.of[t] = (dst, self.of[t][1] + offset)
        self.members[dst] += moved
        del self.size[src]


@dataclass(frozen=True)
class Aliasing:
    """The buffers of one aliasing decision and the nodes it made no-ops."""

    bufs: Buffers
    elided: list[str]  # view/concat/split/slice nodes that do nothing at run time
    inplaced: list[str]  # nodes that write over an input
    copies: dict[str, str]  # view-able nodes kept as copies -> why
    # the decisions made before each step asked for (``alias_buffers``' keep_at)
    before: dict[int, Aliasing] = field(default_factory=dict)

    def copy(self) -> Aliasing:
        return Aliasing(self.bufs.copy(), list(self.elided), list(self.inplaced), dict(self.copies))


def _outer_is_one(shape: Sequence[int], axis: int) -> bool:
    return all(d == 1 for d in shape[:axis])


def _norm_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _slice_offset(g: GraphView, n: OpNode, data: str) -> int | None:
    """Byte offset of a Slice's output inside its input, when it is one contiguous range.

    That needs one axis, step 1, and every dim before the axis equal to 1.
    """
    a = n.attrs
    axes, starts, ends, steps = (list(a.get(k, [])) for k in ("axes", "starts", "ends", "steps"))
    if len(axes) != 1 or len(starts) != 1 or len(ends) != 1 or steps not in ([1], []):
        return None
    t = g.tensors[data]
    axis = _norm_axis(int(axes[0]), len(t.shape))
    if not _outer_is_one(t.shape, axis):
        return None
    r = range(t.shape[axis])[slice(int(starts[0]), int(ends[0]), 1)]
    inner = int(np.prod(t.shape[axis + 1 :], dtype=np.int64)) * np.dtype(t.dtype).itemsize
    if len(r) * inner != g.tensors[n.outputs[0]].nbytes:
        return None
    return (r.start if len(r) else 0) * inner


def alias_buffers(
    g: GraphView,
    order: Sequence[int],
    iv: Mapping[str, Interval],
    inplace: bool,
    elide: bool,
    deny: frozenset[int] = frozenset(),
    sizes: Mapping[str, int] | None = None,
    *,
    resume: tuple[int, Aliasing] | None = None,
    keep_at: Collection[int] = (),
) -> Aliasing:
    """Group ``g``'s arena tensors into buffers, in schedule ``order``.

    ``deny`` holds the indices of concat/split/slice nodes that must stay copies (the
    planner's undo of elisions that raised the lower bound); ``sizes``, every arena
    tensor's bytes, when the caller has them (the planner's trials share one map).
    ``resume`` = (step, the decisions before it, taken with the same ``deny`` below that
    step): the walk goes on from there (the decisions before a step never depend on the
    later ones); ``keep_at``: the steps before which the decisions are kept
    (``Aliasing.before``).
    """
    nbytes = {t: g.tensors[t].nbytes for t in g.arena_tensors()} if sizes is None else sizes
    first = 0
    if resume is None:
        bufs = Buffers()
        for t in g.inputs:
            if t in nbytes:
                bufs.new(t, nbytes[t])
        elided: list[str] = []
        inplaced: list[str] = []
        copies: dict[str, str] = {}
    else:
        first, at = resume
        at = at.copy()
        bufs, elided, inplaced, copies = at.bufs, at.elided, at.inplaced, at.copies
    outputs = set(g.outputs)
    before: dict[int, Aliasing] = {}

    def buffer_end(b: int) -> int:
        return max(iv[t].end for t in bufs.members[b])

    # Buffers holding a graph input (or a view of one) are never parts of a concat, so
    # they keep their ids.
    input_bufs = {bufs.of[t][0] for t in g.inputs if t in nbytes}

    def whole(t: str) -> bool:
        """``t`` is the whole of a buffer of its own making (not a graph input, not a slice)."""
        b, off = bufs.of[t]
        return (
            off == 0
            and bufs.size[b] == nbytes[t]
            and g.producer.get(t) is not None
            and b not in input_bufs
        )

    for step in range(first, len(order)):
        i = order[step]
        if step in keep_at:
            before[step] = Aliasing(bufs, elided, inplaced, copies).copy()
        n = g.nodes[i]
        outs = [o for o in n.outputs if o in nbytes]
        data = n.inputs[0] if n.inputs else ""
        why: str | None = None  # why a view-able node stays a copy
        if elide and n.op in VIEW_OPS and len(outs) == 1:
            if data not in nbytes:
                why = "its input is a constant (not in the arena)"
            elif (
                nbytes[data] != nbytes[outs[0]] or g.tensors[data].dtype != g.tensors[outs[0]].dtype
            ):
                why = "input and output differ in bytes or dtype"
            else:
                bufs.join(outs[0], data, 0, "view")
                elided.append(n.name)
                continue
        elif elide and n.op in SLICE_VIEW_OPS and i in deny:
            why = "eliding it raised the lower bound (the whole buffer would stay live)"
        elif elide and n.op == "Split" and len(outs) == len(n.outputs):
            offs, cur = [], 0
            for o in outs:
                offs.append(cur)
                cur += nbytes[o]
            if data not in nbytes:
                why = "its input is a constant (not in the arena)"
            elif not _outer_is_one(
                g.tensors[data].shape,
                _norm_axis(int(n.attrs.get("axis", 0)), len(g.tensors[data].shape)),
            ):
                why = "dims before the axis are not all 1: parts are strided"
            elif cur != nbytes[data] or any(o % ALIGNMENT for o in offs):
                why = f"a part would start off the {ALIGNMENT}-byte alignment"
            else:
                for o, off in zip(outs, offs, strict=True):
                    bufs.join(o, data, off, "split-part")
                elided.append(n.name)
                continue
        elif elide and n.op == "Slice" and len(outs) == 1:
            start = _slice_offset(g, n, data) if data in nbytes else None
            if data not in nbytes:
                why = "its input is a constant (not in the arena)"
            elif start is None:
                why = "not one contiguous range (several axes, a step, or outer dims not 1)"
            elif start % ALIGNMENT:
                why = f"the range starts off the {ALIGNMENT}-byte alignment"
            else:
                bufs.join(outs[0], data, start, "slice-part")
                elided.append(n.name)
                continue
        elif elide and n.op == "Concat" and len(outs) == 1:
            out = outs[0]
            parts = [v for v in n.inputs if v]
            why = _concat_refusal(g, n, out, parts, nbytes, bufs, whole)
            if why is None:
                bufs.new(out, nbytes[out])
                dst = bufs.of[out][0]
                off = 0
                for v in parts:
                    src = bufs.of[v][0]
                    for t in bufs.members[src]:
                        if bufs.how[t] == "own":
                            bufs.how[t] = "concat-part"
                    bufs.move(src, dst, off)
                    off += nbytes[v]
                elided.append(n.name)
                continue
        if why is not None:
            copies[n.name] = why
        if inplace and n.op in INPLACE_OPS and len(outs) >= 1:
            out = outs[0]
            for v in dict.fromkeys(x for x in n.inputs if x):
                if v not in nbytes or g.tensors[v].shape != g.tensors[out].shape:
                    continue
                if g.tensors[v].dtype != g.tensors[out].dtype:
                    continue
                b = bufs.of[v][0]
                if buffer_end(b) > step or any(m in outputs for m in bufs.members[b]):
                    continue
                bufs.join(out, v, 0, "inplace")
                inplaced.append(n.name)
                break
            else:
                bufs.new(out, nbytes[out])
            for o in outs[1:]:
                bufs.new(o, nbytes[o])
            continue
        for o in outs:
            bufs.new(o, nbytes[o])
    return Aliasing(bufs, elided, inplaced, copies, before)


def _concat_refusal(
    g: GraphView,
    n: OpNode,
    out: str,
    parts: list[str],
    nbytes: Mapping[str, int],
    bufs: Buffers,
    whole: Callable[[str], bool],
) -> str | None:
    """None when a Concat can be elided, else why not."""
    shape = g.tensors[out].shape
    if not _outer_is_one(shape, _norm_axis(int(n.attrs.get("axis", 0)), len(shape))):
        return "dims before the axis are not all 1: slices are strided"
    if len(set(parts)) != len(parts):
        return "an input appears twice"
    for v in parts:
        if v not in nbytes:
            return f"input {v!r} is a constant"
        if g.producer.get(v) is None:
            return f"input {v!r} is a graph input (written by the caller, not a node)"
        if not whole(v):
            return f"input {v!r} already lives inside another buffer (a slice or an alias)"
    if len({bufs.of[v][0] for v in parts}) != len(parts):
        return "two inputs share one buffer"
    offs, total = [], 0
    for v in parts:
        offs.append(total)
        total += nbytes[v]
    if total != nbytes[out] or any(o % ALIGNMENT for o in offs):
        return f"a slice would start off the {ALIGNMENT}-byte alignment"
    return None
