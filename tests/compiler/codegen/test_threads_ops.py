"""GEMM, pooling, Resize, normalisation and elementwise steps on N threads: each split into tasks
that write one slice of the output, outputs bit-identical for any N (as
test_threads.py checks for convolutions)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen import split
from guard.compiler.codegen.build import jit
from guard.compiler.ir.isa_table import table_for
from guard.compiler.partition.plan import plan

from ._jit import TARGETS, skip_unless_runnable
from .test_emitters import model, rnd


def _net() -> onnx.ModelProto:
    """Pooling, Resize, a classifier-like GEMM chain, a MatMul with a residual, LayerNorm, Softmax
    and elementwise steps (broadcast operands included)."""
    nodes = [
        helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Resize", ["x", "", "up"], ["u"], mode="linear"),
        helper.make_node("AveragePool", ["u"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Add", ["p", "p2"], ["p3"]),
        helper.make_node("AveragePool", ["p3"], ["q"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Reshape", ["q", "flat"], ["f"]),
        helper.make_node("Gemm", ["f", "w0", "b0"], ["g"], transB=1),
        helper.make_node("Sigmoid", ["g"], ["s"]),
        helper.make_node("MatMul", ["s", "w1"], ["h"]),
        helper.make_node("Add", ["h", "g"], ["r"]),
        helper.make_node("LayerNormalization", ["r", "ln_s", "ln_b"], ["ln"], axis=-1),
        helper.make_node("Mul", ["ln", "k"], ["m"]),
        helper.make_node("Softmax", ["m"], ["y"], axis=-1),
        helper.make_node("ConvTranspose", ["x", "wt", "bt"], ["ct"], strides=[2, 2]),
    ]
    weights = [
        ("flat", np.array([40, 64], np.int64)),  # [1, 160, 4, 4] as 40 rows
        ("up", np.array([1, 1, 2, 2], np.float32)),
        ("w0", rnd(48, 64)), ("b0", rnd(48)), ("w1", rnd(48, 48)),
        ("ln_s", rnd(48)), ("ln_b", rnd(48)), ("k", rnd(40, 1)),
        ("wt", rnd(160, 20, 2, 2)), ("bt", rnd(20)),
    ]  # fmt: skip
    return model(nodes, [("x", [1, 160, 8, 8])], ["y", "ct"], weights)


@pytest.mark.parametrize("isa", list(TARGETS))
def test_outputs_are_bit_identical_for_any_thread_count(isa, monkeypatch):
    """With the cost rule's floor lowered every step family splits; 1, 2 and 3 threads
    give the same bits, equal to the numpy reference within tolerance."""
    target = skip_unless_runnable(isa)
    monkeypatch.setattr(split, "MIN_TASK_FLOPS", 1)
    g0 = import_onnx(_net(), {})
    g, _ = optimize(g0, "O2", target=table_for(isa))
    compiled = plan(g)
    assert compiled.partition_report["count"] == 1, compiled.partition_text()
    x = np.random.default_rng(0).standard_normal((1, 160, 8, 8)).astype(np.float32)
    outs = []
    for threads in (1, 2, 3):
        rt, code = jit(compiled, target, threads=threads)
        split_ops = {s.op for s in code.plan.steps() if s.parts}
        assert {"MaxPool", "AveragePool", "Resize", "LayerNormalization", "Softmax",
                "ConvTranspose"} <= split_ops  # fmt: skip
        assert split_ops & {"Gemm", "FusedGemm"} and split_ops & {"MatMul", "FusedMatMul"}
        assert split_ops & {"FusedElementwise", "Mul", "Sigmoid"}
        outs.append(rt.run({"x": x}))
    for k in ("y", "ct"):
        assert all(np.array_equal(outs[0][k], o[k]) for o in outs[1:]), k
    ref = run_reference(g0, {"x": x})
    for k in ("y", "ct"):
        np.testing.assert_allclose(outs[0][k], ref[k], rtol=1e-4, atol=1e-4, err_msg=k)


def test_the_cost_rule_keeps_small_steps_serial_and_splits_large_ones(monkeypatch):
    monkeypatch.setattr(split, "MIN_TASK_FLOPS", 2_000_000)
    _, code = jit(plan(optimize(import_onnx(_net(), {}), "O2")[0]), threads=2)
    assert not any(s.parts for s in code.plan.steps())  # every step far under 2 MFLOP
    big = model(
        [helper.make_node("MatMul", ["a", "w"], ["m"]), helper.make_node("Tanh", ["m"], ["y"])],
        [("a", [1, 256, 512])],
        ["y"],
        [("w", rnd(512, 2048))],
    )
    _, code = jit(plan(optimize(import_onnx(big, {}), "O0")[0]), threads=2)
    tasks = {s.op: len(s.parts) for s in code.plan.steps()}
    assert tasks["MatMul"] == split.MAX_TASKS  # 537 MFLOP: 8 tasks of 256 columns (B 4 MiB)
    # 524288 elements at ELEMENT_FLOPS + 20 each: 27 MFLOP, as many tasks as allowed
    assert 524288 * (split.ELEMENT_FLOPS + 20) // split.MIN_TASK_FLOPS >= split.MAX_TASKS
    assert tasks["Tanh"] == split.MAX_TASKS


def _attention() -> onnx.ModelProto:
    """Four heads of attention: softmax(q @ k * 0.125) @ v, the batched MatMuls of a
    transformer layer (batch dims [1, 4])."""
    nodes = [
        helper.make_node("MatMul", ["q", "k"], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["t"]),
        helper.make_node("Softmax", ["t"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["y"]),
    ]
    inputs = [("q", [1, 4, 40, 24]), ("k", [1, 4, 24, 40]), ("v", [1, 4, 40, 36])]
    return model(nodes, inputs, ["y"], [("scale", np.array(0.125, np.float32))])


@pytest.mark.parametrize("isa", [*TARGETS, "host"])
def test_batched_matmuls_split_by_heads_bit_identical_for_any_thread_count(isa, monkeypatch):
    """Both batched MatMuls cut into runs of heads (A, B and C cut with them): 1, 2 and 3
    threads give the same bits, equal to the numpy reference within tolerance."""
    target = None if isa == "host" else skip_unless_runnable(isa)
    monkeypatch.setattr(split, "MIN_TASK_FLOPS", 1)
    g0 = import_onnx(_attention(), {})
    table = table_for(isa) if isa != "host" else None
    compiled = plan(optimize(g0, "O2", target=table)[0] if table else optimize(g0, "O2")[0])
    assert compiled.partition_report["count"] == 1, compiled.partition_text()
    rng = np.random.default_rng(3)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in
             (("q", (1, 4, 40, 24)), ("k", (1, 4, 24, 40)), ("v", (1, 4, 40, 36)))}  # fmt: skip
    outs = []
    for threads in (1, 2, 3):
        rt, code = jit(compiled, target, threads=threads)
        gemms = [s for s in code.plan.steps() if s.op in ("MatMul", "FusedMatMul")]
        assert len(gemms) == 2 and all(len(s.parts) == 4 for s in gemms)
        assert all(t.inputs[0].shape[:2] == (1, 1) for s in gemms for t in s.parts)
        outs.append(rt.run(feeds)["y"])
    assert all(np.array_equal(outs[0], o) for o in outs[1:])
    ref = run_reference(g0, feeds)["y"]
    np.testing.assert_allclose(outs[0], ref, rtol=1e-4, atol=1e-5)


def test_softmax_counts_its_exp_in_the_cost_rule(monkeypatch):
    """Attention's Softmax over [1, 4, 128, 128] (65536 exps, about 40 us on one core) splits
    in two at a 2 MFLOP floor; a LayerNormalization of as many elements (no exp) stays one
    call."""
    from guard.compiler.codegen.kernel_plan import Operand, Step

    monkeypatch.setattr(split, "MIN_TASK_FLOPS", 2_000_000)

    shape = (1, 4, 128, 128)
    x, y = (
        Operand("x", "arena", 0, shape, "float32"),
        Operand("y", "arena", 1 << 20, shape, "float32"),
    )
    soft = split.split_step(Step("s", "Softmax", "", (x,), (y,), {"axis": -1}, False), 16)
    assert len(soft) == 2 and [t.inputs[0].shape for t in soft] == [(1, 2, 128, 128)] * 2
    scale = Operand("g", "weights", 0, (128,), "float32")
    ln = Step("n", "LayerNormalization", "", (x, scale, scale), (y,), {"axis": -1}, False)
    assert split.split_step(ln, 16) == ()
