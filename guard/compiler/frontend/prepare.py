"""Model preparation before conversion: bind input shapes, strip large initializers for
shape inference, and sort the nodes (a cycle is an error naming its nodes).

The binder (``graph_inputs`` + ``bind_shapes``) and the sort (``toposort``) are guard's only
ones: guard.suite.model binds a suite's inputs and checks a loaded model for cycles with them.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from guard.compiler.frontend.context import np_dtype
from guard.compiler.ir.core import Shape
from guard.compiler.ir.toposort import topological
from guard.core.errors import ModelError, UnboundInputError


@dataclass(frozen=True)
class GraphInput:
    """One data input of a model as it declares it (initializers listed as inputs skipped)."""

    name: str
    dtype: np.dtype
    dims: tuple[int | str | None, ...]  # int, dim_param name, or None (unnamed dynamic)
    # Axes the model declares with a negative dim_value: some converters spell "dynamic"
    # as -1, and onnxruntime treats it so. guard does too (bindable from the suite).
    negative_axes: tuple[int, ...] = ()
    ranked: bool = True  # False: the model declares no shape at all (any rank)


def graph_inputs(
    model: onnx.ModelProto, dtype_of: Callable[[int, str], np.dtype], where: str | None = None
) -> list[GraphInput]:
    """The model's data inputs; ``dtype_of(elem_type, input_name)`` gives each dtype (or
    raises the caller's error for a dtype it cannot take)."""
    inits = {t.name for t in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        if not vi.type.HasField("tensor_type"):
            raise ModelError(
                f"input {vi.name!r} is not a tensor; guard binds tensor inputs only", where=where
            )
        tt = vi.type.tensor_type
        dims: list[int | str | None] = []
        negative: list[int] = []
        for ax, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value"):
                if d.dim_value < 0:
                    negative.append(ax)
                    dims.append(None)
                else:
                    dims.append(int(d.dim_value))
            elif d.HasField("dim_param"):
                dims.append(d.dim_param)
            else:
                dims.append(None)
        dtype = dtype_of(tt.elem_type, vi.name)
        out.append(GraphInput(vi.name, dtype, tuple(dims), tuple(negative), tt.HasField("shape")))
    return out


def _fmt_dims(dims: tuple[int | str | None, ...]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _example_shape(dims: tuple[int | str | None, ...]) -> str:
    return "[" + ", ".join(str(d) if isinstance(d, int) else "1" for d in dims) + "]"


def bind_shapes(
    inputs: Sequence[GraphInput], given: Mapping[str, Sequence[int] | None], where: str
) -> tuple[dict[str, tuple[int, ...]], list[str]]:
    """Every input's static shape: the given one (checked against the model's rank and
    fixed dims) or the model's own; an unbound dynamic dim is an error naming it.

    ``given`` maps input names to shapes (``None``: named, shape not given). Returns the
    shapes and one note per negative dim bound from ``given``.
    """
    names = {i.name for i in inputs}
    for k in given:
        if k not in names:
            lower = {n.lower(): n for n in names}
            close = (
                [lower[k.lower()]]
                if k.lower() in lower
                else difflib.get_close_matches(k, sorted(names), n=1)
            )
            hint = (
                f"Did you mean {close[0]!r}?" if close else f"Inputs: {', '.join(sorted(names))}."
            )
            raise ModelError(
                f"inputs.{k}: the model has no input named {k!r}", where=where, hint=hint
            )
    shapes: dict[str, tuple[int, ...]] = {}
    notes: list[str] = []
    for gi in inputs:
        want = given.get(gi.name)
        if want is not None:
            shape = tuple(int(d) for d in want)
            if gi.ranked and len(shape) != len(gi.dims):
                raise ModelError(
                    f"inputs.{gi.name}.shape: rank {len(shape)} given, the model's input "
                    f"has rank {len(gi.dims)} {_fmt_dims(gi.dims)}",
                    where=where,
                )
            for ax, (w, have) in enumerate(zip(shape, gi.dims, strict=False)):
                if isinstance(have, int) and have != w:
                    raise ModelError(
                        f"inputs.{gi.name}.shape[{ax}]: the model fixes this dim to {have}, "
                        f"the suite says {w}",
                        where=where,
                    )
            for ax in gi.negative_axes:
                notes.append(
                    f"input {gi.name!r} declares dim {ax} as a negative dim_value (a "
                    f"converter's spelling of dynamic); bound to {shape[ax]} from the suite"
                )
        elif not gi.ranked:
            raise UnboundInputError(
                f"input {gi.name!r} declares no shape",
                where=where,
                hint=f"Bind it in the suite: inputs: {{{gi.name}: {{shape: [...]}}}}.",
                input_name=gi.name,
            )
        else:
            static: list[int] = []
            for ax, d in enumerate(gi.dims):
                if not isinstance(d, int):
                    label = (
                        f" ({d!r})"
                        if d
                        else " (declared negative: dynamic)"
                        if ax in gi.negative_axes
                        else ""
                    )
                    raise UnboundInputError(
                        f"input {gi.name!r} dim {ax}{label} is dynamic and unbound",
                        where=where,
                        hint=f"Bind it in the suite: inputs: {{{gi.name}: {{shape: "
                        f"{_example_shape(gi.dims)}}}}}.",
                        input_name=gi.name,
                        example=tuple(d if isinstance(d, int) else 1 for d in gi.dims),
                    )
                static.append(d)
            shape = tuple(static)
        shapes[gi.name] = shape
    return shapes, notes


def bind_inputs(
    model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None, source: str
) -> list[tuple[str, Shape, np.dtype]]:
    """(name, static shape, dtype) per data input, for the importer (see bind_shapes)."""

    def dtype_of(elem_type: int, name: str) -> np.dtype:
        return np_dtype(elem_type, f"{source}: input {name!r}")

    inputs = graph_inputs(model, dtype_of, source)
    shapes, _ = bind_shapes(inputs, dict(input_shapes or {}), source)
    return [(gi.name, shapes[gi.name], gi.dtype) for gi in inputs]


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


def free_names(graph: onnx.GraphProto) -> list[str]:
    """Names ``graph`` (nested graphs included) reads from an enclosing scope, in order."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    defined |= {o for n in graph.node for o in n.output}
    out: list[str] = []
    for n in graph.node:
        out += [r for r in _reads(n) if r and r not in defined and r not in out]
    return out


def _reads(node: onnx.NodeProto) -> list[str]:
    """A node's inputs and the enclosing-scope values its subgraphs (If/Loop bodies) read."""
    reads = list(node.input)
    for a in node.attribute:
        for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
            reads += free_names(sub)
    return reads


def toposort(
    graph: onnx.GraphProto, source: str, known: Set[str] = frozenset()
) -> list[onnx.NodeProto]:
    """The nodes in dependency order (Kahn's, earliest ready first: a sorted graph keeps its
    order); a cycle is a ModelError naming the nodes on it.

    A node depends on the producer of each input not in ``known`` (values defined before
    any node runs: graph inputs, initializers, an enclosing graph's values).
    """
    producers = {o: idx for idx, n in enumerate(graph.node) for o in n.output if o}
    preds = [
        {producers[i] for i in _reads(n) if i and i in producers and i not in known}
        for n in graph.node
    ]
    order = topological(preds)
    if len(order) != len(graph.node):
        # Left over: the nodes on a cycle and those downstream of one. Peel off, repeatedly,
        # the nodes nothing left over reads: what remains is on (or between) cycles.
        users: dict[int, list[int]] = {}
        for idx, deps in enumerate(preds):
            for d in deps:
                users.setdefault(d, []).append(idx)
        stuck = set(range(len(graph.node))) - set(order)
        while True:
            sinks = {i for i in stuck if not any(u in stuck for u in users.get(i, []))}
            if not sinks or sinks == stuck:
                break
            stuck -= sinks
        on_cycle = [graph.node[i] for i in sorted(stuck)]
        names = ", ".join(f"{n.op_type} {n.name or n.output[0]!r}" for n in on_cycle[:5])
        raise ModelError(
            f"the graph has a cycle through {len(on_cycle)} nodes ({names})",
            where=source,
            hint="ONNX graphs must be acyclic; re-export the model.",
        )
    return [graph.node[i] for i in order]
