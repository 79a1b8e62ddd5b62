"""Model preparation before conversion: bind input shapes, strip large initializers for
shape inference, and sort the nodes (a cycle is an error naming its nodes)."""

from __future__ import annotations

import heapq

import numpy as np
import onnx
from onnx import helper

from guard.compiler.frontend.context import np_dtype
from guard.compiler.ir import Shape
from guard.errors import ModelError


def bind_inputs(
    model: onnx.ModelProto, input_shapes: dict[str, tuple[int, ...]] | None, source: str
) -> list[tuple[str, Shape, np.dtype]]:
    inits = {i.name for i in model.graph.initializer}
    given = dict(input_shapes or {})
    bound = []
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        tt = inp.type.tensor_type
        if not inp.type.HasField("tensor_type"):
            raise ModelError(
                f"graph input {inp.name!r} is not a tensor",
                where=source,
                hint="The bundled compiler takes tensor inputs only.",
            )
        dtype = np_dtype(tt.elem_type, f"{source}: input {inp.name!r}")
        if inp.name in given:
            shape = tuple(int(d) for d in given.pop(inp.name))
            if tt.HasField("shape") and len(tt.shape.dim) != len(shape):
                raise ModelError(
                    f"input {inp.name!r} has rank {len(tt.shape.dim)} but was bound to "
                    f"{list(shape)}",
                    where=source,
                    hint="Give one size per dim.",
                )
        else:
            if not tt.HasField("shape"):
                raise ModelError(
                    f"input {inp.name!r} has no shape",
                    where=source,
                    hint="Bind it with input_shapes (suite `inputs: {name: {shape: ...}}`).",
                )
            dims = []
            for k, d in enumerate(tt.shape.dim):
                if d.HasField("dim_value") and d.dim_value > 0:
                    dims.append(int(d.dim_value))
                elif d.HasField("dim_value") and d.dim_value == 0:
                    dims.append(0)
                else:
                    label = d.dim_param or "?"
                    raise ModelError(
                        f"unbound dynamic dim {label!r} (dim {k}) of input {inp.name!r}",
                        where=source,
                        hint="Bind it with input_shapes (suite `inputs: {name: {shape: ...}}`).",
                    )
            shape = tuple(dims)
        bound.append((inp.name, shape, dtype))
    if given:
        raise ModelError(
            f"input_shapes names {sorted(given)} which are not graph inputs",
            where=source,
            hint=f"Graph inputs: {[b[0] for b in bound]}.",
        )
    return bound


def without_big_initializers(proto: onnx.ModelProto, max_elements: int = 4096) -> onnx.ModelProto:
    big = [
        i for i in proto.graph.initializer if int(np.prod(i.dims, dtype=np.int64)) > max_elements
    ]
    if not big:
        return proto
    light = onnx.ModelProto()
    graph = proto.graph
    light.ir_version = proto.ir_version
    light.opset_import.extend(proto.opset_import)
    light.graph.name = graph.name
    light.graph.node.extend(graph.node)
    big_names = {i.name for i in big}
    light.graph.initializer.extend(i for i in graph.initializer if i.name not in big_names)
    declared = {i.name for i in graph.input}
    light.graph.input.extend(graph.input)
    for i in big:
        if i.name not in declared:
            light.graph.input.append(
                helper.make_tensor_value_info(i.name, i.data_type, list(i.dims))
            )
    light.graph.output.extend(graph.output)
    light.graph.value_info.extend(graph.value_info)
    light.functions.extend(proto.functions)
    return light


def toposort(graph: onnx.GraphProto, source: str, known: set[str]) -> list[onnx.NodeProto]:
    producers = {o: idx for idx, n in enumerate(graph.node) for o in n.output if o}
    indeg = []
    users: dict[int, list[int]] = {}
    for idx, n in enumerate(graph.node):
        deps = {producers[i] for i in n.input if i and i in producers and i not in known}
        indeg.append(len(deps))
        for d in deps:
            users.setdefault(d, []).append(idx)
    # Kahn's algorithm taking the earliest ready node first: a sorted model keeps its order.
    ready = [i for i, d in enumerate(indeg) if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        idx = heapq.heappop(ready)
        order.append(idx)
        for u in users.get(idx, []):
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(graph.node):
        stuck = [graph.node[i] for i in range(len(graph.node)) if indeg[i] > 0]
        names = ", ".join(f"{n.op_type} {n.name or n.output[0]!r}" for n in stuck[:5])
        raise ModelError(
            f"the graph has a cycle through {len(stuck)} nodes ({names})",
            where=source,
            hint="ONNX graphs must be acyclic; re-export the model.",
        )
    return [graph.node[i] for i in order]
