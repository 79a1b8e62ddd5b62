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
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np
from llvmlite import ir

from .gemm import vector_registers
from .microkernel import (
    ACCUMULATE,
    F32,
    F32P,
    FINISH,
    I32,
    I64,
    Epilogue,
    fma,
    for_loop,
    for_loop_dynamic,
    fptr,
    iadd,
    imul,
    lane_mask,
    masked_gather,
    masked_load,
    masked_store,
    micro_kernel,
    splat,
    tiles,
    vload,
    vstore,
)

LOOP_ORDERS = ("nm", "mn")
VECTORIZE = ("positions", "channels")
CT_LIMIT_BYTES = 256 * 1024  # stack buffer for one block of transposed output ("channels")
SCRATCH_LIMIT_BYTES = 512 * 1024  # stack buffer for one packed Xcol block


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
            dw = _DepthwiseEmitter(self, b, epilogue)
            dw.res = res
            dw.emit(x, w, bias, y)
        else:
            em = _ConvGemmEmitter(self, b, epilogue, epilogue_key)
            em.res = res
            em.emit(x, w, bias, y)
        b.ret_void()
        return fn


class _ConvGemmEmitter:
    """Implicit GEMM per (image, group): packed weights as A, gathered Xcol blocks as B."""

    def __init__(
        self,
        k: ConvKernel,
        b: ir.IRBuilder,
        epilogue: Epilogue | None,
        epilogue_key: Hashable | None,
    ) -> None:
        self.k, self.s, self.b = k, k.sched, b
        self.W = k.vector_width
        self.epilogue, self.epilogue_key = epilogue, epilogue_key
        self.res: ir.Value | None = None  # the residual argument, laid out like y
        self.res_g: ir.Value | None = None  # ... at the current (image, group)
        self.P = k.OH * k.OW
        self.RS = k.R * k.S
        self.cg, self.kg = k.C // k.group, k.K // k.group
        self.crs = self.cg * self.RS
        self.kc_channels = min(self.s.kc_channels, self.cg)
        self.nc = min(self.s.nc, -(-self.P // self.s.ow_block) * self.s.ow_block)
        # Xcol blocks are whole output rows, so a block is contiguous in y and its packed
        # rows are plain copies of input rows (no position -> (oh, ow) division)
        self.rows_per_block = max(1, min(k.OH, self.nc // k.OW))
        self.ncp = -(-self.rows_per_block * k.OW // self.W) * self.W
        self.channels = self.s.vectorize == "channels"
        self.block_positions = self.nc if k.pointwise else self.rows_per_block * k.OW

    def emit(self, x, w, bias, y) -> None:
        k, b = self.k, self.b
        scratch = None
        if not k.pointwise:
            floats = self.kc_channels * self.RS * self.ncp
            if floats * 4 > SCRATCH_LIMIT_BYTES:
                raise ValueError(
                    f"ConvSchedule needs a {floats * 4} B stack buffer (kc_channels*R*S floats "
                    f"x {self.ncp} positions), over the {SCRATCH_LIMIT_BYTES} B limit: lower "
                    "kc_channels or nc"
                )
            self.pack_fn = self._pack_function()
            with b.goto_entry_block():
                slot = b.alloca(ir.ArrayType(F32, floats), name="xcol")
                slot.align = 64
            scratch = b.bitcast(slot, F32P)
        self.ct = None
        if self.channels:
            floats = self.block_positions * self.kg
            if floats * 4 > CT_LIMIT_BYTES:
                raise ValueError(
                    f"ConvSchedule(vectorize='channels') needs a {floats * 4} B stack buffer "
                    f"({self.block_positions} positions x {self.kg} channels), over the "
                    f"{CT_LIMIT_BYTES} B limit: lower nc or vectorize positions"
                )
            with b.goto_entry_block():
                slot = b.alloca(ir.ArrayType(F32, floats), name="yt")
                slot.align = 64
            self.ct = b.bitcast(slot, F32P)
        hw = k.H * k.W

        def image_group(ng: ir.Value) -> None:
            # ng = n * group + g: x, y and the bias advance per group; weights per group too
            g = b.urem(ng, ir.Constant(I64, k.group)) if k.group > 1 else ir.Constant(I64, 0)
            xg = fptr(b, x, imul(b, ng, self.cg * hw))
            yg = fptr(b, y, imul(b, ng, self.kg * self.P))
            if self.res is not None:
                self.res_g = fptr(b, self.res, imul(b, ng, self.kg * self.P))
            wg = fptr(b, w, imul(b, g, k._group_panel_floats()))
            bg = fptr(b, bias, imul(b, g, self.kg))
            self._gemm(xg, wg, bg, yg, scratch)

        for_loop(b, 0, k.N * k.group, 1, image_group)

    def _gemm(self, x, w, bias, y, scratch) -> None:
        b, s, k = self.b, self.s, self.k
        chunks = -(-self.cg // self.kc_channels)

        def block(p0: ir.Value, psize: int, oh0: ir.Value | None = None, rows: int = 0) -> None:
            # k-chunks in one run-time loop: the chunk's length and its micro-kernel flags
            # (accumulate after the first, finish on the last) are values, not copies
            kcc = self.kc_channels

            def chunk(c0: ir.Value) -> None:
                left = b.sub(ir.Constant(I64, self.cg), c0)
                cc = b.select(
                    b.icmp_signed("<", left, ir.Constant(I64, kcc)), left, ir.Constant(I64, kcc)
                )
                acc = b.select(
                    b.icmp_signed(">", c0, ir.Constant(I64, 0)),
                    ir.Constant(I32, ACCUMULATE),
                    ir.Constant(I32, 0),
                )
                fin = b.select(
                    b.icmp_signed("==", b.add(c0, cc), ir.Constant(I64, self.cg)),
                    ir.Constant(I32, FINISH),
                    ir.Constant(I32, 0),
                )
                flags = b.or_(acc, fin)
                if scratch is not None:
                    b.call(self.pack_fn, [x, scratch, c0, cc, oh0, ir.Constant(I64, rows)])

                def mblock(m0: ir.Value, msize: int) -> None:
                    if self.channels:
                        self._macro_channels(
                            x, w, bias, scratch, c0, cc, p0, psize, m0, msize, flags
                        )
                    else:
                        self._macro(x, w, bias, y, scratch, c0, cc, p0, psize, m0, msize, flags)

                tiles(b, self.kg, s.mc, mblock)

            for_loop(b, 0, chunks * kcc, kcc, chunk)
            if self.channels:
                self._transpose_out(y, p0, psize)

        if scratch is None:
            tiles(b, self.P, self.nc, block)
        else:
            tiles(
                b,
                k.OH,
                self.rows_per_block,
                lambda oh0, rows: block(imul(b, oh0, k.OW), rows * k.OW, oh0, rows),
            )

    def _macro(self, x, w, bias, y, scratch, c0, cc, p0, psize, m_start, msize, flags) -> None:
        b, s, W = self.b, self.s, self.W
        mr, nr = s.oc_block, s.ow_block
        klen = b.mul(cc, ir.Constant(I64, self.RS))

        def tile(n_off: ir.Value, width: int, m_off: ir.Value, rows: int) -> None:
            m0 = iadd(b, m_start, m_off)
            p = iadd(b, p0, n_off)
            # weights: panel m0/mr starts at (m0/mr)*crs*mr = m0*crs; chunk at c0*RS*mr
            pa = fptr(b, w, iadd(b, imul(b, m0, self.crs), imul(b, c0, self.RS * mr)))
            if scratch is None:
                pb, ldb = fptr(b, x, iadd(b, imul(b, c0, self.P), p)), self.P
            else:
                pb, ldb = fptr(b, scratch, n_off), self.ncp
            pc = fptr(b, y, iadd(b, imul(b, m0, self.P), p))
            nvec = -(-width // W)
            ukr = micro_kernel(
                b.module,
                rows,
                nvec,
                width - (nvec - 1) * W,
                W,
                "col",
                self.epilogue,
                s.unroll,
                mask_b=scratch is None,  # scratch rows are padded to whole vectors
                epilogue_key=self.epilogue_key,
                residual=self.res_g is not None,
            )
            pres = ir.Constant(F32P, None)
            if self.res_g is not None:
                pres = fptr(b, self.res_g, iadd(b, imul(b, m0, self.P), p))
            b.call(
                ukr,
                [
                    pa,
                    pb,
                    pc,
                    fptr(b, bias, m0),
                    klen,
                    ir.Constant(I64, 1),
                    ir.Constant(I64, mr),
                    ir.Constant(I64, ldb),
                    ir.Constant(I64, self.P),
                    flags,
                    ir.Constant(I32, width - (nvec - 1) * W),
                    pres,
                ],
            )

        if s.loop_order == "nm":
            tiles(
                b,
                psize,
                nr,
                lambda n_off, wd: tiles(b, msize, mr, lambda m_off, r: tile(n_off, wd, m_off, r)),
            )
        else:
            tiles(
                b,
                msize,
                mr,
                lambda m_off, r: tiles(b, psize, nr, lambda n_off, wd: tile(n_off, wd, m_off, r)),
            )

    def _macro_channels(
        self, x, w, bias, scratch, c0, cc, p0, psize, n_start, nsize, flags
    ) -> None:
        """Tiles of ``ow_block`` positions x ``oc_block`` channels into ``ct[p][k]``: A is
        Xcol read down a column (consecutive positions), B the packed weight panel."""
        b, s, W = self.b, self.s, self.W
        mr, nr = s.ow_block, s.oc_block
        klen = b.mul(cc, ir.Constant(I64, self.RS))

        def tile(p_off: ir.Value, rows: int, n_off: ir.Value, width: int) -> None:
            n0 = iadd(b, n_start, n_off)
            if scratch is None:
                pa, lda_k = fptr(b, x, iadd(b, imul(b, c0, self.P), iadd(b, p0, p_off))), self.P
            else:
                pa, lda_k = fptr(b, scratch, p_off), self.ncp
            # weights: panel n0/nr starts at n0*crs; chunk at c0*RS*nr
            pb = fptr(b, w, iadd(b, imul(b, n0, self.crs), imul(b, c0, self.RS * nr)))
            pc = fptr(b, self.ct, iadd(b, imul(b, p_off, self.kg), n0))
            nvec = -(-width // W)
            ukr = micro_kernel(
                b.module,
                rows,
                nvec,
                width - (nvec - 1) * W,
                W,
                "row",
                self.epilogue if self.res_g is None else None,  # else after the residual
                s.unroll,
                mask_b=False,
                epilogue_key=self.epilogue_key,
            )
            b.call(
                ukr,
                [
                    pa,
                    pb,
                    pc,
                    fptr(b, bias, n0),
                    klen,
                    ir.Constant(I64, 1),
                    ir.Constant(I64, lda_k),
                    ir.Constant(I64, nr),
                    ir.Constant(I64, self.kg),
                    flags,
                    ir.Constant(I32, width - (nvec - 1) * W),
                    ir.Constant(F32P, None),
                ],
            )

        if s.loop_order == "nm":
            tiles(
                b,
                nsize,
                nr,
                lambda n_off, wd: tiles(b, psize, mr, lambda p_off, r: tile(p_off, r, n_off, wd)),
            )
        else:
            tiles(
                b,
                psize,
                mr,
                lambda p_off, r: tiles(b, nsize, nr, lambda n_off, wd: tile(p_off, r, n_off, wd)),
            )

    def _transpose_out(self, y, p0: ir.Value, psize: int) -> None:
        """``y[k, p0 + p] = ct[p][k]``: one gather of W positions per output vector (with a
        residual: plus it, then the epilogue, which the micro-kernel left out)."""
        b, W, kg = self.b, self.W, self.kg
        ct = self.ct

        def channel(kk: ir.Value) -> None:
            src = fptr(b, ct, kk)
            off = iadd(b, imul(b, kk, self.P), p0)
            dst = fptr(b, y, off)
            for j in range(0, psize, W):
                lanes = min(W, psize - j)
                idx = ir.Constant(ir.VectorType(I32, W), [(j + lane) * kg for lane in range(W)])
                v = masked_gather(b, src, idx, lane_mask(W, lanes))
                if self.res_g is not None:
                    rp = fptr(b, self.res_g, iadd(b, off, ir.Constant(I64, j)))
                    r = (
                        vload(b, rp, W)
                        if lanes == W
                        else masked_load(b, rp, W, lane_mask(W, lanes))
                    )
                    v = b.fadd(v, r)
                    if self.epilogue is not None:
                        v = self.epilogue(b, v)
                _store_lanes(b, v, fptr(b, dst, j), lanes)

        for_loop(b, 0, kg, 1, channel)

    def _pack_function(self) -> ir.Function:
        """``pack(x, scratch, c0, cc, oh0, rows)``: Xcol rows of channels ``[c0, c0+cc)`` for
        output rows ``[oh0, oh0+rows)`` into ``scratch[crs][ncp]``; padding reads as 0.0.

        One function per geometry (not inlined at each block and chunk call site): for each
        channel, tap and output row, the input row segment is copied with the depthwise
        kernel's row loads (contiguous / two loads and a shuffle / gather by stride) under
        compile-time border masks; a row of the vertical padding is stored as zeros."""
        k, W, ncp = self.k, self.W, self.ncp
        module = self.b.module
        # Shared by every convolution of the module with the same geometry (channels are
        # run-time arguments): resnet50's sixteen 3x3 convolutions need seven.
        geometry = (k.H, k.W, k.OH, k.OW, k.R, k.S, k.strides, k.pads, k.dilations, W, ncp)
        cache = getattr(module, "_guard_conv_packs", None)
        if cache is None:
            cache = module._guard_conv_packs = {}  # type: ignore[attr-defined]
        if geometry in cache:
            return cache[geometry]
        fn = ir.Function(
            module,
            ir.FunctionType(ir.VoidType(), [F32P, F32P, I64, I64, I64, I64]),
            f"guard.conv_pack.{len(cache)}.{k.H}x{k.W}.{k.R}x{k.S}s{k.strides[0]}{k.strides[1]}",
        )
        cache[geometry] = fn
        fn.linkage = "internal"
        fn.attributes.add("noinline")
        fn.attributes.add("optsize")
        x, scratch, c0, cc, oh0, rows = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        sh, sw = k.strides
        dh, dw = k.dilations
        pt, pl = k.pads[0], k.pads[1]
        zero = ir.Constant(ir.VectorType(F32, W), 0.0)

        def channel(c: ir.Value, _vals: list) -> list:
            xc = fptr(b, x, imul(b, b.add(c0, c), k.H * k.W))

            def tap_row(r: ir.Value) -> None:
                # kernel rows at run time, columns unrolled (the border masks depend on s)
                for s in range(k.S):
                    row0 = fptr(
                        b,
                        scratch,
                        imul(
                            b,
                            iadd(
                                b,
                                imul(b, c, self.RS),
                                iadd(b, imul(b, r, k.S), ir.Constant(I64, s)),
                            ),
                            ncp,
                        ),
                    )

                    def out_row(ol: ir.Value, _v: list, s=s, row0=row0) -> list:
                        ih = b.add(
                            b.sub(
                                b.mul(b.add(oh0, ol), ir.Constant(I64, sh)), ir.Constant(I64, pt)
                            ),
                            imul(b, r, dh),
                        )
                        inside = b.and_(
                            b.icmp_signed(">=", ih, ir.Constant(I64, 0)),
                            b.icmp_signed("<", ih, ir.Constant(I64, k.H)),
                        )
                        dst = fptr(b, row0, imul(b, ol, k.OW))
                        xrow = fptr(b, xc, imul(b, ih, k.W), inbounds=False)
                        with b.if_else(inside) as (then, otherwise):
                            with then:
                                for ow0 in range(0, k.OW, W):
                                    lanes = min(W, k.OW - ow0)
                                    col0 = ow0 * sw + s * dw - pl
                                    valid = [
                                        lane < lanes and 0 <= col0 + lane * sw < k.W
                                        for lane in range(W)
                                    ]
                                    v = (
                                        _row_load(b, k.W, xrow, col0, sw, valid)
                                        if any(valid)
                                        else zero
                                    )
                                    _store_lanes(b, v, fptr(b, dst, ow0), lanes)
                            with otherwise:
                                for ow0 in range(0, k.OW, W):
                                    _store_lanes(b, zero, fptr(b, dst, ow0), min(W, k.OW - ow0))
                        return []

                    for_loop_dynamic(b, rows, [], out_row)

            for_loop(b, 0, k.R, 1, tap_row)
            return []

        for_loop_dynamic(b, cc, [], channel)
        b.ret_void()
        return fn


def _store_lanes(b: ir.IRBuilder, v: ir.Value, p: ir.Value, lanes: int) -> None:
    width = v.type.count
    if lanes < width:
        masked_store(b, v, p, lane_mask(width, lanes))
    else:
        vstore(b, v, p)


def _row_load(
    b: ir.IRBuilder, row_len: int, xrow: ir.Value, col0: int, sw: int, valid: list[bool]
) -> ir.Value:
    """Lanes ``xrow[col0 + lane*sw]`` where ``valid`` (compile-time), 0.0 elsewhere.

    Stride 1: one (masked) load; stride 2: two contiguous loads and an even-lane shuffle
    (an odd lane inside the row is read and dropped, one outside is masked); other
    strides: a masked gather. ``xrow`` may point outside the buffer (a padded border)."""
    W = len(valid)
    mask = ir.Constant(ir.VectorType(ir.IntType(1), W), [int(v) for v in valid])
    p = fptr(b, xrow, col0, inbounds=False)
    if sw == 1:
        return vload(b, p, W) if all(valid) else masked_load(b, p, W, mask)
    if sw == 2:
        halves = []
        for h in range(2):
            need = [int(0 <= col0 + h * W + pos < row_len) for pos in range(W)]
            hm = ir.Constant(ir.VectorType(ir.IntType(1), W), need)
            ph = fptr(b, p, h * W, inbounds=False)
            halves.append(vload(b, ph, W) if all(need) else masked_load(b, ph, W, hm))
        return b.shuffle_vector(
            halves[0], halves[1], ir.Constant(ir.VectorType(I32, W), [2 * i for i in range(W)])
        )
    idx = ir.Constant(ir.VectorType(I32, W), [lane * sw for lane in range(W)])
    return masked_gather(b, p, idx, mask)


class _DepthwiseEmitter:
    """group == C == K: per channel, rows of output vectors, each a chain of R*S FMAs."""

    def __init__(self, k: ConvKernel, b: ir.IRBuilder, epilogue: Epilogue | None) -> None:
        self.k, self.b, self.W = k, b, k.vector_width
        self.epilogue = epilogue
        self.block = k.sched.ow_block
        self.res: ir.Value | None = None  # the residual argument, laid out like y
        self.res_c: ir.Value | None = None

    def emit(self, x, w, bias, y) -> None:
        k, b, W = self.k, self.b, self.W
        sh, dh, pt = k.strides[0], k.dilations[0], k.pads[0]
        hw, P = k.H * k.W, k.OH * k.OW
        # rows whose every kernel tap is inside the image: a run-time loop; others peeled
        interior = [
            oh for oh in range(k.OH) if oh * sh - pt >= 0 and oh * sh - pt + (k.R - 1) * dh < k.H
        ]
        lo, hi = (interior[0], interior[-1] + 1) if interior else (0, 0)

        def channel(nc: ir.Value) -> None:
            c = b.urem(nc, ir.Constant(I64, k.C)) if k.N > 1 else nc
            xc = fptr(b, x, imul(b, nc, hw))
            yc = fptr(b, y, imul(b, nc, P))
            if self.res is not None:
                self.res_c = fptr(b, self.res, imul(b, nc, P))
            wc = fptr(b, w, imul(b, c, k.R * k.S))
            taps = [
                [splat(b, b.load(fptr(b, wc, r * k.S + s), typ=F32), W) for s in range(k.S)]
                for r in range(k.R)
            ]
            bv = splat(b, b.load(fptr(b, bias, c), typ=F32), W)
            for oh in range(0, lo):
                self._row(xc, yc, taps, bv, ir.Constant(I64, oh), oh)
            if hi > lo:
                for_loop(b, lo, hi, 1, lambda oh: self._row(xc, yc, taps, bv, oh, None))
            for oh in range(hi, k.OH):
                self._row(xc, yc, taps, bv, ir.Constant(I64, oh), oh)

        for_loop(b, 0, k.N * k.C, 1, channel)

    def _row(self, xc, yc, taps, bias_v, oh: ir.Value, oh_const: int | None) -> None:
        k, b, W = self.k, self.b, self.W
        sh, sw = k.strides
        dh, dw = k.dilations
        pt, pl = k.pads[0], k.pads[1]
        rows = range(k.R)
        if oh_const is not None:
            rows = [r for r in rows if 0 <= oh_const * sh - pt + r * dh < k.H]
        yrow = fptr(b, yc, imul(b, oh, k.OW))
        xrows = {
            r: fptr(
                b,
                xc,
                imul(b, iadd(b, imul(b, oh, sh), ir.Constant(I64, r * dh - pt)), k.W),
                inbounds=False,
            )
            for r in rows
        }
        for ow0 in range(0, k.OW, W):
            out_lanes = min(W, k.OW - ow0)
            acc = bias_v
            for r in rows:
                for s in range(k.S):
                    col0 = ow0 * sw + s * dw - pl
                    valid = [lane < out_lanes and 0 <= col0 + lane * sw < k.W for lane in range(W)]
                    if not any(valid):
                        continue
                    v = _row_load(b, k.W, xrows[r], col0, sw, valid)
                    acc = fma(b, taps[r][s], v, acc)
            if self.res_c is not None:
                rp = fptr(b, self.res_c, iadd(b, imul(b, oh, k.OW), ir.Constant(I64, ow0)))
                r = (
                    vload(b, rp, W)
                    if out_lanes == W
                    else masked_load(b, rp, W, lane_mask(W, out_lanes))
                )
                acc = b.fadd(acc, r)
            if self.epilogue is not None:
                acc = self.epilogue(b, acc)
            dst = fptr(b, yrow, ow0)
            if out_lanes < W:
                masked_store(b, acc, dst, lane_mask(W, out_lanes))
            else:
                vstore(b, acc, dst)
