"""``sequence_lens`` of an RNN, GRU or LSTM in generated code, as onnxruntime runs it (and
guard.compiler.reference.recurrent): batch row ``b`` runs steps ``0 .. len[b]-1``, the
reverse direction from ``t = len[b]-1`` down to 0; its Y is zero at every ``t >= len[b]``;
its final state (Y_h, Y_c) is the one at its last step, and zero for a row of length 0.
A length is clamped to ``[0, seq]`` (onnxruntime refuses a longer one at run time), so no
length addresses outside Y. Used by guard.compiler.codegen.recurrence and emit_recurrent.
"""

from __future__ import annotations

from collections.abc import Sequence

import llvmlite.ir as ir

from guard.compiler.codegen.irutil import F32, I32, I64, add, const, elem_ptr, i64, loop, store


def row_length(b: ir.IRBuilder, lens: ir.Value | None, bt: ir.Value, seq: int) -> ir.Value:
    """``len[bt]`` (int32) as an i64 in ``[0, seq]``; ``seq`` where the node has no lengths."""
    if lens is None:
        return i64(seq)
    n = b.sext(b.load(elem_ptr(b, lens, bt, I32), typ=I32, align=4), I64)
    n = b.select(b.icmp_signed("<", n, i64(0)), i64(0), n)
    return b.select(b.icmp_signed(">", n, i64(seq)), i64(seq), n)


def step_time(b: ir.IRBuilder, reverse: ir.Value | bool, step: ir.Value, n: ir.Value) -> ir.Value:
    """The time index of ``step`` in a row of length ``n``: ``step``, or ``n - 1 - step``
    reversed (``reverse`` a bool known when emitting or an i1)."""
    back = b.sub(b.sub(n, i64(1)), step)
    if isinstance(reverse, bool):
        return back if reverse else step
    return b.select(reverse, back, step)


def zero_past_ends(
    b: ir.IRBuilder, lens: ir.Value | None, y: ir.Value, shape: tuple[int, int, int, int]
) -> None:
    """``Y[t, :, bt, :] = 0`` for every ``t >= len[bt]`` (Y ``[seq, dirs, batch, hidden]``):
    the steps a row does not run write nothing else."""
    seq, dirs, batch, hidden = shape
    if lens is None:
        return
    with loop(b, 0, batch, 1, "lenrow") as bt:
        with loop(b, row_length(b, lens, bt, seq), seq, 1, "pastend") as t:
            for d in range(dirs):
                row = b.mul(add(b, b.mul(t, i64(dirs * batch)), d * batch, bt), i64(hidden))
                with loop(b, 0, hidden, 1, "zero") as u:
                    store(b, const(F32, 0.0), y, add(b, row, u))


def zero_empty_states(
    b: ir.IRBuilder, lens: ir.Value | None, states: Sequence[ir.Value | None],
    seq: int, dirs: int, batch: int, hidden: int,
) -> None:  # fmt: skip
    """Y_h (and Y_c), ``[dirs, batch, hidden]``, of every row of length 0: zero, as
    onnxruntime leaves them (not the initial state)."""
    if lens is None:
        return
    with loop(b, 0, batch, 1, "emptyrow") as bt:
        with b.if_then(b.icmp_signed("==", row_length(b, lens, bt, seq), i64(0))):
            for d in range(dirs):
                row = b.mul(add(b, d * batch, bt), i64(hidden))
                with loop(b, 0, hidden, 1, "zero") as u:
                    for s in states:
                        if s is not None:
                            store(b, const(F32, 0.0), s, add(b, row, u))
