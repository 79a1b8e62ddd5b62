"""The per-target table: every shape the generated code takes from the machine, in one place.

One row per instruction-set class the code generator emits for (``avx512``, ``avx2``,
``sse``, ``neon``), derived from three facts: the float lanes of a vector register, the
number of architectural vector registers, and the L1d/L2 cache sizes (the manifest's host
facts when the target is the host, the class's typical sizes otherwise). From them:

- ``channel_block``: the channel block of the blocked activation layout (``NCHW16c`` with
  16 lanes, ``NCHW8c`` with 8, ``NCHW4c`` with NEON's 4): one vector of channels;
- ``layouts``: the layouts the layout pass tries, in order (blocked first, then NHWC);
- ``conv_wide_tile``: the direct convolution's column tile on a wide row (enough
  independent FMA chains to hide the FMA latency, with room for the weights and a
  broadcast: 14 of 32 registers; 7 of 16, where every FMA also needs a broadcast load);
- ``gemm_mr_cap``: the GEMM micro-tile's row cap (8 rows x 2 vectors of 32 registers,
  6 x 2 of 16: the largest tiles LLVM keeps in registers);
- ``gemm_kc_bytes`` / ``gemm_nc_bytes``: a B micro-panel fits L1d, a ``kc x nc`` block
  of B half of L2;
- ``int_dot``: the integer dot-product capability, the instruction the int8 kernels
  accumulate ``u8 x s8`` products with (:data:`INT_DOTS`); it is LLVM's answer for the
  target's features (guard.compiler.codegen.llvm_target), never a CPU name.

The IR layer holds it (the layout pass and the code generator both read it); the code
generator decides the class from LLVM itself (guard.compiler.codegen.llvm_target).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass

# (lanes, registers, L1d bytes, L2 bytes) per class when the host's caches are not known.
_CLASSES: dict[str, tuple[int, int, int, int]] = {
    "avx512": (16, 32, 48 * 1024, 1024 * 1024),
    "avx2": (8, 16, 32 * 1024, 512 * 1024),
    "sse": (4, 16, 32 * 1024, 256 * 1024),
    "neon": (4, 32, 64 * 1024, 1024 * 1024),
}
ISAS = tuple(_CLASSES)

# The integer dot-product capabilities, each with the LLVM features it needs to run. Every
# one computes the exact int32 sum of four u8 x s8 products per lane (the int8 kernels'
# step); they differ in speed only, never in the result:
#   none         portable IR (byte planes, 32-bit multiplies): SSE2, anything unknown
#   avx2         vpmaddwd on 16-bit halves, 8 lanes (never vpmaddubsw, which saturates)
#   avx512bw     vpmaddwd on 16-bit halves, 16 lanes (AVX-512 without VNNI)
#   avx_vnni     {vex} vpdpbusd, 8 lanes
#   avx512_vnni  vpdpbusd, 16 lanes
#   neon         portable IR, which LLVM lowers to smull/sadalp
#   neon_dotprod sdot on (u8 - 128) x s8, the 128 x column sum added back
#   neon_i8mm    usdot
INT_DOT_FEATURES: dict[str, tuple[str, ...]] = {
    "none": (),
    "avx2": ("avx2",),
    "avx512bw": ("avx512bw",),
    "avx_vnni": ("avxvnni",),
    "avx512_vnni": ("avx512bw", "avx512vnni"),
    "neon": ("neon",),
    "neon_dotprod": ("neon", "dotprod"),
    "neon_i8mm": ("neon", "dotprod", "i8mm"),
}
INT_DOTS = tuple(INT_DOT_FEATURES)


@dataclass(frozen=True)
class TargetTable:
    isa: str
    vector_width: int
    registers: int
    l1d_bytes: int
    l2_bytes: int
    int_dot: str = "none"

    @property
    def channel_block(self) -> int:
        return self.vector_width

    @property
    def blocked_layout(self) -> str:
        return f"NCHW{self.channel_block}c"

    @property
    def layouts(self) -> tuple[str, ...]:
        return (self.blocked_layout, "NHWC")

    @property
    def conv_wide_tile(self) -> int:
        # 16 registers: 7 columns, not 12. Each FMA there needs its own broadcast load
        # (no embedded broadcast before AVX-512) and 12 accumulators leave LLVM too few
        # registers: measured on znver5 running x86-64-v3 code, 3x3 convolutions of 64-256
        # channels at 14-56 columns ran at 59-74 GFLOP/s with 12 x 1 and 103-107 with 7 x 1.
        return 14 if self.registers >= 32 else 7

    @property
    def gemm_mr_cap(self) -> int:
        # 32 registers: 8 rows, not 12. LLVM spills accumulators of the 12 x 2-vector tile
        # (24 of them) inside its k loop on every AVX-512 CPU it schedules for (it hoists a
        # k step's 12 broadcasts); 8 x 2 and 10 x 2 keep them in registers. Measured on
        # znver4, where a zmm spill costs two 256-bit stores: the zoo transformer ran at
        # 3.34 ms with 12 rows, 2.13 with 8 and 2.20 with 10, 1 thread.
        return 8 if self.registers >= 32 else 6

    @property
    def gemm_kc_bytes(self) -> int:
        return self.l1d_bytes * 2 // 3  # leave room for the A rows and the C tile

    @property
    def gemm_nc_bytes(self) -> int:
        return self.l2_bytes // 2

    def to_dict(self) -> dict[str, object]:
        return {
            "isa": self.isa,
            "vector_width": self.vector_width,
            "registers": self.registers,
            "l1d_bytes": self.l1d_bytes,
            "l2_bytes": self.l2_bytes,
            "channel_block": self.channel_block,
            "layouts": list(self.layouts),
            "conv_wide_tile": self.conv_wide_tile,
            "gemm_mr_cap": self.gemm_mr_cap,
            "int_dot": self.int_dot,
        }


def table_for(
    isa: str, l1d_bytes: int | None = None, l2_bytes: int | None = None, int_dot: str = "none"
) -> TargetTable:
    """The row of ``isa``, with the given cache sizes (the class's typical ones if None) and
    integer dot-product capability."""
    lanes, regs, l1, l2 = _CLASSES[isa]
    if int_dot not in INT_DOT_FEATURES:
        raise ValueError(f"int_dot={int_dot!r}: expected one of {INT_DOTS}")
    return TargetTable(isa, lanes, regs, int(l1d_bytes or l1), int(l2_bytes or l2), int_dot)


def table_for_width(width: int) -> TargetTable:
    """The row for code that knows only its vector width (a kernel emitted outside a build:
    tests, the tuner): 16 lanes AVX-512, 8 AVX2, 4 NEON."""
    return table_for({16: "avx512", 8: "avx2"}.get(width, "neon"))


DEFAULT_TABLE = table_for("avx512")  # optimize() without a target: the layouts it always had

_ACTIVE: contextvars.ContextVar[TargetTable | None] = contextvars.ContextVar(
    "guard_target_table", default=None
)


@contextlib.contextmanager
def using_table(table: TargetTable) -> Iterator[TargetTable]:
    """Make ``table`` the one :func:`active_table` gives while a build emits its kernels."""
    token = _ACTIVE.set(table)
    try:
        yield table
    finally:
        _ACTIVE.reset(token)


def active_table(width: int) -> TargetTable:
    """The build's table (:func:`using_table`) when its width is ``width``, else the row for
    the width alone."""
    t = _ACTIVE.get()
    return t if t is not None and t.vector_width == width else table_for_width(width)
