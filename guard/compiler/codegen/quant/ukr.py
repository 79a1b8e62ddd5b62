"""The int8 micro-kernel: ``rows x nv`` int32 accumulator vectors, the reduction in
groups of four bytes (guard.compiler.codegen.quant.dot), the compensation terms and the
requantisation in the epilogue, one store of the output type.

One tile computes ``C[i, j] = sum_g dot(X[i, g], V[g, j])`` for ``rows`` rows ``i`` of
the broadcast operand X (one word, or the s operand's ``s_words``, per group and row;
rows ``ldx`` words apart, or for ``"conv"`` the tile's words group-major, ``ldx`` unused) and ``nv * W`` lanes ``j`` of the packed vector operand V
(``[group][s_words][nv * W]`` words). Which operand holds the activations (u) and which
the weights (s) is the ``role``:

- ``"conv"``: X the weights (s), V the im2col of the activations (u); output channels
  run along the rows, pixels along the lanes;
- ``"matmul"``: X the activations (u), V the weights (s); channels along the lanes.

Epilogue, per element of channel ``c`` and position ``p`` (see quant/pack.py for how
the per-channel words are derived)::

    v = acc + k0[c] (+ alpha * k1[c]) (- beta[c] * usum[p])
    int32 out: v;  quantized out: clamp(roundeven(float(v) * mult[c]), lo, hi) + zy

with ``lo = qmin - zy`` and ``hi = qmax - zy`` (so the integer add of ``zy`` after the
float clamp cannot overflow). ``float(v) * mult`` is one float32 multiply with no add
after it: no FMA contraction can change a bit, and the result equals
guard.compiler.reference.quant.requantize on every ISA.

Like the float GEMM's micro-kernel (guard.compiler.codegen.gemm.microkernel) the tile
is a ``noinline`` function shared by every layer with the same variant (rows, vectors,
tail, role, output kind, compensation terms), everything else is an argument.
"""

from __future__ import annotations

import hashlib
import json

import llvmlite.ir as ir

from guard.compiler.codegen.irutil import (
    F32,
    I1,
    I8,
    I32,
    I64,
    PTR,
    declare,
    for_loop_dynamic,
    splat,
)
from guard.compiler.codegen.quant.dot import DotClass, iconst, ivec
from guard.compiler.codegen.quant.epilogue import apply_epilogue, constant_inputs

UKR_ARGS = ("x", "ldx", "v", "groups", "c", "ldc", "k0", "k1", "beta", "mult", "usum", "alpha",
            "zy", "lo", "hi", "tail")  # fmt: skip


def typed_masked_load(
    b: ir.IRBuilder, ptr: ir.Value, ty: ir.VectorType, mask: ir.Value, passthru: ir.Value
) -> ir.Value:
    el = "f32" if isinstance(ty.element, ir.FloatType) else f"i{ty.element.width}"
    mt = ir.VectorType(I1, ty.count)
    fn = declare(b.module, f"llvm.masked.load.v{ty.count}{el}.p0", ty, [PTR, I32, mt, ty])
    return b.call(fn, [ptr, ir.Constant(I32, 1), mask, passthru])


def typed_masked_store(b: ir.IRBuilder, value: ir.Value, ptr: ir.Value, mask: ir.Value) -> None:
    ty = value.type
    el = "f32" if isinstance(ty.element, ir.FloatType) else f"i{ty.element.width}"
    mt = ir.VectorType(I1, ty.count)
    fn = declare(
        b.module, f"llvm.masked.store.v{ty.count}{el}.p0", ir.VoidType(), [ty, PTR, I32, mt]
    )
    b.call(fn, [value, ptr, ir.Constant(I32, 1), mask])


def ld(b: ir.IRBuilder, p: ir.Value, ty: ir.Type, align: int = 1) -> ir.Value:
    """A load of ``ty`` through any pointer (typed or opaque)."""
    return b.load(b.bitcast(p, ir.PointerType(ty)), typ=ty, align=align)


def st(b: ir.IRBuilder, v: ir.Value, p: ir.Value, align: int = 1) -> None:
    b.store(v, b.bitcast(p, ir.PointerType(v.type)), align=align)


def gep(b: ir.IRBuilder, base: ir.Value, index: ir.Value | int, ty: ir.Type) -> ir.Value:
    if isinstance(index, int):
        if index == 0:
            return base
        index = ir.Constant(I64, index)
    return b.gep(b.bitcast(base, ir.PointerType(ty)), [index], source_etype=ty)


def round_even(b: ir.IRBuilder, v: ir.Value, portable: bool) -> ir.Value:
    """Round half to even: ``llvm.roundeven`` (one instruction from SSE4.1 / AArch64 on),
    or, ``portable``, the 1.5 * 2**23 addition (exact in round-to-nearest-even; values of
    2**23 and above are integers already)."""
    W = v.type.count
    vt = v.type
    if not portable:
        fn = declare(b.module, f"llvm.roundeven.v{W}f32", vt, [vt])
        return b.call(fn, [v])
    fabs = declare(b.module, f"llvm.fabs.v{W}f32", vt, [vt])
    big = ir.Constant(vt, [float(2**23)] * W)
    a = b.call(fabs, [v])
    r = b.fsub(b.fadd(a, big), big)
    cs = declare(b.module, f"llvm.copysign.v{W}f32", vt, [vt, vt])
    r = b.call(cs, [r, v])
    return b.select(b.fcmp_ordered("<", a, big), r, v)


def micro_kernel(
    module: ir.Module, dot: DotClass, rows: int, nv: int, tail: bool, role: str, out: str,
    runtime_alpha: bool, beta: bool, portable_round: bool, v_lanes: int = 0, epilogue: str = "",
) -> ir.Function:  # fmt: skip
    """The tile variant, declared once per module (see the module docstring).

    ``void ukr(ptr x, i64 ldx, ptr v, i64 groups, ptr c, i64 ldc, ptr k0, ptr k1,
    ptr beta, ptr mult, ptr usum, i32 alpha, i32 zy, i32 lo, i32 hi, i32 tail)``; ``c``,
    ``k0``.. point at the tile's first element; ``out`` is ``"i32"``, ``"u8"`` or
    ``"s8"``, or with an ``epilogue`` (quant/epilogue.py: a FusedConvInteger's chain on
    the int32 result) its output, ``"u8"``, ``"s8"`` or ``"f32"``, ``mult`` then pointing
    at the tile's first row of the chain's ``[K][n]`` constants; ``tail`` lanes of the last vector are stored when ``tail`` (compile-time);
    ``v_lanes``: the lanes of one group of V as packed (``nv * W`` when 0; a panel's last
    tile may use fewer vectors than the packing's panel holds)."""
    cache = module.__dict__.setdefault("_guard_int8_ukrs", {})
    lanes = v_lanes or nv * dot.width
    key = (dot, rows, nv, tail, role, out, runtime_alpha, beta, portable_round, lanes, epilogue)
    if key in cache:
        return cache[key]
    W, sw = dot.width, dot.s_words
    name = (
        f"guard.qukr.{dot.name}.{rows}x{nv}v{W}.{role}.{out}{'.tail' if tail else ''}"
        f"{'.ra' if runtime_alpha else ''}{'.zw' if beta else ''}.l{lanes}"
    ) + (f".e{hashlib.sha256(epilogue.encode()).hexdigest()[:10]}" if epilogue else "")
    args = [PTR, I64, PTR, I64, PTR, I64, PTR, PTR, PTR, PTR, PTR, I32, I32, I32, I32, I32]
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), args), name)
    cache[key] = fn
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    fn.attributes.add("nounwind")
    for a, nm in zip(fn.args, UKR_ARGS, strict=True):
        a.name = nm
    for i in (0, 2, 4):
        fn.args[i].add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    x, ldx, v, groups, c, ldc, pk0, pk1, pbeta, pmult, pusum, alpha, zy, lo, hi, tail_n = fn.args
    vt = ivec(W)
    x_words = 1 if role == "matmul" else sw  # words per group of one X row
    v_words = sw if role == "matmul" else 1  # word planes per group of V
    if role == "conv":
        # The weights of a row tile are packed group-major (quant/pack.py, tile_rows): a
        # group's ``rows`` words sit together, so every row is a constant offset from one
        # pointer. With rows ``ldx`` apart (a run-time stride) LLVM kept twelve row
        # pointers and spilled accumulators in the loop: half the speed in a whole model.
        x_rows = [gep(b, x, i * sw, I32) for i in range(rows)]
        x_step = rows * sw
    else:
        x_rows = [gep(b, x, b.mul(ldx, ir.Constant(I64, i)), I32) for i in range(rows)]
        x_step = 1

    def step(g: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
        vg = gep(b, v, b.mul(g, ir.Constant(I64, v_words * lanes)), I32)
        vparts = []
        for j in range(nv):
            words = [ld(b, gep(b, vg, w * lanes + j * W, I32), vt, 4) for w in range(v_words)]
            vparts.append(dot.prep_u(b, words[0]) if role == "conv" else dot.prep_s(b, words))
        xg = b.mul(g, ir.Constant(I64, x_step))
        out = list(acc)
        for i in range(rows):
            words = [
                ld(b, gep(b, x_rows[i], b.add(xg, ir.Constant(I64, w)), I32), I32, 4)
                for w in range(x_words)
            ]
            xp = dot.prep_s(b, words) if role == "conv" else dot.prep_u(b, words[0])
            for j in range(nv):
                u, s = (vparts[j], xp) if role == "conv" else (xp, vparts[j])
                out[i * nv + j] = dot.dot(b, out[i * nv + j], u, s)
        return out

    acc = for_loop_dynamic(b, groups, [iconst(W, 0)] * (rows * nv), step)

    # -- epilogue -----------------------------------------------------------------------
    ft = ir.VectorType(F32, W)

    def per_channel(p: ir.Value, i: int, j: int, ty: ir.Type) -> ir.Value:
        if role == "conv":  # one channel per row: a broadcast scalar
            return splat(b, ld(b, gep(b, p, i, ty), ty, 4), W)
        return ld(b, gep(b, p, j * W, ty), ir.VectorType(ty, W), 4)

    def per_position(i: int, j: int) -> ir.Value:
        if role == "conv":  # positions along the lanes
            return ld(b, gep(b, pusum, j * W, I32), vt, 4)
        return splat(b, ld(b, gep(b, pusum, i, I32), I32, 4), W)

    mask = None
    if tail:
        idx = ir.Constant(vt, list(range(W)))
        mask = b.icmp_signed("<", idx, splat(b, tail_n, W))
    alpha_v = splat(b, alpha, W) if runtime_alpha else None
    n_const = len(constant_inputs(json.loads(epilogue)["program"])) if epilogue else 0
    if out != "i32" and not epilogue:
        zy_v = splat(b, zy, W)
        lo_f = splat(b, b.sitofp(lo, F32), W)
        hi_f = splat(b, b.sitofp(hi, F32), W)
        fmin = declare(module, f"llvm.minnum.v{W}f32", ft, [ft, ft])
        fmax = declare(module, f"llvm.maxnum.v{W}f32", ft, [ft, ft])
    for i in range(rows):
        crow = gep(b, c, b.mul(ldc, ir.Constant(I64, i)), I32 if out in ("i32", "f32") else I8)
        for j in range(nv):
            r = b.add(acc[i * nv + j], per_channel(pk0, i, j, I32))
            if runtime_alpha:
                r = b.add(r, b.mul(alpha_v, per_channel(pk1, i, j, I32)))
            if beta:
                r = b.sub(r, b.mul(per_channel(pbeta, i, j, I32), per_position(i, j)))
            if epilogue:  # the chain's constants of row i: a broadcast scalar each
                row = gep(b, pmult, i * n_const, F32)

                def constant(col: int, row: ir.Value = row) -> ir.Value:
                    return splat(b, ld(b, gep(b, row, col, F32), F32, 4), W)

                val, et = apply_epilogue(b, epilogue, r, constant)
            elif out == "i32":
                val, et = r, I32
            else:
                f = b.fmul(b.sitofp(r, ft), per_channel(pmult, i, j, F32))
                f = round_even(b, f, portable_round)
                f = b.call(fmin, [b.call(fmax, [f, lo_f]), hi_f])
                val = b.trunc(b.add(b.fptosi(f, vt), zy_v), ir.VectorType(I8, W))
                et = I8
            p = gep(b, crow, j * W, et)
            if mask is not None and j == nv - 1:
                # The tail: through a stack vector and a memcpy of ``tail`` elements (a
                # masked store here wrote past the tail in a whole-model build on znver4).
                with b.goto_entry_block():
                    slot = b.alloca(val.type, name="tailvec")
                st(b, val, slot, 1)
                nbytes = b.mul(b.zext(tail_n, I64), ir.Constant(I64, 1 if et == I8 else 4))
                memcpy = declare(module, "llvm.memcpy.p0.p0.i64", ir.VoidType(),
                                 [PTR, PTR, I64, ir.IntType(1)])  # fmt: skip
                b.call(memcpy, [b.bitcast(p, PTR), b.bitcast(slot, PTR), nbytes,
                                ir.Constant(ir.IntType(1), 0)])  # fmt: skip
            else:
                st(b, val, p, 1)
    b.ret_void()
    return fn
