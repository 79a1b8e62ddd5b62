"""Softmax and LayerNormalization sum each row in 16 lanes on every target, ordered, and
add the lanes in one fixed tree (codegen/pairwise.py ``tree_sum``): the host's code
(AVX-512 here), the AVX2 (x86-64-v3) and skylake-avx512 builds give the same bits, at 1
and 2 threads, on rows whose length is not a multiple of 8 or 16, and stay within the
float tolerance of the reference. Before, the partial sums followed the register width
(8 lanes on AVX2, 16 on AVX-512) and LLVM's reassociated reduce, so AVX2 differed in the
last bits (issue 38: the dynamically quantised transformer's host and AVX2 builds)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen import split
from guard.compiler.codegen.build import host_target, jit
from guard.compiler.partition.plan import plan

from ._jit import TARGETS, skip_unless_runnable

ROWS = [1, 7, 13, 37, 256, 300]


def _model(op: str, d: int):
    shape = [5, d]
    inits = []
    ins = ["x"]
    attrs: dict = {"axis": -1}
    if op == "LayerNormalization":
        rng = np.random.default_rng(d)
        for name in ("scale", "bias"):
            v = (rng.standard_normal(d) * 0.5 + 1).astype(np.float32)
            inits.append(helper.make_tensor(name, TensorProto.FLOAT, [d], v))
            ins.append(name)
        attrs["epsilon"] = 1e-5
    node = helper.make_node(op, ins, ["y"], **attrs)
    g = helper.make_graph(
        [node], "norm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits,
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("op", ["Softmax", "LayerNormalization"])
@pytest.mark.parametrize("d", ROWS)
def test_norm_rows_are_identical_on_every_target(op, d, monkeypatch):
    monkeypatch.setattr(split, "MIN_TASK_FLOPS", 1)
    g, _ = optimize(import_onnx(_model(op, d), {}), "O2")
    assert [n.op for n in g.nodes] == [op]
    compiled = plan(g)
    x = (np.random.default_rng(d).standard_normal((5, d)) * 3 + 1).astype(np.float32)
    ref = run_reference(g, {"x": x})["y"]
    want = None
    for isa in ("host", *TARGETS):
        target = host_target() if isa == "host" else skip_unless_runnable(isa)
        rt1, code = jit(compiled, target, threads=1)
        rt2, _ = jit(compiled, target, threads=2, code=code)
        for threads, rt in ((1, rt1), (2, rt2)):
            got = rt.run({"x": x})["y"]
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
            if want is None:
                want = got
            np.testing.assert_array_equal(got, want, err_msg=f"{op} d={d} {isa} {threads}")
