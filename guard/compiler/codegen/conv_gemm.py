"""Implicit-GEMM convolution (both orientations) and its Xcol packing; the public API and
the algorithm's description are conv.py's (ConvKernel, ConvSchedule)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

from llvmlite import ir

from .conv_depthwise import row_load, store_lanes
from .microkernel import (
    ACCUMULATE,
    F32,
    F32P,
    FINISH,
    I32,
    I64,
    Epilogue,
    for_loop,
    for_loop_dynamic,
    fptr,
    iadd,
    imul,
    lane_mask,
    masked_gather,
    masked_load,
    micro_kernel,
    tiles,
    vload,
)

if TYPE_CHECKING:
    from .conv import ConvKernel

CT_LIMIT_BYTES = 256 * 1024  # stack buffer for one block of transposed output ("channels")
SCRATCH_LIMIT_BYTES = 512 * 1024  # stack buffer for one packed Xcol block


class ConvGemmEmitter:
    """Implicit GEMM per (image, group): packed weights as A, gathered Xcol blocks as B."""

    def __init__(
        self,
        k: ConvKernel,
        b: ir.IRBuilder,
        epilogue: Epilogue | None,
        epilogue_key: Hashable | None,
    ) -> None:
        self.k, self.s, self.b = k, k.sched, b
        self.W = k.vector_width
        self.epilogue, self.epilogue_key = epilogue, epilogue_key
        self.res: ir.Value | None = None  # the residual argument, laid out like y
        self.res_g: ir.Value | None = None  # ... at the current (image, group)
        self.P = k.OH * k.OW
        self.RS = k.R * k.S
        self.cg, self.kg = k.C // k.group, k.K // k.group
        self.crs = self.cg * self.RS
        self.kc_channels = min(self.s.kc_channels, self.cg)
        self.nc = min(self.s.nc, -(-self.P // self.s.ow_block) * self.s.ow_block)
        # Xcol blocks are whole output rows, so a block is contiguous in y and its packed
        # rows are plain copies of input rows (no position -> (oh, ow) division)
        self.rows_per_block = max(1, min(k.OH, self.nc // k.OW))
        self.ncp = -(-self.rows_per_block * k.OW // self.W) * self.W
        self.channels = self.s.vectorize == "channels"
        self.block_positions = self.nc if k.pointwise else self.rows_per_block * k.OW

    def emit(self, x, w, bias, y) -> None:
        k, b = self.k, self.b
        scratch = None
        if not k.pointwise:
            floats = self.kc_channels * self.RS * self.ncp
            if floats * 4 > SCRATCH_LIMIT_BYTES:
                raise ValueError(
                    f"ConvSchedule needs a {floats * 4} B stack buffer (kc_channels*R*S floats "
                    f"x {self.ncp} positions), over the {SCRATCH_LIMIT_BYTES} B limit: lower "
                    "kc_channels or nc"
                )
            self.pack_fn = self._pack_function()
            with b.goto_entry_block():
                slot = b.alloca(ir.ArrayType(F32, floats), name="xcol")
                slot.align = 64
            scratch = b.bitcast(slot, F32P)
        self.ct = None
        if self.channels:
            floats = self.block_positions * self.kg
            if floats * 4 > CT_LIMIT_BYTES:
                raise ValueError(
                    f"ConvSchedule(vectorize='channels') needs a {floats * 4} B stack buffer "
                    f"({self.block_positions} positions x {self.kg} channels), over the "
                    f"{CT_LIMIT_BYTES} B limit: lower nc or vectorize positions"
                )
            with b.goto_entry_block():
                slot = b.alloca(ir.ArrayType(F32, floats), name="yt")
                slot.align = 64
            self.ct = b.bitcast(slot, F32P)
        hw = k.H * k.W

        def image_group(ng: ir.Value) -> None:
            # ng = n * group + g: x, y and the bias advance per group; weights per group too
            g = b.urem(ng, ir.Constant(I64, k.group)) if k.group > 1 else ir.Constant(I64, 0)
            xg = fptr(b, x, imul(b, ng, self.cg * hw))
            yg = fptr(b, y, imul(b, ng, self.kg * self.P))
            if self.res is not None:
                self.res_g = fptr(b, self.res, imul(b, ng, self.kg * self.P))
            wg = fptr(b, w, imul(b, g, k._group_panel_floats()))
            bg = fptr(b, bias, imul(b, g, self.kg))
            self._gemm(xg, wg, bg, yg, scratch)

        for_loop(b, 0, k.N * k.group, 1, image_group)

    def _gemm(self, x, w, bias, y, scratch) -> None:
        b, s, k = self.b, self.s, self.k
        chunks = -(-self.cg // self.kc_channels)

        def block(p0: ir.Value, psize: int, oh0: ir.Value | None = None, rows: int = 0) -> None:
            # k-chunks in one run-time loop: the chunk's length and its micro-kernel flags
            # (accumulate after the first, finish on the last) are values, not copies
            kcc = self.kc_channels

            def chunk(c0: ir.Value) -> None:
                left = b.sub(ir.Constant(I64, self.cg), c0)
                cc = b.select(
                    b.icmp_signed("<", left, ir.Constant(I64, kcc)), left, ir.Constant(I64, kcc)
                )
                acc = b.select(
                    b.icmp_signed(">", c0, ir.Constant(I64, 0)),
                    ir.Constant(I32, ACCUMULATE),
                    ir.Constant(I32, 0),
                )
                fin = b.select(
                    b.icmp_signed("==", b.add(c0, cc), ir.Constant(I64, self.cg)),
                    ir.Constant(I32, FINISH),
                    ir.Constant(I32, 0),
                )
                flags = b.or_(acc, fin)
                if scratch is not None:
                    b.call(self.pack_fn, [x, scratch, c0, cc, oh0, ir.Constant(I64, rows)])

                def mblock(m0: ir.Value, msize: int) -> None:
                    if self.channels:
                        self._macro_channels(
                            x, w, bias, scratch, c0, cc, p0, psize, m0, msize, flags
                        )
                    else:
                        self._macro(x, w, bias, y, scratch, c0, cc, p0, psize, m0, msize, flags)

                tiles(b, self.kg, s.mc, mblock)

            for_loop(b, 0, chunks * kcc, kcc, chunk)
            if self.channels:
                self._transpose_out(y, p0, psize)

        if scratch is None:
            tiles(b, self.P, self.nc, block)
        else:
            tiles(
                b,
                k.OH,
                self.rows_per_block,
                lambda oh0, rows: block(imul(b, oh0, k.OW), rows * k.OW, oh0, rows),
            )

    def _macro(self, x, w, bias, y, scratch, c0, cc, p0, psize, m_start, msize, flags) -> None:
        b, s, W = self.b, self.s, self.W
        mr, nr = s.oc_block, s.ow_block
        klen = b.mul(cc, ir.Constant(I64, self.RS))

        def tile(n_off: ir.Value, width: int, m_off: ir.Value, rows: int) -> None:
            m0 = iadd(b, m_start, m_off)
            p = iadd(b, p0, n_off)
            # weights: panel m0/mr starts at (m0/mr)*crs*mr = m0*crs; chunk at c0*RS*mr
            pa = fptr(b, w, iadd(b, imul(b, m0, self.crs), imul(b, c0, self.RS * mr)))
            if scratch is None:
                pb, ldb = fptr(b, x, iadd(b, imul(b, c0, self.P), p)), self.P
            else:
                pb, ldb = fptr(b, scratch, n_off), self.ncp
            pc = fptr(b, y, iadd(b, imul(b, m0, self.P), p))
            nvec = -(-width // W)
            ukr = micro_kernel(
                b.module,
                rows,
                nvec,
                width - (nvec - 1) * W,
                W,
                "col",
                self.epilogue,
                s.unroll,
                mask_b=scratch is None,  # scratch rows are padded to whole vectors
                epilogue_key=self.epilogue_key,
                residual=self.res_g is not None,
            )
            pres = ir.Constant(F32P, None)
            if self.res_g is not None:
                pres = fptr(b, self.res_g, iadd(b, imul(b, m0, self.P), p))
            b.call(
                ukr,
                [
                    pa,
                    pb,
                    pc,
                    fptr(b, bias, m0),
                    klen,
                    ir.Constant(I64, 1),
                    ir.Constant(I64, mr),
                    ir.Constant(I64, ldb),
                    ir.Constant(I64, self.P),
                    flags,
                    ir.Constant(I32, width - (nvec - 1) * W),
                    pres,
                ],
            )

        if s.loop_order == "nm":
            tiles(
                b,
                psize,
                nr,
                lambda n_off, wd: tiles(b, msize, mr, lambda m_off, r: tile(n_off, wd, m_off, r)),
            )
        else:
            tiles(
                b,
                msize,
                mr,
                lambda m_off, r: tiles(b, psize, nr, lambda n_off, wd: tile(n_off, wd, m_off, r)),
            )

    def _macro_channels(
        self, x, w, bias, scratch, c0, cc, p0, psize, n_start, nsize, flags
    ) -> None:
        """Tiles of ``ow_block`` positions x ``oc_block`` channels into ``ct[p][k]``: A is
        Xcol read down a column (consecutive positions), B the packed weight panel."""
        b, s, W = self.b, self.s, self.W
        mr, nr = s.ow_block, s.oc_block
        klen = b.mul(cc, ir.Constant(I64, self.RS))

        def tile(p_off: ir.Value, rows: int, n_off: ir.Value, width: int) -> None:
            n0 = iadd(b, n_start, n_off)
            if scratch is None:
                pa, lda_k = fptr(b, x, iadd(b, imul(b, c0, self.P), iadd(b, p0, p_off))), self.P
            else:
                pa, lda_k = fptr(b, scratch, p_off), self.ncp
            # weights: panel n0/nr starts at n0*crs; chunk at c0*RS*nr
            pb = fptr(b, w, iadd(b, imul(b, n0, self.crs), imul(b, c0, self.RS * nr)))
            pc = fptr(b, self.ct, iadd(b, imul(b, p_off, self.kg), n0))
            nvec = -(-width // W)
            ukr = micro_kernel(
                b.module,
                rows,
                nvec,
                width - (nvec - 1) * W,
                W,
                "row",
                self.epilogue if self.res_g is None else None,  # else after the residual
                s.unroll,
                mask_b=False,
                epilogue_key=self.epilogue_key,
            )
            b.call(
                ukr,
                [
                    pa,
                    pb,
                    pc,
                    fptr(b, bias, n0),
                    klen,
                    ir.Constant(I64, 1),
                    ir.Constant(I64, lda_k),
                    ir.Constant(I64, nr),
                    ir.Constant(I64, self.kg),
                    flags,
                    ir.Constant(I32, width - (nvec - 1) * W),
                    ir.Constant(F32P, None),
                ],
            )

        if s.loop_order == "nm":
            tiles(
                b,
                nsize,
                nr,
                lambda n_off, wd: tiles(b, psize, mr, lambda p_off, r: tile(p_off, r, n_off, wd)),
            )
        else:
            tiles(
                b,
                psize,
                mr,
                lambda p_off, r: tiles(b, nsize, nr, lambda n_off, wd: tile(p_off, r, n_off, wd)),
            )

    def _transpose_out(self, y, p0: ir.Value, psize: int) -> None:
        """``y[k, p0 + p] = ct[p][k]``: one gather of W positions per output vector (with a
        residual: plus it, then the epilogue, which the micro-kernel left out)."""
        b, W, kg = self.b, self.W, self.kg
        ct = self.ct

        def channel(kk: ir.Value) -> None:
            src = fptr(b, ct, kk)
            off = iadd(b, imul(b, kk, self.P), p0)
            dst = fptr(b, y, off)
            for j in range(0, psize, W):
                lanes = min(W, psize - j)
                idx = ir.Constant(ir.VectorType(I32, W), [(j + lane) * kg for lane in range(W)])
                v = masked_gather(b, src, idx, lane_mask(W, lanes))
                if self.res_g is not None:
                    rp = fptr(b, self.res_g, iadd(b, off, ir.Constant(I64, j)))
                    r = (
                        vload(b, rp, W)
                        if lanes == W
                        else masked_load(b, rp, W, lane_mask(W, lanes))
                    )
                    v = b.fadd(v, r)
                    if self.epilogue is not None:
                        v = self.epilogue(b, v)
                store_lanes(b, v, fptr(b, dst, j), lanes)

        for_loop(b, 0, kg, 1, channel)

    def _pack_function(self) -> ir.Function:
        """``pack(x, scratch, c0, cc, oh0, rows)``: Xcol rows of channels ``[c0, c0+cc)`` for
        output rows ``[oh0, oh0+rows)`` into ``scratch[crs][ncp]``; padding reads as 0.0.

        One function per geometry (not inlined at each block and chunk call site): for each
        channel, tap and output row, the input row segment is copied with the depthwise
        kernel's row loads (contiguous / two loads and a shuffle / gather by stride) under
        compile-time border masks; a row of the vertical padding is stored as zeros."""
        k, W, ncp = self.k, self.W, self.ncp
        module = self.b.module
        # Shared by every convolution of the module with the same geometry (channels are
        # run-time arguments): resnet50's sixteen 3x3 convolutions need seven.
        geometry = (k.H, k.W, k.OH, k.OW, k.R, k.S, k.strides, k.pads, k.dilations, W, ncp)
        cache = getattr(module, "_guard_conv_packs", None)
        if cache is None:
            cache = module._guard_conv_packs = {}  # type: ignore[attr-defined]
        if geometry in cache:
            return cache[geometry]
        fn = ir.Function(
            module,
            ir.FunctionType(ir.VoidType(), [F32P, F32P, I64, I64, I64, I64]),
            f"guard.conv_pack.{len(cache)}.{k.H}x{k.W}.{k.R}x{k.S}s{k.strides[0]}{k.strides[1]}",
        )
        cache[geometry] = fn
        fn.linkage = "internal"
        fn.attributes.add("noinline")
        fn.attributes.add("optsize")
        x, scratch, c0, cc, oh0, rows = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        sh, sw = k.strides
        dh, dw = k.dilations
        pt, pl = k.pads[0], k.pads[1]
        zero = ir.Constant(ir.VectorType(F32, W), 0.0)

        def channel(c: ir.Value, _vals: list) -> list:
            xc = fptr(b, x, imul(b, b.add(c0, c), k.H * k.W))

            def tap_row(r: ir.Value) -> None:
                # kernel rows at run time, columns unrolled (the border masks depend on s)
                for s in range(k.S):
                    row0 = fptr(
                        b,
                        scratch,
                        imul(
                            b,
                            iadd(
                                b,
                                imul(b, c, self.RS),
                                iadd(b, imul(b, r, k.S), ir.Constant(I64, s)),
                            ),
                            ncp,
                        ),
                    )

                    def out_row(ol: ir.Value, _v: list, s=s, row0=row0) -> list:
                        ih = b.add(
                            b.sub(
                                b.mul(b.add(oh0, ol), ir.Constant(I64, sh)), ir.Constant(I64, pt)
                            ),
                            imul(b, r, dh),
                        )
                        inside = b.and_(
                            b.icmp_signed(">=", ih, ir.Constant(I64, 0)),
                            b.icmp_signed("<", ih, ir.Constant(I64, k.H)),
                        )
                        dst = fptr(b, row0, imul(b, ol, k.OW))
                        xrow = fptr(b, xc, imul(b, ih, k.W), inbounds=False)
                        with b.if_else(inside) as (then, otherwise):
                            with then:
                                for ow0 in range(0, k.OW, W):
                                    lanes = min(W, k.OW - ow0)
                                    col0 = ow0 * sw + s * dw - pl
                                    valid = [
                                        lane < lanes and 0 <= col0 + lane * sw < k.W
                                        for lane in range(W)
                                    ]
                                    v = (
                                        row_load(b, k.W, xrow, col0, sw, valid)
                                        if any(valid)
                                        else zero
                                    )
                                    store_lanes(b, v, fptr(b, dst, ow0), lanes)
                            with otherwise:
                                for ow0 in range(0, k.OW, W):
                                    store_lanes(b, zero, fptr(b, dst, ow0), min(W, k.OW - ow0))
                        return []

                    for_loop_dynamic(b, rows, [], out_row)

            for_loop(b, 0, k.R, 1, tap_row)
            return []

        for_loop_dynamic(b, cc, [], channel)
        b.ret_void()
        return fn
