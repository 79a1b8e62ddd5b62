"""pool_bytes: MaxPool(DQ(q) * c) pools the bytes and runs the chain after, equal bit for
bit to the unoptimised graph (a non-decreasing chain commutes with max, in float32 too);
native code equals the reference on the host's class, x86-64-v3 and skylake-avx512 at 1
and 2 threads; a negative multiplier (decreasing) and a chain with a second reader stay."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen.build import host_target
from guard.compiler.ir.isa_table import table_for

from ._helpers import assert_native_equals_reference
from .codegen._jit import TARGETS, skip_unless_runnable

F, U8 = TensorProto.FLOAT, TensorProto.UINT8
ISAS = ["host", *TARGETS]
SHAPE = [1, 10, 6, 21]


def model(c: float = 1 / 6, pads=(0, 0, 0, 0), second_reader: bool = False):
    """x (u8) -> DQ -> Mul(c) -> MaxPool 2x2/2 -> Q -> DQ -> y (the end of PP-OCR cls)."""
    inits = [numpy_helper.from_array(np.float32(0.047), "s"),
             numpy_helper.from_array(np.uint8(90), "z"),
             numpy_helper.from_array(np.float32(c), "c"),
             numpy_helper.from_array(np.float32(0.0035), "sy"),
             numpy_helper.from_array(np.uint8(108), "zy")]  # fmt: skip
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "s", "z"], ["xd"]),
        helper.make_node("Mul", ["xd", "c"], ["m"]),
        helper.make_node(
            "MaxPool", ["m"], ["p"], kernel_shape=[2, 2], strides=[2, 2], pads=list(pads)
        ),  # fmt: skip
        helper.make_node("QuantizeLinear", ["p", "sy", "zy"], ["pq"]),
        helper.make_node("DequantizeLinear", ["pq", "sy", "zy"], ["y"]),
    ]
    outs = [helper.make_tensor_value_info("y", F, None)]
    if second_reader:
        outs.append(helper.make_tensor_value_info("m", F, None))
    g = helper.make_graph(nodes, "qmax", [helper.make_tensor_value_info("x", U8, SHAPE)], outs,
                          inits)  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(seed: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).integers(0, 256, SHAPE).astype(np.uint8)}


def _pool_input(g) -> np.dtype:
    (pool,) = [n for n in g.nodes if n.op == "MaxPool"]
    return g.values[pool.inputs[0]].dtype


@pytest.mark.parametrize("pads", [(0, 0, 0, 0), (1, 0, 0, 1)])
def test_max_pool_of_dequantized_bytes_pools_the_bytes(pads):
    m = model(pads=pads)
    g, _ = optimize(import_onnx(m), "O2", verify_each=True)
    assert _pool_input(g) == np.uint8
    g0 = import_onnx(m)
    for seed in (0, 1, 2):
        np.testing.assert_array_equal(run_reference(g, _feeds(seed))["y"],
                                      run_reference(g0, _feeds(seed))["y"])  # fmt: skip


@pytest.mark.parametrize("kw", [{"c": -0.25}, {"second_reader": True}])
def test_a_decreasing_or_shared_chain_is_not_moved(kw):
    g, _ = optimize(import_onnx(model(**kw)), "O2", verify_each=True)
    assert _pool_input(g) == np.float32


@pytest.mark.parametrize("isa", ISAS)
def test_byte_max_pool_native_and_bit_identical(isa):
    target = host_target() if isa == "host" else skip_unless_runnable(isa)
    table = None if isa == "host" else table_for(isa)
    g, _ = optimize(import_onnx(model(pads=(1, 0, 0, 1))), "O2", target=table, verify_each=True)
    assert _pool_input(g) == np.uint8
    assert_native_equals_reference(g, target, _feeds)
