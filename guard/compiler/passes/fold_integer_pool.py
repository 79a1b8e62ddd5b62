"""fold_integer_pool: DQ -> GlobalAveragePool or AveragePool -> Q becomes one integer
QLinearConv.

onnxruntime's QLinearGlobalAveragePool, as a depthwise convolution whose window is the
whole image: with x = sx*(qx - zx) per tensor and N = H*W,

    Q(mean(x)) = rint(sx * sum(qx - zx) / N / sy) + zy
    QLinearConv(qx, sx, zx, ones[C,1,H,W], 1/N, 0, sy, zy, group=C)
               = rint(float32(sum(qx - zx)) * float32(float32(sx / N) / sy)) + zy

The sum is exact (int32), so the pool no longer reads a float copy of its input (the
SE block of MobileNetV3 dequantized its HardSwish result to four bytes an element only
for the pool) and runs on bytes in the integer conv's kernels (the direct depthwise one,
codegen/quant/depthwise.py). Hazard: the float pool rounds every addition and the mean
once more; the integer form rounds once. A result at a rounding boundary can move by
one quantisation step (the tests bound it).

An AveragePool with no pads and no dilation (DenseNet's transitions, a 2x2 mean of the
1x1 conv's bytes; overlapping windows such as a 3x3 box filter; ShuffleNet's 7x7 window
with stride 1 over a 7x7 image) is the same depthwise convolution with that window and
stride (N = the window's size, every window whole): it reads no float copy of its input,
which was the int8 DenseNet-121's peak (1.53 MiB of float32 before the first
transition's pool).

Fires when the DequantizeLinear is per tensor on u8/s8, the pool's only reader is a
per-tensor QuantizeLinear to u8/s8 and the input is 4-D; an AveragePool with ceil_mode
or pads also declines (an edge window may divide by fewer elements). The DequantizeLinear stays for
its other readers (dead-code elimination drops it when there are none).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from guard.compiler.ir.core import Graph, Node
from guard.compiler.passes.base import Pass, PassResult, single_consumer
from guard.compiler.passes.fold_qdq import INT8, QParams, qparams


@dataclass
class FoldIntegerPool(Pass):
    name = "fold_integer_pool"

    def run(self, graph: Graph) -> PassResult:
        producers = graph.producers()
        consumers = graph.consumers()
        notes: list[str] = []
        done: dict[int, Node] = {}
        gone: set[int] = set()
        for pool in graph.nodes:
            if pool.op not in ("GlobalAveragePool", "AveragePool"):
                continue
            got = self._match(graph, pool, producers, consumers)
            if isinstance(got, str):
                notes.append(f"{pool.label()}: {got}")
                continue
            q, node = got
            done[id(q)] = node
            gone.add(id(pool))
        if done:
            graph.nodes = [done.get(id(n), n) for n in graph.nodes if id(n) not in gone]
            graph.prune_values()
        return PassResult(bool(done), {"num_integer_pools": len(done)}, notes)

    def _match(
        self, graph: Graph, pool: Node, producers: dict[str, Node],
        consumers: dict[str, list[Node]],
    ) -> tuple[Node, Node] | str:  # fmt: skip
        x = graph.values[pool.inputs[0]]
        if len(x.shape) != 4:
            return f"a {len(x.shape)}-D input (2-D images only)"
        qx = qparams(graph, producers.get(pool.inputs[0]))
        if isinstance(qx, str):
            return f"its input: {qx}"
        if qx.node.op != "DequantizeLinear" or not qx.per_tensor or qx.dtype not in INT8:
            return "its input is not a per-tensor u8/s8 DequantizeLinear"
        q = single_consumer(graph, pool.outputs[0], consumers)
        qy = qparams(graph, q)
        if q is None or isinstance(qy, str) or q.op != "QuantizeLinear":
            return "its result has another reader, is a graph output or is not quantised"
        assert isinstance(qy, QParams)
        if not qy.per_tensor or qy.dtype not in INT8:
            return f"{q.label()} is not a per-tensor u8/s8 QuantizeLinear"
        _, c, h, w = x.shape
        window, strides = (h, w), [1, 1]
        if pool.op == "AveragePool":
            a = pool.attrs
            if a.get("ceil_mode", 0) or any(a["pads"]):
                return "ceil_mode or pads (its edge windows may divide by fewer elements)"
            if any(d != 1 for d in a.get("dilations", [1, 1])):
                return "dilated windows"
            window, strides = tuple(a["kernel_shape"]), list(a["strides"])

        def const(data: np.ndarray, hint: str) -> str:
            return graph.add_constant(None, np.ascontiguousarray(data), hint).name

        ins = [
            qx.node.inputs[0], const(qx.scale.reshape(()), "pool_sx"),
            const(qx.zp.reshape(()).astype(qx.dtype), "pool_zx"),
            const(np.ones((c, 1, *window), np.int8), "pool_w"),
            const(np.asarray(1.0 / (window[0] * window[1]), np.float32), "pool_sw"),
            const(np.zeros((), np.int8), "pool_zw"),
            const(qy.scale.reshape(()), "pool_sy"), const(qy.zp.reshape(()).astype(qy.dtype), "pool_zy"),
        ]  # fmt: skip
        attrs = {"dilations": [1, 1], "group": int(c), "pads": [0, 0, 0, 0], "strides": strides}
        graph.values[q.outputs[0]].dtype = qy.dtype
        return q, Node("QLinearConv", ins, list(q.outputs), attrs, pool.name)
