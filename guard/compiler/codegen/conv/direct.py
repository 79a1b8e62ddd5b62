"""The direct convolution's loop nest and register tile (emitter.py documents the
algorithm and drives it through :class:`DirectConv`; the schedule is schedule.py's)."""

from __future__ import annotations

from collections.abc import Callable

import llvmlite.ir as ir

from guard.compiler.codegen.conv.schedule import ConvSchedule, Geometry
from guard.compiler.codegen.irutil import (
    F32,
    add,
    const,
    elem_ptr,
    entry_alloca,
    fma,
    i64,
    in_range,
    lane_mask,
    load,
    loop,
    masked_load,
    splat,
    store_lanes,
    store_strided,
    vec,
)
from guard.compiler.codegen.shuffles import store_pieces, transpose_square

Epilogue = Callable[[ir.IRBuilder, ir.Value], ir.Value]
Accs = list[list[ir.Value]]  # [vector][column] accumulator slots
XStrides = tuple[int, int, int, int, int]  # channel block, channel lane, h, w, block size


class _Vec:
    """One output-channel vector of a tile: its index, first channel, and whether it is
    the last (masked) vector of K or of its group."""

    def __init__(self, conv: DirectConv, kv: ir.Value) -> None:
        g, b = conv.g, conv.b
        self.kv = kv
        if g.mode == "grouped":  # first output channel: the group's, plus whole vectors
            kvg = b.urem(kv, i64(g.KVg))
            self.k0 = add(b, b.mul(b.udiv(kv, i64(g.KVg)), i64(g.Kg)), b.mul(kvg, i64(g.L)))
            self.last = b.icmp_signed("==", kvg, i64(g.KVg - 1))
        else:
            self.k0 = b.mul(kv, i64(g.L))
            self.last = b.icmp_signed("==", kv, i64(g.KV - 1))


class DirectConv:
    def __init__(self, geo: Geometry, sched: ConvSchedule, b: ir.IRBuilder, x: ir.Value,
                 w: ir.Value, bias: ir.Value | None, y: ir.Value,
                 epilogue: Epilogue | None,
                 rows: tuple[int | ir.Value, int | ir.Value] | None = None) -> None:  # fmt: skip
        self.g, self.s, self.b = geo, sched, b
        self.rows = rows or geo.rows  # the output rows written (run-time in a shared body)
        self.x, self.w, self.bias, self.y, self.epilogue = x, w, bias, y, epilogue
        self.ty = vec(geo.L) if geo.L > 1 else F32
        self.shared = geo.vectors_share_input(sched.oc_block)

    def emit(self) -> None:
        g, b, s = self.g, self.b, self.s
        T, KB = s.ow_block, min(s.oc_block, g.KV)
        # Column tiles: border tiles at compile-time positions (each tap of each column is
        # known to be inside or outside the input, so no run-time checks), interior tiles
        # (every tap inside) in a loop.
        left, full, fixed = g.column_tiles(T)
        blocks = g.KV // KB * KB  # whole blocks of KB vectors; the rest is one short block

        def columns(n: ir.Value, kv0: ir.Value, nv: int, oh: ir.Value) -> None:
            if full:
                with loop(b, left, left + full, T, "owt") as ow:
                    self.tile(n, kv0, nv, oh, ow, T)
            for c0, width in fixed:
                self.tile(n, kv0, nv, oh, c0, width)

        with loop(b, 0, g.N, 1, "n") as n:
            if s.loop_order == "kv_oh":
                with loop(b, 0, blocks, KB, "kv") as kv, loop(b, *self.rows, 1, "oh") as oh:
                    columns(n, kv, KB, oh)
                if g.KV - blocks:
                    with loop(b, *self.rows, 1, "oh_r") as oh:
                        columns(n, i64(blocks), g.KV - blocks, oh)
            else:
                with loop(b, *self.rows, 1, "oh") as oh:
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
                vt = masked_load(b, elem_ptr(b, base, idx), g.L, lane_mask(g.L, lanes))
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
            if g.layout == "NCHW" and L > 1 and (L >= 16 or g.sw == 1):
                # Lanes run along channels, an NCHW row along columns: L columns at a time
                # are transposed in registers and stored as runs of whole vectors. LLVM's
                # SLP pass merged the lane-strided stores of some tiles (8 lanes) and not
                # of others: vgg19's 3x3 3->64 stem ran at 0.52-0.69 of sgemm. Measured on
                # znver4 (kernel alone, interleaved): that stem 1.34x (AVX-512) and 1.33-1.40x
                # (AVX2) faster, ppocr_v4_det's 3x3/2 3->16 1.39x (AVX-512); with 8 lanes
                # at stride 2 zfnet512's 5x5/2 and mobilenet_v2's 3x3/2 stem ran 0.84-0.89x,
                # so those keep the lane-strided stores.
                for c0 in range(0, T, L):
                    part = vals[c0 : c0 + L]
                    pad = [ir.Constant(self.ty, None)] * (L - len(part))
                    rows = transpose_square(b, part + pad)  # rows[j]: channel k0 + j
                    for j in range(lanes):
                        at = add(b, base, col(c0), j * sycb)
                        store_pieces(b, rows[j], self.y, at, len(part))
                return
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
