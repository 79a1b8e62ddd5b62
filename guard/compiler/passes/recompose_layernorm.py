"""recompose_layernorm: the 9-node decomposition that opset-16 exports produce -> one node.

Pattern (torch.onnx opset < 17), matched backwards from the final Add::

    mean = ReduceMean(x, axes=A)           d   = Sub(x, mean)
    var  = ReduceMean(Pow(d, 2), axes=A)   std = Sqrt(Add(var, eps))
    y    = Add(Mul(Div(d, std), gamma), beta)

-> ``LayerNormalization(x, gamma, beta, axis=min(A), epsilon=eps)``, where A must be the
trailing axes, ``2``/``eps`` scalar constants and gamma/beta constants that broadcast over
the normalised dims only. Operands of the commutative ops (the eps Add, the gamma Mul and
the beta Add) may come in either order; ``Pow(d, 2)`` may also be ``Mul(d, d)``. Every
intermediate must be read only inside the pattern (``d`` exactly twice) and not be a graph
output, or the match is declined with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from guard.compiler.ir import Graph, Node
from guard.compiler.passes.base import Pass, PassResult, scalar_const


class _NoMatch(Exception):
    pass


@dataclass
class RecomposeLayernorm(Pass):
    name = "recompose_layernorm"

    def run(self, graph: Graph) -> PassResult:
        self._g = graph
        self._prod = graph.producers()
        self._uses = graph.use_counts()
        found, notes = 0, []
        dead: set[int] = set()
        for add in list(graph.nodes):
            if add.op != "Add" or id(add) in dead:
                continue
            try:
                x, gamma, beta, axis, eps, nodes = self._match(add)
            except _NoMatch as exc:
                if str(exc):
                    notes.append(f"no LayerNormalization at {add.label()}: {exc}")
                continue
            dead.update(id(n) for n in nodes)
            add.op, add.inputs = "LayerNormalization", [x, gamma, beta]
            add.attrs = {"axis": axis, "epsilon": eps}
            dead.discard(id(add))
            found += 1
        graph.nodes = [n for n in graph.nodes if id(n) not in dead]
        if found:
            graph.prune_values()
        return PassResult(found > 0, {"num_recomposed": found}, notes)

    # -- matching (never mutates) -------------------------------------------------------
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

    def _split_const(self, n: Node) -> tuple[str, str]:
        """(non-constant operand, constant operand) of a commutative binary node."""
        a, b = n.inputs
        if self._g.is_constant(b) and not self._g.is_constant(a):
            return a, b
        if self._g.is_constant(a) and not self._g.is_constant(b):
            return b, a
        raise _NoMatch(f"{n.label()} does not have exactly one constant operand")

    def _match(self, add: Node) -> tuple[str, str, str, int, float, list[Node]]:
        # y = Add(Mul(Div(d, std), gamma), beta), either operand order for Add and Mul.
        mul_out, beta = self._split_const_quiet(add)
        mul = self._op(mul_out, "Mul", quiet=True)
        div_out, gamma = self._split_const_quiet(mul)
        div = self._op(div_out, "Div", quiet=True)
        d, std = div.inputs
        sub = self._op(d, "Sub", quiet=True)
        x, mean = sub.inputs
        rm1 = self._op(mean, "ReduceMean")
        if rm1.inputs[0] != x:
            raise _NoMatch("the mean is not of the Sub's first operand")
        sqrt = self._op(std, "Sqrt")
        add_eps = self._op(sqrt.inputs[0], "Add")
        var, eps_name = self._split_const(add_eps)
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
        norm_shape = self._g.values[x].shape[rank - len(axes) :]
        for pname in (gamma, beta):
            pv = self._g.values[pname]
            if len(pv.shape) > len(norm_shape) or any(
                s != 1 for s in pv.shape[: len(pv.shape) - len(norm_shape)]
            ):
                raise _NoMatch(f"{pname!r} does not broadcast over the normalised dims only")
        for name, n in (
            (mean, 1),
            (d, 2),
            (sq_out, 1),
            (var, 1),
            (add_eps.outputs[0], 1),
            (std, 1),
            (div_out, 1),
            (mul_out, 1),
        ):
            self._private(name, n if not (sq.op == "Mul" and name == d) else 3)
        dtype = self._g.values[x].dtype
        if any(self._g.values[p].dtype != dtype for p in (gamma, beta)):
            raise _NoMatch("gamma/beta dtype differs from x")
        gamma2 = self._expand(gamma, norm_shape)
        beta2 = self._expand(beta, norm_shape)
        nodes = [rm1, sub, sq, rm2, add_eps, sqrt, div, mul]
        return x, gamma2, beta2, rank - len(axes), float(eps), nodes

    def _split_const_quiet(self, n: Node) -> tuple[str, str]:
        try:
            return self._split_const(n)
        except _NoMatch:
            raise _NoMatch("") from None

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
