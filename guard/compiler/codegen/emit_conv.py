"""Conv and FusedConv: a direct convolution, register-tiled, in the graph's layout.

The one convolution emitter of the code generator. Vector lanes run along output
channels (``L`` = the target's width; the weights are packed at build time as
``[K/L][C/g][R][S][L]``, zero-padded past K, so a weight vector is one aligned-in-order
load). A tile is ``T`` output columns of one output row times ``KB`` output-channel
vectors: ``KB * T`` accumulators stay in registers while the reduction runs over input
channels, kernel rows and kernel columns; each step loads ``KB`` weight vectors and
``T`` input scalars (broadcast; an embedded-broadcast memory operand on AVX-512) and
issues ``KB * T`` FMAs. ``T``, ``KB``, the unroll of the input-channel loop and the loop
order (channel blocks outside rows, or rows outside blocks) are the schedule
(conv_schedule.py: :class:`ConvSchedule`, its default heuristic and the space the tuner
searches); the tuning cache supplies it on a hit (guard/compiler/tuning/dispatch.py).

Modes: ``dense`` (group 1, or channels per group a multiple of L), ``depthwise``
(one input and one output channel per group, in a layout whose channels are contiguous:
the input is a vector load too), and ``grouped`` (anything else: each group's output
channels get their own vectors, the last one of each group masked; weights packed
``[g][K/g/L][C/g][R][S][L]``; in a blocked output a vector that straddles a block is
stored lane by lane).

Padding: columns whose taps all fall inside the input are the interior, tiled ``T`` wide
in a loop without bounds checks; the border tiles sit at compile-time columns, so each
tap of each of their columns is known to be inside or outside the input and the outside
ones are simply not emitted (peeled, no run-time checks, still ``T`` columns wide).
Rows are checked once per kernel row, outside the column loop.

Outputs go to NCHW<b>c / NHWC as vector stores (the last vector masked when K is not a
multiple of L), to NCHW as lane-strided stores. Vectors of a tile that lie in different
groups read their own input channels (one broadcast per vector); K not a multiple of
``KB`` vectors ends in one shorter block. The bias (input 2) starts the
accumulators; an epilogue program that reads no other tensor runs in registers before
the store, any other runs as one pointwise pass over the output.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen.base import Emitter, Kernel, bcast_strides, float32_only
from guard.compiler.codegen.conv_schedule import ConvSchedule, Geometry
from guard.compiler.codegen.emit_elementwise import emit_pointwise, program_decline, run_program
from guard.compiler.codegen.irutil import (
    F32,
    add,
    const,
    entry_alloca,
    fma,
    i64,
    in_range,
    load,
    loop,
    masked_load,
    splat,
    store_lanes,
    store_strided,
    vec,
)
from guard.compiler.layout import block_of
from guard.compiler.schedule import GraphView, OpNode
from guard.compiler.tuning.dispatch import conv_schedule


def conv_function(module: ir.Module, name: str, k: Kernel, sched: ConvSchedule) -> ir.Function:
    """``void name(ptr x, ptr packed_w, ptr bias_or_null, ptr y)``: one Conv kernel with
    ``sched``, outside any model (the tests' and benchmarks' entry)."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.PointerType()] * 4), name)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    xo, wo = k.inputs[0], k.inputs[1]
    assert xo is not None and wo is not None
    geo = Geometry(k.attrs, xo.shape, wo.shape, k.vector_width)
    ins: list[ir.Value | None] = [fn.args[0], fn.args[1], fn.args[2] if len(k.inputs) > 2 else None]
    Conv().emit_scheduled(b, ins, [fn.args[3]], k, geo, sched)
    b.ret_void()
    return fn


def _program_parts(attrs: Mapping[str, Any]) -> tuple[list, bool]:
    prog = list(attrs.get("program", []))
    reads = any(isinstance(r, int) for s in prog for r in s["args"])
    return prog, reads


class Conv(Emitter):
    ops = frozenset({"Conv", "FusedConv"})

    def decline(self, node: OpNode, g: GraphView) -> str | None:
        why = float32_only(node, g)
        if why:
            return why
        w = g.tensors[node.args[1]]
        if len(w.shape) != 4:
            return f"no emitter for {node.op} with {len(w.shape) - 2} spatial dims (2-D only)"
        if w.kind != "const":
            return f"no emitter for {node.op} with run-time weights"
        if len(node.args) > 2 and node.args[2] and g.tensors[node.args[2]].kind != "const":
            return f"no emitter for {node.op} with a run-time bias"
        lay = node.attrs.get("layout", "NCHW")
        if lay not in ("NCHW", "NHWC") and not block_of(lay):
            return f"no emitter for {node.op} in layout {lay}"
        if node.op == "FusedConv":
            return program_decline(node.attrs["program"])
        return None

    def pack(
        self, op: str, attrs: Mapping[str, Any], index: int, value: np.ndarray,
        shapes: Sequence[tuple[int, ...] | None], vector_width: int,
    ) -> np.ndarray | None:  # fmt: skip
        if index != 1 or shapes[0] is None:
            return None
        return Geometry(attrs, shapes[0], value.shape, vector_width).pack(value)

    def emit(
        self, b: ir.IRBuilder, ins: list[ir.Value | None], outs: list[ir.Value], k: Kernel
    ) -> None:
        xo, wo = k.inputs[0], k.inputs[1]
        assert xo is not None and wo is not None  # w packed; its Operand keeps OIHW
        geo = Geometry(k.attrs, xo.shape, wo.shape, k.vector_width)
        # The tuning cache's schedule on a hit, else the default heuristic.
        self.emit_scheduled(b, ins, outs, k, geo, conv_schedule(geo))

    def emit_scheduled(
        self, b: ir.IRBuilder, ins: list[ir.Value | None], outs: list[ir.Value], k: Kernel,
        geo: Geometry, sched: ConvSchedule,
    ) -> None:  # fmt: skip
        """``emit`` with an explicit schedule (tests and benchmarks sweep the space)."""
        sched.validate(geo.L)
        prog, reads = _program_parts(k.attrs) if k.op == "FusedConv" else ([], False)
        has_bias = (
            len(ins) > 2
            and ins[2] is not None
            and (k.op == "Conv" or int(k.attrs["anchor_inputs"]) > 2)
        )
        epilogue = (
            (lambda bld, v: run_program(bld, prog, v, lambda j: v)) if prog and not reads else None
        )
        _DirectConv(
            geo, sched, b, ins[0], ins[1], ins[2] if has_bias else None, outs[0], epilogue
        ).emit()
        if prog and reads:
            out = k.outputs[0]
            refs = sorted({r for s in prog for r in s["args"] if isinstance(r, int)})
            operands = [(outs[0], bcast_strides(out.shape, out.shape))]
            for j in refs:
                o = k.inputs[j]
                assert o is not None and ins[j] is not None
                operands.append((ins[j], bcast_strides(o.shape, out.shape)))

            def compute(vals: list[ir.Value]) -> ir.Value:
                return run_program(b, prog, vals[0], lambda j: vals[1 + refs.index(j)])

            emit_pointwise(b, out.shape, operands, outs[0], k.vector_width, compute)


Epilogue = Callable[[ir.IRBuilder, ir.Value], ir.Value]
Accs = list[list[ir.Value]]  # [vector][column] accumulator slots
XStrides = tuple[int, int, int, int, int]  # channel block, channel lane, h, w, block size


class _Vec:
    """One output-channel vector of a tile: its index, first channel, and whether it is
    the last (masked) vector of K or of its group."""

    def __init__(self, conv: _DirectConv, kv: ir.Value) -> None:
        g, b = conv.g, conv.b
        self.kv = kv
        if g.mode == "grouped":  # first output channel: the group's, plus whole vectors
            kvg = b.urem(kv, i64(g.KVg))
            self.k0 = add(b, b.mul(b.udiv(kv, i64(g.KVg)), i64(g.Kg)), b.mul(kvg, i64(g.L)))
            self.last = b.icmp_signed("==", kvg, i64(g.KVg - 1))
        else:
            self.k0 = b.mul(kv, i64(g.L))
            self.last = b.icmp_signed("==", kv, i64(g.KV - 1))


class _DirectConv:
    def __init__(self, geo: Geometry, sched: ConvSchedule, b: ir.IRBuilder, x: ir.Value,
                 w: ir.Value, bias: ir.Value | None, y: ir.Value,
                 epilogue: Epilogue | None) -> None:  # fmt: skip
        self.g, self.s, self.b = geo, sched, b
        self.x, self.w, self.bias, self.y, self.epilogue = x, w, bias, y, epilogue
        self.ty = vec(geo.L) if geo.L > 1 else F32
        self.shared = geo.vectors_share_input(sched.oc_block)

    def emit(self) -> None:
        g, b, s = self.g, self.b, self.s
        T, KB = s.ow_block, min(s.oc_block, g.KV)
        # Column tiles: border tiles at compile-time positions (each tap of each column is
        # known to be inside or outside the input, so no run-time checks), interior tiles
        # (every tap inside) in a loop.
        # Border tiles are T wide too (they reach into the interior): a 1-column tile would
        # be one FMA chain, latency-bound at a quarter of the FMA throughput.
        left = min(g.OW, -(-g.ow_lo // T) * T) if g.ow_lo > 0 else 0
        right = max(left, g.OW - -(-(g.OW - g.ow_hi) // T) * T) if g.ow_hi < g.OW else g.OW
        fixed: list[tuple[int, int]] = []  # (first column, width)
        fixed += [(c, min(T, left - c)) for c in range(0, left, T)]
        inner = right - left
        full = inner // T * T
        if inner - full:
            fixed.append((left + full, inner - full))
        fixed += [(c, min(T, g.OW - c)) for c in range(right, g.OW, T)]
        blocks = g.KV // KB * KB  # whole blocks of KB vectors; the rest is one short block

        def columns(n: ir.Value, kv0: ir.Value, nv: int, oh: ir.Value) -> None:
            if full:
                with loop(b, left, left + full, T, "owt") as ow:
                    self.tile(n, kv0, nv, oh, ow, T)
            for c0, width in fixed:
                self.tile(n, kv0, nv, oh, c0, width)

        with loop(b, 0, g.N, 1, "n") as n:
            if s.loop_order == "kv_oh":
                with loop(b, 0, blocks, KB, "kv") as kv, loop(b, 0, g.OH, 1, "oh") as oh:
                    columns(n, kv, KB, oh)
                if g.KV - blocks:
                    with loop(b, 0, g.OH, 1, "oh_r") as oh:
                        columns(n, i64(blocks), g.KV - blocks, oh)
            else:
                with loop(b, 0, g.OH, 1, "oh") as oh:
                    with loop(b, 0, blocks, KB, "kv") as kv:
                        columns(n, kv, KB, oh)
                    if g.KV - blocks:
                        columns(n, i64(blocks), g.KV - blocks, oh)

    def valid(self, ow0: ir.Value | int, t: int, s: int) -> bool:
        """Tap s of column ow0+t reads inside the input (always, for interior tiles)."""
        if not isinstance(ow0, int):
            return True
        g = self.g
        iw = (ow0 + t) * g.sw - g.pl + s * g.dw
        return 0 <= iw < g.W

    def tile(self, n: ir.Value, kv0: ir.Value, nv: int, oh: ir.Value, ow0: ir.Value | int,
             T: int) -> None:  # fmt: skip
        g, b = self.g, self.b
        vecs = [_Vec(self, kv0 if j == 0 else add(b, kv0, j)) for j in range(nv)]
        accs = [[entry_alloca(b, self.ty) for _t in range(T)] for _v in vecs]
        for v, row in zip(vecs, accs, strict=True):
            if self.bias is not None:
                init = self._bias_vec(v) if g.L > 1 else load(b, self.bias, v.k0)
            else:
                init = const(self.ty, 0.0)
            for a in row:
                b.store(init, a)
        sxn, sxcb, sxcl, sxh, sxw, bx = g.x_strides()
        xn = b.mul(n, i64(sxn))
        ih0 = b.sub(b.mul(oh, i64(g.sh)), i64(g.pt))
        xs = (sxcb, sxcl, sxh, sxw, bx)
        if g.mode == "depthwise":
            self._reduce_depthwise(accs, vecs, xn, ih0, ow0, T, xs)
        else:
            self._reduce_dense(accs, vecs, xn, ih0, ow0, T, xs)
        for v, row in zip(vecs, accs, strict=True):
            self._store(row, v, n, oh, ow0, T)

    def _bias_vec(self, v: _Vec) -> ir.Value:
        g, b = self.g, self.b
        if g.tail == g.L:
            return load(b, self.bias, v.k0, g.L)
        return self._masked_or_full(v.last, self.bias, v.k0, g.tail)

    def _masked_or_full(
        self, last: ir.Value, base: ir.Value, idx: ir.Value, lanes: int
    ) -> ir.Value:
        """A vector load whose lanes past ``lanes`` are never read when ``last`` holds."""
        g, b = self.g, self.b
        with b.if_else(last) as (then, other):
            with then:
                bt = b.block
                vt = masked_load(b, base, idx, g.L, lanes)
            with other:
                bo = b.block
                vo = load(b, base, idx, g.L)
        phi = b.phi(vec(g.L))
        phi.add_incoming(vt, bt)
        phi.add_incoming(vo, bo)
        return phi

    def _x_chan(self, c: ir.Value, sxcb: int, sxcl: int, bx: int) -> ir.Value:
        b = self.b
        if bx == 1:
            return b.mul(c, i64(sxcb))
        if sxcb == 0:
            return b.mul(c, i64(sxcl))
        return add(b, b.mul(b.udiv(c, i64(bx)), i64(sxcb)), b.mul(b.urem(c, i64(bx)), i64(sxcl)))

    def _iw(self, ow0: ir.Value | int, t: int, s: int) -> ir.Value | int:
        g, b = self.g, self.b
        if isinstance(ow0, int):
            return (ow0 + t) * g.sw - g.pl + s * g.dw
        return add(b, b.mul(ow0, i64(g.sw)), t * g.sw - g.pl + s * g.dw)

    def _x_at(self, row: ir.Value, iw: ir.Value | int, sxw: int) -> ir.Value:
        b = self.b
        return add(b, row, iw * sxw if isinstance(iw, int) else b.mul(iw, i64(sxw)))

    def _reduce_dense(
        self, accs: Accs, vecs: list[_Vec], xn: ir.Value, ih0: ir.Value, ow0: ir.Value | int,
        T: int, xs: XStrides,
    ) -> None:  # fmt: skip
        g, b = self.g, self.b
        sxcb, sxcl, sxh, sxw, bx = xs
        L = g.L
        # Input-channel base of each vector's group; vectors that share it share loads.
        readers = [vecs] if self.shared else [[v] for v in vecs]
        bases: list[ir.Value | int] = [
            0 if g.g == 1 else b.mul(b.udiv(r[0].k0, i64(g.Kg)), i64(g.Cg)) for r in readers
        ]

        def channel(c: ir.Value) -> None:
            xcs = [add(b, xn, self._x_chan(add(b, cb, c), sxcb, sxcl, bx)) for cb in bases]
            wcs = [b.mul(add(b, b.mul(v.kv, i64(g.Cg)), c), i64(g.R * g.S * L)) for v in vecs]
            with loop(b, 0, g.R, 1, "r") as r:
                ih = add(b, ih0, b.mul(r, i64(g.dh)))
                with b.if_then(in_range(b, ih, 0, g.H)):
                    xrs = [add(b, xc, b.mul(ih, i64(sxh))) for xc in xcs]
                    wrs = [add(b, wc, b.mul(r, i64(g.S * L))) for wc in wcs]
                    for s in range(g.S):
                        taps = [t for t in range(T) if self.valid(ow0, t, s)]
                        if not taps:
                            continue
                        wvs = {id(v): load(b, self.w, add(b, wr, s * L), L if L > 1 else 1)
                               for v, wr in zip(vecs, wrs, strict=True)}  # fmt: skip
                        for t in taps:
                            iw = self._iw(ow0, t, s)
                            for xr, group in zip(xrs, readers, strict=True):
                                xv = load(b, self.x, self._x_at(xr, iw, sxw))
                                xs_ = splat(b, xv, L) if L > 1 else xv
                                for v in group:
                                    a = accs[vecs.index(v)][t]
                                    b.store(fma(b, xs_, wvs[id(v)], b.load(a, typ=self.ty)), a)

        u = max(1, min(self.s.unroll, g.Cg))
        steps = g.Cg // u * u
        if steps:
            with loop(b, 0, steps, u, "c") as c0:
                for i in range(u):
                    channel(c0 if i == 0 else add(b, c0, i))
        for c in range(steps, g.Cg):
            channel(i64(c))

    def _reduce_depthwise(
        self, accs: Accs, vecs: list[_Vec], xn: ir.Value, ih0: ir.Value, ow0: ir.Value | int,
        T: int, xs: XStrides,
    ) -> None:  # fmt: skip
        g, b = self.g, self.b
        sxcb, sxcl, sxh, sxw, bx = xs
        L = g.L
        xcs = [add(b, xn, self._x_chan(v.k0, sxcb, sxcl, bx)) for v in vecs]
        wks = [b.mul(v.kv, i64(g.R * g.S * L)) for v in vecs]
        with loop(b, 0, g.R, 1, "r") as r:
            ih = add(b, ih0, b.mul(r, i64(g.dh)))
            with b.if_then(in_range(b, ih, 0, g.H)):
                xrs = [add(b, xc, b.mul(ih, i64(sxh))) for xc in xcs]
                wrs = [add(b, wk, b.mul(r, i64(g.S * L))) for wk in wks]
                for s in range(g.S):
                    taps = [t for t in range(T) if self.valid(ow0, t, s)]
                    if not taps:
                        continue
                    wvs = [load(b, self.w, add(b, wr, s * L), L) for wr in wrs]
                    for t in taps:
                        iw = self._iw(ow0, t, s)
                        for j, v in enumerate(vecs):
                            xv = self._load_chan_vec(xrs[j], iw, sxw, v)
                            a = accs[j][t]
                            b.store(fma(b, xv, wvs[j], b.load(a, typ=self.ty)), a)

    def _load_chan_vec(self, xr: ir.Value, iw: ir.Value | int, sxw: int, v: _Vec) -> ir.Value:
        g, b = self.g, self.b
        idx = self._x_at(xr, iw, sxw)
        if g.K % g.L == 0:
            return load(b, self.x, idx, g.L)
        # NHWC with C not a multiple of L: the last vector is masked.
        return self._masked_or_full(v.last, self.x, idx, g.K - (g.KV - 1) * g.L)

    def _store(self, accs: list[ir.Value], v: _Vec, n: ir.Value, oh: ir.Value,
               ow0: ir.Value | int, T: int) -> None:  # fmt: skip
        g, b = self.g, self.b
        syn, sycb, sycl, syh, syw, by = g.y_strides()
        L, k0 = g.L, v.k0
        pos = add(b, b.mul(n, i64(syn)), b.mul(oh, i64(syh)))
        base = add(b, pos, self._x_chan(k0, sycb, sycl, by))
        # A grouped vector may straddle a channel block of the output: lane by lane.
        straddles = g.mode == "grouped" and by > 1 and sycb != 0 and (g.Kg % by or by % L)
        vals = []
        for t in range(T):
            val = b.load(accs[t], typ=self.ty)
            if self.epilogue is not None:
                val = self.epilogue(b, val)
            vals.append(val)

        def col(t: int) -> ir.Value | int:
            return (ow0 + t) * syw if isinstance(ow0, int) else b.mul(add(b, ow0, t), i64(syw))

        def write(lanes: int) -> None:
            for t in range(T):
                idx = add(b, base, col(t))
                if L == 1:
                    b.store(vals[t], b.gep(self.y, [idx], source_etype=F32, inbounds=True))
                elif straddles:
                    for j in range(lanes):
                        at = add(b, pos, col(t), self._x_chan(add(b, k0, j), sycb, sycl, by))
                        e = b.extract_element(vals[t], ir.Constant(ir.IntType(32), j))
                        b.store(e, b.gep(self.y, [at], source_etype=F32, inbounds=True))
                elif g.layout == "NCHW":
                    store_strided(b, vals[t], self.y, idx, sycb, lanes)
                else:
                    store_lanes(b, vals[t], self.y, idx, lanes)

        if g.tail == L or L == 1:
            write(L)
            return
        with b.if_else(v.last) as (then, other):
            with then:
                write(g.tail)
            with other:
                write(L)
