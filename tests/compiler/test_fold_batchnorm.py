from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from guard.compiler import import_onnx, verify
from guard.compiler.passes.fold_batchnorm import FoldBatchnorm

from ._helpers import apply, assert_same_outputs, ops


def conv_bn_model(
    dtype: type = np.float32,
    gamma_scale: float = 1.0,
    extra_reader: bool = False,
    gemm: bool = False,
) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    c = 4
    if gemm:
        w = rng.standard_normal((6, c)).astype(dtype)
        x_shape, y_shape = [2, 6], [2, c]
        prod = helper.make_node("Gemm", ["x", "w", "b"], ["p"])
    else:
        w = rng.standard_normal((c, 3, 3, 3)).astype(dtype)
        x_shape, y_shape = [1, 3, 8, 8], [1, c, 6, 6]
        prod = helper.make_node("Conv", ["x", "w", "b"], ["p"])
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(rng.standard_normal(c).astype(dtype), "b"),
        numpy_helper.from_array((rng.uniform(0.5, 2, c) * gamma_scale).astype(dtype), "s"),
        numpy_helper.from_array(rng.standard_normal(c).astype(dtype), "beta"),
        numpy_helper.from_array(rng.standard_normal(c).astype(dtype), "m"),
        numpy_helper.from_array(rng.uniform(0.5, 2, c).astype(dtype), "v"),
    ]
    nodes = [
        prod,
        helper.make_node("BatchNormalization", ["p", "s", "beta", "m", "v"], ["y"], epsilon=1e-5),
    ]
    outputs = [helper.make_tensor_value_info("y", t, y_shape)]
    if extra_reader:
        nodes.append(helper.make_node("Relu", ["p"], ["z"]))
        outputs.append(helper.make_tensor_value_info("z", t, y_shape))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", t, x_shape)], outputs, inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_folds_into_conv() -> None:
    g = import_onnx(conv_bn_model())
    g2, res = apply(FoldBatchnorm(), g)
    assert ops(g2) == ["Conv"] and g2.nodes[0].outputs == ["y"]
    assert res.stats["num_folded_conv"] == 1
    assert_same_outputs(g, g2, rtol=1e-5, atol=1e-5)


def test_folds_into_gemm() -> None:
    g = import_onnx(conv_bn_model(gemm=True))
    g2, res = apply(FoldBatchnorm(), g)
    assert ops(g2) == ["Gemm"] and res.stats["num_folded_gemm"] == 1
    assert_same_outputs(g, g2, rtol=1e-5, atol=1e-5)


def test_declines_fp16_overflow_and_says_so() -> None:
    g = import_onnx(conv_bn_model(np.float16, gamma_scale=3e4))
    g2, res = apply(FoldBatchnorm(to_affine=False), g)
    assert ops(g2) == ["Conv", "BatchNormalization"] and not res.changed
    assert any("would overflow float16" in n for n in res.notes)


def test_producer_with_other_readers_becomes_affine_not_folded() -> None:
    g = import_onnx(conv_bn_model(extra_reader=True))
    verify(g)
    g2, res = apply(FoldBatchnorm(), g)
    assert ops(g2) == ["Conv", "Mul", "Add", "Relu"]
    assert res.stats["num_folded_conv"] == 0 and res.stats["num_to_affine"] == 1
    assert any("has other readers" in n for n in res.notes)
    assert_same_outputs(g, g2, rtol=1e-5, atol=1e-5)
