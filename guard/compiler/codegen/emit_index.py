"""Gather and GatherElements with int32 or int64 indices, on every dtype.

Gather along ``axis`` is three loops: the dims before the axis (``A``), the indices
(``J``), and a contiguous run of the dims after it (``B`` elements copied as integers of
the element's size). GatherElements walks the indices' shape, each output element read
at its own position with the axis coordinate replaced by its index. A negative index
counts from the end (as the reference's ``np.take`` and ``take_along_axis`` do); an
index still outside the axis is clamped to it, so a bad index never reads outside the
tensor (the reference raises there: the comparison names the node).
"""

from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen.base import Emitter, Kernel, strides
from guard.compiler.codegen.irutil import I64, add, elem_ptr, i64, loop, mul
from guard.compiler.graph.view import GraphView, OpNode

_INT = {1: ir.IntType(8), 2: ir.IntType(16), 4: ir.IntType(32), 8: ir.IntType(64)}


def _index(b: ir.IRBuilder, idx: ir.Value, at: ir.Value | int, dtype: str, n: int) -> ir.Value:
    """The index at ``idx[at]`` as an i64 in [0, n)."""
    ty = _INT[np.dtype(dtype).itemsize]
    v = b.load(elem_ptr(b, idx, at, ty), typ=ty)
    if ty.width < 64:
        v = b.sext(v, I64)
    v = b.select(b.icmp_signed("<", v, i64(0)), b.add(v, i64(n)), v)
    v = b.select(b.icmp_signed("<", v, i64(0)), i64(0), v)
    return b.select(b.icmp_signed(">", v, i64(n - 1)), i64(n - 1), v)


class Gather(Emitter):
    ops = frozenset({"Gather", "GatherElements"})

    def decline(self, node: OpNode, g: GraphView) -> str | None:
        dt = g.tensors[node.args[1]].dtype
        if dt not in ("int32", "int64"):
            return f"no emitter for {node.op} with {dt} indices (int32, int64)"
        if g.tensors[node.args[0]].shape[node.attrs.get("axis", 0)] == 0:
            return f"no emitter for {node.op} along an empty axis"
        return None

    def emit(
        self, b: ir.IRBuilder, ins: list[ir.Value | None], outs: list[ir.Value], k: Kernel
    ) -> None:
        xo, io = k.inputs[0], k.inputs[1]
        assert xo is not None and io is not None and ins[0] is not None and ins[1] is not None
        xs = tuple(xo.shape)
        ax = int(k.attrs.get("axis", 0)) % len(xs)
        ty = _INT[np.dtype(k.outputs[0].dtype).itemsize]
        x, idx, y = ins[0], ins[1], outs[0]
        if int(np.prod(k.outputs[0].shape, dtype=np.int64)) == 0:
            return
        n = xs[ax]
        if k.op == "Gather":
            A = int(np.prod(xs[:ax], dtype=np.int64))
            B = int(np.prod(xs[ax + 1 :], dtype=np.int64))
            J = int(np.prod(io.shape, dtype=np.int64))
            with loop(b, 0, A, 1, "a") as a, loop(b, 0, J, 1, "j") as j:
                i = _index(b, idx, j, io.dtype, n)
                src = add(b, mul(b, a, n * B), b.mul(i, i64(B)))
                dst = add(b, mul(b, a, J * B), mul(b, j, B))
                with loop(b, 0, B, 1, "t") as t:
                    v = b.load(elem_ptr(b, x, add(b, src, t), ty), typ=ty)
                    b.store(v, elem_ptr(b, y, add(b, dst, t), ty))
            return
        ish = tuple(io.shape)
        xst, ist = strides(xs), strides(ish)

        def nest(d: int, xi: ir.Value, ii: ir.Value) -> None:
            if d == len(ish):
                i = _index(b, idx, ii, io.dtype, n)
                v = b.load(elem_ptr(b, x, add(b, xi, b.mul(i, i64(xst[ax]))), ty), typ=ty)
                b.store(v, elem_ptr(b, y, ii, ty))
                return
            with loop(b, 0, ish[d], 1, f"e{d}") as e:
                step = 0 if d == ax else xst[d]
                nest(d + 1, add(b, xi, mul(b, e, step)), add(b, ii, mul(b, e, ist[d])))

        nest(0, i64(0), i64(0))
