"""move_dequantize: a data-movement op of dequantised bytes moves the bytes, then
dequantises once.

``Concat(DQ(a), DQ(b))`` with one per-tensor scale and zero point on every input is
``DQ(Concat(a, b))`` exactly: the same float32 ``(q - z) * s`` of the same bytes, each
element where the Concat puts it. So is a selection of its input's values (Reshape,
Transpose, Squeeze, Unsqueeze, Flatten, Slice, Identity, a nearest Resize without crop)
and a MaxPool or GlobalMaxPool (the dequantisation never decreases: ``s > 0``, and a
float32 product rounds monotonically, so the maximum of the dequantised values is the
dequantised maximum). fold_qdq folds such an op when a QuantizeLinear with the same
parameters reads it; this pass takes the ones nothing quantises again: guard's QDQ
writer gives a Concat's inputs one scale but leaves its output unquantised (OpenVINO
2024's CPU plugin crashes on DenseNet-121 and ShuffleNet when the output of such a
Concat is quantised too), so DenseNet's dense-block Concats, each read by the next layer's
BatchNorm and the next Concat, concatenate bytes and the planner's views hold bytes. A
chain (the block's next Concat reads the moved DequantizeLinear) moves link by link.

Runs before lower_qdq, on the ONNX-level DequantizeLinear nodes; each DequantizeLinear
stays for its other readers (dead-code elimination drops the rest). Declines: inputs
dequantised with different or per-axis parameters, from other than u8/s8, a constant
input of a Concat, a MaxPool with an Indices output, a Resize other than nearest.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from guard.compiler.ir.core import Graph, Node
from guard.compiler.passes.base import Pass, PassResult
from guard.compiler.passes.fold_qdq import INT8, MOVES, QParams, qparams


@dataclass
class MoveDequantize(Pass):
    name = "move_dequantize"

    def run(self, graph: Graph) -> PassResult:
        producers = graph.producers()
        notes: list[str] = []
        nodes: list[Node] = []
        moved = 0
        for node in graph.nodes:
            got = self._match(graph, node, producers) if node.op in (*MOVES, "Concat") else None
            if got is None or isinstance(got, str):
                if got:
                    notes.append(f"{node.label()}: {got}")
                nodes.append(node)
                continue
            out = node.outputs[0]
            data = node.inputs if node.op == "Concat" else node.inputs[:1]
            q = graph.fresh(f"{out}_q")
            graph.values[q] = type(graph.values[out])(q, graph.values[out].shape, got.dtype)
            ins = [producers[x].inputs[0] for x in data] + list(node.inputs[len(data) :])
            op = Node(node.op, ins, [q], dict(node.attrs), node.name)
            dq = Node("DequantizeLinear", [q, *got.node.inputs[1:]], [out], dict(got.node.attrs),
                      f"{node.name}/dequantize")  # fmt: skip
            producers[q], producers[out] = op, dq
            nodes += [op, dq]
            moved += 1
        if moved:
            graph.nodes = nodes
            graph.prune_values()
        return PassResult(moved > 0, {"num_moved": moved}, notes)

    def _match(self, graph: Graph, node: Node, producers: dict[str, Node]) -> QParams | str | None:
        if len(node.outputs) != 1 or graph.values[node.outputs[0]].dtype != np.float32:
            return None
        data = node.inputs if node.op == "Concat" else node.inputs[:1]
        first = qparams(graph, producers.get(data[0])) if data and data[0] else "no input"
        if isinstance(first, str) or first.node.op != "DequantizeLinear":
            return None  # nothing dequantised: not this pass's
        if node.op == "Resize" and (
            node.attrs.get("mode") != "nearest"
            or node.attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize"
        ):
            return "only a nearest Resize without crop selects input values"
        if not first.per_tensor or first.dtype not in INT8:
            return "its input is dequantised per axis or from other than u8/s8"
        if node.op in ("MaxPool", "GlobalMaxPool") and not float(first.scale.reshape(-1)[0]) > 0:
            return "a scale that is not positive"
        for x in data[1:]:
            other = qparams(graph, producers.get(x)) if x else "no input"
            if isinstance(other, str) or other.node.op != "DequantizeLinear":
                return f"input {x!r} is not dequantised"
            if not other.same(first):
                return f"input {x!r} is dequantised with other parameters"
        return first
