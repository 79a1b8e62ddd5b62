"""MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool in NCHW, NHWC or NCHW<b>c.

Vector lanes run along channels where they are contiguous (NCHW<b>c, and NHWC with C a
multiple of the width); an NCHW AveragePool runs lanes along the output row
(pool_rows.py); an NCHW GlobalAveragePool sums each plane in numpy's pairwise order
and divides by the count, the reference's mean bit for bit (pairwise.py); else lanes are
scalars. Each output element loops over its
window with one bounds check per tap (pools move few bytes per FLOP; the checks are not
the bottleneck). AveragePool divides by the number of taps inside the input, or inside
the padded input with ``count_include_pad`` (ONNX's rule, ceil_mode windows included).
MaxPool and GlobalMaxPool also take u8/s8 in NCHW (a quantized model's pools: the maximum
of quantized values is the quantized maximum): GlobalMaxPool one scalar lane per output
element, MaxPool in vectors along the output row (quant/pool.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen.base import Emitter, Kernel, float32_only
from guard.compiler.codegen.emit_elementwise import _nan_max
from guard.compiler.codegen.irutil import (
    F32,
    add,
    const,
    elem_ptr,
    entry_alloca,
    i64,
    in_range,
    load_lanes,
    loop,
    splat,
    store_lanes,
)
from guard.compiler.codegen.pairwise import pairwise_sum
from guard.compiler.codegen.pool_rows import emit_row_average_pool
from guard.compiler.codegen.quant.pool import emit_int8_max_pool
from guard.compiler.graph.view import GraphView, OpNode
from guard.compiler.ir.layout import block_of


def logical(shape: Sequence[int], layout: str) -> tuple[int, int, int, int]:
    if layout == "NCHW":
        n, c, h, w = shape
    elif layout == "NHWC":
        n, h, w, c = shape
    else:
        n, cb, h, w, blk = shape
        c = cb * blk
    return n, c, h, w


def layout_strides(
    layout: str, n: int, c: int, h: int, w: int
) -> tuple[int, int, int, int, int, int]:
    """(n, channel block, channel lane, h, w, block size) element strides."""
    if layout == "NCHW":
        return c * h * w, h * w, 0, w, 1, 1
    if layout == "NHWC":
        return h * w * c, 0, 1, w * c, c, c
    blk = block_of(layout) or 1
    return c * h * w, h * w * blk, 1, w * blk, blk, blk


def chan_offset(b: ir.IRBuilder, c: ir.Value, scb: int, scl: int, blk: int) -> ir.Value:
    if blk == 1:
        return b.mul(c, i64(scb))
    if scb == 0:
        return b.mul(c, i64(scl))
    return add(b, b.mul(b.udiv(c, i64(blk)), i64(scb)), b.mul(b.urem(c, i64(blk)), i64(scl)))


def _as_2d(a: Mapping[str, Any]) -> dict[str, Any]:
    """A 1-D pool's window attributes as a 2-D pool's over one row."""
    out = dict(a)
    if "kernel_shape" in a:
        out["kernel_shape"] = [1, *a["kernel_shape"]]
        out["strides"] = [1, *a["strides"]]
        out["dilations"] = [1, *a.get("dilations", [1])]
        p0, p1 = a["pads"]
        out["pads"] = [0, p0, 0, p1]
    return out


MAX_OPS = frozenset({"MaxPool", "GlobalMaxPool"})
INT8 = frozenset({"uint8", "int8"})


class Pool(Emitter):
    ops = frozenset({"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"})

    def decline(self, node: OpNode, g: GraphView) -> str | None:
        dt = g.tensors[node.args[0]].dtype
        if node.op in MAX_OPS and dt in INT8 and g.tensors[node.outputs[0]].dtype == dt:
            if node.attrs.get("layout", "NCHW") != "NCHW":
                return f"no emitter for {node.op} on {dt} in {node.attrs['layout']} (NCHW only)"
        else:
            why = float32_only(node, g)
            if why:
                return why
        if len(node.outputs) > 1:
            return f"no emitter for {node.op} with an Indices output"
        lay = node.attrs.get("layout", "NCHW")
        x = g.tensors[node.args[0]]
        if len(x.shape) != (5 if block_of(lay) else 4) and not (
            lay == "NCHW" and len(x.shape) == 3
        ):
            return f"no emitter for {node.op} on {len(x.shape)}-D input (1-D and 2-D pooling only)"
        return None

    def emit(
        self, b: ir.IRBuilder, ins: list[ir.Value | None], outs: list[ir.Value], k: Kernel
    ) -> None:
        a = k.attrs
        lay = a.get("layout", "NCHW")
        xo, yo = k.inputs[0], k.outputs[0]
        assert xo is not None
        xshape, yshape = tuple(xo.shape), tuple(yo.shape)
        if len(xshape) == 3:  # 1-D pooling: a 2-D one over a single row
            xshape, yshape = (*xshape[:2], 1, xshape[2]), (*yshape[:2], 1, yshape[2])
            a = _as_2d(a)
        N, C, H, W = logical(xshape, lay)
        _, _, OH, OW = logical(yshape, lay)
        blk = block_of(lay) or 0
        W_ = k.vector_width
        # Lanes along channels where they are contiguous: blocked, or NHWC (a masked last
        # vector when C is not a multiple of the width); NCHW pools run scalar lanes.
        L = W_ if (blk and blk % W_ == 0) or lay == "NHWC" else 1
        ty: ir.Type = ir.VectorType(F32, L) if L > 1 else F32
        idt = np.dtype(xo.dtype) if xo.dtype in INT8 else None
        if idt is not None:  # quantized MaxPool: NCHW (decline), scalar lanes
            L, ty = 1, ir.IntType(8)
            lowest = ir.Constant(ty, int(np.iinfo(idt).min))
            greater = b.icmp_signed if idt.kind == "i" else b.icmp_unsigned

        def start() -> ir.Constant:
            return lowest if idt is not None else const(ty, float("-inf"))

        def ld(base: ir.Value, at: ir.Value, lanes: int) -> ir.Value:
            if idt is not None:
                return b.load(elem_ptr(b, base, at, ty), typ=ty)
            return load_lanes(b, base, at, L, lanes)

        def st(v: ir.Value, base: ir.Value, at: ir.Value, lanes: int) -> None:
            if idt is not None:
                b.store(v, elem_ptr(b, base, at, ty))
            else:
                store_lanes(b, v, base, at, lanes)

        def vmax(cur: ir.Value, v: ir.Value) -> ir.Value:
            if idt is not None:
                return b.select(greater(">", v, cur), v, cur)
            return _nan_max(b, cur, v)

        sx = layout_strides(lay, N, C, H, W)
        sy = layout_strides(lay, N, C, OH, OW)
        is_max = k.op in ("MaxPool", "GlobalMaxPool")
        x, y = ins[0], outs[0]
        full = C // L * L

        def sweep(body: Callable[[ir.Value, int], None]) -> None:
            if full:
                with loop(b, 0, full, L, "cv") as c:
                    body(c, L)
            if C - full:
                body(i64(full), C - full)

        if k.op.startswith("Global"):

            def gbody(c: ir.Value, lanes: int) -> None:
                with loop(b, 0, N, 1, "n") as n:
                    xb = add(b, b.mul(n, i64(sx[0])), chan_offset(b, c, sx[1], sx[2], sx[5]))
                    yb = add(b, b.mul(n, i64(sy[0])), chan_offset(b, c, sy[1], sy[2], sy[5]))
                    if exact_mean:  # the reference's mean: numpy's sum, then / count
                        r = b.fdiv(pairwise_sum(b, x, xb, H * W), const(F32, float(H * W)))
                        st(r, y, yb, lanes)
                        return
                    acc = entry_alloca(b, ty)
                    b.store(start() if is_max else const(ty, 0.0), acc)
                    with loop(b, 0, H, 1, "h") as h, loop(b, 0, W, 1, "w") as w:
                        v = ld(x, add(b, xb, b.mul(h, i64(sx[3])), b.mul(w, i64(sx[4]))), lanes)
                        cur = b.load(acc, typ=ty)
                        b.store(vmax(cur, v) if is_max else b.fadd(cur, v), acc)
                    r = b.load(acc, typ=ty)
                    if not is_max:
                        r = b.fmul(r, const(ty, 1.0 / (H * W)))
                    st(r, y, yb, lanes)

            # NCHW float planes are contiguous runs: numpy's pairwise order, 8 lanes a step
            exact_mean = not is_max and idt is None and L == 1 and sx[4] == 1 and sx[3] == W
            sweep(gbody)
            return
        R, S = a["kernel_shape"]
        sh, sw = a["strides"]
        dh, dw = a.get("dilations", [1, 1])
        pt, pl, pb, pr = a["pads"]
        if idt is not None:  # vectors along the output row (quant/pool.py)
            emit_int8_max_pool(b, x, y, idt, (N, C, H, W), (OH, OW), (R, S), (sh, sw),
                               (dh, dw), (pt, pl))  # fmt: skip
            return
        include = bool(a.get("count_include_pad", 0))
        if not is_max and lay == "NCHW" and L == 1:  # lanes along the output row
            emit_row_average_pool(b, x, y, W_, (N, C, H, W), (OH, OW), (R, S), (sh, sw),
                                  (dh, dw), (pt, pl, pb, pr), include)  # fmt: skip
            return

        def wbody(c: ir.Value, lanes: int) -> None:
            with (
                loop(b, 0, N, 1, "n") as n,
                loop(b, 0, OH, 1, "oh") as oh,
                loop(b, 0, OW, 1, "ow") as ow,
            ):
                xb = add(b, b.mul(n, i64(sx[0])), chan_offset(b, c, sx[1], sx[2], sx[5]))
                acc = entry_alloca(b, ty)
                cnt = entry_alloca(b, F32)
                b.store(start() if is_max else const(ty, 0.0), acc)
                b.store(const(F32, 0.0), cnt)
                ih0 = b.sub(b.mul(oh, i64(sh)), i64(pt))
                iw0 = b.sub(b.mul(ow, i64(sw)), i64(pl))
                for r in range(R):
                    for s in range(S):
                        ih = add(b, ih0, r * dh)
                        iw = add(b, iw0, s * dw)
                        inside = b.and_(in_range(b, ih, 0, H), in_range(b, iw, 0, W))
                        if include and not is_max:
                            padded = b.and_(
                                in_range(b, ih, -pt, H + pb), in_range(b, iw, -pl, W + pr)
                            )
                            one = b.select(padded, const(F32, 1.0), const(F32, 0.0))
                            b.store(b.fadd(b.load(cnt, typ=F32), one), cnt)
                        with b.if_then(inside):
                            at = add(b, xb, b.mul(ih, i64(sx[3])), b.mul(iw, i64(sx[4])))
                            v = ld(x, at, lanes)
                            cur = b.load(acc, typ=ty)
                            b.store(vmax(cur, v) if is_max else b.fadd(cur, v), acc)
                            if not include and not is_max:
                                b.store(b.fadd(b.load(cnt, typ=F32), const(F32, 1.0)), cnt)
                res = b.load(acc, typ=ty)
                if not is_max:
                    # Divide, as the reference does (sum / count): a multiply by the
                    # reciprocal rounds differently, and in a quantized model that one
                    # ulp can move the next QuantizeLinear by a step.
                    count = b.load(cnt, typ=F32)
                    res = b.fdiv(res, splat(b, count, L) if L > 1 else count)
                yb = add(b, b.mul(n, i64(sy[0])), chan_offset(b, c, sy[1], sy[2], sy[5]),
                         b.mul(oh, i64(sy[3])), b.mul(ow, i64(sy[4])))  # fmt: skip
                st(res, y, yb, lanes)

        sweep(wbody)
