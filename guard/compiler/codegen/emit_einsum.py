"""Einsum on float32, any explicit or implicit equation without an ellipsis.

Each letter is a loop: the output's letters (in the output's order) outside, the summed
letters inside, carrying the sum; the body multiplies one element of each operand, read
at the letters' strides (a letter repeated in one operand, a diagonal, adds its strides).
Shapes are compile-time constants, so LLVM unrolls and vectorises what it can; the
models that reach here use Einsum for small attention and projection contractions (a
large matrix product is imported as MatMul and takes the GEMM path).
"""

from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen.base import Emitter, Kernel, float32_only, strides
from guard.compiler.codegen.irutil import (
    F32,
    REDUCE_FLAGS,
    add,
    for_loop_carried,
    i64,
    load,
    loop,
    store,
)
from guard.compiler.graph.view import GraphView, OpNode


def parse(equation: str, n_inputs: int) -> tuple[list[str], str] | str:
    """(each operand's letters, the output's letters), or why the equation is declined."""
    eq = equation.replace(" ", "")
    if "." in eq:
        return "no emitter for Einsum with an ellipsis"
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != n_inputs or not all(t.isalpha() or t == "" for t in [*terms, rhs]):
        return f"no emitter for Einsum equation {equation!r}"
    if not arrow:  # implicit: the letters that appear once, sorted
        letters = "".join(terms)
        rhs = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    return terms, rhs


class Einsum(Emitter):
    ops = frozenset({"Einsum"})

    def decline(self, node: OpNode, g: GraphView) -> str | None:
        why = float32_only(node, g)
        if why:
            return why
        got = parse(node.attrs["equation"], len(node.args))
        if isinstance(got, str):
            return got
        sizes: dict[str, int] = {}
        for term, v in zip(got[0], node.args, strict=True):
            shape = g.tensors[v].shape
            if len(term) != len(shape):
                return f"no emitter for Einsum: {term!r} does not match {list(shape)}"
            for c, n in zip(term, shape, strict=True):
                if sizes.setdefault(c, n) != n:
                    return f"no emitter for Einsum broadcasting letter {c!r}"
        return None

    def emit(
        self, b: ir.IRBuilder, ins: list[ir.Value | None], outs: list[ir.Value], k: Kernel
    ) -> None:
        got = parse(k.attrs["equation"], len(ins))
        assert not isinstance(got, str)
        terms, out = got
        shapes = [tuple(o.shape) for o in k.inputs if o is not None]
        sizes = {
            c: n for t, s in zip(terms, shapes, strict=True) for c, n in zip(t, s, strict=True)
        }
        summed = [c for c in dict.fromkeys("".join(terms)) if c not in out]
        # Per operand, the element stride of each letter (repeated letters add up).
        st = []
        for t, s in zip(terms, shapes, strict=True):
            per: dict[str, int] = {}
            for c, d in zip(t, strides(s), strict=True):
                per[c] = per.get(c, 0) + d
            st.append(per)
        ost = dict(zip(out, strides([sizes[c] for c in out]), strict=True))
        ptrs = [p for p in ins if p is not None]
        if int(np.prod([sizes[c] for c in out], dtype=np.int64)) == 0:
            return

        def offsets(at: dict[str, ir.Value]) -> list[ir.Value]:
            return [add(b, *[b.mul(at[c], i64(s)) for c, s in per.items() if s]) for per in st]

        def reduce(d: int, at: dict[str, ir.Value], acc: ir.Value) -> ir.Value:
            if d == len(summed):
                prod = None
                for p, off in zip(ptrs, offsets(at), strict=True):
                    v = load(b, p, off)
                    prod = v if prod is None else b.fmul(prod, v)
                assert prod is not None
                return b.fadd(acc, prod, flags=REDUCE_FLAGS)
            c = summed[d]

            def body(i: ir.Value, vals: list[ir.Value]) -> list[ir.Value]:
                return [reduce(d + 1, {**at, c: i}, vals[0])]

            return for_loop_carried(b, 0, sizes[c], 1, [acc], body)[0]

        def nest(d: int, at: dict[str, ir.Value]) -> None:
            if d == len(out):
                total = reduce(0, at, ir.Constant(F32, 0.0))
                store(b, total, outs[0], add(b, *[b.mul(at[c], i64(ost[c])) for c in out]))
                return
            with loop(b, 0, sizes[out[d]], 1, f"e_{out[d]}") as i:
                nest(d + 1, {**at, out[d]: i})

        nest(0, {})
