"""Data movement that the memory plan did not elide: Reshape/Identity copies, Concat, Split,
Slice, Transpose (a thread task's: a band of its output), Relayout (NCHW <-> NCHW<b>c,
NCHW <-> NHWC), Pad, Expand (a broadcast: stride 0 along the broadcast dims) and Tile (the
output viewed as ``[repeats_0, d_0, repeats_1, d_1, ...]``, read with stride 0 along each
repeat).

All of them are one strided copy: loops over the output's dims (merged where the input's
strides allow, so a contiguous run is one loop), each output element read from
``input[offset + sum(i_d * stride_d)]``; a float Transpose that moves the input's innermost
dim away from the output's (attention's k^T) goes by vector-width tiles transposed in
registers instead. Elements move as integers of the dtype's size,
so every dtype is supported; a unit-stride inner loop is vectorised by LLVM. Pad in
reflect, edge and wrap mode is a gather through per-axis index tables (emit_resize's),
the source indices numpy's own ``np.pad`` gives for ``arange``.
"""

from __future__ import annotations

from collections.abc import Sequence

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen.base import Emitter, Kernel, bcast_strides, strides
from guard.compiler.codegen.emit_elementwise import merge_dims
from guard.compiler.codegen.emit_resize import emit_taps
from guard.compiler.codegen.irutil import add, i64, load, loop, store
from guard.compiler.codegen.shuffles import transpose_square
from guard.compiler.graph.view import GraphView, OpNode
from guard.compiler.ir.layout import block_of

_INT = {1: ir.IntType(8), 2: ir.IntType(16), 4: ir.IntType(32), 8: ir.IntType(64)}


def strided_copy(
    b: ir.IRBuilder,
    out_shape: Sequence[int],
    out_ptr: ir.Value,
    out_offset: int,
    out_strides: Sequence[int],
    in_ptr: ir.Value,
    in_offset: int,
    in_strides: Sequence[int],
    itemsize: int,
) -> None:
    """out[out_offset + i.out_strides] = in[in_offset + i.in_strides] over out_shape."""
    if int(np.prod(out_shape, dtype=np.int64)) == 0:
        return
    ty = _INT[itemsize]
    dims, (ins, outs) = merge_dims(out_shape, [in_strides, out_strides])

    def nest(d: int, in_idx: ir.Value, out_idx: ir.Value) -> None:
        if d == len(dims):
            v = b.load(b.gep(in_ptr, [in_idx], source_etype=ty, inbounds=True), typ=ty)
            b.store(v, b.gep(out_ptr, [out_idx], source_etype=ty, inbounds=True))
            return
        if dims[d] == 1:
            nest(d + 1, in_idx, out_idx)
            return
        with loop(b, 0, dims[d], 1, f"c{d}") as i:
            nest(
                d + 1,
                add(b, in_idx, b.mul(i, i64(ins[d]))),
                add(b, out_idx, b.mul(i, i64(outs[d]))),
            )

    nest(0, i64(in_offset), i64(out_offset))


def _itemsize(k: Kernel) -> int:
    return np.dtype(k.outputs[0].dtype).itemsize


def _range(dim: int, start: int, end: int, step: int) -> range:
    return range(dim)[slice(start, end, step)]


def relayout_strides(
    in_shape: Sequence[int], src: str, dst: str
) -> tuple[list[int], list[int]] | None:
    """(output shape to loop over, input strides for it) for a Relayout, or None."""
    st = strides(in_shape)
    if src == "NCHW" and dst == "NHWC":
        return [in_shape[0], in_shape[2], in_shape[3], in_shape[1]], [st[0], st[2], st[3], st[1]]
    if src == "NHWC" and dst == "NCHW":
        n, h, w, c = in_shape
        return [n, c, h, w], [st[0], st[3], st[1], st[2]]
    bs, bd = block_of(src), block_of(dst)
    if src == "NCHW" and bd:
        n, c, h, w = in_shape
        # out [N, C/b, H, W, b] reads in[n, cb*b + cl, h, w]
        return [n, c // bd, h, w, bd], [st[0], bd * st[1], st[2], st[3], st[1]]
    if bs and dst == "NCHW":
        n, cb, h, w, blk = in_shape
        # out viewed as [N, CB, b, H, W] reads in[n, cb, h, w, cl]
        return [n, cb, blk, h, w], [st[0], st[1], st[4], st[2], st[3]]
    return None


class Copy(Emitter):
    ops = frozenset(
        {
            "Reshape",
            "Identity",
            "Concat",
            "Split",
            "Slice",
            "Transpose",
            "Relayout",
            "Pad",
            "Expand",
            "Tile",
        }  # fmt: skip
    )

    def decline(self, node: OpNode, g: GraphView) -> str | None:
        a = node.attrs
        if node.op == "Relayout":
            x = g.tensors[node.args[0]]
            if relayout_strides(x.shape, a["from"], a["to"]) is None:
                return f"no emitter for Relayout {a['from']} -> {a['to']}"
        if node.op == "Pad":
            if a.get("mode", "constant") not in ("constant", "reflect", "edge", "wrap"):
                return f"no emitter for Pad mode {a.get('mode')!r}"
            if len(node.args) > 1 and any(node.args[1:]):
                return "no emitter for Pad with pads/value inputs"
            if a.get("mode", "constant") == "constant" and any(p < 0 for p in a["pads"]):
                return "no emitter for Pad with negative pads or pads/value inputs"
            if g.tensors[node.args[0]].dtype != "float32" and a.get("value", 0) != 0:
                return "no emitter for Pad with a non-zero value on a non-float tensor"
        return None

    def emit(
        self, b: ir.IRBuilder, ins: list[ir.Value | None], outs: list[ir.Value], k: Kernel
    ) -> None:
        a = k.attrs
        size = _itemsize(k)
        x = k.inputs[0]
        assert x is not None
        xs = x.shape
        if k.op in ("Reshape", "Identity"):
            n = int(np.prod(xs, dtype=np.int64))
            strided_copy(b, [n], outs[0], 0, [1], ins[0], 0, [1], size)
        elif k.op == "Concat":
            out = k.outputs[0].shape
            axis = a["axis"] % len(out)
            off = 0
            for p, o in zip(ins, k.inputs, strict=True):
                if p is None or o is None:
                    continue
                ost = strides(out)
                strided_copy(
                    b, o.shape, outs[0], off * ost[axis], ost, p, 0, strides(o.shape), size
                )
                off += o.shape[axis]
        elif k.op == "Split":
            axis = a["axis"] % len(xs)
            off = 0
            st = strides(xs)
            for p, o in zip(outs, k.outputs, strict=True):
                strided_copy(b, o.shape, p, 0, strides(o.shape), ins[0], off * st[axis], st, size)
                off += o.shape[axis]
        elif k.op == "Slice":
            st = strides(xs)
            start, step = [0] * len(xs), [1] * len(xs)
            for ax, s, e, sp in zip(a["axes"], a["starts"], a["ends"], a["steps"], strict=True):
                r = _range(xs[ax % len(xs)], int(s), int(e), int(sp))
                start[ax % len(xs)] = r.start if len(r) else 0
                step[ax % len(xs)] = r.step
            base = sum(s0 * s1 for s0, s1 in zip(start, st, strict=True))
            out = k.outputs[0].shape
            strided_copy(
                b,
                out,
                outs[0],
                0,
                strides(out),
                ins[0],
                base,
                [s * p for s, p in zip(st, step, strict=True)],
                size,
            )
        elif k.op == "Transpose":
            perm = a.get("perm") or list(range(len(xs)))[::-1]
            st = strides(xs)
            out = k.outputs[0].shape
            in_st, o_st = [st[p] for p in perm], strides(out)
            x, y, xo, yo = ins[0], outs[0], 0, 0
            if "band" in a:  # a thread task's band [d0, d1) of one output axis (split.py)
                ax, d0, d1 = a["band"]
                out = tuple(d1 - d0 if d == ax else n for d, n in enumerate(out))
                xo, yo = d0 * in_st[ax], d0 * o_st[ax]
                x = b.gep(x, [i64(xo * size)], source_etype=_INT[1])
                y = b.gep(y, [i64(yo * size)], source_etype=_INT[1])
            if size != 4 or not _transpose_tiles(b, out, in_st, x, y, k.vector_width, o_st):
                strided_copy(b, out, outs[0], yo, o_st, ins[0], xo, in_st, size)
        elif k.op == "Relayout":
            rel = relayout_strides(xs, a["from"], a["to"])
            assert rel is not None
            shape, in_st = rel
            blk = block_of(a["to"]) or block_of(a["from"])
            if (
                size == 4
                and blk == k.vector_width
                and blk > 1
                and {a["from"], a["to"]} == {"NCHW", f"NCHW{blk}c"}
            ):
                _relayout_blocked(b, ins[0], outs[0], xs, a["from"] == "NCHW", blk)
            else:
                strided_copy(b, shape, outs[0], 0, strides(shape), ins[0], 0, in_st, size)
        elif k.op == "Expand":
            out = k.outputs[0].shape
            st = bcast_strides(xs, out)
            strided_copy(b, out, outs[0], 0, strides(out), ins[0], 0, st, size)
        elif k.op == "Tile":
            out = k.outputs[0].shape
            view = [v for d, n in enumerate(xs) for v in (out[d] // max(n, 1), n)]
            ist = [v for s in strides(xs) for v in (0, s)]
            strided_copy(b, view, outs[0], 0, strides(view), ins[0], 0, ist, size)
        elif k.op == "Pad" and a.get("mode", "constant") != "constant":
            out = k.outputs[0].shape
            n = len(xs)
            taps: list[tuple[np.ndarray, np.ndarray | None] | None] = []
            for d in range(n):
                lo, hi = a["pads"][d], a["pads"][d + n]
                src = np.pad(np.arange(xs[d]), (max(lo, 0), max(hi, 0)), mode=a["mode"])
                src = src[max(-lo, 0) : len(src) - max(-hi, 0)]
                same = len(src) == xs[d] and bool((src == np.arange(xs[d])).all())
                taps.append(None if same else (src.reshape(-1, 1), None))
            emit_taps(b, ins[0], outs[0], xs, out, taps, _INT[size])
        elif k.op == "Pad":
            out = k.outputs[0].shape
            n = len(xs)
            total = int(np.prod(out, dtype=np.int64))
            ty = _INT[size]
            value = float(a.get("value", 0.0))
            fill = ir.Constant(
                ty,
                int(np.frombuffer(np.asarray(value, k.outputs[0].dtype).tobytes(), f"u{size}")[0]),
            )
            with loop(b, 0, total, 1, "fill") as i:
                b.store(fill, b.gep(outs[0], [i], source_etype=ty, inbounds=True))
            ost = strides(out)
            base = sum(a["pads"][d] * ost[d] for d in range(n))
            strided_copy(b, xs, outs[0], base, ost, ins[0], 0, strides(xs), size)


def tiled_transpose_dims(
    out: Sequence[int], in_st: Sequence[int], w: int
) -> tuple[int, int] | None:
    """(i, p) where a permutation (output ``out``, read at ``in_st``) goes by ``w x w`` tiles:
    its innermost output dim ``i`` reads the input at a stride, the input's innermost dim is
    another output dim ``p``, both multiples of the vector width ``w``; else None."""
    kept = [d for d in range(len(out)) if out[d] > 1]
    ones = [d for d in kept if in_st[d] == 1]
    if w < 4 or not kept or not ones or kept[-1] == ones[0] or strides(out)[kept[-1]] != 1:
        return None
    i, p = kept[-1], ones[0]
    return None if out[i] % w or out[p] % w else (i, p)


def _transpose_tiles(
    b: ir.IRBuilder, out: Sequence[int], in_st: Sequence[int], x: ir.Value, y: ir.Value, w: int,
    o_st: Sequence[int],
) -> bool:  # fmt: skip
    """A 4-byte permutation that :func:`tiled_transpose_dims` accepts (attention's k -> k^T):
    ``w x w`` tiles moved as ``w`` vector loads along the input's rows, an in-register
    transpose and ``w`` vector stores along the output's, the other dims looped over. False,
    emitting nothing, for any other permutation (the strided copy's). ``o_st``: the output's
    element strides (a band of a thread task is a part of a larger output)."""
    dims = tiled_transpose_dims(out, in_st, w)
    if dims is None:
        return False
    i, p = dims
    others = [d for d in range(len(out)) if out[d] > 1 and d not in (i, p)]

    def nest(j: int, ib: ir.Value, ob: ir.Value) -> None:
        if j < len(others):
            d = others[j]
            with loop(b, 0, out[d], 1, f"t{d}") as t:
                nest(j + 1, add(b, ib, b.mul(t, i64(in_st[d]))), add(b, ob, b.mul(t, i64(o_st[d]))))
            return
        with loop(b, 0, out[p], w, "tp") as p0, loop(b, 0, out[i], w, "ti") as i0:
            ibase = add(b, ib, p0, b.mul(i0, i64(in_st[i])))
            rows = [load(b, x, add(b, ibase, r * in_st[i]), w) for r in range(w)]
            obase = add(b, ob, b.mul(p0, i64(o_st[p])), i0)
            for r, v in enumerate(transpose_square(b, rows)):  # v: lanes along i, at p0 + r
                store(b, v, y, add(b, obase, r * o_st[p]))

    nest(0, i64(0), i64(0))
    return True


def _relayout_blocked(
    b: ir.IRBuilder, x: ir.Value, y: ir.Value, xs: Sequence[int], to_blocked: bool, blk: int
) -> None:
    """NCHW <-> NCHW<blk>c with blk the vector width: blk x blk tiles (blk channels x blk
    columns) moved as blk vector loads, an in-register transpose and blk vector stores;
    the columns past the last whole tile go through the strided copy."""

    if to_blocked:
        n_, c, h, w = xs
    else:
        n_, cb_, h, w, _ = xs
        c = cb_ * blk
    cb = c // blk
    full = w // blk * blk
    hw = h * w
    if full:
        with loop(b, 0, n_ * cb, 1, "ncb") as ncb, loop(b, 0, h, 1, "h") as hh:
            nchw_base = add(b, b.mul(ncb, i64(blk * hw)), b.mul(hh, i64(w)))  # [n, cb*blk, h, 0]
            blk_base = add(
                b, b.mul(ncb, i64(hw * blk)), b.mul(hh, i64(w * blk))
            )  # [n, cb, h, 0, 0]
            with loop(b, 0, full, blk, "w0") as w0:
                if to_blocked:
                    rows = [load(b, x, add(b, nchw_base, j * hw, w0), blk) for j in range(blk)]
                    for j, v in enumerate(transpose_square(b, rows)):
                        store(b, v, y, add(b, blk_base, b.mul(add(b, w0, j), i64(blk))))
                else:
                    rows = [
                        load(b, x, add(b, blk_base, b.mul(add(b, w0, j), i64(blk))), blk)
                        for j in range(blk)
                    ]
                    for j, v in enumerate(transpose_square(b, rows)):
                        store(b, v, y, add(b, nchw_base, j * hw, w0))
    if w - full:
        tail = w - full
        if to_blocked:  # out [N, CB, H, tail, blk] reads in[n, cb*blk + cl, h, full + t]
            shape = [n_, cb, h, tail, blk]
            ost = [cb * hw * blk, hw * blk, w * blk, blk, 1]
            ist = [c * hw, blk * hw, w, 1, hw]
            strided_copy(b, shape, y, full * blk, ost, x, full, ist, 4)
        else:  # out [N, CB, blk, H, tail] (NCHW) reads in[n, cb, h, full + t, cl]
            shape = [n_, cb, blk, h, tail]
            ost = [c * hw, blk * hw, hw, w, 1]
            ist = [cb * hw * blk, hw * blk, 1, w * blk, blk]
            strided_copy(b, shape, y, full, ost, x, full * blk, ist, 4)


class Fill(Emitter):
    """``Fill`` (ConstantOfShape too large to fold): out[i] = value for every element.

    The value is stored as its bit pattern in an integer of the element's width, so one
    loop serves every dtype (bool, integers, float32) and LLVM turns it into a memset or
    vector stores.
    """

    ops = frozenset({"Fill"})

    def emit(
        self, b: ir.IRBuilder, ins: list[ir.Value | None], outs: list[ir.Value], k: Kernel
    ) -> None:
        out = k.outputs[0]
        size = _itemsize(k)
        n = int(np.prod(out.shape, dtype=np.int64))
        bits = np.array(k.attrs["value"], dtype=out.dtype).reshape(1)
        pattern = int(bits.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[size])[0])
        ty = _INT[size]
        value = ir.Constant(ty, pattern)
        with loop(b, 0, n, 1, "f") as i:
            b.store(value, b.gep(outs[0], [i], source_etype=ty, inbounds=True))
