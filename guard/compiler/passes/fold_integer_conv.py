"""fold_integer_conv: a Conv on dequantized int8 operands whose float result is read by
float ops (no QuantizeLinear right after it) runs as an integer convolution with a float
epilogue, as onnxruntime's QDQ models leave them around HardSwish, Sigmoid, residual Adds,
Resize and values with two readers.

Compute: with x = sx*(qx-zx) (per tensor) and w[c] = sw[c]*(qw[c]-zw[c]) (per tensor or
per output channel c, axis 0), and b the bias (a float constant, or a DequantizeLinear of
a constant, which this pass evaluates as the reference does),

    Conv(DQ(qx), DQ(qw), b)[c] = sx*sw[c] * sum (qx-zx)(qw[c]-zw[c]) + b[c]

becomes ``ConvInteger(qx, qw, zx, zw)`` (the sum, exact in int32), then the elementwise
steps ``Cast(acc, f32) * fl(sx*sw[c]) + b[c]``, which fuse_elementwise merges with the
float ops that follow (the activation, the next QuantizeLinear's steps). The integer op
reads a quarter of the bytes and runs on the target's integer dot product.

Hazard: the float graph rounds every product and partial sum to float32, the rewritten
one rounds the exact sum once (and a sum beyond 2^24 in the Cast), so the two differ by
float32 rounding, as fold_qdq's folds do; the rewritten graph's reference is the oracle
the generated code equals bit for bit.

A ConvTranspose whose stride is its kernel (ir/conv_transpose.py ``blockwise``) folds the
same way into guard's ``ConvTransposeInteger(qx, qw, zx, zw)`` (weight scale per tensor or
along axis 1, the output channels), whose kernel sums in float32 exactly; the fold declines
one whose sums could reach 2^24 (``exact_bound``), where float32 would round.

Runs after fold_qdq (which takes the convs followed by a QuantizeLinear with an int32
bias) and before constant folding, which would dequantize the weights. Declines (with a
note naming the node): operands not dequantized from u8/s8, a per-axis activation scale,
a weight scale not along the output channels, non-constant scales or zero points, a bias
that is neither a float constant nor a DequantizeLinear of a constant, and a conv that is
not 2-D (the integer conv emitter's reach).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from guard.compiler.ir.conv_transpose import EXACT, blockwise, exact_bound
from guard.compiler.ir.core import Graph, Node
from guard.compiler.passes.base import Pass, PassResult
from guard.compiler.passes.fold_qdq import INT8, QParams, drop_unread_dequantize, qparams
from guard.compiler.reference import run_node

F32 = np.dtype(np.float32)


@dataclass
class FoldIntegerConv(Pass):
    name = "fold_integer_conv"

    def run(self, graph: Graph) -> PassResult:
        stats = {"num_integer_convs": 0, "num_declined": 0}
        notes: list[str] = []
        producers = graph.producers()
        out: list[Node] = []
        for node in graph.nodes:
            if node.op not in ("Conv", "ConvTranspose"):
                out.append(node)
                continue
            steps = self._rewrite(graph, node, producers)
            if isinstance(steps, str):
                stats["num_declined"] += 1
                notes.append(f"kept {node.label()} in float: {steps}")
                out.append(node)
                continue
            out.extend(steps)
            stats["num_integer_convs"] += 1
        if not stats["num_integer_convs"]:
            return PassResult(False, stats, notes)
        graph.nodes = out
        drop_unread_dequantize(graph)
        return PassResult(True, stats, notes)

    def _rewrite(self, graph: Graph, conv: Node, producers: dict[str, Node]) -> list[Node] | str:
        y = graph.values[conv.outputs[0]]
        if y.dtype != F32 or len(y.shape) != 4:
            return "not a 2-D float32 convolution"
        qx = qparams(graph, producers.get(conv.inputs[0]))
        qw = qparams(graph, producers.get(conv.inputs[1]))
        for what, qp in (("input", qx), ("weight", qw)):
            if isinstance(qp, str):
                return f"its {what}: {qp}"
            assert isinstance(qp, QParams)
            if qp.node.op != "DequantizeLinear" or qp.dtype not in INT8:
                return f"its {what} is not dequantized from u8/s8"
        assert isinstance(qx, QParams) and isinstance(qw, QParams)
        if not qx.per_tensor:
            return "its input is quantised per axis (needs one scale)"
        n_out = y.shape[1]
        axis = 1 if conv.op == "ConvTranspose" else 0
        if not qw.per_tensor and (qw.axis != axis or qw.scale.size != n_out):
            return f"its weight scale is not per output channel (axis {axis})"
        qw_name = qw.node.inputs[0]
        if conv.op == "ConvTranspose":
            why = self._transpose(graph, conv, qx, qw, producers)
            if isinstance(why, str):
                return why
            (qw_name,) = why
        bias = self._bias(graph, conv, producers, n_out)
        if isinstance(bias, str):
            return bias
        per = (n_out,) if not qw.per_tensor else ()

        def c(data: np.ndarray, hint: str) -> str:
            return graph.add_constant(None, np.ascontiguousarray(data), hint).name

        zw = np.broadcast_to(qw.zp.reshape(-1), per or (1,)).reshape(per).astype(qw.dtype)
        ins = [qx.node.inputs[0], qw_name,
               c(qx.zp.reshape(()).astype(qx.dtype), "qconv_zx"), c(zw, "qconv_zw")]  # fmt: skip
        nodes: list[Node] = []

        def step(op: str, args: list[str], dtype: np.dtype, attrs: dict, last: bool) -> str:
            outs = list(conv.outputs) if last else None
            graph.add_node(op, args, [(y.shape, dtype)], attrs, name=f"{conv.name}/{op}",
                           outputs=outs)  # fmt: skip
            nodes.append(graph.nodes.pop())
            return nodes[-1].outputs[0]

        acc = graph.fresh(f"{conv.name}_acc")
        graph.values.pop(conv.outputs[0])
        graph.add_node(f"{conv.op}Integer", ins, [(y.shape, np.int32)], dict(conv.attrs),
                       name=conv.name, outputs=[acc])  # fmt: skip
        nodes.append(graph.nodes.pop())
        scale = (np.float32(qx.scale.reshape(-1)[0]) * qw.scale.astype(F32).reshape(-1)).astype(F32)
        v = step("Cast", [acc], F32, {"to": "f32"}, False)
        s = c(scale.reshape((n_out, 1, 1) if per else ()), "qconv_scale")
        v = step("Mul", [v, s], F32, {}, bias is None)
        if bias is not None:
            step("Add", [v, c(bias.reshape(n_out, 1, 1), "qconv_bias")], F32, {}, True)
        return nodes

    def _transpose(
        self, graph: Graph, conv: Node, qx: QParams, qw: QParams, producers: dict[str, Node]
    ) -> str | tuple[str]:
        """Why the ConvTranspose stays float, or its quantised weights' name (a constant:
        onnxruntime's quantiser leaves ConvTranspose weights as QuantizeLinear of the float
        weights, which this evaluates with the reference kernel, as constant folding would)."""
        xs, ws = (graph.values[v].shape for v in conv.inputs[:2])
        if not blockwise(conv.attrs, xs, ws):
            return "a ConvTranspose whose stride is not its kernel (blocks overlap)"
        name = qw.node.inputs[0]
        qdata = graph.const(name)
        q = producers.get(name)
        if qdata is None and q is not None and q.op == "QuantizeLinear":
            args = [graph.const(i) if i else None for i in q.inputs]
            if all(a is not None for i, a in zip(q.inputs, args, strict=True) if i):
                (qdata,) = run_node(q.op, args, q.attrs)
                name = graph.add_constant(None, qdata, "qconvt_w").name
        if qdata is None:
            return "its quantised weights are not a constant"
        if exact_bound(qdata, qw.zp.reshape(-1)) >= EXACT:
            return "its integer sums could reach 2^24 (float32 would round them)"
        return (name,)

    def _bias(
        self, graph: Graph, conv: Node, producers: dict[str, Node], n_out: int
    ) -> np.ndarray | None | str:
        if len(conv.inputs) < 3 or not conv.inputs[2]:
            return None
        name = conv.inputs[2]
        data = graph.const(name)
        if data is not None:
            if data.dtype != F32 or data.size not in (1, n_out):
                return "its bias is not a float32 constant per output channel"
            return np.broadcast_to(data.reshape(-1), (n_out,)).astype(F32)
        qb = qparams(graph, producers.get(name))
        if isinstance(qb, str):
            return f"its bias: {qb}"
        q = graph.const(qb.node.inputs[0])
        if qb.node.op != "DequantizeLinear" or q is None or q.size not in (1, n_out):
            return "its bias is not a DequantizeLinear of a per-channel constant"
        # The reference's DequantizeLinear: Cast to float32, minus the zero point, times
        # the scale, each in float32.
        zp = qb.zp.astype(F32).reshape(-1)
        b = (q.astype(F32).reshape(-1) - zp) * qb.scale.astype(F32).reshape(-1)
        return np.broadcast_to(b.astype(F32), (n_out,)).astype(F32)
