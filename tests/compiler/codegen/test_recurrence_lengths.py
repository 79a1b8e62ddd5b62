"""``sequence_lens`` and ``layout=1`` of LSTM, GRU (both linear_before_reset forms) and RNN
in generated code: every direction, batch 3 with lengths 2, 0 and 5 (a row of length 0, one
of full length) and batch 1 of full length, batch first and sequence first; the packed
recurrence (R constant, on the pool with its floors lowered) and the per-step emitters (W
and R graph inputs, as in onnx's conformance cases), each at 1, 2 and 3 threads
bit-identical and equal to the reference interpreter, which equals onnxruntime (batch first
through the sequence-first twin: onnxruntime refuses layout=1)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen import recurrence
from guard.compiler.codegen.build import jit
from guard.compiler.ir.isa_table import table_for
from guard.compiler.partition.plan import plan

from ..test_batch_recurrent_inputs import one_node_model, rnd
from ._jit import skip_unless_runnable

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
SEQ, N_IN, HIDDEN = 5, 6, 40  # 40: a short last block of units (16 or 32 a block)
CASES = [
    (op, direction, attrs)
    for op in ("LSTM", "GRU", "RNN")
    for direction in ("forward", "reverse", "bidirectional")
    for attrs in ([{}, {"linear_before_reset": 1}] if op == "GRU" else [{}])
]
IDS = [f"{c[0]}-{c[1]}{'-lbr' if c[2] else ''}" for c in CASES]


def model(op: str, direction: str, lens: list[int], layout: int, consts: bool, **attrs):
    """The node with bias, lengths, initial state (and for LSTM initial cell and
    peepholes); W and R initialisers (``consts``) or graph inputs."""
    batch, d, g = len(lens), 2 if direction == "bidirectional" else 1, GATES[op]

    def state(seed: int) -> np.ndarray:  # [D, B, H], batch first [B, D, H]
        s = rnd(d, batch, HIDDEN, seed=seed)
        return np.ascontiguousarray(s.transpose(1, 0, 2)) if layout else s

    x_shape = [batch, SEQ, N_IN] if layout else [SEQ, batch, N_IN]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
    weights = [("w", rnd(d, g * HIDDEN, N_IN, seed=1)), ("r", rnd(d, g * HIDDEN, HIDDEN, seed=2))]
    inits = [("b", rnd(d, 2 * g * HIDDEN, seed=3)), ("lens", np.array(lens, np.int32)),
             ("h0", state(4))]  # fmt: skip
    ins = ["x", "w", "r", "b", "lens", "h0"]
    if op == "LSTM":
        inits += [("c0", state(5)), ("p", rnd(d, 3 * HIDDEN, seed=6))]
        ins += ["c0", "p"]
    if consts:
        inits += weights
    else:
        inputs += [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in weights]
    return one_node_model(op, ins, inputs, inits, opset=14, hidden_size=HIDDEN,
                          direction=direction, layout=layout, **attrs)  # fmt: skip


def feeds(op: str, direction: str, lens: list[int], layout: int, consts: bool) -> dict:
    d, g = 2 if direction == "bidirectional" else 1, GATES[op]
    x = rnd(SEQ, len(lens), N_IN, seed=9) * 2
    out = {"x": np.ascontiguousarray(x.transpose(1, 0, 2)) if layout else x}
    if not consts:
        out |= {"w": rnd(d, g * HIDDEN, N_IN, seed=1), "r": rnd(d, g * HIDDEN, HIDDEN, seed=2)}
    return out


def onnxruntime_outputs(case, lens: list[int], layout: int) -> dict[str, np.ndarray]:
    """onnxruntime on the sequence-first twin, its outputs batch first where ``layout``."""
    op, direction, attrs = case
    m = model(op, direction, lens, 0, True, **attrs)
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = dict(zip(["y", "yh", "yc"], s.run(None, feeds(op, direction, lens, 0, True)),
                    strict=False))  # fmt: skip
    if layout:
        outs = {k: v.transpose(2, 0, 1, 3) if k == "y" else v.transpose(1, 0, 2)
                for k, v in outs.items()}  # fmt: skip
    return outs


def native_equals_reference(case, lens, layout, consts, isa, target) -> str:
    """O2 at 1, 2 and 3 threads: one native partition, bit-identical, equal to the reference
    interpreter and to onnxruntime; returns where the recurrent step's R lives."""
    op, direction, attrs = case
    g0 = import_onnx(model(op, direction, lens, layout, consts, **attrs))
    g, _ = optimize(g0, "O2", target=table_for(isa) if isa else None)
    compiled = plan(g)
    assert compiled.partition_report["fallback_nodes"] == 0, compiled.partition_text()
    inputs = feeds(op, direction, lens, layout, consts)
    outs, space = [], ""
    for threads in (1, 2, 3):
        rt, code = jit(compiled, target, threads=threads)
        outs.append(rt.run(inputs))
        (step,) = [s for s in code.plan.steps() if s.op == op]
        space = step.inputs[2].space
    want = run_reference(g0, inputs)
    peer = onnxruntime_outputs(case, lens, layout)
    for k in want:
        assert all(np.array_equal(outs[0][k], o[k]) for o in outs[1:]), k
        np.testing.assert_allclose(outs[0][k], want[k], rtol=1e-4, atol=1e-5, err_msg=k)
        np.testing.assert_allclose(want[k], peer[k], rtol=1e-4, atol=1e-5, err_msg=k)
    for j, n in enumerate(lens):  # past its length a row's Y is zero; empty: zero state
        y = outs[0]["y"][j] if layout else outs[0]["y"][:, :, j]
        yh = outs[0]["yh"][j] if layout else outs[0]["yh"][:, j]
        assert not y[n:].any() and (n == 0) == (not yh.any())
    return space


@pytest.mark.parametrize("isa", ["avx2", "host"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_packed_recurrence_runs_lengths_and_batch_first(case, isa, monkeypatch):
    target = None if isa == "host" else skip_unless_runnable(isa)
    monkeypatch.setattr(recurrence, "CHUNK_FLOPS", 1)  # one block per chunk
    monkeypatch.setattr(recurrence, "PARALLEL_FLOPS", 1)  # on the pool
    layout = CASES.index(case) % 2
    for lens, lay in (([2, 0, 5], layout), ([SEQ], 1 - layout)):
        space = native_equals_reference(case, lens, lay, True, None if isa == "host" else isa,
                                        target)  # fmt: skip
        assert space == "packed"  # for guard.compiler.codegen.recurrence


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_per_step_emitters_run_lengths_and_batch_first(case):
    """W and R graph inputs: the GEMM reads W transposed, R is not packed."""
    layout = CASES.index(case) % 2
    assert native_equals_reference(case, [2, 0, 5], layout, False, None, None) != "packed"
