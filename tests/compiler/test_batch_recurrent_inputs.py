"""batch_recurrent_inputs: RNN/GRU/LSTM input gates as one GEMM over the sequence. The
structure after the rewrite, equality with the unoptimised graph on seeded inputs (every
op, direction and optional input the reference takes), the generated LSTM reading the
GEMM's gates equal to the reference, and the cases where the rule must not fire."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen.build import jit
from guard.compiler.partition.plan import plan
from guard.compiler.passes.batch_recurrent_inputs import BatchRecurrentInputs

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
ENTRY = [(BatchRecurrentInputs(), "under test")]


def rnd(*shape: int, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * 0.5).astype(np.float32)


def recurrent_model(op: str, direction: str, extras: bool, seq: int = 5, batch: int = 2,
                    n_in: int = 3, hidden: int = 4, w_const: bool = True, **attrs):  # fmt: skip
    d, g = (2 if direction == "bidirectional" else 1), GATES[op]
    inits = [("r", rnd(d, g * hidden, hidden, seed=2))]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, batch, n_in])]
    if w_const:
        inits.append(("w", rnd(d, g * hidden, n_in, seed=1)))
    else:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [d, g * hidden, n_in]))
    ins = ["x", "w", "r"]
    if extras:
        inits += [("b", rnd(d, 2 * g * hidden, seed=3)), ("h0", rnd(d, batch, hidden, seed=4)),
                  ("lens", np.array([seq, seq - 2][:batch], np.int32))]  # fmt: skip
        ins += ["b", "lens", "h0"]
    return one_node_model(op, ins, inputs, inits, hidden_size=hidden, direction=direction, **attrs)


def one_node_model(op: str, ins: list[str], inputs: list, inits: list, opset: int = 17,
                   **attrs):  # fmt: skip
    """The model of one recurrent node reading ``ins`` (graph ``inputs``, initialisers
    ``inits`` as (name, array)), its outputs y, yh (and yc for LSTM)."""
    outs = ["y", "yh"] + (["yc"] if op == "LSTM" else [])
    node = helper.make_node(op, ins, outs, **attrs)
    graph = helper.make_graph(
        [node], "rec", inputs,
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
        [numpy_helper.from_array(v, k) for k, v in inits],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


CASES = [
    (op, direction, extras, attrs)
    for op in ("RNN", "GRU", "LSTM")
    for direction, extras in (("forward", False), ("reverse", True), ("bidirectional", True))
    for attrs in ([{}, {"linear_before_reset": 1}] if op == "GRU" else [{}])
]
IDS = [f"{c[0]}-{c[1]}{'-lbr' if c[3] else ''}" for c in CASES]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_input_gates_are_one_gemm_and_the_outputs_do_not_change(case) -> None:
    op, direction, extras, attrs = case
    g0 = import_onnx(recurrent_model(op, direction, extras, **attrs))
    g, report = optimize(g0, entries=ENTRY, verify_each=True)
    assert report.passes[0].stats["num_batched"] == 1
    gemm, rec = next(n for n in g.nodes if n.op == "Gemm"), next(n for n in g.nodes if n.op == op)
    d = 2 if direction == "bidirectional" else 1
    assert g.values[gemm.outputs[0]].shape == (5 * 2, d * GATES[op] * 4)  # [S*B, D*g*H]
    assert rec.attrs["input_gates"] == 1 and rec.inputs[1] == ""
    assert g.values[rec.inputs[0]].shape == (5, 2, d * GATES[op] * 4)
    for seed in (0, 1):
        x = rnd(5, 2, 3, seed=10 + seed)
        want, got = run_reference(g0, {"x": x}), run_reference(g, {"x": x})
        for k in want:  # reassociated float32 sums: equal to rounding
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_the_rule_does_not_fire_twice() -> None:
    g, report = optimize(import_onnx(recurrent_model("LSTM", "forward", False)),
                         entries=ENTRY * 2, verify_each=True)  # fmt: skip
    first, second = report.passes
    assert first.changed and not second.changed and second.stats["num_declined"] == 1
    assert any("already one GEMM" in n for n in second.notes), second.notes
    assert g.op_counts()["Gemm"] == 1


def test_the_rule_leaves_batch_first_to_recurrent_sequence_first() -> None:
    model = recurrent_model("LSTM", "forward", False, layout=1)
    dims = model.graph.input[0].type.tensor_type.shape.dim  # x [batch, seq, input]
    dims[0].dim_value, dims[1].dim_value = 2, 5
    g, report = optimize(import_onnx(model), entries=ENTRY, verify_each=True)
    (record,) = report.passes
    assert not record.changed and record.stats["num_declined"] == 1
    assert any("layout=1" in n for n in record.notes), record.notes
    assert "Gemm" not in g.op_counts()


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_w_as_an_input_is_read_transposed_and_b_stays_whole(op) -> None:
    """W a graph input: the GEMM reads W reshaped to [D*g*H, I] transposed, without a bias;
    the node keeps its B (the recurrence adds Wb)."""
    g0 = import_onnx(recurrent_model(op, "bidirectional", True, w_const=False))
    g, _ = optimize(g0, entries=ENTRY, verify_each=True)
    gemm, rec = next(n for n in g.nodes if n.op == "Gemm"), next(n for n in g.nodes if n.op == op)
    assert gemm.attrs["transB"] == 1 and len(gemm.inputs) == 2
    assert g.values[gemm.inputs[1]].shape == (2 * GATES[op] * 4, 3)
    assert rec.inputs[3] == "b" and rec.inputs[1] == ""
    w = rnd(2, GATES[op] * 4, 3, seed=1)
    for seed in (0, 1):
        x = rnd(5, 2, 3, seed=10 + seed)
        want, got = run_reference(g0, {"x": x, "w": w}), run_reference(g, {"x": x, "w": w})
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=k)


NATIVE = [
    ("LSTM", "forward", {}), ("LSTM", "bidirectional", {}), ("GRU", "forward", {}),
    ("GRU", "reverse", {"linear_before_reset": 1}), ("GRU", "bidirectional", {"clip": 0.6}),
    ("RNN", "bidirectional", {}), ("RNN", "forward", {"clip": 0.5}),
]  # fmt: skip


@pytest.mark.parametrize("case", NATIVE, ids=[f"{c[0]}-{c[1]}-{sorted(c[2])}" for c in NATIVE])
def test_the_generated_recurrence_reads_the_gemms_gates(case) -> None:
    """O2 runs the pass: the GEMM and the recurrence in one native partition, equal to the
    reference interpreter on the imported graph (bias and initial state given)."""
    op, direction, attrs = case
    model = recurrent_model(op, direction, True, seq=7, batch=2, n_in=16, hidden=8, **attrs)
    g0 = import_onnx(model)  # with sequence_lens (lengths 7 and 5)
    g, _ = optimize(g0, "O2")
    (rec,) = [n for n in g.nodes if n.op == op]
    assert rec.attrs["input_gates"] == 1
    compiled = plan(g)
    assert compiled.partition_report["fallback_nodes"] == 0, compiled.partition_text()
    rt, _ = jit(compiled)
    for seed in (20, 21):
        x = rnd(7, 2, 16, seed=seed) * 3  # large enough that clip acts
        want = run_reference(g0, {"x": x})
        got = rt.run({"x": x})
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5, err_msg=k)
