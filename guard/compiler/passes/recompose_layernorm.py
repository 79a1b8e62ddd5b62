"""recompose_layernorm: the 9-node decomposition that opset-16 exports produce -> one node.

Pattern (torch.onnx opset < 17), matched from the normalising Div outward::

    mean = ReduceMean(x, axes=A)           d   = Sub(x, mean)
    var  = ReduceMean(Pow(d, 2), axes=A)   std = Sqrt(Add(var, eps))
    y    = Add(Mul(Div(d, std), gamma), beta)

-> ``LayerNormalization(x, gamma, beta, axis=min(A), epsilon=eps)``, where A must be the
trailing axes, ``2``/``eps`` scalar constants and gamma/beta constants that broadcast over
the normalised dims only. Operands of the commutative ops (the eps Add, the gamma Mul and
the beta Add) may come in either order; ``Pow(d, 2)`` may also be ``Mul(d, d)``. The gamma
Mul and beta Add are optional (an all-ones gamma or all-zeros beta may already have been
simplified away): a missing one becomes a ones/zeros constant. Every intermediate must be
read only inside the pattern (``d`` exactly twice) and not be a graph output, or the match
is declined with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from guard.compiler.ir.core import Graph, Node
from guard.compiler.passes.base import Pass, PassResult, scalar_const


class _NoMatch(Exception):
    pass


@dataclass
class RecomposeLayernorm(Pass):
    name = "recompose_layernorm"

    def run(self, graph: Graph) -> PassResult:
        self._g = graph
        self._prod = graph.producers()
        self._cons = graph.consumers()
        self._uses = graph.use_counts()
        found, notes = 0, []
        dead: set[int] = set()
        for div in list(graph.nodes):
            if div.op != "Div" or id(div) in dead:
                continue
            try:
                x, gamma, beta, axis, eps, nodes, last = self._match(div)
            except _NoMatch as exc:
                if str(exc):
                    notes.append(f"no LayerNormalization at {div.label()}: {exc}")
                continue
            dead.update(id(n) for n in nodes if n is not last)
            last.op, last.inputs = "LayerNormalization", [x, gamma, beta]
            last.attrs = {"axis": axis, "epsilon": eps}
            found += 1
        graph.nodes = [n for n in graph.nodes if id(n) not in dead]
        if found:
            graph.prune_values()
        return PassResult(found > 0, {"num_recomposed": found}, notes)

    # -- matching (never mutates the graph) ---------------------------------------------
    def _op(self, name: str, op: str, quiet: bool = False) -> Node:
        n = self._prod.get(name)
        if n is None or n.op != op:
            raise _NoMatch(
                ""
                if quiet
                else f"expected {op} producing {name!r}, found {n.op if n else 'no producer'}"
            )
        return n

    def _private(self, name: str, uses: int = 1) -> None:
        if self._uses.get(name, 0) != uses or name in self._g.outputs:
            raise _NoMatch(f"{name!r} is read outside the pattern")

    def _split_const(self, n: Node) -> tuple[str, str] | None:
        """(non-constant operand, constant operand) of a commutative binary node."""
        a, b = n.inputs
        if self._g.is_constant(b) and not self._g.is_constant(a):
            return a, b
        if self._g.is_constant(a) and not self._g.is_constant(b):
            return b, a
        return None

    def _affine_step(self, value: str, op: str) -> tuple[Node, str] | None:
        """The sole reader of ``value`` if it is ``op`` with a constant other operand."""
        users = self._cons.get(value, [])
        if len(users) != 1 or value in self._g.outputs or users[0].op != op:
            return None
        split = self._split_const(users[0])
        if split is None or split[0] != value:
            return None
        return users[0], split[1]

    def _match(self, div: Node) -> tuple[str, str, str, int, float, list[Node], Node]:
        d, std = div.inputs
        sub = self._op(d, "Sub", quiet=True)
        x, mean = sub.inputs
        rm1 = self._op(mean, "ReduceMean", quiet=True)
        if rm1.inputs[0] != x:
            raise _NoMatch("the mean is not of the Sub's first operand")
        sqrt = self._op(std, "Sqrt")
        add_eps = self._op(sqrt.inputs[0], "Add")
        split = self._split_const(add_eps)
        if split is None:
            raise _NoMatch(f"{add_eps.label()} does not add a constant epsilon")
        var, eps_name = split
        rm2 = self._op(var, "ReduceMean")
        sq_out = rm2.inputs[0]
        sq = self._prod.get(sq_out)
        if sq is not None and sq.op == "Pow":
            if sq.inputs[0] != d or scalar_const(self._g, sq.inputs[1]) != 2.0:
                raise _NoMatch("the variance is not Pow(d, 2)")
        elif sq is not None and sq.op == "Mul":
            if sq.inputs != [d, d]:
                raise _NoMatch("the variance is not Mul(d, d)")
        else:
            raise _NoMatch("the variance is not of Pow(d, 2)")
        rank = len(self._g.values[x].shape)
        axes = rm1.attrs["axes"]
        if axes != rm2.attrs["axes"] or axes != list(range(rank - len(axes), rank)):
            raise _NoMatch(f"reduction axes {axes} are not the trailing axes of both means")
        if not (rm1.attrs.get("keepdims", 1) and rm2.attrs.get("keepdims", 1)):
            raise _NoMatch("a mean drops its reduced dims (keepdims=0)")
        eps = scalar_const(self._g, eps_name)
        if eps is None or self._g.values[eps_name].size != 1:
            raise _NoMatch("epsilon is not a scalar constant")
        d_uses = 3 if sq.op == "Mul" else 2
        for name, n in ((mean, 1), (d, d_uses), (sq_out, 1), (var, 1), (add_eps.outputs[0], 1),
                        (std, 1)):  # fmt: skip
            self._private(name, n)
        # Optional affine tail: Mul by gamma, then Add of beta (either operand order).
        nodes = [rm1, sub, sq, rm2, add_eps, sqrt, div]
        last, gamma, beta = div, None, None
        step = self._affine_step(last.outputs[0], "Mul")
        if step is not None:
            last, gamma = step
            nodes.append(last)
        step = self._affine_step(last.outputs[0], "Add")
        if step is not None:
            last, beta = step
            nodes.append(last)
        xv = self._g.values[x]
        norm_shape = xv.shape[rank - len(axes) :]
        if xv.dtype.kind != "f":
            raise _NoMatch("x is not floating point")
        for pname in (gamma, beta):
            if pname is None:
                continue
            pv = self._g.values[pname]
            lead = pv.shape[: max(len(pv.shape) - len(norm_shape), 0)]
            if len(pv.shape) > len(norm_shape) and any(s != 1 for s in lead):
                raise _NoMatch(f"{pname!r} does not broadcast over the normalised dims only")
            if pv.dtype != xv.dtype:
                raise _NoMatch(f"{pname!r} has dtype {pv.dtype}, x has {xv.dtype}")
        if self._g.values[last.outputs[0]].shape != xv.shape:
            raise _NoMatch("gamma/beta broadcast the result to a new shape")
        # Matched: only now add constants (a missing gamma is ones, a missing beta zeros).
        params = [
            self._expand(p, norm_shape)
            if p is not None
            else self._g.add_constant(None, np.full(norm_shape, fill, xv.dtype), "ln_param").name
            for p, fill in ((gamma, 1.0), (beta, 0.0))
        ]
        return x, params[0], params[1], rank - len(axes), float(eps), nodes, last

    def _expand(self, name: str, shape: tuple[int, ...]) -> str:
        v = self._g.values[name]
        if v.shape == shape:
            return name
        data = self._g.const(name)
        assert data is not None
        # gamma/beta may carry leading 1s ([1, 1, D]); keep the normalised dims only.
        trimmed = data.reshape(data.shape[-len(shape) :]) if data.ndim >= len(shape) else data
        full = np.array(np.broadcast_to(trimmed, shape), order="C")
        return self._g.add_constant(None, full, "ln_param").name
