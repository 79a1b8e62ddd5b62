"""Memory planning: every arena tensor gets an offset in one buffer (the arena).

Plan, then emit: :func:`plan_memory` returns a frozen :class:`MemoryPlan` that the runtime
and codegen only read.

1. Aliasing, decided in schedule order, groups tensors into *buffers*
   (guard.compiler.graph.memory_alias: views, concat/split/slice elision, in-place writes, and
   why each alias is safe). The node of an elided view/concat/split/slice does nothing
   at run time. A slice makes its whole buffer live as long as any part, which can raise
   the peak: each concat, split or slice elision that raises the lower bound is undone
   here (checked one at a time, in schedule order), and ``MemoryPlan.copies`` says why
   each view-able node stayed a copy.
2. Liveness of a buffer: the union of its tensors' live intervals (graph_view.liveness).
3. Greedy offsets (guard.compiler.graph.memory_place): buffers largest first, each at the
   lowest 64-byte-aligned offset that collides with no placed buffer whose interval
   overlaps its own; three tie-breaks and two alternative orders are tried, the lowest
   arena wins and ``MemoryPlan.strategy`` names it.

Numbers: ``arena_bytes`` (end of the highest buffer), ``lower_bound_bytes`` (max over
steps of the bytes of live buffers: no placement can do better with these buffers),
``fragmentation`` = arena / lower bound - 1, ``naive_bytes`` (every tensor its own
allocation) and ``unaliased_peak_bytes`` (the lower bound without any aliasing).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypedDict

from guard.compiler.graph.memory_alias import SLICE_VIEW_OPS, Aliasing, alias_buffers
from guard.compiler.graph.memory_place import best_placement, peak
from guard.compiler.graph.view import ALIGNMENT, GraphView, Interval, align, liveness

SCHEMA_VERSION = 1

SlotRow = tuple[str, int, int, int, int, int, str]  # Slot's fields, in order
BufferRow = tuple[int, int, int, int, int, list[str]]  # BufferInfo's fields, in order


class MemorySummary(TypedDict):
    """:meth:`MemoryPlan.summary`: the plan's numbers (what the results' memory block shows)."""

    arena_bytes: int
    lower_bound_bytes: int
    fragmentation: float
    naive_bytes: int
    unaliased_peak_bytes: int
    buffers: int
    tensors: int
    elided_nodes: int
    inplace_nodes: int
    copies: int
    alignment: int
    strategy: str


class MemoryPlanFile(TypedDict):
    """:meth:`MemoryPlan.to_dict`: the summary's numbers and the whole plan (an artefact's
    memory_plan.json, where the node lists replace the summary's counts)."""

    schema_version: int
    arena_bytes: int
    lower_bound_bytes: int
    fragmentation: float
    naive_bytes: int
    unaliased_peak_bytes: int
    buffers: int
    tensors: int
    elided_nodes: list[str]
    inplace_nodes: list[str]
    copies: int
    alignment: int
    strategy: str
    order: list[int]
    slots: list[SlotRow]
    buffer_table: list[BufferRow]
    copy_reasons: dict[str, str]


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

    def summary(self) -> MemorySummary:
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

    def to_dict(self) -> MemoryPlanFile:
        sm = self.summary()
        return {
            "schema_version": SCHEMA_VERSION,
            "arena_bytes": sm["arena_bytes"],
            "lower_bound_bytes": sm["lower_bound_bytes"],
            "fragmentation": sm["fragmentation"],
            "naive_bytes": sm["naive_bytes"],
            "unaliased_peak_bytes": sm["unaliased_peak_bytes"],
            "buffers": sm["buffers"],
            "tensors": sm["tensors"],
            "elided_nodes": list(self.elided_nodes),
            "inplace_nodes": list(self.inplace_nodes),
            "copies": sm["copies"],
            "alignment": sm["alignment"],
            "strategy": sm["strategy"],
            "order": list(self.order),
            "slots": [
                (s.name, s.offset, s.nbytes, s.buffer, s.start, s.end, s.how)
                for s in self.slots.values()
            ],
            "buffer_table": [
                (b.id, b.offset, b.nbytes, b.start, b.end, list(b.tensors)) for b in self.buffers
            ],
            "copy_reasons": dict(self.copies),
        }

    @classmethod
    def from_dict(cls, d: MemoryPlanFile) -> MemoryPlan:
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


@dataclass(frozen=True)
class _Trial:
    """One aliasing decision with its aligned buffer sizes, intervals and lower bound."""

    aliasing: Aliasing
    sizes: dict[int, int]
    intervals: dict[int, Interval]
    lower: int


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
    nbytes = {t: g.tensors[t].nbytes for t in g.arena_tensors()}

    def trial(
        deny: frozenset[int], resume: tuple[int, Aliasing] | None = None, keep: Set[int] = set()
    ) -> _Trial:
        a = alias_buffers(g, order, iv, inplace, elide, deny, nbytes, resume=resume, keep_at=keep)
        sizes = {b: align(s, alignment) for b, s in a.bufs.size.items()}
        biv = {
            b: iv[ms[0]]
            if len(ms) == 1
            else Interval(min(iv[t].start for t in ms), max(iv[t].end for t in ms))
            for b, ms in a.bufs.members.items()
        }
        return _Trial(a, sizes, biv, peak(sizes, biv, steps))

    # Slices make the whole concat/split buffer live as long as any part: undo each
    # elision that raises the lower bound (checked one at a time, in schedule order).
    # A trial decides as the best so far up to the node it undoes: it goes on from the
    # best's decisions before that node's step.
    deny: frozenset[int] = frozenset()
    step_of = {node: s for s, node in enumerate(order)}
    index = {n.name: i for i, n in enumerate(g.nodes)}
    keep = {step_of[i] for i, n in enumerate(g.nodes) if n.op in SLICE_VIEW_OPS}
    best = trial(deny, keep=keep)
    before = best.aliasing.before
    for name in [e for e in best.aliasing.elided if g.nodes[index[e]].op in SLICE_VIEW_OPS]:
        at = step_of[index[name]]
        undone = trial(deny | {index[name]}, (at, before[at]))
        if undone.lower < best.lower:
            deny |= {index[name]}
            best = trial(deny, (at, before[at]), {s for s in keep if s > at})
            before = best.aliasing.before
    a, sizes, biv, lower = best.aliasing, best.sizes, best.intervals, best.lower
    bufs = a.bufs
    offsets, arena, strategy = best_placement(sizes, biv, lower)
    own = {t: align(g.tensors[t].nbytes, alignment) for t in iv}
    unaliased = peak(own, iv, steps)
    slots = {}
    for t in g.arena_tensors():
        b, off = bufs.of[t]
        slots[t] = Slot(
            t, offsets[b] + off, g.tensors[t].nbytes, b, iv[t].start, iv[t].end, bufs.how[t]
        )
    table = tuple(
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
        buffers=table,
        elided_nodes=tuple(a.elided),
        inplace_nodes=tuple(a.inplaced),
        strategy=strategy,
        copies=MappingProxyType(dict(a.copies)),
    )


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
