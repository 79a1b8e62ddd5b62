"""eliminate_dead_code: drop nodes none of whose outputs reach a graph output.

Walks the nodes backwards with a live set seeded by the graph outputs; unused constants
are dropped from the value table too. Every IR op is pure, so a node with no live output
has no effect.
"""

from __future__ import annotations

from dataclasses import dataclass

from guard.compiler.ir.core import Graph
from guard.compiler.passes.base import Pass, PassResult


@dataclass
class EliminateDeadCode(Pass):
    name = "eliminate_dead_code"

    def run(self, graph: Graph) -> PassResult:
        live = set(graph.outputs)
        keep = []
        for node in reversed(graph.nodes):
            if any(o in live for o in node.outputs):
                keep.append(node)
                live.update(i for i in node.inputs if i)
        removed = len(graph.nodes) - len(keep)
        graph.nodes = keep[::-1]
        n_values = len(graph.values)
        graph.prune_values()
        dropped = n_values - len(graph.values)
        return PassResult(
            removed > 0 or dropped > 0, {"num_removed": removed, "num_values_dropped": dropped}
        )
