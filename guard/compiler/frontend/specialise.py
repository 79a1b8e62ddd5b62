"""Specialisation with a guard: an If the IR cannot type once becomes one graph per branch.

The IR types each value once, so an ``If`` whose branches produce different shapes (or one
of whose branches cannot be imported at the bound shapes: Silero VAD's 8 kHz branch at the
16 kHz window) has no single IR form. The identity used instead, for a condition ``c`` and
the rest of the model ``k`` (every node after the If, the graph outputs its results)::

    k(If(c){A}{B}) == If(c){k(A)}{k(B)}

Each side of the right-hand If is the whole model with the If's condition fixed (the
importer inlines the selected branch, as for a condition known at import), so each is a
static graph that compiles like any other: every convolution generated code. The top graph
keeps only the guard (the nodes that compute ``c`` from the model's inputs) and one If whose
branches are those graphs; at run time the host evaluates the guard and calls one
specialisation (guard.compiler.reference.control.run_if, guard.compiler.runtime.control).

Hazards, each checked:

- A branch that cannot be imported at the bound shapes is kept out, not compiled: taking
  it at run time raises its import error, as onnxruntime fails inside that branch.
  ``attrs["specialised"]["refused"]`` holds the message.
- The graph outputs are typed once: specialisations whose outputs differ in type (a model
  that returns [1,1] or [1] depending on the data) are refused, naming the output.
- Only If nodes of the model's main graph specialise here; an If nested in a branch or a
  Loop body specialises inside that body's own import (its outputs typed once as well).
- Each specialised If doubles the graphs compiled: more than ``MAX_DEPTH`` nested in one
  model is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypedDict

import onnx
from onnx import helper

from guard.compiler.frontend.ops_control import SpecialisableIf
from guard.compiler.frontend.prepare import _reads
from guard.compiler.ir.core import Attrs, Graph
from guard.core.errors import ModelError

MAX_DEPTH = 3  # at most 2**3 = 8 specialisations of one model
BRANCHES = (("then_branch", True), ("else_branch", False))

ImportFn = Callable[[onnx.ModelProto, Mapping[str, Sequence[int]], int], Graph]


class Specialised(TypedDict):
    """The ``specialised`` attribute of the If this module makes: the condition it
    dispatches on, why the If was specialised, and each branch compiled or refused."""

    guard: str
    why: str
    branches: dict[str, str]  # then_branch/else_branch -> "compiled" or "refused"
    refused: dict[str, str]  # branch -> why it could not be imported


def top_level_if(proto: onnx.ModelProto, err: SpecialisableIf) -> onnx.NodeProto | None:
    """The main-graph If that ``err`` is about, or None (it is nested in a body)."""
    for n in proto.graph.node:
        label = n.name or (n.output[0] if n.output else "?")
        if n.op_type == "If" and label == err.node and n.input and n.input[0] == err.cond:
            return n
    return None


def specialise(
    proto: onnx.ModelProto,
    shapes: Mapping[str, Sequence[int]],
    err: SpecialisableIf,
    node: onnx.NodeProto,
    import_fn: ImportFn,
    depth: int,
    source: str,
) -> Graph:
    """The top graph for ``proto`` with ``node`` specialised (see the module docstring);
    ``import_fn(proto, shapes, depth)`` imports one specialisation (and may specialise
    further Ifs in it)."""
    head = f"If node {err.node!r}: {err.why}"
    if depth >= MAX_DEPTH:
        raise ModelError(
            f"{head}; specialising it would compile more than {2**MAX_DEPTH} versions of the "
            "model (that many Ifs with differing branches)",
            where=source,
            hint="Run this model with onnxruntime.",
        )
    outputs = [o.name for o in proto.graph.output]
    guard = import_fn(_cone_model(proto, err.cond), shapes, depth + 1)
    clash = sorted(set(outputs) & (set(guard.values) | set(guard.inputs)))
    if clash:
        raise ModelError(f"{head}; it cannot specialise: graph output {clash[0]!r} is an input "
                         "or computes the condition", where=source)  # fmt: skip
    specs: dict[str, Graph] = {}
    refused = dict(err.refused)
    for attr, value in BRANCHES:
        if attr in refused:
            continue
        try:
            specs[attr] = import_fn(_decided(proto, node, value), shapes, depth + 1)
        except ModelError as exc:
            refused[attr] = str(exc)
    if not specs:
        raise ModelError(
            f"no branch of If {err.node!r} can be imported at the bound shapes: "
            + "; ".join(f"{a}: {m}" for a, m in refused.items()),
            where=source,
            hint="Bind the input shapes the model was exported for.",
        )
    first = next(iter(specs.values()))
    for attr, g in specs.items():
        for k, (a, b) in enumerate(zip(first.outputs, g.outputs, strict=True)):
            va, vb = first.values[a], g.values[b]
            if (va.shape, va.dtype) != (vb.shape, vb.dtype):
                raise ModelError(
                    f"{head}; specialised, the model's output {outputs[k]!r} is "
                    f"{va.type_str()} in one branch and {vb.type_str()} in {attr}: a graph "
                    "output is typed once",
                    where=source,
                    hint="Run this model with onnxruntime.",
                )
    return _top_graph(proto, guard, specs, refused, err, outputs)


def _top_graph(
    proto: onnx.ModelProto,
    guard: Graph,
    specs: dict[str, Graph],
    refused: dict[str, str],
    err: SpecialisableIf,
    outputs: list[str],
) -> Graph:
    """The guard's nodes, then one If over the specialisations, producing the outputs."""
    g = Graph(proto.graph.name or "main")
    for i in guard.inputs:
        v = guard.values[i]
        g.add_input(i, v.shape, v.dtype)
    for name, c in guard.constants.items():
        g.add_constant(name, c.data)
    for n in guard.nodes:
        types = [(guard.values[o].shape, guard.values[o].dtype) for o in n.outputs]
        g.add_node(n.op, list(n.inputs), types, dict(n.attrs), name=n.name,
                   outputs=list(n.outputs))  # fmt: skip
    first = next(iter(specs.values()))
    for sub in specs.values():
        sub.inputs = list(guard.inputs)  # the If passes every model input to each
    types = [(first.values[o].shape, first.values[o].dtype) for o in first.outputs]
    attrs: Attrs = {
        **specs,
        "specialised": Specialised(
            guard=err.cond,
            why=err.why,
            branches={a: "compiled" if a in specs else "refused" for a, _ in BRANCHES},
            refused=refused,
        ),
    }
    g.add_node("If", [guard.outputs[0], *guard.inputs], types, attrs, name=err.node,
               outputs=outputs)  # fmt: skip
    g.outputs = list(outputs)
    return g


def _decided(proto: onnx.ModelProto, node: onnx.NodeProto, value: bool) -> onnx.ModelProto:
    """``proto`` with ``node``'s condition replaced by the constant ``value`` (the importer
    then inlines the branch it selects; the guard's nodes become dead and are removed)."""
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    idx = list(proto.graph.node).index(node)
    name = f"{node.input[0]}__specialised_{'then' if value else 'else'}"
    const = helper.make_node(
        "Constant", [], [name], value=helper.make_tensor(name, onnx.TensorProto.BOOL, [], [value])
    )
    out.graph.node[idx].input[0] = name
    out.graph.node.insert(idx, const)
    return out


def _cone_model(proto: onnx.ModelProto, cond: str) -> onnx.ModelProto:
    """The nodes that compute ``cond`` from the model's inputs, as a model whose one output
    is ``cond`` (its inputs: every data input of ``proto``, in order)."""
    producer = {o: n for n in proto.graph.node for o in n.output if o}
    inits = {t.name: t for t in proto.graph.initializer}
    keep: set[int] = set()
    used_inits: set[str] = set()
    stack = [cond]
    while stack:
        name = stack.pop()
        n = producer.get(name)
        if n is None:
            if name in inits:
                used_inits.add(name)
            continue
        if id(n) not in keep:
            keep.add(id(n))
            stack += [r for r in _reads(n) if r]
    g = onnx.GraphProto()
    g.name = f"{proto.graph.name or 'main'} guard"
    g.node.extend(n for n in proto.graph.node if id(n) in keep)
    g.input.extend(i for i in proto.graph.input if i.name not in inits)
    g.initializer.extend(t for t in proto.graph.initializer if t.name in used_inits)
    g.output.append(helper.make_tensor_value_info(cond, onnx.TensorProto.BOOL, None))
    model = helper.make_model(g, opset_imports=list(proto.opset_import))
    model.ir_version = proto.ir_version
    model.functions.extend(proto.functions)
    return model
