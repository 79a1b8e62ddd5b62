"""The IR verifier: types, shapes, acyclicity, single definition, no dangling uses.

Run after every pass in tests (and by the pipeline when asked); a failure raises
:class:`VerifyError` naming the node and the rule.
"""

from __future__ import annotations

import numpy as np

from guard.compiler.ir.core import Constant, Graph
from guard.compiler.ir.shapes import infer
from guard.compiler.reference import KERNELS
from guard.core.errors import InternalError


class VerifyError(InternalError):
    """The IR broke an invariant (a compiler bug, not a user error)."""


def verify(graph: Graph, *, known_ops: set[str] | None = None) -> None:
    """Raise VerifyError on the first broken invariant; return None when the graph holds."""
    if known_ops is None:
        known_ops = set(KERNELS)

    def fail(msg: str) -> VerifyError:
        return VerifyError(f"IR verifier: {msg}", where=f"graph {graph.name!r}")

    defined: set[str] = set()
    for name, v in graph.values.items():
        if v.name != name:
            raise fail(f"value table key {name!r} holds value named {v.name!r}")
        if not all(isinstance(d, int) and d >= 0 for d in v.shape):
            raise fail(f"value {name!r} has non-static shape {v.shape}")
        if not isinstance(v.dtype, np.dtype):
            raise fail(f"value {name!r} has no numpy dtype")
        if isinstance(v, Constant):
            if v.data.shape != v.shape or v.data.dtype != v.dtype:
                raise fail(
                    f"constant {name!r} is typed {v.type_str()} but holds "
                    f"{v.data.dtype}{list(v.data.shape)}"
                )
            defined.add(name)
    for i in graph.inputs:
        if i not in graph.values or isinstance(graph.values[i], Constant):
            raise fail(f"graph input {i!r} is not a placeholder in the value table")
        if i in defined:
            raise fail(f"graph input {i!r} defined twice")
        defined.add(i)

    for node in graph.nodes:
        where = node.label()
        if node.op not in known_ops:
            raise fail(f"{where}: unknown op {node.op!r} (no reference kernel)")
        for i in node.inputs:
            if i and i not in defined:
                # Topological order is the acyclicity witness: a use before its
                # definition is either dangling or a cycle.
                raise fail(
                    f"{where}: input {i!r} is used before it is defined (dangling or cyclic)"
                )
        for o in node.outputs:
            if o in defined:
                raise fail(f"{where}: output {o!r} is defined more than once")
            if o not in graph.values or isinstance(graph.values[o], Constant):
                raise fail(f"{where}: output {o!r} has no placeholder in the value table")
            defined.add(o)
        try:
            types = infer(node, graph)
        except Exception as exc:  # a shape function that cannot type its inputs
            raise fail(f"{where}: shape function failed: {exc}") from exc
        if types is not None:
            if len(types) != len(node.outputs):
                raise fail(f"{where}: has {len(node.outputs)} outputs, expected {len(types)}")
            for o, (shape, dtype) in zip(node.outputs, types, strict=True):
                v = graph.values[o]
                if v.shape != tuple(shape) or v.dtype != dtype:
                    raise fail(
                        f"{where}: output {o!r} is typed {v.type_str()} but its inputs give "
                        f"{np.dtype(dtype)}{list(shape)}"
                    )
    for o in graph.outputs:
        if o not in defined:
            raise fail(f"graph output {o!r} is never defined")
