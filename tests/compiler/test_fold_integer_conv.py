"""fold_integer_conv: a Conv on dequantized int8 whose float result feeds float ops
(HardSwish, a residual Add, two readers) becomes ConvInteger plus a float epilogue; and
fuse_elementwise keeps a QuantizeLinear's Cast out of a FusedConv (the u8 FusedConv no
emitter ran). Each pattern: the structure, the rewritten graph within float32 rounding of
the float one, one native partition equal to the reference interpreter bit for bit on the
host's class and the AVX2 class (x86-64-v3), at 1 and 2 threads, and a case that must
not fire."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen.build import host_target, jit
from guard.compiler.ir.isa_table import table_for
from guard.compiler.partition.plan import plan
from guard.compiler.passes.fold_integer_conv import FoldIntegerConv

from ._helpers import apply, ops
from .codegen._jit import TARGETS, skip_unless_runnable

F, U8, I8, I32 = TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32
ISAS = ["host", *TARGETS]  # the host class (VNNI here) and the two x86 classes


def conv_model(tail: str, bias: str = "float", dq_input: bool = True, group: int = 1):
    """x -> Q -> DQ -> Conv(DQ(w) per channel, bias) -> tail -> Q -> DQ -> y.

    tail: "hardswish" (Conv -> HardSwish -> Q), "residual" (Conv -> Add(x) -> Q),
    "two" (the conv's result read by a Sigmoid and a Mul: y = a * sigmoid(a)),
    "q" (Conv -> Q directly, the float bias keeping fold_qdq off).
    bias: "float" (a float32 initializer), "int32" (DQ of int32), "" (none)."""
    rng = np.random.default_rng(11)
    c = 8
    sx, zx = np.float32(0.0371), np.uint8(121)
    sw = rng.uniform(0.002, 0.01, c).astype(np.float32)
    wq = rng.integers(-127, 128, (c, c // group, 3, 3)).astype(np.int8)
    inits = [
        numpy_helper.from_array(np.asarray(sx), "sx"),
        numpy_helper.from_array(np.asarray(zx), "zx"),
        numpy_helper.from_array(wq, "wq"),
        numpy_helper.from_array(sw, "sw"),
        numpy_helper.from_array(np.zeros(c, np.int8), "zw"),
        numpy_helper.from_array(np.float32(0.0517), "sy"),
        numpy_helper.from_array(np.uint8(97), "zy"),
    ]
    nodes = [helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["wd"], axis=0)]
    if dq_input:
        nodes += [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
                  helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"])]  # fmt: skip
    conv_in = ["xd" if dq_input else "x", "wd"]
    if bias == "float":
        inits.append(numpy_helper.from_array(rng.uniform(-1, 1, c).astype(np.float32), "b"))
        conv_in.append("b")
    elif bias == "int32":
        inits += [numpy_helper.from_array(rng.integers(-900, 900, c).astype(np.int32), "bq"),
                  numpy_helper.from_array((sx * sw).astype(np.float32), "bs")]  # fmt: skip
        nodes.append(helper.make_node("DequantizeLinear", ["bq", "bs"], ["b"], axis=0))
        conv_in.append("b")
    nodes.append(helper.make_node("Conv", conv_in, ["a"], pads=[1, 1, 1, 1], group=group))
    if tail == "hardswish":
        nodes.append(helper.make_node("HardSwish", ["a"], ["t"]))
    elif tail == "residual":
        nodes.append(helper.make_node("Add", ["a", "xd" if dq_input else "x"], ["t"]))
    elif tail == "two":
        nodes += [helper.make_node("Sigmoid", ["a"], ["s"]),
                  helper.make_node("Mul", ["a", "s"], ["t"])]  # fmt: skip
    last = "a" if tail == "q" else "t"
    nodes += [
        helper.make_node("QuantizeLinear", [last, "sy", "zy"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"]),
    ]
    g = helper.make_graph(
        nodes, "qconv", [helper.make_tensor_value_info("x", F, [1, c, 7, 9])],
        [helper.make_tensor_value_info("y", F, None)], inits,
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])


def _feeds(seed: int) -> dict[str, np.ndarray]:
    return {"x": (np.random.default_rng(seed).standard_normal((1, 8, 7, 9)) * 2).astype(np.float32)}


def _steps_apart(g, g2, seeds=(0, 1)) -> None:
    """The integer conv rounds the exact sum once, the float one every product: the
    quantized outputs may differ by float32 rounding at a .5 boundary, one step, rarely."""
    for seed in seeds:
        a, b = run_reference(g, _feeds(seed))["y"], run_reference(g2, _feeds(seed))["y"]
        steps = np.rint(np.abs(a.astype(np.float64) - b) / 0.0517)
        assert steps.max() <= 1 and (steps == 0).mean() >= 0.97, (steps.max(), steps.mean())


def _native_equal(m, isa: str) -> list[str]:
    """One native partition for ``isa``; 1 and 2 threads equal the reference bit for bit.
    Returns the optimized graph's ops."""
    target = host_target() if isa == "host" else skip_unless_runnable(isa)
    table = None if isa == "host" else table_for(isa)
    g, _ = optimize(import_onnx(m, {}), "O2", target=table, verify_each=True)
    compiled = plan(g)
    assert compiled.partition_report["count"] == 1, dict(compiled.partitions.declines)
    assert compiled.partition_report["fallback_nodes"] == 0
    rt1, code = jit(compiled, target, threads=1)
    rt2, _ = jit(compiled, target, threads=2, code=code)
    for seed in (0, 1):
        ref = run_reference(g, _feeds(seed))["y"]
        np.testing.assert_array_equal(rt1.run(_feeds(seed))["y"], ref)
        np.testing.assert_array_equal(rt2.run(_feeds(seed))["y"], ref)
    return [n.op for n in g.nodes]


@pytest.mark.parametrize("tail", ["hardswish", "residual", "two", "q"])
@pytest.mark.parametrize("bias", ["float", "int32", ""])
def test_conv_becomes_integer_conv_with_float_epilogue(tail, bias):
    g = import_onnx(conv_model(tail, bias))
    g2, res = apply(FoldIntegerConv(), g)
    assert res.stats["num_integer_convs"] == 1
    i = ops(g2).index("ConvInteger")
    conv = g2.nodes[i]
    assert g2.values[conv.outputs[0]].dtype == np.int32
    assert g2.values[conv.inputs[0]].dtype == np.uint8  # the quantized activation itself
    assert g2.values[conv.inputs[1]].dtype == np.int8
    epilogue = ["Cast", "Mul"] + (["Add"] if bias else [])
    assert ops(g2)[i + 1 : i + 1 + len(epilogue)] == epilogue
    assert "Conv" not in ops(g2)
    _steps_apart(g, g2)


def test_depthwise_conv_becomes_integer_conv():
    g = import_onnx(conv_model("hardswish", group=8))
    g2, res = apply(FoldIntegerConv(), g)
    (conv,) = [n for n in g2.nodes if n.op == "ConvInteger"]
    assert res.stats["num_integer_convs"] == 1 and conv.attrs["group"] == 8
    _steps_apart(g, g2)


def test_float_input_is_not_rewritten():
    g = import_onnx(conv_model("hardswish", dq_input=False))
    g2, res = apply(FoldIntegerConv(), g)
    assert res.stats["num_integer_convs"] == 0 and "Conv" in ops(g2)
    assert any("not a QuantizeLinear/DequantizeLinear" in n for n in res.notes)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize(
    "tail,bias,group",
    [("hardswish", "float", 1), ("residual", "int32", 1), ("two", "float", 1),
     ("q", "float", 1), ("hardswish", "float", 8)],
)  # fmt: skip
def test_integer_conv_native_and_bit_identical(isa, tail, bias, group):
    got = _native_equal(conv_model(tail, bias, group=group), isa)
    assert {"ConvInteger", "FusedConvInteger"} & set(got)
    assert "Conv" not in got and "FusedConv" not in got


@pytest.mark.parametrize("isa", ISAS)
def test_float_conv_followed_by_quantize_keeps_the_cast_out_of_its_epilogue(isa):
    """The u8 FusedConv case: a float conv -> Q (its Div/Round/Add/Clip fuse into the
    conv's epilogue, the Cast to u8 and the next DQ's Cast run as an elementwise kernel)."""
    got = _native_equal(conv_model("q", dq_input=False), isa)
    assert "FusedConv" in got and "FusedElementwise" in got


def test_epilogue_stops_before_a_cast():
    g, _ = optimize(import_onnx(conv_model("q", dq_input=False)), "O2")
    (fc,) = [n for n in g.nodes if n.op == "FusedConv"]
    assert [s["op"] for s in fc.attrs["program"]] == ["Div", "Round", "Add", "Clip"]
    assert g.values[fc.outputs[0]].dtype == np.float32
