"""fold_constants: evaluate nodes whose inputs are all constants, with a size cap.

A node folds when every input is a Constant (or it has none, like ``Fill``) and its
outputs together stay under ``max_bytes``: folding an Expand or Tile of a small constant
can turn kilobytes of weights into megabytes, so beyond the cap the node stays and is
counted as declined (and named in the notes). The reference kernels compute the values, so
a folded graph is bit-identical to running it.
"""

from __future__ import annotations

from dataclasses import dataclass

from guard.compiler.ir.core import Graph
from guard.compiler.passes.base import Pass, PassResult
from guard.compiler.reference import run_node


@dataclass
class FoldConstants(Pass):
    name = "fold_constants"
    max_bytes: int = 64 << 20

    def run(self, graph: Graph) -> PassResult:
        folded, declined = 0, 0
        notes: list[str] = []
        keep = []
        for node in graph.nodes:
            if not all(not i or graph.is_constant(i) for i in node.inputs):
                keep.append(node)
                continue
            size = sum(graph.values[o].nbytes for o in node.outputs)
            if size > self.max_bytes:
                declined += 1
                notes.append(
                    f"kept {node.label()}: its output is {size} bytes, over the "
                    f"{self.max_bytes}-byte fold cap"
                )
                keep.append(node)
                continue
            args = [graph.const(i) if i else None for i in node.inputs]
            outs = run_node(node.op, args, node.attrs)
            for o, arr in zip(node.outputs, outs, strict=True):
                graph.add_constant(o, arr)
            folded += 1
        graph.nodes = keep
        if folded:
            graph.prune_values()
        return PassResult(folded > 0, {"num_folded": folded, "num_declined_size": declined}, notes)
