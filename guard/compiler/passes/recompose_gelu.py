"""recompose_gelu: the erf form of GELU -> one ``Gelu`` node.

    gelu(x) = 0.5 * x * (1 + erf(x / sqrt(2)))

Matched from the Erf outward: ``Erf(Div(x, sqrt2))`` or ``Erf(Mul(x, 1/sqrt2))``, then
``Add(., 1)``, then the two multiplications by ``x`` and ``0.5`` in either nesting
(``(x * t) * 0.5``, ``(x * 0.5) * t``, ``x * (t * 0.5)``) and either operand order.
Constants must be within 1e-6 of sqrt(2) / 1/sqrt(2) / 1 / 0.5; intermediates must have no
other readers. The match is declined (with the reason) otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from guard.compiler.ir.core import Graph, Node
from guard.compiler.passes.base import Pass, PassResult, scalar_const


def _close(v: float | None, want: float) -> bool:
    return v is not None and abs(v - want) <= 1e-6 * max(1.0, abs(want))


@dataclass
class RecomposeGelu(Pass):
    name = "recompose_gelu"

    def run(self, graph: Graph) -> PassResult:
        self._g = graph
        found, notes = 0, []
        dead: set[int] = set()
        for erf in list(graph.nodes):
            if erf.op != "Erf":
                continue
            # Recompute per match: earlier rewrites change readers.
            self._prod = graph.producers()
            self._cons = graph.consumers()
            self._uses = graph.use_counts()
            m = self._match(erf)
            if isinstance(m, str):
                notes.append(f"no Gelu at {erf.label()}: {m}")
                continue
            x, final, nodes = m
            xv, yv = graph.values[x], graph.values[final.outputs[0]]
            if (xv.shape, xv.dtype) != (yv.shape, yv.dtype):
                notes.append(f"no Gelu at {erf.label()}: a constant broadcasts x to a new shape")
                continue
            for n in nodes:
                if n is not final:
                    dead.add(id(n))
            final.op, final.inputs, final.attrs = "Gelu", [x], {"approximate": "none"}
            graph.nodes = [n for n in graph.nodes if id(n) not in dead]
            found += 1
        if found:
            graph.prune_values()
        return PassResult(found > 0, {"num_recomposed": found}, notes)

    def _only_reader(self, name: str) -> Node | None:
        users = self._cons.get(name, [])
        if len(users) != 1 or name in self._g.outputs:
            return None
        return users[0]

    def _other(self, n: Node, name: str) -> str:
        a, b = n.inputs
        return b if a == name else a

    def _match(self, erf: Node) -> tuple[str, Node, list[Node]] | str:
        g = self._g
        pre = self._prod.get(erf.inputs[0])
        if pre is None or pre.op not in ("Div", "Mul"):
            return "Erf's input is not x / sqrt(2)"
        x, c = pre.inputs
        want = math.sqrt(2) if pre.op == "Div" else 1 / math.sqrt(2)
        if not _close(scalar_const(g, c), want):
            if pre.op == "Mul" and _close(scalar_const(g, x), want):
                x, c = c, x
            else:
                return "the Erf argument is not scaled by 1/sqrt(2)"
        if self._uses.get(pre.outputs[0]) != 1:
            return "x / sqrt(2) has other readers"
        add = self._only_reader(erf.outputs[0])
        if (
            add is None
            or add.op != "Add"
            or not _close(scalar_const(g, self._other(add, erf.outputs[0])), 1.0)
        ):
            return "Erf is not followed by + 1"
        t = add.outputs[0]
        m1 = self._only_reader(t)
        if m1 is None or m1.op != "Mul":
            return "1 + erf(.) is not multiplied"
        other = self._other(m1, t)
        nodes = [pre, erf, add, m1]
        if other == x:  # (x * t) * 0.5
            m2 = self._only_reader(m1.outputs[0])
            if (
                m2 is None
                or m2.op != "Mul"
                or not _close(scalar_const(g, self._other(m2, m1.outputs[0])), 0.5)
            ):
                return "x * (1 + erf) is not multiplied by 0.5"
            return x, m2, nodes + [m2]
        if _close(scalar_const(g, other), 0.5):  # x * (t * 0.5)
            m2 = self._only_reader(m1.outputs[0])
            if m2 is None or m2.op != "Mul" or self._other(m2, m1.outputs[0]) != x:
                return "0.5 * (1 + erf) is not multiplied by x"
            return x, m2, nodes + [m2]
        half = self._prod.get(other)  # (x * 0.5) * t
        if (
            half is not None
            and half.op == "Mul"
            and x in half.inputs
            and _close(scalar_const(g, self._other(half, x)), 0.5)
            and self._uses.get(other) == 1
        ):
            return x, m1, nodes + [half]
        return "the outer multiplications are not by x and 0.5"
