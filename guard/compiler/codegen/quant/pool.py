"""MaxPool on u8/s8 in NCHW with vector lanes along the output columns.

A quantized model's max pools (the maximum of quantized values is the quantized
maximum) are NCHW, where channels are not contiguous: lanes run along an output row
instead, :data:`LANES` output columns a vector. For each tap (r, s) the vector's input
bytes sit ``sw`` apart: one load of the span and a shuffle (a plain load when ``sw`` is
1). Columns are cut into chunks at compile time; a chunk whose every lane is an output
column and whose every tap reads inside the row (and whose load starts inside it: the
span is loaded so that it ends at the last byte used) runs in a loop, the others are
unrolled with their masks as constants (a masked-off lane reads the type's lowest value,
so it never wins). A row outside the image takes the lowest value for the whole vector.
The result equals the scalar maximum of every tap inside the input, lane by lane.
"""

from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen.irutil import I1, I8, I32, I64, PTR, declare, for_loop, loop
from guard.compiler.codegen.pool_rows import row_chunks

LANES = 16  # output columns a vector: one 128-bit register of bytes


def _masked_load(b: ir.IRBuilder, p: ir.Value, ty: ir.VectorType, mask: list[int],
                 passthru: ir.Value) -> ir.Value:  # fmt: skip
    mt = ir.VectorType(I1, ty.count)
    fn = declare(b.module, f"llvm.masked.load.v{ty.count}i8.p0", ty, [PTR, I32, mt, ty])
    return b.call(fn, [p, ir.Constant(I32, 1), ir.Constant(mt, mask), passthru])


def chunks(OW: int, W: int, S: int, sw: int, dw: int, pl: int) -> list[tuple[int, int, bool]]:
    """Runs ``(q0, q1, interior)`` of the row's chunks of :data:`LANES` columns."""
    return row_chunks(OW, W, LANES, S, sw, dw, pl)


def emit_int8_max_pool(
    b: ir.IRBuilder, x: ir.Value, y: ir.Value, dt: np.dtype, shape: tuple[int, int, int, int],
    out_hw: tuple[int, int], window: tuple[int, int], strides: tuple[int, int],
    dilations: tuple[int, int], pads: tuple[int, int],
) -> None:  # fmt: skip
    """``y`` (NCHW, ``out_hw``) = the windowed maximum of ``x`` (NCHW ``shape``)."""
    N, C, H, W = shape
    OH, OW = out_hw
    R, S = window
    sh, sw = strides
    dh, dw = dilations
    pt, pl = pads
    V = LANES
    bt = ir.VectorType(I8, V)
    lowest = ir.Constant(bt, [int(np.iinfo(dt).min)] * V)
    greater = b.icmp_signed if dt.kind == "i" else b.icmp_unsigned
    span = (V - 1) * sw + 1
    n_load = 1 << (span - 1).bit_length()
    lt = ir.VectorType(I8, n_load)
    skew = n_load - span  # the span loaded to end at its last byte used
    runs = chunks(OW, W, S, sw, dw, pl)

    def c64(v: int) -> ir.Constant:
        return ir.Constant(I64, v)

    def row_max(plane: ir.Value, oh: ir.Value, ow0: int | ir.Value, lanes: int) -> ir.Value:
        acc: ir.Value = lowest
        for r in range(R):
            ih = b.add(b.mul(oh, c64(sh)), c64(r * dh - pt))
            inside = b.and_(b.icmp_signed(">=", ih, c64(0)), b.icmp_signed("<", ih, c64(H)))
            row = b.gep(plane, [b.mul(b.select(inside, ih, c64(0)), c64(W))], source_etype=I8)
            for s in range(S):
                if isinstance(ow0, int):
                    iw = [(ow0 + ln) * sw - pl + s * dw for ln in range(V)]
                    ok = [ln < lanes and 0 <= iw[ln] < W for ln in range(V)]
                    if not any(ok):
                        continue
                    mask = [0] * n_load
                    for ln in range(V):
                        mask[ln * sw] = int(ok[ln])
                    p = b.gep(row, [c64(iw[0])], source_etype=I8)
                    if all(ok) and sw == 1 and n_load == V:
                        raw = b.load(p, typ=bt, align=1)
                    else:
                        raw = _masked_load(b, p, lt, mask, ir.Constant(lt, [int(np.iinfo(dt).min)] * n_load))  # fmt: skip
                    offs = [ln * sw for ln in range(V)]
                else:  # interior: every lane inside, the load ends at the last byte used
                    start = b.add(b.mul(ow0, c64(sw)), c64(s * dw - pl - skew))
                    raw = b.load(b.gep(row, [start], source_etype=I8), typ=lt, align=1)
                    offs = [skew + ln * sw for ln in range(V)]
                if n_load != V or sw != 1 or offs[0] != 0:
                    idx = ir.Constant(ir.VectorType(I32, V), offs)
                    raw = b.shuffle_vector(raw, ir.Constant(lt, ir.Undefined), idx)
                v = b.select(inside, raw, lowest)
                acc = b.select(greater(">", v, acc), v, acc)
        return acc

    def store(v: ir.Value, p: ir.Value, lanes: int) -> None:
        if lanes == V:
            b.store(v, b.bitcast(p, ir.PointerType(bt)), align=1)
            return
        for ln in range(lanes):  # a short last chunk: its lanes one by one
            q = b.gep(p, [c64(ln)], source_etype=I8)
            b.store(b.extract_element(v, ir.Constant(I32, ln)), q)

    with loop(b, 0, N * C, 1, "nc") as nc, loop(b, 0, OH, 1, "oh") as oh:
        plane = b.gep(x, [b.mul(nc, c64(H * W))], source_etype=I8)
        yrow = b.gep(y, [b.add(b.mul(nc, c64(OH * OW)), b.mul(oh, c64(OW)))], source_etype=I8)
        for q0, q1, inner in runs:
            if inner and q1 - q0 > 1:

                def chunk(q: ir.Value) -> None:
                    ow0 = b.mul(q, c64(V))
                    store(row_max(plane, oh, ow0, V), b.gep(yrow, [ow0], source_etype=I8), V)

                for_loop(b, q0, q1, 1, chunk)
            else:
                for q in range(q0, q1):
                    lanes = min(V, OW - q * V)
                    v = row_max(plane, oh, q * V, lanes)
                    store(v, b.gep(yrow, [c64(q * V)], source_etype=I8), lanes)
