"""merge_elementwise: a QDQ HardSwish after a requantised BatchNorm (the dequantized
value read twice) becomes one u8 -> u8 program and a DequantizeLinear tail; the merged
graph equals the two-kernel one bit for bit in the reference interpreter, and the native
code equals the reference bit for bit on the host's class and the x86-64-v3 and
skylake-avx512 classes at 1 and 2 threads; a value with a second reader stays."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen.build import host_target, jit
from guard.compiler.ir.isa_table import table_for
from guard.compiler.partition.plan import plan
from guard.compiler.passes.fuse_elementwise import FuseElementwise
from guard.compiler.passes.lower_qdq import LowerQdq
from guard.compiler.passes.merge_elementwise import MergeElementwise

from ._helpers import apply, ops
from .codegen._jit import TARGETS, skip_unless_runnable

F, U8 = TensorProto.FLOAT, TensorProto.UINT8
ISAS = ["host", *TARGETS]
SHAPE = [1, 8, 6, 20]


def hardswish_model(second_reader: bool = False, float_input: bool = False):
    """x (u8) -> DQ -> BN (per-channel Mul, Add) -> Q -> DQ = a; QDQ HardSwish
    a * clip(a + 3, 0, 6) / 6 with a Q/DQ after each step -> y (f32).
    second_reader: ``a`` also feeds a Neg that is a graph output. float_input: x is
    float32 and the first DequantizeLinear an Identity (the chains read floats)."""
    rng = np.random.default_rng(5)
    c = SHAPE[1]

    def q(name: str, s: float, z: int):
        return [numpy_helper.from_array(np.float32(s), f"{name}_s"),
                numpy_helper.from_array(np.uint8(z), f"{name}_z")]  # fmt: skip

    inits = [
        *q("x", 0.05, 120),
        *q("bn", 0.04, 110),
        *q("add", 0.045, 40),
        *q("mul", 0.09, 60),
        *q("y", 0.07, 30),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, (1, c, 1, 1)).astype(np.float32), "g"),
        numpy_helper.from_array(rng.uniform(-1, 1, (1, c, 1, 1)).astype(np.float32), "beta"),
        numpy_helper.from_array(np.float32(3), "three"),
        numpy_helper.from_array(np.float32(0), "zero"),
        numpy_helper.from_array(np.float32(6), "six"),
    ]

    def qdq(src: str, name: str) -> list:
        return [helper.make_node("QuantizeLinear", [src, f"{name}_s", f"{name}_z"], [f"{name}_q"]),
                helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"],
                                 [f"{name}_d"])]  # fmt: skip

    nodes = [
        helper.make_node("Identity", ["x"], ["xd"])
        if float_input
        else helper.make_node("DequantizeLinear", ["x", "x_s", "x_z"], ["xd"]),
        helper.make_node("Mul", ["xd", "g"], ["t0"]),
        helper.make_node("Add", ["t0", "beta"], ["t1"]),
        *qdq("t1", "bn"),
        helper.make_node("Add", ["bn_d", "three"], ["t2"]),
        helper.make_node("Clip", ["t2", "zero", "six"], ["t3"]),
        *qdq("t3", "add"),
        helper.make_node("Mul", ["bn_d", "add_d"], ["t4"]),
        *qdq("t4", "mul"),
        helper.make_node("Div", ["mul_d", "six"], ["t5"]),
        *qdq("t5", "y"),
    ]
    outs = [helper.make_tensor_value_info("y_d", F, None)]
    if second_reader:
        nodes.append(helper.make_node("Neg", ["bn_d"], ["z"]))
        outs.append(helper.make_tensor_value_info("z", F, None))
    x = helper.make_tensor_value_info("x", F if float_input else U8, SHAPE)
    g = helper.make_graph(nodes, "qhs", [x], outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(seed: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).integers(0, 256, SHAPE).astype(np.uint8)}


def _fused(m):
    g = import_onnx(m)
    for p in (LowerQdq(), FuseElementwise()):
        g, _ = apply(p, g)
    return g


def test_hardswish_chain_becomes_one_byte_program_and_a_dequantize():
    g = _fused(hardswish_model())
    assert ops(g) == ["FusedElementwise", "FusedElementwise"]  # split at the read-twice value
    g2, res = apply(MergeElementwise(), g)
    assert res.stats == {"num_merged": 1, "num_split": 1, "num_inlined": 0}
    head, deq = g2.nodes
    assert g2.values[head.inputs[0]].dtype == np.uint8
    assert g2.values[head.outputs[0]].dtype == np.uint8
    assert [s["op"] for s in deq.attrs["program"]] == ["Cast", "Sub", "Mul"]
    assert deq.inputs[0] == head.outputs[0] and g2.values[deq.outputs[0]].dtype == np.float32
    for seed in (0, 1, 2):
        a, b = run_reference(g, _feeds(seed))["y_d"], run_reference(g2, _feeds(seed))["y_d"]
        np.testing.assert_array_equal(a, b)


def test_a_value_with_another_reader_is_not_merged():
    g = _fused(hardswish_model(second_reader=True))
    g2, res = apply(MergeElementwise(), g)
    assert res.stats["num_merged"] == 0
    for seed in (0, 1):
        a, b = run_reference(g, _feeds(seed)), run_reference(g2, _feeds(seed))
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])


def test_a_chain_reading_floats_is_not_merged():
    """Nothing to gain: the merged program would read floats (no byte table)."""
    g = _fused(hardswish_model(float_input=True))
    assert ops(g) == ["FusedElementwise", "FusedElementwise"]
    g2, res = apply(MergeElementwise(), g)
    assert res.stats["num_merged"] == 0 and ops(g2) == ops(g)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("second_reader", [False, True])
def test_merged_chain_native_and_bit_identical(isa, second_reader):
    target = host_target() if isa == "host" else skip_unless_runnable(isa)
    table = None if isa == "host" else table_for(isa)
    g, _ = optimize(import_onnx(hardswish_model(second_reader)), "O2", target=table,
                    verify_each=True)  # fmt: skip
    if not second_reader:
        assert ops(g) == ["FusedElementwise", "FusedElementwise"]
    compiled = plan(g)
    assert compiled.partition_report["count"] == 1, dict(compiled.partitions.declines)
    rt1, code = jit(compiled, target, threads=1)
    rt2, _ = jit(compiled, target, threads=2, code=code)
    for seed in (0, 1):
        ref = run_reference(g, _feeds(seed))
        for rt in (rt1, rt2):
            got = rt.run(_feeds(seed))
            for k in ref:
                np.testing.assert_array_equal(got[k], ref[k])
