"""The int8 depthwise convolution on a four-byte dot product (VNNI ``vpdpbusd``), lanes
along the output row, no im2col: the rows form of quant/depthwise.py where the
capability multiplies four bytes an instruction.

Per channel and kernel row ``r`` the taps go in groups of four along W (``G = ceil(S/4)``,
the last group's missing taps zero); an output pixel's four input bytes of a group are
consecutive in the input row, so one shuffle of a 32-byte load of the row gives the
dwords of 16 (8) output pixels and one ``vpdpbusd`` adds their four products: ``R * G``
dot products a vector of outputs (10 for 5 x 5) where the float rows take ``R * S`` FMAs
and the im2col GEMM packs ``R * S`` bytes a pixel first.

Exact in int32: ``sum (xu - zu) * w'`` with ``xu`` the activation as an unsigned byte
(s8 biased by 128, as quant/dot.py does), ``zu`` its zero point so biased, ``w' = w - zw``
is ``sum xu * w' - zu * sum w'``: the second term and the bias are one word a channel
(u8 weights, or s8 ones whose zero point pushes ``w'`` out of s8, add a window sum). The padding is ``zu`` (a zero term).
``float32(acc) * mult`` and the rest of the epilogue are quant/ukr's, so the result is
guard.compiler.reference.quant.requantize bit for bit.

Packed block (int32 words): ``[C][R][G]`` weight dwords, ``[C]`` bias - zu * sum d,
``[C]`` the window-sum factor e, ``[C]`` float32 multiplier (pack's docstring).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen.irutil import F32, I8, I32, I64, PTR, declare, elem_ptr, loop, splat
from guard.compiler.codegen.quant import depthwise as dw
from guard.compiler.codegen.quant.depthwise import requant_bytes
from guard.compiler.codegen.quant.dot import DotClass
from guard.compiler.codegen.quant.geometry import QConvGeometry
from guard.compiler.codegen.quant.pack import activation_shift, requant_multiplier
from guard.compiler.ir.isa_table import active_table

SPAN = 32  # bytes loaded for a group: W pixels + 3 taps fit (W <= 16)
ACC = 6  # output vectors in flight (with the window sums: 2 accumulators each)
PAIR_ACC = 3  # for two output rows at once


def pack(
    w: np.ndarray, zw: np.ndarray | None, bias: np.ndarray | None, mult: np.ndarray, zu: int
) -> tuple[np.ndarray, bool] | None:
    """The packed block and whether a channel needs the window-sum term (see below), or
    None when the bias term leaves int32.

    ``d = w - zw`` is split as ``ws + e[c]`` with ``ws`` an s8: ``d`` itself where every
    tap of the layer fits, else ``w - 128`` (u8 weights) or ``w`` (s8), ``e`` the rest;
    then ``sum (xu - zu) * d = sum xu * ws + e[c] * sum xu - zu * sum d``, the window sum
    ``sum xu`` one more dot product with ones."""
    k, _, r, s = w.shape
    g = -(-s // 4)
    zwv = np.zeros(k, np.int64) if zw is None else np.broadcast_to(
        np.asarray(zw, np.int64).reshape(-1), (k,))  # fmt: skip
    d = w.astype(np.int64) - zwv[:, None, None, None]
    if d.min() >= -128 and d.max() <= 127:
        ws, e = d, np.zeros(k, np.int64)
    else:
        shift = 128 if w.dtype == np.uint8 else 0
        ws, e = w.astype(np.int64) - shift, shift - zwv
    taps = np.zeros((k, r, g * 4), np.int8)
    taps[:, :, :s] = ws.reshape(k, r, s)
    b = np.zeros(k, np.int64) if bias is None else np.asarray(bias, np.int64).reshape(-1)
    k0 = b - zu * d.reshape(k, -1).sum(axis=1)
    if np.abs(k0).max(initial=0) >= 2**31 or np.abs(e).max(initial=0) >= 2**15:
        return None
    words = taps.reshape(-1).view(np.int32)
    block = np.concatenate([words, k0.astype(np.int32), e.astype(np.int32),
                            np.asarray(mult, np.float32).reshape(-1).view(np.int32)])  # fmt: skip
    return block, bool(np.any(e))


def emit_rows(
    b: ir.IRBuilder, geo: QConvGeometry, dot: DotClass, x: ir.Value, packed: ir.Value,
    y: ir.Value, x_signed: bool, consts: tuple[int, int, int, int], window_sum: bool,
) -> None:  # fmt: skip
    """Output rows ``[geo.r0, geo.r1)`` of every image and channel; ``consts`` = (zu, zy,
    lo, hi)."""
    fn = _body(b.module, geo, dot, x_signed, consts, window_sum)
    b.call(fn, [x, packed, y, ir.Constant(I64, geo.r0), ir.Constant(I64, geo.r1)])


def _body(
    module: ir.Module, geo: QConvGeometry, dot: DotClass, x_signed: bool,
    consts: tuple[int, int, int, int], window_sum: bool,
) -> ir.Function:  # fmt: skip
    key = (geo.N, geo.C, geo.H, geo.W, geo.R, geo.S, geo.sh, geo.pt, geo.pl, geo.OH, geo.OW,
           dot, x_signed, consts, window_sum)  # fmt: skip
    cache = module.__dict__.setdefault("_guard_int8_dwdot", {})
    if key in cache:
        return cache[key]
    digest = hashlib.sha256(repr(key).encode()).hexdigest()[:10]
    name = f"guard.qdwdot.{geo.R}x{geo.S}s{geo.sh}.c{geo.C}.{geo.H}x{geo.W}.{digest}"
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, PTR, PTR, I64, I64]), name)
    cache[key] = fn
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    x, packed, y, r0, r1 = fn.args
    W = dot.width
    zu = consts[0]
    G = -(-geo.S // 4)
    L = -(-geo.pl // 16) * 16
    Wp = -(-(L + max(geo.W, geo.OW + geo.S - 1 - geo.pl) + SPAN) // 16) * 16
    rows = (geo.OH - 1) * geo.sh + geo.R
    slot = b.alloca(ir.ArrayType(I8, rows * Wp), name="strip")
    slot.align = 64
    strip = b.bitcast(slot, ir.PointerType(I8))
    memset = declare(module, "llvm.memset.p0.i64", ir.VoidType(), [PTR, I8, I64, ir.IntType(1)])
    b.call(memset, [b.bitcast(slot, PTR), ir.Constant(I8, zu & 0xFF),
                    ir.Constant(I64, rows * Wp), ir.Constant(ir.IntType(1), 0)])  # fmt: skip
    iv = ir.VectorType(I32, W)
    bt16 = ir.VectorType(I8, 16)
    span_t = ir.VectorType(I8, SPAN)
    idx = ir.Constant(ir.VectorType(I32, 4 * W), [p + k for p in range(W) for k in range(4)])
    flip = ir.Constant(bt16, [0x80] * 16)
    p0 = b.mul(r0, ir.Constant(I64, geo.sh))
    last = b.add(b.mul(b.sub(r1, ir.Constant(I64, 1)), ir.Constant(I64, geo.sh)),
                 ir.Constant(I64, geo.R))  # fmt: skip
    n_rows = b.sub(last, p0)
    T = geo.R * G
    k0_at, e_at, mult_at = geo.C * T, geo.C * T + geo.C, geo.C * T + 2 * geo.C
    ones = [
        ir.Constant(iv, [sum(1 << (8 * q) for q in range(4) if 4 * g + q < geo.S)] * W)
        for g in range(G)
    ]  # the taps of group g that exist, as u8 x s8 ones

    def c64(v: int) -> ir.Constant:
        return ir.Constant(I64, v)

    with loop(b, 0, geo.N * geo.C, 1, "nc") as nc:
        c = b.urem(nc, c64(geo.C)) if geo.N > 1 else nc
        xp = elem_ptr(b, x, b.mul(nc, c64(geo.H * geo.W)), I8)
        yp = elem_ptr(b, y, b.mul(nc, c64(geo.OH * geo.OW)), I8)
        # this plane's rows into the strip, columns [L, L + W) (the rest stays zu)
        with loop(b, 0, rows, 1, "fill") as i:
            ih = b.sub(b.add(p0, i), c64(geo.pt))
            ok = b.and_(b.icmp_signed("<", i, n_rows), b.and_(
                b.icmp_signed(">=", ih, c64(0)), b.icmp_signed("<", ih, c64(geo.H))))  # fmt: skip
            with b.if_then(ok):
                src = elem_ptr(b, xp, b.mul(ih, c64(geo.W)), I8)
                dst = elem_ptr(b, strip, b.add(b.mul(i, c64(Wp)), c64(L)), I8)
                whole = geo.W // 16 * 16
                for j in range(0, whole, 16):
                    v = b.load(b.bitcast(elem_ptr(b, src, j, I8), ir.PointerType(bt16)),
                               typ=bt16, align=1)  # fmt: skip
                    v = b.xor(v, flip) if x_signed else v
                    b.store(v, b.bitcast(elem_ptr(b, dst, j, I8), ir.PointerType(bt16)), align=16)
                for j in range(whole, geo.W):
                    v = b.load(elem_ptr(b, src, j, I8), typ=I8)
                    v = b.xor(v, ir.Constant(I8, 0x80)) if x_signed else v
                    b.store(v, elem_ptr(b, dst, j, I8))
        wrow = b.mul(c, c64(T))
        taps = [splat(b, b.load(elem_ptr(b, packed, b.add(wrow, c64(t)), I32), typ=I32), W)
                for t in range(T)]  # fmt: skip
        k0 = splat(b, b.load(elem_ptr(b, packed, b.add(c, c64(k0_at)), I32), typ=I32), W)
        mult = splat(b, b.load(elem_ptr(b, packed, b.add(c, c64(mult_at)), F32), typ=F32), W)
        e = splat(b, b.load(elem_ptr(b, packed, b.add(c, c64(e_at)), I32), typ=I32), W)
        zero = ir.Constant(iv, [0] * W)

        def block(oh: ir.Value, nr: int) -> None:
            """Output rows ``oh .. oh + nr``: each strip row's spans are shuffled once and
            its window sums taken once for every output row that reads it."""
            base = b.mul(b.sub(b.mul(oh, c64(geo.sh)), p0), c64(Wp))
            cols = list(range(0, geo.OW, W))
            per = ACC if nr == 1 else PAIR_ACC
            for j0 in range(0, len(cols), per):
                group = cols[j0 : j0 + per]
                acc = [[zero] * len(group) for _ in range(nr)]
                wsum = [[zero] * len(group) for _ in range(nr)]
                for i in range((nr - 1) * geo.sh + geo.R):
                    rows = [(k, i - k * geo.sh) for k in range(nr) if 0 <= i - k * geo.sh < geo.R]
                    for a, j in enumerate(group):
                        rs = zero
                        for g in range(G):
                            at = b.add(base, c64(i * Wp + L - geo.pl + j + 4 * g))
                            v = b.load(b.bitcast(elem_ptr(b, strip, at, I8),
                                                 ir.PointerType(span_t)), typ=span_t, align=1)  # fmt: skip
                            u = b.bitcast(b.shuffle_vector(v, ir.Constant(span_t, None), idx), iv)
                            for k, r in rows:
                                acc[k][a] = dot.dot(b, acc[k][a], [u], [taps[r * G + g]])
                            if window_sum:
                                rs = dot.dot(b, rs, [u], [ones[g]])
                        if window_sum:
                            for k, _ in rows:
                                wsum[k][a] = b.add(wsum[k][a], rs)
                for k in range(nr):
                    yrow = elem_ptr(b, yp, b.mul(b.add(oh, c64(k)), c64(geo.OW)), I8)
                    for a, j in enumerate(group):
                        v = b.add(acc[k][a], k0)
                        if window_sum:
                            v = b.add(v, b.mul(wsum[k][a], e))
                        q = requant_bytes(
                            b, b.sitofp(v, ir.VectorType(F32, W)), mult, consts, False
                        )
                        n = min(W, geo.OW - j)
                        dst = elem_ptr(b, yrow, j, I8)
                        if n == W:
                            b.store(q, b.bitcast(dst, ir.PointerType(q.type)), align=1)
                        else:
                            for lane in range(n):
                                b.store(b.extract_element(q, ir.Constant(I32, lane)),
                                        elem_ptr(b, dst, lane, I8))  # fmt: skip

        # Rows in pairs from r0 (a pair shares R - sh of its strip rows), the last alone.
        with loop(b, 0, geo.OH, 1, "oh") as oh:
            first = b.and_(b.icmp_signed(">=", oh, r0), b.icmp_signed("<", oh, r1))
            if geo.OH > 1:
                even = b.icmp_signed("==", b.and_(b.sub(oh, r0), c64(1)), c64(0))
                first = b.and_(first, even)
            with b.if_then(first):
                if geo.OH > 1:
                    pair = b.icmp_signed("<", b.add(oh, c64(1)), r1)
                    with b.if_else(pair) as (two, one):
                        with two:
                            block(oh, 2)
                        with one:
                            block(oh, 1)
                else:
                    block(oh, 1)
    b.ret_void()
    return fn


def plan(
    op: str, geo: QConvGeometry, dot: DotClass, target: Any, w: np.ndarray,
    val: Callable[[str], np.ndarray | None], x_dtype: str,
) -> tuple[np.ndarray, dict[str, Any]] | None:  # fmt: skip
    """The packed block and the facts of a direct depthwise kernel for this QLinearConv
    (a constant activation zero point), or None: the im2col GEMM runs it. On VNNI with
    VBMI (the byte shuffle of a 32-byte span is one vpermb) the dot-product rows; else
    the float rows or the whole-image window (quant/depthwise.py)."""
    if op != "QLinearConv":
        return None
    zxv = val("zx")
    zx = 0 if zxv is None else int(np.asarray(zxv).reshape(-1)[0])
    mult = requant_multiplier(val("sx"), val("sw"), val("sy"), w.shape[0])
    vbmi = target is not None and getattr(target, "byte_lookup", "none") == "vbmi"
    rows = dw.eligible(geo, dot.width, "none") is None and not dw.window(geo)
    if rows and dot.name == "avx512_vnni" and vbmi and dot.width == 16:
        zu = zx + activation_shift(x_dtype)
        got = pack(w, val("zw"), val("b"), mult, zu)
        if got is not None:
            return got[0], {"q_dwdot": True, "q_alpha_x": zu, "q_dwdot_sum": got[1]}
    if dw.eligible(geo, dot.width, dot.name) is None:
        got = dw.pack(w, val("zw"), val("b"), mult, x_dtype, zx)
        if got is not None:
            return got[0], {"q_dw": True, "q_alpha_x": zx, "q_dw_uniform": got[1]}
    return None


def emit(b: ir.IRBuilder, k: Any, x: ir.Value | None, packed: ir.Value | None, y: ir.Value) -> bool:
    """Emit the kernel ``plan`` chose for the step, if it chose one."""
    if not (k.attrs.get("q_dw") or k.attrs.get("q_dwdot")):
        return False
    xo, wo = k.inputs[0], k.inputs[3]
    assert x is not None and packed is not None and xo is not None and wo is not None
    geo = QConvGeometry.of(k.attrs, xo.shape, wo.shape)
    x_signed = xo.dtype == "int8"
    if k.attrs.get("q_dwdot"):
        consts = tuple(int(k.attrs[a]) for a in ("q_alpha_x", "q_zy", "q_lo", "q_hi"))
        emit_rows(b, geo, DotClass(str(k.attrs["q_dot"]), k.vector_width), x, packed, y,
                  x_signed, consts, bool(k.attrs["q_dwdot_sum"]))  # type: ignore[arg-type]  # fmt: skip
    else:
        portable = active_table(k.vector_width).isa == "sse"
        dw.emit_depthwise(b, geo, k.vector_width, x, packed, y, k.attrs, x_signed, portable)
    return True
