"""A ConvTranspose whose stride is its kernel: fold_integer_conv makes the dequantized one
ConvTransposeInteger (exact float32 sums below 2^24) plus a float epilogue, and the float
one runs transpose_blocks.py's kernel. Each: the structure, one native partition equal to
the reference interpreter bit for bit (the integer op) or to the general ConvTranspose
kernel bit for bit (the float op) on the host's class and the two x86 classes, at 1 and 2
threads (rows split into tasks), and the cases that must not fire."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen import split
from guard.compiler.codegen.build import host_target, jit
from guard.compiler.codegen.conv import transpose
from guard.compiler.ir import conv_transpose
from guard.compiler.ir.isa_table import table_for
from guard.compiler.partition.plan import plan
from guard.compiler.passes.fold_integer_conv import FoldIntegerConv

from ._helpers import apply, ops
from .codegen._jit import TARGETS, skip_unless_runnable

F, U8, I8 = TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8
ISAS = ["host", *TARGETS]


def convt_model(
    c: int = 24, k: int = 5, hw: tuple[int, int] = (3, 21), kernel: tuple[int, int] = (2, 2),
    strides: tuple[int, int] | None = None, weights: str = "q_of_float", act: int = U8,
    out: str = "f32",
) -> object:  # fmt: skip
    """x -> Q -> DQ -> ConvTranspose(w) -> Add(bias) -> Relu -> Q -> DQ -> y (out "f32"),
    or ... -> Q -> y (out "u8": the integer op's fused chain ends in the byte).

    weights: "q_of_float" (float weights -> Q u8, zero point 127, per tensor -> DQ: what
    onnxruntime's quantize_static writes for a ConvTranspose), "s8" (s8 constant, scales
    per output channel along axis 1)."""
    rng = np.random.default_rng(5)
    zx = np.uint8(121) if act == U8 else np.int8(-7)
    inits = [
        numpy_helper.from_array(np.float32(0.0371), "sx"),
        numpy_helper.from_array(np.asarray(zx), "zx"),
        numpy_helper.from_array(rng.uniform(-0.5, 0.5, (1, k, 1, 1)).astype(np.float32), "b"),
        numpy_helper.from_array(np.float32(0.0417), "sy"),
        numpy_helper.from_array(np.uint8(3), "zy"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
    ]
    wshape = (c, k, *kernel)
    if weights == "q_of_float":
        inits += [
            numpy_helper.from_array(rng.uniform(-0.7, 0.8, wshape).astype(np.float32), "wf"),
            numpy_helper.from_array(np.float32(0.0062), "sw"),
            numpy_helper.from_array(np.uint8(127), "zw"),
        ]
        nodes += [helper.make_node("QuantizeLinear", ["wf", "sw", "zw"], ["wq"]),
                  helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["wd"])]  # fmt: skip
    else:
        inits += [
            numpy_helper.from_array(rng.integers(-127, 128, wshape).astype(np.int8), "wq"),
            numpy_helper.from_array(rng.uniform(0.002, 0.01, k).astype(np.float32), "sw"),
            numpy_helper.from_array(np.zeros(k, np.int8), "zw"),
        ]
        nodes.append(helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["wd"], axis=1))
    nodes += [
        helper.make_node("ConvTranspose", ["xd", "wd"], ["a"], strides=list(strides or kernel)),
        helper.make_node("Add", ["a", "b"], ["t"]),
        helper.make_node("Relu", ["t"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", "sy", "zy"], ["yq" if out == "f32" else "y"]),
    ]
    if out == "f32":
        nodes.append(helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"]))
    g = helper.make_graph(
        nodes, "qconvt", [helper.make_tensor_value_info("x", F, [1, c, *hw])],
        [helper.make_tensor_value_info("y", F if out == "f32" else U8, None)], inits,
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])


def _feeds(shape: tuple[int, ...], seed: int) -> dict[str, np.ndarray]:
    return {"x": (np.random.default_rng(seed).standard_normal(shape) * 2).astype(np.float32)}


def _jit_both(g, isa: str):
    """The 1- and 2-thread runtimes of ``g`` (one native partition) for ``isa``."""
    target = host_target() if isa == "host" else skip_unless_runnable(isa)
    compiled = plan(g)
    assert compiled.partition_report["count"] == 1, dict(compiled.partitions.declines)
    assert compiled.partition_report["fallback_nodes"] == 0
    rt1, code = jit(compiled, target, threads=1)
    rt2, _ = jit(compiled, target, threads=2, code=code)
    return rt1, rt2, code


@pytest.mark.parametrize("weights", ["q_of_float", "s8"])
def test_conv_transpose_becomes_integer_with_float_epilogue(weights):
    g = import_onnx(convt_model(weights=weights))
    g2, res = apply(FoldIntegerConv(), g)
    assert res.stats["num_integer_convs"] == 1
    i = ops(g2).index("ConvTransposeInteger")
    ct = g2.nodes[i]
    assert g2.values[ct.outputs[0]].dtype == np.int32
    assert g2.values[ct.inputs[0]].dtype == np.uint8
    assert g2.values[ct.inputs[1]].dtype == (np.uint8 if weights == "q_of_float" else np.int8)
    assert ops(g2)[i + 1 : i + 3] == ["Cast", "Mul"] and "ConvTranspose" not in ops(g2)
    for seed in (0, 1):  # the exact sum rounded once against float32 products: one step
        a, b = (run_reference(h, _feeds((1, 24, 3, 21), seed))["y"] for h in (g, g2))
        steps = np.rint(np.abs(a.astype(np.float64) - b) / 0.0417)
        assert steps.max() <= 1 and (steps == 0).mean() >= 0.97


@pytest.mark.parametrize(
    "kernel,strides,why",
    [((2, 2), (1, 1), "blocks overlap"), ((3, 3), (2, 2), "blocks overlap")],
)
def test_overlapping_conv_transpose_stays_float(kernel, strides, why):
    g2, res = apply(FoldIntegerConv(), import_onnx(convt_model(kernel=kernel, strides=strides)))
    assert res.stats["num_integer_convs"] == 0 and "ConvTranspose" in ops(g2)
    assert any(why in n for n in res.notes), res.notes


def test_sums_that_float32_would_round_stay_float():
    """1300 channels of |w - 127| about 64 on average: 255 * 1300 * 64 > 2^24."""
    g2, res = apply(FoldIntegerConv(), import_onnx(convt_model(c=1300, hw=(2, 3))))
    assert res.stats["num_integer_convs"] == 0
    assert any("2^24" in n for n in res.notes), res.notes


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("out", ["f32", "u8"])
@pytest.mark.parametrize(
    "weights,act,kernel,hw",
    [("q_of_float", U8, (2, 2), (3, 21)), ("s8", I8, (2, 2), (4, 40)),
     ("s8", U8, (3, 2), (2, 7)), ("q_of_float", U8, (1, 1), (5, 17))],
)  # fmt: skip
def test_integer_conv_transpose_native_and_bit_identical(
    isa, weights, act, kernel, hw, out, monkeypatch
):
    """The integer op with its chain fused (passes/fuse_integer_epilogue.py): the tile
    stores the chain's float32 or bytes, a row's tail of bytes lane by lane."""
    monkeypatch.setattr(split, "MIN_TASK_FLOPS", 1)  # every ConvTranspose splits into rows
    m = convt_model(weights=weights, act=act, kernel=kernel, hw=hw, out=out)
    g, _ = optimize(import_onnx(m, {}), "O2", target=None if isa == "host" else table_for(isa),
                    verify_each=True)  # fmt: skip
    assert "FusedConvTransposeInteger" in ops(g) and "ConvTranspose" not in ops(g)
    assert "ConvTransposeInteger" not in ops(g)
    rt1, rt2, code = _jit_both(g, isa)
    assert any(s.parts for s in code.plan.steps() if s.op == "FusedConvTransposeInteger")
    for seed in (0, 1):
        feeds = _feeds((1, 24, *hw), seed)
        ref = run_reference(g, feeds)["y"]
        np.testing.assert_array_equal(rt1.run(feeds)["y"], ref)
        np.testing.assert_array_equal(rt2.run(feeds)["y"], ref)


def _float_model(c: int, k: int, hw: tuple[int, int], kernel: tuple[int, int]):
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((c, k, *kernel)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(k).astype(np.float32), "b")
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=list(kernel))
    g = helper.make_graph(
        [node], "convt", [helper.make_tensor_value_info("x", F, [1, c, *hw])],
        [helper.make_tensor_value_info("y", F, None)], [w, b],
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize(
    "c,k,hw,kernel", [(24, 1, (5, 37), (2, 2)), (7, 20, (3, 16), (2, 3)), (3, 4, (2, 5), (4, 4))]
)
def test_float_blocks_kernel_equals_the_general_kernel(isa, c, k, hw, kernel, monkeypatch):
    """The same bits as the general ConvTranspose kernel (bias, then one FMA per channel
    in channel order), at 1 and 2 threads; the reference within float32 rounding."""
    g, _ = optimize(import_onnx(_float_model(c, k, hw, kernel), {}), "O2")
    feeds = _feeds((1, c, *hw), 0)
    monkeypatch.setattr(split, "MIN_TASK_FLOPS", 1)
    rt1, rt2, code = _jit_both(g, isa)
    assert any(s.parts for s in code.plan.steps() if s.op == "ConvTranspose")
    blocks = [rt.run(feeds)["y"] for rt in (rt1, rt2)]
    monkeypatch.setattr(transpose, "blockwise", lambda *a: False)
    monkeypatch.setattr(conv_transpose, "blockwise", lambda *a: False)
    general = _jit_both(g, isa)[0].run(feeds)["y"]
    np.testing.assert_array_equal(blocks[0], general)
    np.testing.assert_array_equal(blocks[1], general)
    ref = run_reference(g, feeds)["y"]
    np.testing.assert_allclose(blocks[0], ref, rtol=1e-5, atol=1e-5)
