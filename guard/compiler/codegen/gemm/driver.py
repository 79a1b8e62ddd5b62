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
(microkernel.py) is shared by every GEMM of a module with the same tile.

Batched GEMM: ``batch`` with element strides ``stride_a``, ``stride_b``, ``stride_c``
(``stride_b = 0``: one B, e.g. a weight, shared by every batch); the generated function
loops over the batch itself, so a batched MatMul is still one call. The bias is shared.

``use_blas``: the schedule may instead call OpenBLAS's ``scipy_cblas_sgemm64_`` (ILP64,
shipped in numpy.libs; blas.py says why it is not the default). With ``use_blas``
the "packed" B is plain row-major ``op(B)`` ``[K, N]``, and bias and epilogue run as a
vector pass over C after the call.

Files (guard/compiler/codegen/gemm/): schedule.py holds the knobs and the default
heuristic, emit.py the loop nest, microkernel.py the micro-kernel, blas.py the BLAS call,
emitter.py the ops on it; ../irutil.py the IR helpers.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np
from llvmlite import ir

from guard.compiler.codegen.gemm.blas import BLAS_SYMBOL, emit_blas_call, register_blas_symbol
from guard.compiler.codegen.gemm.emit import GemmEmitter
from guard.compiler.codegen.gemm.schedule import (
    BIAS_KINDS,
    GemmSchedule,
    default_gemm_schedule,
    vector_registers,
)
from guard.compiler.codegen.irutil import F32P, Epilogue, elem_ptr, for_loop, mul

__all__ = [
    "BLAS_SYMBOL",
    "GemmKernel",
    "GemmSchedule",
    "default_gemm_schedule",
    "register_blas_symbol",
    "vector_registers",
]


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
    ldc: int | None = None  # C's row stride (elements), N when None: wider in a column task
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
        if self.ldc not in (None, self.N) and (sched.use_blas or self.bias == "full"):
            raise ValueError(
                f"GemmKernel.ldc={self.ldc} (a column run) needs a packed B and no full bias"
            )
        object.__setattr__(self, "_sched", sched)

    @property
    def sched(self) -> GemmSchedule:
        return self._sched

    @property
    def row_stride(self) -> int:
        """C's (and a residual's) row stride in elements."""
        return self.N if self.ldc is None else self.ldc

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.M * self.N * self.K

    def _strides(self) -> tuple[int, int, int]:
        sa = self.M * self.K if self.stride_a is None else self.stride_a
        sb = self.K * self.N if self.stride_b is None else self.stride_b
        sc = self.M * self.row_stride if self.stride_c is None else self.stride_c
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
            pa = elem_ptr(builder, a, mul(builder, bi, sa))
            pb = elem_ptr(builder, b, mul(builder, bi, packed_stride if b_packed else sb))
            pc = elem_ptr(builder, c, mul(builder, bi, sc))
            pr = None if res is None else elem_ptr(builder, res, mul(builder, bi, sc))
            if self.sched.use_blas:
                emit_blas_call(self, builder, pa, pb, bias, pc, epilogue, b_packed, pr)
            else:
                em = GemmEmitter(self, name, epilogue, b_packed, epilogue_key)
                em.res = pr
                em.emit(builder, pa, pb, bias, pc)

        for_loop(builder, 0, self.batch, 1, one)
        builder.ret_void()
        return fn
