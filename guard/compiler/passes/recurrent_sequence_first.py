"""recurrent_sequence_first: a batch-first RNN, GRU or LSTM (``layout=1``) as a sequence-first
one (``layout=0``) between transposes, so that the emitters and
guard.compiler.passes.batch_recurrent_inputs see one layout.

X ``[B, S, I]`` and initial_h / initial_c ``[B, D, H]`` are transposed in (a constant is
transposed here), Y ``[S, D, B, H]`` and Y_h / Y_c ``[D, B, H]`` are transposed out to the
batch-first ``[B, S, D, H]`` and ``[B, D, H]`` under their own names. A transpose that moves
only axes of size 1 (batch 1; or one direction, for the states) is a Reshape, so with batch
1, what batch-first exports run, nothing moves. The values are those of the batch-first node
(the reference interpreter computes both layouts the same way); onnxruntime refuses
``layout=1`` at session creation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from guard.compiler.ir.core import Graph, Node, Value
from guard.compiler.passes.base import Pass, PassResult

RECURRENT = ("RNN", "GRU", "LSTM")
# (output index, perm from the sequence-first output to the batch-first one, its inverse)
OUT_PERMS = ((0, (2, 0, 1, 3), (1, 2, 0, 3)), (1, (1, 0, 2), (1, 0, 2)), (2, (1, 0, 2), (1, 0, 2)))


@dataclass
class RecurrentSequenceFirst(Pass):
    name = "recurrent_sequence_first"

    def run(self, graph: Graph) -> PassResult:
        nodes: list[Node] = []
        count = 0
        for node in graph.nodes:
            if node.op in RECURRENT and node.attrs.get("layout", 0):
                nodes.extend(_rewrite(graph, node))
                count += 1
            else:
                nodes.append(node)
        graph.nodes = nodes
        if count:
            graph.prune_values()
        return PassResult(count > 0, {"num_rewritten": count}, [])


def _rewrite(graph: Graph, node: Node) -> list[Node]:
    before: list[Node] = []
    after: list[Node] = []

    def transpose(src: str, perm: tuple[int, ...], out: str | None = None) -> str:
        """``src`` transposed into ``out`` or a fresh value: a constant here, a Reshape where
        only axes of size 1 move, else a Transpose."""
        v = graph.values[src]
        to = tuple(v.shape[p] for p in perm)
        data = graph.const(src)
        if data is not None and out is None:
            return graph.add_constant(None, np.ascontiguousarray(data.transpose(perm))).name
        kept = [p for p in perm if v.shape[p] != 1] == [a for a, n in enumerate(v.shape) if n != 1]
        op, attrs = (
            ("Reshape", {"shape": list(to)}) if kept else ("Transpose", {"perm": list(perm)})
        )
        n = graph.add_node(op, [src], [(to, v.dtype)], attrs, outputs=[out] if out else None)
        graph.nodes.pop()
        (after if out else before).append(n)
        return n.outputs[0]

    ins, outs = list(node.inputs), list(node.outputs)
    for j in (0, 5, 6):  # X, initial_h, initial_c
        if len(ins) > j and ins[j]:
            ins[j] = transpose(ins[j], (1, 0, 2))
    for j, perm, inv in OUT_PERMS:
        if j < len(outs) and outs[j]:
            v = graph.values[outs[j]]
            inner = graph.fresh(f"{node.op.lower()}_seq_first")
            graph.values[inner] = Value(inner, tuple(v.shape[p] for p in inv), v.dtype)
            transpose(inner, perm, outs[j])
            outs[j] = inner
    rec = Node(node.op, ins, outs, {**node.attrs, "layout": 0}, node.name)
    return [*before, rec, *after]
