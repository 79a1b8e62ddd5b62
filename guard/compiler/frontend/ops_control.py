"""Control flow: ONNX ``If`` and ``Loop`` into IR nodes whose bodies are closed IR graphs.

Each branch (or loop body) is imported as a model of its own: the enclosing-scope values it
reads become its inputs (constants become its initializers, so its weights stay constants
and fold), every dim is static because the enclosing graph's are, and nested control flow
imports the same way. The IR node reads its captures explicitly, so passes that rename or
delete values see every use and never look inside a body:

- ``If(cond, *captures) {then_branch: Graph, else_branch: Graph}``; each branch's inputs are
  the captures, in that order. A condition the importer can evaluate (shape arithmetic, as
  exporters write for "squeeze if the batch is 1") inlines the branch it selects.
- ``Loop(M, cond, *v_initial, *captures) {body: Graph, carried: int, scan_length: int}``;
  the body's inputs are ``(iteration, cond, *carried, *captures)``, its outputs
  ``(cond, *carried, *scan outputs)``. Scan outputs stack ``scan_length`` iterations of
  ``scan`` ([dtype name, shape] per scan output).

An If whose condition is known only at run time and whose branches differ in output type,
or one of whose branches cannot be imported at the bound shapes, raises
:class:`SpecialisableIf`: the IR types each value once, so the importer compiles the rest
of the model once per branch instead (guard.compiler.frontend.specialise). Where that
cannot apply it is the refusal, naming the node.

Refused, naming the node: a carried value whose shape the body changes, and scan outputs
whose iteration count is not known when the model is imported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from guard.compiler.frontend.context import ImportContext
from guard.compiler.frontend.prepare import free_names
from guard.compiler.ir.core import Constant, Graph, dtype_name
from guard.core.errors import ModelError, UnsupportedOpError

ImportFn = Callable[..., Graph]
SUBGRAPH_OPS = frozenset({"If", "Loop"})


def _label(node: onnx.NodeProto) -> str:
    return node.name or (node.output[0] if node.output else "?")


class SpecialisableIf(ModelError):
    """An If that one IR graph cannot hold (see the module docstring): ``node`` is its label,
    ``cond`` its condition's name, ``why`` the reason in one line, ``refused`` the branches
    that cannot be imported at the bound shapes (attribute name -> the import's error)."""

    def __init__(
        self, ctx: ImportContext, node: onnx.NodeProto, why: str, refused: dict[str, str]
    ) -> None:
        super().__init__(
            why,
            where=ctx.where(node),
            hint="The bundled compiler types each value once: make both branches produce the "
            "same shape (or run this model with onnxruntime).",
        )
        self.node, self.cond, self.why, self.refused = _label(node), node.input[0], why, refused


def _body_model(
    ctx: ImportContext,
    body: onnx.GraphProto,
    captures: list[str],
    formal: list[tuple[str, tuple[int, ...], np.dtype]],
) -> onnx.ModelProto:
    """``body`` as a model: ``formal`` (name, shape, dtype) inputs, then the captures that are
    not constants; constant captures become initializers."""
    g = onnx.GraphProto()
    g.CopyFrom(body)
    del g.input[:]
    for name, shape, dtype in formal:
        g.input.append(
            helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(dtype), shape)
        )
    for name in captures:
        c = ctx.try_const(name)
        if c is not None:
            g.initializer.append(numpy_helper.from_array(np.asarray(c), name))
        else:
            v = ctx.type(name)
            g.input.append(
                helper.make_tensor_value_info(
                    name, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape
                )
            )
    for out in g.output:  # the body's own inference types its outputs
        out.type.tensor_type.ClearField("shape")
    model = helper.make_model(g, opset_imports=list(ctx.model.opset_import))
    model.ir_version = ctx.model.ir_version
    return model


def _import_body(
    ctx: ImportContext,
    node: onnx.NodeProto,
    attr: str,
    captures: list[str],
    formal: list[tuple[str, tuple[int, ...], np.dtype]],
    import_fn: ImportFn,
) -> Graph:
    body = next(a.g for a in node.attribute if a.name == attr)  # checked by _graph_attrs
    model = _body_model(ctx, body, captures, formal)
    model.graph.name = f"{ctx.where(node)} {attr}"
    sub = import_fn(model)
    sub.name = f"{_label(node)}/{attr}"
    return sub


def _runtime_captures(ctx: ImportContext, names: list[str]) -> list[str]:
    return [n for n in names if ctx.try_const(n) is None]


def _graph_attrs(
    ctx: ImportContext, node: onnx.NodeProto, names: tuple[str, ...], n_in: int
) -> dict[str, onnx.GraphProto]:
    """The node's subgraph attributes ``names``; a node without them (or with fewer than
    ``n_in`` inputs) is malformed: a one-line error naming it."""
    found = {a.name: a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH}
    missing = [n for n in names if n not in found]
    if missing or len(node.input) < n_in or not node.input[0] and node.op_type == "If":
        raise ctx.error(
            f"malformed {node.op_type}: needs graph attribute(s) {', '.join(names)} and "
            f"{n_in} input(s) (missing {', '.join(missing) or 'inputs'})",
            hint="Check the model with onnx.checker.check_model and re-export it.",
        )
    return found


def convert_if(ctx: ImportContext, node: onnx.NodeProto, import_fn: ImportFn) -> None:
    branches = _graph_attrs(ctx, node, ("then_branch", "else_branch"), 1)
    cond = ctx.try_const(node.input[0])
    if cond is not None:  # decided at import: inline the selected branch
        attr = "then_branch" if bool(np.asarray(cond).reshape(-1)[0]) else "else_branch"
        caps = _runtime_captures(ctx, free_names(branches[attr]))
        _inline(
            ctx,
            node,
            _import_body(ctx, node, attr, free_names(branches[attr]), [], import_fn),
            caps,
        )
        return
    names: list[str] = []
    for attr in ("then_branch", "else_branch"):
        names += [n for n in free_names(branches[attr]) if n not in names]
    caps = _runtime_captures(ctx, names)
    subs: dict[str, Graph] = {}
    refused: dict[str, str] = {}
    for a in ("then_branch", "else_branch"):
        try:
            subs[a] = _import_body(ctx, node, a, names, [], import_fn)
        except UnsupportedOpError:
            raise  # unsupported at any shape: a build-time refusal, whichever branch runs
        except ModelError as exc:  # e.g. a branch that only runs at other input shapes
            refused[a] = str(exc)
    if refused:
        raise SpecialisableIf(
            ctx, node, f"{' and '.join(refused)} cannot be imported at the bound shapes", refused
        )
    for a, sub in subs.items():
        sub.inputs = list(caps)  # the same capture list for both branches, in node order
        if len(sub.outputs) != len(node.output):
            raise ctx.error(f"{a} has {len(sub.outputs)} outputs, the If node {len(node.output)}")
    then_g, else_g = subs["then_branch"], subs["else_branch"]
    for k, (t, e) in enumerate(zip(then_g.outputs, else_g.outputs, strict=True)):
        tv, ev = then_g.values[t], else_g.values[e]
        if tv.shape != ev.shape or tv.dtype != ev.dtype:
            raise SpecialisableIf(
                ctx,
                node,
                f"the If branches produce different shapes: output {k} is {tv.type_str()} in "
                f"then_branch and {ev.type_str()} in else_branch",
                {},
            )
    types = [(then_g.values[o].shape, then_g.values[o].dtype) for o in then_g.outputs]
    ctx.g.add_node(
        "If",
        [node.input[0], *caps],
        types,
        {"then_branch": then_g, "else_branch": else_g},
        name=_label(node),
        outputs=list(node.output),
    )


def _inline(ctx: ImportContext, node: onnx.NodeProto, sub: Graph, caps: list[str]) -> None:
    """Splice ``sub`` (inputs: ``caps``) into the graph; its outputs become the node's."""
    g = ctx.g
    rename = {i: i for i in sub.inputs}
    for name, v in sub.values.items():
        if name in rename:
            continue
        new = f"{_label(node)}/{name}"
        new = new if new not in g.values else g.fresh(new)
        rename[name] = new
        if isinstance(v, Constant):
            g.add_constant(new, v.data)
    for n in sub.nodes:
        types = [(sub.values[o].shape, sub.values[o].dtype) for o in n.outputs]
        g.add_node(
            n.op,
            [rename.get(i, i) if i else "" for i in n.inputs],
            types,
            n.attrs,
            name=f"{_label(node)}/{n.name}",
            outputs=[rename[o] for o in n.outputs],
        )
    for src, dst in zip(sub.outputs, node.output, strict=True):
        v = sub.values[src]
        g.add_node(
            "Identity", [rename[src]], [(v.shape, v.dtype)], {}, name=_label(node), outputs=[dst]
        )


def convert_loop(ctx: ImportContext, node: onnx.NodeProto, import_fn: ImportFn) -> None:
    body = _graph_attrs(ctx, node, ("body",), 2)["body"]
    if len(body.input) != len(node.input) or len(node.output) < len(node.input) - 2:
        raise ctx.error(
            f"malformed Loop: its body takes {len(body.input)} inputs for the node's "
            f"{len(node.input)} and the node has {len(node.output)} outputs",
            hint="Check the model with onnx.checker.check_model and re-export it.",
        )
    m_name = node.input[0] if len(node.input) > 0 else ""
    c_name = node.input[1] if len(node.input) > 1 else ""
    v_init = list(node.input[2:])
    n_carried, n_scan = len(v_init), len(node.output) - len(v_init)
    formal = [
        (body.input[0].name, (), np.dtype(np.int64)),
        (body.input[1].name, (), np.dtype(np.bool_)),
        *[
            (body.input[2 + k].name, ctx.type(v).shape, ctx.type(v).dtype)
            for k, v in enumerate(v_init)
        ],
    ]
    names = free_names(body)
    caps = _runtime_captures(ctx, names)
    sub = _import_body(ctx, node, "body", names, formal, import_fn)
    sub.inputs = [f[0] for f in formal] + caps
    if len(sub.outputs) != 1 + n_carried + n_scan:
        raise ctx.error(
            f"the body has {len(sub.outputs)} outputs, expected {1 + n_carried + n_scan}"
        )
    for k, v in enumerate(v_init):
        got = sub.values[sub.outputs[1 + k]]
        if got.shape != ctx.type(v).shape or got.dtype != ctx.type(v).dtype:
            raise ctx.error(
                f"loop-carried value {k} changes type across iterations ({ctx.type(v).type_str()} "
                f"in, {got.type_str()} out)",
                hint="The bundled compiler needs loop-carried values of a fixed shape; run this "
                "model with onnxruntime.",
            )
    scan_length = _scan_length(ctx, node, m_name, n_carried) if n_scan else 0
    types: list[tuple[Any, Any]] = [(ctx.type(v).shape, ctx.type(v).dtype) for v in v_init]
    for o in sub.outputs[1 + n_carried :]:
        types.append(((scan_length, *sub.values[o].shape), sub.values[o].dtype))
    ctx.g.add_node(
        "Loop",
        [m_name, c_name, *v_init, *caps],
        types,
        {
            "body": sub,
            "carried": n_carried,
            "scan_length": scan_length,
            "scan": [
                [dtype_name(sub.values[o].dtype), list(sub.values[o].shape)]
                for o in sub.outputs[1 + n_carried :]
            ],
        },
        name=_label(node),
        outputs=list(node.output),
    )


def _scan_length(ctx: ImportContext, node: onnx.NodeProto, m_name: str, n_carried: int) -> int:
    """Iterations the scan outputs stack: ONNX's inferred shape, else a constant trip count."""
    shape, _ = ctx.inferred.get(node.output[n_carried], (None, None))
    if shape is not None and len(shape) >= 1:
        return int(shape[0])
    m = ctx.try_const(m_name) if m_name else None
    cond = ctx.try_const(node.input[1]) if len(node.input) > 1 and node.input[1] else None
    if m is not None and (len(node.input) < 2 or not node.input[1] or cond is not None):
        return int(np.asarray(m).reshape(-1)[0])
    raise ctx.error(
        "the Loop's scan outputs stack a number of iterations that is not known at import "
        "(the trip count or the condition depends on tensor data)",
        hint="Make the trip count a constant (or run this model with onnxruntime).",
    )
