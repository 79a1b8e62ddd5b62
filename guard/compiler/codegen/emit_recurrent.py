"""LSTM on float32: forward, reverse and bidirectional, with bias, initial state,
peepholes, ``clip`` and ``input_forget``, the default activations (Sigmoid, Tanh, Tanh).

Per direction, per time step, per batch row: the ``4H`` gate pre-activations
``W x_t + R h + Wb + Rb`` (two dot products per gate row, reassociable sums that LLVM
vectorises) go to a stack buffer, then each hidden unit updates its cell and hidden state
(gate order ``i, o, f, c`` as in the reference). The running state lives in the Y_h and
Y_c outputs (the importer always gives LSTM its three outputs), so the kernel needs no
scratch beyond the gates. With ``sequence_lens`` (int32) a row stops at its length
(guard.compiler.codegen.sequence_lens). Declined, with the reason: other activations,
``layout=1`` (O2's guard.compiler.passes.batch_recurrent_inputs makes it sequence first).

With ``input_gates=1`` (guard.compiler.passes.batch_recurrent_inputs) the ``W x_t + Wb``
half was computed for the whole sequence by one GEMM before this step: input 0 holds it as
``[S, B, D*4H]`` and each gate row loads its value instead of a dot product over the input.
Where R is also constant (packed at build time), guard.compiler.codegen.recurrence emits the
node instead: blocks of units in registers, on the thread pool.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen import mathfn as m
from guard.compiler.codegen.base import Emitter, Kernel, float32_only
from guard.compiler.codegen.irutil import (
    F32,
    REDUCE_FLAGS,
    add,
    const,
    entry_alloca,
    for_loop_carried,
    i64,
    load,
    loop,
    store,
)
from guard.compiler.codegen.recurrence import (
    GATES,
    blocked,
    emit_recurrence,
    pack_recurrence,
    packable,
    phases,
)
from guard.compiler.codegen.sequence_lens import (
    row_length,
    step_time,
    zero_empty_states,
    zero_past_ends,
)
from guard.compiler.graph.view import GraphView, OpNode

DEFAULT = ["sigmoid", "tanh", "tanh"]


class _Packed(Emitter):
    """R packed for guard.compiler.codegen.recurrence where that module emits the node."""

    def pack(
        self, op: str, attrs: Mapping[str, Any], index: int, value: np.ndarray,
        shapes: Sequence[tuple[int, ...] | None], vector_width: int,
    ) -> np.ndarray | None:  # fmt: skip
        if index != 2 or vector_width < 4 or not packable(op, attrs, shapes):
            return None
        return pack_recurrence(value, GATES[op], vector_width, phases(op, attrs) == 2)

    @staticmethod
    def packed(k: Kernel) -> bool:
        r = k.inputs[2]
        return r is not None and r.space == "packed" and blocked(k.op, k.attrs)


def _dtypes(node: OpNode, g: GraphView) -> str | None:
    """float32 throughout, but ``sequence_lens`` (input 4): int32, as ONNX has it."""
    lens = node.args[4] if len(node.args) > 4 else ""
    if lens and g.tensors[lens].dtype != "int32":
        return f"no emitter for {node.op} with sequence_lens of {g.tensors[lens].dtype}"
    others = tuple("" if j == 4 else v for j, v in enumerate(node.inputs))
    return float32_only(dataclasses.replace(node, inputs=others), g)


class Recurrent(_Packed):
    ops = frozenset({"LSTM"})

    def decline(self, node: OpNode, g: GraphView) -> str | None:
        why = _dtypes(node, g)
        if why:
            return why
        a = node.attrs
        dirs = 2 if a["direction"] == "bidirectional" else 1
        if [s.lower() for s in a["activations"]] != DEFAULT * dirs:
            return f"no emitter for LSTM with activations {a['activations']}"
        if a.get("layout", 0):
            return "no emitter for LSTM with layout=1 (O2 makes it sequence first)"
        return None

    def emit(
        self, b: ir.IRBuilder, ins: list[ir.Value | None], outs: list[ir.Value], k: Kernel
    ) -> None:
        if self.packed(k):
            emit_recurrence(b, ins, outs, k)
            return
        a = k.attrs
        xo, ro = k.inputs[0], k.inputs[2]
        assert xo is not None and ro is not None
        S, Bt, n_in = xo.shape
        D, H = ro.shape[0], int(a["hidden_size"])
        pre = bool(a.get("input_gates", 0))  # x holds W x_t + Wb, [S, B, D*4H]
        x, w, r = ins[0], ins[1], ins[2]
        assert x is not None and (w is not None or pre) and r is not None

        def arg(j: int) -> ir.Value | None:
            return ins[j] if len(ins) > j else None

        bias, lens, h0, c0, peep = arg(3), arg(4), arg(5), arg(6), arg(7)
        y, yh, yc = outs[0], outs[1], outs[2]
        zero_past_ends(b, lens, y, (S, D, Bt, H))
        clip = a.get("clip")
        forget_is_input = bool(a.get("input_forget", 0))
        gates = entry_alloca(b, ir.ArrayType(F32, 4 * H))

        def cl(v: ir.Value) -> ir.Value:
            if clip is None:
                return v
            return m.fmin(b, m.fmax(b, v, const(F32, -float(clip))), const(F32, float(clip)))

        def dot(
            mat: ir.Value, mrow: ir.Value, vec: ir.Value, vrow: ir.Value, n: int, acc: ir.Value
        ) -> ir.Value:
            def body(i: ir.Value, vals: list[ir.Value]) -> list[ir.Value]:
                p = b.fmul(load(b, mat, add(b, mrow, i)), load(b, vec, add(b, vrow, i)))
                return [b.fadd(vals[0], p, flags=REDUCE_FLAGS)]

            return for_loop_carried(b, 0, n, 1, [acc], body)[0]

        for d in range(D):
            reverse = a["direction"] == "reverse" or d == 1
            st = d * Bt * H  # [d, 0, 0] of Y_h, Y_c, h0, c0
            with loop(b, 0, Bt * H, 1, "init") as i:
                store(b, load(b, h0, add(b, st, i)) if h0 else const(F32, 0.0), yh, add(b, st, i))
                store(b, load(b, c0, add(b, st, i)) if c0 else const(F32, 0.0), yc, add(b, st, i))
            with loop(b, 0, S, 1, "step") as step, loop(b, 0, Bt, 1, "row") as bt:
                n = row_length(b, lens, bt, S)
                t = step_time(b, reverse, step, n)
                with _live(b, lens, step, n):
                    hrow = add(b, st, b.mul(bt, i64(H)))
                    xrow = b.mul(add(b, b.mul(t, i64(Bt)), bt), i64(n_in))
                    with loop(b, 0, 4 * H, 1, "gate") as j:
                        acc = const(F32, 0.0)
                        if bias:
                            bb = d * 8 * H
                            wb = load(b, bias, add(b, bb, j))
                            acc = b.fadd(wb, load(b, bias, add(b, bb + 4 * H, j)))
                        if pre:
                            gx = load(b, x, add(b, xrow, d * 4 * H, j))
                            acc = b.fadd(acc, gx)
                        else:
                            wrow = b.mul(add(b, d * 4 * H, j), i64(n_in))
                            acc = dot(w, wrow, x, xrow, n_in, acc)
                        acc = dot(r, b.mul(add(b, d * 4 * H, j), i64(H)), yh, hrow, H, acc)
                        b.store(acc, b.gep(gates, [i64(0), j], inbounds=True))
                    with loop(b, 0, H, 1, "unit") as u:

                        def gate(n: int) -> ir.Value:
                            p = b.gep(gates, [i64(0), add(b, u, n * H)], inbounds=True)
                            return b.load(p, typ=F32)

                        def pv(n: int, c: ir.Value, pb: int = d * 3 * H) -> ir.Value:
                            if not peep:
                                return const(F32, 0.0)
                            return b.fmul(load(b, peep, add(b, u, pb + n * H)), c)

                        c = load(b, yc, add(b, hrow, u))
                        ig = m.sigmoid(b, cl(b.fadd(gate(0), pv(0, c))))
                        fg = m.sigmoid(b, cl(b.fadd(gate(2), pv(2, c))))
                        if forget_is_input:
                            fg = b.fsub(const(F32, 1.0), ig)
                        cc = m.tanh(b, cl(gate(3)))
                        c_new = b.fadd(b.fmul(fg, c), b.fmul(ig, cc))
                        og = m.sigmoid(b, cl(b.fadd(gate(1), pv(1, c_new))))
                        h_new = b.fmul(og, m.tanh(b, c_new))
                        store(b, c_new, yc, add(b, hrow, u))
                        store(b, h_new, yh, add(b, hrow, u))
                        yrow = b.mul(add(b, b.mul(t, i64(D * Bt)), d * Bt, bt), i64(H))
                        store(b, h_new, y, add(b, yrow, u))
        zero_empty_states(b, lens, [yh, yc], S, D, Bt, H)


@contextmanager
def _live(b: ir.IRBuilder, lens: ir.Value | None, step: ir.Value, n: ir.Value) -> Iterator[None]:
    """The body of a step for one row: only where the row has that step (with lengths)."""
    if lens is None:
        yield
        return
    with b.if_then(b.icmp_signed("<", step, n)):
        yield


GRU_RNN_DEFAULT = {"GRU": ["sigmoid", "tanh"], "RNN": ["tanh"]}


class GruRnn(_Packed):
    """GRU (gates ``z, r, h``, both ``linear_before_reset`` forms) and RNN on float32, in the
    batched form only: their input gates come from one GEMM over the sequence
    (``input_gates=1``), so each step is the ``R h`` products and the state update. Per
    direction, step and batch row, the recurrent pre-activations ``R h + Rb`` go to a stack
    buffer, then each unit updates its state in Y_h (GRU without ``linear_before_reset``
    first forms ``r * h`` for every unit, then its ``R_h (r * h)``). With R constant (packed),
    guard.compiler.codegen.recurrence emits the node instead. ``sequence_lens`` as the LSTM's.
    Declined, with the reason: the per-step form, other activations, ``layout=1``."""

    ops = frozenset({"GRU", "RNN"})

    def decline(self, node: OpNode, g: GraphView) -> str | None:
        a = node.attrs
        if not a.get("input_gates", 0):
            return f"no emitter for {node.op} with per-step input gates (O2 batches them)"
        why = _dtypes(node, g)
        if why:
            return why
        dirs = 2 if a["direction"] == "bidirectional" else 1
        if [s.lower() for s in a["activations"]] != GRU_RNN_DEFAULT[node.op] * dirs:
            return f"no emitter for {node.op} with activations {a['activations']}"
        if a.get("layout", 0):
            return f"no emitter for {node.op} with layout=1 (O2 makes it sequence first)"
        return None

    def emit(
        self, b: ir.IRBuilder, ins: list[ir.Value | None], outs: list[ir.Value], k: Kernel
    ) -> None:
        if self.packed(k):
            emit_recurrence(b, ins, outs, k)
            return
        a, op = k.attrs, k.op
        xo, ro = k.inputs[0], k.inputs[2]
        assert xo is not None and ro is not None
        S, Bt, _ = xo.shape
        D, H = ro.shape[0], int(a["hidden_size"])
        G = 3 if op == "GRU" else 1
        x, r = ins[0], ins[2]
        assert x is not None and r is not None
        bias = ins[3] if len(ins) > 3 else None
        lens = ins[4] if len(ins) > 4 else None
        h0 = ins[5] if len(ins) > 5 else None
        y, yh = outs[0], outs[1]
        zero_past_ends(b, lens, y, (S, D, Bt, H))
        clip = a.get("clip")
        lbr = bool(a.get("linear_before_reset", 0))
        rec = entry_alloca(b, ir.ArrayType(F32, G * H))  # R h + Rb of this step
        rh = entry_alloca(b, ir.ArrayType(F32, H))  # r * h (GRU without linear_before_reset)

        def cl(v: ir.Value) -> ir.Value:
            if clip is None:
                return v
            return m.fmin(b, m.fmax(b, v, const(F32, -float(clip))), const(F32, float(clip)))

        def dot(mrow: ir.Value, vec: ir.Value, vrow: ir.Value | int, acc: ir.Value) -> ir.Value:
            def body(i: ir.Value, vals: list[ir.Value]) -> list[ir.Value]:
                p = b.fmul(load(b, r, add(b, mrow, i)), load(b, vec, add(b, vrow, i)))
                return [b.fadd(vals[0], p, flags=REDUCE_FLAGS)]

            return for_loop_carried(b, 0, H, 1, [acc], body)[0]

        def at(buf: ir.Value, j: ir.Value | int) -> ir.Value:
            return b.load(b.gep(buf, [i64(0), j if isinstance(j, ir.Value) else i64(j)],
                                inbounds=True), typ=F32)  # fmt: skip

        for d in range(D):
            reverse = a["direction"] == "reverse" or d == 1
            st = d * Bt * H
            with loop(b, 0, Bt * H, 1, "init") as i:
                store(b, load(b, h0, add(b, st, i)) if h0 else const(F32, 0.0), yh, add(b, st, i))
            with loop(b, 0, S, 1, "step") as step, loop(b, 0, Bt, 1, "row") as bt:
                n = row_length(b, lens, bt, S)
                t = step_time(b, reverse, step, n)
                with _live(b, lens, step, n):
                    hrow = add(b, st, b.mul(bt, i64(H)))
                    xrow = add(b, b.mul(add(b, b.mul(t, i64(Bt)), bt), i64(D * G * H)), d * G * H)
                    n_rec = 2 * H if op == "GRU" and not lbr else G * H
                    with loop(b, 0, n_rec, 1, "rec") as j:
                        acc = (
                            load(b, bias, add(b, d * 2 * G * H + G * H, j))
                            if bias
                            else const(F32, 0.0)
                        )
                        acc = dot(b.mul(add(b, d * G * H, j), i64(H)), yh, hrow, acc)
                        b.store(acc, b.gep(rec, [i64(0), j], inbounds=True))

                    def pre(gate: int, u: ir.Value, xrow: ir.Value = xrow, d: int = d) -> ir.Value:
                        """x W^T + Wb of gate ``gate``, unit ``u`` (from the GEMM and B)."""
                        v = load(b, x, add(b, xrow, gate * H, u))
                        if bias:
                            v = b.fadd(v, load(b, bias, add(b, d * 2 * G * H + gate * H, u)))
                        return v

                    if op == "GRU" and not lbr:
                        with loop(b, 0, H, 1, "reset") as u:
                            rg = m.sigmoid(b, cl(b.fadd(pre(1, u), at(rec, add(b, H, u)))))
                            hv = load(b, yh, add(b, hrow, u))
                            b.store(b.fmul(rg, hv), b.gep(rh, [i64(0), u], inbounds=True))
                    with loop(b, 0, H, 1, "unit") as u:
                        hv = load(b, yh, add(b, hrow, u))
                        if op == "RNN":
                            h_new = m.tanh(b, cl(b.fadd(pre(0, u), at(rec, u))))
                        else:
                            z = m.sigmoid(b, cl(b.fadd(pre(0, u), at(rec, u))))
                            if lbr:
                                rg = m.sigmoid(b, cl(b.fadd(pre(1, u), at(rec, add(b, H, u)))))
                                hh_in = b.fmul(rg, at(rec, add(b, 2 * H, u)))
                            else:
                                rb = (load(b, bias, add(b, d * 6 * H + 5 * H, u)) if bias
                                      else const(F32, 0.0))  # fmt: skip
                                hh_in = dot(b.mul(add(b, d * 3 * H + 2 * H, u), i64(H)),
                                            rh, 0, rb)  # fmt: skip
                            hh = m.tanh(b, cl(b.fadd(pre(2, u), hh_in)))
                            h_new = b.fadd(b.fmul(b.fsub(const(F32, 1.0), z), hh), b.fmul(z, hv))
                        store(b, h_new, yh, add(b, hrow, u))
                        yrow = b.mul(add(b, b.mul(t, i64(D * Bt)), d * Bt, bt), i64(H))
                        store(b, h_new, y, add(b, yrow, u))
        zero_empty_states(b, lens, [yh], S, D, Bt, H)
