"""Cutting a connected subgraph out of an ONNX model, fed by recorded intermediate tensors.

A cut keeps a set of the model's compute nodes. Every tensor a kept node reads that no kept
node produces becomes a graph input of the cut, fed with the value the full model computed
(recorded once, by the golden-producing reference: onnxruntime with every optimisation
off), unless it is constant (an initializer, or computed from constants only), in which
case it is embedded as an initializer so the compiler still sees a constant weight. The
cut's outputs are what its nodes produce for nodes outside it, the model's outputs, and
values nobody reads.

Constant-only nodes (Constant, Shape/Size of bound tensors, and chains over those and the
initializers) are never part of a cut: they are folded into the initializers, so the node
counts here are compute nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from guard.core.errors import ModelError

SHAPE_OPS = ("Shape", "Size")
RANDOM_OPS = (
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Multinomial",
    "Bernoulli",
)


def _subgraph_reads(g: onnx.GraphProto) -> set[str]:
    """Names a subgraph (If/Loop/Scan body) reads from its enclosing scope."""
    defined = {i.name for i in g.input} | {t.name for t in g.initializer}
    reads: set[str] = set()
    for n in g.node:
        reads |= {x for x in node_reads(n) if x and x not in defined}
        defined |= set(n.output)
    return reads


def node_reads(n: onnx.NodeProto) -> list[str]:
    """The tensors a node reads: its inputs and what its subgraphs capture."""
    out = [x for x in n.input if x]
    for a in n.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out += sorted(_subgraph_reads(a.g))
        elif a.type == onnx.AttributeProto.GRAPHS:
            for g in a.graphs:
                out += sorted(_subgraph_reads(g))
    return out


@dataclass
class ModelGraph:
    """The model's nodes with their edges, and which tensors are constant."""

    model: onnx.ModelProto
    producer: dict[str, int]
    consumers: dict[str, list[int]]
    constant: set[str]  # initializers and tensors computed from constants only
    compute: list[int]  # indices of nodes that are not constant-only, in graph order

    @classmethod
    def of(cls, model: onnx.ModelProto) -> ModelGraph:
        g = model.graph
        producer: dict[str, int] = {}
        consumers: dict[str, list[int]] = {}
        # Initializers listed as graph inputs too (IR < 4) are still constants: guard binds
        # only the inputs without one.
        constant = {t.name for t in g.initializer}
        compute = []
        for i, n in enumerate(g.node):
            reads = node_reads(n)
            for x in reads:
                consumers.setdefault(x, []).append(i)
            for o in n.output:
                if o:
                    producer[o] = i
            # Shape and Size read only dims, and guard binds every dim: their outputs (and
            # what is computed from them alone) are constants of this binding.
            if n.op_type in SHAPE_OPS or (
                all(x in constant for x in reads) and n.op_type not in RANDOM_OPS
            ):
                constant |= {o for o in n.output if o}
            else:
                compute.append(i)
        return cls(model, producer, consumers, constant, compute)

    def neighbours(self, i: int) -> set[int]:
        n = self.model.graph.node[i]
        out = {self.producer[x] for x in node_reads(n) if x in self.producer}
        for o in n.output:
            out |= set(self.consumers.get(o, []))
        return out - {i}

    def components(self, nodes: Iterable[int]) -> list[list[int]]:
        """Weakly connected components of ``nodes`` (each sorted, in graph order)."""
        left = set(nodes)
        comps = []
        while left:
            start = min(left)
            seen, stack = {start}, [start]
            while stack:
                for j in self.neighbours(stack.pop()):
                    if j in left and j not in seen:
                        seen.add(j)
                        stack.append(j)
            left -= seen
            comps.append(sorted(seen))
        return sorted(comps, key=lambda c: c[0])


def _elem_types(model: onnx.ModelProto) -> dict[str, int]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - inference is best effort; ORT reports what it needs
        inferred = model
    g = inferred.graph
    out = {}
    for vi in (*g.input, *g.output, *g.value_info):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            out[vi.name] = vi.type.tensor_type.elem_type
    return out


def record_intermediates(
    model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Every tensor the full model computes, by the reference (ORT, optimisations off)."""
    from guard.backends.onnxruntime import _ort, session_options

    types = _elem_types(model)
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    have = {o.name for o in probe.graph.output}
    names = [o for n in model.graph.node for o in n.output if o and o not in have]
    untyped = [x for x in names if x not in types]
    for x in names:
        if x in types:
            probe.graph.output.append(helper.make_tensor_value_info(x, types[x], None))
    ort = _ort()
    try:
        sess = ort.InferenceSession(
            probe.SerializeToString(),
            session_options(1, "disabled"),
            providers=["CPUExecutionProvider"],
        )
        outs = sess.run(None, dict(feeds))
    except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types
        first = (str(exc).strip().splitlines() or [repr(exc)])[0]
        raise ModelError(
            f"recording intermediate tensors with onnxruntime failed: {first}",
            hint="The model must run on onnxruntime (the golden producer).",
        ) from None
    values = {o.name: np.asarray(v) for o, v in zip(sess.get_outputs(), outs, strict=True)}
    values.update({k: np.asarray(v) for k, v in feeds.items()})
    for t in model.graph.initializer:
        values.setdefault(t.name, numpy_helper.to_array(t))
    # Tensors without a known type cannot be cut points; a cut needing one is refused.
    for x in untyped:
        values.pop(x, None)
    return values


@dataclass
class Cut:
    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    nodes: list[int]


class CutError(Exception):
    """This node set cannot be cut out (a needed tensor was not recorded)."""


def cut(mg: ModelGraph, nodes: Iterable[int], values: Mapping[str, np.ndarray]) -> Cut:
    """The sub-model of ``nodes``: recorded values as inputs, constants as initializers."""
    keep = sorted(set(nodes))
    kept = set(keep)
    g = mg.model.graph
    produced = {o for i in keep for o in g.node[i].output if o}
    inits = {t.name: t for t in g.initializer}
    graph_outputs = {o.name for o in g.output}
    inputs, new_inits, feeds = [], [], {}
    seen: set[str] = set()
    for i in keep:
        for x in node_reads(g.node[i]):
            if x in produced or x in seen:
                continue
            seen.add(x)
            if x in inits and x in mg.constant:
                new_inits.append(inits[x])
            elif x in mg.constant:
                if x not in values:
                    raise CutError(f"constant {x!r} was not recorded")
                new_inits.append(numpy_helper.from_array(np.asarray(values[x]), x))
            else:
                if x not in values:
                    raise CutError(f"tensor {x!r} was not recorded (unknown type)")
                v = np.asarray(values[x])
                inputs.append(
                    helper.make_tensor_value_info(
                        x, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)
                    )
                )
                feeds[x] = v
    # Outputs: what the rest of the model (or the model's caller) reads from the cut. A
    # value nobody reads (Dropout's mask) is dead: an output only when nothing else is.
    live, dead = [], []
    for i in keep:
        for o in g.node[i].output:
            if not o:
                continue
            readers = mg.consumers.get(o, [])
            if o in graph_outputs or any(r not in kept for r in readers):
                live.append(o)
            elif not readers:
                dead.append(o)
    outputs = []
    for o in live or [d for d in dead if d in values]:
        if o not in values:
            raise CutError(f"output {o!r} was not recorded (unknown type)")
        v = np.asarray(values[o])
        outputs.append(
            helper.make_tensor_value_info(
                o, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)
            )
        )
    if not outputs:
        raise CutError("the cut has no recorded output")
    sub = helper.make_graph(
        [g.node[i] for i in keep], f"{g.name or 'model'}_reduced", inputs, outputs, new_inits
    )
    m = helper.make_model(
        sub, opset_imports=list(mg.model.opset_import), producer_name="guard reduce"
    )
    m.ir_version = mg.model.ir_version
    for f in mg.model.functions:
        m.functions.append(f)
    return Cut(m, feeds, keep)
