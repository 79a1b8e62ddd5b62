"""Conv and FusedConv: a direct convolution, register-tiled, in the graph's layout.

Vector lanes run along output channels (``L`` = the target's width; the weights are
packed at build time as ``[K/L][C/g][R][S][L]``, zero-padded past K, so a weight vector is
one aligned-in-order load). A tile is ``T`` output columns of one output row: ``T``
accumulators stay in registers while the reduction runs over input channels, kernel rows
and kernel columns; each step is one weight-vector load and ``T`` FMAs with a broadcast
input scalar (an embedded-broadcast memory operand on AVX-512).

Modes: ``dense`` (group 1, or channels per group a multiple of L), ``depthwise``
(one input and one output channel per group, in a layout whose channels are contiguous:
the input is a vector load too), and ``grouped`` (anything else: each group's output
channels get their own vectors, the last one of each group masked; weights packed
``[g][K/g/L][C/g][R][S][L]``; in a blocked output a vector that straddles a block is
stored lane by lane).

Padding: columns whose taps all fall inside the input are the interior, tiled ``T`` wide
in a loop without bounds checks; the border tiles sit at compile-time columns, so each
tap of each of their columns is known to be inside or outside the input and the outside
ones are simply not emitted (peeled, no run-time checks, still ``T`` accumulators wide).
Rows are checked once per kernel row, outside the column loop.

Outputs go to NCHW<b>c / NHWC as vector stores (the last vector masked when K is not a
multiple of L), to NCHW as lane-strided stores. The bias (input 2) starts the
accumulators; an epilogue program that reads no other tensor runs in registers before
the store, any other runs as one pointwise pass over the output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen.base import Emitter, Kernel, bcast_strides, float32_only
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
    splat,
    store_lanes,
    store_strided,
    vec,
)
from guard.compiler.layout import block_of
from guard.compiler.schedule import GraphView, OpNode


class Geometry:
    """Everything about one convolution that the emitter and the packer agree on."""

    def __init__(
        self, attrs: Mapping[str, Any], xshape: Sequence[int], wshape: Sequence[int], width: int
    ) -> None:
        self.layout = attrs.get("layout", "NCHW")
        lay = self.layout
        if lay == "NCHW":
            self.N, self.C, self.H, self.W = xshape
        elif lay == "NHWC":
            self.N, self.H, self.W, self.C = xshape
        else:
            n, cb, h, w, blk = xshape
            self.N, self.C, self.H, self.W = n, cb * blk, h, w
        self.K, self.Cg, self.R, self.S = wshape
        self.g = int(attrs["group"])
        self.Kg = self.K // self.g
        self.sh, self.sw = attrs["strides"]
        self.dh, self.dw = attrs["dilations"]
        self.pt, self.pl, self.pb, self.pr = attrs["pads"]
        self.OH = (self.H + self.pt + self.pb - self.dh * (self.R - 1) - 1) // self.sh + 1
        self.OW = (self.W + self.pl + self.pr - self.dw * (self.S - 1) - 1) // self.sw + 1
        self.block = block_of(lay) or 0
        chan_contig = lay == "NHWC" or (self.block and self.block % width == 0)
        if (
            self.g == 1
            or (self.Kg % width == 0 and chan_contig)
            or (self.Kg % width == 0 and lay == "NCHW")
        ):
            self.mode, self.L = "dense", width
        elif self.Cg == 1 and self.Kg == 1 and chan_contig:
            self.mode, self.L = "depthwise", width
        else:
            # Groups whose channel count is not a multiple of L: each group gets its own
            # vectors, the last one of a group masked (zero weights past the group).
            self.mode, self.L = "grouped", width
        self.KVg = -(-self.Kg // self.L)  # vectors per group (grouped mode)
        self.KV = self.g * self.KVg if self.mode == "grouped" else -(-self.K // self.L)
        # Lanes of the last vector (of K, or of each group in grouped mode).
        self.tail = (self.Kg if self.mode == "grouped" else self.K) - (
            (self.KVg if self.mode == "grouped" else self.KV) - 1
        ) * self.L
        # Interior columns: every tap of every column inside [0, W).
        lo = -(-self.pl // self.sw) if self.pl > 0 else 0
        hi_num = self.W - 1 - self.dw * (self.S - 1) + self.pl
        hi = hi_num // self.sw + 1 if hi_num >= 0 else 0
        self.ow_lo, self.ow_hi = min(lo, self.OW), max(min(hi, self.OW), min(lo, self.OW))
        regs = 32 if width >= 16 else 16
        self.T = max(1, min(regs - 4, 14 if width >= 16 else 12)) if self.L > 1 else 8

    def x_strides(self) -> tuple[int, int, int, int, int, int]:
        """(n, channel block, channel lane, h, w, block size) element strides of x."""
        C, H, W = self.C, self.H, self.W
        if self.layout == "NCHW":
            return C * H * W, H * W, 0, W, 1, 1
        if self.layout == "NHWC":
            return H * W * C, 0, 1, W * C, C, C
        b = self.block
        return C * H * W, H * W * b, 1, W * b, b, b

    def y_strides(self) -> tuple[int, int, int, int, int, int]:
        K, H, W = self.K, self.OH, self.OW
        if self.layout == "NCHW":
            return K * H * W, H * W, 0, W, 1, 1
        if self.layout == "NHWC":
            return H * W * K, 0, 1, W * K, K, K
        b = self.block
        return K * H * W, H * W * b, 1, W * b, b, b

    def pack(self, w: np.ndarray) -> np.ndarray:
        L, K = self.L, self.K
        w = np.asarray(w, np.float32)
        if self.mode == "depthwise":
            # [KV][R][S][L]: lane = channel
            pad = np.zeros((self.KV * L, self.R, self.S), np.float32)
            pad[:K] = w[:, 0]
            return np.ascontiguousarray(
                pad.reshape(self.KV, L, self.R, self.S).transpose(0, 2, 3, 1)
            )
        if self.mode == "grouped":
            # [g][KVg][Cg][R][S][L]: each group's output channels padded to whole vectors
            per = np.zeros((self.g, self.KVg * L, self.Cg, self.R, self.S), np.float32)
            per[:, : self.Kg] = w.reshape(self.g, self.Kg, self.Cg, self.R, self.S)
            pad = per.reshape(self.KV * L, self.Cg, self.R, self.S)
        else:
            pad = np.zeros((self.KV * L, self.Cg, self.R, self.S), np.float32)
            pad[:K] = w
        return np.ascontiguousarray(
            pad.reshape(self.KV, L, self.Cg, self.R, self.S).transpose(0, 2, 3, 4, 1)
        )


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

    def pack(self, op, attrs, index, value, shapes, vector_width):  # type: ignore[no-untyped-def]
        if index != 1:
            return None
        return Geometry(attrs, shapes[0], value.shape, vector_width).pack(value)

    def emit(
        self, b: ir.IRBuilder, ins: list[ir.Value | None], outs: list[ir.Value], k: Kernel
    ) -> None:
        xo = k.inputs[0]
        assert xo is not None
        wo = k.inputs[1]
        assert wo is not None  # packed, but its Operand keeps the OIHW shape
        geo = Geometry(k.attrs, xo.shape, wo.shape, k.vector_width)
        from guard.compiler.tuning.dispatch import conv_tile

        geo.T = conv_tile(geo)  # the tuning cache's tile on a hit, else the default above
        prog, reads = _program_parts(k.attrs) if k.op == "FusedConv" else ([], False)
        has_bias = (
            len(ins) > 2
            and ins[2] is not None
            and (k.op == "Conv" or int(k.attrs["anchor_inputs"]) > 2)
        )
        epilogue = (
            (lambda bld, v: run_program(bld, prog, v, lambda j: v)) if prog and not reads else None
        )
        _DirectConv(geo, b, ins[0], ins[1], ins[2] if has_bias else None, outs[0], epilogue).emit()
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


class _DirectConv:
    def __init__(self, geo: Geometry, b: ir.IRBuilder, x: ir.Value, w: ir.Value, bias: ir.Value | None,
                 y: ir.Value, epilogue: Any) -> None:  # fmt: skip
        self.g, self.b, self.x, self.w, self.bias, self.y, self.epilogue = (
            geo,
            b,
            x,
            w,
            bias,
            y,
            epilogue,
        )
        self.ty = vec(geo.L) if geo.L > 1 else F32

    def emit(self) -> None:
        g, b = self.g, self.b
        T = g.T
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
        with (
            loop(b, 0, g.N, 1, "n") as n,
            loop(b, 0, g.KV, 1, "kv") as kv,
            loop(b, 0, g.OH, 1, "oh") as oh,
        ):
            if full:
                with loop(b, left, left + full, T, "owt") as ow:
                    self.tile(n, kv, oh, ow, T)
            for c0, width in fixed:
                self.tile(n, kv, oh, c0, width)

    def valid(self, ow0: ir.Value | int, t: int, s: int) -> bool:
        """Tap s of column ow0+t reads inside the input (always, for interior tiles)."""
        if not isinstance(ow0, int):
            return True
        g = self.g
        iw = (ow0 + t) * g.sw - g.pl + s * g.dw
        return 0 <= iw < g.W

    def tile(self, n: ir.Value, kv: ir.Value, oh: ir.Value, ow0: ir.Value | int, T: int) -> None:
        g, b = self.g, self.b
        L = g.L
        if g.mode == "grouped":  # first output channel: the group's, plus whole vectors
            kvg = b.urem(kv, i64(g.KVg))
            lanes_k = add(b, b.mul(b.udiv(kv, i64(g.KVg)), i64(g.Kg)), b.mul(kvg, i64(L)))
            self._last = b.icmp_signed("==", kvg, i64(g.KVg - 1))
        else:
            lanes_k = b.mul(kv, i64(L))  # first output channel of the vector
            self._last = b.icmp_signed("==", kv, i64(g.KV - 1))
        if self.bias is not None:
            init = self._bias_vec(lanes_k) if L > 1 else load(b, self.bias, lanes_k)
        else:
            init = const(self.ty, 0.0)
        accs = [entry_alloca(b, self.ty) for _t in range(T)]
        for a in accs:
            b.store(init, a)
        sxn, sxcb, sxcl, sxh, sxw, bx = g.x_strides()
        xn = b.mul(n, i64(sxn))
        ih0 = b.sub(b.mul(oh, i64(g.sh)), i64(g.pt))
        if g.mode == "depthwise":
            self._reduce_depthwise(accs, kv, lanes_k, xn, ih0, ow0, T, (sxcb, sxcl, sxh, sxw, bx))
        else:
            self._reduce_dense(accs, kv, lanes_k, xn, ih0, ow0, T, (sxcb, sxcl, sxh, sxw, bx))
        self._store(accs, n, lanes_k, oh, ow0, T)

    def _bias_vec(self, k0: ir.Value) -> ir.Value:
        g, b = self.g, self.b
        if g.tail == g.L:
            return load(b, self.bias, k0, g.L)
        # Last vector partial: masked load never reads past K (or the group).
        from guard.compiler.codegen.irutil import masked_load

        with b.if_else(self._last) as (then, other):
            with then:
                bt = b.block
                vt = masked_load(b, self.bias, k0, g.L, g.tail)
            with other:
                bo = b.block
                vo = load(b, self.bias, k0, g.L)
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

    def _reduce_dense(self, accs, kv, k0, xn, ih0, ow0, T, xs) -> None:  # type: ignore[no-untyped-def]
        g, b = self.g, self.b
        sxcb, sxcl, sxh, sxw, bx = xs
        L = g.L
        # The group of this vector's channels (all lanes share one group in dense mode).
        cbase: ir.Value | int = 0 if g.g == 1 else b.mul(b.udiv(k0, i64(g.Kg)), i64(g.Cg))
        with loop(b, 0, g.Cg, 1, "c") as c:
            cabs = add(b, cbase, c) if not isinstance(cbase, int) else c
            xc = add(b, xn, self._x_chan(cabs, sxcb, sxcl, bx))
            wc = b.mul(add(b, b.mul(kv, i64(g.Cg)), c), i64(g.R * g.S * L))
            with loop(b, 0, g.R, 1, "r") as r:
                ih = add(b, ih0, b.mul(r, i64(g.dh)))
                with b.if_then(in_range(b, ih, 0, g.H)):
                    xr = add(b, xc, b.mul(ih, i64(sxh)))
                    wr = add(b, wc, b.mul(r, i64(g.S * L)))
                    for s in range(g.S):
                        taps = [t for t in range(T) if self.valid(ow0, t, s)]
                        if not taps:
                            continue
                        wv = load(b, self.w, add(b, wr, s * L), L if L > 1 else 1)
                        for t in taps:
                            iw = self._iw(ow0, t, s)
                            xv = load(
                                b,
                                self.x,
                                add(
                                    b, xr, iw * sxw if isinstance(iw, int) else b.mul(iw, i64(sxw))
                                ),
                            )
                            xs_ = splat(b, xv, L) if L > 1 else xv
                            b.store(fma(b, xs_, wv, b.load(accs[t], typ=self.ty)), accs[t])

    def _reduce_depthwise(self, accs, kv, k0, xn, ih0, ow0, T, xs) -> None:  # type: ignore[no-untyped-def]
        g, b = self.g, self.b
        sxcb, sxcl, sxh, sxw, bx = xs
        L = g.L
        xc = add(b, xn, self._x_chan(k0, sxcb, sxcl, bx))
        wk = b.mul(kv, i64(g.R * g.S * L))
        with loop(b, 0, g.R, 1, "r") as r:
            ih = add(b, ih0, b.mul(r, i64(g.dh)))
            with b.if_then(in_range(b, ih, 0, g.H)):
                xr = add(b, xc, b.mul(ih, i64(sxh)))
                wr = add(b, wk, b.mul(r, i64(g.S * L)))
                for s in range(g.S):
                    taps = [t for t in range(T) if self.valid(ow0, t, s)]
                    if not taps:
                        continue
                    wv = load(b, self.w, add(b, wr, s * L), L)
                    for t in taps:
                        iw = self._iw(ow0, t, s)
                        xv = self._load_chan_vec(xr, iw, sxw, k0, L)
                        b.store(fma(b, xv, wv, b.load(accs[t], typ=self.ty)), accs[t])

    def _load_chan_vec(self, xr, iw, sxw, k0, lanes) -> ir.Value:  # type: ignore[no-untyped-def]
        g, b = self.g, self.b
        idx = add(b, xr, iw * sxw if isinstance(iw, int) else b.mul(iw, i64(sxw)))
        if g.K % g.L == 0:
            return load(b, self.x, idx, g.L)
        from guard.compiler.codegen.irutil import masked_load

        # NHWC with C not a multiple of L: the last vector is masked (select on the block).
        last = b.icmp_signed("==", k0, i64((g.KV - 1) * g.L))
        with b.if_else(last) as (then, other):
            with then:
                bt = b.block
                vt = masked_load(b, self.x, idx, g.L, g.K - (g.KV - 1) * g.L)
            with other:
                bo = b.block
                vo = load(b, self.x, idx, g.L)
        phi = b.phi(vec(g.L))
        phi.add_incoming(vt, bt)
        phi.add_incoming(vo, bo)
        return phi

    def _store(
        self, accs: list[ir.Value], n: ir.Value, k0: ir.Value, oh: ir.Value, ow0: ir.Value, T: int
    ) -> None:
        g, b = self.g, self.b
        syn, sycb, sycl, syh, syw, by = g.y_strides()
        L = g.L
        pos = add(b, b.mul(n, i64(syn)), b.mul(oh, i64(syh)))
        base = add(b, pos, self._x_chan(k0, sycb, sycl, by))
        tail = g.tail
        # A grouped vector may straddle a channel block of the output: lane by lane.
        straddles = g.mode == "grouped" and by > 1 and sycb != 0 and (g.Kg % by or by % L)
        vals = []
        for t in range(T):
            v = b.load(accs[t], typ=self.ty)
            if self.epilogue is not None:
                v = self.epilogue(b, v)
            vals.append(v)

        def write(lanes: int) -> None:
            for t in range(T):
                idx = add(
                    b,
                    base,
                    (ow0 + t) * syw if isinstance(ow0, int) else b.mul(add(b, ow0, t), i64(syw)),
                )
                if L == 1:
                    b.store(vals[t], b.gep(self.y, [idx], source_etype=F32, inbounds=True))
                elif straddles:
                    col = (
                        (ow0 + t) * syw if isinstance(ow0, int) else b.mul(add(b, ow0, t), i64(syw))
                    )
                    for j in range(lanes):
                        at = add(b, pos, col, self._x_chan(add(b, k0, j), sycb, sycl, by))
                        v = b.extract_element(vals[t], ir.Constant(ir.IntType(32), j))
                        b.store(v, b.gep(self.y, [at], source_etype=F32, inbounds=True))
                elif g.layout == "NCHW":
                    store_strided(b, vals[t], self.y, idx, sycb, lanes)
                else:
                    store_lanes(b, vals[t], self.y, idx, lanes)

        if tail == L or L == 1:
            write(L)
            return
        with b.if_else(self._last) as (then, other):
            with then:
                write(tail)
            with other:
                write(L)
