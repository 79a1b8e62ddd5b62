"""fold_integer_pool: DQ -> GlobalAveragePool -> Q becomes a whole-image depthwise
QLinearConv on the bytes (an AveragePool without pads, a strided or overlapping one):
the structure, the rewritten graph within one quantisation step of the float one (the
float pool rounds each addition), one native partition equal to the reference
interpreter bit for bit on the host's class, x86-64-v3 and skylake-avx512 at 1 and 2
threads (the direct kernel's window form), and cases that must not fire."""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen.build import host_target
from guard.compiler.ir.isa_table import table_for
from guard.compiler.passes.fold_integer_pool import FoldIntegerPool

from ._helpers import apply, assert_native_equals_reference, ops
from .codegen._jit import TARGETS, skip_unless_runnable

F, U8, I8 = TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8
ISAS = ["host", *TARGETS]
SHAPE = [1, 24, 5, 19]
SY = 0.0123


def pool_model(tail: str = "q", signed: bool = False, avg: dict | None = None):
    """x (f32) -> Q -> DQ -> GlobalAveragePool (an AveragePool with attributes ``avg``)
    -> tail -> y. tail: "q" (Q -> DQ), "se" (the SE block's product: DQ(x) *
    sigmoid(DQ(Q(pool))) -> Q -> DQ), "float" (Relu, no Q: must not fire)."""
    zt = np.int8 if signed else np.uint8
    inits = [
        numpy_helper.from_array(np.float32(0.031), "sx"),
        numpy_helper.from_array(np.array(-9 if signed else 117, zt), "zx"),
        numpy_helper.from_array(np.float32(SY), "sy"),
        numpy_helper.from_array(np.array(3 if signed else 101, zt), "zy"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
        helper.make_node("GlobalAveragePool", ["xd"], ["p"])
        if avg is None
        else helper.make_node("AveragePool", ["xd"], ["p"], **avg),
    ]
    if tail == "float":
        nodes.append(helper.make_node("Relu", ["p"], ["y"]))
    else:
        nodes += [helper.make_node("QuantizeLinear", ["p", "sy", "zy"], ["pq"]),
                  helper.make_node("DequantizeLinear", ["pq", "sy", "zy"], ["pd"])]  # fmt: skip
        if tail == "q":
            nodes.append(helper.make_node("Identity", ["pd"], ["y"]))
        else:
            nodes += [helper.make_node("Sigmoid", ["pd"], ["g"]),
                      helper.make_node("Mul", ["xd", "g"], ["m"]),
                      helper.make_node("QuantizeLinear", ["m", "sx", "zx"], ["mq"]),
                      helper.make_node("DequantizeLinear", ["mq", "sx", "zx"], ["y"])]  # fmt: skip
    g = helper.make_graph(nodes, "qgap", [helper.make_tensor_value_info("x", F, SHAPE)],
                          [helper.make_tensor_value_info("y", F, None)], inits)  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(seed: int) -> dict[str, np.ndarray]:
    return {"x": (np.random.default_rng(seed).standard_normal(SHAPE) * 2).astype(np.float32)}


@pytest.mark.parametrize("signed", [False, True])
def test_pool_on_dequantized_bytes_becomes_a_whole_image_qlinearconv(signed):
    g = import_onnx(pool_model(signed=signed))
    g2, res = apply(FoldIntegerPool(), g)
    assert res.stats["num_integer_pools"] == 1
    (conv,) = [n for n in g2.nodes if n.op == "QLinearConv"]
    assert "GlobalAveragePool" not in ops(g2)
    assert conv.attrs["group"] == SHAPE[1] and conv.attrs["pads"] == [0, 0, 0, 0]
    assert g2.values[conv.inputs[3]].shape == (SHAPE[1], 1, *SHAPE[2:])
    assert g2.values[conv.inputs[0]].dtype == (np.int8 if signed else np.uint8)
    for seed in (0, 1, 2):
        a, b = run_reference(g, _feeds(seed))["y"], run_reference(g2, _feeds(seed))["y"]
        steps = np.rint(np.abs(a.astype(np.float64) - b) / SY)
        assert steps.max() <= 1 and (steps == 0).mean() >= 0.9, (steps.max(), steps.mean())


def test_a_pool_read_as_float_is_not_rewritten():
    g = import_onnx(pool_model("float"))
    g2, res = apply(FoldIntegerPool(), g)
    assert res.stats["num_integer_pools"] == 0 and "GlobalAveragePool" in ops(g2)
    assert any("not quantised" in n for n in res.notes)


# DenseNet's transition, windows that tile a 5 x 19 image with a ragged edge, and
# overlapping ones (a 3x3 box filter, ShuffleNet's 3x3/2 without its pads, 3x2/2x1:
# the direct kernel's rows with one packed tap a channel, stride 2 along W its GEMM)
AVG = [{"kernel_shape": [2, 2], "strides": [2, 2]}, {"kernel_shape": [2, 3], "strides": [2, 3]},
       {"kernel_shape": [3, 3], "strides": [1, 1]}, {"kernel_shape": [3, 3], "strides": [2, 2]},
       {"kernel_shape": [3, 2], "strides": [2, 1]}]  # fmt: skip


@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("avg", AVG)
def test_average_pool_on_dequantized_bytes_becomes_a_strided_qlinearconv(signed, avg):
    g = import_onnx(pool_model(signed=signed, avg=avg))
    g2, res = apply(FoldIntegerPool(), g)
    assert res.stats["num_integer_pools"] == 1 and "AveragePool" not in ops(g2)
    (conv,) = [n for n in g2.nodes if n.op == "QLinearConv"]
    assert conv.attrs["strides"] == avg["strides"] and conv.attrs["pads"] == [0, 0, 0, 0]
    assert g2.values[conv.inputs[3]].shape == (SHAPE[1], 1, *avg["kernel_shape"])
    for seed in (0, 1, 2):
        a, b = run_reference(g, _feeds(seed))["y"], run_reference(g2, _feeds(seed))["y"]
        assert a.shape == b.shape
        steps = np.rint(np.abs(a.astype(np.float64) - b) / SY)
        assert steps.max() <= 1 and (steps == 0).mean() >= 0.9, (steps.max(), steps.mean())


@pytest.mark.parametrize("avg", [
    {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},  # ShuffleNet's
])  # fmt: skip
def test_an_average_pool_with_partial_or_padded_windows_is_not_rewritten(avg):
    g2, res = apply(FoldIntegerPool(), import_onnx(pool_model(avg=avg)))
    assert res.stats["num_integer_pools"] == 0 and "AveragePool" in ops(g2)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("avg", AVG)
def test_integer_average_pool_native_and_bit_identical(isa, avg):
    target = host_target() if isa == "host" else skip_unless_runnable(isa)
    table = None if isa == "host" else table_for(isa)
    g, _ = optimize(import_onnx(pool_model(avg=avg)), "O2", target=table, verify_each=True)
    assert "AveragePool" not in ops(g)
    assert_native_equals_reference(g, target, _feeds)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("tail,signed", [("q", False), ("q", True), ("se", False)])
def test_integer_pool_native_and_bit_identical(isa, tail, signed):
    target = host_target() if isa == "host" else skip_unless_runnable(isa)
    table = None if isa == "host" else table_for(isa)
    g, _ = optimize(import_onnx(pool_model(tail, signed)), "O2", target=table, verify_each=True)
    assert "GlobalAveragePool" not in ops(g)
    code = assert_native_equals_reference(g, target, _feeds)
    # the window form of the direct kernel: no im2col GEMM body
    assert re.search(r"@guard\.qconv\.", code.generated.ir_text) is None
