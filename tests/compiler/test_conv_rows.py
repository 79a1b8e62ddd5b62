from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen.build import jit
from guard.compiler.partition.plan import plan
from guard.compiler.passes.conv_rows import ConvRows
from guard.compiler.passes.fuse_elementwise import FuseElementwise

from ._helpers import apply, assert_same_outputs, feeds_for, ops


def column_model(
    x=(1, 6, 19, 1), w=(8, 6, 5, 1), group=1, residual=False, **attrs
) -> onnx.ModelProto:
    """Conv over a column (+ bias), then Relu, then optionally a residual add of an input
    of the output's shape and a per-channel scale: the epilogue a FusedConv carries."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array((rng.standard_normal(w) * 0.2).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(w[0]).astype(np.float32), "b"),
        numpy_helper.from_array(rng.uniform(0.5, 2, (w[0], 1, 1)).astype(np.float32), "s"),
    ]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=group, **attrs),
             helper.make_node("Relu", ["c"], ["r"])]  # fmt: skip
    inputs = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(x))]
    last = "r"
    if residual:
        nodes += [helper.make_node("Add", ["r", "res"], ["a"]),
                  helper.make_node("Mul", ["a", "s"], ["y"])]  # fmt: skip
        inputs.append(helper.make_tensor_value_info("res", onnx.TensorProto.FLOAT, None))
        last = "y"
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info(last, onnx.TensorProto.FLOAT, None)],
        inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _residual_shape(m: onnx.ModelProto, x) -> dict[str, tuple[int, ...]]:
    c = import_onnx(m, {"x": x, "res": (1, 1, 1, 1)})  # the conv's output shape, first
    return {"x": x, "res": c.values[c.nodes[0].outputs[0]].shape}


@pytest.mark.parametrize(
    "attrs",
    [{}, {"pads": [2, 0, 1, 0]}, {"strides": [2, 1]}, {"dilations": [2, 1], "pads": [1, 0, 3, 0]}],
    ids=["plain", "pads", "stride", "dilation"],
)
def test_a_column_conv_becomes_a_row_conv_between_views(attrs):
    g = import_onnx(column_model(**attrs))
    g2, res = apply(ConvRows(), g)
    assert res.stats["num_conv_rows"] == 1
    conv = next(n for n in g2.nodes if n.op == "Conv")
    assert g2.values[conv.inputs[0]].shape[2] == 1 and g2.values[conv.inputs[1]].shape[2] == 1
    assert ops(g2)[:3] == ["Reshape", "Conv", "Reshape"]
    assert_same_outputs(g, g2)


def test_a_grouped_column_conv_is_rewritten_too():
    g = import_onnx(column_model(x=(2, 6, 12, 1), w=(6, 2, 3, 1), group=3))
    g2, res = apply(ConvRows(), g)
    assert res.stats["num_conv_rows"] == 1
    assert_same_outputs(g, g2)


def test_the_fused_epilogue_and_its_operands_follow():
    m = column_model(residual=True, pads=[2, 0, 2, 0])
    g = import_onnx(m, _residual_shape(m, (1, 6, 19, 1)))
    fused, _ = apply(FuseElementwise(), g)
    assert ops(fused) == ["FusedConv"]
    g2, res = apply(ConvRows(), fused)
    assert res.stats["num_conv_rows"] == 1
    # the residual (an input spanning H) is viewed as a row; the per-channel scale is not
    assert ops(g2) == ["Reshape", "Reshape", "FusedConv", "Reshape"]
    assert_same_outputs(g, g2)


@pytest.mark.parametrize(
    "x,w,attrs",
    [
        ((1, 6, 19, 3), (8, 6, 5, 1), {}),  # three columns: an ordinary 2-D conv
        ((1, 6, 19, 3), (8, 6, 5, 3), {}),  # a kernel wider than one
        ((1, 6, 19, 1), (8, 6, 5, 1), {"pads": [0, 1, 0, 1]}),  # W padded: the output widens
    ],
    ids=["wide-input", "wide-kernel", "w-padded"],
)
def test_other_convs_are_left_alone(x, w, attrs):
    g = import_onnx(column_model(x=x, w=w, **attrs))
    g2, res = apply(ConvRows(), g)
    assert not res.changed and ops(g2) == ops(g)


def test_generated_code_of_a_column_conv_matches_the_reference():
    """Through O2 (layouts, views, epilogue) and the code generator."""
    m = column_model(x=(1, 16, 40, 1), w=(32, 16, 5, 1), residual=True, pads=[2, 0, 2, 0])
    g0 = import_onnx(m, _residual_shape(m, (1, 16, 40, 1)))
    g, report = optimize(g0, "O2", verify_each=True)
    rows = next(p for p in report.passes if p.name == "conv_rows")
    assert rows.stats["num_conv_rows"] == 1
    rt, _ = jit(plan(g))
    feeds = feeds_for(g0)
    ref = run_reference(g0, feeds)
    out = rt.run(feeds)
    for k in ref:
        np.testing.assert_allclose(out[k], ref[k], rtol=1e-4, atol=1e-4)
