"""conv_rows: a convolution over a column becomes the same convolution over a row.

A 2-D convolution whose input is one column wide (``N x C x H x 1``) with a ``kh x 1``
kernel is a 1-D convolution along H; exporters write 1-D convolutions this way (jax2tf's
``Conv2D`` over ``[batch, length, 1, channels]``). The code generator tiles and
vectorises along the output row (W), so a width of 1 leaves its register tile one column
wide: the byte classifier's 256 -> 512 channel, kernel 5 layer ran at 98 GFLOP/s in that
form and at 260 GFLOP/s as ``N x C x 1 x H`` with a ``1 x kh`` kernel (znver5, 1 thread).

Both forms have the same bytes in memory (a dimension of size 1 moves for free in NCHW,
NHWC and the blocked layouts), so the rewrite is a view on each side: a Reshape of the
input, the weights reshaped at compile time, a Reshape back after the convolution, and the
same for an epilogue operand (``FusedConv``) that spans H. Runs after fuse_elementwise (the
epilogue stays fused) and before assign_layout (which sees an ordinary convolution, as it
does for the frontend's 1-D convolutions).

Declines (silently: nothing is lost) when the kernel is wider than 1, W is not 1, W is
padded or strided, or the weights are not a constant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from guard.compiler.ir.core import Graph, Node
from guard.compiler.passes.base import Pass, PassResult


def _column(graph: Graph, node: Node) -> bool:
    if node.op not in ("Conv", "FusedConv") or len(node.inputs) < 2:
        return False
    x, w = graph.values[node.inputs[0]], graph.values[node.inputs[1]]
    a = node.attrs
    return (
        len(x.shape) == 4
        and x.shape[3] == 1
        and x.shape[2] > 1
        and graph.is_constant(node.inputs[1])
        and len(w.shape) == 4
        and w.shape[3] == 1
        and list(a.get("pads", [0, 0, 0, 0]))[1::2] == [0, 0]
        and list(a.get("strides", [1, 1]))[1] == 1
        and list(a.get("dilations", [1, 1]))[1] == 1
    )


def _swap(shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts against ``N x C x H x 1``, for ``N x C x 1 x H``."""
    full = (1,) * (4 - len(shape)) + tuple(shape)
    return (full[0], full[1], full[3], full[2])


def _row_attrs(a: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    p = list(a.get("pads", [0, 0, 0, 0]))
    out["pads"] = [p[1], p[0], p[3], p[2]]
    for k in ("strides", "dilations", "kernel_shape"):
        if k in a:
            out[k] = list(a[k])[::-1]
    return out


@dataclass
class ConvRows(Pass):
    name = "conv_rows"

    def run(self, graph: Graph) -> PassResult:
        stats = {"num_conv_rows": 0}
        notes: list[str] = []
        nodes: list[Node] = []
        for node in graph.nodes:
            if not _column(graph, node):
                nodes.append(node)
                continue
            nodes.extend(self._rewrite(graph, node))
            stats["num_conv_rows"] += 1
            notes.append(f"{node.label()}: {graph.values[node.inputs[0]].shape} as a row")
        graph.nodes = nodes
        return PassResult(stats["num_conv_rows"] > 0, stats, notes)

    def _rewrite(self, graph: Graph, node: Node) -> list[Node]:
        before: list[Node] = []
        anchor = int(node.attrs.get("anchor_inputs", len(node.inputs)))
        inputs = list(node.inputs)
        for i, name in enumerate(inputs):
            if i == 2 and i < anchor:  # the bias: one value per output channel
                continue
            v = graph.values[name]
            shape = _swap(v.shape)
            if i != 1 and shape == tuple(v.shape):
                continue
            data = graph.const(name)
            if data is not None:
                if i == 1:
                    shape = tuple(v.shape[:2]) + (1, v.shape[2])
                inputs[i] = graph.add_constant(None, np.ascontiguousarray(data.reshape(shape)),
                                               "row").name  # fmt: skip
                continue
            r = graph.add_node("Reshape", [name], [(shape, v.dtype)], {"shape": list(shape)})
            graph.nodes.remove(r)
            before.append(r)
            inputs[i] = r.outputs[0]
        y = graph.values[node.outputs[0]]
        row = graph.fresh("row")
        graph.add_node(
            node.op, inputs, [(_swap(y.shape), y.dtype)], _row_attrs(node.attrs),
            name=node.name, outputs=[row],
        )  # fmt: skip
        conv = graph.nodes.pop()
        back = graph.add_node(
            "Reshape", [row], [(y.shape, y.dtype)], {"shape": list(y.shape)},
            outputs=[node.outputs[0]],
        )  # fmt: skip
        graph.nodes.pop()
        return [*before, conv, back]
