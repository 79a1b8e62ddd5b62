"""Register-tiled GEMM kernels emitted with llvmlite, specialised to constant shapes.

``C[M,N] = op(A) @ op(B) (+ bias) (+ R)``, then an optional epilogue, row-major float32.
The structure is GotoBLAS/BLIS's: B is cut into panels ``nr`` columns wide (``nr`` a
multiple of the vector width W), packed once at build time (weights are constants) as
``[panel][k][nr]`` with the last panel zero-padded, so the micro-kernel loads whole
vectors and never masks B. A is streamed, not packed: for each k the kernel broadcasts
``mr`` scalars of A (an embedded-broadcast memory operand of the FMA on AVX-512) and
issues ``mr * nr/W`` vector FMAs into accumulators that stay in registers for the whole
k-chunk. Cache blocking: ``kc`` (k-chunk: a B micro-panel ``kc x nr`` stays in L1),
``mc`` rows and ``nc`` columns per macro-block (the ``kc x nc`` block of B stays in L2).
Loop order ``"nm"`` runs the panels outermost inside a macro-block (B micro-panel reused
across all row tiles), ``"mn"`` the row tiles outermost (the A rows stay in L1). A B known
only at run time is streamed in place (``[K,N]``, last vector masked) or, stored ``[N,K]``,
gathered into a packed stack buffer per ``kc x nc`` block.

Tails are never scalar loops: a short last row tile gets its own micro-kernel with fewer
rows, and the last vector of a short panel is stored (and, for a streamed B, loaded) with
``llvm.masked.store`` / ``llvm.masked.load`` under a run-time lane count. With ``K > kc``
the first k-chunk stores C, middle chunks accumulate into C, and the last chunk adds C,
the bias and the epilogue in registers before the one final store. The micro-kernel
(microkernel.py) is shared by every GEMM and convolution of a module with the same tile.

Batched GEMM: ``batch`` with element strides ``stride_a``, ``stride_b``, ``stride_c``
(``stride_b = 0``: one B, e.g. a weight, shared by every batch); the generated function
loops over the batch itself, so a batched MatMul is still one call. The bias is shared.

``use_blas``: the schedule may instead call OpenBLAS's ``scipy_cblas_sgemm64_`` (ILP64,
shipped in numpy.libs). Why it is a knob and not the default: measured here the generated
kernels run at 0.97-1.23x OpenBLAS's single-thread rate (benchmarks/test_gemm_kernels.py);
the call ties the object to a symbol the loader must resolve in the running process
(:func:`register_blas_symbol` before JIT or object load); OpenBLAS runs its own thread
pool unless told otherwise; and it hides the GEMM from the IR that guard diffs and
profiles. It stays for targets where a vendor BLAS wins, and as an A/B reference for the
generated code. With ``use_blas`` the "packed" B is plain row-major ``op(B)`` ``[K, N]``,
and bias and epilogue run as a vector pass over C after the call.

Vector helpers (FMA intrinsics, masked loads/stores, gathers, loops) live in
microkernel.py for reuse by other emitters; gemm_emit.py holds the loop nest.
"""

from __future__ import annotations

import ctypes
import glob
import os
from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np
from llvmlite import ir

from .gemm_emit import GemmEmitter
from .microkernel import (
    F32,
    F32P,
    I32,
    I64,
    Epilogue,
    for_loop,
    fptr,
    iadd,
    imul,
    intrinsic,
    lane_mask,
    masked_load,
    masked_store,
    splat,
    tiles,
    vload,
    vstore,
)

BLAS_SYMBOL = "scipy_cblas_sgemm64_"
_CBLAS_ROW_MAJOR, _CBLAS_NO_TRANS = 101, 111

# ---------------------------------------------------------------------------------------
# Schedule
# ---------------------------------------------------------------------------------------

LOOP_ORDERS = ("nm", "mn")
# "row": one per column n (length N), "col": one per row m (length M), "full": [M, N]
BIAS_KINDS = ("none", "row", "col", "full")


@dataclass(frozen=True)
class GemmSchedule:
    """The knobs of one GEMM: micro-tile ``mr x nr``, cache blocks ``kc/mc/nc``, k-unroll,
    loop order inside a macro-block, and whether the call goes to OpenBLAS instead."""

    mr: int
    nr: int
    kc: int
    mc: int
    nc: int
    unroll: int = 4
    loop_order: str = "nm"
    use_blas: bool = False

    def validate(self, vector_width: int) -> None:
        if self.nr % vector_width or self.nr <= 0:
            raise ValueError(
                f"GemmSchedule.nr={self.nr} must be a positive multiple of the vector width {vector_width}"
            )
        if self.mr <= 0 or self.kc <= 0 or self.unroll <= 0:
            raise ValueError(f"GemmSchedule mr, kc and unroll must be positive: {self}")
        if self.mc % self.mr or self.nc % self.nr or self.mc <= 0 or self.nc <= 0:
            raise ValueError(f"GemmSchedule.mc must be a multiple of mr and nc of nr: {self}")
        if self.loop_order not in LOOP_ORDERS:
            raise ValueError(
                f"GemmSchedule.loop_order={self.loop_order!r}: expected one of {LOOP_ORDERS}"
            )


def vector_registers(vector_width: int) -> int:
    """Architectural vector registers for a width: AVX-512 and NEON 32, AVX2 16."""
    return 16 if vector_width == 8 else 32


def default_gemm_schedule(
    M: int, N: int, K: int, vector_width: int, registers: int | None = None
) -> GemmSchedule:
    """A heuristic that is correct for any shape and near the best measured tile here.

    Accumulators ``mr * nr/W`` fill the register file less the B vectors and one
    broadcast; at least ~8 independent FMA chains hide the FMA latency, so a short M
    (GEMV) gets wider panels instead of rows. ``kc`` keeps a B micro-panel in L1 (32 KiB),
    ``nc`` a ``kc x nc`` block of B in half of L2. Unroll 2: measured here, 1, 2, 4 and 8
    run at the same speed (the core's out-of-order window unrolls for us) while 4 and 8
    compile 1.5-2x slower.
    """
    W = vector_width
    regs = registers or vector_registers(W)
    n_vecs = -(-N // W)
    if M >= 4:
        nvec = min(2, n_vecs)
        mr = min(M, (regs - nvec - 1) // nvec)
        if mr >= 8:
            mr = min(mr, 12 if regs >= 32 else 6)
    else:
        mr = M
        nvec = max(1, min(n_vecs, (regs - 1) // (mr + 1), 8))
    nr = nvec * W
    kc = min(K, max(64, (32 * 1024) // (nr * 4)))
    nc = max(nr, min(-(-N // nr) * nr, ((512 * 1024) // (kc * 4)) // nr * nr))
    mc = max(mr, min(-(-M // mr) * mr, 144 // mr * mr if mr <= 144 else mr))
    return GemmSchedule(mr=mr, nr=nr, kc=kc, mc=mc, nc=nc, unroll=2 if kc >= 2 else 1)


# ---------------------------------------------------------------------------------------
# BLAS dispatch
# ---------------------------------------------------------------------------------------


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
    import llvmlite.binding as llvm

    llvm.add_symbol(BLAS_SYMBOL, blas_sgemm_address())


# ---------------------------------------------------------------------------------------
# The kernel
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GemmKernel:
    """One GEMM specialised to its shapes; see the module docstring for the algorithm.

    ``bias``: "none", "row" (length N, one per column: a Gemm/MatMul+Add bias), "col"
    (length M, one per row: a convolution's per-channel bias), "full" (``[M, N]``, ONNX
    Gemm's C at full shape); shared by every batch element. ONNX Gemm's ``alpha`` and
    ``beta`` fold into the constant B and bias at build time, or into the epilogue."""

    M: int
    N: int
    K: int
    trans_a: bool = False
    trans_b: bool = False
    bias: str = "none"
    vector_width: int = 16
    schedule: GemmSchedule | None = None
    batch: int = 1
    stride_a: int | None = None
    stride_b: int | None = None
    stride_c: int | None = None
    residual: bool = False
    _sched: GemmSchedule = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if min(self.M, self.N, self.K, self.batch) <= 0:
            raise ValueError(
                f"GemmKernel needs positive M, N, K, batch: {self.M}x{self.N}x{self.K} batch {self.batch}"
            )
        if self.bias not in BIAS_KINDS:
            raise ValueError(f"GemmKernel.bias={self.bias!r}: expected one of {BIAS_KINDS}")
        sched = self.schedule or default_gemm_schedule(self.M, self.N, self.K, self.vector_width)
        sched.validate(self.vector_width)
        object.__setattr__(self, "_sched", sched)

    @property
    def sched(self) -> GemmSchedule:
        return self._sched

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.M * self.N * self.K

    def _strides(self) -> tuple[int, int, int]:
        sa = self.M * self.K if self.stride_a is None else self.stride_a
        sb = self.K * self.N if self.stride_b is None else self.stride_b
        sc = self.M * self.N if self.stride_c is None else self.stride_c
        return sa, sb, sc

    def packed_size(self) -> int:
        """Floats in the packed B of one batch element."""
        if self.sched.use_blas:
            return self.K * self.N
        return -(-self.N // self.sched.nr) * self.K * self.sched.nr

    def pack_b(self, b: np.ndarray) -> np.ndarray:
        """Pack a constant B (``[K,N]``, or ``[N,K]`` with ``trans_b``; a leading batch dim
        when ``stride_b != 0`` and ``batch > 1``) into the kernel's float32 1-D layout."""
        b = np.asarray(b, dtype=np.float32)
        if b.ndim == 3:
            return np.concatenate([self.pack_b(x) for x in b])
        want = (self.N, self.K) if self.trans_b else (self.K, self.N)
        if b.shape != want:
            raise ValueError(f"GemmKernel.pack_b: B has shape {b.shape}, expected {want}")
        bk = b.T if self.trans_b else b
        if self.sched.use_blas:
            return np.ascontiguousarray(bk).reshape(-1)
        nr = self.sched.nr
        panels = -(-self.N // nr)
        padded = np.zeros((self.K, panels * nr), np.float32)
        padded[:, : self.N] = bk
        return np.ascontiguousarray(padded.reshape(self.K, panels, nr).transpose(1, 0, 2)).reshape(
            -1
        )

    # -- emission ---------------------------------------------------------------------

    def emit(
        self,
        module: ir.Module,
        name: str,
        epilogue: Epilogue | None = None,
        b_packed: bool = True,
        epilogue_key: Hashable | None = None,
    ) -> ir.Function:
        """``void name(const float* A, const float* B, const float* bias, float* C)``.

        ``B`` is :meth:`pack_b`'s output when ``b_packed``, else op(B) as stored at run time
        (row-major ``[K,N]``, or ``[N,K]`` with ``trans_b``, repacked on the fly into a
        stack buffer). ``bias`` may be null when ``bias == "none"``. With ``residual`` the
        function takes a fifth argument, ``const float* R`` laid out like C (advancing by
        ``stride_c`` per batch), added before the epilogue: a fused ``Add`` of another
        tensor (a residual connection). ``R`` may be ``C`` itself (an in-place Add): it is
        read by the first k-chunk, before C is written. Micro-kernels are
        shared within the module; ``epilogue_key`` (e.g. the fused op chain as a tuple)
        lets kernels whose epilogues are equal but built by distinct callables share them.
        """
        fnty = ir.FunctionType(ir.VoidType(), [F32P] * (5 if self.residual else 4))
        fn = ir.Function(module, fnty, name)
        for arg, nm in zip(fn.args, ("A", "B", "bias", "C", "R"), strict=False):
            arg.name = nm
        if not self.residual:  # else C may be R itself
            fn.args[3].add_attribute("noalias")
        # Loop control and calls only (the FMAs live in the micro-kernels): unrolling it
        # buys nothing and costs compile time and object size.
        fn.attributes.add("optsize")
        builder = ir.IRBuilder(fn.append_basic_block("entry"))
        a, b, bias, c = fn.args[:4]
        res = fn.args[4] if self.residual else None
        sa, sb, sc = self._strides()
        packed_stride = self.packed_size() if (b_packed and sb) else sb

        def one(bi: ir.Value) -> None:
            pa = fptr(builder, a, imul(builder, bi, sa))
            pb = fptr(builder, b, imul(builder, bi, packed_stride if b_packed else sb))
            pc = fptr(builder, c, imul(builder, bi, sc))
            pr = None if res is None else fptr(builder, res, imul(builder, bi, sc))
            if self.sched.use_blas:
                self._emit_blas(builder, pa, pb, bias, pc, epilogue, b_packed, pr)
            else:
                em = GemmEmitter(self, name, epilogue, b_packed, epilogue_key)
                em.res = pr
                em.emit(builder, pa, pb, bias, pc)

        for_loop(builder, 0, self.batch, 1, one)
        builder.ret_void()
        return fn

    def _emit_blas(self, builder, a, b, bias, c, epilogue, b_packed, res=None) -> None:
        M, N, K = self.M, self.N, self.K
        i32 = lambda v: ir.Constant(I32, v)  # noqa: E731
        i64 = lambda v: ir.Constant(I64, v)  # noqa: E731
        sgemm = intrinsic(
            builder.module,
            BLAS_SYMBOL,
            ir.VoidType(),
            [I32, I32, I32, I64, I64, I64, F32, F32P, I64, F32P, I64, F32, F32P, I64],
        )
        ta = 112 if self.trans_a else _CBLAS_NO_TRANS
        tb = 112 if (self.trans_b and not b_packed) else _CBLAS_NO_TRANS
        lda = M if self.trans_a else K
        ldb = K if tb == 112 else N
        W = self.vector_width
        if res is not None:
            # C = R first, then sgemm with beta 1: correct when R is C itself (in place)
            def copy_row(m: ir.Value) -> None:
                def vec(n: ir.Value, width: int) -> None:
                    off = iadd(builder, imul(builder, m, N), n)
                    if width < W:
                        mask = lane_mask(W, width)
                        v = masked_load(builder, fptr(builder, res, off), W, mask)
                        masked_store(builder, v, fptr(builder, c, off), mask)
                    else:
                        vstore(
                            builder,
                            vload(builder, fptr(builder, res, off), W),
                            fptr(builder, c, off),
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
        if self.bias == "none" and epilogue is None:
            return

        def row(m: ir.Value) -> None:
            crow = fptr(builder, c, imul(builder, m, N))
            bcol = (
                splat(builder, builder.load(fptr(builder, bias, m), typ=F32), W)
                if self.bias == "col"
                else None
            )

            def vec(n: ir.Value, width: int) -> None:
                mask = lane_mask(W, width) if width < W else None
                p = fptr(builder, crow, n)
                v = masked_load(builder, p, W, mask) if mask is not None else vload(builder, p, W)
                if self.bias == "row":
                    bp = fptr(builder, bias, n)
                    v = builder.fadd(
                        v,
                        masked_load(builder, bp, W, mask)
                        if mask is not None
                        else vload(builder, bp, W),
                    )
                elif self.bias == "full":
                    bp = fptr(builder, bias, iadd(builder, imul(builder, m, N), n))
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
