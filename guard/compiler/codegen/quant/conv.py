"""The int8 convolution (QLinearConv, ConvInteger) as an integer GEMM over an im2col
packed block by block on the stack, in NCHW.

``Y[c, p] = sum_k W[c, k] * X[k, p]`` per group: output channels ``c`` are the rows of the
micro-kernel (quant/ukr.py, role ``"conv"``: the weights, packed at build time as
``[K][R][S][Cp]`` groups of four input channels, are the broadcast operand), output
pixels ``p`` its lanes. A block of pixel panels (``nr = nv * W`` pixels each) is packed
at run time into ``[panel][KG][nr]`` words: for each group of four input channels at one
kernel tap, four vectors of ``nr`` pixels are loaded (a plain or masked load when the
stride is 1, a strided span and a shuffle otherwise; taps outside the image read the
zero point ``alpha``) and interleaved into one store. Two pixel orders:

- ``flat``: 1x1, stride 1, no padding: the image itself is ``X`` (``[C][H*W]``), panels
  run over the flattened pixels;
- ``rows``: anything else: each output row is cut into panels (``ceil(OW / nr)`` at
  compile-time columns, so every border mask is a constant), rows in a run-time loop.

The output is written per row tile and panel, in NCHW, the requantisation fused (the
kernel of one task of a row band writes rows ``[r0, r1)``: attribute ``rows``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import llvmlite.ir as ir

from guard.compiler.codegen.irutil import I8, I32, I64, PTR, for_loop, splat, tiles
from guard.compiler.codegen.quant.dot import DotClass, iconst
from guard.compiler.codegen.quant.ukr import gep, ld, micro_kernel, st, typed_masked_load

SCRATCH_BYTES = 192 * 1024  # one block of packed pixels on the stack


@dataclass(frozen=True)
class QConvGeometry:
    N: int
    C: int
    H: int
    W: int
    K: int
    Cg: int
    R: int
    S: int
    g: int
    sh: int
    sw: int
    dh: int
    dw: int
    pt: int
    pl: int
    OH: int
    OW: int
    r0: int
    r1: int

    @classmethod
    def of(
        cls, attrs: Mapping[str, Any], xshape: Sequence[int], wshape: Sequence[int]
    ) -> QConvGeometry:
        n, c, h, w = (int(d) for d in xshape)
        k, cg, r, s = (int(d) for d in wshape)
        sh, sw = (int(v) for v in attrs["strides"])
        dh, dw = (int(v) for v in attrs["dilations"])
        pt, pl, pb, pr = (int(v) for v in attrs["pads"])
        oh = (h + pt + pb - dh * (r - 1) - 1) // sh + 1
        ow = (w + pl + pr - dw * (s - 1) - 1) // sw + 1
        r0, r1 = attrs.get("rows") or (0, oh)
        return cls(n, c, h, w, k, cg, r, s, int(attrs["group"]), sh, sw, dh, dw, pt, pl, oh,
                   ow, int(r0), int(r1))  # fmt: skip

    @property
    def Kg(self) -> int:
        return self.K // self.g

    @property
    def Cp(self) -> int:
        return -(-self.Cg // 4) * 4

    @property
    def taps_grouped(self) -> bool:
        """One input channel per group (depthwise): the groups of four run over the kernel
        taps, not over channels (a 3 x 3 depthwise kernel is 3 groups, not 9 x 4 bytes)."""
        return self.Cg == 1

    @property
    def KG(self) -> int:
        if self.taps_grouped:
            return -(-self.R * self.S // 4)
        return self.R * self.S * self.Cp // 4

    @property
    def Kp(self) -> int:
        return 4 * self.KG

    @property
    def flat(self) -> bool:
        return (self.R, self.S, self.sh, self.sw, self.pt, self.pl) == (1, 1, 1, 1, 0, 0) and (
            self.OH,
            self.OW,
        ) == (self.H, self.W)

    @property
    def macs(self) -> int:
        return self.N * self.K * (self.r1 - self.r0) * self.OW * self.Cg * self.R * self.S


def conv_tile(geo: QConvGeometry, width: int, registers: int) -> tuple[int, int]:
    """(rows, vectors) of the micro-tile: 12 x 2 of 32 registers (6 x 1 of 16); one
    vector when an output row is no wider than one (a row-mode panel would be half empty)."""
    wide = geo.OH * geo.OW if geo.flat else geo.OW
    nv = 2 if registers >= 32 and wide > width else 1
    rows = 12 if registers >= 32 else 6
    return min(rows, geo.Kg), nv


def emit_conv(
    b: ir.IRBuilder, geo: QConvGeometry, dot: DotClass, registers: int, x: ir.Value,
    packed: ir.Value, y: ir.Value, out: str, facts: Mapping[str, Any], x_signed: bool,
    alpha_rt: ir.Value | None, portable_round: bool,
) -> None:  # fmt: skip
    """The whole convolution (every image, group and output row of ``geo.rows``)."""
    W = dot.width
    mr, nv = conv_tile(geo, W, registers)
    nr = nv * W
    KG, sw_words = geo.KG, dot.s_words
    beta = bool(facts["q_beta"])
    const_alpha = facts["q_alpha"]
    alpha = alpha_rt if alpha_rt is not None else ir.Constant(I32, int(const_alpha))
    # packed block offsets (int32 words)
    w_words = geo.K * KG * sw_words
    pk0 = gep(b, packed, w_words, I32)
    pk1 = gep(b, packed, w_words + geo.K, I32)
    pbeta = gep(b, packed, w_words + 2 * geo.K, I32)
    pmult = gep(b, packed, w_words + 3 * geo.K, I32)
    panel_bytes = geo.Kp * nr + (4 * nr if beta else 0)
    rows_t = geo.r1 - geo.r0
    if geo.flat:
        total = rows_t * geo.OW
        per_block = max(1, min(-(-total // nr), SCRATCH_BYTES // panel_bytes))
        ppr = 0
    else:
        ppr = -(-geo.OW // nr)
        rb = max(1, min(rows_t, SCRATCH_BYTES // (panel_bytes * ppr)))
        per_block = rb * ppr
    with b.goto_entry_block():
        vslot = b.alloca(ir.ArrayType(I32, per_block * KG * nr), name="im2col")
        vslot.align = 64
        uslot = b.alloca(ir.ArrayType(I32, per_block * nr), name="usum")
        uslot.align = 64
    scratch = b.bitcast(vslot, PTR)
    usum = b.bitcast(uslot, PTR)
    flip = x_signed != dot.u_signed  # xor 0x80 into the class's u domain
    alpha_byte = b.trunc(alpha, I8)
    P = geo.OH * geo.OW
    esize = 4 if out == "i32" else 1
    lo = ir.Constant(I32, int(facts["q_lo"]))
    hi = ir.Constant(I32, int(facts["q_hi"]))
    zy = ir.Constant(I32, int(facts["q_zy"]))
    ldx = KG * sw_words

    def image_group(n: ir.Value, gi: ir.Value) -> None:
        xg = gep(b, x, b.add(b.mul(n, ir.Constant(I64, geo.C * geo.H * geo.W)),
                             b.mul(gi, ir.Constant(I64, geo.Cg * geo.H * geo.W))), I8)  # fmt: skip
        yg = gep(b, y, b.mul(b.add(b.mul(n, ir.Constant(I64, geo.K)), b.mul(gi, ir.Constant(I64, geo.Kg))),
                             ir.Constant(I64, P * esize)), I8)  # fmt: skip

        def compute(each_panel: Any) -> None:
            """Row tiles x the block's panels; ``each_panel(f)`` emits the loops that call
            ``f(scratch slot, output pixel offset, lanes)`` for every panel of the block."""

            def row_tile(m0: ir.Value, rows: int) -> None:
                ch = b.add(b.mul(gi, ir.Constant(I64, geo.Kg)), m0)
                xw = gep(b, packed, b.mul(ch, ir.Constant(I64, ldx)), I32)

                def call(slot: ir.Value, pix: ir.Value, lanes: int) -> None:
                    nv_here = -(-lanes // W)
                    ukr = micro_kernel(b.module, dot, rows, nv_here, lanes % W != 0, "conv", out,
                                       const_alpha is None, beta, portable_round, nr)  # fmt: skip
                    c = gep(b, yg, b.mul(b.add(b.mul(m0, ir.Constant(I64, P)), pix), ir.Constant(I64, esize)), I8)  # fmt: skip
                    b.call(ukr, [
                        xw, ir.Constant(I64, ldx),
                        gep(b, scratch, b.mul(slot, ir.Constant(I64, KG * nr)), I32),
                        ir.Constant(I64, KG), c, ir.Constant(I64, P),
                        gep(b, pk0, ch, I32), gep(b, pk1, ch, I32), gep(b, pbeta, ch, I32),
                        gep(b, pmult, ch, I32), gep(b, usum, b.mul(slot, ir.Constant(I64, nr)), I32),
                        alpha, zy, lo, hi, ir.Constant(I32, lanes - (nv_here - 1) * W),
                    ])  # fmt: skip

                each_panel(call)

            tiles(b, geo.Kg, mr, row_tile)

        def pack(slot: ir.Value, oh: ir.Value | None, pix: ir.Value | None, ow0: int, lanes: int) -> None:  # fmt: skip
            _pack_panel(b, geo, dot, xg, scratch, usum, slot, oh, pix, ow0, lanes, nr, flip,
                        alpha_byte, beta)  # fmt: skip

        if geo.flat:

            def block(off: ir.Value, size: int) -> None:
                p0 = b.add(ir.Constant(I64, geo.r0 * geo.OW), off)
                full, rest = divmod(size, nr)

                def each_panel(f: Any) -> None:
                    for_loop(b, 0, full, 1, lambda q: f(q, b.add(p0, b.mul(q, ir.Constant(I64, nr))), nr))  # fmt: skip
                    if rest:
                        f(ir.Constant(I64, full), b.add(p0, ir.Constant(I64, full * nr)), rest)

                each_panel(lambda slot, pix, lanes: pack(slot, None, pix, 0, lanes))
                compute(each_panel)

            tiles(b, total, per_block * nr, block)
        else:

            def row_block(off: ir.Value, nrows: int) -> None:
                def each_panel(f: Any) -> None:
                    def one_row(rr: ir.Value) -> None:
                        oh = b.add(b.add(ir.Constant(I64, geo.r0), off), rr)
                        for q in range(ppr):
                            slot = b.add(b.mul(rr, ir.Constant(I64, ppr)), ir.Constant(I64, q))
                            pix = b.add(
                                b.mul(oh, ir.Constant(I64, geo.OW)), ir.Constant(I64, q * nr)
                            )
                            f(slot, pix, min(nr, geo.OW - q * nr), oh, q * nr)

                    for_loop(b, 0, nrows, 1, one_row)

                each_panel(lambda slot, pix, lanes, oh, ow0: pack(slot, oh, None, ow0, lanes))
                compute(lambda f: each_panel(lambda slot, pix, lanes, oh, ow0: f(slot, pix, lanes)))

            tiles(b, rows_t, per_block // ppr, row_block)

    def image(n: ir.Value) -> None:
        for_loop(b, 0, geo.g, 1, lambda gi: image_group(n, gi))  # groups: a run-time loop

    for_loop(b, 0, geo.N, 1, image)


def _bytes(n: int) -> ir.VectorType:
    return ir.VectorType(I8, n)


def _pack_panel(
    b: ir.IRBuilder, geo: QConvGeometry, dot: DotClass, xg: ir.Value, scratch: ir.Value,
    usum: ir.Value, slot: ir.Value, oh: ir.Value | None, pix: ir.Value | None, ow0: int,
    lanes: int, nr: int, flip: bool, alpha_byte: ir.Value, beta: bool,
) -> None:  # fmt: skip
    """im2col of one panel into ``scratch[slot]`` (``[KG][nr]`` words) and, with ``beta``,
    the panel's per-pixel sums of u into ``usum[slot]``."""
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
        iw = [(ow0 + ln) * geo.sw - geo.pl + s * geo.dw for ln in range(nr)]
        ok = [ln < lanes and 0 <= iw[ln] < geo.W for ln in range(nr)]
        if not any(ok):
            return alpha_v
        start = iw[0]
        span = (nr - 1) * geo.sw + 1
        n_load = 1 << (span - 1).bit_length()
        lt = _bytes(n_load)
        mask = [0] * n_load
        for ln in range(nr):
            if ok[ln]:
                mask[ln * geo.sw] = 1
        p = b.gep(row, [ir.Constant(I64, start)], source_etype=I8, inbounds=False)
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
        from guard.compiler.codegen.irutil import for_loop_carried

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
