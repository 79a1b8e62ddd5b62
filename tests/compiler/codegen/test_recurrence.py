"""guard.compiler.codegen.recurrence: LSTM, GRU (both linear_before_reset forms) and RNN whose input
gates are one GEMM, their recurrence in blocks of units on the pool. With the chunk and pool
floors lowered every layer runs as several chunks on the pool; 1, 2 and 3 threads give the
same bits, equal to the reference interpreter on the imported graph (every direction, bias,
initial states, sequence_lens, peepholes, clip, input_forget; hidden sizes with and
without a short last block); test_recurrence_lengths adds rows of length 0 and batch first."""

from __future__ import annotations

import numpy as np
import pytest

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen import recurrence
from guard.compiler.codegen.build import jit
from guard.compiler.ir.isa_table import table_for
from guard.compiler.partition.plan import plan

from ..test_batch_recurrent_inputs import recurrent_model, rnd
from ._jit import TARGETS, skip_unless_runnable

CASES = [
    # (op, direction, hidden, with bias and initial state, attributes)
    ("LSTM", "bidirectional", 40, True, {}),
    ("LSTM", "forward", 64, False, {"input_forget": 1}),
    ("LSTM", "reverse", 24, True, {"clip": 0.6}),
    ("GRU", "bidirectional", 40, True, {"linear_before_reset": 1}),
    ("GRU", "forward", 32, False, {"linear_before_reset": 1, "clip": 0.5}),
    ("GRU", "bidirectional", 40, True, {}),  # two phases a step: z and r, then h
    ("GRU", "reverse", 24, False, {"clip": 0.7}),
    ("RNN", "reverse", 40, True, {}),
    ("RNN", "bidirectional", 16, False, {}),
]
IDS = [f"{c[0]}-{c[1]}-{c[2]}{'-lbr' if c[4].get('linear_before_reset') else ''}" for c in CASES]


def _model(op: str, direction: str, hidden: int, extras: bool, attrs: dict, peep: bool):
    m = recurrent_model(op, direction, extras, seq=6, batch=2, n_in=12, hidden=hidden, **attrs)
    node = m.graph.node[0]  # with extras: sequence_lens 6 and 4
    if peep and op == "LSTM" and extras:  # c0 and peepholes as initialisers
        from onnx import numpy_helper

        d = 2 if direction == "bidirectional" else 1
        m.graph.initializer.extend([
            numpy_helper.from_array(rnd(d, 2, hidden, seed=6), "c0"),
            numpy_helper.from_array(rnd(d, 3 * hidden, seed=7), "p"),
        ])  # fmt: skip
        node.input.extend(["c0", "p"])
    return m


@pytest.mark.parametrize("isa", [*TARGETS, "host"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_blocked_recurrence_is_bit_identical_for_any_thread_count(case, isa, monkeypatch):
    op, direction, hidden, extras, attrs = case
    target = None if isa == "host" else skip_unless_runnable(isa)
    monkeypatch.setattr(recurrence, "CHUNK_FLOPS", 1)  # one block per chunk
    monkeypatch.setattr(recurrence, "PARALLEL_FLOPS", 1)  # on the pool
    g0 = import_onnx(_model(op, direction, hidden, extras, attrs, peep=True))
    steps = _native_equals_reference(g0, isa if target else None, op, target)
    for step, ir_text in steps:
        assert step.inputs[2] is not None and step.inputs[2].space == "packed"
        assert f"{step.kernel}_steps" in ir_text  # the claim loop


def _native_equals_reference(g0, isa, op, target=None):
    """The O2 build at 1, 2 and 3 threads: bit-identical, equal to the reference; returns
    each build's recurrent step and IR text."""
    g, _ = optimize(g0, "O2", target=table_for(isa) if isa else None)
    compiled = plan(g)
    assert compiled.partition_report["fallback_nodes"] == 0, compiled.partition_text()
    x = rnd(6, 2, 12, seed=11) * 2
    outs, steps = [], []
    for threads in (1, 2, 3):
        rt, code = jit(compiled, target, threads=threads)
        (step,) = [s for s in code.plan.steps() if s.op == op]
        steps.append((step, code.generated.ir_text))
        outs.append(rt.run({"x": x}))
    want = run_reference(g0, {"x": x})
    for k in want:
        assert all(np.array_equal(outs[0][k], o[k]) for o in outs[1:]), k
        np.testing.assert_allclose(outs[0][k], want[k], rtol=1e-4, atol=1e-5, err_msg=k)
    return steps


def test_the_layout_rule_depends_on_the_layer_alone():
    """Blocks of two vectors; chunks of whole blocks by the FLOP floor; the pool only for a
    layer over PARALLEL_FLOPS with more than one chunk in a step."""
    big = recurrence.layout("LSTM", 80, 1, 2, 256, 16)
    assert big == {"blocks": 8, "per_chunk": 2, "chunks": 4, "pool": 1}
    assert recurrence.layout("LSTM", 1, 1, 1, 128, 16)["pool"] == 0  # one step of 131 kFLOP
    assert recurrence.layout("RNN", 40, 1, 1, 40, 8) == {
        "blocks": 3, "per_chunk": 3, "chunks": 1, "pool": 0,
    }  # fmt: skip


def test_the_two_phase_gru_packs_z_and_r_then_h():
    r = rnd(1, 3 * 20, 20, seed=4)
    p = recurrence.pack_recurrence(r, 3, 8, split=True)
    zr = p[: 2 * 20 * 2 * 16].reshape(1, 2, 20, 2, 16)  # [D, blocks, k, gates z r, U]
    hg = p[2 * 20 * 2 * 16 :].reshape(1, 2, 20, 1, 16)
    assert zr[0, 1, 5, 1, 2] == r[0, 20 + 16 + 2, 5] and hg[0, 0, 9, 0, 7] == r[0, 40 + 7, 9]
    assert recurrence.phases("GRU", {}) == 2 and recurrence.phases("LSTM", {}) == 1


def test_a_two_phase_gru_over_the_stack_bound_keeps_the_previous_emitter():
    gru = {"input_gates": 1}
    assert recurrence.packable("GRU", gru, [(5, 8, 6 * 512), None, (2, 3 * 512, 512)])
    assert not recurrence.packable("GRU", gru, [(5, 16, 6 * 512), None, (2, 3 * 512, 512)])
    assert recurrence.packable("GRU", {**gru, "linear_before_reset": 1},
                               [(5, 16, 6 * 512), None, (2, 3 * 512, 512)])  # fmt: skip
    assert not recurrence.packable("GRU", {}, [(5, 1, 3), None, (1, 3, 1)])  # per-step form


def test_the_previous_gru_emitter_still_runs_where_r_is_not_packed(monkeypatch):
    monkeypatch.setattr(recurrence, "STACK_BYTES", 0)
    g0 = import_onnx(_model("GRU", "bidirectional", 16, True, {}, peep=False))
    for step, ir_text in _native_equals_reference(g0, None, "GRU"):
        assert step.inputs[2] is not None and step.inputs[2].space == "weights"
        assert f"{step.kernel}_steps" not in ir_text


def test_the_packed_r_holds_each_blocks_gate_rows_by_k():
    r = rnd(2, 4 * 20, 20, seed=3)
    p = recurrence.pack_recurrence(r, 4, 8)  # U = 16: two blocks, the second 4 units
    assert p.shape == (2, 2, 20, 4, 16)
    d, blk, k, g, u = 1, 1, 7, 2, 3
    assert p[d, blk, k, g, u] == r[d, g * 20 + blk * 16 + u, k]
    assert not p[:, 1, :, :, 4:].any()  # padded units are zero rows
