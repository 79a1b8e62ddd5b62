"""The blocked loop nest of one generated GEMM call: macro-blocks, k-chunks, micro-tiles
and the repacking of a run-time ``[N,K]`` B. driver.py's GemmKernel documents the
algorithm and drives it; this module reads the kernel through gemm_schedule.GemmSpec."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable

from llvmlite import ir

from guard.compiler.codegen.gemm.microkernel import ACCUMULATE, FINISH, micro_kernel
from guard.compiler.codegen.gemm.schedule import GemmSchedule, GemmSpec
from guard.compiler.codegen.irutil import (
    F32,
    F32P,
    I32,
    I64,
    Epilogue,
    add,
    elem_ptr,
    for_loop,
    lane_mask,
    masked_gather,
    mul,
    splat,
    tiles,
    vec,
    vstore,
)

REPACK_LIMIT_BYTES = 512 * 1024  # stack buffer for one repacked block of a run-time B^T


def fit_repack(s: GemmSchedule, N: int, K: int) -> GemmSchedule:
    """The schedule with its ``kc x nc`` block of a run-time [N,K] B inside the repack
    buffer: ``nc`` shrinks (in steps of ``nr``) first, then ``kc``. The cache-derived
    default and tuned schedules size ``nc`` by L2 (a 2 MiB L2 gives kc=64 x nc=4096, a
    1 MiB buffer), so a host with a big L2 needs this: another schedule, not an error."""
    kc = min(s.kc, K)
    nc = min(s.nc, -(-N // s.nr) * s.nr)
    if kc * nc * 4 <= REPACK_LIMIT_BYTES:
        return s
    nc = max(s.nr, REPACK_LIMIT_BYTES // (kc * 4) // s.nr * s.nr)
    kc = min(kc, max(1, REPACK_LIMIT_BYTES // (nc * 4)))
    return dataclasses.replace(s, nc=nc, kc=kc, unroll=min(s.unroll, kc))


class GemmEmitter:
    """Emits the blocked loop nest of one GEMM call and its memoised micro-kernels."""

    def __init__(
        self,
        kernel: GemmSpec,
        name: str,
        epilogue: Epilogue | None,
        b_packed: bool,
        epilogue_key: Hashable | None = None,
    ) -> None:
        self.k = kernel
        self.s = kernel.sched
        self.name = name
        self.epilogue = epilogue
        self.W = kernel.vector_width
        # Unpacked B: streamed row by row when stored [K,N]; an [N,K] B is gathered into a
        # packed stack buffer per (kc, nc) block (transposing while streaming would need
        # a gather per FMA).
        self.stream_b = not b_packed and not kernel.trans_b
        self.repack_b = not b_packed and kernel.trans_b
        if self.repack_b:
            self.s = fit_repack(self.s, kernel.N, kernel.K)
        self.epilogue_key = epilogue_key
        self.res: ir.Value | None = None  # this batch element's residual, laid out like C

    def emit(
        self, builder: ir.IRBuilder, a: ir.Value, b: ir.Value, bias: ir.Value, c: ir.Value
    ) -> None:
        k, s = self.k, self.s
        M, N, K = k.M, k.N, k.K
        kc = min(s.kc, K)
        chunks = -(-K // kc)
        scratch = None
        if self.repack_b:
            nc_eff = min(s.nc, -(-N // s.nr) * s.nr)
            if kc * nc_eff * 4 > REPACK_LIMIT_BYTES:
                raise ValueError(
                    f"GemmSchedule kc={kc} x nc={nc_eff} needs a {kc * nc_eff * 4} B stack buffer "
                    f"to repack a run-time [N,K] B, over the {REPACK_LIMIT_BYTES} B limit: lower kc or nc"
                )
            arr = ir.ArrayType(F32, kc * nc_eff)
            with builder.goto_entry_block():
                slot = builder.alloca(arr, name="bpack")
                slot.align = 64
            scratch = builder.bitcast(slot, F32P)

        def macro(n_start: ir.Value, n_size: int) -> None:
            def chunk(k0: ir.Value, klen: int, kind: str) -> None:
                bsrc = b
                if scratch is not None:
                    self._repack(builder, b, scratch, n_start, n_size, k0, klen)
                    bsrc = scratch

                def mblock(m_start: ir.Value, m_size: int) -> None:
                    self._macro_kernel(
                        builder,
                        a,
                        bsrc,
                        bias,
                        c,
                        n_start,
                        n_size,
                        m_start,
                        m_size,
                        k0,
                        klen,
                        kind,
                        scratch is not None,
                    )

                tiles(builder, M, s.mc, mblock)

            if chunks == 1:
                chunk(ir.Constant(I64, 0), K, "only")
                return
            chunk(ir.Constant(I64, 0), kc, "first")
            if chunks > 2:
                for_loop(builder, kc, (chunks - 1) * kc, kc, lambda k0: chunk(k0, kc, "mid"))
            chunk(ir.Constant(I64, (chunks - 1) * kc), K - (chunks - 1) * kc, "last")

        tiles(builder, N, s.nc, macro)

    def _macro_kernel(
        self, builder: ir.IRBuilder, a: ir.Value, b: ir.Value, bias: ir.Value, c: ir.Value,
        n_start: ir.Value, n_size: int, m_start: ir.Value, m_size: int, k0: ir.Value,
        klen: int, kind: str, local_b: bool,
    ) -> None:  # fmt: skip
        k, s, W = self.k, self.s, self.W
        M, N, K, nr, ldc = k.M, k.N, k.K, s.nr, k.row_stride

        def tile(n_off: ir.Value, width: int, m_off: ir.Value, rows: int) -> None:
            n0 = add(builder, n_start, n_off)
            m0 = add(builder, m_start, m_off)
            if k.trans_a:
                pa = elem_ptr(builder, a, add(builder, mul(builder, k0, M), m0))
            else:
                pa = elem_ptr(builder, a, add(builder, mul(builder, m0, K), k0))
            if local_b:  # packed scratch holds this (kc, nc) block only: [panel][k][nr]
                pb = elem_ptr(builder, b, mul(builder, n_off, klen))
            elif self.stream_b:
                pb = elem_ptr(builder, b, add(builder, mul(builder, k0, N), n0))
            else:  # packed: panel n0/nr starts at (n0/nr)*K*nr = n0*K
                pb = elem_ptr(builder, b, add(builder, mul(builder, n0, K), mul(builder, k0, nr)))
            pc = elem_ptr(builder, c, add(builder, mul(builder, m0, ldc), n0))
            pbias = bias
            if k.bias == "row":
                pbias = elem_ptr(builder, bias, n0)
            elif k.bias == "col":
                pbias = elem_ptr(builder, bias, m0)
            elif k.bias == "full":
                pbias = elem_ptr(builder, bias, add(builder, mul(builder, m0, ldc), n0))
            nvec = -(-width // W)
            ukr = micro_kernel(
                builder.module,
                rows,
                nvec,
                width - (nvec - 1) * W,
                W,
                k.bias,
                self.epilogue,
                s.unroll,
                mask_b=self.stream_b,
                epilogue_key=self.epilogue_key,
                residual=self.res is not None,
            )
            if self.res is None:
                pres = ir.Constant(F32P, None)
            else:
                pres = elem_ptr(builder, self.res, add(builder, mul(builder, m0, ldc), n0))
            lda_row, lda_k = (1, M) if k.trans_a else (K, 1)
            ldb = N if self.stream_b else nr
            flags = {"only": FINISH, "first": 0, "mid": ACCUMULATE, "last": ACCUMULATE | FINISH}[
                kind
            ]
            builder.call(
                ukr,
                [
                    pa,
                    pb,
                    pc,
                    pbias,
                    ir.Constant(I64, klen),
                    ir.Constant(I64, lda_row),
                    ir.Constant(I64, lda_k),
                    ir.Constant(I64, ldb),
                    ir.Constant(I64, ldc),
                    ir.Constant(I32, flags),
                    ir.Constant(I32, width - (nvec - 1) * W),
                    pres,
                ],
            )

        if s.loop_order == "nm":
            tiles(
                builder,
                n_size,
                nr,
                lambda n_off, w: tiles(
                    builder, m_size, s.mr, lambda m_off, r: tile(n_off, w, m_off, r)
                ),
            )
        else:
            tiles(
                builder,
                m_size,
                s.mr,
                lambda m_off, r: tiles(
                    builder, n_size, nr, lambda n_off, w: tile(n_off, w, m_off, r)
                ),
            )

    def _repack(
        self, builder: ir.IRBuilder, b: ir.Value, scratch: ir.Value, n_start: ir.Value,
        n_size: int, k0: ir.Value, klen: int,
    ) -> None:  # fmt: skip
        """Gather ``B[n_start:+n_size, k0:+klen]`` (B stored ``[N,K]``) into ``[panel][k][nr]``."""
        K, W, nr = self.k.K, self.W, self.s.nr
        lanes = ir.Constant(ir.VectorType(I64, W), [i * K for i in range(W)])

        def panel(n_off: ir.Value, width: int) -> None:
            nvec = -(-width // W)
            dst_panel = elem_ptr(builder, scratch, mul(builder, n_off, klen))
            row0 = mul(builder, add(builder, n_start, n_off), K)

            def krow(kk: ir.Value) -> None:
                base = elem_ptr(builder, b, add(builder, row0, add(builder, k0, kk)))
                dst = elem_ptr(builder, dst_panel, mul(builder, kk, nr))
                for j in range(nvec):
                    valid = min(W, width - j * W)
                    idx = builder.add(lanes, splat(builder, ir.Constant(I64, j * W * K), W))
                    v = masked_gather(builder, base, idx, lane_mask(W, valid))
                    vstore(builder, v, elem_ptr(builder, dst, j * W))
                for j in range(nvec, nr // W):  # keep the padded lanes finite
                    vstore(builder, ir.Constant(vec(W), 0.0), elem_ptr(builder, dst, j * W))

            for_loop(builder, 0, klen, 1, krow)

        tiles(builder, n_size, nr, panel)
