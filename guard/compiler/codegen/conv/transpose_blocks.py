"""ConvTranspose whose stride equals its kernel (no dilation, no begin pads, group 1):
every input pixel writes its own R x S block of the output, nothing overlaps, so the op
is a matrix product ``[pixels, C] x [C, K*R*S]`` whose columns land in the blocks.

Lanes run along input pixels (a row of x is contiguous in NCHW): for a tile of ``nv``
pixel vectors, ``cb`` output channels and the R x S taps, the channel loop does ``nv``
vector loads of x, one broadcast weight per (channel, tap) and ``nv`` FMAs per
broadcast; the S taps of one output row are then interleaved lane by lane (output
column ``iw*S + s``) into ``S*L`` contiguous floats, so every store is a whole vector
(a masked one at the row's tail). Weights are packed ``[K][R][S][C]``.

Each output element is ``bias`` (or 0) followed by one FMA per input channel in channel
order, the order and rounding the general emitter (transpose.py) gives it, so the two
write the same bits; nothing depends on the vector width.

``ConvTransposeInteger`` (u8/s8 x, weights dequantized from u8/s8, int32 out; made by
passes/fold_integer_conv.py) runs the same code on floats: ``x - zx`` and ``w - zw`` are
integers of at most 9 bits, their products and every partial sum are integers below 2^24
(the fold checks ``255 * max over columns of sum |w - zw| < 2^24``), so each float FMA is
exact and the stored int32 is the exact integer sum in any order, on any ISA. Fused with
the requantise chain that reads it (``FusedConvTransposeInteger``, quant/epilogue.py),
the chain runs on that int32 per output channel and the tile stores its bytes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen.irutil import (
    F32,
    I8,
    I32,
    add,
    elem_ptr,
    fma,
    for_loop_carried,
    lane_mask,
    loop,
    masked_load,
    masked_store,
    mul,
    splat,
    tiles,
)
from guard.compiler.codegen.quant.epilogue import apply_epilogue, constant_inputs


def pack_blocks(w: np.ndarray, zw: np.ndarray | None = None) -> np.ndarray:
    """[C, K, (R,) S] -> float32 [K][R][S][C], minus the weight zero point ``zw`` (per
    tensor, or per output channel K) for the integer op."""
    c, k = w.shape[:2]
    wf = w.astype(np.float32).reshape(c, k, -1)
    if zw is not None:
        wf = wf - np.asarray(zw, np.float32).reshape(1, -1, 1)
    return np.ascontiguousarray(wf.transpose(1, 2, 0))


def _tile(lanes: int, vectors: int, taps: int, k: int, registers: int) -> tuple[int, int]:
    """(pixel vectors, output channels) per tile: accumulators nv*cb*taps within the
    registers less four (x vectors and a broadcast)."""
    budget = max(1, registers - 4)
    nv = max(1, min(vectors, 2, budget // taps))
    cb = max(1, min(k, budget // (taps * nv)))
    nv = max(1, min(vectors, budget // (taps * cb)))
    return nv, cb


def _interleave(b: ir.IRBuilder, vs: list[ir.Value], lanes: int) -> ir.Value:
    """One vector whose lane ``j*S + s`` is ``vs[s][j]``."""
    s = len(vs)
    if s == 1:
        return vs[0]
    parts = list(vs)
    p2 = 1 << (s - 1).bit_length()
    parts += [ir.Constant(vs[0].type, ir.Undefined)] * (p2 - s)
    width = lanes
    while len(parts) > 1:
        idx = ir.Constant(ir.VectorType(I32, 2 * width), list(range(2 * width)))
        parts = [b.shuffle_vector(a, c, idx) for a, c in zip(parts[::2], parts[1::2], strict=True)]
        width *= 2
    cat = parts[0]
    mask = [(i % s) * lanes + i // s for i in range(s * lanes)]
    return b.shuffle_vector(
        cat, ir.Constant(cat.type, ir.Undefined), ir.Constant(ir.VectorType(I32, s * lanes), mask)
    )


def emit_blocks(
    b: ir.IRBuilder, ins: list[ir.Value | None], outs: list[ir.Value], geo: Any,
    attrs: Mapping[str, Any], lanes: int, registers: int, x_dtype: str, epilogue: str = "",
) -> None:  # fmt: skip
    """The kernel body; ``geo`` a TransposeGeometry, ``attrs`` may carry ``rows`` (a
    task's input rows) and, for the integer op, ``zx``; ``epilogue`` the fused chain
    (its constants ``[K][n]`` after the packed weights)."""
    x, w, y = ins[0], ins[1], outs[0]
    assert x is not None and w is not None
    integer = x_dtype != "float32"
    bias = None if integer or len(ins) < 3 else ins[2]
    L, R, S, C, K = lanes, geo.R, geo.S, geo.C, geo.K
    IH, IW, OH, OW = geo.IH, geo.IW, geo.OH, geo.OW
    r0, r1 = attrs.get("rows", (0, IH))
    vt = ir.VectorType(F32, L)
    zx = splat(b, ir.Constant(F32, float(attrs.get("zx", 0))), L) if integer else None
    full, part = divmod(IW, L)
    nv, cb = _tile(L, full + (part > 0), R * S, K, registers)
    n_const = len(constant_inputs(json.loads(epilogue)["program"])) if epilogue else 0
    chain = elem_ptr(b, w, K * R * S * C)
    et = F32 if not epilogue or json.loads(epilogue)["out"] == "float32" else I8

    def requantise(a: ir.Value, ch: ir.Value) -> ir.Value:
        """The int32 sum of channel ``ch`` through the chain."""
        row = elem_ptr(b, chain, b.mul(ch, ir.Constant(ch.type, n_const)))

        def constant(col: int) -> ir.Value:
            return splat(b, b.load(elem_ptr(b, row, col), typ=F32, align=4), L)

        return apply_epilogue(b, epilogue, b.fptosi(a, ir.VectorType(I32, L)), constant)[0]

    def load_x(idx: ir.Value, n_lanes: int) -> ir.Value:
        if not integer:
            p = elem_ptr(b, x, idx)
            if n_lanes == L:
                return b.load(p, typ=vt, align=4)
            return masked_load(b, p, L, lane_mask(L, n_lanes))
        it = ir.VectorType(I8, L)
        if n_lanes == L:
            raw = b.load(elem_ptr(b, x, idx, I8), typ=it, align=1)
        else:  # a row's tail: lane by lane, never past the row
            raw = ir.Constant(it, [0] * L)
            for j in range(n_lanes):
                e = b.load(elem_ptr(b, x, add(b, idx, j), I8), typ=I8, align=1)
                raw = b.insert_element(raw, e, ir.Constant(I32, j))
        wide = (
            b.zext(raw, ir.VectorType(I32, L))
            if x_dtype == "uint8"
            else b.sext(raw, ir.VectorType(I32, L))
        )
        return b.fsub(b.sitofp(wide, vt), zx)

    def tile(
        n: ir.Value, co: ir.Value, ncb: int, ih: ir.Value, iw0: ir.Value, vecs: list[int]
    ) -> None:
        """Output channels [co, co+ncb), input row ih, pixel vectors at iw0 with the given
        lane counts."""
        xrow = add(b, mul(b, n, C * IH * IW), b.mul(ih, ir.Constant(ih.type, IW)), iw0)
        init = []
        for j in range(ncb):
            if bias is None:
                v0 = ir.Constant(vt, [ir.Constant(F32, 0.0)] * L)
            else:
                v0 = splat(b, b.load(elem_ptr(b, bias, add(b, co, j)), typ=F32, align=4), L)
            init += [v0] * (R * S * len(vecs))

        def body(c: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
            xbase = add(b, xrow, b.mul(c, ir.Constant(c.type, IH * IW)))
            xv = [load_x(add(b, xbase, v * L), nl) for v, nl in enumerate(vecs)]
            out = []
            i = 0
            for j in range(ncb):
                wrow = add(b, b.mul(add(b, co, j), ir.Constant(c.type, R * S * C)), c)
                for t in range(R * S):
                    wv = splat(b, b.load(elem_ptr(b, w, add(b, wrow, t * C)), typ=F32, align=4), L)
                    for v in range(len(vecs)):
                        out.append(fma(b, xv[v], wv, acc[i]))
                        i += 1
            return out

        acc = for_loop_carried(b, 0, C, 1, init, body)
        i = 0
        nvec = len(vecs)
        for j in range(ncb):
            ybase = add(
                b, mul(b, n, K * OH * OW), b.mul(add(b, co, j), ir.Constant(co.type, OH * OW))
            )
            for r in range(R):
                yrow = add(
                    b,
                    ybase,
                    b.mul(add(b, b.mul(ih, ir.Constant(ih.type, R)), r), ir.Constant(ih.type, OW)),
                    b.mul(iw0, ir.Constant(iw0.type, S)),
                )
                for v, nl in enumerate(vecs):
                    vs = [acc[i + (r * S + s) * nvec + v] for s in range(S)]
                    if epilogue:
                        vs = [requantise(a, add(b, co, j)) for a in vs]
                    elif integer:
                        vs = [b.bitcast(b.fptosi(a, ir.VectorType(I32, L)), vt) for a in vs]
                    val = _interleave(b, vs, L)
                    p = elem_ptr(b, y, add(b, yrow, v * L * S), et)
                    if nl == L:
                        b.store(
                            val, b.bitcast(p, ir.PointerType(val.type)), align=4 if et == F32 else 1
                        )
                    elif et == I8:  # a row's tail of bytes: lane by lane
                        for e in range(nl * S):
                            b.store(b.extract_element(val, ir.Constant(I32, e)),
                                    elem_ptr(b, p, e, I8))  # fmt: skip
                    else:
                        masked_store(b, val, p, lane_mask(L * S, nl * S))
            i += R * S * nvec

    def row(n: ir.Value, co: ir.Value, ncb: int) -> None:
        with loop(b, r0, r1, 1, "ih") as ih:
            groups = full // nv
            if groups:
                with loop(b, 0, groups * nv * L, nv * L, "iw") as iw0:
                    tile(n, co, ncb, ih, iw0, [L] * nv)
            rest = [L] * (full % nv) + ([part] if part else [])
            if rest:
                tile(n, co, ncb, ih, ir.Constant(ih.type, groups * nv * L), rest)

    with loop(b, 0, geo.N, 1, "n") as n:
        tiles(b, K, cb, lambda co, ncb: row(n, co, ncb))
