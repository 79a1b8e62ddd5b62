"""lower_qdq: the QuantizeLinear/DequantizeLinear left on activations become elementwise
steps, so fuse_elementwise merges them with their float neighbours (a DQ -> BN affine -> Q
is then one pass over the tensor instead of three).

The steps are the reference kernels' float32 operations, in their order (exact, no
reassociation):

    DequantizeLinear:  Cast(x, f32) - float(zp)  then  * scale
    QuantizeLinear:    Round(x / scale) + float(zp), Clip to the type's range, Cast

with per-axis scales and zero points reshaped to broadcast along their axis. Hazards: the
division must stay a division (simplify_algebra would turn ``x / c`` into ``x * (1/c)``,
which rounds differently), so this pass runs after the last cleanup; and a NaN activation
has no defined quantized value (the reference's cast makes it 0 on x86, generated code may
not), which a quantized model never produces from finite inputs.

Each lowered node's final step carries ``attrs["qdq"]`` (the op it came from), which the
partition report counts like a relayout. Declines (the node stays, and its emitter or the
cpu partition takes it): a constant input (constant folding's), block quantisation, a
scale that is not a float32 constant, quantized types other than u8/s8 (s32 for a DQ).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from guard.compiler.ir.core import Graph, Node, dtype_name, value_range
from guard.compiler.passes.base import Pass, PassResult

QUANTIZED = {"QuantizeLinear": ("uint8", "int8"), "DequantizeLinear": ("uint8", "int8", "int32")}


@dataclass
class LowerQdq(Pass):
    name = "lower_qdq"

    def run(self, graph: Graph) -> PassResult:
        stats = {"num_lowered_quantize": 0, "num_lowered_dequantize": 0}
        out: list[Node] = []
        changed = False
        for node in graph.nodes:
            steps = self._lower(graph, node) if node.op in QUANTIZED else None
            if steps is None:
                out.append(node)
                continue
            out.extend(steps)
            changed = True
            key = (
                "num_lowered_quantize" if node.op == "QuantizeLinear" else "num_lowered_dequantize"
            )
            stats[key] += 1
        if changed:
            graph.nodes = out
            graph.prune_values()
        return PassResult(changed, stats)

    def _lower(self, graph: Graph, node: Node) -> list[Node] | None:
        x = graph.values[node.inputs[0]]
        if graph.is_constant(node.inputs[0]) or node.attrs.get("block_size", 0):
            return None
        scale = graph.const(node.inputs[1])
        zname = node.inputs[2] if len(node.inputs) > 2 else ""
        zp = graph.const(zname) if zname else None
        if scale is None or scale.dtype != np.float32 or (zname and zp is None):
            return None
        y = graph.values[node.outputs[0]]
        q = y.dtype if node.op == "QuantizeLinear" else x.dtype
        f = x.dtype if node.op == "QuantizeLinear" else y.dtype
        if q.name not in QUANTIZED[node.op] or f != np.float32:
            return None
        shape = [1] * len(x.shape)
        if scale.size > 1:
            shape[int(node.attrs.get("axis", 1))] = scale.size
        bshape = tuple(shape) if scale.size > 1 else ()

        def const(data: np.ndarray, hint: str) -> str:
            return graph.add_constant(None, np.asarray(data, np.float32).reshape(bshape), hint).name

        s = const(scale, "qdq_scale")
        z = None
        if zp is not None and np.any(zp != 0):
            z = const(np.broadcast_to(zp.reshape(-1), (scale.size,)).astype(np.float32), "qdq_zp")
        nodes: list[Node] = []

        def step(op: str, ins: list[str], attrs: dict, dtype: np.dtype, last: bool = False) -> str:
            name = node.outputs[0] if last else graph.fresh(f"{node.name}_{op.lower()}")
            if not last:
                graph.add_node(op, ins, [(x.shape, dtype)], attrs, name=f"{node.name}/{op}",
                               outputs=[name])  # fmt: skip
                nodes.append(graph.nodes.pop())
            else:
                nodes.append(Node(op, ins, [name], attrs, f"{node.name}/{op}"))
            return name

        f32 = np.dtype(np.float32)
        if node.op == "DequantizeLinear":
            v = step("Cast", [node.inputs[0]], {"to": "f32"}, f32)
            if z is not None:
                v = step("Sub", [v, z], {}, f32)
            step("Mul", [v, s], {"qdq": node.op}, f32, last=True)
            return nodes
        lo, hi = value_range(q)
        v = step("Div", [node.inputs[0], s], {}, f32)
        v = step("Round", [v], {}, f32)
        if z is not None:
            v = step("Add", [v, z], {}, f32)
        v = step("Clip", [v], {"min": float(lo), "max": float(hi)}, f32)
        step("Cast", [v], {"to": dtype_name(q), "qdq": node.op}, q, last=True)
        return nodes
