"""Convolution kernels emitted with llvmlite: implicit GEMM over packed weights, and a
dedicated depthwise kernel. NCHW in and out, float32, shapes compile-time constants.

General and grouped convolution is a GEMM per (image, group): ``Y[k, p] = Wt[k, crs] @
Xcol[crs, p]`` with k the group's output channels, ``crs`` its (input channel, kernel row,
kernel column) and p the flattened output position ``oh*OW + ow``; row-major Y is NCHW
itself. Weights are packed at build time into panels of ``oc_block`` output channels
(``[group][panel][crs][oc_block]``, zero-padded). Xcol is built at run time per cache
block of whole output rows: for each input channel of the k-chunk, tap and output row, the
input row segment is copied into a stack buffer ``[crs][positions]`` (contiguous loads at
stride 1, two loads and an even-lane shuffle at stride 2, a masked gather otherwise;
padding is a compile-time lane mask or a zero row), then every output-channel tile reuses
it. A 1x1 convolution with stride 1 and no padding reads X in place (Xcol is X). ``kc`` is a
whole number of input channels (``kc = kc_channels * R * S``). The micro-kernel is the
GEMM's (microkernel.py), shared by every kernel of the module.

Two orientations (``ConvSchedule.vectorize``):

- "positions": output channels are the micro-kernel's rows (a broadcast of packed
  weights), output positions its vectors; y is written in place. Best from 28x28 up.
- "channels": positions are the rows (a broadcast of Xcol), output channels the vectors
  (the packed weight panel); tiles accumulate in a stack buffer ``[positions][K/group]``
  that a gather pass transposes into y once per block. For 7x7 and 14x14 images, whose
  49 or 196 positions fill 16-lane vectors to 77%, while 256 or 512 channels fill them
  exactly (measured: 3x3 512->512 at 7x7 1.25x, 1x1 2048->512 at 7x7 1.1x faster).

Why implicit GEMM rather than a direct convolution vectorised along the output width: the
late layers are 7x7 and 14x14, where such tiles waste up to 9 of 16 lanes; flattened
positions (or channels) keep vectors full, and the packing pass over Xcol is amortised
over all output channels (benchmarks/test_gemm_kernels.py: at or above onnxruntime on
resnet50's layers).

Depthwise (``group == C == K``) has a kernel of its own: per channel and output row, the
``R*S`` weights are splatted once and each output vector of ``W`` columns is a chain of
FMAs over the taps, with the same three row loads, compile-time lane masks at the
left/right padding and the rows of the top/bottom padding peeled at compile time.

The bias (one per output channel) and the epilogue run in registers before the only
store of each output vector. Stack use: at most 512 KiB (Xcol block) plus 256 KiB (the
transposed block), both re-entrant.

Files: this one holds the schedule and the kernel's public face; conv_gemm.py emits the
implicit GEMM and its packing, conv_depthwise.py the depthwise kernel and the row loads.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np
from llvmlite import ir

from .conv_depthwise import DepthwiseEmitter
from .conv_gemm import CT_LIMIT_BYTES, SCRATCH_LIMIT_BYTES, ConvGemmEmitter
from .gemm import vector_registers
from .microkernel import (
    F32,
    F32P,
    Epilogue,
)

LOOP_ORDERS = ("nm", "mn")
VECTORIZE = ("positions", "channels")


@dataclass(frozen=True)
class ConvSchedule:
    """Knobs of one convolution.

    ``vectorize``: "positions" (output channels are the micro-kernel's rows, output
    positions its vectors: y is written in place) or "channels" (positions are the rows,
    output channels the vectors, accumulated in a stack buffer ``[positions][K/group]``
    and transposed into y by a gather pass once per block; for small images, 7x7 or
    14x14, where 49 or 196 positions fill 16-lane vectors badly and K fills them well);
    ``oc_block``: output channels per register tile (a multiple of the vector width when
    vectorising channels); ``ow_block``: output positions per register tile (a multiple
    of the vector width when vectorising positions; the depthwise kernel uses it as
    output columns per step of its row loop);
    ``kc_channels``: input channels per k-chunk; ``nc``: output positions per cache block
    (a multiple of ``ow_block``); ``mc``: output channels per cache block (a multiple of
    ``oc_block``); ``unroll``: k-loop unroll; ``loop_order``: "nm" position tiles
    outermost, "mn" channel tiles outermost.
    """

    oc_block: int
    ow_block: int
    kc_channels: int
    nc: int
    mc: int
    unroll: int = 4
    loop_order: str = "nm"
    vectorize: str = "positions"

    def validate(self, vector_width: int) -> None:
        if self.vectorize not in VECTORIZE:
            raise ValueError(
                f"ConvSchedule.vectorize={self.vectorize!r}: expected one of {VECTORIZE}"
            )
        vec_field = "ow_block" if self.vectorize == "positions" else "oc_block"
        vec_value = getattr(self, vec_field)
        if vec_value <= 0 or vec_value % vector_width:
            raise ValueError(
                f"ConvSchedule.{vec_field}={vec_value} must be a positive multiple of the vector width {vector_width} (vectorize={self.vectorize!r})"
            )
        if min(self.oc_block, self.kc_channels, self.unroll) <= 0:
            raise ValueError(
                f"ConvSchedule oc_block, kc_channels and unroll must be positive: {self}"
            )
        if self.nc <= 0 or self.nc % self.ow_block or self.mc <= 0 or self.mc % self.oc_block:
            raise ValueError(
                f"ConvSchedule.nc must be a multiple of ow_block and mc of oc_block: {self}"
            )
        if self.loop_order not in LOOP_ORDERS:
            raise ValueError(
                f"ConvSchedule.loop_order={self.loop_order!r}: expected one of {LOOP_ORDERS}"
            )


def _pick_tile(rows: int, cols: int, width: int, registers: int) -> tuple[int, int, float]:
    """(rows per tile, vectors per tile, score) with the least padding waste that keeps
    enough FMAs per load and independent chains, within a register file."""
    best = (0.0, 1, 1)
    n_vecs = -(-cols // width)
    for nvec in range(1, min(4, n_vecs) + 1):
        for mr in range(1, min(rows, 16) + 1):
            if mr * nvec + nvec + 1 > registers:
                continue
            row_use = rows / (-(-rows // mr) * mr)
            col_use = cols / (-(-cols // (nvec * width)) * nvec * width)
            # FMAs per load (mr*nvec / (mr + nvec)) saturates around 6; chains >= 8 hide latency
            intensity = min(1.0, (mr * nvec / (mr + nvec)) / 6.0) * min(1.0, mr * nvec / 8.0)
            score = row_use * col_use * intensity
            if score > best[0] + 1e-9:
                best = (score, mr, nvec)
    return best[1], best[2], best[0]


def default_conv_schedule(
    N: int,
    C: int,
    H: int,
    W: int,
    K: int,
    R: int,
    S: int,
    strides: tuple[int, int] = (1, 1),
    pads: tuple[int, int, int, int] = (0, 0, 0, 0),
    dilations: tuple[int, int] = (1, 1),
    group: int = 1,
    vector_width: int = 16,
) -> ConvSchedule:
    """Heuristic: the tile with least waste over (output channels, positions) that fills
    the registers; k-chunks of ~256 (a B micro-panel in L1), blocks of Xcol within the
    stack buffer and half of L2."""
    oh = (H + pads[0] + pads[2] - dilations[0] * (R - 1) - 1) // strides[0] + 1
    ow = (W + pads[1] + pads[3] - dilations[1] * (S - 1) - 1) // strides[1] + 1
    positions = max(1, oh * ow)
    kg = K // group
    if group == C == K:
        nvec = min(4, -(-ow // vector_width))
        return ConvSchedule(
            oc_block=1, ow_block=nvec * vector_width, kc_channels=1, nc=nvec * vector_width, mc=1
        )
    regs = vector_registers(vector_width)
    mr, nvec, score = _pick_tile(kg, positions, vector_width, regs)
    pr, cvec, cscore = _pick_tile(positions, kg, vector_width, regs)
    cg = C // group
    kc_channels = max(1, min(cg, 256 // (R * S) if R * S <= 256 else 1))
    pointwise = (R, S, strides, pads) == (1, 1, (1, 1), (0, 0, 0, 0))
    if not pointwise:
        # an Xcol block holds at least one whole output row per tap
        row_floats = R * S * -(-ow // vector_width) * vector_width
        if row_floats * 4 > SCRATCH_LIMIT_BYTES:
            raise ValueError(
                f"convolution output rows of {ow} positions x {R}x{S} taps exceed the "
                f"{SCRATCH_LIMIT_BYTES} B stack buffer of the generated kernel"
            )
        kc_channels = min(kc_channels, SCRATCH_LIMIT_BYTES // (4 * row_floats))
    kc = kc_channels * R * S
    budget = SCRATCH_LIMIT_BYTES // (4 * kc)  # positions per Xcol block
    ct_positions = CT_LIMIT_BYTES // (4 * kg)
    # Channels in vectors read Xcol down its columns (stride: a row of positions). From
    # a packed Xcol block that is cheap; from X itself (pointwise) only while a row of
    # positions is within a few cache lines (measured here: 1x1 256->1024 at 14x14 ran at
    # 0.65x of positions-in-vectors, 2048->512 at 7x7 at 1.2x).
    strided_ok = not pointwise or positions <= 64
    if cscore > 1.05 * score and ct_positions >= max(ow, pr) and strided_ok:
        # channels in vectors: blocks of whole output rows within both stack buffers
        nc = min(budget, ct_positions, -(-positions // pr) * pr) // pr * pr
        return ConvSchedule(
            oc_block=cvec * vector_width,
            ow_block=pr,
            kc_channels=kc_channels,
            nc=max(pr, nc),
            mc=-(-kg // (cvec * vector_width)) * cvec * vector_width,
            unroll=2,
            vectorize="channels",
        )
    nr = nvec * vector_width
    nc = max(nr, min(-(-positions // nr) * nr, budget // nr * nr))
    mc = max(mr, min(-(-kg // mr) * mr, 144 // mr * mr))
    return ConvSchedule(oc_block=mr, ow_block=nr, kc_channels=kc_channels, nc=nc, mc=mc, unroll=2)


@dataclass(frozen=True)
class ConvKernel:
    """One 2-D convolution specialised to its shapes (see the module docstring)."""

    N: int
    C: int
    H: int
    W: int
    K: int
    R: int
    S: int
    strides: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, left, bottom, right
    dilations: tuple[int, int] = (1, 1)
    group: int = 1
    vector_width: int = 16
    schedule: ConvSchedule | None = None
    residual: bool = False
    _sched: ConvSchedule = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if min(self.N, self.C, self.H, self.W, self.K, self.R, self.S, self.group) <= 0:
            raise ValueError(f"ConvKernel needs positive sizes: {self}")
        if self.C % self.group or self.K % self.group:
            raise ValueError(
                f"ConvKernel: group={self.group} must divide C={self.C} and K={self.K}"
            )
        if min(self.strides) <= 0 or min(self.dilations) <= 0 or min(self.pads) < 0:
            raise ValueError(
                f"ConvKernel: strides and dilations must be positive, pads >= 0: {self}"
            )
        if self.OH <= 0 or self.OW <= 0:
            raise ValueError(
                f"ConvKernel: empty output {self.OH}x{self.OW} for input {self.H}x{self.W}"
            )
        sched = self.schedule or default_conv_schedule(
            self.N,
            self.C,
            self.H,
            self.W,
            self.K,
            self.R,
            self.S,
            self.strides,
            self.pads,
            self.dilations,
            self.group,
            self.vector_width,
        )
        sched.validate(self.vector_width)
        object.__setattr__(self, "_sched", sched)

    @property
    def sched(self) -> ConvSchedule:
        return self._sched

    @property
    def OH(self) -> int:
        return (
            self.H + self.pads[0] + self.pads[2] - self.dilations[0] * (self.R - 1) - 1
        ) // self.strides[0] + 1

    @property
    def OW(self) -> int:
        return (
            self.W + self.pads[1] + self.pads[3] - self.dilations[1] * (self.S - 1) - 1
        ) // self.strides[1] + 1

    @property
    def depthwise(self) -> bool:
        return self.group == self.C == self.K

    @property
    def pointwise(self) -> bool:
        """1x1, stride 1, no padding: X is its own Xcol (a plain GEMM)."""
        return (self.R, self.S, self.strides, self.pads) == (1, 1, (1, 1), (0, 0, 0, 0))

    @property
    def flops(self) -> int:
        return 2 * self.N * self.K * self.OH * self.OW * (self.C // self.group) * self.R * self.S

    def _group_panel_floats(self) -> int:
        mr = self.sched.oc_block  # channels per panel, in either orientation
        kg = self.K // self.group
        return -(-kg // mr) * mr * (self.C // self.group) * self.R * self.S

    def pack_weights(self, w: np.ndarray) -> np.ndarray:
        """OIHW float32 (``[K, C/group, R, S]``) into the kernel's 1-D layout."""
        w = np.asarray(w, dtype=np.float32)
        want = (self.K, self.C // self.group, self.R, self.S)
        if w.shape != want:
            raise ValueError(
                f"ConvKernel.pack_weights: weights have shape {w.shape}, expected {want} (OIHW)"
            )
        if self.depthwise:
            return np.ascontiguousarray(w).reshape(-1)
        g, mr = self.group, self.sched.oc_block
        kg = self.K // g
        crs = want[1] * self.R * self.S
        panels = -(-kg // mr)
        a = np.zeros((g, panels * mr, crs), np.float32)
        a[:, :kg] = w.reshape(g, kg, crs)
        # [g][panel][crs][mr]
        return np.ascontiguousarray(a.reshape(g, panels, mr, crs).transpose(0, 1, 3, 2)).reshape(-1)

    def emit(
        self,
        module: ir.Module,
        name: str,
        epilogue: Epilogue | None = None,
        epilogue_key: Hashable | None = None,
    ) -> ir.Function:
        """``void name(const float* x, const float* packed_w, const float* bias, float* y)``,
        x ``[N, C, H, W]`` and y ``[N, K, OH, OW]`` row-major, ``bias`` of length K or null
        (then a module-level zero vector stands in: one add per output vector). With
        ``residual`` a fifth argument ``const float* r`` laid out like y is added before the
        epilogue (FusedConv's Add of a skip connection); ``r`` may be ``y`` itself (the Add
        done in place): each element of r is read before that element of y is written."""
        nargs = 5 if self.residual else 4
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [F32P] * nargs), name)
        for arg, nm in zip(fn.args, ("x", "w", "bias", "y", "r"), strict=False):
            arg.name = nm
        if not self.residual:  # else y may be r itself
            fn.args[3].add_attribute("noalias")
        # Loop control and calls only: unrolling them buys nothing and costs compile time
        # and object size (measured: 5x smaller object for resnet50's convolutions).
        fn.attributes.add("optsize")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        x, w, bias, y = fn.args[:4]
        res = fn.args[4] if self.residual else None
        zeros = ir.GlobalVariable(module, ir.ArrayType(F32, self.K), f"{name}.zero_bias")
        zeros.linkage = "internal"
        zeros.global_constant = True
        zeros.initializer = ir.Constant(ir.ArrayType(F32, self.K), None)
        zero_ptr = b.bitcast(zeros, F32P)
        bias = b.select(b.icmp_unsigned("==", bias, ir.Constant(F32P, None)), zero_ptr, bias)
        if self.depthwise:
            dw = DepthwiseEmitter(self, b, epilogue)
            dw.res = res
            dw.emit(x, w, bias, y)
        else:
            em = ConvGemmEmitter(self, b, epilogue, epilogue_key)
            em.res = res
            em.emit(x, w, bias, y)
        b.ret_void()
        return fn
