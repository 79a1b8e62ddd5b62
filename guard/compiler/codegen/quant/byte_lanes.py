"""Requantise chains on bytes in float32 vectors: a FusedElementwise program that reads
and writes u8/s8 as well as float32 (lower_qdq's QuantizeLinear and DequantizeLinear
steps around float ops) runs in the float path's vectors instead of the typed path's
scalar loop (which LLVM's vectoriser did not widen when an operand is broadcast: the SE
block's ``DQ(x) * hardsigmoid[c] -> Q`` ran at 1-2 ns an element).

Every value is a float32 lane. A byte operand is loaded and converted (exact); a Cast to
float32 is the identity on it; a Cast to a byte type, allowed only on a Clip whose bounds
lie in the type's range, truncates toward zero (numpy's ``astype`` on an in-range value:
the reference's bits) and a byte output is stored from that integral float. A byte value
read by anything but a Cast (integer arithmetic, which wraps), another Cast, or a step
outside the float table declines: the typed path runs it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen.base import merge_dims
from guard.compiler.codegen.base import strides as row_strides
from guard.compiler.codegen.irutil import F32, I8, I32, add, declare, elem_ptr, i64, loop, mul
from guard.compiler.ir.core import dtype_from_name

BYTES = (np.dtype(np.uint8), np.dtype(np.int8))
F = np.dtype(np.float32)


def byte_program(
    steps: Sequence[Mapping[str, Any]], in_dtypes: Sequence[np.dtype], out_dtype: np.dtype,
    float_ops: frozenset[str],
) -> bool:  # fmt: skip
    """Whether the program runs in float lanes with byte loads and stores (see above)."""
    if any(d not in (F, *BYTES) for d in (*in_dtypes, out_dtype)):
        return False
    if not any(d in BYTES for d in (*in_dtypes, out_dtype)):
        return False
    kinds: list[np.dtype] = []
    for st in steps:
        args = [kinds[int(r[1:])] if isinstance(r, str) else in_dtypes[r] for r in st["args"]]
        if st["op"] == "Cast":
            to = dtype_from_name(st["attrs"]["to"])
            if to == F:
                kinds.append(F)
                continue
            if to not in BYTES or args[0] != F:
                return False
            src = st["args"][0]
            clip = steps[int(src[1:])] if isinstance(src, str) else None
            info = np.iinfo(to)
            if clip is None or clip["op"] != "Clip" or len(clip["args"]) != 1:
                return False
            lo, hi = clip.get("attrs", {}).get("min"), clip.get("attrs", {}).get("max")
            if lo is None or hi is None or lo < info.min or hi > info.max:
                return False
            kinds.append(to)
            continue
        if st["op"] not in float_ops or any(a != F for a in args):
            return False
        kinds.append(F)
    return bool(kinds) and kinds[-1] == out_dtype


def run(
    b: ir.IRBuilder, steps: Sequence[Mapping[str, Any]], value_of: Callable[[int], ir.Value],
    apply_op: Callable[[ir.IRBuilder, str, Sequence[ir.Value], Mapping[str, Any]], ir.Value],
) -> ir.Value:  # fmt: skip
    """The program on float lanes (Casts as above)."""
    got: list[ir.Value] = []
    cache: dict[int, ir.Value] = {}
    for st in steps:
        args = []
        for r in st["args"]:
            if isinstance(r, str):
                args.append(got[int(r[1:])])
            else:
                if r not in cache:
                    cache[r] = value_of(int(r))
                args.append(cache[r])
        if st["op"] == "Cast":
            x = args[0]
            if dtype_from_name(st["attrs"]["to"]) != F:
                name = (
                    f"llvm.trunc.v{x.type.count}f32"
                    if isinstance(x.type, ir.VectorType)
                    else "llvm.trunc.f32"
                )
                x = b.call(declare(b.module, name, x.type, [x.type]), [x])
            got.append(x)
        else:
            got.append(apply_op(b, st["op"], args, st.get("attrs", {})))
    return got[-1]


def emit_pointwise(
    b: ir.IRBuilder, out_shape: Sequence[int],
    operands: Sequence[tuple[ir.Value, Sequence[int], np.dtype]], out: tuple[ir.Value, np.dtype],
    width: int, compute: Callable[[list[ir.Value]], ir.Value],
) -> None:  # fmt: skip
    """out[i] = compute([operand_j[i] as float32 ...]) over out_shape, the innermost loop in
    vectors of ``width`` (emit_elementwise.emit_pointwise with typed loads and stores; a
    tail by lanes, no masked memory access)."""
    all_st = [list(s) for _, s, _ in operands] + [row_strides(out_shape)]
    dims, sts = merge_dims(out_shape, all_st)
    inner = dims[-1]
    w = width if inner > 1 else 1
    vt = ir.VectorType(F32, w) if w > 1 else F32
    out_ptr, odt = out

    def ty(dt: np.dtype) -> ir.Type:
        return F32 if dt == F else I8

    def to_float(v: ir.Value, dt: np.dtype, t: ir.Type) -> ir.Value:
        if dt == F:
            return v
        return b.sitofp(v, t) if dt == np.int8 else b.uitofp(v, t)

    def scalar(ptr: ir.Value, dt: np.dtype, at: ir.Value | int) -> ir.Value:
        return to_float(b.load(elem_ptr(b, ptr, at, ty(dt)), typ=ty(dt)), dt, F32)

    def vector(ptr: ir.Value, dt: np.dtype, at: ir.Value | int) -> ir.Value:
        et = ir.VectorType(ty(dt), w)
        p = b.bitcast(elem_ptr(b, ptr, at, ty(dt)), ir.PointerType(et))
        return to_float(b.load(p, typ=et, align=1 if dt != F else 4), dt, vt)

    def lanes_of(
        ptr: ir.Value, dt: np.dtype, bo: ir.Value, j0: ir.Value | int, si: int, lanes: int
    ) -> ir.Value:
        """``lanes`` elements ``si`` apart, one at a time (a tail or a strided operand)."""
        v = ir.Constant(vt, [0.0] * w)
        for lane in range(lanes):
            x = scalar(ptr, dt, add(b, bo, mul(b, add(b, j0, lane), si)))
            v = b.insert_element(v, x, ir.Constant(I32, lane))
        return v

    def store(v: ir.Value, at: ir.Value, lanes: int) -> None:
        if odt != F:
            it = ir.VectorType(I32, w) if w > 1 else I32
            v = b.trunc(b.fptosi(v, it), ir.VectorType(I8, w) if w > 1 else I8)
        et = ty(odt)
        if w == 1:
            b.store(v, elem_ptr(b, out_ptr, at, et))
        elif lanes == w:
            p = b.bitcast(elem_ptr(b, out_ptr, at, et), ir.PointerType(v.type))
            b.store(v, p, align=1 if odt != F else 4)
        else:
            for lane in range(lanes):
                b.store(b.extract_element(v, ir.Constant(I32, lane)),
                        elem_ptr(b, out_ptr, add(b, at, lane), et))  # fmt: skip

    def body(idx: list[ir.Value]) -> None:
        base = [add(b, *[b.mul(i, i64(s[d])) for d, i in enumerate(idx) if s[d]]) for s in sts]

        def do(j0: ir.Value | int, lanes: int) -> None:
            vals = []
            for (ptr, _, dt), s, bo in zip(operands, sts[:-1], base[:-1], strict=True):
                si = s[-1]
                if si == 0:
                    x = scalar(ptr, dt, bo)
                    if w > 1:
                        x = b.shuffle_vector(b.insert_element(ir.Constant(vt, None), x,
                                                              ir.Constant(I32, 0)),
                                             ir.Constant(vt, None),
                                             ir.Constant(ir.VectorType(I32, w), [0] * w))  # fmt: skip
                    vals.append(x)
                elif w == 1:
                    vals.append(scalar(ptr, dt, add(b, bo, mul(b, j0, si))))
                elif si == 1 and lanes == w:
                    vals.append(vector(ptr, dt, add(b, bo, j0)))
                else:
                    vals.append(lanes_of(ptr, dt, bo, j0, si, lanes))
            store(compute(vals), add(b, base[-1], j0), lanes)

        full = inner // w * w
        if full:
            with loop(b, 0, full, w, "j") as j:
                do(j, w)
        if inner - full:
            do(full, inner - full)

    def nest(d: int, idx: list[ir.Value]) -> None:
        if d == len(dims) - 1:
            body(idx)
            return
        with loop(b, 0, dims[d], 1, f"d{d}") as i:
            nest(d + 1, [*idx, i])

    nest(0, [])
