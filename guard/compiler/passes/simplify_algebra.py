"""simplify_algebra: local algebraic identities, as a table of rules.

Rules (pattern -> rewrite; each rule checks shapes and dtypes are unchanged):

- ``Identity(x)`` -> ``x``; ``Cast(x, to=dtype(x))`` -> ``x``
- ``x * 1``, ``1 * x``, ``x / 1`` -> ``x``
- ``x + 0``, ``0 + x``, ``x - 0`` -> ``x``.  Hazard: IEEE ``-0.0 + (+0.0) = +0.0``, so
  ``x + 0.0`` is not an identity on ``x = -0.0`` (the sign of zero flips). The only
  observable difference is through a later division by it or ``atan2``/``copysign``;
  like onnxruntime and TVM we accept it, and ``allow_signed_zero_change=False`` restricts
  the rule to the exact cases ``x + (-0.0)`` and ``x - (+0.0)``.
- ``x / c`` (float constant c, no zero, finite reciprocal) -> ``x * (1/c)``.  Not
  bit-exact unless c is a power of two: up to 1 ulp per element.
- ``Transpose(Transpose(x, p), q)`` -> ``Transpose(x, p[q])``, and an identity perm -> ``x``
- ``Reshape(Reshape(x))`` -> ``Reshape(x)``; a Reshape to the input's own shape -> ``x``

Never folded: ``x * 0`` -> 0 (wrong for NaN and inf).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from guard.compiler.ir.core import Graph, Node
from guard.compiler.passes.base import Pass, PassResult, bypass


@dataclass
class SimplifyAlgebra(Pass):
    name = "simplify_algebra"
    allow_signed_zero_change: bool = True

    def run(self, graph: Graph) -> PassResult:
        self._g = graph
        self._producers = graph.producers()
        stats = {rule: 0 for rule in RULES}
        declined: list[str] = []
        dead: set[int] = set()
        for node in list(graph.nodes):
            for rule, fn in RULES.items():
                outcome = fn(self, node)
                if outcome is None:
                    continue
                if isinstance(outcome, str):  # bypass node -> this value
                    if bypass(graph, node, node.outputs[0], outcome):
                        dead.add(id(node))
                        stats[rule] += 1
                    else:
                        declined.append(
                            f"{rule} declined on {node.label()}: it would alias a "
                            "graph output to an input, constant or other output"
                        )
                    break
                stats[rule] += 1  # rewritten in place
                break
        graph.nodes = [n for n in graph.nodes if id(n) not in dead]
        changed = any(stats.values())
        if changed:
            graph.prune_values()
        return PassResult(changed, {f"num_{k}": v for k, v in stats.items()}, declined)

    # -- helpers ------------------------------------------------------------------------
    def _same_type(self, a: str, b: str) -> bool:
        va, vb = self._g.values[a], self._g.values[b]
        return va.shape == vb.shape and va.dtype == vb.dtype

    def _const_is(self, name: str, value: float, out: str, x: str) -> bool:
        c = self._g.const(name)
        if c is None or c.size == 0 or not self._same_type(x, out):
            return False
        return bool(np.all(c == value))

    # -- rules (return a value name to bypass to, True for in-place, None for no match) --
    def identity(self, n: Node) -> str | None:
        if n.op == "Identity" or (n.op == "Cast" and self._same_type(n.inputs[0], n.outputs[0])):
            return n.inputs[0]
        return None

    def mul_one(self, n: Node) -> str | None:
        if n.op == "Mul":
            a, b = n.inputs
            if self._const_is(b, 1, n.outputs[0], a):
                return a
            if self._const_is(a, 1, n.outputs[0], b):
                return b
        if n.op == "Div" and self._const_is(n.inputs[1], 1, n.outputs[0], n.inputs[0]):
            return n.inputs[0]
        return None

    def add_zero(self, n: Node) -> str | None:
        if n.op not in ("Add", "Sub"):
            return None
        a, b = n.inputs
        out = n.outputs[0]
        for x, c, may_swap in ((a, b, True), (b, a, n.op == "Add")):
            if not may_swap or not self._const_is(c, 0, out, x):
                continue
            data = self._g.const(c)
            assert data is not None
            if data.dtype.kind == "f" and not self.allow_signed_zero_change:
                neg = np.signbit(data)
                # x + (-0.0) and x - (+0.0) are exact identities; the others flip -0.0.
                exact = bool(np.all(neg)) if n.op == "Add" else bool(not np.any(neg))
                if not exact:
                    continue
            return x
        return None

    def div_to_mul(self, n: Node) -> bool | None:
        if n.op != "Div":
            return None
        c = self._g.const(n.inputs[1])
        if c is None or c.dtype.kind != "f" or np.any(c == 0):
            return None
        with np.errstate(all="ignore"):
            r = (np.asarray(1.0, np.float64) / c.astype(np.float64)).astype(c.dtype)
        if not np.all(np.isfinite(r)):
            return None
        n.op = "Mul"
        n.inputs = [n.inputs[0], self._g.add_constant(None, r, "recip").name]
        return True

    def transpose_transpose(self, n: Node) -> str | bool | None:
        if n.op != "Transpose":
            return None
        perm = n.attrs["perm"]
        if perm == list(range(len(perm))):
            return n.inputs[0]
        p = self._producers.get(n.inputs[0])
        if p is None or p.op != "Transpose":
            return None
        composed = [p.attrs["perm"][q] for q in perm]
        if composed == list(range(len(composed))):
            return p.inputs[0]
        n.inputs = [p.inputs[0]]
        n.attrs = {"perm": composed}
        return True

    def reshape_reshape(self, n: Node) -> str | bool | None:
        if n.op != "Reshape":
            return None
        if self._same_type(n.inputs[0], n.outputs[0]):
            return n.inputs[0]
        p = self._producers.get(n.inputs[0])
        if p is None or p.op != "Reshape":
            return None
        n.inputs = [p.inputs[0]]
        if self._same_type(n.inputs[0], n.outputs[0]):
            return n.inputs[0]
        return True


RULES: dict[str, Callable[[SimplifyAlgebra, Node], str | bool | None]] = {
    "identity": SimplifyAlgebra.identity,
    "mul_one": SimplifyAlgebra.mul_one,
    "add_zero": SimplifyAlgebra.add_zero,
    "div_to_mul": SimplifyAlgebra.div_to_mul,
    "transpose_transpose": SimplifyAlgebra.transpose_transpose,
    "reshape_reshape": SimplifyAlgebra.reshape_reshape,
}
