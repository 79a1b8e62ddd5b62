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

Does not fire across a value that is a graph output or has two readers (it must exist),
nor on a single lone op (nothing to save), and ``max_steps`` bounds a program.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from guard.compiler.ir import Graph, Node
from guard.compiler.passes.base import Pass, PassResult, single_consumer
from guard.compiler.shapes import ELEMENTWISE

ANCHORS = {"Conv": "FusedConv", "Gemm": "FusedGemm", "MatMul": "FusedMatMul"}


@dataclass
class FuseElementwise(Pass):
    name = "fuse_elementwise"
    epilogues: bool = True
    max_steps: int = 32

    def run(self, graph: Graph) -> PassResult:
        stats = {"num_epilogues": 0, "num_fused_chains": 0, "num_ops_fused": 0}
        if self.epilogues:
            for node in list(graph.nodes):
                if node.op in ANCHORS:
                    n = self._fuse_from(graph, node, anchor=True)
                    if n:
                        stats["num_epilogues"] += 1
                        stats["num_ops_fused"] += n
        for node in list(graph.nodes):
            if node not in graph.nodes or node.op not in ELEMENTWISE:
                continue
            # Start only at a chain head: its producer is not a fusable link.
            n = self._fuse_from(graph, node, anchor=False)
            if n:
                stats["num_fused_chains"] += 1
                stats["num_ops_fused"] += n + 1
        changed = stats["num_ops_fused"] > 0
        if changed:
            graph.prune_values()
        return PassResult(changed, stats)

    def _fuse_from(self, graph: Graph, head: Node, anchor: bool) -> int:
        """Grow a chain from ``head``; rewrite in place and return the ops absorbed."""
        consumers = graph.consumers()
        shape = graph.values[head.outputs[0]].shape
        chain: list[Node] = []
        cur = head
        while len(chain) + 1 < self.max_steps and len(cur.outputs) == 1:
            nxt = single_consumer(graph, cur.outputs[0], consumers)
            if nxt is None or nxt.op not in ELEMENTWISE:
                break
            if graph.values[nxt.outputs[0]].shape != shape:
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
        prev_value = head.outputs[0]
        for link in chain:
            args: list[Any] = []
            for i in link.inputs:
                if i == prev_value:
                    args.append(prev)
                elif i in inputs:
                    args.append(inputs.index(i))
                else:
                    inputs.append(i)
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
        # The fused node sits where the last link was: every operand is defined by then.
        idx = graph.nodes.index(last)
        graph.nodes[idx] = fused
        drop = {id(head)} | {id(n) for n in chain[:-1]}
        graph.nodes = [n for n in graph.nodes if id(n) not in drop]
        return len(chain)
