"""The int8 convolution (QLinearConv, ConvInteger) as an integer GEMM over an im2col
packed block by block on the stack, in NCHW.

``Y[c, p] = sum_k W[c, k] * X[k, p]`` per group: output channels ``c`` are the rows of the
micro-kernel (quant/ukr.py, role ``"conv"``: the weights, packed at build time as
``[K][R][S][Cp]`` groups of four input channels, are the broadcast operand), output
pixels ``p`` its lanes. A block of pixel panels (``nr = nv * W`` pixels each) is packed
at run time into ``[panel][KG][nr]`` words: for each group of four input channels at one
kernel tap, four vectors of ``nr`` pixels are loaded (a plain or masked load when the
stride is 1, a strided span and a shuffle otherwise; taps outside the image read the
zero point ``alpha``) and interleaved into one store (quant/im2col.py). Two pixel orders:

- ``flat``: 1x1, stride 1, no padding: the image itself is ``X`` (``[C][H*W]``), panels
  run over the flattened pixels;
- ``rows``: anything else: each output row is cut into panels (``ceil(OW / nr)`` at
  compile-time columns, so every border mask is a constant), rows in a run-time loop.

The output is written per row tile and panel, in NCHW, the requantisation fused (the
kernel of one task of a row band writes rows ``[r0, r1)``: attribute ``rows``); a
FusedConvInteger's chain runs on the tile the same way (quant/epilogue.py).

Code size: in ``rows`` mode the panels of a row whose taps all fall inside the image
(every one but a few at the borders) share one im2col in a run-time loop, and the whole
convolution is one body over a run-time row range, called by every task of a row-band
split and by every layer of the same geometry (the layer's zero points and output range
are arguments). Unrolled per panel and copied per task, QDQ Inception-v2's 7x7 stem alone
was 630,000 LLVM instructions in the AVX2 build (8-pixel panels, 14 a row, 8 tasks).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import llvmlite.ir as ir

from guard.compiler.codegen.irutil import (
    I8,
    I32,
    I64,
    PTR,
    for_loop,
    for_loop_dynamic,
    tiles,
)
from guard.compiler.codegen.quant.dot import DotClass
from guard.compiler.codegen.quant.epilogue import constant_inputs
from guard.compiler.codegen.quant.geometry import QConvGeometry
from guard.compiler.codegen.quant.im2col import pack_panel
from guard.compiler.codegen.quant.ukr import gep, micro_kernel

SCRATCH_BYTES = 192 * 1024  # one block of packed pixels on the stack


def conv_tile(geo: QConvGeometry, width: int, registers: int) -> tuple[int, int]:
    """(rows, vectors) of the micro-tile: 12 x 2 of 32 registers (6 x 1 of 16); one
    vector when an output row is no wider than one (a row-mode panel would be half empty)."""
    wide = geo.OH * geo.OW if geo.flat else geo.OW
    nv = 2 if registers >= 32 and wide > width else 1
    rows = 12 if registers >= 32 else 6
    return min(rows, geo.Kg), nv


@dataclass(frozen=True)
class ConvSpec:
    """What a convolution body specialises on besides its geometry; the layer's
    constants (alpha, the output's zero point and range) are arguments."""

    dot: DotClass
    registers: int
    out: str
    x_signed: bool
    runtime_alpha: bool
    beta: bool
    portable_round: bool
    epilogue: str = ""  # a FusedConvInteger's chain (quant/epilogue.py), "" for none


def emit_conv(
    b: ir.IRBuilder, geo: QConvGeometry, dot: DotClass, registers: int, x: ir.Value,
    packed: ir.Value, y: ir.Value, out: str, facts: Mapping[str, Any], x_signed: bool,
    alpha_rt: ir.Value | None, portable_round: bool, epilogue: str = "",
) -> None:  # fmt: skip
    """The whole convolution (every image, group and output row of ``geo.rows``).

    A row-mode convolution is a call of one shared body over a run-time row range
    (:func:`_row_conv`): the tasks of a row-band split, and layers of one geometry, call
    the same code instead of each carrying a copy of it."""
    spec = ConvSpec(dot, registers, out, x_signed, facts["q_alpha"] is None,
                    bool(facts["q_beta"]), portable_round, epilogue)  # fmt: skip
    alpha = alpha_rt if alpha_rt is not None else ir.Constant(I32, int(facts["q_alpha"]))
    consts = [alpha] + [ir.Constant(I32, int(facts[k])) for k in ("q_zy", "q_lo", "q_hi")]
    if geo.flat:
        _emit_body(b, geo, spec, x, packed, y, consts, geo.r0, geo.r1)
        return
    fn = _row_conv(b.module, dataclasses.replace(geo, r0=0, r1=geo.OH), spec)
    b.call(fn, [x, packed, y, *consts, ir.Constant(I64, geo.r0), ir.Constant(I64, geo.r1)])


def _row_conv(module: ir.Module, geo: QConvGeometry, spec: ConvSpec) -> ir.Function:
    """``void body(ptr x, ptr packed, ptr y, i32 alpha, i32 zy, i32 lo, i32 hi, i64 r0,
    i64 r1)``: output rows ``[r0, r1)`` of a row-mode convolution, declared once per
    module and geometry."""
    cache = module.__dict__.setdefault("_guard_int8_convs", {})
    key = (geo, spec)
    if key in cache:
        return cache[key]
    digest = hashlib.sha256(repr(key).encode()).hexdigest()[:10]
    name = (f"guard.qconv.{spec.dot.name}.{geo.R}x{geo.S}s{geo.sh}x{geo.sw}.c{geo.C}k{geo.K}"
            f"g{geo.g}.{geo.H}x{geo.W}.{digest}")  # fmt: skip
    args = [PTR, PTR, PTR, I32, I32, I32, I32, I64, I64]
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), args), name)
    cache[key] = fn
    fn.linkage = "internal"
    fn.attributes.add("noinline")  # one copy for every caller
    fn.attributes.add("nounwind")
    for a, nm in zip(fn.args, ("x", "packed", "y", "alpha", "zy", "lo", "hi", "r0", "r1"),
                     strict=True):  # fmt: skip
        a.name = nm
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    x, packed, y, alpha, zy, lo, hi, r0, r1 = fn.args
    _emit_body(b, geo, spec, x, packed, y, [alpha, zy, lo, hi], r0, r1)
    b.ret_void()
    return fn


def interior_panels(geo: QConvGeometry, nr: int) -> list[bool]:
    """Per panel of an output row: whether every lane is an output column and every tap
    of it reads inside the row (no mask, no zero point: one code for all such panels)."""
    out = []
    for q in range((geo.OW + nr - 1) // nr):
        ow0 = q * nr
        lo = ow0 * geo.sw - geo.pl
        hi = (ow0 + nr - 1) * geo.sw - geo.pl + (geo.S - 1) * geo.dw
        out.append(ow0 + nr <= geo.OW and lo >= 0 and hi < geo.W)
    return out


def _emit_body(
    b: ir.IRBuilder, geo: QConvGeometry, spec: ConvSpec, x: ir.Value, packed: ir.Value,
    y: ir.Value, consts: list[ir.Value], r0: int | ir.Value, r1: int | ir.Value,
) -> None:  # fmt: skip
    """Every image and group, output rows ``[r0, r1)``: compile-time in flat mode, run
    time in row mode."""
    dot = spec.dot
    W = dot.width
    mr, nv = conv_tile(geo, W, spec.registers)
    nr = nv * W
    KG, sw_words = geo.KG, dot.s_words
    beta = spec.beta
    alpha, zy, lo, hi = consts
    # packed block offsets (int32 words)
    w_words = geo.K * KG * sw_words
    pk0 = gep(b, packed, w_words, I32)
    pk1 = gep(b, packed, w_words + geo.K, I32)
    pbeta = gep(b, packed, w_words + 2 * geo.K, I32)
    pmult = gep(b, packed, w_words + 3 * geo.K, I32)
    n_const = len(constant_inputs(json.loads(spec.epilogue)["program"])) if spec.epilogue else 0
    pchain = gep(b, packed, w_words + 4 * geo.K, I32)  # the epilogue's [K][n] constants
    panel_bytes = geo.Kp * nr + (4 * nr if beta else 0)
    if geo.flat:
        assert isinstance(r0, int) and isinstance(r1, int)
        total = (r1 - r0) * geo.OW
        per_block = max(1, min(-(-total // nr), SCRATCH_BYTES // panel_bytes))
        ppr = 0
    else:
        ppr = -(-geo.OW // nr)
        rb = max(1, min(geo.OH, SCRATCH_BYTES // (panel_bytes * ppr)))
        per_block = rb * ppr
    with b.goto_entry_block():
        vslot = b.alloca(ir.ArrayType(I32, per_block * KG * nr), name="im2col")
        vslot.align = 64
        uslot = b.alloca(ir.ArrayType(I32, per_block * nr), name="usum")
        uslot.align = 64
    scratch = b.bitcast(vslot, PTR)
    usum = b.bitcast(uslot, PTR)
    flip = spec.x_signed != dot.u_signed  # xor 0x80 into the class's u domain
    alpha_byte = b.trunc(alpha, I8)
    P = geo.OH * geo.OW
    esize = 1 if spec.out in ("u8", "s8") else 4
    ldx = KG * sw_words

    def c64(v: int) -> ir.Constant:
        return ir.Constant(I64, v)

    def image_group(n: ir.Value, gi: ir.Value) -> None:
        xg = gep(b, x, b.add(b.mul(n, c64(geo.C * geo.H * geo.W)),
                             b.mul(gi, c64(geo.Cg * geo.H * geo.W))), I8)  # fmt: skip
        yg = gep(b, y, b.mul(b.add(b.mul(n, c64(geo.K)), b.mul(gi, c64(geo.Kg))),
                             c64(P * esize)), I8)  # fmt: skip

        def compute(each_panel: Any) -> None:
            """Row tiles x the block's panels; ``each_panel(f)`` emits the loops that call
            ``f(scratch slot, output pixel offset, lanes)`` for every panel of the block."""

            def row_tile(m0: ir.Value, rows: int) -> None:
                ch = b.add(b.mul(gi, c64(geo.Kg)), m0)
                xw = gep(b, packed, b.mul(ch, c64(ldx)), I32)

                def call(slot: ir.Value, pix: ir.Value, lanes: int) -> None:
                    nv_here = -(-lanes // W)
                    ukr = micro_kernel(b.module, dot, rows, nv_here, lanes % W != 0, "conv",
                                       spec.out, spec.runtime_alpha, beta, spec.portable_round,
                                       nr, spec.epilogue)  # fmt: skip
                    mult = (gep(b, pchain, b.mul(ch, c64(n_const)), I32) if spec.epilogue
                            else gep(b, pmult, ch, I32))  # fmt: skip
                    c = gep(b, yg, b.mul(b.add(b.mul(m0, c64(P)), pix), c64(esize)), I8)
                    b.call(ukr, [
                        xw, c64(ldx), gep(b, scratch, b.mul(slot, c64(KG * nr)), I32),
                        c64(KG), c, c64(P),
                        gep(b, pk0, ch, I32), gep(b, pk1, ch, I32), gep(b, pbeta, ch, I32),
                        mult, gep(b, usum, b.mul(slot, c64(nr)), I32),
                        alpha, zy, lo, hi, ir.Constant(I32, lanes - (nv_here - 1) * W),
                    ])  # fmt: skip

                each_panel(call)

            tiles(b, geo.Kg, mr, row_tile)

        def pack(slot: ir.Value, oh: ir.Value | None, pix: ir.Value | None,
                 ow0: int | ir.Value, lanes: int) -> None:  # fmt: skip
            pack_panel(b, geo, dot, xg, scratch, usum, slot, oh, pix, ow0, lanes, nr, flip,
                        alpha_byte, beta)  # fmt: skip

        if geo.flat:
            assert isinstance(r0, int)

            def block(off: ir.Value, size: int) -> None:
                p0 = b.add(c64(r0 * geo.OW), off)
                full, rest = divmod(size, nr)

                def each_panel(f: Any) -> None:
                    for_loop(b, 0, full, 1, lambda q: f(q, b.add(p0, b.mul(q, c64(nr))), nr))
                    if rest:
                        f(c64(full), b.add(p0, c64(full * nr)), rest)

                each_panel(lambda slot, pix, lanes: pack(slot, None, pix, 0, lanes))
                compute(each_panel)

            tiles(b, total, per_block * nr, block)
            return
        assert isinstance(r0, ir.Value) and isinstance(r1, ir.Value)
        # Panels of a row: runs of interior panels in a loop, the border ones unrolled
        # (their masks are compile-time constants).
        runs: list[tuple[int, int, bool]] = []
        for q, inner in enumerate(interior_panels(geo, nr)):
            if runs and runs[-1][2] and inner:
                runs[-1] = (runs[-1][0], q + 1, True)
            else:
                runs.append((q, q + 1, inner))

        def row_block(off: ir.Value, nrows: ir.Value) -> None:
            def each_panel(f: Any) -> None:
                def one_row(rr: ir.Value, _: list[ir.Value]) -> list[ir.Value]:
                    oh = b.add(b.add(r0, off), rr)

                    def panel(q: ir.Value, ow0: int | ir.Value, lanes: int) -> None:
                        slot = b.add(b.mul(rr, c64(ppr)), q)
                        pix = b.add(b.mul(oh, c64(geo.OW)), ow0 if isinstance(ow0, ir.Value)
                                    else c64(ow0))  # fmt: skip
                        f(slot, pix, lanes, oh, ow0)

                    for q0, q1, inner in runs:
                        if inner and q1 - q0 > 1:
                            for_loop(b, q0, q1, 1, lambda q: panel(q, b.mul(q, c64(nr)), nr))
                        else:
                            for q in range(q0, q1):
                                panel(c64(q), q * nr, min(nr, geo.OW - q * nr))
                    return []

                for_loop_dynamic(b, nrows, [], one_row)

            each_panel(lambda slot, pix, lanes, oh, ow0: pack(slot, oh, None, ow0, lanes))
            compute(lambda f: each_panel(lambda slot, pix, lanes, oh, ow0: f(slot, pix, lanes)))

        rows_t = b.sub(r1, r0)
        blocks = b.sdiv(b.add(rows_t, c64(rb - 1)), c64(rb))

        def one_block(i: ir.Value, _: list[ir.Value]) -> list[ir.Value]:
            off = b.mul(i, c64(rb))
            left = b.sub(rows_t, off)
            row_block(off, b.select(b.icmp_signed("<", left, c64(rb)), left, c64(rb)))
            return []

        for_loop_dynamic(b, blocks, [], one_block)

    def image(n: ir.Value) -> None:
        for_loop(b, 0, geo.g, 1, lambda gi: image_group(n, gi))  # groups: a run-time loop

    for_loop(b, 0, geo.N, 1, image)
