"""Softmax, LogSoftmax, LayerNormalization and LRN, vectorised.

Softmax over ``axis`` of a tensor viewed as [outer, A, inner]: with inner == 1 the lanes
run along A (three passes over the row: max, exp-and-sum, scale; the last vector of a row
masked); with inner > 1 the lanes run along inner and the passes loop over A. exp is
mathfn.exp (relative error <= 2e-7). LayerNormalization: each row of D = prod(shape[axis:])
elements in two passes (mean, then variance of the centred values: the reference's
order, so no cancellation from E[x^2] - E[x]^2), then (x - mean) / sqrt(var + eps) *
scale + bias. LRN (NCHW): lanes along H*W, the channel window clamped per channel,
x / (bias + alpha/size * sum x^2)^beta with the power as exp(-beta * log(t)) (t > 0); a
thread task (guard.compiler.codegen.split) writes its run of output channels.

A row's sums (Softmax's exps with inner == 1, LayerNorm's mean and variance) run in 16
lanes on every target (two registers on AVX2), added in order without reassociation, and
the lanes in pairwise.tree_sum's fixed tree: the host's, AVX2 and AVX-512 builds give the
same bits (issue 38), where a reassociated reduce followed the register width.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen import mathfn as m
from guard.compiler.codegen.base import Emitter, Kernel, float32_only
from guard.compiler.codegen.irutil import (
    F32,
    add,
    const,
    entry_alloca,
    hmax,
    i64,
    load_lanes,
    loop,
    splat,
    store_lanes,
    vec,
)
from guard.compiler.codegen.pairwise import FIXED, tree_sum
from guard.compiler.graph.view import GraphView, OpNode


def _prod(s: tuple[int, ...]) -> int:
    return int(np.prod(s, dtype=np.int64))


def _mask_fill(b: ir.IRBuilder, v: ir.Value, lanes: int, fill: float) -> ir.Value:
    """Lanes >= ``lanes`` replaced by ``fill`` (a masked tail's unused lanes)."""
    w = v.type.count
    if lanes >= w:
        return v
    mask = ir.Constant(
        ir.VectorType(ir.IntType(1), w),
        [ir.Constant(ir.IntType(1), int(j < lanes)) for j in range(w)],
    )
    return b.select(mask, v, const(v.type, fill))


def _for_row(b: ir.IRBuilder, n: int, w: int, body: Callable[[ir.Value, int], None]) -> None:
    full = n // w * w
    if full:
        with loop(b, 0, full, w, "v") as j:
            body(j, w)
    if n - full:
        body(i64(full), n - full)


class Norm(Emitter):
    ops = frozenset({"Softmax", "LogSoftmax", "LayerNormalization", "LRN"})

    def decline(self, node: OpNode, g: GraphView) -> str | None:
        why = float32_only(node, g)
        if why:
            return why
        x = g.tensors[node.args[0]]
        if node.op == "LayerNormalization":
            if len(node.outputs) > 1 and any(node.outputs[1:]):
                return "no emitter for LayerNormalization with mean/inv-std outputs"
            axis = node.attrs.get("axis", -1) % len(x.shape)
            d = _prod(x.shape[axis:])
            for v in node.args[1:]:
                if v and _prod(g.tensors[v].shape) != d:
                    return "no emitter for LayerNormalization with broadcast scale/bias"
        if node.op == "LRN" and len(x.shape) != 4:
            return "no emitter for LRN on a non-4-D input"
        return None

    def emit(
        self, b: ir.IRBuilder, ins: list[ir.Value | None], outs: list[ir.Value], k: Kernel
    ) -> None:
        xo = k.inputs[0]
        assert xo is not None
        shape = xo.shape
        W = k.vector_width
        if k.op in ("Softmax", "LogSoftmax"):
            axis = k.attrs.get("axis", -1) % len(shape)
            self._softmax(
                b,
                ins[0],
                outs[0],
                _prod(shape[:axis]),
                shape[axis],
                _prod(shape[axis + 1 :]),
                W,
                k.op == "LogSoftmax",
            )
        elif k.op == "LayerNormalization":
            axis = k.attrs.get("axis", -1) % len(shape)
            self._layernorm(
                b,
                ins,
                outs[0],
                _prod(shape[:axis]),
                _prod(shape[axis:]),
                W,
                float(k.attrs.get("epsilon", 1e-5)),
            )
        else:
            self._lrn(b, ins[0], outs[0], shape, W, k.attrs)

    def _softmax(
        self,
        b: ir.IRBuilder,
        x: ir.Value,
        y: ir.Value,
        outer: int,
        A: int,
        inner: int,
        W: int,
        log: bool,
    ) -> None:
        if inner == 1:
            W = FIXED  # partial sums in 16 lanes on every target: the same order on AVX2
            ty = vec(W)
            with loop(b, 0, outer, 1, "o") as o:
                row = b.mul(o, i64(A))
                mx = entry_alloca(b, ty)
                b.store(const(ty, float("-inf")), mx)

                def pmax(j: ir.Value, lanes: int) -> None:
                    v = _mask_fill(
                        b, load_lanes(b, x, add(b, row, j), W, lanes), lanes, float("-inf")
                    )
                    b.store(m.fmax(b, b.load(mx, typ=ty), v), mx)

                _for_row(b, A, W, pmax)
                top = splat(b, hmax(b, b.load(mx, typ=ty)), W)
                sm = entry_alloca(b, ty)
                b.store(const(ty, 0.0), sm)

                def pexp(j: ir.Value, lanes: int) -> None:
                    z = b.fsub(load_lanes(b, x, add(b, row, j), W, lanes), top)
                    e = _mask_fill(b, m.exp(b, z), lanes, 0.0)
                    b.store(b.fadd(b.load(sm, typ=ty), e), sm)
                    store_lanes(b, z if log else e, y, add(b, row, j), lanes)

                _for_row(b, A, W, pexp)
                total = tree_sum(b, b.load(sm, typ=ty))
                if log:
                    scale = splat(b, m.log(b, total), W)
                else:
                    scale = splat(b, b.fdiv(ir.Constant(F32, 1.0), total), W)

                def pscale(j: ir.Value, lanes: int) -> None:
                    v = load_lanes(b, y, add(b, row, j), W, lanes)
                    store_lanes(
                        b, b.fsub(v, scale) if log else b.fmul(v, scale), y, add(b, row, j), lanes
                    )

                _for_row(b, A, W, pscale)
            return
        ty = vec(W)
        with loop(b, 0, outer, 1, "o") as o:
            base = b.mul(o, i64(A * inner))

            def lanes_body(j: ir.Value, lanes: int) -> None:
                mx = entry_alloca(b, ty)
                b.store(const(ty, float("-inf")), mx)
                with loop(b, 0, A, 1, "a") as a:
                    idx = add(b, base, b.mul(a, i64(inner)), j)
                    b.store(m.fmax(b, b.load(mx, typ=ty), load_lanes(b, x, idx, W, lanes)), mx)
                top = b.load(mx, typ=ty)
                sm = entry_alloca(b, ty)
                b.store(const(ty, 0.0), sm)
                with loop(b, 0, A, 1, "a") as a:
                    idx = add(b, base, b.mul(a, i64(inner)), j)
                    z = b.fsub(load_lanes(b, x, idx, W, lanes), top)
                    e = m.exp(b, z)
                    b.store(b.fadd(b.load(sm, typ=ty), e), sm)
                    store_lanes(b, z if log else e, y, idx, lanes)
                total = b.load(sm, typ=ty)
                scale = m.log(b, total) if log else b.fdiv(const(ty, 1.0), total)
                with loop(b, 0, A, 1, "a") as a:
                    idx = add(b, base, b.mul(a, i64(inner)), j)
                    v = load_lanes(b, y, idx, W, lanes)
                    store_lanes(b, b.fsub(v, scale) if log else b.fmul(v, scale), y, idx, lanes)

            _for_row(b, inner, W, lanes_body)

    def _layernorm(
        self,
        b: ir.IRBuilder,
        ins: Sequence[ir.Value | None],
        y: ir.Value,
        outer: int,
        D: int,
        W: int,
        eps: float,
    ) -> None:
        x, scale = ins[0], ins[1]
        bias = ins[2] if len(ins) > 2 else None
        W = FIXED  # as Softmax: 16-lane partial sums, ordered, one fixed tree
        ty = vec(W)
        with loop(b, 0, outer, 1, "o") as o:
            row = b.mul(o, i64(D))
            sm = entry_alloca(b, ty)
            b.store(const(ty, 0.0), sm)

            def psum(j: ir.Value, lanes: int) -> None:
                v = load_lanes(b, x, add(b, row, j), W, lanes)
                b.store(b.fadd(b.load(sm, typ=ty), v), sm)

            _for_row(b, D, W, psum)
            mean = splat(b, b.fmul(tree_sum(b, b.load(sm, typ=ty)), ir.Constant(F32, 1.0 / D)), W)
            sq = entry_alloca(b, ty)
            b.store(const(ty, 0.0), sq)

            def pvar(j: ir.Value, lanes: int) -> None:
                d = _mask_fill(
                    b, b.fsub(load_lanes(b, x, add(b, row, j), W, lanes), mean), lanes, 0.0
                )
                b.store(b.fadd(b.load(sq, typ=ty), b.fmul(d, d)), sq)

            _for_row(b, D, W, pvar)
            var = b.fmul(tree_sum(b, b.load(sq, typ=ty)), ir.Constant(F32, 1.0 / D))
            inv = b.fdiv(
                ir.Constant(F32, 1.0),
                m.intrinsic(b, "sqrt", F32, [b.fadd(var, ir.Constant(F32, eps))]),
            )
            invv = splat(b, inv, W)

            def pout(j: ir.Value, lanes: int) -> None:
                d = b.fsub(load_lanes(b, x, add(b, row, j), W, lanes), mean)
                v = b.fmul(b.fmul(d, invv), load_lanes(b, scale, j, W, lanes))
                if bias is not None:
                    v = b.fadd(v, load_lanes(b, bias, j, W, lanes))
                store_lanes(b, v, y, add(b, row, j), lanes)

            _for_row(b, D, W, pout)

    def _lrn(
        self,
        b: ir.IRBuilder,
        x: ir.Value,
        y: ir.Value,
        shape: tuple[int, ...],
        W: int,
        a: Mapping[str, Any],
    ) -> None:
        n_, C, H, Wd = shape
        HW = H * Wd
        size = int(a["size"])
        lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
        alpha, beta, bias = float(a["alpha"]), float(a["beta"]), float(a.get("bias", 1.0))
        ty = vec(W)
        c0, c1 = a.get("channels") or (0, C)  # a thread task's run of output channels
        with loop(b, 0, n_, 1, "n") as n, loop(b, int(c0), int(c1), 1, "c") as c:
            base = b.mul(n, i64(C * HW))
            c_lo = b.select(b.icmp_signed("<", c, i64(lo)), i64(0), b.sub(c, i64(lo)))
            c_hi1 = b.select(
                b.icmp_signed(">", add(b, c, hi), i64(C - 1)), i64(C), add(b, c, hi + 1)
            )

            def body(j: ir.Value, lanes: int) -> None:
                sm = entry_alloca(b, ty)
                b.store(const(ty, 0.0), sm)
                cc_ptr = entry_alloca(b, ir.IntType(64))
                b.store(c_lo, cc_ptr)
                # for cc in [c_lo, c_hi1): a loop with run-time bounds
                hdr = b.function.append_basic_block("lrn.hdr")
                bod = b.function.append_basic_block("lrn.body")
                end = b.function.append_basic_block("lrn.end")
                b.branch(hdr)
                b.position_at_end(hdr)
                cc = b.load(cc_ptr, typ=ir.IntType(64))
                b.cbranch(b.icmp_signed("<", cc, c_hi1), bod, end)
                b.position_at_end(bod)
                v = load_lanes(b, x, add(b, base, b.mul(cc, i64(HW)), j), W, lanes)
                b.store(b.fadd(b.load(sm, typ=ty), b.fmul(v, v)), sm)
                b.store(b.add(cc, i64(1)), cc_ptr)
                b.branch(hdr)
                b.position_at_end(end)
                t = b.fadd(const(ty, bias), b.fmul(const(ty, alpha / size), b.load(sm, typ=ty)))
                t = _mask_fill(b, t, lanes, 1.0)
                idx = add(b, base, b.mul(c, i64(HW)), j)
                xv = load_lanes(b, x, idx, W, lanes)
                scale = m.exp(b, b.fmul(const(ty, -beta), m.log(b, t)))
                store_lanes(b, b.fmul(xv, scale), y, idx, lanes)

            _for_row(b, HW, W, body)
