"""guard.quantize.opset: ONNX's version converter with the large weights held aside."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from guard.quantize.opset import LARGE, convert_opset


def _opset9() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((32, 16, 3, 3)).astype(np.float32), "w")
    s = numpy_helper.from_array(np.ones(32, np.float32), "s")
    b = numpy_helper.from_array(np.zeros(32, np.float32), "b")
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")
    sc = numpy_helper.from_array(np.ones(4, np.float32), "sc")
    fc = numpy_helper.from_array(rng.standard_normal((10, 32 * 8 * 8)).astype(np.float32), "fc")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "b", "b", "s"], ["n"]),
        helper.make_node("Upsample", ["n", "sc"], ["u"], mode="nearest"),  # reads sc's values
        helper.make_node("Reshape", ["u", "shape"], ["r"]),
        helper.make_node("Gemm", ["r", "fc"], ["y"], transB=1),
    ]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 16, 8, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 10])],
        [w, s, b, shape, sc, fc],
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)])
    m.ir_version = 7
    return m


def test_the_result_is_the_converters_own():
    m = _opset9()
    assert sum(np.prod(t.dims) >= LARGE for t in m.graph.initializer) == 2  # w and fc aside
    want = onnx.version_converter.convert_version(m, 13)
    work = onnx.ModelProto()
    work.CopyFrom(m)
    got = convert_opset(work, 13)
    assert got.SerializeToString() == want.SerializeToString()
    assert [i.name for i in got.graph.input] == ["x"]
    assert "Resize" in {n.op_type for n in got.graph.node}  # Upsample's adapter ran
    onnx.checker.check_model(got, full_check=True)


def test_a_model_without_large_weights_converts_as_before():
    m = _opset9()
    keep = [t for t in m.graph.initializer if np.prod(t.dims) < LARGE]
    del m.graph.initializer[:]
    m.graph.initializer.extend(keep)
    m.graph.input.extend(
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in ("w", "fc")]
    )
    want = onnx.version_converter.convert_version(m, 13)
    assert convert_opset(m, 13).SerializeToString() == want.SerializeToString()
