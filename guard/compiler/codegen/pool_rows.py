"""AveragePool on float32 in NCHW with vector lanes along the output row.

In NCHW the channels are not contiguous, so the pooling's lanes run along an output row,
one vector of ``V`` output columns (the class's float lanes) at a time: for each tap
(r, s) the lanes' inputs sit ``sw`` apart, one load of the span and a shuffle (a plain
load when ``sw`` is 1), as quant/pool.py does for the int8 max pool. A quantized model's
average pools run here (DequantizeLinear -> AveragePool -> QuantizeLinear stays float):
they ran one scalar an output with a branch a tap.

Bit for bit the reference's (guard.compiler.reference.nn.average_pool): each lane sums
its taps in the reference's order (r, then s) from +0.0, a tap outside the input adding
+0.0 as the reference's zero padding does (the sum is never -0.0, so adding +0.0 changes
no bit), then one division by the count; the count is the rows inside the input (or its
explicit pads, with ``count_include_pad``) times the columns inside it, exact integers
in float32 as the reference's sum of ones. Chunks of a row whose every lane and tap lies
inside it run in a loop; the border chunks are unrolled with compile-time masks.
"""

from __future__ import annotations

import llvmlite.ir as ir

from guard.compiler.codegen.irutil import F32, I1, I32, I64, loop, masked_load, splat, store_lanes


def row_chunks(
    OW: int, W: int, V: int, S: int, sw: int, dw: int, pl: int
) -> list[tuple[int, int, bool]]:
    """Runs ``(q0, q1, interior)`` of the row's chunks of ``V`` columns (an interior
    chunk's span loads start and end inside the row); the float AveragePool here and the
    byte MaxPool (quant/pool.py) walk a row by them."""
    span = (V - 1) * sw + 1
    skew = (1 << (span - 1).bit_length()) - span
    runs: list[tuple[int, int, bool]] = []
    for q in range(-(-OW // V)):
        ow0 = q * V
        first = ow0 * sw - pl - skew
        last = (ow0 + V - 1) * sw - pl + (S - 1) * dw
        inner = ow0 + V <= OW and first >= 0 and last < W
        if runs and runs[-1][2] and inner:
            runs[-1] = (runs[-1][0], q + 1, True)
        else:
            runs.append((q, q + 1, inner))
    return runs


def emit_row_average_pool(
    b: ir.IRBuilder, x: ir.Value, y: ir.Value, V: int, shape: tuple[int, int, int, int],
    out_hw: tuple[int, int], window: tuple[int, int], strides: tuple[int, int],
    dilations: tuple[int, int], pads: tuple[int, int, int, int], include: bool,
) -> None:  # fmt: skip
    """``y`` (NCHW, ``out_hw``) = the windowed average of ``x`` (NCHW ``shape``)."""
    N, C, H, W = shape
    OH, OW = out_hw
    R, S = window
    sh, sw = strides
    dh, dw = dilations
    pt, pl, pb, pr = pads
    vt = ir.VectorType(F32, V)
    zero = ir.Constant(vt, [0.0] * V)
    span = (V - 1) * sw + 1
    n_load = 1 << (span - 1).bit_length()
    skew = n_load - span
    lo_h, hi_h = (-pt, H + pb) if include else (0, H)
    lo_w, hi_w = (-pl, W + pr) if include else (0, W)

    def c64(v: int) -> ir.Constant:
        return ir.Constant(I64, v)

    def shuffled(raw: ir.Value, offs: list[int]) -> ir.Value:
        if n_load == V and offs == list(range(V)):
            return raw
        undef = ir.Constant(ir.VectorType(F32, n_load), ir.Undefined)
        return b.shuffle_vector(raw, undef, ir.Constant(ir.VectorType(I32, V), offs))

    def chunk(plane: ir.Value, yrow: ir.Value, oh: ir.Value, rows: ir.Value, ow0: int | ir.Value,
              lanes: int) -> None:  # fmt: skip
        acc: ir.Value = zero
        for r in range(R):
            ih = b.add(b.mul(oh, c64(sh)), c64(r * dh - pt))
            inside = b.and_(b.icmp_signed(">=", ih, c64(0)), b.icmp_signed("<", ih, c64(H)))
            row = b.gep(plane, [b.mul(b.select(inside, ih, c64(0)), c64(W))], source_etype=F32)
            for s in range(S):
                if isinstance(ow0, int):
                    iw = [(ow0 + ln) * sw - pl + s * dw for ln in range(V)]
                    ok = [ln < lanes and 0 <= iw[ln] < W for ln in range(V)]
                    if not any(ok):
                        continue  # every lane adds +0.0: nothing
                    mask = [0] * n_load
                    for ln in range(V):
                        mask[ln * sw] = int(ok[ln])
                    p = b.gep(row, [c64(iw[0])], source_etype=F32, inbounds=False)
                    m = ir.Constant(ir.VectorType(I1, n_load), mask)
                    v = shuffled(masked_load(b, p, n_load, m), [ln * sw for ln in range(V)])
                else:  # interior: the span's load ends at the last float used
                    start = b.add(b.mul(ow0, c64(sw)), c64(s * dw - pl - skew))
                    raw = b.load(b.gep(row, [start], source_etype=F32),
                                 typ=ir.VectorType(F32, n_load), align=4)  # fmt: skip
                    v = shuffled(raw, [skew + ln * sw for ln in range(V)])
                acc = b.fadd(acc, b.select(inside, v, zero))
        if isinstance(ow0, int):
            cols = [
                sum(lo_w <= (ow0 + ln) * sw - pl + s * dw < hi_w for s in range(S))
                if ln < lanes else 1
                for ln in range(V)
            ]  # fmt: skip
        else:
            cols = [S] * V
        count = b.fmul(b.sitofp(splat(b, rows, V), vt), ir.Constant(vt, [float(c) for c in cols]))
        store_lanes(b, b.fdiv(acc, count), yrow, ow0, lanes)

    with loop(b, 0, N * C, 1, "nc") as nc, loop(b, 0, OH, 1, "oh") as oh:
        plane = b.gep(x, [b.mul(nc, c64(H * W))], source_etype=F32)
        yrow = b.gep(y, [b.add(b.mul(nc, c64(OH * OW)), b.mul(oh, c64(OW)))], source_etype=F32)
        rows: ir.Value = c64(0)
        for r in range(R):  # the window's rows inside the input (or its explicit pads)
            ih = b.add(b.mul(oh, c64(sh)), c64(r * dh - pt))
            ok = b.and_(b.icmp_signed(">=", ih, c64(lo_h)), b.icmp_signed("<", ih, c64(hi_h)))
            rows = b.add(rows, b.zext(ok, I64))
        rows32 = b.trunc(rows, I32)
        for q0, q1, inner in row_chunks(OW, W, V, S, sw, dw, pl):
            if inner and q1 - q0 > 1:
                with loop(b, q0 * V, q1 * V, V, "ow") as ow0:
                    chunk(plane, yrow, oh, rows32, ow0, V)
            else:
                for q in range(q0, q1):
                    chunk(plane, yrow, oh, rows32, q * V, min(V, OW - q * V))
