"""Elementwise ops and FusedElementwise chains: one loop nest, the whole chain in registers.

The output's dims are merged where every operand's strides allow (so a broadcast over a
contiguous block becomes one long loop); the innermost loop runs in vectors of the
target's width with a masked tail (no scalar tail loop). An operand with stride 1 on the
innermost dim is a vector load, stride 0 a splat, anything else a gather of scalars.

``OPS`` maps each op to its code (tinygrad's ``code_for_op`` style): a missing entry is a
decline ("no emitter for Mod"). The same table evaluates the epilogue programs of
FusedConv/FusedGemm/FusedMatMul on their accumulator tiles.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen import emit_typed as t
from guard.compiler.codegen import mathfn as m
from guard.compiler.codegen.base import Emitter, Kernel, bcast_strides, merge_dims
from guard.compiler.codegen.base import strides as row_strides
from guard.compiler.codegen.irutil import (
    I32,
    add,
    const,
    i64,
    load,
    load_lanes,
    loop,
    mul,
    splat,
    store_lanes,
    vec,
)
from guard.compiler.codegen.quant import byte_lanes as bl
from guard.compiler.codegen.quant.lut import emit_table, prefix_kernel, table2_for, table_for
from guard.compiler.graph.view import GraphView, OpNode

Attrs = Mapping[str, Any]
B: TypeAlias = ir.IRBuilder
V: TypeAlias = ir.Value


def _gelu(b: B, x: V, a: Attrs) -> V:
    t = x.type
    if a.get("approximate", "none") == "tanh":
        inner = b.fmul(
            const(t, 0.7978845608028654),
            b.fadd(x, b.fmul(const(t, 0.044715), b.fmul(x, b.fmul(x, x)))),
        )
        return b.fmul(b.fmul(const(t, 0.5), x), b.fadd(const(t, 1.0), m.tanh(b, inner)))
    e = m.erf(b, b.fmul(x, const(t, 0.7071067811865476)))
    return b.fmul(b.fmul(const(t, 0.5), x), b.fadd(const(t, 1.0), e))


def _select_neg(b: B, x: V, neg: V) -> V:
    return b.select(b.fcmp_ordered("<", x, const(x.type, 0.0)), neg, x)


UNARY: dict[str, Callable[[B, V, Attrs], V]] = {
    "Relu": lambda b, x, a: m.fmax(b, x, const(x.type, 0.0)),
    "LeakyRelu": lambda b, x, a: _select_neg(b, x, b.fmul(x, const(x.type, a.get("alpha", 0.01)))),
    "Sigmoid": lambda b, x, a: m.sigmoid(b, x),
    "Tanh": lambda b, x, a: m.tanh(b, x),
    "Exp": lambda b, x, a: m.exp(b, x),
    "Log": lambda b, x, a: m.log(b, x),
    "Neg": lambda b, x, a: b.fneg(x),
    "Abs": lambda b, x, a: m.fabs(b, x),
    "Sqrt": lambda b, x, a: m.intrinsic(b, "sqrt", x.type, [x]),
    "Reciprocal": lambda b, x, a: b.fdiv(const(x.type, 1.0), x),
    "Erf": lambda b, x, a: m.erf(b, x),
    "Gelu": _gelu,
    "Identity": lambda b, x, a: x,
    "Floor": lambda b, x, a: m.intrinsic(b, "floor", x.type, [x]),
    "Ceil": lambda b, x, a: m.intrinsic(b, "ceil", x.type, [x]),
    "Clip": lambda b, x, a: m.fmin(
        b,
        m.fmax(b, x, const(x.type, a.get("min", -3.4028234663852886e38))),
        const(x.type, a.get("max", 3.4028234663852886e38)),
    ),  # fmt: skip
    "HardSigmoid": lambda b, x, a: m.fmin(
        b,
        m.fmax(
            b,
            b.fadd(
                b.fmul(x, const(x.type, a.get("alpha", 0.2))), const(x.type, a.get("beta", 0.5))
            ),
            const(x.type, 0.0),
        ),
        const(x.type, 1.0),
    ),  # fmt: skip
    "HardSwish": lambda b, x, a: b.fmul(
        x,
        m.fmin(
            b,
            m.fmax(
                b, b.fadd(b.fmul(x, const(x.type, 1 / 6)), const(x.type, 0.5)), const(x.type, 0.0)
            ),
            const(x.type, 1.0),
        ),
    ),  # fmt: skip
    "Elu": lambda b, x, a: _select_neg(
        b, x, b.fmul(const(x.type, a.get("alpha", 1.0)), b.fsub(m.exp(b, x), const(x.type, 1.0)))
    ),
    "Selu": lambda b, x, a: b.fmul(
        const(x.type, a.get("gamma", 1.0507009873554805)),
        _select_neg(
            b,
            x,
            b.fmul(
                const(x.type, a.get("alpha", 1.6732632423543772)),
                b.fsub(m.exp(b, x), const(x.type, 1.0)),
            ),
        ),
    ),  # fmt: skip
    "Softsign": lambda b, x, a: b.fdiv(x, b.fadd(const(x.type, 1.0), m.fabs(b, x))),
    "Swish": lambda b, x, a: b.fmul(x, m.sigmoid(b, b.fmul(x, const(x.type, a.get("alpha", 1.0))))),
    "Sign": lambda b, x, a: _sign(b, x),
    "Round": lambda b, x, a: m.intrinsic(b, "roundeven", x.type, [x]),
    "Softplus": lambda b, x, a: _softplus(b, x),
    "Mish": lambda b, x, a: b.fmul(x, m.tanh(b, _softplus(b, x))),
    "ThresholdedRelu": lambda b, x, a: b.select(
        b.fcmp_ordered(">", x, const(x.type, a.get("alpha", 1.0))), x, const(x.type, 0.0)
    ),
    "Celu": lambda b, x, a: _celu(b, x, float(a.get("alpha", 1.0))),
    "Shrink": lambda b, x, a: _shrink(b, x, float(a.get("lambd", 0.5)), float(a.get("bias", 0.0))),
}


def _sign(b: B, x: V) -> V:
    t = x.type
    neg = b.select(b.fcmp_ordered("<", x, const(t, 0.0)), const(t, -1.0), x)
    return b.select(b.fcmp_ordered(">", x, const(t, 0.0)), const(t, 1.0), neg)  # 0, NaN kept


def _softplus(b: B, x: V) -> V:
    """log(1 + e^x); x itself past 20 (where e^x dwarfs 1 in float32, and before exp's
    clamp at 88)."""
    t = x.type
    small = m.log(b, b.fadd(const(t, 1.0), m.exp(b, x)))
    return b.select(b.fcmp_ordered(">", x, const(t, 20.0)), x, small)


def _celu(b: B, x: V, alpha: float) -> V:
    t = x.type
    e = b.fmul(const(t, alpha), b.fsub(m.exp(b, b.fdiv(x, const(t, alpha))), const(t, 1.0)))
    return b.fadd(m.fmax(b, x, const(t, 0.0)), m.fmin(b, const(t, 0.0), e))


def _shrink(b: B, x: V, lambd: float, bias: float) -> V:
    t = x.type
    lo = b.select(
        b.fcmp_ordered("<", x, const(t, -lambd)), b.fadd(x, const(t, bias)), const(t, 0.0)
    )
    return b.select(b.fcmp_ordered(">", x, const(t, lambd)), b.fsub(x, const(t, bias)), lo)


BINARY: dict[str, Callable[[B, V, V, Attrs], V]] = {
    "Add": lambda b, x, y, a: b.fadd(x, y),
    "Sub": lambda b, x, y, a: b.fsub(x, y),
    "Mul": lambda b, x, y, a: b.fmul(x, y),
    "Div": lambda b, x, y, a: b.fdiv(x, y),
    "Max": lambda b, x, y, a: _nan_max(b, x, y),
    "Min": lambda b, x, y, a: _nan_min(b, x, y),
    "PRelu": lambda b, x, y, a: _select_neg(b, x, b.fmul(x, y)),
    "Pow": lambda b, x, y, a: m.pow(b, x, y),
}


def _nan_max(b: B, x: V, y: V) -> V:
    # np.maximum propagates NaN; llvm.maximum does too (maxnum would drop it).
    return m.intrinsic(b, "maximum", x.type, [x, y])


def _nan_min(b: B, x: V, y: V) -> V:
    return m.intrinsic(b, "minimum", x.type, [x, y])


def supported_op(op: str, attrs: Attrs, n_args: int) -> str | None:
    if op in UNARY:
        if op == "Clip" and n_args > 1:
            return "no emitter for Clip with min/max inputs (only attributes)"
        return None
    if op in BINARY:
        return None
    return f"no emitter for {op}"


def apply_op(b: B, op: str, args: Sequence[V], attrs: Attrs) -> V:
    if op in UNARY:
        return UNARY[op](b, args[0], attrs)
    return BINARY[op](b, args[0], args[1], attrs)


def program_decline(program: Sequence[Mapping[str, Any]]) -> str | None:
    for st in program:
        why = supported_op(st["op"], st.get("attrs", {}), len(st["args"]))
        if why:
            return why
    return None


def run_program(
    b: B, program: Sequence[Mapping[str, Any]], acc: V | None, value_of: Callable[[int], V]
) -> V:
    """Evaluate a fused program; ``value_of(j)`` gives input j at the current position."""
    steps: list[V] = []
    cache: dict[int, V] = {}
    for st in program:
        args = []
        for ref in st["args"]:
            if ref == "acc":
                assert acc is not None
                args.append(acc)
            elif isinstance(ref, str):
                args.append(steps[int(ref[1:])])
            else:
                if ref not in cache:
                    cache[ref] = value_of(int(ref))
                args.append(cache[ref])
        steps.append(apply_op(b, st["op"], args, st.get("attrs", {})))
    return steps[-1]


def emit_pointwise(
    b: B,
    out_shape: Sequence[int],
    operands: Sequence[tuple[V, Sequence[int]]],  # (pointer, broadcast strides over out_shape)
    out_ptr: V,
    width: int,
    compute: Callable[[list[V]], V],
    out_strides: Sequence[int] | None = None,
) -> None:
    """out[i] = compute([operand_j[i] ...]) over out_shape, innermost loop vectorised;
    ``out_strides``: the output's element strides where it is a view (a band of rows of a
    larger tensor), else row-major over out_shape."""
    out_st = list(out_strides) if out_strides is not None else row_strides(out_shape)
    all_st = [list(s) for _, s in operands] + [out_st]
    dims, sts = merge_dims(out_shape, all_st)
    inner = dims[-1]
    w = width if inner > 1 else 1

    def body(idx: list[V]) -> None:
        base = [add(b, *[b.mul(i, i64(s[d])) for d, i in enumerate(idx) if s[d]]) for s in sts]

        def do(j0: V | int, lanes: int) -> None:
            vals = []
            for (ptr, _), s, bo in zip(operands, sts[:-1], base[:-1], strict=True):
                si = s[-1]
                if si == 0:
                    x = load(b, ptr, bo)
                    vals.append(splat(b, x, w) if w > 1 else x)
                elif si == 1:
                    vals.append(load_lanes(b, ptr, add(b, bo, j0), w, lanes))
                elif w == 1:
                    vals.append(load(b, ptr, add(b, bo, mul(b, j0, si))))
                else:
                    v = ir.Constant(vec(w), ir.Undefined)
                    for lane in range(lanes):
                        off = mul(b, add(b, j0, lane), si)
                        v = b.insert_element(
                            v, load(b, ptr, add(b, bo, off)), ir.Constant(I32, lane)
                        )
                    vals.append(v)
            store_lanes(b, compute(vals), out_ptr, add(b, base[-1], j0), lanes)

        full = inner // w * w
        if full:
            with loop(b, 0, full, w, "j") as j:
                do(j, w)
        if inner - full:
            do(full, inner - full)

    def nest(d: int, idx: list[V]) -> None:
        if d == len(dims) - 1:
            body(idx)
            return
        with loop(b, 0, dims[d], 1, f"d{d}") as i:
            nest(d + 1, [*idx, i])

    nest(0, [])


FLOAT_OPS = frozenset(UNARY) | frozenset(BINARY)


def _steps(k_op: str, attrs: Attrs, n_args: int) -> list[Mapping[str, Any]]:
    """The node as a program (a single op is a one-step program over its inputs)."""
    if k_op == "FusedElementwise":
        return list(attrs["program"])
    return [{"op": k_op, "args": list(range(n_args)), "attrs": attrs}]


def _typed_decline(steps: Sequence[Mapping[str, Any]], dtypes: Sequence[Any]) -> str | None:
    """Type the program step by step; the first step with no code names the reason."""
    got: list[Any] = []
    for st in steps:
        args = [got[int(r[1:])] if isinstance(r, str) else dtypes[r] for r in st["args"]]
        a = st.get("attrs", {})
        if st["op"] == "Clip" and len(args) > 1:
            return "no emitter for Clip with min/max inputs (only attributes)"
        why = t.op_decline(st["op"], args, a, FLOAT_OPS)
        if why:
            return why
        got.append(t.result_dtype(st["op"], args, a))
    return None


class Elementwise(Emitter):
    ops = FLOAT_OPS | t.OPS | {"FusedElementwise"}

    def decline(self, node: OpNode, g: GraphView) -> str | None:
        args = [a for a in node.args if a]
        dtypes = [np.dtype(g.tensors[a].dtype) for a in args]
        steps = _steps(node.op, node.attrs, len(args))
        if node.op == "FusedElementwise":
            dtypes = [np.dtype(g.tensors[a].dtype) if a else np.dtype("float32") for a in node.args]
        if _float_path(steps, [*dtypes, *(np.dtype(g.tensors[o].dtype) for o in node.outputs)]):
            return program_decline(steps)
        return _typed_decline(steps, dtypes)

    def plan_constants(
        self, op: str, attrs: Attrs, values: Mapping[int, np.ndarray], ins: Sequence[Any],
        outs: Sequence[Any], width: int, target: Any = None,
    ) -> tuple[dict[int, Any], dict[str, Any]] | None:  # fmt: skip
        """A chain to bytes whose last steps read one byte and per-channel constants as a
        table (quant/lut.py), where the target looks bytes up in vectors."""
        if op != "FusedElementwise" or target is None or target.byte_lookup != "vbmi":
            return None
        got = table_for(attrs, values, ins, outs)
        if got is None:
            two = table2_for(attrs, values, ins, outs)
            return None if two is None else ({two[0]: (two[1], two[2])}, {"q_lut2": two[3]})
        j, table, shape, c, prefix = got
        return {j: (table, shape)}, {"q_lut": c, **({"q_lut_prefix": prefix} if prefix else {})}

    def emit(self, b: B, ins: list[V | None], outs: list[V], k: Kernel) -> None:
        out = k.outputs[0]
        if "q_lut" in k.attrs or "q_lut2" in k.attrs:  # a table lookup (quant/lut.py)
            pre = prefix_kernel(ins, k)
            if pre is not None:
                self.emit(b, pre[0], outs, pre[1])
            emit_table(b, ins, outs[0], k)
            return
        operands = [
            (p, bcast_strides(o.shape, out.shape)) for p, o in zip(ins, k.inputs, strict=True)
            if p is not None and o is not None
        ]  # fmt: skip
        index_of = [j for j, p in enumerate(ins) if p is not None]
        dtypes = [np.dtype(o.dtype) for o in k.inputs if o is not None]
        steps = _steps(k.op, k.attrs, len(operands))
        if not _float_path(steps, [*dtypes, np.dtype(out.dtype)]):
            odt = np.dtype(out.dtype)
            if k.op == "FusedElementwise" and bl.byte_program(steps, dtypes, odt, FLOAT_OPS):
                typed = [(p, s, dt) for (p, s), dt in zip(operands, dtypes, strict=True)]
                bl.emit_pointwise(b, out.shape, typed, (outs[0], odt), k.vector_width,
                                  lambda vals: bl.run(b, steps, lambda j: vals[index_of.index(j)],
                                                      apply_op))  # fmt: skip
                return
            self._emit_typed(b, operands, dtypes, index_of, outs[0], k)
            return
        if k.op == "FusedElementwise":
            prog = k.attrs["program"]

            def compute(vals: list[V]) -> V:
                return run_program(b, prog, None, lambda j: vals[index_of.index(j)])
        else:

            def compute(vals: list[V]) -> V:
                return apply_op(b, k.op, vals, k.attrs)

        emit_pointwise(b, out.shape, operands, outs[0], k.vector_width, compute)

    def _emit_typed(
        self, b: B, operands: list[tuple[V, list[int]]], dtypes: list[np.dtype],
        index_of: list[int], out_ptr: V, k: Kernel,
    ) -> None:  # fmt: skip
        steps = _steps(k.op, k.attrs, len(operands))
        fused = k.op == "FusedElementwise"

        def float_op(op: str, xs: list[V], attrs: Attrs) -> V:
            return apply_op(b, op, xs, attrs)

        def compute(vals: list[t.TV]) -> t.TV:
            got: list[t.TV] = []
            for st in steps:
                args = [
                    got[int(r[1:])] if isinstance(r, str)
                    else vals[index_of.index(r) if fused else r]
                    for r in st["args"]
                ]  # fmt: skip
                a = st.get("attrs", {})
                got.append(t.apply_typed(b, st["op"], args, a, float_op))
            return got[-1]

        out = k.outputs[0]
        typed = [(p, s, dt) for (p, s), dt in zip(operands, dtypes, strict=True)]
        odt = np.dtype(out.dtype)

        def nest(dst: V) -> None:
            t.emit_typed_pointwise(b, out.shape, typed, (dst, odt), compute)

        # In place (the output written over an input of its size): LLVM's loop vectoriser
        # checks at run time that the output overlaps no input and runs the scalar loop
        # when it does, as it always does in place (every QDQ requantise chain of an int8
        # model). With the output written through the input's own pointer, each element
        # is read before it is written at the same index: no check, the vector loop.
        same = [p for (p, s), dt in zip(operands, dtypes, strict=True)
                if dt.itemsize == odt.itemsize and list(s) == row_strides(out.shape)]  # fmt: skip
        if not _overlaps_an_input(k) or not same:
            nest(out_ptr)
            return

        def dispatch(cands: list[V]) -> None:
            if not cands:
                nest(out_ptr)
                return
            with b.if_else(b.icmp_unsigned("==", out_ptr, cands[0])) as (yes, no):
                with yes:
                    nest(cands[0])
                with no:
                    dispatch(cands[1:])

        dispatch(same)


def _float_path(steps: Sequence[Mapping[str, Any]], dtypes: Sequence[np.dtype]) -> bool:
    """Every tensor float32 and every op a float op: the vectorised path."""
    return all(d == np.float32 for d in dtypes) and all(s["op"] in FLOAT_OPS for s in steps)


def _overlaps_an_input(k: Kernel) -> bool:
    """Whether the kernel's output shares bytes with one of its inputs (its step runs in
    place; the kernel key keeps in-place and separate steps apart)."""
    o = k.outputs[0]
    return any(
        x is not None and x.space == o.space == "arena"
        and x.offset < o.offset + o.nbytes and o.offset < x.offset + x.nbytes
        for x in k.inputs
    )  # fmt: skip
