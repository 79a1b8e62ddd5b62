"""Memory planning: every arena tensor gets an offset in one buffer (the arena).

Plan, then emit: :func:`plan_memory` returns a frozen :class:`MemoryPlan` that the runtime
and codegen only read.

1. Aliasing, decided in schedule order, groups tensors into *buffers*:
   - views: Reshape/Flatten/Squeeze/Unsqueeze/Identity outputs share their input's bytes;
   - split elision: Split outputs are consecutive slices of the input's bytes, and a
     Slice (one axis, step 1) is one such range;
   - concat elision: each Concat input is written straight into its slice of the output;
   - in-place: an elementwise op writes over an input of the same shape and dtype.
   The node of an elided view/concat/split/slice does nothing at run time. A slice makes
   its whole buffer live as long as any part, which can raise the peak: each concat,
   split or slice elision that raises the lower bound is undone (checked one at a time,
   in schedule order), and ``MemoryPlan.copies`` says why each view-able node stayed a
   copy.
2. Liveness of a buffer: the union of its tensors' live intervals (schedule.liveness).
3. Greedy offsets: buffers largest first, each at the lowest 64-byte-aligned offset that
   collides with no placed buffer whose interval overlaps its own. Equal sizes are
   common (layers share shapes), so three tie-breaks are tried, then two classic
   alternative orders (size x lifetime, greedy by breadth); the lowest arena wins and
   ``MemoryPlan.strategy`` names it.

Numbers: ``arena_bytes`` (end of the highest buffer), ``lower_bound_bytes`` (max over
steps of the bytes of live buffers: no placement can do better with these buffers),
``fragmentation`` = arena / lower bound - 1, ``naive_bytes`` (every tensor its own
allocation) and ``unaliased_peak_bytes`` (the lower bound without any aliasing).

Hazards (why each alias is safe):
- Concat/Split slices are contiguous only when every dim before the axis is 1; each slice
  must start 64-byte aligned, its input must be a node output whose buffer is exactly
  that tensor (not a graph input, not already a slice of another buffer), and appear once.
- In-place writes destroy the input: allowed only when no tensor sharing that buffer is
  read after this step and the buffer holds no graph output (outputs must survive).
- Views of constants are not planned as views (constants live in the weights blob).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from guard.compiler import ops
from guard.compiler.schedule import ALIGNMENT, GraphView, Interval, align, liveness

# Which ops may alias or write in place is the op-traits table's answer (guard.compiler.ops);
# whether they do, for this schedule, is this planner's, and the frozen MemoryPlan is the
# one record of it that the runtime and the code generator read.
VIEW_OPS = ops.ALIAS_OPS
INPLACE_OPS = ops.INPLACE_OPS
SLICE_VIEW_OPS = (
    ops.ops_where(view="concat") | ops.ops_where(view="split") | ops.ops_where(view="slice")
)
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Slot:
    """Where one tensor lives: arena byte ``offset``, its ``buffer`` and how it got there."""

    name: str
    offset: int
    nbytes: int
    buffer: int
    start: int
    end: int
    how: str  # "own", "view", "inplace", "concat-part", "split-part", "slice-part"


@dataclass(frozen=True)
class BufferInfo:
    id: int
    offset: int
    nbytes: int  # aligned
    start: int
    end: int
    tensors: tuple[str, ...]


@dataclass(frozen=True)
class MemoryPlan:
    """Frozen result of memory planning; later stages only read it."""

    alignment: int
    arena_bytes: int
    lower_bound_bytes: int
    naive_bytes: int
    unaliased_peak_bytes: int
    order: tuple[int, ...]
    slots: Mapping[str, Slot]
    buffers: tuple[BufferInfo, ...]
    elided_nodes: tuple[str, ...]  # nodes that are no-ops at run time
    inplace_nodes: tuple[str, ...]
    strategy: str = "largest-first/earliest"
    # View-able nodes (reshape, concat, split, slice) kept as copies, and why: where to look
    # when "the model no longer fits".
    copies: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def fragmentation(self) -> float:
        return self.arena_bytes / self.lower_bound_bytes - 1 if self.lower_bound_bytes else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "arena_bytes": self.arena_bytes,
            "lower_bound_bytes": self.lower_bound_bytes,
            "fragmentation": round(self.fragmentation, 6),
            "naive_bytes": self.naive_bytes,
            "unaliased_peak_bytes": self.unaliased_peak_bytes,
            "buffers": len(self.buffers),
            "tensors": len(self.slots),
            "elided_nodes": len(self.elided_nodes),
            "inplace_nodes": len(self.inplace_nodes),
            "copies": len(self.copies),
            "alignment": self.alignment,
            "strategy": self.strategy,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            **self.summary(),
            "order": list(self.order),
            "slots": [
                [s.name, s.offset, s.nbytes, s.buffer, s.start, s.end, s.how]
                for s in self.slots.values()
            ],
            "buffer_table": [
                [b.id, b.offset, b.nbytes, b.start, b.end, list(b.tensors)] for b in self.buffers
            ],
            "elided_nodes": list(self.elided_nodes),
            "inplace_nodes": list(self.inplace_nodes),
            "copy_reasons": dict(self.copies),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MemoryPlan:
        if d.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(
                f"memory plan schema_version {d.get('schema_version')!r}, expected {SCHEMA_VERSION}"
            )
        slots = {r[0]: Slot(*r) for r in d["slots"]}
        buffers = tuple(
            BufferInfo(b[0], b[1], b[2], b[3], b[4], tuple(b[5])) for b in d["buffer_table"]
        )
        return cls(
            alignment=d["alignment"],
            arena_bytes=d["arena_bytes"],
            lower_bound_bytes=d["lower_bound_bytes"],
            naive_bytes=d["naive_bytes"],
            unaliased_peak_bytes=d["unaliased_peak_bytes"],
            order=tuple(d["order"]),
            slots=MappingProxyType(slots),
            buffers=buffers,
            elided_nodes=tuple(d["elided_nodes"]),
            inplace_nodes=tuple(d["inplace_nodes"]),
            strategy=d["strategy"],
            copies=MappingProxyType(dict(d.get("copy_reasons", {}))),
        )


class _Buffers:
    """Union of tensors into buffers, with each tensor's byte offset inside its buffer."""

    def __init__(self) -> None:
        self.of: dict[str, tuple[int, int]] = {}  # tensor -> (buffer, offset in buffer)
        self.size: dict[int, int] = {}
        self.members: dict[int, list[str]] = {}
        self.how: dict[str, str] = {}

    def new(self, name: str, nbytes: int, how: str = "own") -> None:
        b = len(self.size)
        while b in self.size:
            b += 1
        self.size[b] = nbytes
        self.members[b] = [name]
        self.of[name] = (b, 0)
        self.how[name] = how

    def join(self, name: str, like: str, offset: int, how: str) -> None:
        b, base = self.of[like]
        self.of[name] = (b, base + offset)
        self.members[b].append(name)
        self.how[name] = how

    def move(self, src: int, dst: int, offset: int) -> None:
        for t in self.members.pop(src):
            self.of[t] = (dst, self.of[t][1] + offset)
            self.members[dst].append(t)
        del self.size[src]


def _outer_is_one(shape: Sequence[int], axis: int) -> bool:
    return all(d == 1 for d in shape[:axis])


def _norm_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _slice_offset(g: GraphView, n: Any, data: str) -> int | None:
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


def _alias(
    g: GraphView,
    order: Sequence[int],
    iv: Mapping[str, Interval],
    inplace: bool,
    elide: bool,
    deny: frozenset[int] = frozenset(),
) -> tuple[_Buffers, list[str], list[str], dict[str, str]]:
    bufs = _Buffers()
    nbytes = {t: g.tensors[t].nbytes for t in g.arena_tensors()}
    for t in g.inputs:
        if t in nbytes:
            bufs.new(t, nbytes[t])
    outputs = set(g.outputs)
    elided: list[str] = []
    inplaced: list[str] = []
    copies: dict[str, str] = {}

    def buffer_end(b: int) -> int:
        return max(iv[t].end for t in bufs.members[b])

    def whole(t: str) -> bool:
        """``t`` is the whole of a buffer of its own making (not a graph input, not a slice)."""
        b, off = bufs.of[t]
        return (
            off == 0
            and bufs.size[b] == nbytes[t]
            and g.producer.get(t) is not None
            and not any(m in g.inputs for m in bufs.members[b])
        )

    for step, i in enumerate(order):
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
            off = _slice_offset(g, n, data) if data in nbytes else None
            if data not in nbytes:
                why = "its input is a constant (not in the arena)"
            elif off is None:
                why = "not one contiguous range (several axes, a step, or outer dims not 1)"
            elif off % ALIGNMENT:
                why = f"the range starts off the {ALIGNMENT}-byte alignment"
            else:
                bufs.join(outs[0], data, off, "slice-part")
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
    return bufs, elided, inplaced, copies


def _concat_refusal(
    g: GraphView,
    n: Any,
    out: str,
    parts: list[str],
    nbytes: Mapping[str, int],
    bufs: _Buffers,
    whole: Any,
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
    offs = [sum(nbytes[v] for v in parts[:k]) for k in range(len(parts))]
    if sum(nbytes[v] for v in parts) != nbytes[out] or any(o % ALIGNMENT for o in offs):
        return f"a slice would start off the {ALIGNMENT}-byte alignment"
    return None


# Orders tried by the greedy placer, first to last; the lowest arena wins (ties keep the
# earlier). The first three are "largest first" and differ only in how equal sizes are
# broken (many layers share a shape). Two more are the classic alternatives for when
# largest-first leaves holes: largest size x lifetime first, and "greedy by breadth"
# (TFLite): visit steps by live bytes, most first, placing each step's unplaced tensors
# largest first. Every order uses the same lowest-non-colliding-offset rule.
_TIE_BREAKS = {
    "largest-first/earliest": lambda sz, it, b: (-sz, it.start, b),
    "largest-first/longest": lambda sz, it, b: (-sz, it.start - it.end, it.start, b),
    "largest-first/latest": lambda sz, it, b: (-sz, -it.end, b),
    "largest-area-first": lambda sz, it, b: (-sz * (it.end - it.start + 1), it.start, b),
}


def _breadth_key(sizes: Mapping[int, int], ivs: Mapping[int, Interval]) -> Any:
    steps = max((it.end for it in ivs.values()), default=0) + 1
    live = [0] * (steps + 1)
    for b, it in ivs.items():
        live[it.start] += sizes[b]
        live[it.end + 1] -= sizes[b]
    for t in range(1, steps):
        live[t] += live[t - 1]
    rank = {t: r for r, t in enumerate(sorted(range(steps), key=lambda t: (-live[t], t)))}
    # A buffer is placed when its busiest step comes up: the minimum rank over its steps.
    first = {b: min(rank[t] for t in range(it.start, it.end + 1)) for b, it in ivs.items()}
    return lambda sz, it, b: (first[b], -sz, it.start, b)


def _place(sizes: Mapping[int, int], ivs: Mapping[int, Interval], key: Any) -> dict[int, int]:
    """Greedy: in ``key`` order, each buffer at the lowest offset clear of every placed
    buffer whose interval overlaps its own (sizes are aligned, so offsets stay aligned)."""
    offsets: dict[int, int] = {}
    placed: list[tuple[int, int, Interval]] = []  # (offset, size, interval)
    for b in sorted(sizes, key=lambda b: key(sizes[b], ivs[b], b)):
        size, it = sizes[b], ivs[b]
        if size == 0:
            offsets[b] = 0
            continue
        busy = sorted((o, o + s) for o, s, other in placed if other.overlaps(it))
        off = 0
        for lo, hi in busy:
            if off + size <= lo:
                break
            off = max(off, hi)
        offsets[b] = off
        placed.append((off, size, it))
    return offsets


def _best_placement(
    sizes: Mapping[int, int], ivs: Mapping[int, Interval], lower: int
) -> tuple[dict[int, int], int, str]:
    best: tuple[dict[int, int], int, str] | None = None
    keys = {**_TIE_BREAKS, "greedy-by-breadth": _breadth_key(sizes, ivs)}
    for name, key in keys.items():
        offsets = _place(sizes, ivs, key)
        arena = max((offsets[b] + sizes[b] for b in sizes), default=0)
        if best is None or arena < best[1]:
            best = (offsets, arena, name)
        if arena == lower:
            break
    assert best is not None
    return best


def plan_memory(
    g: GraphView,
    order: Sequence[int] | None = None,
    *,
    inplace: bool = True,
    elide: bool = True,
    alignment: int = ALIGNMENT,
) -> MemoryPlan:
    """Plan every arena tensor of ``g`` for ``order`` (default: the view's own order)."""
    order = tuple(range(len(g.nodes))) if order is None else tuple(order)
    iv = liveness(g, order)
    steps = max(len(order), 1)

    def buffers(deny: frozenset[int]) -> tuple[Any, ...]:
        bufs, elided, inplaced, copies = _alias(g, order, iv, inplace, elide, deny)
        sizes = {b: align(s, alignment) for b, s in bufs.size.items()}
        biv = {
            b: Interval(min(iv[t].start for t in ms), max(iv[t].end for t in ms))
            for b, ms in bufs.members.items()
        }
        return bufs, elided, inplaced, copies, sizes, biv, _peak(sizes, biv, steps)

    # Slices make the whole concat/split buffer live as long as any part: undo each
    # elision that raises the lower bound (checked one at a time, in schedule order).
    deny: frozenset[int] = frozenset()
    bufs, elided, inplaced, copies, sizes, biv, lower = buffers(deny)
    index = {n.name: i for i, n in enumerate(g.nodes)}
    for name in [e for e in elided if g.nodes[index[e]].op in SLICE_VIEW_OPS]:
        trial = buffers(deny | {index[name]})
        if trial[-1] < lower:
            deny |= {index[name]}
            bufs, elided, inplaced, copies, sizes, biv, lower = trial
    offsets, arena, strategy = _best_placement(sizes, biv, lower)
    own = {t: align(g.tensors[t].nbytes, alignment) for t in iv}
    unaliased = _peak(own, iv, steps)
    slots = {}
    for t in g.arena_tensors():
        b, off = bufs.of[t]
        slots[t] = Slot(
            t, offsets[b] + off, g.tensors[t].nbytes, b, iv[t].start, iv[t].end, bufs.how[t]
        )
    buffers = tuple(
        BufferInfo(b, offsets[b], sizes[b], biv[b].start, biv[b].end, tuple(bufs.members[b]))
        for b in sorted(sizes)
    )
    return MemoryPlan(
        alignment=alignment,
        arena_bytes=arena,
        lower_bound_bytes=lower,
        naive_bytes=sum(own.values()),
        unaliased_peak_bytes=unaliased,
        order=order,
        slots=MappingProxyType(slots),
        buffers=buffers,
        elided_nodes=tuple(elided),
        inplace_nodes=tuple(inplaced),
        strategy=strategy,
        copies=MappingProxyType(dict(copies)),
    )


def _peak(sizes: Mapping[Any, int], ivs: Mapping[Any, Interval], steps: int) -> int:
    delta = [0] * (steps + 1)
    for k, s in sizes.items():
        delta[ivs[k].start] += s
        delta[ivs[k].end + 1] -= s
    peak = cur = 0
    for s in range(steps):
        cur += delta[s]
        peak = max(peak, cur)
    return peak


def check_plan(plan: MemoryPlan) -> None:
    """Raise AssertionError if two simultaneously live buffers overlap or one leaves the arena."""
    bs = plan.buffers
    for b in bs:
        assert b.offset % plan.alignment == 0, f"buffer {b.id} misaligned at {b.offset}"
        assert 0 <= b.offset and b.offset + b.nbytes <= plan.arena_bytes, (
            f"buffer {b.id} outside arena"
        )
    for x in range(len(bs)):
        for y in range(x + 1, len(bs)):
            a, b = bs[x], bs[y]
            if a.nbytes == 0 or b.nbytes == 0:
                continue
            if a.start <= b.end and b.start <= a.end:
                assert a.offset + a.nbytes <= b.offset or b.offset + b.nbytes <= a.offset, (
                    f"buffers {a.id} {a.tensors} and {b.id} {b.tensors} overlap while both live"
                )
    assert plan.arena_bytes >= plan.lower_bound_bytes
