"""The recurrence of an LSTM, RNN or GRU whose input gates are one GEMM (``input_gates=1``,
guard.compiler.passes.batch_recurrent_inputs): per step the matrix-vector product
``h_{t-1} R^T`` and the state update, in blocks of hidden units, on the pool.

R is packed per direction as ``[block][k][gate][U]`` (U = two vectors of units, the last block
padded with zero rows): a block's product is one contiguous stream, ``h[k]`` broadcast times
``G * U`` floats into ``2G`` vector accumulators held in registers over the whole ``k`` loop
(no horizontal sums), and the block's units are then updated straight from those registers
(the gates plus the GEMM's ``x W^T + Wb``, the biases, sigmoid/tanh, the cell state kept in
Y_c, the new ``h`` stored into Y at its step; Y_h is copied from Y at the end). ``h_{t-1}`` is
read from Y at the previous step (h0 or zeros at the first), so a step's writes never meet
its reads and no unit waits for another one of the same step. A GRU without
``linear_before_reset`` takes two sub-steps a step (:func:`phases`): its z and r gates (z and
``r * h`` to two buffers on the kernel's stack), then ``(r * h) R_h^T`` and the update, R packed
as the z and r gates' blocks followed by the h gate's.

Work is claimed in chunks of whole blocks: claim ``k`` of a direction's atomic counter is
sub-step ``k // C``, chunk ``k % C``; before working a chunk the claimer waits (spinning,
after :data:`SPIN` polls yielding the CPU between polls) until the direction's ``done``
counter holds every chunk of the sub-step before. Claim loop ``i`` starts with direction
``i * D // TASKS`` (the pool runs each thread's own run of consecutive tasks first, so two
threads' first tasks, 0 and ``TASKS / 2``, differ) and then helps with the other's rest, so
the two directions of a bidirectional layer run side by side on two threads with no handoff
(each core streaming its own direction's R), and a unidirectional step is shared with one
handoff per chunk. Odd steps claim the chunks, and walk their blocks, in reverse order: the
blocks a step read last, still in L2, are the next step's first (R of a direction is 1 MiB
at hidden 256, the L2's size). The kernel runs :data:`TASKS` claim loops on the pool (``guard_pool_run``); with one thread the first
does all the work in order and the others find none left. The chunk count comes from the
layer's shape alone and each block is the same code whichever thread claims it, so the
outputs are bit-identical for any thread count. A layer under :data:`PARALLEL_FLOPS` calls
the claim loop directly, without the pool.

With ``sequence_lens`` (guard.compiler.codegen.sequence_lens) a row works step ``s`` only
while ``s < len``, at ``t = len - 1 - s`` reversed (so it reads ``h`` where its previous
step wrote it); Y past each row's length is zeroed before the steps, Y_h is copied from each
row's last step, and a row of length 0 ends with zero states. A batch-first node reaches
this module sequence first (guard.compiler.passes.batch_recurrent_inputs).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen import mathfn as m
from guard.compiler.codegen.base import Kernel
from guard.compiler.codegen.irutil import (
    F32,
    I64,
    PTR,
    VOID,
    add,
    const,
    declare,
    elem_ptr,
    fma,
    for_loop_carried,
    for_loop_dynamic,
    i64,
    load,
    load_lanes,
    loop,
    splat,
    store,
    store_lanes,
)
from guard.compiler.codegen.sequence_lens import (
    row_length,
    step_time,
    zero_empty_states,
    zero_past_ends,
)
from guard.compiler.codegen.threadpool import SPIN_HINT

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
BLOCK_VECTORS = 2  # units per block: two vectors (2G accumulators)
CHUNK_FLOPS = 100_000  # per claimed chunk: ~3 us of a bandwidth-bound product, >> a handoff
PARALLEL_FLOPS = 2_000_000  # below: one call, no pool dispatch
TASKS = 8  # claim loops put on the pool (at most this many threads work on one layer)
COUNTER_STRIDE = 8  # i64s between the counters (one 64-byte line each)
STACK_BYTES = 1 << 16  # a two-phase GRU's z and r * h buffers at most (else the previous emitter)
SPIN = 4096  # polls of a chunk's wait before each further poll yields the CPU (a thread
# that has the rest of the step may be waiting for it on a shared machine)


def blocked(op: str, attrs: Mapping[str, Any]) -> bool:
    """Whether this module emits the node (the GEMM-batched forms)."""
    return op in GATES and bool(attrs.get("input_gates", 0))


def packable(op: str, attrs: Mapping[str, Any], shapes: Sequence[tuple[int, ...] | None]) -> bool:
    """Whether to pack R for this module: the GEMM-batched forms, and for a two-phase GRU only
    where its two state buffers fit :data:`STACK_BYTES` of the calling thread's stack."""
    if not blocked(op, attrs):
        return False
    x, r = shapes[0], shapes[2]
    if phases(op, attrs) == 1:
        return True
    return x is not None and r is not None and 2 * 4 * r[0] * x[1] * r[2] <= STACK_BYTES


def phases(op: str, attrs: Mapping[str, Any]) -> int:
    """Sub-steps per step: GRU without ``linear_before_reset`` needs every unit's ``r * h``
    before its ``(r * h) R_h^T``: its z and r gates first, then the h gate and the update."""
    return 2 if op == "GRU" and not attrs.get("linear_before_reset", 0) else 1


def pack_recurrence(r: np.ndarray, gates: int, width: int, split: bool = False) -> np.ndarray:
    """R ``[D, G*H, H]`` as ``[D, blocks, H(k), G, U]`` (padded units are zero rows); with
    ``split`` (GRU's two phases) the z and r gates so, then the h gate so, one after the other."""
    if split:
        h = r.shape[2]
        parts = [pack_recurrence(r[:, : 2 * h], 2, width), pack_recurrence(r[:, 2 * h :], 1, width)]
        return np.concatenate([q.ravel() for q in parts])
    d, _, h = r.shape
    u = BLOCK_VECTORS * width
    nb = -(-h // u)
    pad = np.zeros((d, gates, nb * u, h), np.float32)
    pad[:, :, :h] = np.asarray(r, np.float32).reshape(d, gates, h, h)
    return np.ascontiguousarray(pad.reshape(d, gates, nb, u, h).transpose(0, 2, 4, 1, 3))


def layout(op: str, seq: int, batch: int, dirs: int, hidden: int, width: int) -> dict[str, int]:
    """Blocks, blocks per chunk, chunks per direction-step, and whether to use the pool."""
    g, u = GATES[op], BLOCK_VECTORS * width
    nb = -(-hidden // u)
    per_block = 2 * g * hidden * u * batch
    bpc = min(nb, max(1, math.ceil(CHUNK_FLOPS / per_block)))
    chunks = -(-nb // bpc)
    flops = 2 * g * hidden * hidden * batch * dirs * seq
    pool = int(flops >= PARALLEL_FLOPS and dirs * chunks > 1)
    return {"blocks": nb, "per_chunk": bpc, "chunks": chunks, "pool": pool}


def _pause(b: ir.IRBuilder) -> None:
    """The pool's spin hint (guard.compiler.codegen.threadpool.SPIN_HINT), if the
    architecture has one."""
    hint = SPIN_HINT.get(str(b.module.triple).split("-")[0])
    if hint is not None:
        name, args = hint
        i32 = ir.IntType(32)
        b.call(
            declare(b.module, name, VOID, [i32] * len(args)), [ir.Constant(i32, a) for a in args]
        )


def emit_recurrence(
    b: ir.IRBuilder, ins: list[ir.Value | None], outs: list[ir.Value], k: Kernel
) -> None:
    a, op = k.attrs, k.op
    xo, ro = k.inputs[0], k.inputs[2]
    assert xo is not None and ro is not None
    S, Bt, _ = xo.shape
    D, H, W = ro.shape[0], int(a["hidden_size"]), k.vector_width
    plan = layout(op, S, Bt, D, H, W)

    def arg(j: int) -> ir.Value | None:
        return ins[j] if len(ins) > j else None

    names = ["x", "r", "bias", "h0", "c0", "peep", "y", "yh", "yc", "z", "rh", "lens"]
    two = phases(op, a) == 2  # z and r * h of the step, shared between the threads
    z, rh = (b.alloca(ir.ArrayType(F32, D * Bt * H)) for _ in range(2)) if two else (None, None)
    vals = [arg(0), arg(2), arg(3), arg(5), arg(6), arg(7), outs[0], outs[1],
            outs[2] if op == "LSTM" else None, z, rh, arg(4)]  # fmt: skip
    shared = b.alloca(ir.ArrayType(PTR, len(names) + 1))
    counters = b.alloca(ir.ArrayType(I64, COUNTER_STRIDE * (2 * D + 1)))
    counters.align = 64
    for j, v in enumerate([*vals, counters]):
        slot = b.gep(shared, [i64(0), i64(j)], inbounds=True)
        b.store(ir.Constant(PTR, None) if v is None else v, slot)
    with loop(b, 0, COUNTER_STRIDE * (2 * D + 1), 1, "zero") as i:
        b.store(i64(0), b.gep(counters, [i64(0), i], inbounds=True))
    yc, c0 = outs[2] if op == "LSTM" else None, arg(6)
    if yc is not None:  # the cell state lives in Y_c
        with loop(b, 0, D * Bt * H, 1, "cinit") as i:
            store(b, load(b, c0, i) if c0 is not None else const(F32, 0.0), yc, i)
    zero_past_ends(b, arg(4), outs[0], (S, D, Bt, H))
    task = _claim_loop(b.module, f"{b.function.name}_steps", k, plan)
    null = ir.Constant(PTR, None)
    if plan["pool"]:
        run = declare(b.module, "guard_pool_run", VOID, [PTR, PTR, PTR, PTR, I64])
        b.call(run, [task, shared, null, null, i64(TASKS)])
    else:
        b.call(task, [i64(0), shared, null, null])
    y, yh = vals[6], vals[7]
    for d in range(D):  # Y_h: h at each row's last step (t = 0 reversed)
        with loop(b, 0, Bt, 1, "yh") as bt:
            n = row_length(b, arg(4), bt, S)
            last = b.select(b.icmp_signed(">", n, i64(0)), b.sub(n, i64(1)), i64(0))
            t_last = i64(0) if a["direction"] == "reverse" or d == 1 else last
            src = b.mul(add(b, b.mul(t_last, i64(D * Bt)), d * Bt, bt), i64(H))
            with loop(b, 0, H, 1, "unit") as u:
                store(b, load(b, y, add(b, src, u)), yh, add(b, b.mul(bt, i64(H)), d * Bt * H, u))
    zero_empty_states(b, arg(4), [yh, yc], S, D, Bt, H)


def _claim_loop(module: ir.Module, name: str, k: Kernel, plan: dict[str, int]) -> ir.Function:
    """``void name(i64 task, ptr shared, ptr, ptr)``: claims chunks until none is left."""
    fn = ir.Function(module, ir.FunctionType(VOID, [I64, PTR, PTR, PTR]), name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    sh = fn.args[1]
    p = [b.load(b.gep(sh, [i64(j)], source_etype=PTR), typ=PTR) for j in range(13)]
    x, r, bias, h0, _c0, peep, y, _yh, yc, zbuf, rhbuf, lens, cnt = p
    a, op = k.attrs, k.op
    xo, ro = k.inputs[0], k.inputs[2]
    assert xo is not None and ro is not None
    S, Bt, _ = xo.shape
    D, H, G, W = ro.shape[0], int(a["hidden_size"]), GATES[op], k.vector_width
    C, nb, bpc = plan["chunks"], plan["blocks"], plan["per_chunk"]
    P = phases(op, a)
    U = BLOCK_VECTORS * W
    has = {n: k.inputs[j] is not None if len(k.inputs) > j else False
           for n, j in (("bias", 3), ("lens", 4), ("h0", 5), ("peep", 7))}  # fmt: skip
    zeros = ir.GlobalVariable(module, ir.ArrayType(F32, H), f"{name}_zeros")
    zeros.linkage, zeros.global_constant = "internal", True
    zeros.initializer = ir.Constant(ir.ArrayType(F32, H), None)
    clip = a.get("clip")

    def cl(v: ir.Value) -> ir.Value:
        if clip is None:
            return v
        return m.fmin(b, m.fmax(b, v, const(v.type, -float(clip))), const(v.type, float(clip)))

    dirs = fn.append_basic_block("direction")
    head = fn.append_basic_block("claim")
    work = fn.append_basic_block("wait")
    next_dir = fn.append_basic_block("next")
    out = fn.append_basic_block("out")
    pre = b.block
    b.branch(dirs)
    b.position_at_end(dirs)
    jd = b.phi(I64)
    jd.add_incoming(i64(0), pre)
    # Task i starts with direction i * D // TASKS and then helps with the other one's rest:
    # the pool gives each thread a run of consecutive tasks, so with two threads the first
    # tasks of their runs (0 and TASKS / 2) start on different directions.
    d = b.urem(add(b, b.udiv(b.mul(fn.args[0], i64(D)), i64(TASKS)), jd), i64(D))
    claim = b.gep(cnt, [b.mul(add(b, b.mul(d, i64(2)), 1), i64(COUNTER_STRIDE))], source_etype=I64)
    done = b.gep(cnt, [b.mul(add(b, b.mul(d, i64(2)), 2), i64(COUNTER_STRIDE))], source_etype=I64)
    b.cbranch(b.icmp_unsigned("<", jd, i64(D)), head, out)
    b.position_at_end(head)
    kk = b.atomic_rmw("add", claim, i64(1), "monotonic")
    b.cbranch(b.icmp_signed(">=", kk, i64(S * P * C)), next_dir, work)
    b.position_at_end(next_dir)
    jd.add_incoming(add(b, jd, 1), next_dir)
    b.branch(dirs)
    b.position_at_end(work)
    q, c = b.udiv(kk, i64(C)), b.urem(kk, i64(C))  # sub-step, chunk
    s = b.udiv(q, i64(P))
    # Odd steps visit the chunks and blocks in reverse: the blocks a step read last (still
    # in cache) are the next step's first.
    odd = b.icmp_unsigned("==", b.and_(s, i64(1)), i64(1))
    c = b.select(odd, b.sub(i64(C - 1), c), c)
    need = b.mul(q, i64(C))
    spin = fn.append_basic_block("spin")
    ready = fn.append_basic_block("ready")
    before = b.block
    b.branch(spin)
    b.position_at_end(spin)
    polls = b.phi(I64)
    polls.add_incoming(i64(0), before)
    have = b.load_atomic(done, "acquire", 8, typ=I64)
    ok = b.icmp_unsigned(">=", have, need)
    pause = fn.append_basic_block("pause")
    b.cbranch(ok, ready, pause)
    b.position_at_end(pause)
    _pause(b)
    with b.if_then(b.icmp_unsigned(">=", polls, i64(SPIN))):
        b.call(declare(module, "sched_yield", ir.IntType(32), []), [])
    polls.add_incoming(add(b, polls, 1), b.block)
    b.branch(spin)
    b.position_at_end(ready)
    rev = (
        b.icmp_unsigned("==", d, i64(1))
        if D == 2
        else ir.Constant(ir.IntType(1), a["direction"] == "reverse")
    )
    first = b.icmp_unsigned("==", s, i64(0))

    def row_body(bt: ir.Value, ph: int | None) -> None:
        """One batch row of this chunk: every gate (``ph`` None) or GRU's phase ``ph``; with
        ``sequence_lens`` only where the row has step ``s``."""
        n = row_length(b, lens if has["lens"] else None, bt, S)
        if has["lens"]:
            with b.if_then(b.icmp_signed("<", s, n)):
                row_steps(bt, ph, n)
        else:
            row_steps(bt, ph, n)

    def row_steps(bt: ir.Value, ph: int | None, n: ir.Value) -> None:
        t = step_time(b, rev, s, n)
        t_prev = b.select(rev, add(b, t, 1), b.sub(t, i64(1)))
        gates = list(range(G)) if ph is None else [[0, 1], [2]][ph]
        ng = len(gates)
        base = 0 if ph != 1 else D * nb * H * 2 * U
        rp = elem_ptr(b, r, add(b, base, b.mul(d, i64(nb * H * ng * U))))
        db = add(b, b.mul(d, i64(Bt)), bt)  # [d, bt] of the [D, B, H] states
        hp0 = elem_ptr(b, h0, b.mul(db, i64(H))) if has["h0"] else b.bitcast(zeros, PTR)
        hprev = elem_ptr(b, y, b.mul(add(b, b.mul(t_prev, i64(D * Bt)), db), i64(H)),
                         inbounds=False)  # fmt: skip
        hp = b.select(first, hp0, hprev)
        yrow = b.mul(add(b, b.mul(t, i64(D * Bt)), db), i64(H))
        xrow = add(b, b.mul(add(b, b.mul(t, i64(Bt)), bt), i64(D * G * H)), b.mul(d, i64(G * H)))
        brow = b.mul(d, i64(2 * G * H))
        prow = b.mul(d, i64(3 * H))
        first_blk = b.mul(c, i64(bpc))
        n_blk = b.sub(i64(nb), first_blk)
        n_blk = b.select(b.icmp_unsigned("<", n_blk, i64(bpc)), n_blk, i64(bpc))

        src = elem_ptr(b, rhbuf, b.mul(db, i64(H))) if ph == 1 else hp  # h, or r * h

        def block(blk: ir.Value, units: int) -> None:
            bp = elem_ptr(b, rp, b.mul(blk, i64(H * ng * U)))
            vt = ir.VectorType(F32, W)

            def kstep(kx: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
                hk = splat(b, load(b, src, kx), W)
                row = b.mul(kx, i64(ng * U))
                return [fma(b, load(b, bp, add(b, row, j * W), W), hk, acc[j])
                        for j in range(ng * BLOCK_VECTORS)]  # fmt: skip

            acc = for_loop_carried(b, 0, H, 1, [const(vt, 0.0)] * (ng * BLOCK_VECTORS), kstep)
            for v in range(BLOCK_VECTORS):
                lanes = min(W, units - v * W)
                if lanes <= 0:
                    continue
                u = add(b, b.mul(blk, i64(U)), v * W)

                def ld(base: ir.Value, idx: ir.Value, lanes: int = lanes) -> ir.Value:
                    return load_lanes(b, base, idx, W, lanes)

                def xpart(g: int, u: ir.Value = u) -> ir.Value:
                    """x W^T + Wb of gate ``g`` (the GEMM's, B's first half)."""
                    pre = ld(x, add(b, xrow, g * H, u))
                    if has["bias"]:
                        pre = b.fadd(pre, ld(bias, add(b, brow, g * H, u)))
                    return pre

                def rpart(g: int, u: ir.Value = u, v: int = v) -> ir.Value:
                    """h R^T + Rb of gate ``g`` (the accumulators, B's second half)."""
                    rec = acc[(g - gates[0]) * BLOCK_VECTORS + v]
                    if has["bias"]:
                        rec = b.fadd(rec, ld(bias, add(b, brow, G * H + g * H, u)))
                    return rec

                def st(val: ir.Value, base: ir.Value, idx: ir.Value, lanes: int = lanes) -> None:
                    store_lanes(b, val, base, idx, lanes)

                unit = add(b, b.mul(db, i64(H)), u)  # this vector's [d, bt, u] in Y_c
                if ph is not None:  # GRU without linear_before_reset
                    hv = ld(hp, u)
                    if ph == 0:  # z, and r * h for every unit's phase 1
                        st(m.sigmoid(b, cl(b.fadd(xpart(0), rpart(0)))), zbuf, unit)
                        st(b.fmul(m.sigmoid(b, cl(b.fadd(xpart(1), rpart(1)))), hv), rhbuf, unit)
                        continue
                    zv = ld(zbuf, unit)
                    hh = m.tanh(b, cl(b.fadd(xpart(2), rpart(2))))
                    one = const(vt, 1.0)
                    st(b.fadd(b.fmul(b.fsub(one, zv), hh), b.fmul(zv, hv)), y, add(b, yrow, u))
                    continue
                peeps = None
                if has["peep"]:
                    peeps = [ld(peep, add(b, prow, n * H, u)) for n in range(3)]
                h_prev = ld(hp, u) if op == "GRU" else None
                h_new = _update(b, op, a, W, (xpart, rpart, cl, ld, st), yc, unit, peeps, h_prev)
                st(h_new, y, add(b, yrow, u))

        full = H // U

        def one(j: ir.Value, _: list[ir.Value]) -> list[ir.Value]:
            blk = add(b, first_blk, b.select(odd, b.sub(b.sub(n_blk, i64(1)), j), j))
            if H % U == 0:
                block(blk, U)
                return []
            with b.if_else(b.icmp_unsigned("<", blk, i64(full))) as (then, tail):
                with then:
                    block(blk, U)
                with tail:  # the short last block: masked loads and stores
                    block(blk, H - full * U)
            return []

        for_loop_dynamic(b, n_blk, [], one)

    if P == 1:
        with loop(b, 0, Bt, 1, "row") as bt:
            row_body(bt, None)
    else:
        with b.if_else(b.icmp_unsigned("==", b.urem(q, i64(2)), i64(0))) as (zr, hg):
            with zr:
                with loop(b, 0, Bt, 1, "row") as bt:
                    row_body(bt, 0)
            with hg:
                with loop(b, 0, Bt, 1, "row") as bt:
                    row_body(bt, 1)
    b.atomic_rmw("add", done, i64(1), "release")
    b.branch(head)
    b.position_at_end(out)
    b.ret_void()
    return fn


def _update(
    b: ir.IRBuilder, op: str, a: Mapping[str, Any], width: int, fns: tuple[Callable, ...],
    yc: ir.Value, unit: ir.Value, peeps: list[ir.Value] | None, h_prev: ir.Value | None,
) -> ir.Value:  # fmt: skip
    """One vector of units' new h from its gates (the LSTM's cell state stored into Y_c)."""
    xpart, rpart, cl, ld, st = fns
    one = const(ir.VectorType(F32, width), 1.0)

    def gate(g: int) -> ir.Value:
        return b.fadd(xpart(g), rpart(g))

    if op == "RNN":
        return m.tanh(b, cl(gate(0)))
    if op == "GRU":  # linear_before_reset: tanh(x_h + r * (h R_h^T + Rb_h))
        z = m.sigmoid(b, cl(gate(0)))
        rg = m.sigmoid(b, cl(gate(1)))
        hh = m.tanh(b, cl(b.fadd(xpart(2), b.fmul(rg, rpart(2)))))
        assert h_prev is not None
        return b.fadd(b.fmul(b.fsub(one, z), hh), b.fmul(z, h_prev))
    c = ld(yc, unit)

    def peeped(g: int, n: int, cv: ir.Value) -> ir.Value:
        return gate(g) if peeps is None else b.fadd(gate(g), b.fmul(peeps[n], cv))

    ig = m.sigmoid(b, cl(peeped(0, 0, c)))
    fg = b.fsub(one, ig) if a.get("input_forget", 0) else m.sigmoid(b, cl(peeped(2, 2, c)))
    c_new = b.fadd(b.fmul(fg, c), b.fmul(ig, m.tanh(b, cl(gate(3)))))
    og = m.sigmoid(b, cl(peeped(1, 1, c_new)))
    st(c_new, yc, unit)
    return b.fmul(og, m.tanh(b, c_new))
