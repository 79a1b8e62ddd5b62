"""The int8 depthwise convolution (QLinearConv, one input channel per group) in float
lanes along the output row, exact: no im2col, the requantisation per channel.

Every product ``(x - zx) * (w - zw)`` and every partial sum of a channel's taps is an
integer of magnitude at most ``max|x - zx| * sum|w[c] - zw[c]| + |b[c]|``; when that is
below 2**24 (checked per channel at build time, else the GEMM path of quant/conv.py
runs) float32 holds every one of them exactly, so an FMA chain in any order gives the
integer accumulator itself, and ``float32(acc) * mult[c]`` is the reference's
requantisation (guard.compiler.reference.quant.requantize) bit for bit: roundeven,
clamp to ``[qmin - zy, qmax - zy]``, ``+ zy``.

Per channel plane the rows a task reads are converted once into a stack strip of
``x - zx`` floats with the padding as zeros (``Wp`` columns, the row's vectors never
read past it); output rows then take ``ceil(OW / W)`` vectors of ``R * S`` FMAs each
with the channel's taps as splats in registers. Stride along W must be 1 (lanes are
consecutive output columns) and dilation 1; stride along H is free. One ``noinline``
body per geometry runs output rows ``[r0, r1)`` (a task of quant/split's row bands).

Packed block (int32 words on the weights input): ``[C][T]`` float32 taps ``w - zw``
(``T = R * S``; ``[C][1]`` when every tap of every channel is its channel's one value,
``q_dw_uniform``: a box filter or an average pool, read so by the rows and the window
alike), ``[C]`` float32 bias, ``[C]`` float32 multiplier.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen.irutil import (
    F32,
    I8,
    I32,
    I64,
    PTR,
    declare,
    elem_ptr,
    fma,
    for_loop_dynamic,
    hsum,
    loop,
    splat,
)
from guard.compiler.codegen.quant.geometry import QConvGeometry
from guard.compiler.codegen.quant.ukr import round_even

EXACT = 2**24  # float32 holds every integer of smaller magnitude
MAX_TAPS = 64  # taps held as splats in registers (a 7 x 7 kernel and below)
STRIP_BYTES = 96 * 1024
ACC = 8  # accumulator vectors in flight (an FMA's latency times its throughput)


# Capabilities with a four-byte dot product instruction (vpdpbusd, sdot/udot): the im2col
# GEMM does 64 (or 16 a 128-bit vector) multiply-adds an instruction there and beat the
# float FMA rows on 5 x 5 depthwise layers (PP-OCR cls on znver4: 29 against 38 us); on
# AVX2's 16-bit pairs the rows win (53 against 70 us, 14 against 21 us on a 3 x 3).
DOT4 = ("avx_vnni", "avx512_vnni", "neon_dotprod", "neon_i8mm")


def eligible(geo: QConvGeometry, width: int, int_dot: str) -> str | None:
    """Why this convolution does not take the direct depthwise kernel, or None."""
    if geo.Cg != 1 or geo.Kg != 1:
        return "not depthwise with one output channel per group"
    if (geo.sw, geo.dh, geo.dw) != (1, 1, 1):
        return "stride along W or dilation"
    if window(geo):
        return None
    if int_dot in DOT4:
        return f"{int_dot}'s dot product runs the rows faster through im2col"
    if geo.R * geo.S > MAX_TAPS:
        return f"{geo.R * geo.S} taps (over {MAX_TAPS})"
    if _strip_rows(geo) * _wp(geo, width) * 4 > STRIP_BYTES:
        return "a task's strip of rows over the stack budget"
    return None


def window(geo: QConvGeometry) -> bool:
    """The window is the whole image (a global pool as a convolution): one output per
    channel, a dot product of the plane with the taps, lanes along the plane."""
    return (geo.OH, geo.OW, geo.R, geo.S, geo.pt, geo.pl) == (1, 1, geo.H, geo.W, 0, 0)


def _left(geo: QConvGeometry, width: int) -> int:
    """The strip column of input column 0: the left padding rounded up to whole vectors
    (the converted rows are stored in aligned vectors)."""
    return -(-geo.pl // width) * width


def _wp(geo: QConvGeometry, width: int) -> int:
    """Strip columns, whole vectors: the row and every vector an output row reads."""
    left = _left(geo, width)
    reach = left - geo.pl + -(-geo.OW // width) * width + geo.S - 1
    return -(-max(left + geo.W, reach) // width) * width


def _strip_rows(geo: QConvGeometry) -> int:
    return (geo.OH - 1) * geo.sh + geo.R


def pack(
    w: np.ndarray, zw: np.ndarray | None, bias: np.ndarray | None, mult: np.ndarray,
    x_dtype: str, zx: int,
) -> tuple[np.ndarray, bool] | None:  # fmt: skip
    """The packed block (int32 words) and whether each channel's taps are one value (then
    the block holds one tap a channel: a global pool's ones), or None when a channel's
    sums could leave float32's exact integers."""
    k = w.shape[0]
    taps = w.reshape(k, -1).astype(np.int64)
    zwv = np.zeros(k, np.int64) if zw is None else np.broadcast_to(
        np.asarray(zw, np.int64).reshape(-1), (k,))  # fmt: skip
    d = taps - zwv[:, None]
    b = np.zeros(k, np.int64) if bias is None else np.asarray(bias, np.int64).reshape(-1)
    info = np.iinfo(np.dtype(x_dtype))
    xmax = max(zx - int(info.min), int(info.max) - zx)
    if np.any(xmax * np.abs(d).sum(axis=1) + np.abs(b) >= EXACT):
        return None
    uniform = bool(np.all(d == d[:, :1]))
    taps_f = (d[:, :1] if uniform else d).astype(np.float32).reshape(-1)
    block = np.concatenate([taps_f, b.astype(np.float32), np.asarray(mult, np.float32).reshape(-1)])
    return block.view(np.int32), uniform


def emit_depthwise(
    b: ir.IRBuilder, geo: QConvGeometry, width: int, x: ir.Value, packed: ir.Value,
    y: ir.Value, facts: Mapping[str, Any], x_signed: bool, portable_round: bool,
) -> None:  # fmt: skip
    """Output rows ``[geo.r0, geo.r1)`` of every image and channel (``portable_round``:
    the class has no round instruction, quant/ukr.round_even)."""
    consts = (int(facts["q_alpha_x"]), int(facts["q_zy"]), int(facts["q_lo"]), int(facts["q_hi"]))
    if window(geo):
        _window(b, geo, width, x, packed, y, x_signed, portable_round, consts,
                bool(facts["q_dw_uniform"]))  # fmt: skip
        return
    fn = _body(b.module, geo, width, x_signed, portable_round, consts, bool(facts["q_dw_uniform"]))
    b.call(fn, [x, packed, y, ir.Constant(I64, geo.r0), ir.Constant(I64, geo.r1)])


def _body(
    module: ir.Module, geo: QConvGeometry, W: int, x_signed: bool, portable: bool,
    consts: tuple[int, int, int, int], uniform: bool,
) -> ir.Function:  # fmt: skip
    """The rows body; ``uniform``: the block holds one tap a channel (pack), every tap
    of the kernel is that one."""
    key = (geo.N, geo.C, geo.H, geo.W, geo.R, geo.S, geo.sh, geo.pt, geo.pl, geo.OH, geo.OW,
           W, x_signed, portable, consts, uniform)  # fmt: skip
    cache = module.__dict__.setdefault("_guard_int8_dw", {})
    if key in cache:
        return cache[key]
    digest = hashlib.sha256(repr(key).encode()).hexdigest()[:10]
    name = f"guard.qdw.{geo.R}x{geo.S}s{geo.sh}.c{geo.C}.{geo.H}x{geo.W}.{digest}"
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, PTR, PTR, I64, I64]), name)
    cache[key] = fn
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    x, packed, y, r0, r1 = fn.args
    zx, zy, lo, hi = consts
    T, Wp = geo.R * geo.S, _wp(geo, W)
    per = 1 if uniform else T  # packed taps a channel
    vt = ir.VectorType(F32, W)
    L = _left(geo, W)
    slot = b.alloca(ir.ArrayType(F32, _strip_rows(geo) * Wp), name="strip")
    slot.align = 64
    strip = b.bitcast(slot, ir.PointerType(F32))
    # Zeros once a call: the padding rows and columns are the same for every channel (a
    # plane's rows overwrite only columns [L, L + W)).
    memset = declare(module, "llvm.memset.p0.i64", ir.VoidType(), [PTR, I8, I64, ir.IntType(1)])
    b.call(memset, [b.bitcast(slot, PTR), ir.Constant(I8, 0),
                    ir.Constant(I64, _strip_rows(geo) * Wp * 4), ir.Constant(ir.IntType(1), 0)])  # fmt: skip
    p0 = b.mul(r0, ir.Constant(I64, geo.sh))  # first padded input row the task reads
    n_rows = b.add(b.mul(b.sub(r1, ir.Constant(I64, 1)), ir.Constant(I64, geo.sh)),
                   ir.Constant(I64, geo.R))  # fmt: skip
    n_rows = b.sub(n_rows, p0)
    bias_at, mult_at = geo.C * per, geo.C * per + geo.C
    fmin = declare(module, f"llvm.minnum.v{W}f32", vt, [vt, vt])
    fmax = declare(module, f"llvm.maxnum.v{W}f32", vt, [vt, vt])
    lo_v, hi_v = ir.Constant(vt, [float(lo)] * W), ir.Constant(vt, [float(hi)] * W)
    zy_v = ir.Constant(ir.VectorType(I32, W), [zy] * W)
    zx_v = ir.Constant(vt, [float(zx)] * W)
    bt = ir.VectorType(I8, W)

    def plane(nc: ir.Value) -> None:
        c = b.urem(nc, ir.Constant(I64, geo.C)) if geo.N > 1 else nc
        xp = elem_ptr(b, x, b.mul(nc, ir.Constant(I64, geo.H * geo.W)), I8)
        yp = elem_ptr(b, y, b.mul(nc, ir.Constant(I64, geo.OH * geo.OW)), I8)

        def fill(i: ir.Value, _: list[ir.Value]) -> list[ir.Value]:
            row = elem_ptr(b, strip, b.mul(i, ir.Constant(I64, Wp)), F32)
            ih = b.sub(b.add(p0, i), ir.Constant(I64, geo.pt))
            inside = b.and_(b.icmp_signed(">=", ih, ir.Constant(I64, 0)),
                            b.icmp_signed("<", ih, ir.Constant(I64, geo.H)))  # fmt: skip
            with b.if_then(inside):
                src = elem_ptr(b, xp, b.mul(ih, ir.Constant(I64, geo.W)), I8)
                dst = elem_ptr(b, row, L, F32)
                whole = geo.W // W * W
                for j in range(0, whole, W):
                    v = b.load(
                        b.bitcast(elem_ptr(b, src, j, I8), ir.PointerType(bt)), typ=bt, align=1
                    )
                    f = b.sitofp(v, vt) if x_signed else b.uitofp(v, vt)
                    b.store(b.fsub(f, zx_v), b.bitcast(elem_ptr(b, dst, j, F32),
                                                       ir.PointerType(vt)), align=64)  # fmt: skip
                for j in range(whole, geo.W):
                    v = b.load(elem_ptr(b, src, j, I8), typ=I8)
                    f = b.sitofp(v, F32) if x_signed else b.uitofp(v, F32)
                    b.store(b.fsub(f, ir.Constant(F32, float(zx))), elem_ptr(b, dst, j, F32))
            return []

        for_loop_dynamic(b, n_rows, [], fill)
        taps = [splat(b, b.load(elem_ptr(b, packed, b.add(b.mul(c, ir.Constant(I64, per)),
                                                           ir.Constant(I64, t)), F32), typ=F32), W)
                for t in range(per)] * (T // per)  # fmt: skip
        bias = splat(
            b, b.load(elem_ptr(b, packed, b.add(c, ir.Constant(I64, bias_at)), F32), typ=F32), W
        )
        mult = splat(
            b, b.load(elem_ptr(b, packed, b.add(c, ir.Constant(I64, mult_at)), F32), typ=F32), W
        )

        def store_row(acc: ir.Value, yrow: ir.Value, j: int) -> None:
            f = round_even(b, b.fmul(acc, mult), portable)
            f = b.call(fmin, [b.call(fmax, [f, lo_v]), hi_v])
            q = b.trunc(b.add(b.fptosi(f, ir.VectorType(I32, W)), zy_v), bt)
            n = min(W, geo.OW - j)
            dst = elem_ptr(b, yrow, j, I8)
            if n == W:
                b.store(q, b.bitcast(dst, ir.PointerType(bt)), align=1)
            else:
                for lane in range(n):
                    b.store(
                        b.extract_element(q, ir.Constant(I32, lane)), elem_ptr(b, dst, lane, I8)
                    )

        def out_row(i: ir.Value, _: list[ir.Value]) -> list[ir.Value]:
            oh = b.add(r0, i)
            base = b.mul(i, ir.Constant(I64, geo.sh * Wp))  # the strip starts at row r0*sh
            yrow = elem_ptr(b, yp, b.mul(oh, ir.Constant(I64, geo.OW)), I8)
            cols = list(range(0, geo.OW, W))
            for j0 in range(0, len(cols), ACC):  # ACC independent FMA chains at a time
                group = cols[j0 : j0 + ACC]
                acc = [bias] * len(group)
                for r in range(geo.R):
                    for s in range(geo.S):
                        wv = taps[r * geo.S + s]
                        for a, j in enumerate(group):
                            at = b.add(base, ir.Constant(I64, r * Wp + L - geo.pl + j + s))
                            v = b.load(b.bitcast(elem_ptr(b, strip, at, F32), ir.PointerType(vt)),
                                       typ=vt, align=4)  # fmt: skip
                            acc[a] = (b.fadd(b.fmul(v, wv), acc[a]) if portable
                                      else fma(b, v, wv, acc[a]))  # fmt: skip
                for a, j in enumerate(group):
                    store_row(acc[a], yrow, j)
            return []

        for_loop_dynamic(b, b.sub(r1, r0), [], out_row)

    with loop(b, 0, geo.N * geo.C, 1, "nc") as nc:
        plane(nc)
    b.ret_void()
    return fn


def requant_bytes(
    b: ir.IRBuilder, acc: ir.Value, mult: ir.Value, consts: tuple[int, int, int, int],
    portable: bool,
) -> ir.Value:  # fmt: skip
    """Bytes of ``clamp(roundeven(acc * mult), lo, hi) + zy`` (quant/ukr's epilogue)."""
    vt = acc.type
    W = vt.count
    _, zy, lo, hi = consts
    fmin = declare(b.module, f"llvm.minnum.v{W}f32", vt, [vt, vt])
    fmax = declare(b.module, f"llvm.maxnum.v{W}f32", vt, [vt, vt])
    f = round_even(b, b.fmul(acc, mult), portable)
    f = b.call(fmin, [b.call(fmax, [f, ir.Constant(vt, [float(lo)] * W)]),
                      ir.Constant(vt, [float(hi)] * W)])  # fmt: skip
    q = b.add(b.fptosi(f, ir.VectorType(I32, W)), ir.Constant(ir.VectorType(I32, W), [zy] * W))
    return b.trunc(q, ir.VectorType(I8, W))


def _window(
    b: ir.IRBuilder, geo: QConvGeometry, W: int, x: ir.Value, packed: ir.Value, y: ir.Value,
    x_signed: bool, portable: bool, consts: tuple[int, int, int, int], uniform: bool,
) -> None:  # fmt: skip
    """Per channel, ``sum_t (x[t] - zx) * w[c, t]`` over the plane in vectors (exact in
    any order), or with one tap a channel ``w[c] * (sum_t x[t] - T * zx)``."""
    T = geo.H * geo.W
    vt, bt = ir.VectorType(F32, W), ir.VectorType(I8, W)
    zx = consts[0]
    per = 1 if uniform else T
    bias_at, mult_at = geo.C * per, geo.C * per + geo.C
    whole = T // W * W

    def f32(v: ir.Value, ty: ir.Type) -> ir.Value:
        return b.sitofp(v, ty) if x_signed else b.uitofp(v, ty)

    with loop(b, 0, geo.N * geo.C, 1, "nc") as nc:
        c = b.urem(nc, ir.Constant(I64, geo.C)) if geo.N > 1 else nc
        xp = elem_ptr(b, x, b.mul(nc, ir.Constant(I64, T)), I8)
        wp = elem_ptr(b, packed, b.mul(c, ir.Constant(I64, per)), F32)
        acc = ir.Constant(vt, [0.0] * W)
        zx_v = ir.Constant(vt, [0.0 if uniform else float(zx)] * W)
        for j in range(0, whole, W):
            v = b.load(b.bitcast(elem_ptr(b, xp, j, I8), ir.PointerType(bt)), typ=bt, align=1)
            v = b.fsub(f32(v, vt), zx_v)
            if uniform:
                acc = b.fadd(acc, v)
            else:
                wv = b.load(b.bitcast(elem_ptr(b, wp, j, F32), ir.PointerType(vt)), typ=vt,
                            align=4)  # fmt: skip
                acc = b.fadd(b.fmul(v, wv), acc) if portable else fma(b, v, wv, acc)
        total = hsum(b, acc)
        for j in range(whole, T):
            v = b.fsub(f32(b.load(elem_ptr(b, xp, j, I8), typ=I8), F32),
                       ir.Constant(F32, 0.0 if uniform else float(zx)))  # fmt: skip
            if not uniform:
                v = b.fmul(v, b.load(elem_ptr(b, wp, j, F32), typ=F32))
            total = b.fadd(total, v)
        if uniform:
            total = b.fmul(b.fsub(total, ir.Constant(F32, float(T * zx))),
                           b.load(wp, typ=F32))  # fmt: skip
        total = b.fadd(total, b.load(elem_ptr(b, packed, b.add(c, ir.Constant(I64, bias_at)),
                                              F32), typ=F32))  # fmt: skip
        mult = b.load(elem_ptr(b, packed, b.add(c, ir.Constant(I64, mult_at)), F32), typ=F32)
        q = requant_bytes(b, splat(b, total, W), splat(b, mult, W), consts, portable)
        b.store(b.extract_element(q, ir.Constant(I32, 0)), elem_ptr(b, y, nc, I8))
