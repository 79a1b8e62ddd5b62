"""The reference interpreter: one numpy kernel per IR op, the oracle for everything after it.

``run_reference(graph, feeds)`` runs the nodes in order, frees each intermediate after its
last use, and checks every result against the type the IR recorded for it.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from guard.compiler.ir import layout
from guard.compiler.ir.core import Constant, Graph
from guard.compiler.reference import (
    control,
    elementwise,
    index,
    linalg,
    nn,
    norm,
    quant,
    recurrent,
    resize,
    tensor,
)
from guard.compiler.reference.base import Attrs, Kernel, Xs, arg
from guard.core.errors import InternalError, ModelError

KERNELS: dict[str, Kernel] = {
    **{op: elementwise.kernel(op) for op in elementwise.ELEMENTWISE_OPS},
    "FusedElementwise": elementwise.fused_elementwise,
    **elementwise.KERNELS,
    **nn.KERNELS,
    **norm.KERNELS,
    **tensor.KERNELS,
    **index.KERNELS,
    **linalg.KERNELS,
    **quant.KERNELS,
    **recurrent.KERNELS,
    "Resize": resize.resize,
    "GridSample": resize.grid_sample,
}


def _relayout(xs: Xs, a: Attrs) -> list[np.ndarray]:
    return [layout.to_layout(layout.to_nchw(arg(xs), a["from"]), a["to"])]


KERNELS["Relayout"] = _relayout


def _run_body(body: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
    outs = run_reference(body, dict(zip(body.inputs, inputs, strict=True)))
    return [outs[o] for o in body.outputs]


KERNELS["If"] = lambda xs, a: control.run_if(xs, a, _run_body)
KERNELS["Loop"] = lambda xs, a: control.run_loop(xs, a, _run_body)


def _in_layout(op: str, inputs: Xs, attrs: Attrs) -> list[np.ndarray]:
    """Run a layout-carrying op: its first input and output are in attrs["layout"]."""
    lay = attrs["layout"]
    args: Xs = [layout.to_nchw(arg(inputs), lay), *inputs[1:]]
    if op == "FusedConv":
        n = attrs["anchor_inputs"]
        (acc,) = nn.conv(args[:n], attrs)
        return [elementwise.run_program(attrs["program"], inputs, layout.to_layout(acc, lay))]
    return [layout.to_layout(y, lay) for y in KERNELS[op](args, attrs)]


def run_node(op: str, inputs: Xs, attrs: Attrs) -> list[np.ndarray]:
    if attrs.get("layout", "NCHW") != "NCHW" and op in layout.LAYOUT_OPS:
        return _in_layout(op, inputs, attrs)
    return KERNELS[op](inputs, attrs)


def run_reference(graph: Graph, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run ``graph`` on ``feeds`` (one array per graph input); return outputs by name."""
    env: dict[str, np.ndarray] = {}
    for name in graph.inputs:
        v = graph.values[name]
        if name not in feeds:
            raise ModelError(
                f"no feed for graph input {name!r}",
                where=f"graph {graph.name!r}",
                hint=f"Provide every input: {', '.join(graph.inputs)}.",
            )
        arr = np.asarray(feeds[name])
        if arr.shape != v.shape:
            raise ModelError(
                f"feed {name!r} has shape {list(arr.shape)}, the graph was built for "
                f"{list(v.shape)}",
                where=f"graph {graph.name!r}",
                hint="Rebuild for this shape or feed the bound shape.",
            )
        env[name] = arr.astype(v.dtype, copy=False)
    last_use: dict[str, int] = {}
    for idx, node in enumerate(graph.nodes):
        for i in node.inputs:
            last_use[i] = idx
    keep = set(graph.outputs)
    for idx, node in enumerate(graph.nodes):
        args: list[np.ndarray | None] = []
        for i in node.inputs:
            if not i:
                args.append(None)
            elif i in env:
                args.append(env[i])
            else:
                c = graph.values.get(i)
                if not isinstance(c, Constant):
                    raise InternalError(f"reference: {node.label()} reads undefined {i!r}")
                args.append(c.data)
        if node.op not in KERNELS:
            raise InternalError(f"reference: no kernel for {node.label()}")
        outs = run_node(node.op, args, node.attrs)
        for o, arr in zip(node.outputs, outs, strict=True):
            v = graph.values[o]
            arr = np.asarray(arr)
            if arr.shape != v.shape or arr.dtype != v.dtype:
                raise InternalError(
                    f"reference: {node.label()} produced {arr.dtype}{list(arr.shape)} for "
                    f"{o!r}, the IR says {v.type_str()}"
                )
            env[o] = arr
        for i in set(node.inputs):
            if last_use.get(i) == idx and i not in keep and i in env and i not in graph.inputs:
                del env[i]
    out: dict[str, np.ndarray] = {}
    for o in graph.outputs:
        if o in env:
            out[o] = env[o]
        else:
            c = graph.values[o]
            out[o] = c.data if isinstance(c, Constant) else env[o]
    return out
