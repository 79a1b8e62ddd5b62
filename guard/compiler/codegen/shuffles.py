"""Moving vectors through registers: a square transpose of row vectors, and a store of a
vector's leading lanes as whole narrower vectors (no mask, no lane past them touched).
The conv tile's NCHW output (conv/direct.py) and the tiled Transpose (emit_tensor.py)."""

from __future__ import annotations

import llvmlite.ir as ir

from guard.compiler.codegen.irutil import I32, add, store


def transpose_square(b: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """rows[i][j] -> rows[j][i] for n row vectors of n lanes (n a power of two): log2(n)
    stages of two-input shuffles (vpermt2ps on AVX-512), no scalar traffic."""
    n = len(rows)
    r = list(rows)
    d = n // 2
    while d >= 1:
        lo = ir.Constant(
            ir.VectorType(I32, n), [j if (j & d) == 0 else n + j - d for j in range(n)]
        )
        hi = ir.Constant(
            ir.VectorType(I32, n), [j + d if (j & d) == 0 else n + j for j in range(n)]
        )
        for i in range(n):
            if i & d:
                continue
            a, c = r[i], r[i + d]
            r[i], r[i + d] = b.shuffle_vector(a, c, lo), b.shuffle_vector(a, c, hi)
        d //= 2
    return r


def store_pieces(
    b: ir.IRBuilder, value: ir.Value, base: ir.Value, index: ir.Value, lanes: int
) -> None:
    """Store the first ``lanes`` lanes of the vector ``value`` at ``base[index]`` as whole
    narrower vectors of powers of two (8 + 4 + 2 for 14 lanes), no mask and no lane past
    ``lanes`` touched."""
    n = value.type.count
    if lanes >= n:
        store(b, value, base, index)
        return
    off, p = 0, n
    while off < lanes:
        while p > lanes - off:
            p //= 2
        at = add(b, index, off)
        if p == 1:
            store(b, b.extract_element(value, ir.Constant(I32, off)), base, at)
        else:
            idx = ir.Constant(ir.VectorType(I32, p), list(range(off, off + p)))
            store(b, b.shuffle_vector(value, ir.Constant(value.type, None), idx), base, at)
        off += p
