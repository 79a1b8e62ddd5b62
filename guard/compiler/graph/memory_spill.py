"""Spill: a second memory region for tensors idle across the peak (rung 6 of the ladder).

The budget ladder's last rung (guard.compiler.fit.ladder). The arena is split in two: the
*fast* region (the one the budget bounds) and a *spill* region after it, standing for the
slower memory a part has beside its SRAM. A tensor written before the peak, untouched at
the peak and read after it is copied out once (``<t>/spilled``, in the spill region)
and copied back before its first late reader (``<t>/filled``, in the fast region again),
so across the peak it occupies no fast bytes. The copies are ``Expand`` to the tensor's
own shape (an elementwise copy: every kernel reads and writes only the fast region's
tensors and the copies, values unchanged).

:func:`spill_candidates` lists such tensors for a plan; :func:`insert_copies` rewrites
the IR; :func:`split_regions` re-places a plan's buffers in two regions: the fast ones
by the usual greedy placement from offset 0, the spilled ones after them. The report is
the fast region's bytes (what the budget bounds), the spill region's bytes (outside the
budget) and the traffic (bytes copied out plus bytes copied back, per inference).
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

from guard.compiler.graph.memory import BufferInfo, MemoryPlan
from guard.compiler.graph.memory_place import best_placement, peak
from guard.compiler.graph.view import ALIGNMENT, GraphView, Interval, align, liveness
from guard.compiler.ir.core import Graph, Node

SPILLED = "/spilled"


def spill_candidates(view: GraphView, memory: MemoryPlan) -> list[tuple[str, set[str]]]:
    """(tensor, its readers after the peak) for tensors live at the fast region's peak
    step but not read or written there, largest first (graph inputs and outputs stay)."""
    order = memory.order
    step = {node: s for s, node in enumerate(order)}
    iv = liveness(view, order)
    live = [0] * (len(order) + 1)
    for b in memory.buffers:
        if not any(t.endswith(SPILLED) for t in b.tensors):
            live[b.start] += b.nbytes
            live[b.end + 1] -= b.nbytes
    cur, best, at = 0, -1, 0
    for s in range(len(order)):
        cur += live[s]
        if cur > best:
            best, at = cur, s
    out: list[tuple[int, str, set[str]]] = []
    for t, it in iv.items():
        if t in view.inputs or t in view.outputs or t.endswith(SPILLED):
            continue
        if not (it.start < at < it.end):
            continue
        readers = [step[c] for c in view.consumers.get(t, ())]
        if at in readers or not any(r > at for r in readers):
            continue
        if memory.slots[t].how != "own":  # views and in-place share bytes with another
            continue
        late = {view.nodes[c].name for c in view.consumers.get(t, ()) if step[c] > at}
        out.append((view.tensors[t].nbytes, t, late))
    out.sort(key=lambda r: (-r[0], r[1]))
    return [(t, late) for _, t, late in out]


def insert_copies(graph: Graph, t: str, late_readers: set[str]) -> None:
    """``t/spilled = copy(t)`` after its producer, ``t/filled = copy(t/spilled)`` before
    the first of ``late_readers``, which then read ``t/filled``."""
    v = graph.values[t]
    idx = {n.name: i for i, n in enumerate(graph.nodes)}
    producer = next(i for i, n in enumerate(graph.nodes) if t in n.outputs)
    readers = sorted(idx[n] for n in late_readers)
    spilled, filled = f"{t}{SPILLED}", f"{t}/filled"
    for name in (spilled, filled):
        graph.values[name] = type(v)(name, v.shape, v.dtype)
    for i in readers:
        n = graph.nodes[i]
        n.inputs = [filled if x == t else x for x in n.inputs]
    attrs = {"shape": list(v.shape)}
    graph.nodes.insert(readers[0], Node("Expand", [spilled], [filled], dict(attrs), f"{t}/fill"))
    graph.nodes.insert(producer + 1, Node("Expand", [t], [spilled], dict(attrs), f"{t}/spill"))


def fills_late(view: GraphView, order: tuple[int, ...]) -> tuple[int, ...]:
    """``order`` with each spill copy right after what it copies and each fill copy right
    before its first reader: a scheduler that minimises live bytes with both copies in
    one region would run the fill early (it is ready at once), which defeats the spill."""
    seq = list(order)
    for i, n in enumerate(view.nodes):
        if not n.name.endswith(("/spill", "/fill")):
            continue
        seq.remove(i)
        if n.name.endswith("/fill"):
            pos = min(seq.index(c) for c in view.consumers[n.outputs[0]])
        else:
            pos = seq.index(view.producer[n.inputs[0]]) + 1
        seq.insert(pos, i)
    return tuple(seq)


def split_regions(m: MemoryPlan) -> tuple[MemoryPlan, int, int]:
    """``m`` re-placed in two regions; (plan, fast bytes, spill bytes). The plan's arena is
    both regions (one allocation: the fast region first, the spill region after it)."""
    slow = {b.id for b in m.buffers if any(t.endswith(SPILLED) for t in b.tensors)}
    steps = max(len(m.order), 1)

    def place(ids: set[int]) -> tuple[dict[int, int], int]:
        sizes = {b.id: b.nbytes for b in m.buffers if b.id in ids}
        ivs = {b.id: Interval(b.start, b.end) for b in m.buffers if b.id in ids}
        offsets, arena, _ = best_placement(sizes, ivs, peak(sizes, ivs, steps))
        return offsets, arena

    fast_ids = {b.id for b in m.buffers} - slow
    fast_off, fast = place(fast_ids)
    slow_off, spill = place(slow)
    base = align(fast, ALIGNMENT)
    offset = {**fast_off, **{b: base + o for b, o in slow_off.items()}}
    buffers = tuple(dataclasses.replace(b, offset=offset[b.id]) for b in m.buffers)
    moved = {b.id: offset[b.id] - b.offset for b in m.buffers}
    slots = {
        t: dataclasses.replace(s, offset=s.offset + moved[s.buffer]) for t, s in m.slots.items()
    }
    plan = dataclasses.replace(
        m,
        arena_bytes=base + spill,
        slots=MappingProxyType(slots),
        buffers=buffers,
        strategy=m.strategy + "+spill-region",
    )
    return plan, fast, spill


def spill_traffic(m: MemoryPlan) -> int:
    """Bytes moved per inference by the spill copies: each spilled tensor written once
    into the spill region and read once back."""
    return sum(2 * s.nbytes for t, s in m.slots.items() if t.endswith(SPILLED))


def buffer_of(m: MemoryPlan, t: str) -> BufferInfo:
    return next(b for b in m.buffers if t in b.tensors)
