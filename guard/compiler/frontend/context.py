"""What every op converter works with while one model is imported: ``ImportContext``.

The context holds the graph being built, ONNX's inferred types and the constant
producers already evaluated; converters (ops_*.py) emit IR nodes through it and resolve
shape-like operands to constants with it. ``np_dtype`` maps an ONNX element type to the
IR's dtype, or says which types the bundled compiler takes. The importer (importer.py)
and the binder (prepare.py) use both; none of them imports the importer back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import helper

from guard.compiler.ir.core import Attrs, Graph, Node, Shape, Value, dtype_name
from guard.compiler.ir.shapes import infer
from guard.compiler.reference import run_node
from guard.core.errors import ModelError

# A converter: (ctx, node inputs, node outputs, **the node's attributes with the spec's
# defaults) -> None; it emits IR nodes through the context.
Converter = Callable[..., None]


def np_dtype(elem_type: int, where: str) -> np.dtype:
    try:
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
        dtype_name(dt)
        return dt
    except (KeyError, TypeError, ValueError):
        name = onnx.TensorProto.DataType.Name(elem_type) if elem_type else "undefined"
        raise ModelError(
            f"dtype {name} is not supported by the bundled compiler",
            where=where,
            hint="Supported: float16/32/64, bfloat16, float8 (e4m3fn/e5m2 and fnuz), int4-64, "
            "uint4-64, bool; cast at export.",
        ) from None


class ImportContext:
    """State shared by converters while one model is imported."""

    def __init__(self, model: onnx.ModelProto, source: str, opset: int) -> None:
        self.model = model
        self.source = source
        self.opset = opset
        self.g = Graph(model.graph.name or "main")
        self.inferred: dict[str, tuple[Shape | None, np.dtype | None]] = {}
        self._folded: dict[str, np.ndarray] = {}
        self.node: onnx.NodeProto | None = None

    # -- messages -----------------------------------------------------------------------
    def where(self, node: onnx.NodeProto | None = None) -> str:
        node = node or self.node
        if node is None:
            return self.source
        label = node.name or (node.output[0] if node.output else "?")
        return f"{self.source}: {node.op_type} node {label!r}"

    def error(self, msg: str, hint: str | None = None) -> ModelError:
        return ModelError(msg, where=self.where(), hint=hint)

    # -- values -------------------------------------------------------------------------
    def type(self, name: str) -> Value:
        v = self.g.values.get(name)
        if v is None:
            raise self.error(f"input {name!r} is not defined")
        return v

    def const(self, name: str, what: str = "operand") -> np.ndarray:
        """The compile-time value of ``name``, evaluating constant producers if needed."""
        value = self.try_const(name)
        if value is None:
            raise self.error(
                f"its {what} ({name!r}) depends on tensor data; the bundled compiler needs "
                "it to be constant",
                hint="Export with static shapes (or fold the model, e.g. onnxsim) and retry.",
            )
        return value

    def const_ints(self, name: str, what: str = "operand") -> list[int]:
        """A constant operand (axes, pads, a shape...) as Python ints."""
        return [int(v) for v in np.asarray(self.const(name, what)).reshape(-1)]

    def const_scalar(self, name: str, what: str = "operand") -> Any:
        """The first element of a constant operand (k, axis, depth...) as a Python scalar."""
        return np.asarray(self.const(name, what)).reshape(-1)[0].item()

    def try_const(self, name: str) -> np.ndarray | None:
        if not name:
            return None
        c = self.g.const(name)
        if c is not None:
            return c
        if name in self._folded:
            return self._folded[name]
        producer = self._producers().get(name)
        if producer is None:
            return None
        args: list[np.ndarray | None] = []
        for i in producer.inputs:
            if not i:
                args.append(None)
                continue
            a = self.try_const(i)
            if a is None:
                return None
            args.append(a)
        if sum(self.g.values[o].size for o in producer.outputs) > 1 << 16:
            return None  # shape arithmetic is small; do not materialise weights here
        outs = run_node(producer.op, args, producer.attrs)
        for o, arr in zip(producer.outputs, outs, strict=True):
            self._folded[o] = arr
        return self._folded[name]

    def _producers(self) -> dict[str, Node]:
        return {o: n for n in self.g.nodes for o in n.outputs}

    def add_const(self, name: str, data: np.ndarray) -> str:
        data = np.asarray(data)
        dtype_name(data.dtype)
        self.g.add_constant(name, np.asarray(data, order="C"))
        return name

    def fresh(self, hint: str) -> str:
        return self.g.fresh(hint)

    # -- emission -----------------------------------------------------------------------
    def emit(
        self,
        op: str,
        inputs: list[str],
        attrs: Attrs | None = None,
        outputs: list[str] | None = None,
        n_out: int = 1,
    ) -> list[str]:
        """Add an IR node; its output types come from the IR shape function, ONNX inference,
        or (for constant inputs) from evaluating it."""
        assert self.node is not None
        outs = outputs if outputs is not None else [self.fresh(op.lower()) for _ in range(n_out)]
        node = self.g.add_node(
            op,
            inputs,
            [((), np.float32)] * len(outs),
            attrs,
            outputs=outs,
            name=self.node.name or self.node.output[0],
        )
        try:
            types = infer(node, self.g)
        except Exception as exc:
            self.g.nodes.pop()
            raise self.error(f"cannot type {op} with these inputs: {exc}") from exc
        if types is None:
            types = []
            for o in outs:
                shape, dtype = self.inferred.get(o, (None, None))
                if shape is None or dtype is None:
                    self.g.nodes.pop()
                    raise self.error(
                        f"the shape of output {o!r} is not static after binding the inputs",
                        hint="Bind every dynamic dim with input_shapes (suite `inputs:`).",
                    )
                types.append((shape, dtype))
        for o, (shape, dtype) in zip(outs, types, strict=True):
            v = self.g.values[o]
            v.shape, v.dtype = tuple(int(d) for d in shape), np.dtype(dtype)
        return outs
