"""ArgMax, ArgMin and TopK on float32, along one axis, as the reference computes them.

Each output position walks its row of the input (``outer x A x inner``: the axis in the
middle) once. ArgMax/ArgMin carry the best value and its index; the first best wins, or
the last with ``select_last_index``; a NaN beats every number (numpy's argmax/argmin
return the first NaN). TopK keeps its row's best ``k`` sorted in the outputs themselves:
each element that beats the k-th is inserted, shifting the worse ones down, with a strict
comparison so that among equal values the lower index stays first (the spec's order);
NaN is worse than every number, as in the reference's stable argsort.
"""

from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen.base import Emitter, Kernel
from guard.compiler.codegen.irutil import F32, I64, add, elem_ptr, for_loop_carried, i64, load, loop
from guard.compiler.graph.view import GraphView, OpNode


def _isnan(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    return b.fcmp_unordered("uno", v, v)


def _beats(b: ir.IRBuilder, v: ir.Value, w: ir.Value, larger: bool) -> ir.Value:
    """v comes before w in a TopK: better by value, and a number before a NaN."""
    better = b.fcmp_ordered(">" if larger else "<", v, w)
    return b.or_(better, b.and_(_isnan(b, w), b.not_(_isnan(b, v))))


class Select(Emitter):
    ops = frozenset({"ArgMax", "ArgMin", "TopK"})

    def decline(self, node: OpNode, g: GraphView) -> str | None:
        dtype = g.tensors[node.args[0]].dtype
        return None if dtype == "float32" else f"no emitter for {node.op} on {dtype} (float32 only)"

    def emit(
        self, b: ir.IRBuilder, ins: list[ir.Value | None], outs: list[ir.Value], k: Kernel
    ) -> None:
        x, xo = ins[0], k.inputs[0]
        assert x is not None and xo is not None
        shape = tuple(xo.shape)
        ax = int(k.attrs["axis"] if k.op == "TopK" else k.attrs["axes"][0]) % len(shape)
        outer = int(np.prod(shape[:ax], dtype=np.int64))
        A = shape[ax]
        inner = int(np.prod(shape[ax + 1 :], dtype=np.int64))
        if outer * inner == 0 or A == 0:
            return
        if k.op == "TopK":
            self._topk(
                b, x, outs, outer, A, inner, int(k.attrs["k"]), bool(k.attrs.get("largest", 1))
            )
            return
        larger = k.op == "ArgMax"
        last = bool(k.attrs.get("select_last_index", 0))
        with loop(b, 0, outer, 1, "o") as o, loop(b, 0, inner, 1, "i") as i:
            base = add(b, b.mul(o, i64(A * inner)), i)
            first = load(b, x, base)

            def body(a: ir.Value, vals: list[ir.Value]) -> list[ir.Value]:
                best, at = vals
                v = load(b, x, add(b, base, b.mul(a, i64(inner))))
                if last:
                    cmp = b.fcmp_ordered(">=" if larger else "<=", v, best)
                    take = b.or_(_isnan(b, v), b.and_(cmp, b.not_(_isnan(b, best))))
                else:
                    cmp = b.fcmp_ordered(">" if larger else "<", v, best)
                    take = b.or_(cmp, b.and_(_isnan(b, v), b.not_(_isnan(b, best))))
                return [b.select(take, v, best), b.select(take, a, at)]

            _, at = for_loop_carried(b, 1, A, 1, [first, i64(0)], body)
            b.store(at, elem_ptr(b, outs[0], add(b, b.mul(o, i64(inner)), i), I64))

    def _topk(
        self, b: ir.IRBuilder, x: ir.Value, outs: list[ir.Value], outer: int, A: int,
        inner: int, kk: int, larger: bool,
    ) -> None:  # fmt: skip
        vals, idx = outs[0], outs[1]
        if kk == 0:
            return
        fn = b.function
        with loop(b, 0, outer, 1, "o") as o, loop(b, 0, inner, 1, "i") as i:
            xb = add(b, b.mul(o, i64(A * inner)), i)
            yb = add(b, b.mul(o, i64(kk * inner)), i)

            def yp(pos: ir.Value, out: ir.Value, ty: ir.Type) -> ir.Value:
                return elem_ptr(b, out, add(b, yb, b.mul(pos, i64(inner))), ty)

            def body(a: ir.Value, carried: list[ir.Value]) -> list[ir.Value]:
                (cnt,) = carried
                v = load(b, x, add(b, xb, b.mul(a, i64(inner))))
                worst = b.load(yp(i64(kk - 1), vals, F32), typ=F32)
                full = b.icmp_signed(">=", cnt, i64(kk))
                enter = b.or_(b.not_(full), _beats(b, v, worst, larger))
                grown = b.select(full, cnt, b.add(cnt, i64(1)))
                pre = b.block
                ins_bb = fn.append_basic_block("topk.insert")
                shift = fn.append_basic_block("topk.shift")
                move = fn.append_basic_block("topk.move")
                place = fn.append_basic_block("topk.place")
                done = fn.append_basic_block("topk.next")
                b.cbranch(enter, ins_bb, done)
                b.position_at_end(ins_bb)
                start = b.select(full, i64(kk - 1), cnt)
                b.branch(shift)
                b.position_at_end(shift)
                pos = b.phi(I64)
                pos.add_incoming(start, ins_bb)
                prev = b.sub(pos, i64(1))
                at_top = b.icmp_signed("==", pos, i64(0))
                safe_prev = b.select(at_top, i64(0), prev)
                pv = b.load(yp(safe_prev, vals, F32), typ=F32)
                go = b.and_(b.not_(at_top), _beats(b, v, pv, larger))
                b.cbranch(go, move, place)
                b.position_at_end(move)
                b.store(pv, yp(pos, vals, F32))
                b.store(b.load(yp(prev, idx, I64), typ=I64), yp(pos, idx, I64))
                pos.add_incoming(prev, move)
                b.branch(shift)
                b.position_at_end(place)
                b.store(v, yp(pos, vals, F32))
                b.store(a, yp(pos, idx, I64))
                b.branch(done)
                b.position_at_end(done)
                nxt = b.phi(I64)
                nxt.add_incoming(cnt, pre)
                nxt.add_incoming(grown, place)
                return [nxt]

            for_loop_carried(b, 0, A, 1, [i64(0)], body)
