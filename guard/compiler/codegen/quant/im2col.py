"""The run-time im2col of the int8 convolution (quant/conv.py): one panel of ``nr`` output
pixels packed as ``[KG][nr]`` words, four input bytes (four channels, or four taps of a
depthwise kernel) of one pixel a word, in the class's u domain (u8, or the s8 input
flipped by 0x80); taps outside the image read the zero point ``alpha``."""

from __future__ import annotations

import llvmlite.ir as ir

from guard.compiler.codegen.irutil import I8, I32, I64, for_loop_carried, splat
from guard.compiler.codegen.quant.dot import DotClass, iconst
from guard.compiler.codegen.quant.geometry import QConvGeometry
from guard.compiler.codegen.quant.ukr import gep, ld, st, typed_masked_load


def _bytes(n: int) -> ir.VectorType:
    return ir.VectorType(I8, n)


def pack_panel(
    b: ir.IRBuilder, geo: QConvGeometry, dot: DotClass, xg: ir.Value, scratch: ir.Value,
    usum: ir.Value, slot: ir.Value, oh: ir.Value | None, pix: ir.Value | None,
    ow0: int | ir.Value, lanes: int, nr: int, flip: bool, alpha_byte: ir.Value, beta: bool,
) -> None:  # fmt: skip
    """im2col of one panel into ``scratch[slot]`` (``[KG][nr]`` words) and, with ``beta``,
    the panel's per-pixel sums of u into ``usum[slot]``. ``ow0``, the panel's first output
    column, is a run-time value only for an interior panel (:func:`interior_panels`)."""
    bt = _bytes(nr)
    alpha_v = splat(b, alpha_byte, nr)
    flip_v = ir.Constant(bt, [0x80] * nr)
    HW = geo.H * geo.W
    dst0 = gep(b, scratch, b.mul(slot, ir.Constant(I64, geo.KG * nr)), I32)
    ut = ir.VectorType(I32, nr)

    def tap_vector(c: ir.Value, r: int, s: int) -> ir.Value:
        """The ``nr`` input bytes of channel ``c`` (group-relative) at tap (r, s)."""
        cbase = gep(b, xg, b.mul(c, ir.Constant(I64, HW)), I8)
        if oh is None:  # flat: pixels pix .. pix + lanes of channel c
            p = gep(b, cbase, pix, I8)
            if lanes == nr:
                v = ld(b, p, bt, 1)
            else:
                m = ir.Constant(
                    ir.VectorType(ir.IntType(1), nr), [int(i < lanes) for i in range(nr)]
                )
                v = typed_masked_load(b, p, bt, m, ir.Constant(bt, [0] * nr))
            return b.xor(v, flip_v) if flip else v
        ih = b.add(b.mul(oh, ir.Constant(I64, geo.sh)), ir.Constant(I64, r * geo.dh - geo.pt))
        inside = b.and_(
            b.icmp_signed(">=", ih, ir.Constant(I64, 0)),
            b.icmp_signed("<", ih, ir.Constant(I64, geo.H)),
        )
        ih_safe = b.select(inside, ih, ir.Constant(I64, 0))
        row = gep(b, cbase, b.mul(ih_safe, ir.Constant(I64, geo.W)), I8)
        if isinstance(ow0, int):
            iw = [(ow0 + ln) * geo.sw - geo.pl + s * geo.dw for ln in range(nr)]
            ok = [ln < lanes and 0 <= iw[ln] < geo.W for ln in range(nr)]
            if not any(ok):
                return alpha_v
            start: ir.Value = ir.Constant(I64, iw[0])
        else:  # interior: every lane inside the row
            ok = [True] * nr
            start = b.add(b.mul(ow0, ir.Constant(I64, geo.sw)),
                          ir.Constant(I64, s * geo.dw - geo.pl))  # fmt: skip
        span = (nr - 1) * geo.sw + 1
        n_load = 1 << (span - 1).bit_length()
        lt = _bytes(n_load)
        mask = [0] * n_load
        for ln in range(nr):
            if ok[ln]:
                mask[ln * geo.sw] = 1
        p = b.gep(row, [start], source_etype=I8, inbounds=False)
        if all(mask[ln * geo.sw] for ln in range(nr)) and geo.sw == 1 and n_load == nr:
            raw = ld(b, p, lt, 1)
        else:
            mt = ir.Constant(ir.VectorType(ir.IntType(1), n_load), mask)
            raw = typed_masked_load(b, p, lt, mt, ir.Constant(lt, [0] * n_load))
        if geo.sw != 1 or n_load != nr:
            idx = ir.Constant(ir.VectorType(I32, nr), [ln * geo.sw for ln in range(nr)])
            raw = b.shuffle_vector(raw, ir.Constant(lt, ir.Undefined), idx)
        v = b.xor(raw, flip_v) if flip else raw
        okv = ir.Constant(ir.VectorType(ir.IntType(1), nr), [int(o) for o in ok])
        v = b.select(okv, v, alpha_v) if not all(ok) else v
        return b.select(inside, v, alpha_v)

    def interleave(vs: list[ir.Value]) -> ir.Value:
        it = ir.VectorType(I32, 2 * nr)
        pair = [j for ln in range(nr) for j in (ln, nr + ln)]
        ab = b.shuffle_vector(vs[0], vs[1], ir.Constant(it, pair))
        cd = b.shuffle_vector(vs[2], vs[3], ir.Constant(it, pair))
        quad = [
            j
            for ln in range(nr)
            for j in (2 * ln, 2 * ln + 1, 2 * nr + 2 * ln, 2 * nr + 2 * ln + 1)
        ]
        return b.shuffle_vector(ab, cd, ir.Constant(ir.VectorType(I32, 4 * nr), quad))

    full4 = geo.Cg // 4
    part = geo.Cg % 4

    def extend(v: ir.Value) -> ir.Value:
        return b.sext(v, ut) if dot.u_signed else b.zext(v, ut)

    def group_of_four(c4: ir.Value, valid: int, sums: ir.Value | None) -> ir.Value | None:
        for r in range(geo.R):
            for s in range(geo.S):
                vs = []
                for t in range(4):
                    if t < valid:
                        c = b.add(b.mul(c4, ir.Constant(I64, 4)), ir.Constant(I64, t))
                        vs.append(tap_vector(c, r, s))
                    else:
                        vs.append(alpha_v)
                kg = b.add(ir.Constant(I64, (r * geo.S + s) * (geo.Cp // 4)), c4)
                dst = gep(b, dst0, b.mul(kg, ir.Constant(I64, nr)), I32)
                st(b, interleave(vs), dst, 4)
                if sums is not None:
                    for v in vs:
                        sums = b.add(sums, extend(v))
        return sums

    sums0 = iconst(nr, 0) if beta else None
    if geo.taps_grouped:
        sums = sums0
        taps = geo.R * geo.S
        zero = ir.Constant(I64, 0)
        for kg in range(geo.KG):
            vs = [tap_vector(zero, *divmod(e, geo.S)) if e < taps else alpha_v
                  for e in range(4 * kg, 4 * kg + 4)]  # fmt: skip
            st(b, interleave(vs), gep(b, dst0, kg * nr, I32), 4)
            if sums is not None:
                for v in vs:
                    sums = b.add(sums, extend(v))
        if sums is not None:
            st(b, sums, gep(b, usum, b.mul(slot, ir.Constant(I64, nr)), I32), 4)
        return
    if full4:
        init = [sums0] if sums0 is not None else []
        res = for_loop_carried(
            b, 0, full4, 1, init,
            lambda c4, st: [x for x in [group_of_four(c4, 4, st[0] if st else None)] if x is not None],
        )  # fmt: skip
        sums = res[0] if res else None
    else:
        sums = sums0
    if part:
        sums = group_of_four(ir.Constant(I64, full4), part, sums)
    if sums is not None:
        st(b, sums, gep(b, usum, b.mul(slot, ir.Constant(I64, nr)), I32), 4)
