"""fuse_horizontal: sibling MatMul/Gemm that share an input -> one wider op and a Split.

``y_i = x @ W_i`` for constant ``W_i`` with equal leading dims -> ``Y = x @ concat(W_i,
axis=-1)`` then ``Split(Y, axis=-1)`` back into the ``y_i`` (Q/K/V projections are the
classic case: one GEMM reads ``x`` once). Gemm siblings must share every attribute; their
biases (when all have one, per column) are concatenated too; with ``transB=1`` the weights
concatenate along rows. When every MatMul sibling is read only by an ``Add`` of a constant
bias over its columns, the biases concatenate too, into one Add after the wide MatMul
(fuse_elementwise then makes it the MatMul's epilogue). Declines non-constant weights or
Gemm biases, mixed dtypes and lone ops; the numbers are unchanged because each output
column is computed from the same row and column.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from guard.compiler.ir.core import Graph, Node
from guard.compiler.passes.base import Pass, PassResult, attrs_key, single_consumer


def _const(graph: Graph, name: str) -> np.ndarray:
    c = graph.const(name)
    assert c is not None, f"{name!r} was grouped as a constant"
    return c


@dataclass
class FuseHorizontal(Pass):
    name = "fuse_horizontal"
    min_group: int = 2

    def run(self, graph: Graph) -> PassResult:
        groups: dict[tuple, list[Node]] = {}
        for n in graph.nodes:
            if n.op not in ("MatMul", "Gemm") or graph.const(n.inputs[1]) is None:
                continue
            w = graph.values[n.inputs[1]]
            if n.op == "MatMul" and len(w.shape) != 2:
                continue
            if n.op == "Gemm" and n.attrs.get("transA", 0):
                continue
            has_bias = len(n.inputs) > 2
            if has_bias and graph.const(n.inputs[2]) is None:
                continue  # a bias computed at run time cannot be concatenated here
            k = w.shape[1] if n.op == "Gemm" and n.attrs.get("transB", 0) else w.shape[0]
            key = (n.op, n.inputs[0], k, w.dtype.str, attrs_key(n.attrs), has_bias)
            groups.setdefault(key, []).append(n)
        fused = biases = 0
        for key, nodes in groups.items():
            if len(nodes) < self.min_group:
                continue
            if (
                key[0] == "Gemm"
                and key[5]
                and not all(
                    graph.values[n.inputs[2]].size == graph.values[n.outputs[0]].shape[-1]
                    for n in nodes
                )
            ):
                continue
            adds = self._bias_adds(graph, nodes) if key[0] == "MatMul" else None
            self._fuse(graph, nodes, adds)
            fused += 1
            biases += len(adds or [])
        if fused:
            graph.prune_values()
        return PassResult(
            fused > 0,
            {
                "num_groups": fused,
                "num_bias_adds_merged": biases,
                "num_ops_merged": sum(len(v) for v in groups.values() if len(v) >= self.min_group),
            },
        )

    def _bias_adds(self, graph: Graph, nodes: list[Node]) -> list[tuple[Node, np.ndarray]] | None:
        """Each MatMul sibling's only reader, when every one is ``Add(y, constant bias)`` over
        the last dim: those Adds and their biases (they merge into one Add after the wide
        MatMul, which fuse_elementwise then makes its epilogue)."""
        consumers = graph.consumers()
        out = []
        for n in nodes:
            add = single_consumer(graph, n.outputs[0], consumers)
            if add is None or add.op != "Add":
                return None
            other = add.inputs[1] if add.inputs[0] == n.outputs[0] else add.inputs[0]
            bias = graph.const(other)
            width = graph.values[n.outputs[0]].shape[-1]
            if (
                bias is None
                or bias.size != width
                or bias.shape[-1:] != (width,)
                or graph.values[add.outputs[0]].shape != graph.values[n.outputs[0]].shape
            ):
                return None
            out.append((add, bias.reshape(-1)))
        return out

    def _fuse(
        self, graph: Graph, nodes: list[Node], adds: list[tuple[Node, np.ndarray]] | None = None
    ) -> None:
        first = nodes[0]
        trans_b = first.op == "Gemm" and first.attrs.get("transB", 0)
        ws = [_const(graph, n.inputs[1]) for n in nodes]
        w = np.concatenate(ws, axis=0 if trans_b else -1)
        inputs = [first.inputs[0], graph.add_constant(None, w, "hfuse_w").name]
        if len(first.inputs) > 2:
            b = np.concatenate([_const(graph, n.inputs[2]).reshape(-1) for n in nodes])
            inputs.append(graph.add_constant(None, b, "hfuse_b").name)
        outs = [graph.values[n.outputs[0]] for n in nodes]
        sizes = [o.shape[-1] for o in outs]
        shape = outs[0].shape[:-1] + (sum(sizes),)
        # Insert where the first sibling was: x and the constants are defined by then.
        idx = graph.nodes.index(first)
        wide = graph.add_node(
            first.op,
            inputs,
            [(shape, outs[0].dtype)],
            dict(first.attrs),
            index=idx,
            name=f"{first.name}/hfused",
        )
        src, idx_split = wide.outputs[0], idx + 1
        targets = [n.outputs[0] for n in nodes]
        drop = {id(n) for n in nodes}
        if adds:
            bias = graph.add_constant(None, np.concatenate([b for _, b in adds]), "hfuse_bias").name
            add = graph.add_node(
                "Add",
                [src, bias],
                [(shape, outs[0].dtype)],
                index=idx + 1,
                name=f"{first.name}/hbias",
            )
            src, idx_split = add.outputs[0], idx + 2
            targets = [a.outputs[0] for a, _ in adds]
            drop |= {id(a) for a, _ in adds}
        split = Node(
            "Split",
            [src],
            targets,
            {"axis": len(shape) - 1, "split": sizes},
            f"{first.name}/hsplit",
        )
        graph.nodes.insert(idx_split, split)
        graph.nodes = [n for n in graph.nodes if id(n) not in drop]
