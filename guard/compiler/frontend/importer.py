"""ONNX import: bind shapes, infer types, and convert node by node into the typed IR.

Steps: load; bind every graph input's dims (a dim left symbolic is an error naming it);
ONNX shape inference with data propagation; topological sort (a cycle is an error naming
its nodes); then one converter per node, chosen by op type and the model's opset (see
``registry.py``). Converters resolve shape-like operands (Reshape's shape, Slice's starts,
reduction axes, ...) into attributes by evaluating their constant producers with the
reference kernels; an operand that depends on tensor data is an error naming it.
Initializers become Constants, also when an IR-3 model lists them as inputs.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from guard.compiler.frontend.context import ImportContext, np_dtype
from guard.compiler.frontend.functions import expand_functions
from guard.compiler.frontend.ops_control import (
    SUBGRAPH_OPS,
    SpecialisableIf,
    convert_if,
    convert_loop,
)
from guard.compiler.frontend.prepare import bind_inputs, toposort, without_big_initializers
from guard.compiler.frontend.registry import lookup
from guard.compiler.frontend.specialise import specialise, top_level_if
from guard.compiler.ir.core import Attrs, Constant, Graph, Shape
from guard.core.errors import ModelError, UnsupportedOpError

CONTROL_FLOW = {"If", "Loop", "Scan", "SequenceMap"}
_CONVERT_SUBGRAPH = {"If": convert_if, "Loop": convert_loop}


def _attrs(node: onnx.NodeProto, ctx: ImportContext) -> Attrs:
    out: Attrs = {}
    for a in node.attribute:
        if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            raise UnsupportedOpError(
                f"attribute {a.name!r} holds a subgraph, which the bundled compiler does not "
                "compile",
                where=ctx.where(node),
                hint="Run this model with onnxruntime.",
            )
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, onnx.TensorProto):
            v = numpy_helper.to_array(v)
        elif isinstance(v, list) and v and isinstance(v[0], bytes):
            v = [x.decode() for x in v]
        out[a.name] = v
    return out


def _warn_per_axis_before_13(proto: onnx.ModelProto, opset: int, source: str) -> None:
    """onnxruntime's quantiser writes per-axis (De)QuantizeLinear into opset 11/12 models,
    where ``axis`` is not defined: onnx.checker rejects them, onnxruntime runs them per
    axis. guard runs them as opset 13 defines them, and says so in one line."""
    if opset >= 13:
        return
    odd = [
        n.name or n.output[0]
        for n in proto.graph.node
        if n.op_type in ("QuantizeLinear", "DequantizeLinear")
        and n.domain in ("", "ai.onnx")
        and any(a.name == "axis" for a in n.attribute)
    ]
    if odd:
        warnings.warn(
            f"{source}: {len(odd)} QuantizeLinear/DequantizeLinear node(s) (first {odd[0]!r}) "
            f"carry an 'axis' attribute, which opset {opset} does not define (onnx.checker "
            "rejects the model; onnxruntime runs it): guard runs them per axis as opset 13 "
            "defines; convert the model with onnx.version_converter.convert_version(model, 13) "
            "before quantising to silence this",
            RuntimeWarning,
            stacklevel=3,
        )


def import_onnx(
    model: str | Path | onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None = None
) -> Graph:
    """Import an ONNX model (path or ModelProto) into the typed IR with every dim bound.

    An If of the main graph whose branches the IR cannot type once is specialised: one graph
    per branch behind a guard (guard.compiler.frontend.specialise)."""
    return _import_specialising(model, input_shapes, 0)


def _import_specialising(
    model: str | Path | onnx.ModelProto,
    input_shapes: Mapping[str, Sequence[int]] | None,
    depth: int,
) -> Graph:
    try:
        return _import(model, input_shapes)
    except SpecialisableIf as err:
        proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model))
        node = top_level_if(proto, err)
        if node is None:
            raise  # nested in a body whose own import could not specialise it
        source = str(model) if not isinstance(model, onnx.ModelProto) else proto.graph.name
        return specialise(
            proto, dict(input_shapes or {}), err, node, _import_specialising, depth, source
        )


def _import(
    model: str | Path | onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None = None
) -> Graph:
    if isinstance(model, onnx.ModelProto):
        source = model.graph.name or "<model>"
        proto = model
    else:
        source = str(model)
        try:
            proto = onnx.load(str(model))
        except Exception as exc:
            raise ModelError(
                f"cannot load ONNX model: {exc}",
                where=source,
                hint="Check that the path is an .onnx file (with its external data beside it).",
            ) from exc
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None:
        raise ModelError(
            "the model imports no default-domain opset",
            where=source,
            hint="Re-export with an ai.onnx opset.",
        )
    bound = bind_inputs(proto, input_shapes, source)
    _warn_per_axis_before_13(proto, opset, source)

    # Ops ONNX defines as functions expand into their bodies when we have no converter.
    if any(
        n.domain in ("", "ai.onnx")
        and n.op_type not in CONTROL_FLOW
        and lookup(n.op_type, opset) is None
        for n in proto.graph.node
    ):
        bound_proto = onnx.ModelProto()
        bound_proto.CopyFrom(proto)
        shapes_now = {name: shape for name, shape, _ in bound}
        for inp in bound_proto.graph.input:
            if inp.name in shapes_now:
                del inp.type.tensor_type.shape.dim[:]
                for d in shapes_now[inp.name]:
                    inp.type.tensor_type.shape.dim.add().dim_value = d
        try:
            proto = expand_functions(bound_proto, opset, lambda op: lookup(op, opset) is not None)
        except Exception:  # expansion is best effort; the unsupported-op error below names the op
            pass

    # Check every op before any heavy work, so the first message is the useful one.
    for node in proto.graph.node:
        label = node.name or (node.output[0] if node.output else "?")
        if node.domain in ("", "ai.onnx") and node.op_type in SUBGRAPH_OPS:
            continue  # ops_control imports the bodies (their ops are checked there)
        if node.op_type in CONTROL_FLOW and node.domain in ("", "ai.onnx"):
            raise UnsupportedOpError(
                f"control flow op {node.op_type} (node {label!r}) is not compiled by the "
                "bundled compiler",
                where=source,
                hint="Run this model with the onnxruntime backend.",
            )
        if lookup(node.op_type, opset, node.domain) is None:
            raise UnsupportedOpError(
                f"op {node.op_type} (domain {node.domain or 'ai.onnx'!r}, opset {opset}, "
                f"node {label!r}) is not supported by the bundled compiler",
                where=source,
                hint="Use the onnxruntime backend for this model, or file an issue with the op.",
            )

    # Bind shapes into a copy, then let ONNX inference type the intermediates. Large
    # initializers travel as typed inputs: inference needs their types, not their bytes
    # (and serialising vgg19's 548 MB for it costs seconds); small ones keep their values
    # for data propagation (shape tensors).
    work = onnx.ModelProto()
    work.CopyFrom(without_big_initializers(proto))
    bound_shapes = {name: shape for name, shape, _ in bound}
    for inp in work.graph.input:
        if inp.name in bound_shapes:
            tt = inp.type.tensor_type
            del tt.shape.dim[:]
            for d in bound_shapes[inp.name]:
                tt.shape.dim.add().dim_value = d
    try:
        inferred_model = onnx.shape_inference.infer_shapes(work, strict_mode=False, data_prop=True)
    except Exception as exc:
        raise ModelError(
            f"ONNX shape inference failed: {str(exc).splitlines()[0]}",
            where=source,
            hint="Check the model with onnx.checker and the bound input shapes.",
        ) from exc

    ctx = ImportContext(proto, source, opset)
    for vi in list(inferred_model.graph.value_info) + list(inferred_model.graph.output):
        tt = vi.type.tensor_type
        shape: Shape | None = None
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            shape = tuple(int(d.dim_value) for d in tt.shape.dim)
        try:
            dt = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type)) if tt.elem_type else None
        except (KeyError, TypeError, ValueError):
            dt = None
        ctx.inferred[vi.name] = (shape, dt)

    for name, shape, dtype in bound:
        ctx.g.add_input(name, shape, dtype)
    for init in proto.graph.initializer:
        if init.name in bound_shapes:
            continue
        arr = numpy_helper.to_array(init)
        try:
            ctx.add_const(init.name, arr)
        except KeyError:
            np_dtype(init.data_type, f"{source}: initializer {init.name!r}")

    known = set(ctx.g.values)
    for node in toposort(proto.graph, source, known):
        ctx.node = node
        for i in node.input:
            if i and i not in ctx.g.values:
                raise ctx.error(
                    f"input {i!r} is never defined (dangling use)",
                    hint="Re-export the model; onnx.checker shows the same.",
                )
        if node.op_type in SUBGRAPH_OPS and node.domain in ("", "ai.onnx"):
            _CONVERT_SUBGRAPH[node.op_type](ctx, node, import_onnx)
            continue
        conv = lookup(node.op_type, opset, node.domain)
        assert conv is not None
        attrs = _attrs(node, ctx)
        try:
            conv(ctx, list(node.input), list(node.output), **attrs)
        except TypeError as exc:
            if "unexpected keyword" in str(exc) or "got an unexpected" in str(exc):
                raise UnsupportedOpError(
                    f"attribute not supported by the converter: {exc}",
                    where=ctx.where(),
                    hint="File an issue with the op and attribute.",
                ) from exc
            raise
        for o in node.output:
            if o and o not in ctx.g.values:
                raise ctx.error(f"converter did not define output {o!r}")
    ctx.node = None

    for out in proto.graph.output:
        if out.name not in ctx.g.values:
            raise ModelError(
                f"graph output {out.name!r} is never defined",
                where=source,
                hint="Re-export the model.",
            )
        ctx.g.outputs.append(out.name)
    ctx.g.prune_values()
    # Keep unused-but-declared constants out; graph outputs that are constants stay.
    for o in ctx.g.outputs:
        if isinstance(ctx.g.values.get(o), Constant):
            continue
    return ctx.g
