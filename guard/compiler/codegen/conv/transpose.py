"""ConvTranspose, 1-D and 2-D, any stride, dilation, group, pads (negative ones too: an
``output_shape`` larger than the full result) and output_padding, NCHW.

Written as a gather, so each output element is computed once and nothing is reduced
across output elements: output row ``oh`` receives input row ``ih`` through kernel row
``kh`` when ``oh + pad_top - kh * dilation == ih * stride`` (and likewise for columns).
Vector lanes run along output channels: the weights are packed at build time as
``[g][K/g/L][R][S][C/g][L]`` (K/g padded to whole vectors, so a run of vectors is
contiguous: a thread task's slice), so for one output pixel and one valid tap the loop
over input channels does one broadcast input load and ``KB`` weight-vector FMAs into
``KB`` accumulators (up to :data:`MAX_VECTORS` vectors of output channels at a time).
The row conditions are evaluated once per output row, the column ones once per pixel,
each tap's channel loop runs only under its condition. The bias (input 2) starts the
accumulators; the vectors are stored lane by lane into NCHW.

A ConvTranspose whose stride equals its kernel (and ``ConvTransposeInteger``, its int8
form) runs transpose_blocks.py's kernel instead: vectors along pixels, whole-vector stores.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen.base import Emitter, Kernel, float32_only
from guard.compiler.codegen.conv.transpose_blocks import emit_blocks, pack_blocks
from guard.compiler.codegen.irutil import (
    add,
    const,
    fma,
    for_loop_carried,
    i64,
    load,
    load_lanes,
    loop,
    mul,
    select_when,
    splat,
    store_strided,
    vec,
)
from guard.compiler.codegen.quant.epilogue import epilogue_decline, epilogue_key, epilogue_words
from guard.compiler.graph.view import GraphView, OpNode
from guard.compiler.ir.conv_transpose import EXACT, blockwise, exact_bound
from guard.compiler.ir.isa_table import active_table

MAX_VECTORS = 4  # accumulators of output channels per pass (registers: 4 of 16 or 32)


@dataclass(frozen=True)
class TransposeGeometry:
    """A ConvTranspose's sizes, 1-D ones read as 2-D with one row."""

    N: int
    C: int
    K: int
    g: int
    IH: int
    IW: int
    OH: int
    OW: int
    R: int
    S: int
    sh: int
    sw: int
    dh: int
    dw: int
    ph: int
    pw: int

    @classmethod
    def of(
        cls, attrs: Mapping[str, Any], x: Sequence[int], w: Sequence[int], y: Sequence[int]
    ) -> TransposeGeometry:
        two = len(x) == 4
        st, dil, pads = list(attrs["strides"]), list(attrs["dilations"]), list(attrs["pads"])
        g = int(attrs["group"])
        return cls(
            N=x[0], C=x[1], K=w[1] * g, g=g,
            IH=x[2] if two else 1, IW=x[-1], OH=y[2] if two else 1, OW=y[-1],
            R=w[2] if two else 1, S=w[-1],
            sh=st[0] if two else 1, sw=st[-1], dh=dil[0] if two else 1, dw=dil[-1],
            ph=pads[0] if two else 0, pw=pads[1] if two else pads[0],
        )  # fmt: skip

    @property
    def Cg(self) -> int:
        return self.C // self.g

    @property
    def Kg(self) -> int:
        return self.K // self.g

    def padded_kg(self, lanes: int) -> int:
        return -(-self.Kg // lanes) * lanes

    def pack(self, w: np.ndarray, lanes: int) -> np.ndarray:
        """[C, K/g, (R,) S] -> [g][K/g/L][R][S][C/g][L], zeros past K/g: a run of whole
        output-channel vectors is contiguous (a thread task's slice)."""
        kgp = self.padded_kg(lanes)
        w5 = np.zeros((self.g, self.Cg, kgp, self.R, self.S), np.float32)
        w5[:, :, : self.Kg] = w.reshape(self.g, self.Cg, self.Kg, self.R, self.S)
        w6 = w5.reshape(self.g, self.Cg, kgp // lanes, lanes, self.R, self.S)
        return np.ascontiguousarray(w6.transpose(0, 2, 4, 5, 1, 3))

    def vector_floats(self, lanes: int) -> int:
        """Floats of packed weights per output-channel vector."""
        return self.R * self.S * self.Cg * lanes

    @property
    def flops(self) -> int:
        return 2 * self.N * self.C * self.Kg * self.IH * self.IW * self.R * self.S


def _tap(
    b: ir.IRBuilder, o: ir.Value, pad: int, k: int, dil: int, stride: int, n: int
) -> tuple[ir.Value, ir.Value]:
    """(valid, input index) of output index ``o`` through kernel tap ``k``."""
    t = b.sub(add(b, o, pad), i64(k * dil))
    if stride == 1:
        return b.icmp_unsigned("<", t, i64(n)), t
    q = b.sdiv(t, i64(stride))
    ok = b.and_(b.icmp_signed(">=", t, i64(0)), b.icmp_signed("==", b.srem(t, i64(stride)), i64(0)))
    return b.and_(ok, b.icmp_signed("<", q, i64(n))), q


class ConvTranspose(Emitter):
    ops = frozenset({"ConvTranspose", "ConvTransposeInteger", "FusedConvTransposeInteger"})

    def decline(self, node: OpNode, g: GraphView) -> str | None:
        if node.op != "ConvTranspose":
            return self._decline_integer(node, g)
        why = float32_only(node, g)
        if why:
            return why
        w = g.tensors[node.args[1]]
        if len(w.shape) not in (3, 4):
            return f"no emitter for ConvTranspose with {len(w.shape) - 2} spatial dims (1-D, 2-D)"
        if w.kind != "const":
            return "no emitter for ConvTranspose with run-time weights"
        return None

    def _decline_integer(self, node: OpNode, g: GraphView) -> str | None:
        x, w = (g.tensors[v] for v in node.args[:2])
        if x.dtype not in ("uint8", "int8") or w.dtype not in ("uint8", "int8"):
            return f"no emitter for ConvTransposeInteger on {x.dtype} x {w.dtype}"
        if not all(a and g.tensors[a].kind == "const" for a in node.args[1:4]):
            return "no emitter for ConvTransposeInteger with run-time weights or zero points"
        if not blockwise(node.attrs, x.shape, w.shape):
            return "no emitter for ConvTransposeInteger whose stride is not its kernel"
        if node.op == "FusedConvTransposeInteger":
            consts = node.args[4:]
            if not all(a and g.tensors[a].kind == "const" for a in consts):
                return "no emitter for FusedConvTransposeInteger with a run-time epilogue operand"
            y = g.tensors[node.outputs[0]]
            why = epilogue_decline(node.attrs["program"], [g.tensors[a].dtype for a in consts],
                                   y.dtype)  # fmt: skip
            return f"no emitter for FusedConvTransposeInteger: {why}" if why else None
        return None

    def plan_constants(
        self, op: str, attrs: Mapping[str, Any], values: Mapping[int, np.ndarray],
        inputs: Sequence[Any], outputs: Sequence[Any], width: int, target: Any = None,
    ) -> tuple[dict[int, np.ndarray], dict[str, Any]] | None:  # fmt: skip
        """ConvTransposeInteger: the weights less their zero point as floats, and the
        input's zero point as a fact (transpose_blocks.py); None for the float op."""
        if op == "ConvTranspose" or 1 not in values:
            return None
        w = values[1]
        zx = int(np.asarray(values[2]).reshape(-1)[0])
        zw = np.asarray(values[3]).astype(np.int64).reshape(-1)
        if exact_bound(w, zw) >= EXACT:  # fold_integer_conv never makes one
            raise ValueError(f"ConvTransposeInteger sums can reach 2^24: {w.shape} weights")
        packed = pack_blocks(w, zw)
        if op == "FusedConvTransposeInteger":  # the chain's [K][n] constants after them
            words = epilogue_words(attrs["program"], values, w.shape[1])
            packed = np.concatenate([packed.reshape(-1), words.view(np.float32)])
        return {1: packed}, {"zx": zx}

    def pack(
        self, op: str, attrs: Mapping[str, Any], index: int, value: np.ndarray,
        shapes: Sequence[tuple[int, ...] | None], vector_width: int,
    ) -> np.ndarray | None:  # fmt: skip
        if index != 1 or shapes[0] is None:
            return None
        x = shapes[0]
        if blockwise(attrs, x, value.shape):
            return pack_blocks(value)
        y = [0] * len(x)  # the output's sizes play no part in packing
        return TransposeGeometry.of(attrs, x, value.shape, y).pack(value, vector_width)

    def emit(
        self, b: ir.IRBuilder, ins: list[ir.Value | None], outs: list[ir.Value], k: Kernel
    ) -> None:
        xo, wo = k.inputs[0], k.inputs[1]
        assert xo is not None and wo is not None
        geo = TransposeGeometry.of(k.attrs, xo.shape, wo.shape, k.outputs[0].shape)
        L = k.vector_width
        if blockwise(k.attrs, xo.shape, wo.shape):
            regs = active_table(L).registers
            epi = ""
            if k.op == "FusedConvTransposeInteger":
                epi = epilogue_key(k.attrs["program"], k.outputs[0].dtype)
            emit_blocks(b, ins, outs, geo, k.attrs, L, regs, xo.dtype, epi)
            return
        x, w, y = ins[0], ins[1], outs[0]
        bias = ins[2] if len(ins) > 2 else None
        kgp = geo.padded_kg(L)
        plane = geo.OH * geo.OW
        nvec = kgp // L
        blocks = [(v0, min(nvec, v0 + MAX_VECTORS)) for v0 in range(0, nvec, MAX_VECTORS)]

        with loop(b, 0, geo.N * geo.g, 1, "ng") as ng:
            gi = b.srem(ng, i64(geo.g)) if geo.g > 1 else i64(0)
            x_img = mul(b, ng, geo.Cg * geo.IH * geo.IW)  # [n, gi*Cg] of x
            y_img = mul(b, ng, geo.Kg * plane)  # [n, gi*Kg] of y
            w_grp = mul(b, gi, geo.R * geo.S * geo.Cg * kgp)
            for v0, v1 in blocks:
                with loop(b, 0, geo.OH, 1, "oh") as oh:
                    rows = [_tap(b, oh, geo.ph, r, geo.dh, geo.sh, geo.IH) for r in range(geo.R)]
                    with loop(b, 0, geo.OW, 1, "ow") as ow:
                        self._pixel(b, geo, L, x, w, y, bias, (v0, v1), rows, oh, ow,
                                    (x_img, y_img, w_grp, gi), kgp, plane)  # fmt: skip

    def _pixel(
        self, b: ir.IRBuilder, geo: TransposeGeometry, L: int, x: ir.Value, w: ir.Value,
        y: ir.Value, bias: ir.Value | None, vecs: tuple[int, int], rows: list, oh: ir.Value,
        ow: ir.Value, bases: tuple, kgp: int, plane: int,
    ) -> None:  # fmt: skip
        x_img, y_img, w_grp, gi = bases
        vstride = geo.vector_floats(L)
        v0, v1 = vecs
        vt = vec(L) if L > 1 else ir.FloatType()

        def lanes(v: int) -> int:
            return max(0, min(L, geo.Kg - v * L))

        acc: list[ir.Value] = []
        for v in range(v0, v1):
            if bias is None or lanes(v) == 0:
                acc.append(const(vt, 0.0))
            else:
                k0 = add(b, mul(b, gi, geo.Kg), v * L)
                acc.append(load_lanes(b, bias, k0, L, lanes(v)))
        for s in range(geo.S):
            ok_w, iw = _tap(b, ow, geo.pw, s, geo.dw, geo.sw, geo.IW)
            for r in range(geo.R):
                ok_h, ih = rows[r]
                pix = add(b, x_img, b.mul(ih, i64(geo.IW)), iw)
                wtap = add(b, w_grp, (r * geo.S + s) * geo.Cg * L + v0 * vstride)

                def channels(
                    acc: list[ir.Value] = acc, pix: ir.Value = pix, wtap: ir.Value = wtap
                ) -> list[ir.Value]:
                    def body(c: ir.Value, vals: list[ir.Value]) -> list[ir.Value]:
                        xv = splat(b, load(b, x, add(b, pix, mul(b, c, geo.IH * geo.IW))), L)
                        wc = add(b, wtap, mul(b, c, L))
                        return [
                            fma(b, xv, load(b, w, add(b, wc, j * vstride), L), a)
                            for j, a in enumerate(vals)
                        ]

                    return for_loop_carried(b, 0, geo.Cg, 1, acc, body)

                acc = select_when(b, b.and_(ok_h, ok_w), acc, channels)
        for j, v in enumerate(range(v0, v1)):
            if lanes(v):
                out = add(b, y_img, mul(b, oh, geo.OW), ow, v * L * plane)
                store_strided(b, acc[j], y, out, plane, lanes(v))
