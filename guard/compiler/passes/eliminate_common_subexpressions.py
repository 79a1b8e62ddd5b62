"""eliminate_common_subexpressions: one node per (op, inputs, attrs); one constant per value.

Two nodes with the same op, the same input names and the same attributes compute the same
values (every IR op is pure), so later ones are replaced by the first. Small constants
(up to ``max_const_bytes``) with equal dtype, shape and bytes are merged first so that
``x * c1`` and ``x * c2`` with ``c1 == c2`` meet. Graph outputs keep their names: a
duplicate that is a graph output is left in place (see base.bypass).
"""

from __future__ import annotations

from dataclasses import dataclass

from guard.compiler.ir.core import Graph
from guard.compiler.passes.base import Pass, PassResult, attrs_key, bypass


@dataclass
class EliminateCommonSubexpressions(Pass):
    name = "eliminate_common_subexpressions"
    max_const_bytes: int = 4096

    def run(self, graph: Graph) -> PassResult:
        merged_consts = 0
        seen_c: dict[tuple[str, tuple[int, ...], bytes], str] = {}
        for name, c in list(graph.constants.items()):
            if c.nbytes > self.max_const_bytes or name in graph.outputs:
                continue
            key = (c.dtype.str, c.shape, c.data.tobytes())
            if key in seen_c:
                graph.replace_uses(name, seen_c[key])
                merged_consts += 1
            else:
                seen_c[key] = name
        eliminated = 0
        seen: dict[tuple[str, tuple[str, ...], str], list[str]] = {}
        keep = []
        for node in graph.nodes:
            nkey = (node.op, tuple(node.inputs), attrs_key(node.attrs))
            first = seen.get(nkey)
            if first is not None and not any(o in graph.outputs for o in node.outputs):
                for o, f in zip(node.outputs, first, strict=True):
                    bypass(graph, node, o, f)
                eliminated += 1
                continue
            if first is None:
                seen[nkey] = list(node.outputs)
            keep.append(node)
        graph.nodes = keep
        if eliminated or merged_consts:
            graph.prune_values()
        return PassResult(
            eliminated > 0 or merged_consts > 0,
            {"num_eliminated": eliminated, "num_constants_merged": merged_consts},
        )
