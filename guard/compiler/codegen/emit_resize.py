"""Resize (and Upsample): nearest, linear and cubic, every coordinate transformation mode
but ``tf_crop_and_resize``, from scales or sizes (the importer resolves both into
``scales`` and ``out_shape``).

Everything about the coordinates is known at build time, so it is computed there, by the
reference kernel's own code (``guard.compiler.reference.resize.axis_taps``): for each
resized axis, each output index has ``T`` taps (1 nearest, 2 linear, 4 cubic), each an
input offset (the index times the axis's stride, clipped into the input) and a weight.
They become two private constant tables per axis; the loop nest over the output reads
them and sums ``weight_h * weight_w * x[offset_h + offset_w + ...]`` over the taps, the
same separable sum the reference computes (in float32 here, float64 there). Nearest has
no weights: it is a gather, and moves elements as integers, so it takes every dtype.
Axes that are not resized are plain loops; the leading run of them (N and C of an NCHW
image) is one loop.

Declined, with the reason: ``tf_crop_and_resize`` (its extrapolated border is applied
axis by axis), and linear or cubic on anything but float32 (the reference rounds
integers).
"""

from __future__ import annotations

from collections.abc import Sequence

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen.base import Emitter, Kernel, strides
from guard.compiler.codegen.irutil import F32, I64, add, elem_ptr, i64, loop, mul
from guard.compiler.graph.view import GraphView, OpNode
from guard.compiler.reference.resize import axis_taps

_INT = {1: ir.IntType(8), 2: ir.IntType(16), 4: ir.IntType(32), 8: ir.IntType(64)}


def _table(b: ir.IRBuilder, ty: ir.Type, values: Sequence[int | float], what: str) -> ir.Value:
    """A private constant array in the module (one per axis and kind)."""
    arr = ir.ArrayType(ty, len(values))
    g = ir.GlobalVariable(b.module, arr, b.module.get_unique_name(f"{b.function.name}.{what}"))
    g.initializer = ir.Constant(arr, [ir.Constant(ty, v) for v in values])
    g.global_constant = True
    g.linkage = "private"
    return g


class Resize(Emitter):
    ops = frozenset({"Resize"})

    def decline(self, node: OpNode, g: GraphView) -> str | None:
        a = node.attrs
        if a["coordinate_transformation_mode"] == "tf_crop_and_resize":
            return "no emitter for Resize with coordinate_transformation_mode tf_crop_and_resize"
        if a["mode"] not in ("nearest", "linear", "cubic"):
            return f"no emitter for Resize mode {a['mode']!r}"
        dtype = g.tensors[node.args[0]].dtype
        if a["mode"] != "nearest" and dtype != "float32":
            return f"no emitter for Resize mode {a['mode']} on {dtype} (float32 only)"
        return None

    def emit(
        self, b: ir.IRBuilder, ins: list[ir.Value | None], outs: list[ir.Value], k: Kernel
    ) -> None:
        xo = k.inputs[0]
        assert xo is not None and ins[0] is not None
        xs, ys = tuple(xo.shape), tuple(k.outputs[0].shape)
        nearest = k.attrs["mode"] == "nearest"
        ty = _INT[np.dtype(k.outputs[0].dtype).itemsize] if nearest else F32
        taps: list[tuple[np.ndarray, np.ndarray | None] | None] = []
        for d in range(len(xs)):
            got = axis_taps(k.attrs, xs, d)
            taps.append(None if got is None else (got[0], None if nearest else got[1]))
        emit_taps(b, ins[0], outs[0], xs, ys, taps, ty)


def emit_taps(
    b: ir.IRBuilder,
    x: ir.Value,
    y: ir.Value,
    xs: Sequence[int],
    ys: Sequence[int],
    axis_taps: Sequence[tuple[np.ndarray, np.ndarray | None] | None],
    ty: ir.Type,
) -> None:
    """y[o] = sum over taps of prod_d weight_d * x[sum_d index_d * stride_d] (a gather when
    no axis has weights). ``axis_taps[d]`` is None for an axis read straight through, else
    (input indices [ys[d], T], weights [ys[d], T] or None)."""
    if int(np.prod(ys, dtype=np.int64)) == 0:
        return
    ist, ost = strides(xs), strides(ys)
    axes: list[tuple[int, ir.Value, ir.Value | None] | None] = []
    for d, got in enumerate(axis_taps):
        if got is None:
            axes.append(None)
            continue
        idx, w = got
        offs = _table(b, I64, [int(v) * ist[d] for v in idx.reshape(-1)], f"rz{d}")
        wt = None if w is None else _table(b, F32, [float(v) for v in w.reshape(-1)], f"rw{d}")
        axes.append((idx.shape[1], offs, wt))
    lead = 0  # the leading axes read straight through run as one loop
    while lead < len(xs) and axes[lead] is None:
        lead += 1
    lead_n = int(np.prod(ys[:lead], dtype=np.int64)) if lead else 1

    def finish(terms: list[tuple[ir.Value, ir.Value | None]], out_idx: ir.Value) -> None:
        acc: ir.Value | None = None
        for off, wgt in terms:
            p = elem_ptr(b, x, off, ty)
            v = b.load(p, typ=ty)
            if wgt is not None:
                v = b.fmul(v, wgt)
            acc = v if acc is None else b.fadd(acc, v)
        assert acc is not None
        b.store(acc, elem_ptr(b, y, out_idx, ty))

    def nest(d: int, terms: list[tuple[ir.Value, ir.Value | None]], out_idx: ir.Value) -> None:
        if d == len(xs):
            finish(terms, out_idx)
            return
        ax = axes[d]
        with loop(b, 0, ys[d], 1, f"o{d}") as o:
            oi = add(b, out_idx, mul(b, o, ost[d]))
            if ax is None:
                nest(d + 1, [(add(b, t, mul(b, o, ist[d])), w) for t, w in terms], oi)
                return
            taps, offs, wt = ax
            new = []
            for t in range(taps):
                j = add(b, mul(b, o, taps), t)
                off = b.load(elem_ptr(b, offs, j, I64), typ=I64)
                tw = None if wt is None else b.load(elem_ptr(b, wt, j, F32), typ=F32)
                for base, w in terms:
                    ww = tw if w is None else (w if tw is None else b.fmul(w, tw))
                    new.append((add(b, base, off), ww))
            nest(d + 1, new, oi)

    if lead:
        with loop(b, 0, lead_n, 1, "lead") as i:
            nest(lead, [(mul(b, i, ist[lead - 1]), None)], mul(b, i, ost[lead - 1]))
    else:
        nest(0, [(i64(0), None)], i64(0))
