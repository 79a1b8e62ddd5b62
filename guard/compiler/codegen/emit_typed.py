"""Elementwise code on every dtype models compute with: integers (shape arithmetic, index
math, masks), bool (comparisons, And/Or/Not, Where's condition), float32 mixed with them
(Cast, one-hot as Equal then Cast) and the float-only ops of emit_elementwise.

Values are scalars of their LLVM type (bool an ``i1``, stored as one byte 0/1 as numpy
stores it; integers ``iN``, signedness kept beside the value), the loop nest is the one
emit_elementwise's broadcast walk uses with a vector width of 1, and LLVM's loop
vectoriser widens it. Each op follows the reference kernel's numpy semantics: integer
arithmetic wraps, integer Div truncates toward zero and a zero divisor leaves the
dividend (as the reference does), Mod takes the divisor's sign (``fmod=1``: the
dividend's), comparisons on NaN are false, Cast truncates floats toward zero and a
float's truth is ``!= 0`` (NaN is true).

:func:`result_dtype` types a program step by step; :func:`typed_decline` names the first
op or dtype this file has no code for (float Mod, integer Pow, float16...), which the
native backend reports for the node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen import mathfn as m
from guard.compiler.codegen.base import merge_dims
from guard.compiler.codegen.base import strides as row_strides
from guard.compiler.codegen.irutil import F32, I1, add, elem_ptr, i64, loop
from guard.compiler.ir.core import dtype_from_name

Attrs = Mapping[str, Any]
TV = tuple[ir.Value, np.dtype]  # a value and its numpy dtype

DTYPES = frozenset(
    np.dtype(d)
    for d in (
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float32",
    )  # fmt: skip
)
COMPARE = frozenset({"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"})
LOGIC = frozenset({"And", "Or", "Xor"})
INT_BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min", "Mod", "BitwiseAnd",
                        "BitwiseOr", "BitwiseXor", "BitShift"})  # fmt: skip
INT_UNARY = frozenset({"Neg", "Abs", "Identity", "Sign", "BitwiseNot", "Relu"})
OPS = COMPARE | LOGIC | INT_BINARY | INT_UNARY | {"Not", "Where", "Cast", "Pow"}


def llvm_type(dt: np.dtype) -> ir.Type:
    if dt.kind == "b":
        return I1
    if dt == np.float32:
        return F32
    return ir.IntType(dt.itemsize * 8)


def _storage(dt: np.dtype) -> ir.Type:
    return ir.IntType(8) if dt.kind == "b" else llvm_type(dt)


def result_dtype(op: str, args: Sequence[np.dtype], attrs: Attrs) -> np.dtype:
    if op in COMPARE or op in LOGIC or op == "Not":
        return np.dtype(bool)
    if op == "Cast":
        return np.dtype(dtype_from_name(attrs["to"]))
    if op == "Where":
        return args[1]
    return args[0]


def op_decline(
    op: str, args: Sequence[np.dtype], attrs: Attrs, float_ops: frozenset[str]
) -> str | None:
    """Why ``op`` on ``args`` has no code here (None when it has); ``float_ops`` are the
    float32 ops of emit_elementwise."""
    named = ", ".join(str(d) for d in args)
    if any(d not in DTYPES for d in args):
        return f"no emitter for {op} on {named}"
    kinds = {d.kind for d in args}
    if op not in OPS:
        if op in float_ops and kinds == {"f"}:
            return None
        return f"no emitter for {op} on {named}" if op in float_ops else f"no emitter for {op}"
    out = result_dtype(op, args, attrs)
    if out not in DTYPES:
        return f"no emitter for {op} to {out}"
    if op == "Pow" and args[0].kind != "f":
        return "no emitter for Pow on integers"
    if op in LOGIC | {"Not"} and kinds != {"b"}:
        return f"no emitter for {op} on {named}"
    if op == "Where" and args[0].kind != "b":
        return f"no emitter for Where with a {args[0]} condition"
    if op in INT_BINARY | INT_UNARY:
        if "f" in kinds and op not in float_ops:
            return f"no emitter for {op} on {named}"
        if "b" in kinds and op != "Identity":
            return f"no emitter for {op} on bool"
    return None


def _signed(dt: np.dtype) -> bool:
    return dt.kind == "i"


def convert(b: ir.IRBuilder, v: TV, to: np.dtype) -> ir.Value:
    """numpy's ``astype`` for one value."""
    x, dt = v
    if dt == to:
        return x
    ty = llvm_type(to)
    if to.kind == "b":
        if dt.kind == "f":
            return b.fcmp_unordered("!=", x, ir.Constant(F32, 0.0))
        return b.icmp_unsigned("!=", x, ir.Constant(x.type, 0))
    if to.kind == "f":
        if dt.kind == "b" or dt.kind == "u":
            return b.uitofp(x, ty)
        return b.sitofp(x, ty)
    if dt.kind == "f":
        return b.fptosi(x, ty) if _signed(to) else b.fptoui(x, ty)
    if dt.kind == "b":
        return b.zext(x, ty)
    if to.itemsize < dt.itemsize:
        return b.trunc(x, ty)
    if to.itemsize == dt.itemsize:
        return x
    return b.sext(x, ty) if _signed(dt) else b.zext(x, ty)


def _int_binary(
    b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value, dt: np.dtype, attrs: Attrs
) -> ir.Value:
    s = _signed(dt)
    zero, one = ir.Constant(x.type, 0), ir.Constant(x.type, 1)
    plain = {"Add": b.add, "Sub": b.sub, "Mul": b.mul, "BitwiseAnd": b.and_,
             "BitwiseOr": b.or_, "BitwiseXor": b.xor}  # fmt: skip
    if op in plain:
        return plain[op](x, y)
    if op in ("Max", "Min"):
        cmp = (b.icmp_signed if s else b.icmp_unsigned)(">" if op == "Max" else "<", x, y)
        return b.select(cmp, x, y)
    if op == "BitShift":  # a shift by the width or more (or negative) empties the value
        width = ir.Constant(x.type, x.type.width)
        past = b.icmp_unsigned(">=", y, width)
        amount = b.select(past, zero, y)
        if attrs["direction"] == "LEFT":
            return b.select(past, zero, b.shl(x, amount))
        if s:
            return b.ashr(x, b.select(past, ir.Constant(x.type, x.type.width - 1), y))
        return b.select(past, zero, b.lshr(x, amount))
    # Div and Mod: a zero divisor (and -1, whose INT_MIN quotient traps) never reaches the
    # hardware division.
    y0 = b.icmp_signed("==", y, zero)
    if s:
        m1 = b.icmp_signed("==", y, ir.Constant(x.type, -1))
        safe = b.select(b.or_(y0, m1), one, y)
        if op == "Div":
            return b.select(m1, b.sub(zero, x), b.sdiv(x, safe))
        r = b.select(m1, zero, b.srem(x, safe))
        if not attrs.get("fmod", 0):  # numpy mod: the divisor's sign
            fix = b.and_(b.icmp_signed("!=", r, zero), b.icmp_signed("!=", b.icmp_signed("<", r, zero), b.icmp_signed("<", y, zero)))  # fmt: skip
            r = b.select(fix, b.add(r, y), r)
        return b.select(y0, zero, r)
    safe = b.select(y0, one, y)
    if op == "Div":
        return b.udiv(x, safe)
    return b.select(y0, zero, b.urem(x, safe))


def _int_unary(b: ir.IRBuilder, op: str, x: ir.Value, dt: np.dtype) -> ir.Value:
    zero = ir.Constant(x.type, 0)
    if op == "Identity":
        return x
    if op == "Neg":
        return b.sub(zero, x)
    if op == "BitwiseNot":
        return b.not_(x)
    if not _signed(dt):
        if op == "Sign":
            return b.zext(b.icmp_unsigned("!=", x, zero), x.type)
        return x  # Abs, Relu of an unsigned value
    neg = b.icmp_signed("<", x, zero)
    if op == "Abs":
        return b.select(neg, b.sub(zero, x), x)
    if op == "Relu":
        return b.select(neg, zero, x)
    pos = b.zext(b.icmp_signed(">", x, zero), x.type)
    return b.select(neg, ir.Constant(x.type, -1), pos)  # Sign


def apply_typed(
    b: ir.IRBuilder, op: str, args: Sequence[TV], attrs: Attrs,
    float_op: Callable[[str, list[ir.Value], Attrs], ir.Value],
) -> TV:  # fmt: skip
    """One op on typed values; ``float_op`` emits the float32-only ops (emit_elementwise)."""
    dts = [d for _, d in args]
    out = result_dtype(op, dts, attrs)
    xs = [v for v, _ in args]
    if op == "Cast":
        return convert(b, args[0], out), out
    if op == "Where":
        return b.select(xs[0], xs[1], xs[2]), out
    if op == "Pow":
        return m.pow(b, xs[0], convert(b, args[1], dts[0])), out
    if op in COMPARE:
        pred = {"Equal": "==", "Less": "<", "Greater": ">", "LessOrEqual": "<=",
                "GreaterOrEqual": ">="}[op]  # fmt: skip
        if dts[0].kind == "f":
            return b.fcmp_ordered(pred, xs[0], xs[1]), out
        cmp = b.icmp_signed if _signed(dts[0]) else b.icmp_unsigned
        return cmp(pred, xs[0], xs[1]), out
    if op in LOGIC:
        fn = {"And": b.and_, "Or": b.or_, "Xor": b.xor}[op]
        return fn(xs[0], xs[1]), out
    if op == "Not":
        return b.not_(xs[0]), out
    if dts[0].kind == "f":
        return float_op(op, xs, attrs), out
    if len(xs) == 1:
        return _int_unary(b, op, xs[0], dts[0]), out
    return _int_binary(b, op, xs[0], xs[1], dts[0], attrs), out


def load_typed(b: ir.IRBuilder, ptr: ir.Value, index: ir.Value, dt: np.dtype) -> ir.Value:
    st = _storage(dt)
    v = b.load(elem_ptr(b, ptr, index, st), typ=st)
    return b.icmp_unsigned("!=", v, ir.Constant(st, 0)) if dt.kind == "b" else v


def store_typed(b: ir.IRBuilder, v: ir.Value, ptr: ir.Value, index: ir.Value, dt: np.dtype) -> None:
    st = _storage(dt)
    b.store(b.zext(v, st) if dt.kind == "b" else v, elem_ptr(b, ptr, index, st))


def emit_typed_pointwise(
    b: ir.IRBuilder,
    out_shape: Sequence[int],
    operands: Sequence[tuple[ir.Value, Sequence[int], np.dtype]],
    out: tuple[ir.Value, np.dtype],
    compute: Callable[[list[TV]], TV],
) -> None:
    """out[i] = compute([operand_j[i] ...]) over out_shape, one scalar per iteration."""
    if int(np.prod(out_shape, dtype=np.int64)) == 0:
        return
    dims, sts = merge_dims(out_shape, [list(s) for _, s, _ in operands] + [row_strides(out_shape)])

    def nest(d: int, idx: list[ir.Value]) -> None:
        if d == len(dims):
            offs = [add(b, *[b.mul(i, i64(s[k])) for k, i in enumerate(idx) if s[k]]) for s in sts]
            vals = [
                (load_typed(b, p, o, dt), dt) for (p, _, dt), o in zip(operands, offs, strict=False)
            ]
            v, dt = compute(vals)
            store_typed(b, convert(b, (v, dt), out[1]), out[0], offs[-1], out[1])
            return
        with loop(b, 0, dims[d], 1, f"t{d}") as i:
            nest(d + 1, [*idx, i])

    nest(0, [])
