"""The direct convolution's geometry and schedule: what the emitter, the packer and the
tuner agree on (guard/compiler/codegen/conv/emitter.py emits it).

:class:`Geometry` is everything about one convolution that follows from its attributes,
shapes and the target's vector width ``L``: the mode (``dense``, ``depthwise``,
``grouped``), the output vectors ``KV`` (lanes along output channels), the interior
columns, the element strides of each layout, and the packing of the weights as
``[KV][C/g][R][S][L]`` (independent of the schedule, so every schedule reads one packed
constant).

:class:`ConvSchedule` is the knob space of the register tile:

- ``ow_block``: output columns per tile (``T``), one accumulator vector per column and
  output-channel vector;
- ``oc_block``: output-channel vectors per tile (``KB``): each broadcast input scalar
  feeds ``KB`` FMAs, each weight vector ``T``; ``KB * T`` accumulators plus ``KB``
  weight vectors and one broadcast must fit the register file, or the tile spills;
- ``unroll``: input channels per step of the reduction loop (dense and grouped modes;
  the depthwise kernel has no channel loop and ignores it);
- ``loop_order``: ``"kv_oh"`` runs the output-channel blocks outside the output rows (a
  block's weights stay in L1 across rows), ``"oh_kv"`` the rows outside the blocks (an
  input row band stays in L1 across blocks).

:func:`default_conv_schedule` is the heuristic every build uses without a tuning cache.
:func:`conv_space` enumerates every valid point for one geometry (the tuner's candidates,
and the test that checks each against the reference kernel).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from guard.compiler.ir.isa_table import TargetTable, active_table
from guard.compiler.ir.layout import block_of

LOOP_ORDERS = ("kv_oh", "oh_kv")
UNROLLS = (1, 2, 4)
MAX_OC_BLOCK = 4


def vector_registers(width: int) -> int:
    """Architectural vector registers (the target table's): AVX-512 and NEON 32, AVX2 16."""
    return active_table(width).registers


@dataclass(frozen=True)
class ConvSchedule:
    """One point of the direct convolution's knob space (see the module docstring).

    The defaults of the later fields are the emitter's behaviour before they existed, so
    a cache entry that names only ``ow_block`` means what it meant when it was tuned."""

    ow_block: int
    oc_block: int = 1
    unroll: int = 1
    loop_order: str = "kv_oh"

    def validate(self, vector_width: int) -> None:
        regs = vector_registers(vector_width)
        if self.ow_block < 1 or self.oc_block < 1:
            raise ValueError(f"ConvSchedule ow_block and oc_block must be positive: {self}")
        if vector_width > 1 and self.oc_block * (self.ow_block + 1) + 1 > regs:
            raise ValueError(
                f"ConvSchedule oc_block={self.oc_block} x ow_block={self.ow_block} spills: "
                f"{self.oc_block} x ({self.ow_block} accumulators + a weight vector) + a "
                f"broadcast must fit {regs} vector registers"
            )
        if not 1 <= self.unroll <= 8:
            raise ValueError(f"ConvSchedule.unroll={self.unroll} must be 1..8")
        if self.loop_order not in LOOP_ORDERS:
            raise ValueError(
                f"ConvSchedule.loop_order={self.loop_order!r}: expected one of {LOOP_ORDERS}"
            )


class Geometry:
    """Everything about one convolution that the emitter and the packer agree on."""

    def __init__(
        self, attrs: Mapping[str, Any], xshape: Sequence[int], wshape: Sequence[int], width: int
    ) -> None:
        self.layout = str(attrs.get("layout", "NCHW"))
        lay = self.layout
        if lay == "NCHW":
            self.N, self.C, self.H, self.W = xshape
        elif lay == "NHWC":
            self.N, self.H, self.W, self.C = xshape
        else:
            n, cb, h, w, blk = xshape
            self.N, self.C, self.H, self.W = n, cb * blk, h, w
        self.K, self.Cg, self.R, self.S = wshape
        self.g = int(attrs["group"])
        self.Kg = self.K // self.g
        self.sh, self.sw = attrs["strides"]
        self.dh, self.dw = attrs["dilations"]
        self.pt, self.pl, self.pb, self.pr = attrs["pads"]
        self.OH = (self.H + self.pt + self.pb - self.dh * (self.R - 1) - 1) // self.sh + 1
        self.OW = (self.W + self.pl + self.pr - self.dw * (self.S - 1) - 1) // self.sw + 1
        # The output rows this kernel writes: a row task of the thread split writes a band.
        r0, r1 = attrs.get("rows") or (0, self.OH)
        self.rows = (int(r0), int(r1))
        self.block = block_of(lay) or 0
        self.L = width
        chan_contig = lay == "NHWC" or (self.block and self.block % width == 0)
        if self.g == 1 or (self.Kg % width == 0 and (chan_contig or lay == "NCHW")):
            self.mode = "dense"
        elif self.Cg == 1 and self.Kg == 1 and chan_contig:
            self.mode = "depthwise"
        else:
            # Groups whose channel count is not a multiple of L: each group gets its own
            # vectors, the last one of a group masked (zero weights past the group).
            self.mode = "grouped"
        self.KVg = -(-self.Kg // self.L)  # vectors per group (grouped mode)
        self.KV = self.g * self.KVg if self.mode == "grouped" else -(-self.K // self.L)
        # Lanes of the last vector (of K, or of each group in grouped mode).
        self.tail = (self.Kg if self.mode == "grouped" else self.K) - (
            (self.KVg if self.mode == "grouped" else self.KV) - 1
        ) * self.L
        # Interior columns: every tap of every column inside [0, W).
        lo = -(-self.pl // self.sw) if self.pl > 0 else 0
        hi_num = self.W - 1 - self.dw * (self.S - 1) + self.pl
        hi = hi_num // self.sw + 1 if hi_num >= 0 else 0
        self.ow_lo, self.ow_hi = min(lo, self.OW), max(min(hi, self.OW), min(lo, self.OW))

    @property
    def flops(self) -> int:
        oh = self.rows[1] - self.rows[0]
        return 2 * self.N * self.K * oh * self.OW * self.Cg * self.R * self.S

    def column_tiles(self, T: int) -> tuple[int, int, list[tuple[int, int]]]:
        """How one output row is tiled ``T`` columns wide: ``(left, full, fixed)`` with
        the interior tiles looping over columns ``[left, left + full)`` and ``fixed`` the
        (first column, width) of every tile at a compile-time column: the border tiles
        (``T`` wide too, reaching into the interior: a 1-column tile would be one FMA
        chain, latency-bound) and the interior's narrower tail."""
        left = min(self.OW, -(-self.ow_lo // T) * T) if self.ow_lo > 0 else 0
        right = (
            max(left, self.OW - -(-(self.OW - self.ow_hi) // T) * T)
            if self.ow_hi < self.OW
            else self.OW
        )
        fixed = [(c, min(T, left - c)) for c in range(0, left, T)]
        inner = right - left
        full = inner // T * T
        if inner - full:
            fixed.append((left + full, inner - full))
        fixed += [(c, min(T, self.OW - c)) for c in range(right, self.OW, T)]
        return left, full, fixed

    def vectors_share_input(self, oc_block: int) -> bool:
        """Whether the ``oc_block`` vectors of every tile lie in one group, so that they
        read the same input channels (one broadcast feeds all of them)."""
        if self.mode == "depthwise":
            return False
        if self.g == 1:
            return True
        per_group = self.Kg // self.L if self.mode == "dense" else self.KVg
        return per_group % oc_block == 0

    def x_strides(self) -> tuple[int, int, int, int, int, int]:
        """(n, channel block, channel lane, h, w, block size) element strides of x."""
        return _strides(self.layout, self.C, self.H, self.W, self.block)

    def y_strides(self) -> tuple[int, int, int, int, int, int]:
        return _strides(self.layout, self.K, self.OH, self.OW, self.block)

    def pack(self, w: np.ndarray) -> np.ndarray:
        L, K = self.L, self.K
        w = np.asarray(w, np.float32)
        if self.mode == "depthwise":
            # [KV][R][S][L]: lane = channel
            dw = np.zeros((self.KV * L, self.R, self.S), np.float32)
            dw[:K] = w[:, 0]
            return np.ascontiguousarray(
                dw.reshape(self.KV, L, self.R, self.S).transpose(0, 2, 3, 1)
            )
        if self.mode == "grouped":
            # [g][KVg][Cg][R][S][L]: each group's output channels padded to whole vectors
            per = np.zeros((self.g, self.KVg * L, self.Cg, self.R, self.S), np.float32)
            per[:, : self.Kg] = w.reshape(self.g, self.Kg, self.Cg, self.R, self.S)
            pad = per.reshape(self.KV * L, self.Cg, self.R, self.S)
        else:
            pad = np.zeros((self.KV * L, self.Cg, self.R, self.S), np.float32)
            pad[:K] = w
        return np.ascontiguousarray(
            pad.reshape(self.KV, L, self.Cg, self.R, self.S).transpose(0, 2, 3, 4, 1)
        )


def tensor_reads(program: Sequence[Mapping[str, Any]], inputs: Sequence[Any]) -> list[int]:
    """The inputs a fused epilogue reads that are not one element: those run as a pass
    over the output; a single-element operand (a scalar scale or shift) is loaded once
    and broadcast in registers (conv/emitter.py), so a row task may run it."""
    refs = sorted({r for p in program for r in p["args"] if isinstance(r, int)})
    return [
        j
        for j in refs
        if inputs[j] is None or math.prod(inputs[j].shape) != 1 or inputs[j].dtype != "float32"
    ]


def _strides(lay: str, C: int, H: int, W: int, b: int) -> tuple[int, int, int, int, int, int]:
    if lay == "NCHW":
        return C * H * W, H * W, 0, W, 1, 1
    if lay == "NHWC":
        return H * W * C, 0, 1, W * C, C, C
    return C * H * W, H * W * b, 1, W * b, b, b


def default_conv_schedule(geo: Geometry, table: TargetTable | None = None) -> ConvSchedule:
    """The heuristic: correct for any shape, and near the best measured tile here.

    Every number comes from the target table (``table``, else the build's for ``geo.L``).
    With 16 registers the tile is the modelled best of :func:`row_cost`
    (:func:`_small_file_schedule`). With 32, a row at least ``T`` = 14 columns wide gets
    14-column tiles of one output-channel vector: enough independent FMA chains to hide the FMA latency,
    the reduction not unrolled (LLVM and the out-of-order core do that). A narrower row
    cannot fill such a tile, so the tile trades columns for output-channel vectors that
    share each broadcast input (when they read the same input channels): the best of
    column fill (``OW`` over the padded columns), independent chains (16 saturate two
    FMA ports of latency 4 with room) and FMAs per load, among tiles that leave 4
    registers for addresses (fuller tiles spill in LLVM's hands). Measured here (thread
    CPU time, AVX-512): resnet50's 3x3 512->512 at 7x7 ran 1.09x faster with 7 columns x
    3 vectors than with 7 x 1; at 13x13 (squeezenet) 7 x 3 and 13 x 1 ran alike and 13 x 2
    (29 registers) at 0.75-0.8x of them. Where columns share more than two taps the tile
    also holds a kernel row's inputs (:func:`_holds_row`: the 7x7 stride-2 stem gets 8 x 1).
    """
    if geo.L <= 1:
        return ConvSchedule(ow_block=8)
    table = table or active_table(geo.L)
    regs = table.registers
    wide = table.conv_wide_tile
    if regs < 32:
        return _streamed_order(geo, _small_file_schedule(geo, regs, wide), table)
    if geo.OW >= wide:
        return ConvSchedule(
            ow_block=max(t for t in range(1, wide + 1) if _holds_row(geo, 1, t, regs))
        )
    best, best_score = ConvSchedule(ow_block=max(1, geo.OW)), -1.0
    for kb in range(1, min(MAX_OC_BLOCK, geo.KV) + 1):
        if kb > 1 and not geo.vectors_share_input(kb):
            # a group of 16 vectors has no block of 3 but has blocks of 4 (alexnet's 3x3
            # 384->256 g2 at 12x12: 12 x 2, whose kernel-row loop stored and reloaded 47
            # zmm, 56.8 GFLOP/s on znver4; 4 x 4 122.7; shufflenet's 544->544 g4 7 x 3
            # 1.04x its 7 x 1)
            continue
        for t in range(1, geo.OW + 1):
            if kb * (t + 1) + 1 > regs - 4 or not _holds_row(geo, kb, t, regs):
                break
            fill = geo.OW / (-(-geo.OW // t) * t)
            score = fill * min(1.0, kb * t / 16) * min(1.0, kb * t / (kb + t) / 2)
            if score > best_score + 1e-9:
                best, best_score = ConvSchedule(ow_block=t, oc_block=kb), score
    return best


def _streamed_order(geo: Geometry, s: ConvSchedule, table: TargetTable) -> ConvSchedule:
    """16 registers: a pointwise convolution whose input is larger than L2 runs its output
    rows outside the channel blocks (``oh_kv``), so that an input row is read from L2 by
    every block instead of the whole input streamed from L3 once per block. Measured on
    znver4, x86-64-v3 code alone, interleaved (oh_kv against kv_oh): the 1x1 layers of
    resnet50 and densenet121 with a 0.8-3.2 MB input 0.98-1.28x (512->128 at 28x28 1.28x,
    1x1/2 256->512 1.23x, 384->128 1.24x), those under 0.5 MB 0.97-1.03x, the 3x3 layers
    0.95-1.09x; AVX-512's 14 x 1 tiles 0.86-1.01x, so 32-register files keep ``kv_oh``."""
    xbytes = 4 * geo.N * geo.C * geo.H * geo.W
    if geo.R * geo.S == 1 and xbytes > table.l2_bytes and s.oc_block < geo.KV:
        return ConvSchedule(s.ow_block, s.oc_block, s.unroll, "oh_kv")
    return s


def _holds_row(geo: Geometry, kb: int, t: int, regs: int) -> bool:
    """Whether a 32-register tile keeps a kernel row's inputs in registers. Where strided
    columns share more than two taps (``S - stride > 2``, stride > 1: 7x7 stride-2 stems)
    LLVM hoists the broadcasts of every distinct input column of a kernel row, ``(t - 1) x
    stride + S`` of them, next to the ``kb x t`` accumulators and ``kb`` weight vectors;
    past the register file it spills them inside the kernel-row loop. The 14 x 1 tile of
    resnet50's, densenet121's and inception_v2's 7x7 stride-2 stem (33 inputs) stored and
    reloaded ~50 zmm registers per 98 FMAs on znver4 and skylake-avx512; 8 x 1 keeps them
    in registers (at stride 1, 5x5, the 14 x 1 tile spills nothing). Measured on znver4
    (1 thread, the stem alone): 2.33-3.12 ms with 14 x 1, 2.29 with 8 x 1."""
    if geo.sw < 2 or geo.S - geo.sw <= 2:
        return True
    return kb * (t + 1) + (t - 1) * geo.sw + geo.S <= regs


# A tile's FMA chains: below this many accumulators one row step waits on the FMA
# latency (4 cycles x 2 ports, with the loads' slack).
CHAINS = 9


def small_file_rate(geo: Geometry, s: ConvSchedule, regs: int) -> float:
    """Relative FMA rate of a tile on a 16-register file (1.0: no penalty), from
    measurements of x86-64-v3 code (the tuner's measure on znver5). A tile needs
    ``oc_block x (ow_block + 1) + 1`` registers; where neighbouring columns share more
    than one tap (``S - stride > 1``) LLVM keeps the shared broadcasts live across the
    taps, ``ow_block + S - stride - 1`` of them, so past ``regs + 4`` of both together it
    spills: at 3x3 stride 1, 6 x 2 ran at 70-86 GFLOP/s beside 5 x 2 and 3 x 3 at
    108-132; at 5x5, 5 x 2 at 69-99 beside 3 x 3 at 123-158; at 7x7 stride 2, 6 x 2 at
    53-63 beside 4 x 2 at 104 (at 3x3 stride 2, one shared tap, 6 x 2 kept up; at 11x11
    stride 4, reused a few taps apart, 5 x 2 ran fastest). A tile that takes every
    register (4 x 3) keeps within 0.9 of 6 x 2 on 1x1 convolutions (103-119 GFLOP/s) and
    falls behind where it has taps to share."""
    used = s.oc_block * (s.ow_block + 1) + 1
    if geo.mode != "depthwise" and s.oc_block == 1 and geo.sw > 1:
        # One vector at stride 2: LLVM keeps a kernel row's broadcast inputs, (T - 1) x
        # stride + S of them, beside the T accumulators: past the file it spills them in
        # the loop (7 x 1 at 3x3/2: 16 ymm stack accesses per 40 FMAs; resnet50's 3x3/2
        # 512->512 and inception_v2's 256->256 at 7x7 ran 1.08-1.10x faster as 4 x 2).
        if (s.ow_block - 1) * geo.sw + geo.S + used > regs:
            return 0.85
    overlap = geo.S - geo.sw  # taps a column shares with the next one
    if overlap > 1 and geo.sw <= 2 and used + s.ow_block + overlap - 1 > regs + 4:
        return 0.65
    if used >= regs:
        return 0.7 if geo.S > 1 else 0.9
    return 1.0


def row_cost(geo: Geometry, s: ConvSchedule, regs: int) -> float:
    """Modelled cycles of one output row over all its output-channel vectors, per useful
    FMA vector (1.0 ~ peak): every tile of the row (interior tiles, the interior's tail,
    the border tiles) of each block of ``oc_block`` vectors (and the last, shorter block)
    costs ``max(vectors x columns, CHAINS)`` FMA slots at the tile's rate."""
    T, KB = s.ow_block, min(s.oc_block, geo.KV)
    left, full, fixed = geo.column_tiles(T)
    widths = [T] * (full // T) + [w for _, w in fixed]
    rate = small_file_rate(geo, s, regs)

    def block(nv: int) -> float:
        return sum(max(nv * w, CHAINS) for w in widths) / rate

    blocks = geo.KV // KB
    slots = blocks * block(KB) + (block(geo.KV - blocks * KB) if geo.KV % KB else 0.0)
    return slots / max(1, geo.KV * geo.OW)


def _small_file_schedule(geo: Geometry, regs: int, wide: int) -> ConvSchedule:
    """16 registers (AVX2, SSE): the tile of least :func:`row_cost` among those no wider
    than ``wide`` columns (wider single-vector tiles ran at 0.6x there: each FMA needs its
    own broadcast load) whose vectors share their input. Picks 5-6 columns x 2 vectors on
    most rows (1x1 convolutions of resnet50: 89-98 -> 103-119 GFLOP/s, 3x3 at 14-28
    columns 108-110 -> 127-132), 3 x 3 or 4 x 3 on narrow rows of many vectors, 7 x 1
    where there is one vector."""
    best, best_cost = ConvSchedule(ow_block=max(1, min(wide, geo.OW))), math.inf
    for kb in range(1, min(MAX_OC_BLOCK, geo.KV) + 1):
        if kb > 1 and not geo.vectors_share_input(kb):
            if best.oc_block > 1:
                break  # blocks of 2 share: a wider block past a gap is not modelled
            # a group of 9 vectors (shufflenet's 272->272 g4) has blocks of 3: 3 x 3
            # ran 1.27-1.30x its 7 x 1 on znver4 (x86-64-v3 code)
            continue
        for t in range(1, min(wide, geo.OW) + 1):
            s = ConvSchedule(ow_block=t, oc_block=kb)
            if kb * (t + 1) + 1 > regs:
                break
            cost = row_cost(geo, s, regs)
            if cost < best_cost - 1e-9:
                best, best_cost = s, cost
    return best


def conv_space(geo: Geometry) -> list[ConvSchedule]:
    """Every distinct valid schedule for ``geo``: tiles that fit the registers, no wider
    than the output row nor taller than its vectors, each unroll that changes the code
    (none for depthwise) and both loop orders."""
    if geo.L <= 1:
        return [ConvSchedule(ow_block=t) for t in range(1, min(geo.OW, 16) + 1)]
    regs = vector_registers(geo.L)
    unrolls = (1,) if geo.mode == "depthwise" else tuple(u for u in UNROLLS if u <= geo.Cg)
    out = []
    for kb in range(1, min(MAX_OC_BLOCK, geo.KV) + 1):
        for t in range(1, min(geo.OW, (regs - 1) // kb - 1) + 1):
            for u in unrolls:
                for order in LOOP_ORDERS:
                    out.append(ConvSchedule(ow_block=t, oc_block=kb, unroll=u, loop_order=order))
    return out
