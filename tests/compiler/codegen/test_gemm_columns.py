"""A float GEMM with fewer rows than columns and a constant B (a classifier over a short
sequence: M=24, N=8210 in a CRNN) is cut into runs of B's packed panels: each task reads A
whole and writes its columns of every row of C, the bias and the epilogue cut with them.
1, 2 and 3 threads give the same bits as the unsplit GEMM, equal to the reference."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen import split
from guard.compiler.codegen.build import jit
from guard.compiler.ir.isa_table import table_for
from guard.compiler.partition.plan import plan

from ._jit import TARGETS, skip_unless_runnable
from .test_emitters import model, rnd

CASES = {
    # transB, a row bias and Relu in registers; N=777 ends in a part panel
    "gemm_transb_bias_relu": (
        [
            helper.make_node("Gemm", ["a", "w", "c"], ["g"], transB=1),
            helper.make_node("Relu", ["g"], ["y"]),
        ],
        (24, 256),
        [("w", rnd(777, 256)), ("c", rnd(777))],
    ),  # fmt: skip
    # a per-row bias ([M, 1]: read whole by every task), N=500
    "gemm_row_bias": (
        [helper.make_node("Gemm", ["a", "w", "c"], ["y"])],
        (24, 64),
        [("w", rnd(64, 500)), ("c", rnd(24, 1))],
    ),  # fmt: skip
    # a GEMV-like MatMul (5 rows, A with a leading 1), a bias Add and a Sigmoid fused in
    "matmul_bias_sigmoid": (
        [
            helper.make_node("MatMul", ["a", "w"], ["m"]),
            helper.make_node("Add", ["m", "c"], ["s"]),
            helper.make_node("Sigmoid", ["s"], ["y"]),
        ],
        (1, 5, 300),
        [("w", rnd(300, 1000)), ("c", rnd(1000))],
    ),  # fmt: skip
}


def _compile(case: str, isa: str):
    nodes, a_shape, weights = CASES[case]
    g0 = import_onnx(model(nodes, [("a", list(a_shape))], ["y"], weights), {})
    g, _ = optimize(g0, "O2", target=None if isa == "host" else table_for(isa))
    compiled = plan(g)
    assert compiled.partition_report["count"] == 1, compiled.partition_text()
    return g0, compiled


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("isa", [*TARGETS, "host"])
def test_a_wide_gemm_splits_by_panels_bit_identical_to_the_whole(isa, case, monkeypatch):
    target = None if isa == "host" else skip_unless_runnable(isa)
    g0, compiled = _compile(case, isa)
    a = np.random.default_rng(5).standard_normal(CASES[case][1]).astype(np.float32)
    monkeypatch.setattr(split, "MIN_TASK_FLOPS", 10**18)  # every step one call
    rt, code = jit(compiled, target, threads=1)
    assert not any(s.parts for s in code.plan.steps())
    whole = rt.run({"a": a})["y"]
    monkeypatch.setattr(split, "MIN_TASK_FLOPS", 1)
    n = whole.shape[-1]
    for threads in (1, 2, 3):
        rt, code = jit(compiled, target, threads=threads)
        (gemm,) = [s for s in code.plan.steps() if s.parts]
        cols = [t.attrs["cols"] for t in gemm.parts]
        assert len(cols) == split.MAX_TASKS and cols[0][0] == 0 and cols[-1][1] == n, cols
        assert all(p[1] == q[0] for p, q in zip(cols, cols[1:], strict=False)), cols
        assert all(t.outputs == gemm.outputs for t in gemm.parts)  # C whole, columns cut
        assert np.array_equal(rt.run({"a": a})["y"], whole), threads
    ref = run_reference(g0, {"a": a})["y"]
    np.testing.assert_allclose(whole, ref, rtol=1e-4, atol=1e-5)


def test_a_gemm_adding_a_full_matrix_or_with_rows_enough_splits_by_rows(monkeypatch):
    """A full [M, N] C (a pointwise pass over C), a GEMM of more rows than columns, and one of
    64 rows or more whose B fits L2 (read whole by every row task from cache) keep the split
    by runs of rows: no task has columns."""
    monkeypatch.setattr(split, "MIN_TASK_FLOPS", 1)
    full = model([helper.make_node("Gemm", ["a", "w", "c"], ["y"])], [("a", [24, 64])], ["y"],
                 [("w", rnd(64, 500)), ("c", rnd(24, 500))])  # fmt: skip
    tall = model([helper.make_node("MatMul", ["a", "w"], ["y"])], [("a", [256, 64])], ["y"],
                 [("w", rnd(64, 48))])  # fmt: skip
    mid = model([helper.make_node("MatMul", ["a", "w"], ["y"])], [("a", [128, 64])], ["y"],
                [("w", rnd(64, 256))])  # fmt: skip
    for m in (full, tall, mid):
        _, code = jit(plan(optimize(import_onnx(m, {}), "O2")[0]), threads=2)
        parts = [t for s in code.plan.steps() for t in s.parts]
        assert parts and not any("cols" in t.attrs for t in parts)
