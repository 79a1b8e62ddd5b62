"""LSTM on float32: forward, reverse and bidirectional, with bias, initial state,
peepholes, ``clip`` and ``input_forget``, the default activations (Sigmoid, Tanh, Tanh).

Per direction, per time step, per batch row: the ``4H`` gate pre-activations
``W x_t + R h + Wb + Rb`` (two dot products per gate row, reassociable sums that LLVM
vectorises) go to a stack buffer, then each hidden unit updates its cell and hidden state
(gate order ``i, o, f, c`` as in the reference). The running state lives in the Y_h and
Y_c outputs (the importer always gives LSTM its three outputs), so the kernel needs no
scratch beyond the gates. Declined, with the reason: ``sequence_lens``, other activations,
``layout=1``.
"""

from __future__ import annotations

import llvmlite.ir as ir

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
from guard.compiler.graph.view import GraphView, OpNode

DEFAULT = ["sigmoid", "tanh", "tanh"]


class Recurrent(Emitter):
    ops = frozenset({"LSTM"})

    def decline(self, node: OpNode, g: GraphView) -> str | None:
        if len(node.args) > 4 and node.args[4]:
            return "no emitter for LSTM with sequence_lens"
        why = float32_only(node, g)
        if why:
            return why
        a = node.attrs
        dirs = 2 if a["direction"] == "bidirectional" else 1
        if [s.lower() for s in a["activations"]] != DEFAULT * dirs:
            return f"no emitter for LSTM with activations {a['activations']}"
        if a.get("layout", 0):
            return "no emitter for LSTM with layout=1"
        return None

    def emit(
        self, b: ir.IRBuilder, ins: list[ir.Value | None], outs: list[ir.Value], k: Kernel
    ) -> None:
        a = k.attrs
        xo, wo = k.inputs[0], k.inputs[1]
        assert xo is not None and wo is not None
        S, Bt, n_in = xo.shape
        D, H = wo.shape[0], int(a["hidden_size"])
        x, w, r = ins[0], ins[1], ins[2]
        assert x is not None and w is not None and r is not None

        def arg(j: int) -> ir.Value | None:
            return ins[j] if len(ins) > j else None

        bias, h0, c0, peep = arg(3), arg(5), arg(6), arg(7)
        y, yh, yc = outs[0], outs[1], outs[2]
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
            with loop(b, 0, S, 1, "step") as step:
                t = b.sub(i64(S - 1), step) if reverse else step
                with loop(b, 0, Bt, 1, "row") as bt:
                    hrow = add(b, st, b.mul(bt, i64(H)))
                    xrow = b.mul(add(b, b.mul(t, i64(Bt)), bt), i64(n_in))
                    with loop(b, 0, 4 * H, 1, "gate") as j:
                        acc = const(F32, 0.0)
                        if bias:
                            bb = d * 8 * H
                            wb = load(b, bias, add(b, bb, j))
                            acc = b.fadd(wb, load(b, bias, add(b, bb + 4 * H, j)))
                        acc = dot(w, b.mul(add(b, d * 4 * H, j), i64(n_in)), x, xrow, n_in, acc)
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
