"""The GEMM's schedule (its knob space), the default heuristic, and what the loop-nest
emitter reads of a kernel (:class:`GemmSpec`, the seam between driver.py and emit.py).

Knobs: micro-tile ``mr x nr`` (``nr`` a multiple of the vector width), cache blocks
``kc/mc/nc``, k-unroll, loop order inside a macro-block (``"nm"``: panels outermost,
``"mn"``: row tiles outermost), and ``use_blas`` (call OpenBLAS instead: blas.py).
driver.py documents the algorithm they parameterise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from guard.compiler.ir.isa_table import TargetTable, active_table

LOOP_ORDERS = ("nm", "mn")
FEW_ROW_TILES = 6  # up to this many row tiles, the default takes the whole K as one k-chunk
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
    """Architectural vector registers (the target table's): AVX-512 and NEON 32, AVX2 16."""
    return active_table(vector_width).registers


def default_gemm_schedule(
    M: int,
    N: int,
    K: int,
    vector_width: int,
    registers: int | None = None,
    table: TargetTable | None = None,
) -> GemmSchedule:
    """A heuristic that is correct for any shape and near the best measured tile here.

    Accumulators ``mr * nr/W`` fill the register file less the B vectors and one
    broadcast; at least ~8 independent FMA chains hide the FMA latency, so a short M
    (GEMV) gets wider panels instead of rows. ``kc`` keeps a B micro-panel in L1 (32 KiB),
    ``nc`` a ``kc x nc`` block of B in half of L2; with at most :data:`FEW_ROW_TILES` row
    tiles ``kc`` is the whole K where a ``K x nr`` panel fits a quarter of L2. Unroll 2:
    measured here, 1, 2, 4 and 8 run at the same speed (the core's out-of-order window
    unrolls for us) while 4 and 8 compile 1.5-2x slower.
    """
    W = vector_width
    table = table or active_table(W)
    regs = registers or table.registers
    n_vecs = -(-N // W)
    if M >= 4:
        nvec = min(2, n_vecs)
        mr = min(M, (regs - nvec - 1) // nvec)
        if mr >= 8:
            mr = min(mr, table.gemm_mr_cap if regs == table.registers else 8 if regs >= 32 else 6)
    else:
        mr = M
        nvec = max(1, min(n_vecs, (regs - 1) // (mr + 1), 8))
    nr = nvec * W
    kc = min(K, max(64, table.gemm_kc_bytes // (nr * 4)))
    nc = max(nr, min(-(-N // nr) * nr, (table.gemm_nc_bytes // (kc * 4)) // nr * nr))
    mc = max(mr, min(-(-M // mr) * mr, 144 // mr * mr if mr <= 144 else mr))
    if -(-M // mr) <= FEW_ROW_TILES and K * nr * 4 <= table.gemm_nc_bytes // 2:
        # A micro-panel read by few row tiles gains little from staying in L1; one k-chunk
        # streams the packed B front to back (a panel's K x nr, then the next panel, one
        # sequential run) and stores C once: M=24, N=8210, K=1024 4.50 -> 4.02 ms on znver4.
        kc = K
    return GemmSchedule(mr=mr, nr=nr, kc=kc, mc=mc, nc=nc, unroll=2 if kc >= 2 else 1)


class GemmSpec(Protocol):
    """What the loop-nest emitter (emit.py) and the BLAS call read of a GemmKernel."""

    @property
    def M(self) -> int: ...
    @property
    def N(self) -> int: ...
    @property
    def K(self) -> int: ...
    @property
    def trans_a(self) -> bool: ...
    @property
    def trans_b(self) -> bool: ...
    @property
    def bias(self) -> str: ...
    @property
    def vector_width(self) -> int: ...
    @property
    def sched(self) -> GemmSchedule: ...
    @property
    def row_stride(self) -> int: ...
