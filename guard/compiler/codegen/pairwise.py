"""numpy's float32 pairwise sum, generated: the order of additions numpy's ``add.reduce``
uses on a contiguous run (numpy/_core/src/umath/loops_utils.h.src, ``pairwise_sum``), so
a reduction written with it gives the reference interpreter's bits.

For ``n`` elements: fewer than 8, one by one from 0.0; up to 128 (``PW_BLOCKSIZE``), eight
accumulators (the first eight elements, then every eighth element added to its lane: one
8-lane vector add per step), combined as ``((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7))``, then
the rest one by one; more, the sum of the two halves, the first ``n/2`` rounded down to a
multiple of 8. The reduction itself starts from the identity: ``0.0 + sum`` (which turns
a -0.0 sum into +0.0, as numpy's does).

Each distinct size is one internal function ``float sum(ptr)`` (a 6400-element plane
needs 14), so the code stays small however long the run is; LLVM inlines what pays.

``tree_sum`` adds a vector's lanes in one fixed tree (halves first) with no reassociation:
Softmax and LayerNorm keep 16-lane partial sums (``FIXED``) on every target and end with
it, so the AVX2 and AVX-512 builds give the same bits.
"""

from __future__ import annotations

import llvmlite.ir as ir

from guard.compiler.codegen.irutil import F32, I32, PTR, elem_ptr, for_loop_carried, load

BLOCK = 128  # numpy's PW_BLOCKSIZE
UNROLL = 8


def pairwise_sum(b: ir.IRBuilder, x: ir.Value, base: ir.Value | int, n: int) -> ir.Value:
    """``0.0 + sum(x[base : base + n])`` in numpy's order (float32, contiguous)."""
    s = b.call(_function(b.module, n), [elem_ptr(b, x, base)])
    return b.fadd(ir.Constant(F32, 0.0), s)


def _function(module: ir.Module, n: int) -> ir.Function:
    cache = module.__dict__.setdefault("_guard_pairwise", {})
    if n in cache:
        return cache[n]
    fn = ir.Function(module, ir.FunctionType(F32, [PTR]), f"guard.pairwise_sum.{n}")
    cache[n] = fn
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    a = fn.args[0]
    if n < UNROLL:
        res: ir.Value = ir.Constant(F32, 0.0)
        for i in range(n):
            res = b.fadd(res, load(b, a, i))
    elif n <= BLOCK:
        m = n - n % UNROLL
        (r,) = for_loop_carried(
            b, UNROLL, m, UNROLL, [load(b, a, 0, UNROLL)],
            lambda i, acc: [b.fadd(acc[0], load(b, a, i, UNROLL))],
        )  # fmt: skip
        e = [b.extract_element(r, ir.Constant(I32, j)) for j in range(UNROLL)]
        res = b.fadd(
            b.fadd(b.fadd(e[0], e[1]), b.fadd(e[2], e[3])),
            b.fadd(b.fadd(e[4], e[5]), b.fadd(e[6], e[7])),
        )
        for i in range(m, n):
            res = b.fadd(res, load(b, a, i))
    else:
        n2 = n // 2
        n2 -= n2 % UNROLL
        left = b.call(_function(module, n2), [a])
        right = b.call(_function(module, n - n2), [elem_ptr(b, a, n2)])
        res = b.fadd(left, right)
    b.ret(res)
    return fn


FIXED = 16  # the lanes of a width-independent reduction's partial sums, on every target


def tree_sum(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """``v``'s lanes summed in one fixed tree, halves first (``v[:n/2] + v[n/2:]`` until one
    lane is left), with no reassociation flags: the same additions whatever the target's
    vector width, where ``llvm.vector.reduce.fadd`` with reassoc follows the register width."""
    n = v.type.count
    while n > 1:
        h = n // 2
        lo = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, h), list(range(h))))
        hi = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, h), list(range(h, n))))
        v, n = b.fadd(lo, hi), h
    return b.extract_element(v, ir.Constant(I32, 0))
