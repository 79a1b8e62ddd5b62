"""fuse_elementwise: elementwise chains -> one fused node; epilogues into Conv/Gemm/MatMul.

Glow's operator stacking: a chain of elementwise ops in which each link is the only
reader of the previous result becomes one ``FusedElementwise`` node whose ``program``
attribute lists the steps (see reference/elementwise.py for the program format), so the
intermediate tensors never exist. A link joins the chain only when its output has the
chain's shape (a broadcast that grows the tensor would change the iteration space).

Epilogue fusion first: a ``Conv``/``Gemm``/``MatMul`` whose result is read only by an
elementwise op gets that op and its chain (bias add, activation, residual add...) as an
epilogue, becoming ``FusedConv``/``FusedGemm``/``FusedMatMul`` with the anchor's
attributes, ``anchor_inputs`` (how many inputs the anchor takes) and ``program`` (with
``"acc"`` naming the anchor's result). Steps' extra operands are appended as inputs.

An epilogue takes float32 steps only (no Cast, nothing producing or reading another type):
the chain ends before such a step, which joins the elementwise chain after the anchor.

Does not fire across a value that is a graph output or has two readers (it must exist),
nor on a single lone op (nothing to save), and ``max_steps`` bounds a program.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from guard.compiler.ir.core import Graph, Node
from guard.compiler.ir.shapes import ELEMENTWISE
from guard.compiler.passes.base import Pass, PassResult, single_consumer

ANCHORS = {"Conv": "FusedConv", "Gemm": "FusedGemm", "MatMul": "FusedMatMul"}


@dataclass
class FuseElementwise(Pass):
    name = "fuse_elementwise"
    epilogues: bool = True
    max_steps: int = 32

    def run(self, graph: Graph) -> PassResult:
        stats = {"num_epilogues": 0, "num_fused_chains": 0, "num_ops_fused": 0}
        # Linear in graph size: consumers are computed once and kept up to date, rewrites
        # are recorded and applied in one rebuild of the node list (recomputing consumers
        # or rebuilding the list per fusion made a 10^5-node chain take minutes).
        state = _State(graph.consumers())
        nodes = list(graph.nodes)
        if self.epilogues:
            for node in nodes:
                if node.op in ANCHORS and id(node) not in state.gone:
                    n = self._fuse_from(graph, node, state, anchor=True)
                    if n:
                        stats["num_epilogues"] += 1
                        stats["num_ops_fused"] += n
        for node in nodes:
            if id(node) in state.gone or node.op not in ELEMENTWISE:
                continue
            # Start only at a chain head: its producer is not a fusable link.
            n = self._fuse_from(graph, node, state, anchor=False)
            if n:
                stats["num_fused_chains"] += 1
                stats["num_ops_fused"] += n + 1
        changed = stats["num_ops_fused"] > 0
        if changed:
            graph.nodes = [
                state.placed.get(id(n), n)
                for n in graph.nodes
                if id(n) not in state.gone or id(n) in state.placed
            ]
            graph.prune_values()
        return PassResult(changed, stats)

    def _fuse_from(self, graph: Graph, head: Node, state: _State, anchor: bool) -> int:
        """Grow a chain from ``head``; record the rewrite and return the ops absorbed."""
        consumers = state.consumers
        shape = graph.values[head.outputs[0]].shape
        chain: list[Node] = []
        cur = head
        while len(chain) + 1 < self.max_steps and len(cur.outputs) == 1:
            nxt = single_consumer(graph, cur.outputs[0], consumers)
            if nxt is None or nxt.op not in ELEMENTWISE or id(nxt) in state.gone:
                break
            if graph.values[nxt.outputs[0]].shape != shape:
                break
            if anchor and not _float_step(graph, nxt):
                break
            chain.append(nxt)
            cur = nxt
        if not chain:
            return 0
        if anchor:
            inputs = list(head.inputs)
            attrs: dict[str, Any] = dict(head.attrs)
            attrs["anchor_inputs"] = len(head.inputs)
            prev = "acc"
            steps: list[dict[str, Any]] = []
        else:
            inputs = list(head.inputs)
            steps = [
                {"op": head.op, "args": list(range(len(head.inputs))), "attrs": dict(head.attrs)}
            ]
            attrs = {}
            prev = "s0"
        index = {v: i for i, v in enumerate(inputs)}
        prev_value = head.outputs[0]
        for link in chain:
            args: list[Any] = []
            for i in link.inputs:
                if i == prev_value:
                    args.append(prev)
                elif i in index:
                    args.append(index[i])
                else:
                    inputs.append(i)
                    index.setdefault(i, len(inputs) - 1)
                    args.append(len(inputs) - 1)
            steps.append({"op": link.op, "args": args, "attrs": dict(link.attrs)})
            prev = f"s{len(steps) - 1}"
            prev_value = link.outputs[0]
        attrs["program"] = steps
        last = chain[-1]
        fused = Node(
            ANCHORS[head.op] if anchor else "FusedElementwise",
            inputs,
            list(last.outputs),
            attrs,
            head.name,
        )
        state.record(head, chain, fused)
        return len(chain)


def _float_step(graph: Graph, node: Node) -> bool:
    """An anchor's epilogue runs in float32 lanes: a step producing or reading another type
    (a QuantizeLinear's final Cast, a DequantizeLinear's first) stays outside it, in an
    elementwise kernel of its own, rather than making a fused op no emitter runs."""
    f32 = np.dtype(np.float32)
    if node.op == "Cast" or graph.values[node.outputs[0]].dtype != f32:
        return False
    return all(graph.values[i].dtype == f32 for i in node.inputs if i)


class _State:
    """The pass's view of the graph while it rewrites: consumers, removed and placed nodes."""

    def __init__(self, consumers: dict[str, list[Node]]):
        self.consumers = consumers
        self.gone: set[int] = set()  # ids of nodes absorbed into a fused node
        self.placed: dict[int, Node] = {}  # id of a chain's last link -> the fused node

    def record(self, head: Node, chain: list[Node], fused: Node) -> None:
        absorbed = [head, *chain]
        ids = {id(n) for n in absorbed}
        self.gone |= ids
        # The fused node sits where the last link was: every operand is defined by then.
        self.placed[id(chain[-1])] = fused
        for n in absorbed[:-1]:  # intermediate values no longer exist
            for o in n.outputs:
                self.consumers.pop(o, None)
        for v in set(fused.inputs):
            users = self.consumers.get(v)
            if users is not None:
                kept = [u for u in users if id(u) not in ids]
                self.consumers[v] = [*kept, *([fused] * fused.inputs.count(v))]
