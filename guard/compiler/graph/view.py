"""The planning view of a graph, and liveness over an order of its nodes.

The partitioner, scheduler and memory planner work on :class:`GraphView`, a small frozen
view (nodes with op, inputs, outputs, attrs; tensors with shape, dtype, nbytes; one valid
topological order), not on the IR: hand-made graphs test them, and
:func:`view_of_graph` adapts the IR (guard.compiler.ir.core.Graph) to it.

Liveness: a tensor is live from the step that writes it (step 0 for graph inputs) through
the last step that reads it, inclusive; graph outputs stay live to the last step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any

import numpy as np

from guard.compiler.ir import ops
from guard.compiler.ir.core import AttrValue, Constant, Graph
from guard.core.errors import ModelError

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

    @cached_property  # planners ask it for every tensor of every trial plan
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
    attrs: Mapping[str, AttrValue] = field(default_factory=dict)
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


def view_of_graph(graph: Graph) -> GraphView:
    """Adapt the IR (guard.compiler.ir.core.Graph) to a GraphView.

    Constants become "const" tensors (the weights blob, not the arena). Values that a
    subgraph body reads from the enclosing scope are added to the node's inputs, so
    liveness keeps them alive until the If/Loop runs.
    """
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
    outer = set(graph.values)
    for i, n in enumerate(graph.nodes):
        captured = _captured_names(n.attrs, outer)
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


CONTROL_FLOW_OPS = ops.CONTROL_FLOW_OPS  # If, Loop, Scan (guard.compiler.ir.ops)


def _captured_names(attrs: Mapping[str, AttrValue], outer: set[str]) -> list[str]:
    """Outer-scope names read by subgraph attributes (IR Graph objects in attrs)."""
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
                if isinstance(v, (Graph, dict, list, tuple)):  # not a number or a string
                    visit(v)

    visit(dict(attrs))
    return found


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
