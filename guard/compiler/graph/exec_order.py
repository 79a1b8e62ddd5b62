"""A schedule that keeps peak live memory low, over the planning view (guard.compiler.graph.view).

Heuristic (:func:`schedule`): greedy list scheduling. Among the nodes whose inputs are all
computed, run the one with the smallest *net allocation*: bytes of the outputs it creates
minus bytes of the inputs it is the last reader of (those die with it). Ties go to a
successor of the node just run (finishing a chain keeps its tensors short-lived), then to
the earlier node in the original order. A greedy choice can be worse than the original
order on some graphs, so the scheduler also measures the original (topological) order and
a breadth-first one and keeps the lowest peak (ties: the greedy order);
``Schedule.strategy`` says which won and ``topo_peak_bytes`` what plain topological order
would have cost.

With a partition assignment the schedule is partition-contiguous: a partition runs as one
block (the runtime hands it to one backend), chosen by the same net-allocation rule once
every tensor it reads from outside is computed; inside, nodes follow the node heuristic.
Partitions are convex (the partitioner guarantees it), so such an order always exists.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

from guard.compiler.graph.view import (
    ALIGNMENT,
    GraphView,
    OpNode,
    align,
    peak_live_bytes,
    view_of_graph,
)

# The view's names stay importable from here for the modules outside this package's
# graph level that take them from the schedule (codegen's kernel plan and GEMM/conv
# emitters, the emulator).
__all__ = [
    "ALIGNMENT",
    "GraphView",
    "OpNode",
    "Schedule",
    "align",
    "breadth_first_order",
    "schedule",
    "topological_order",
    "view_of_graph",
]

# -- the scheduler ------------------------------------------------------------------------


class ScheduleFile(TypedDict):
    """:meth:`Schedule.to_dict`: the order's strategy and peaks (memory_plan.json's schedule)."""

    strategy: str
    peak_bytes: int
    topo_peak_bytes: int
    heuristic: str


@dataclass(frozen=True)
class Schedule:
    order: tuple[int, ...]
    strategy: str  # "min-net-alloc" or "topological"
    peak_bytes: int
    topo_peak_bytes: int

    def to_dict(self) -> ScheduleFile:
        return {
            "strategy": self.strategy,
            "peak_bytes": self.peak_bytes,
            "topo_peak_bytes": self.topo_peak_bytes,
            "heuristic": "greedy min net allocation, tie: successor of last, then original order",
        }


def _groups(g: GraphView, group_of: Sequence[int]) -> tuple[dict[int, list[int]], dict[int, int]]:
    """Each group's nodes (in original order) and the number of edges entering it."""
    members: dict[int, list[int]] = {}
    for i, grp in enumerate(group_of):
        members.setdefault(grp, []).append(i)
    ext_indeg = {grp: 0 for grp in members}
    for i, grp in enumerate(group_of):
        ext_indeg[grp] += sum(1 for p in g.preds[i] if group_of[p] != grp)
    return members, ext_indeg


def _greedy_order(g: GraphView, group_of: Sequence[int] | None) -> list[int]:
    nbytes = {name: align(g.tensors[name].nbytes) for name in g.arena_tensors()}
    remaining = {v: len(c) for v, c in g.consumers.items()}
    pinned = set(g.outputs)

    def net(i: int) -> int:
        n = g.nodes[i]
        alloc = sum(nbytes.get(o, 0) for o in n.outputs)
        freed = sum(
            nbytes[v]
            for v in set(n.inputs)
            if v in nbytes and v not in pinned and remaining.get(v) == 1
        )
        return alloc - freed

    def run_node(i: int) -> None:
        for v in set(g.nodes[i].inputs):
            if v in remaining:
                remaining[v] -= 1

    # Partition-contiguous: a group is ready when every predecessor outside it has run.
    # Without groups the whole graph is one group: the same greedy walk, over every node
    # (the key ends in the node index, so the walk does not depend on the ready list's order).
    groups = [0] * len(g.nodes) if group_of is None else group_of
    members, ext_indeg = _groups(g, groups)
    order: list[int] = []
    ready_groups = [grp for grp, d in ext_indeg.items() if d == 0]

    def group_net(grp: int) -> int:
        inside = set(members[grp])
        alloc = 0
        for i in inside:
            for o in g.nodes[i].outputs:
                if o in pinned or any(c not in inside for c in g.consumers.get(o, ())):
                    alloc += nbytes.get(o, 0)
        freed = 0
        for v in {v for i in inside for v in g.nodes[i].inputs}:
            if v in nbytes and v not in pinned and g.producer.get(v) not in inside:
                if remaining.get(v) == sum(1 for c in g.consumers[v] if c in inside):
                    freed += nbytes[v]
        return alloc - freed

    while ready_groups:
        grp = min(ready_groups, key=lambda k: (group_net(k), min(members[k])))
        ready_groups.remove(grp)
        inside = set(members[grp])
        local_indeg = {i: sum(1 for p in g.preds[i] if p in inside) for i in inside}
        ready = [i for i in inside if local_indeg[i] == 0]
        last = -1
        while ready:
            succ_of_last = set(g.succs[last]) if last >= 0 else set()
            best = min(ready, key=lambda i: (net(i), i not in succ_of_last, i))
            ready.remove(best)
            order.append(best)
            run_node(best)
            last = best
            for s in g.succs[best]:
                if s in inside:
                    local_indeg[s] -= 1
                    if local_indeg[s] == 0:
                        ready.append(s)
                else:
                    ext_indeg[groups[s]] -= 1
                    if ext_indeg[groups[s]] == 0:
                        ready_groups.append(groups[s])
    if len(order) != len(g.nodes):
        raise ValueError("partition assignment is not convex: no contiguous order exists")
    return order


def topological_order(g: GraphView, group_of: Sequence[int] | None = None) -> list[int]:
    """The original order, or (with groups) the earliest-first partition-contiguous one."""
    if group_of is None:
        return list(range(len(g.nodes)))
    members, ext = _groups(g, group_of)
    heap = [(min(m), grp) for grp, m in members.items() if ext[grp] == 0]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        _, grp = heapq.heappop(heap)
        for i in members[grp]:  # original order is topological inside a convex group
            order.append(i)
            for s in g.succs[i]:
                if group_of[s] != grp:
                    ext[group_of[s]] -= 1
                    if ext[group_of[s]] == 0:
                        heapq.heappush(heap, (min(members[group_of[s]]), group_of[s]))
    if len(order) != len(g.nodes):
        raise ValueError("partition assignment is not convex: no contiguous order exists")
    return order


def breadth_first_order(g: GraphView, group_of: Sequence[int] | None = None) -> list[int]:
    """Kahn's algorithm with a FIFO (level by level), partition-contiguous with groups."""
    seq = topological_order(g, group_of)
    groups = [0] * len(g.nodes) if group_of is None else list(group_of)
    blocks: list[list[int]] = []
    for i in seq:
        if not blocks or groups[blocks[-1][0]] != groups[i]:
            blocks.append([])
        blocks[-1].append(i)
    order: list[int] = []
    for block in blocks:
        inside = set(block)
        indeg = {i: sum(1 for p in g.preds[i] if p in inside) for i in block}
        queue = deque(i for i in block if indeg[i] == 0)
        while queue:
            i = queue.popleft()
            order.append(i)
            for s in g.succs[i]:
                if s in inside:
                    indeg[s] -= 1
                    if indeg[s] == 0:
                        queue.append(s)
    return order


def schedule(g: GraphView, group_of: Sequence[int] | None = None) -> Schedule:
    """Choose an order with a low peak of live bytes (see the module docstring)."""
    topo = topological_order(g, group_of)
    topo_peak = peak_live_bytes(g, topo)
    candidates = [
        ("min-net-alloc", _greedy_order(g, group_of)),
        ("topological", topo),
        ("breadth-first", breadth_first_order(g, group_of)),
    ]
    best_name, best = min(candidates, key=lambda c: peak_live_bytes(g, c[1]))
    return Schedule(tuple(best), best_name, peak_live_bytes(g, best), topo_peak)
