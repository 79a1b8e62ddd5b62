"""Expand ops that ONNX defines as functions (Attention, RotaryEmbedding, Swish, ...) into
their function bodies before import, so the compiler sees only ops it has converters for.

Only for ops without a converter: an op the compiler knows is never expanded. A
context-dependent function body (one that depends on the node's attributes and input
types) is built per node from the inferred input types. Each expanded node calls a
model-local function made for it, and onnx's inliner substitutes the bodies; nested
function ops are expanded on the next round (at most ``rounds``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, cast

import onnx
import onnx.defs
import onnx.inliner
import onnx.shape_inference

DOMAIN = "guard.expand"


class _FunctionSchema(Protocol):
    """The members of onnx.defs.OpSchema that onnx's stubs (1.23) leave out; the extension
    module has them (see its ``__doc__`` strings), so schemas are cast to this."""

    has_function: bool
    function_opset_versions: list[int]
    has_context_dependent_function: bool
    context_dependent_function_opset_versions: list[int]

    def get_function_with_opset_version(self, opset: int, /) -> bytes: ...

    def get_context_dependent_function_with_opset_version(
        self, opset: int, node: bytes, input_types: Sequence[bytes], /
    ) -> bytes: ...


def _types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    g = inferred.graph
    out = {v.name: v.type for v in list(g.input) + list(g.value_info) + list(g.output)}
    for init in g.initializer:
        if init.name not in out:
            out[init.name] = onnx.helper.make_tensor_type_proto(init.data_type, list(init.dims))
    return out


def _body(
    node: onnx.NodeProto, opset: int, types: dict[str, onnx.TypeProto]
) -> onnx.FunctionProto | None:
    try:
        schema = cast(_FunctionSchema, onnx.defs.get_schema(node.op_type, opset, node.domain))
    except onnx.defs.SchemaError:
        return None
    if schema.has_function:
        versions = [v for v in schema.function_opset_versions if v <= opset]
        if not versions:
            return None
        data = schema.get_function_with_opset_version(max(versions))
    elif schema.has_context_dependent_function:
        versions = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
        if not versions or any(i and i not in types for i in node.input):
            return None
        in_types = [
            types[i].SerializeToString() if i else onnx.TypeProto().SerializeToString()
            for i in node.input
        ]
        try:
            data = schema.get_context_dependent_function_with_opset_version(
                max(versions), node.SerializeToString(), in_types
            )
        except Exception:  # the schema declined to build a body for these types
            return None
    else:
        return None
    if not data:
        return None
    fn = onnx.FunctionProto()
    fn.ParseFromString(data)
    return fn


def expand_functions(
    model: onnx.ModelProto, opset: int, supported: Callable[[str], bool], rounds: int = 3
) -> onnx.ModelProto:
    """A copy of ``model`` with every unsupported function op replaced by its body."""
    for _ in range(rounds):
        todo = [
            n for n in model.graph.node if n.domain in ("", "ai.onnx") and not supported(n.op_type)
        ]
        if not todo:
            return model
        types = _types(model)
        out = onnx.ModelProto()
        out.CopyFrom(model)
        expanded = 0
        by_name = {id(n): k for k, n in enumerate(model.graph.node)}
        for n in todo:
            fn = _body(n, opset, types)
            if fn is None:
                continue
            k = by_name[id(n)]
            fn.name = f"{n.op_type}__{k}"
            fn.domain = DOMAIN
            call = out.graph.node[k]
            call.op_type, call.domain = fn.name, DOMAIN
            out.functions.append(fn)
            expanded += 1
        if not expanded:
            return model
        if not any(o.domain == DOMAIN for o in out.opset_import):
            out.opset_import.append(onnx.helper.make_opsetid(DOMAIN, 1))
        model = onnx.inliner.inline_selected_functions(
            out, [(DOMAIN, f.name) for f in out.functions if f.domain == DOMAIN], exclude=False
        )
        del model.functions[:]
    return model
