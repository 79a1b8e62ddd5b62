"""A requantise chain on bytes as a table: ``y = T[c][x]``, 64 bytes a step (AVX-512 VBMI).

A fused elementwise program whose only run-time input is a u8/s8 tensor, whose output is
u8/s8, and whose other inputs are constants that vary along the channel axis (1) at most
(a QDQ model's DequantizeLinear -> BatchNormalization -> QuantizeLinear, often three
requantisations in a row) is a function of (channel, input byte): 256 bytes a channel.
The table is the reference interpreter's own result for every byte of every channel
(guard.compiler.reference.elementwise.run_program), so the kernel equals the reference
bit for bit by construction, whatever the program's float steps.

The lookup is ``vpermi2b`` (``llvm.x86.avx512.vpermi2var.qi.512``): one instruction looks
64 bytes up in a 128-entry table held in two registers; two of them and a select on the
index's top bit cover 256 entries, with a channel's table in four registers. A target
without VBMI (LLVM's answer: guard.compiler.codegen.llvm_target.byte_lookup_class) keeps
the chain's float code, which is exact too and runs in vectors there; a 256-entry lookup
from ``vpshufb``'s 16-entry ones would take 16 shuffles and blends a vector.

Layout ``[C][256]`` (channel-major: a channel's table is four contiguous vectors), packed
on the first per-channel constant input, whose operand is shaped ``(1, C, 1.., 256)`` so
that a task of a channel split gets it cut at its first channel (guard.compiler.codegen.
split); a scalar chain has one table of 256 on an operand shaped ``(256, 1, ...)``, which
every task reads whole. ``q_lut`` is C (0 for the scalar table).

A chain from a float32 or int32 tensor (an integer conv's accumulator) whose steps after
its first QuantizeLinear read only that byte and constants runs its prefix to that byte
as its own elementwise code (``q_lut_prefix``), then looks the rest up.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen.irutil import I1, I8, I32, I64, declare, elem_ptr, loop
from guard.compiler.codegen.kernel_plan import Operand
from guard.compiler.ir.core import dtype_from_name
from guard.compiler.reference.elementwise import run_program

BYTES = ("uint8", "int8")
V = 64  # bytes a step
BYTES_V = ir.VectorType(I8, V)


def table_for(
    attrs: Mapping[str, Any], values: Mapping[int, np.ndarray],
    ins: Sequence[Operand | None], outs: Sequence[Operand],
) -> tuple[int, np.ndarray, tuple[int, ...], int, int] | None:  # fmt: skip
    """(the input that carries the table, the table, its operand's shape, C or 0, the
    length of the float prefix), or None: not such a chain."""
    if len(outs) != 1 or outs[0].dtype not in BYTES or "program" not in attrs:
        return None
    y, prog = outs[0], list(attrs["program"])
    rank = len(y.shape)
    runtime = [o for o in ins if o is not None and o.space == "arena"]
    if len(runtime) != 1 or rank < 2 or tuple(runtime[0].shape) != tuple(y.shape):
        return None
    xi, xdt = ins.index(runtime[0]), runtime[0].dtype
    got = (0, prog, xi, xdt) if xdt in BYTES else _suffix(prog, xi, len(ins), y.dtype)
    if got is None or xdt not in (*BYTES, "float32", "int32"):
        return None
    prefix, suffix, at, bdt = got
    used = {r for st in suffix for r in st["args"] if isinstance(r, int) and r != at}
    before = {r for st in prog[:prefix] for r in st["args"] if isinstance(r, int)}
    c = int(y.shape[1])
    per_channel = False
    for j in used:
        v = np.asarray(values[j])
        dims = (1,) * (rank - v.ndim) + tuple(v.shape)
        if v.ndim > rank or any(d != 1 for i, d in enumerate(dims) if i != 1):
            return None
        if dims[1] not in (1, c):
            return None
        per_channel = per_channel or (dims[1] == c and c > 1)
    # The table rides on a constant the prefix does not read (its operand becomes the
    # table's, shaped here, whatever the constant's own shape).
    carrier = min((j for j in used if j not in before), default=None)
    if carrier is None or (per_channel and rank < 3):
        return None
    lo = int(np.iinfo(np.dtype(bdt)).min)
    n = c if per_channel else 1
    every = np.broadcast_to(
        np.arange(lo, lo + 256).astype(bdt), (1, n) + (1,) * (rank - 3) + (256,)
    )
    feed: list[np.ndarray | None] = [None] * max(len(ins), at + 1)
    feed[at] = every
    for j in used:
        feed[j] = np.asarray(values[j]) if per_channel else np.asarray(values[j]).reshape(())
    out = np.asarray(run_program(suffix, feed, None))
    if out.dtype != np.dtype(y.dtype) or out.size != n * 256:
        return None
    table = np.ascontiguousarray(out.reshape(n, 256)).view(np.uint8).reshape(-1)
    if per_channel:
        return carrier, table, (1, c, *(1,) * (rank - 3), 256), c, prefix
    return carrier, table, (256, *(1,) * rank), 0, prefix


def table2_for(
    attrs: Mapping[str, Any], values: Mapping[int, np.ndarray],
    ins: Sequence[Operand | None], outs: Sequence[Operand],
) -> tuple[int, np.ndarray, tuple[int, ...], int] | None:  # fmt: skip
    """A byte chain of two run-time bytes, ``x`` of the output's shape and ``g`` one a
    channel (the SE block's ``DQ(x) * DQ(g[c]) -> Q``), every constant a scalar: one
    table ``T[g][x]`` of 65536 bytes, a channel's row chosen by its ``g`` at run time.
    (the carrying input, the table, its operand's shape, the input index of ``g``)."""
    if len(outs) != 1 or outs[0].dtype not in BYTES or "program" not in attrs:
        return None
    y, prog = outs[0], list(attrs["program"])
    rank = len(y.shape)
    runtime = [j for j, o in enumerate(ins) if o is not None and o.space == "arena"]
    if len(runtime) != 2 or rank < 3 or any(ins[j].dtype not in BYTES for j in runtime):  # type: ignore[union-attr]
        return None
    shapes = {j: tuple(ins[j].shape) for j in runtime}  # type: ignore[union-attr]
    xs = [j for j in runtime if shapes[j] == tuple(y.shape)]
    per_c = (1, int(y.shape[1]), *(1,) * (rank - 2))
    gs = [j for j in runtime if shapes[j] == per_c and j not in xs[:1]]
    if len(xs) < 1 or len(gs) != 1 or y.shape[0] != 1:
        return None
    xi, gi = xs[0], gs[0]
    used = {r for st in prog for r in st["args"] if isinstance(r, int) and r not in (xi, gi)}
    if not used or any(np.asarray(values[j]).size != 1 for j in used):
        return None
    feed: list[np.ndarray | None] = [None] * len(ins)
    for j, shape in ((xi, (1, 256)), (gi, (256, 1))):
        lo = int(np.iinfo(np.dtype(ins[j].dtype)).min)  # type: ignore[union-attr]
        feed[j] = np.arange(lo, lo + 256).astype(ins[j].dtype).reshape(shape)  # type: ignore[union-attr]
    for j in used:
        feed[j] = np.asarray(values[j]).reshape(())
    out = np.asarray(run_program(prog, feed, None))
    if out.dtype != np.dtype(y.dtype) or out.shape != (256, 256):
        return None
    table = np.ascontiguousarray(out).view(np.uint8).reshape(-1)
    return min(used), table, (65536, *(1,) * rank), gi


def _suffix(
    prog: list[dict[str, Any]], xi: int, n_in: int, ydt: str
) -> tuple[int, list[dict[str, Any]], int, str] | None:
    """A float chain whose first step to the output's byte type (a QuantizeLinear) is
    followed only by steps of that byte and constants: (the prefix's length, the rest
    reading the byte as input ``n_in``, ``n_in``, the byte type); else None."""
    k = next((i for i, st in enumerate(prog) if st["op"] == "Cast"
              and dtype_from_name(st["attrs"]["to"]) == np.dtype(ydt)), None)  # fmt: skip
    if k is None or k == len(prog) - 1:
        return None
    rest = []
    for st in prog[k + 1 :]:
        args: list[Any] = []
        for r in st["args"]:
            if r == xi or r == "acc" or isinstance(r, str) and int(r[1:]) < k:
                return None  # reads the float input or a float step: no table
            args.append(
                r if isinstance(r, int) else n_in if r == f"s{k}" else f"s{int(r[1:]) - k - 1}"
            )
        rest.append({**st, "args": args})
    return k + 1, rest, n_in, ydt


def prefix_kernel(
    ins: Sequence[ir.Value | None], k: Any
) -> tuple[list[ir.Value | None], Any] | None:
    """The float prefix of a table step (``q_lut_prefix``) as its own kernel: the chain's
    steps up to its first QuantizeLinear, written to the output; the table input unread."""
    n = int(k.attrs.get("q_lut_prefix", 0))
    if not n:
        return None
    (ti,) = [j for j, o in enumerate(k.inputs) if o is not None and o.space == "packed"]
    ins2, inputs = list(ins), list(k.inputs)
    ins2[ti] = inputs[ti] = None
    attrs = {a: v for a, v in k.attrs.items() if not a.startswith("q_lut")}
    attrs["program"] = list(k.attrs["program"])[:n]
    return ins2, dataclasses.replace(k, attrs=attrs, inputs=tuple(inputs))


def emit_table(b: ir.IRBuilder, ins: Sequence[ir.Value | None], y: ir.Value, k: Any) -> None:
    """The lookup of a step planned with a table (``q_lut`` in its attributes): of the
    run-time input (the arena operand), or in place of the output its float prefix wrote."""
    (ti,) = [j for j, o in enumerate(k.inputs) if o is not None and o.space == "packed"]
    table = ins[ti]
    if k.attrs.get("q_lut_prefix"):
        x, signed = y, k.outputs[0].dtype == "int8"
    elif "q_lut2" not in k.attrs:
        (xi,) = [j for j, o in enumerate(k.inputs) if o is not None and o.space == "arena"]
        x, signed = ins[xi], k.inputs[xi].dtype == "int8"
    else:
        x, signed = None, False
    assert table is not None
    shape = k.outputs[0].shape
    if "q_lut2" in k.attrs:  # T[g[c]][x]: the row of each channel's g
        _rows2(b, ins, y, table, k)
        return
    assert x is not None
    if not int(k.attrs["q_lut"]):
        _rows(b, x, y, table, int(np.prod(shape, dtype=np.int64)), signed)
        return
    lead, c = int(np.prod(shape[:1])), int(shape[1])
    inner = int(np.prod(shape[2:], dtype=np.int64))
    with loop(b, 0, lead * c, 1, "nc") as nc:
        ch = nc if lead == 1 else b.urem(nc, ir.Constant(I64, c))
        row = b.mul(ch, ir.Constant(I64, 256))
        base = b.mul(nc, ir.Constant(I64, inner))
        xp, yp = elem_ptr(b, x, base, I8), elem_ptr(b, y, base, I8)
        _rows(b, xp, yp, elem_ptr(b, table, row, I8), inner, signed)


def _rows2(b: ir.IRBuilder, ins: Sequence[ir.Value | None], y: ir.Value, table: ir.Value,
           k: Any) -> None:  # fmt: skip
    """Per channel ``c``: ``y[c, :] = T[g[c]][x[c, :]]`` (table2_for)."""
    gi = int(k.attrs["q_lut2"])
    shape = k.outputs[0].shape
    (xi,) = [j for j, o in enumerate(k.inputs)
             if o is not None and o.space == "arena" and j != gi]  # fmt: skip
    x, g = ins[xi], ins[gi]
    assert x is not None and g is not None
    c, inner = int(shape[1]), int(np.prod(shape[2:], dtype=np.int64))
    with loop(b, 0, c, 1, "c") as ch:
        gb = b.load(elem_ptr(b, g, ch, I8), typ=I8)
        if k.inputs[gi].dtype == "int8":
            gb = b.xor(gb, ir.Constant(I8, 0x80))
        row = b.mul(b.zext(gb, I64), ir.Constant(I64, 256))
        base = b.mul(ch, ir.Constant(I64, inner))
        _rows(b, elem_ptr(b, x, base, I8), elem_ptr(b, y, base, I8), elem_ptr(b, table, row, I8),
              inner, k.inputs[xi].dtype == "int8")  # fmt: skip


def _rows(b: ir.IRBuilder, x: ir.Value, y: ir.Value, table: ir.Value, n: int, signed: bool) -> None:
    """``y[i] = table[x[i]]`` for ``i`` in [0, n): whole vectors, then a masked one."""
    t = [b.load(elem_ptr(b, table, 64 * q, I8), typ=BYTES_V, align=1) for q in range(4)]
    whole = n // V * V
    if whole:
        with loop(b, 0, whole, V, "v") as i:
            xp, yp = elem_ptr(b, x, i, I8), elem_ptr(b, y, i, I8)
            b.store(_lookup(b, b.load(xp, typ=BYTES_V, align=1), t, signed), yp, align=1)
    if n > whole:
        mask = ir.Constant(ir.VectorType(I1, V), [int(i < n - whole) for i in range(V)])
        xp, yp = elem_ptr(b, x, whole, I8), elem_ptr(b, y, whole, I8)
        v = _masked(b, "load", BYTES_V, [xp, ir.Constant(I32, 1), mask, ir.Constant(BYTES_V, None)])
        _masked(
            b, "store", ir.VoidType(), [_lookup(b, v, t, signed), yp, ir.Constant(I32, 1), mask]
        )


def _lookup(b: ir.IRBuilder, v: ir.Value, t: list[ir.Value], signed: bool) -> ir.Value:
    """Each byte of ``v`` looked up in the 256 bytes ``t`` (four vectors): vpermi2b takes
    an index's low 7 bits, its top bit picks the half (an s8 byte is biased by 128)."""
    if signed:
        v = b.xor(v, ir.Constant(BYTES_V, [0x80] * V))
    fn = declare(b.module, "llvm.x86.avx512.vpermi2var.qi.512", BYTES_V, [BYTES_V] * 3)
    low = b.call(fn, [t[0], v, t[1]])
    high = b.call(fn, [t[2], v, t[3]])
    return b.select(b.icmp_signed("<", v, ir.Constant(BYTES_V, None)), high, low)


def _masked(b: ir.IRBuilder, what: str, ret: ir.Type, args: list[ir.Value]) -> ir.Value:
    """``llvm.masked.load``/``store`` of 64 bytes (the lanes off the mask touch no memory)."""
    types = [a.type for a in args]
    return b.call(declare(b.module, f"llvm.masked.{what}.v64i8.p0", ret, types), args)
