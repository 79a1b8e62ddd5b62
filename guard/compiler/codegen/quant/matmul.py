"""The int8 matrix product (QLinearMatMul, MatMulInteger): ``Y[M, N] = A[M, K] @ B[K, N]``
with B a constant packed at build time as panels ``[N/nr][KG][s_words][nr]`` (the
vector operand of the micro-kernel, role ``"matmul"``: channels along the lanes) and A
copied block by block into the class's u domain on the stack (``[rows][Kp]`` bytes,
padded with the zero point ``alpha``; each row's sum of u beside it when the weights'
zero point is not zero), then broadcast four bytes at a time. A's leading dims fold
into M. The requantisation (or the int32 store) is the micro-kernel's epilogue. A task
of a column split (a GEMV: too few rows to cut) computes the panels of its ``cols``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import llvmlite.ir as ir

from guard.compiler.codegen.irutil import I8, I32, I64, PTR, for_loop, splat, tiles
from guard.compiler.codegen.quant.dot import DotClass
from guard.compiler.codegen.quant.ukr import gep, ld, micro_kernel, st, typed_masked_load

SCRATCH_BYTES = 128 * 1024


def matmul_tile(M: int, N: int, width: int, registers: int) -> tuple[int, int]:
    """(rows, vectors): 10 x 2 of 32 registers, 6 x 1 of 16; a short M (a GEMV) gets
    wider panels instead of rows. The panel ``nv * width`` is also the packing's. 12 x 2
    spilled: LLVM kept the 12 rows' broadcasts of two k-steps beside 24 accumulators and
    stored and reloaded 35 zmm registers in the loop of the i32 tile (the dynamically
    quantised transformer's MatMulInteger, znver4); 10 x 2 and 8 x 2 keep them all."""
    n_vecs = -(-N // width)
    if M >= 4:
        nv = min(2 if registers >= 32 else 1, n_vecs)
        return min(M, 10 if registers >= 32 else 6), nv
    return M, max(1, min(n_vecs, 4 if registers >= 32 else 2))


def emit_matmul(
    b: ir.IRBuilder, M: int, N: int, K: int, dot: DotClass, registers: int, nv: int, a: ir.Value,
    packed: ir.Value, y: ir.Value, out: str, facts: Mapping[str, Any], a_signed: bool,
    alpha_rt: ir.Value | None, portable_round: bool,
) -> None:  # fmt: skip
    W = dot.width
    mr = matmul_tile(M, N, W, registers)[0]  # ``nv``: the packing's (a row task's M is shorter)
    nr = nv * W
    Kp = -(-K // 4) * 4
    KG = Kp // 4
    npad = -(-N // nr) * nr
    sw = dot.s_words
    beta = bool(facts["q_beta"])
    const_alpha = facts["q_alpha"]
    alpha = alpha_rt if alpha_rt is not None else ir.Constant(I32, int(const_alpha))
    w_words = npad * KG * sw
    pk0 = gep(b, packed, w_words, I32)
    pk1 = gep(b, packed, w_words + npad, I32)
    pbeta = gep(b, packed, w_words + 2 * npad, I32)
    pmult = gep(b, packed, w_words + 3 * npad, I32)
    mc = max(mr, min(-(-M // mr) * mr, SCRATCH_BYTES // Kp // mr * mr))
    with b.goto_entry_block():
        aslot = b.alloca(ir.ArrayType(I32, mc * KG), name="apack")
        aslot.align = 64
        uslot = b.alloca(ir.ArrayType(I32, mc), name="usum")
        uslot.align = 64
    scratch = b.bitcast(aslot, PTR)
    usum = b.bitcast(uslot, PTR)
    flip = a_signed != dot.u_signed
    alpha_byte = b.trunc(alpha, I8)
    esize = 4 if out == "i32" else 1
    lo = ir.Constant(I32, int(facts["q_lo"]))
    hi = ir.Constant(I32, int(facts["q_hi"]))
    zy = ir.Constant(I32, int(facts["q_zy"]))
    V = 4 * W  # bytes per copy vector
    vt = ir.VectorType(I8, V)
    ut = ir.VectorType(I32, V)

    def pack_row(m: ir.Value, slot: ir.Value) -> None:
        src = gep(b, a, b.mul(m, ir.Constant(I64, K)), I8)
        dst = gep(b, scratch, b.mul(slot, ir.Constant(I64, KG)), I32)
        sums = None
        for k0 in range(0, Kp, V):
            n_ok = min(V, K - k0)
            p = gep(b, src, k0, I8)
            if n_ok >= V:
                v = ld(b, p, vt, 1)
            elif n_ok > 0:
                mk = ir.Constant(ir.VectorType(ir.IntType(1), V), [int(i < n_ok) for i in range(V)])
                v = typed_masked_load(b, p, vt, mk, ir.Constant(vt, [0] * V))
            else:
                v = splat(b, alpha_byte, V)
            if flip and n_ok > 0:
                v = b.xor(v, ir.Constant(vt, [0x80] * V))
            if 0 < n_ok < V:
                okv = ir.Constant(
                    ir.VectorType(ir.IntType(1), V), [int(i < n_ok) for i in range(V)]
                )
                v = b.select(okv, v, splat(b, alpha_byte, V))
            width_here = min(V, Kp - k0)
            if width_here == V:
                st(b, v, gep(b, dst, k0 // 4, I32), 1)
            else:
                sub = b.shuffle_vector(
                    v, ir.Constant(vt, ir.Undefined),
                    ir.Constant(ir.VectorType(I32, width_here), list(range(width_here))),
                )  # fmt: skip
                st(b, sub, gep(b, dst, k0 // 4, I32), 1)
            if beta:
                ext = b.sext(v, ut) if dot.u_signed else b.zext(v, ut)
                if width_here < V:
                    keep = ir.Constant(
                        ir.VectorType(ir.IntType(1), V), [int(i < width_here) for i in range(V)]
                    )
                    ext = b.select(keep, ext, ir.Constant(ut, [0] * V))
                sums = ext if sums is None else b.add(sums, ext)
        if beta and sums is not None:
            fn = b.module.globals.get(f"llvm.vector.reduce.add.v{V}i32") or ir.Function(
                b.module, ir.FunctionType(I32, [ut]), f"llvm.vector.reduce.add.v{V}i32"
            )
            st(b, b.call(fn, [sums]), gep(b, usum, slot, I32), 4)

    def block(m_start: ir.Value, m_size: int) -> None:
        for_loop(b, 0, m_size, 1, lambda i: pack_row(b.add(m_start, i), i))

        def panel(n0: ir.Value, width: int) -> None:
            nv_here = -(-width // W)
            pb = gep(b, packed, b.mul(n0, ir.Constant(I64, KG * sw)), I32)

            def rows(r0: ir.Value, nrows: int) -> None:
                ukr = micro_kernel(b.module, dot, nrows, nv_here, width % W != 0, "matmul", out,
                                   const_alpha is None, beta, portable_round, nr)  # fmt: skip
                m = b.add(m_start, r0)
                c = gep(b, y, b.mul(b.add(b.mul(m, ir.Constant(I64, N)), n0), ir.Constant(I64, esize)), I8)  # fmt: skip
                b.call(ukr, [
                    gep(b, scratch, b.mul(r0, ir.Constant(I64, KG)), I32), ir.Constant(I64, KG),
                    pb, ir.Constant(I64, KG), c, ir.Constant(I64, N),
                    gep(b, pk0, n0, I32), gep(b, pk1, n0, I32), gep(b, pbeta, n0, I32),
                    gep(b, pmult, n0, I32), gep(b, usum, r0, I32),
                    alpha, zy, lo, hi, ir.Constant(I32, width - (nv_here - 1) * W),
                ])  # fmt: skip

            tiles(b, m_size, mr, rows)

        # A task of a column split (attribute ``cols``, whole panels): its columns only.
        n0, n1 = facts.get("cols") or (0, N)
        tiles(b, n1 - n0, nr, lambda off, width: panel(b.add(off, ir.Constant(I64, n0)), width))

    tiles(b, M, mc, block)
