"""The ``use_blas`` GEMM: one call to numpy's bundled OpenBLAS instead of generated code.

Why it is a knob and not the default: measured here the generated kernels run at
0.97-1.23x OpenBLAS's single-thread rate (benchmarks/test_gemm_kernels.py); the call ties
the object to a symbol the loader must resolve in the running process
(:func:`register_blas_symbol` before JIT or object load); OpenBLAS runs its own thread
pool unless told otherwise; and it hides the GEMM from the IR that guard diffs and
profiles. It stays as an A/B reference for the generated code (the kernel benchmark
registers the symbol); the tuner does not search it (guard/compiler/tuning/tune.py says
why).
"""

from __future__ import annotations

import ctypes
import glob
import os

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir

from guard.compiler.codegen.gemm.schedule import GemmSpec
from guard.compiler.codegen.irutil import (
    F32,
    F32P,
    I32,
    I64,
    Epilogue,
    add,
    declare,
    elem_ptr,
    for_loop,
    lane_mask,
    masked_load,
    masked_store,
    mul,
    splat,
    tiles,
    vload,
    vstore,
)

BLAS_SYMBOL = "scipy_cblas_sgemm64_"
_CBLAS_ROW_MAJOR, _CBLAS_NO_TRANS = 101, 111


def blas_library_path() -> str:
    """numpy's bundled OpenBLAS (ILP64, symbols suffixed ``64_``)."""
    libs = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    hits = sorted(glob.glob(os.path.join(libs, "libscipy_openblas64_*.so*")))
    if not hits:
        raise RuntimeError(
            f"no libscipy_openblas64_*.so in {libs}: the installed numpy does not bundle OpenBLAS; use a schedule with use_blas=False"
        )
    return hits[0]


def blas_sgemm_address() -> int:
    lib = ctypes.CDLL(blas_library_path())
    return ctypes.cast(getattr(lib, BLAS_SYMBOL), ctypes.c_void_p).value or 0


def register_blas_symbol() -> None:
    """Make ``scipy_cblas_sgemm64_`` resolvable by llvmlite's JIT and object loader."""

    llvm.add_symbol(BLAS_SYMBOL, blas_sgemm_address())


def emit_blas_call(
    k: GemmSpec, builder: ir.IRBuilder, a: ir.Value, b: ir.Value, bias: ir.Value, c: ir.Value,
    epilogue: Epilogue | None, b_packed: bool, res: ir.Value | None = None,
) -> None:  # fmt: skip
    """C = op(A) @ B by one ``scipy_cblas_sgemm64_`` call, then bias and epilogue as a
    vector pass over C (a residual is copied into C first and the call adds to it)."""
    M, N, K = k.M, k.N, k.K
    i32 = lambda v: ir.Constant(I32, v)  # noqa: E731
    i64 = lambda v: ir.Constant(I64, v)  # noqa: E731
    sgemm = declare(
        builder.module,
        BLAS_SYMBOL,
        ir.VoidType(),
        [I32, I32, I32, I64, I64, I64, F32, F32P, I64, F32P, I64, F32, F32P, I64],
    )
    ta = 112 if k.trans_a else _CBLAS_NO_TRANS
    tb = 112 if (k.trans_b and not b_packed) else _CBLAS_NO_TRANS
    lda = M if k.trans_a else K
    ldb = K if tb == 112 else N
    W = k.vector_width
    if res is not None:
        # C = R first, then sgemm with beta 1: correct when R is C itself (in place)
        def copy_row(m: ir.Value) -> None:
            def vec(n: ir.Value, width: int) -> None:
                off = add(builder, mul(builder, m, N), n)
                if width < W:
                    mask = lane_mask(W, width)
                    v = masked_load(builder, elem_ptr(builder, res, off), W, mask)
                    masked_store(builder, v, elem_ptr(builder, c, off), mask)
                else:
                    vstore(
                        builder,
                        vload(builder, elem_ptr(builder, res, off), W),
                        elem_ptr(builder, c, off),
                    )

            tiles(builder, N, W, vec)

        for_loop(builder, 0, M, 1, copy_row)
    builder.call(
        sgemm,
        [
            i32(_CBLAS_ROW_MAJOR),
            i32(ta),
            i32(tb),
            i64(M),
            i64(N),
            i64(K),
            ir.Constant(F32, 1.0),
            a,
            i64(lda),
            b,
            i64(ldb),
            ir.Constant(F32, 0.0 if res is None else 1.0),
            c,
            i64(N),
        ],
    )
    if k.bias == "none" and epilogue is None:
        return

    def row(m: ir.Value) -> None:
        crow = elem_ptr(builder, c, mul(builder, m, N))
        bcol = (
            splat(builder, builder.load(elem_ptr(builder, bias, m), typ=F32), W)
            if k.bias == "col"
            else None
        )

        def vec(n: ir.Value, width: int) -> None:
            mask = lane_mask(W, width) if width < W else None
            p = elem_ptr(builder, crow, n)
            v = masked_load(builder, p, W, mask) if mask is not None else vload(builder, p, W)
            if k.bias == "row":
                bp = elem_ptr(builder, bias, n)
                v = builder.fadd(
                    v,
                    masked_load(builder, bp, W, mask)
                    if mask is not None
                    else vload(builder, bp, W),
                )
            elif k.bias == "full":
                bp = elem_ptr(builder, bias, add(builder, mul(builder, m, N), n))
                v = builder.fadd(
                    v,
                    masked_load(builder, bp, W, mask)
                    if mask is not None
                    else vload(builder, bp, W),
                )
            elif bcol is not None:
                v = builder.fadd(v, bcol)
            if epilogue is not None:
                v = epilogue(builder, v)
            masked_store(builder, v, p, mask) if mask is not None else vstore(builder, v, p)

        tiles(builder, N, W, vec)

    for_loop(builder, 0, M, 1, row)
