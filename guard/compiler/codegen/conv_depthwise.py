"""The depthwise convolution kernel (``group == C == K``) and the row loads it shares
with the Xcol packing of conv_gemm.py; the public API is conv.py's ConvKernel."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from .microkernel import (
    F32,
    I32,
    I64,
    Epilogue,
    fma,
    for_loop,
    fptr,
    iadd,
    imul,
    lane_mask,
    masked_gather,
    masked_load,
    masked_store,
    splat,
    vload,
    vstore,
)

if TYPE_CHECKING:
    from .conv import ConvKernel


def store_lanes(b: ir.IRBuilder, v: ir.Value, p: ir.Value, lanes: int) -> None:
    width = v.type.count
    if lanes < width:
        masked_store(b, v, p, lane_mask(width, lanes))
    else:
        vstore(b, v, p)


def row_load(
    b: ir.IRBuilder, row_len: int, xrow: ir.Value, col0: int, sw: int, valid: list[bool]
) -> ir.Value:
    """Lanes ``xrow[col0 + lane*sw]`` where ``valid`` (compile-time), 0.0 elsewhere.

    Stride 1: one (masked) load; stride 2: two contiguous loads and an even-lane shuffle
    (an odd lane inside the row is read and dropped, one outside is masked); other
    strides: a masked gather. ``xrow`` may point outside the buffer (a padded border)."""
    W = len(valid)
    mask = ir.Constant(ir.VectorType(ir.IntType(1), W), [int(v) for v in valid])
    p = fptr(b, xrow, col0, inbounds=False)
    if sw == 1:
        return vload(b, p, W) if all(valid) else masked_load(b, p, W, mask)
    if sw == 2:
        halves = []
        for h in range(2):
            need = [int(0 <= col0 + h * W + pos < row_len) for pos in range(W)]
            hm = ir.Constant(ir.VectorType(ir.IntType(1), W), need)
            ph = fptr(b, p, h * W, inbounds=False)
            halves.append(vload(b, ph, W) if all(need) else masked_load(b, ph, W, hm))
        return b.shuffle_vector(
            halves[0], halves[1], ir.Constant(ir.VectorType(I32, W), [2 * i for i in range(W)])
        )
    idx = ir.Constant(ir.VectorType(I32, W), [lane * sw for lane in range(W)])
    return masked_gather(b, p, idx, mask)


class DepthwiseEmitter:
    """group == C == K: per channel, rows of output vectors, each a chain of R*S FMAs."""

    def __init__(self, k: ConvKernel, b: ir.IRBuilder, epilogue: Epilogue | None) -> None:
        self.k, self.b, self.W = k, b, k.vector_width
        self.epilogue = epilogue
        self.block = k.sched.ow_block
        self.res: ir.Value | None = None  # the residual argument, laid out like y
        self.res_c: ir.Value | None = None

    def emit(self, x, w, bias, y) -> None:
        k, b, W = self.k, self.b, self.W
        sh, dh, pt = k.strides[0], k.dilations[0], k.pads[0]
        hw, P = k.H * k.W, k.OH * k.OW
        # rows whose every kernel tap is inside the image: a run-time loop; others peeled
        interior = [
            oh for oh in range(k.OH) if oh * sh - pt >= 0 and oh * sh - pt + (k.R - 1) * dh < k.H
        ]
        lo, hi = (interior[0], interior[-1] + 1) if interior else (0, 0)

        def channel(nc: ir.Value) -> None:
            c = b.urem(nc, ir.Constant(I64, k.C)) if k.N > 1 else nc
            xc = fptr(b, x, imul(b, nc, hw))
            yc = fptr(b, y, imul(b, nc, P))
            if self.res is not None:
                self.res_c = fptr(b, self.res, imul(b, nc, P))
            wc = fptr(b, w, imul(b, c, k.R * k.S))
            taps = [
                [splat(b, b.load(fptr(b, wc, r * k.S + s), typ=F32), W) for s in range(k.S)]
                for r in range(k.R)
            ]
            bv = splat(b, b.load(fptr(b, bias, c), typ=F32), W)
            for oh in range(0, lo):
                self._row(xc, yc, taps, bv, ir.Constant(I64, oh), oh)
            if hi > lo:
                for_loop(b, lo, hi, 1, lambda oh: self._row(xc, yc, taps, bv, oh, None))
            for oh in range(hi, k.OH):
                self._row(xc, yc, taps, bv, ir.Constant(I64, oh), oh)

        for_loop(b, 0, k.N * k.C, 1, channel)

    def _row(self, xc, yc, taps, bias_v, oh: ir.Value, oh_const: int | None) -> None:
        k, b, W = self.k, self.b, self.W
        sh, sw = k.strides
        dh, dw = k.dilations
        pt, pl = k.pads[0], k.pads[1]
        rows = range(k.R)
        if oh_const is not None:
            rows = [r for r in rows if 0 <= oh_const * sh - pt + r * dh < k.H]
        yrow = fptr(b, yc, imul(b, oh, k.OW))
        xrows = {
            r: fptr(
                b,
                xc,
                imul(b, iadd(b, imul(b, oh, sh), ir.Constant(I64, r * dh - pt)), k.W),
                inbounds=False,
            )
            for r in rows
        }
        for ow0 in range(0, k.OW, W):
            out_lanes = min(W, k.OW - ow0)
            acc = bias_v
            for r in rows:
                for s in range(k.S):
                    col0 = ow0 * sw + s * dw - pl
                    valid = [lane < out_lanes and 0 <= col0 + lane * sw < k.W for lane in range(W)]
                    if not any(valid):
                        continue
                    v = row_load(b, k.W, xrows[r], col0, sw, valid)
                    acc = fma(b, taps[r][s], v, acc)
            if self.res_c is not None:
                rp = fptr(b, self.res_c, iadd(b, imul(b, oh, k.OW), ir.Constant(I64, ow0)))
                r = (
                    vload(b, rp, W)
                    if out_lanes == W
                    else masked_load(b, rp, W, lane_mask(W, out_lanes))
                )
                acc = b.fadd(acc, r)
            if self.epilogue is not None:
                acc = self.epilogue(b, acc)
            dst = fptr(b, yrow, ow0)
            if out_lanes < W:
                masked_store(b, acc, dst, lane_mask(W, out_lanes))
            else:
                vstore(b, acc, dst)
