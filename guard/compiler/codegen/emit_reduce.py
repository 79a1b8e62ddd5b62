"""ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceSumSquare, ReduceL1, ReduceL2,
ReduceProd, ReduceLogSum, ReduceLogSumExp, over any axes (the importer turns empty axes
into every axis).

Two passes: the output is set to the reduction's identity (0, -inf, +inf); then one loop
nest walks the input in memory order (dims merged where contiguous) and folds each
element into ``out[index with the reduced axes at 0]``; a last pass divides (Mean), takes
the square root (L2) or the logarithm (LogSum, LogSumExp: sums of the values, of their
exponentials). Walking the input in order keeps the reads contiguous whatever the
axes; with the last axis reduced the destination is loop-invariant and LLVM keeps it in a
register. Sums are reassociable (the reference's order is not reproduced bit for bit, as
for every reduction here; rtol 1e-4 is the contract).
"""

from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen import mathfn as m
from guard.compiler.codegen.base import Emitter, Kernel, float32_only, strides
from guard.compiler.codegen.emit_elementwise import merge_dims
from guard.compiler.codegen.irutil import F32, REDUCE_FLAGS, add, i64, load, loop, store
from guard.compiler.graph.view import GraphView, OpNode

_INIT = {"ReduceMax": float("-inf"), "ReduceMin": float("inf"), "ReduceProd": 1.0}


class Reduce(Emitter):
    ops = frozenset(
        {
            "ReduceSum",
            "ReduceMean",
            "ReduceMax",
            "ReduceMin",
            "ReduceSumSquare",
            "ReduceL1",
            "ReduceL2",
            "ReduceProd",
            "ReduceLogSum",
            "ReduceLogSumExp",
        }
    )

    def decline(self, node: OpNode, g: GraphView) -> str | None:
        why = float32_only(node, g)
        if why:
            return why
        if not node.attrs.get("axes"):
            return f"no emitter for {node.op} without axes"
        return None

    def emit(
        self, b: ir.IRBuilder, ins: list[ir.Value | None], outs: list[ir.Value], k: Kernel
    ) -> None:
        xo = k.inputs[0]
        assert xo is not None
        shape = list(xo.shape)
        axes = {a % len(shape) for a in k.attrs["axes"]}
        kept = [1 if d in axes else n for d, n in enumerate(shape)]
        n_out = int(np.prod(kept, dtype=np.int64))
        count = int(np.prod([shape[d] for d in axes], dtype=np.int64))
        out_st = strides(kept)
        out_st = [0 if d in axes else s for d, s in enumerate(out_st)]
        x, y = ins[0], outs[0]
        init = _INIT.get(k.op, 0.0)
        with loop(b, 0, n_out, 1, "init") as i:
            store(b, ir.Constant(F32, init), y, i)
        empty = int(np.prod(shape, dtype=np.int64)) == 0
        if empty and k.op not in ("ReduceLogSum", "ReduceLogSumExp"):
            return
        dims, (xs, ys) = merge_dims(shape, [strides(shape), out_st])

        def fold(acc: ir.Value, v: ir.Value) -> ir.Value:
            if k.op == "ReduceMax":
                return m.intrinsic(b, "maximum", F32, [acc, v])
            if k.op == "ReduceMin":
                return m.intrinsic(b, "minimum", F32, [acc, v])
            if k.op == "ReduceProd":
                return b.fmul(acc, v, flags=REDUCE_FLAGS)
            if k.op == "ReduceLogSumExp":
                v = m.exp(b, v)
            if k.op == "ReduceSumSquare" or k.op == "ReduceL2":
                v = b.fmul(v, v)
            elif k.op == "ReduceL1":
                v = m.fabs(b, v)
            return b.fadd(acc, v, flags=REDUCE_FLAGS)

        def nest(d: int, xi: ir.Value, yi: ir.Value) -> None:
            if d == len(dims):
                p = b.gep(y, [yi], source_etype=F32, inbounds=True)
                b.store(fold(b.load(p, typ=F32), load(b, x, xi)), p)
                return
            with loop(b, 0, dims[d], 1, f"r{d}") as i:
                nest(d + 1, add(b, xi, b.mul(i, i64(xs[d]))), add(b, yi, b.mul(i, i64(ys[d]))))

        if not empty:
            nest(0, i64(0), i64(0))
        if k.op in ("ReduceMean", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"):
            with loop(b, 0, n_out, 1, "fin") as i:
                v = load(b, y, i)
                if k.op == "ReduceMean":
                    v = b.fmul(v, ir.Constant(F32, 1.0 / count))
                elif k.op == "ReduceL2":
                    v = m.intrinsic(b, "sqrt", F32, [v])
                else:  # log(0) is -inf (mathfn.log stops at -87.3)
                    zero = b.fcmp_ordered("==", v, ir.Constant(F32, 0.0))
                    v = b.select(zero, ir.Constant(F32, float("-inf")), m.log(b, v))
                store(b, v, y, i)
