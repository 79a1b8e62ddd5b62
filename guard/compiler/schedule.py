"""The planning view of a graph, and a schedule that keeps peak live memory low.

The partitioner, scheduler and memory planner work on :class:`GraphView`, a small frozen
view (nodes with op, inputs, outputs, attrs; tensors with shape, dtype, nbytes; one valid
topological order), not on the IR: hand-made graphs test them, and
:func:`view_of_graph` adapts the IR (guard.compiler.ir.Graph) to it.

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

Liveness: a tensor is live from the step that writes it (step 0 for graph inputs) through
the last step that reads it, inclusive; graph outputs stay live to the last step.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from guard.compiler import ops
from guard.errors import ModelError

ALIGNMENT = 64


def align(n: int, alignment: int = ALIGNMENT) -> int:
    return -(-n // alignment) * alignment


@dataclass(frozen=True)
class TensorInfo:
    """A named tensor: ``kind`` is "input" (graph input), "const" (weight) or "value"."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    kind: str = "value"

    @property
    def static(self) -> bool:
        return all(isinstance(d, int) and d >= 0 for d in self.shape)

    @property
    def nbytes(self) -> int:
        if not self.static:
            raise ModelError(
                f"tensor {self.name!r} has a dynamic shape {list(self.shape)}",
                hint="Bind every dynamic dimension (suite `inputs:` shapes) before planning.",
            )
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class OpNode:
    """One operation. ``inputs`` include values a subgraph body captures (If/Loop)."""

    name: str
    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    has_subgraph: bool = False
    n_args: int = -1  # how many of ``inputs`` the kernel takes (the rest are captures)

    @property
    def args(self) -> tuple[str, ...]:
        return self.inputs if self.n_args < 0 else self.inputs[: self.n_args]


class GraphView:
    """Frozen planning view: ``nodes`` in a valid topological order (validated)."""

    def __init__(
        self,
        nodes: Sequence[OpNode],
        tensors: Mapping[str, TensorInfo],
        inputs: Sequence[str],
        outputs: Sequence[str],
        name: str = "graph",
    ) -> None:
        self.name = name
        self.nodes: tuple[OpNode, ...] = tuple(nodes)
        self.tensors: Mapping[str, TensorInfo] = MappingProxyType(dict(tensors))
        self.inputs: tuple[str, ...] = tuple(inputs)
        self.outputs: tuple[str, ...] = tuple(outputs)
        producer: dict[str, int] = {}
        consumers: dict[str, list[int]] = {}
        defined = {t.name for t in self.tensors.values() if t.kind in ("input", "const")}
        for i, n in enumerate(self.nodes):
            for v in n.inputs:
                if not v:
                    continue
                if v not in self.tensors:
                    raise ModelError(f"{n.op} node {n.name!r} reads unknown tensor {v!r}")
                if v not in defined:
                    raise ModelError(
                        f"{n.op} node {n.name!r} reads {v!r} before it is computed",
                        hint="The node list must be in topological order.",
                    )
                consumers.setdefault(v, [])
                if not consumers[v] or consumers[v][-1] != i:
                    consumers[v].append(i)
            for v in n.outputs:
                if v in producer or v in defined:
                    raise ModelError(f"tensor {v!r} is defined twice (node {n.name!r})")
                if v not in self.tensors:
                    raise ModelError(f"{n.op} node {n.name!r} writes unknown tensor {v!r}")
                producer[v] = i
                defined.add(v)
        for o in self.outputs:
            if o not in defined:
                raise ModelError(f"graph output {o!r} is never computed")
        self.producer: Mapping[str, int] = MappingProxyType(producer)
        self.consumers: Mapping[str, tuple[int, ...]] = MappingProxyType(
            {k: tuple(v) for k, v in consumers.items()}
        )
        preds: list[set[int]] = [set() for _ in self.nodes]
        succs: list[set[int]] = [set() for _ in self.nodes]
        for i, n in enumerate(self.nodes):
            for v in n.inputs:
                p = producer.get(v)
                if p is not None:
                    preds[i].add(p)
                    succs[p].add(i)
        self.preds: tuple[tuple[int, ...], ...] = tuple(tuple(sorted(s)) for s in preds)
        self.succs: tuple[tuple[int, ...], ...] = tuple(tuple(sorted(s)) for s in succs)

    def is_arena(self, name: str) -> bool:
        """True for tensors that live in the arena: graph inputs and node outputs."""
        t = self.tensors.get(name)
        return bool(name) and t is not None and t.kind != "const"

    def arena_tensors(self) -> list[str]:
        """Arena tensors in definition order (graph inputs first)."""
        names = [i for i in self.inputs if self.is_arena(i)]
        names += [o for n in self.nodes for o in n.outputs if self.is_arena(o)]
        return names


def view_of_graph(graph: Any) -> GraphView:
    """Adapt the IR (guard.compiler.ir.Graph) to a GraphView.

    Constants become "const" tensors (the weights blob, not the arena). Values that a
    subgraph body reads from the enclosing scope are added to the node's inputs, so
    liveness keeps them alive until the If/Loop runs.
    """
    from guard.compiler.ir import Constant

    tensors: dict[str, TensorInfo] = {}
    for name, v in graph.values.items():
        kind = "const" if isinstance(v, Constant) else "value"
        if name in graph.inputs:
            kind = "input"
        tensors[name] = TensorInfo(
            name, tuple(int(d) for d in v.shape), np.dtype(v.dtype).name, kind
        )
    nodes = []
    seen: set[str] = set()
    for i, n in enumerate(graph.nodes):
        captured = _captured_names(n.attrs, set(graph.values))
        inputs = tuple(n.inputs) + tuple(c for c in captured if c not in n.inputs)
        name = n.name or f"{n.op.lower()}_{i}"
        if name in seen:  # reports key by node name: keep them unique
            name = f"{name}#{i}"
        seen.add(name)
        nodes.append(
            OpNode(
                name,
                n.op,
                inputs,
                tuple(n.outputs),
                n.attrs,
                has_subgraph=bool(captured) or n.op in CONTROL_FLOW_OPS,
                n_args=len(n.inputs),
            )
        )
    return GraphView(nodes, tensors, graph.inputs, graph.outputs, name=graph.name)


CONTROL_FLOW_OPS = ops.CONTROL_FLOW_OPS  # If, Loop, Scan (guard.compiler.ops)


def _captured_names(attrs: Mapping[str, Any], outer: set[str]) -> list[str]:
    """Outer-scope names read by subgraph attributes (IR Graph objects in attrs)."""
    from guard.compiler.ir import Graph

    found: list[str] = []

    def visit(obj: Any) -> None:
        if isinstance(obj, Graph):
            local = set(obj.values) | set(obj.inputs)
            for n in obj.nodes:
                for i in n.inputs:
                    if i and i not in local and i in outer and i not in found:
                        found.append(i)
                visit(n.attrs)
        elif isinstance(obj, dict):
            for v in obj.values():
                visit(v)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                visit(v)

    visit(dict(attrs))
    return found


# -- liveness -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Interval:
    start: int
    end: int  # inclusive

    def overlaps(self, other: Interval) -> bool:
        return self.start <= other.end and other.start <= self.end


def liveness(g: GraphView, order: Sequence[int]) -> dict[str, Interval]:
    """Live interval (in steps of ``order``) of every arena tensor."""
    step_of = {node: s for s, node in enumerate(order)}
    if sorted(step_of) != list(range(len(g.nodes))):
        raise ValueError("order must be a permutation of the graph's nodes")
    last = max(len(order) - 1, 0)
    out: dict[str, Interval] = {}
    for name in g.arena_tensors():
        p = g.producer.get(name)
        start = step_of[p] if p is not None else 0
        uses = [step_of[c] for c in g.consumers.get(name, ())]
        if p is not None and any(u < start for u in uses):
            raise ValueError(f"order reads {name!r} before it is computed")
        end = max(uses, default=start)
        if name in g.outputs:
            end = last
        out[name] = Interval(start, end)
    return out


def live_bytes_per_step(
    g: GraphView, order: Sequence[int], sizes: Mapping[str, int] | None = None
) -> list[int]:
    """Bytes live at each step (aligned sizes unless ``sizes`` are given)."""
    iv = liveness(g, order)
    n = max(len(order), 1)
    delta = [0] * (n + 1)
    for name, it in iv.items():
        b = sizes[name] if sizes is not None else align(g.tensors[name].nbytes)
        delta[it.start] += b
        delta[it.end + 1] -= b
    out, cur = [], 0
    for s in range(n):
        cur += delta[s]
        out.append(cur)
    return out


def peak_live_bytes(g: GraphView, order: Sequence[int]) -> int:
    return max(live_bytes_per_step(g, order), default=0)


# -- the scheduler ------------------------------------------------------------------------


@dataclass(frozen=True)
class Schedule:
    order: tuple[int, ...]
    strategy: str  # "min-net-alloc" or "topological"
    peak_bytes: int
    topo_peak_bytes: int

    def to_dict(self) -> dict[str, Any]:
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
