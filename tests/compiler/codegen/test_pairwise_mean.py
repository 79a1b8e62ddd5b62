"""GlobalAveragePool on float32 NCHW sums each plane in numpy's pairwise order and divides
by the count (codegen/pairwise.py): the reference interpreter's mean bit for bit, on the
host's class and the two x86 classes, at 1 and 2 threads (channels split into tasks);
plane sizes below 8, up to one 128-element block, and split blocks with ragged tails."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen import split
from guard.compiler.codegen.build import host_target, jit
from guard.compiler.partition.plan import plan

from ._jit import TARGETS, skip_unless_runnable

SHAPES = [(1, 4, 1, 1), (1, 3, 2, 3), (2, 5, 7, 9), (1, 6, 8, 16), (1, 16, 80, 80), (1, 8, 37, 41)]


def _gap(shape: tuple[int, ...]):
    node = helper.make_node("GlobalAveragePool", ["x"], ["y"])
    g = helper.make_graph(
        [node], "gap", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])


@pytest.mark.parametrize("isa", ["host", *TARGETS])
@pytest.mark.parametrize("shape", SHAPES)
def test_global_average_pool_equals_the_reference_mean(isa, shape, monkeypatch):
    target = host_target() if isa == "host" else skip_unless_runnable(isa)
    monkeypatch.setattr(split, "MIN_TASK_FLOPS", 1)
    g, _ = optimize(import_onnx(_gap(shape), {}), "O2")
    assert [n.attrs.get("layout", "NCHW") for n in g.nodes] == ["NCHW"]
    compiled = plan(g)
    rt1, code = jit(compiled, target, threads=1)
    rt2, _ = jit(compiled, target, threads=2, code=code)
    rng = np.random.default_rng(len(shape) + shape[-1])
    x = (rng.standard_normal(shape) * 5 + 3).astype(np.float32)
    x[0, 0] = -0.0  # an all -0.0 plane: the reduction's 0.0 + sum gives +0.0
    ref = run_reference(g, {"x": x})["y"]
    for rt in (rt1, rt2):
        got = rt.run({"x": x})["y"]
        np.testing.assert_array_equal(got, ref)
        assert not np.signbit(got[0, 0, 0, 0])


def test_a_sequential_sum_would_differ():
    """The oracle can tell: a left-to-right float32 sum of an 80x80 plane is not numpy's."""
    x = (np.random.default_rng(0).standard_normal((1, 3, 80, 80)) * 5 + 3).astype(np.float32)
    seq = np.zeros(3, np.float32)
    for c in range(3):
        for v in x[0, c].ravel():
            seq[c] = np.float32(seq[c] + v)
    assert not np.array_equal(seq / np.float32(6400), x.mean(axis=(2, 3))[0])
