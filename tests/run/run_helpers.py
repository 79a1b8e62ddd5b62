"""Helpers for the spine tests: small real ONNX models and suites written to tmp dirs.

A uniquely named module (not conftest) so that imports cannot pick up another
directory's conftest."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FAST_MEASURE = "{warmup_s: 0.0, min_iters: 5, min_time_s: 0.01, max_time_s: 5}"


def small_convnet(path: Path, *, batch: int | str = 1, opset: int = 17) -> Path:
    """Conv → Relu → GlobalAveragePool → Flatten → Gemm → Softmax, seeded weights."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "w")
    b = numpy_helper.from_array(np.zeros(8, np.float32), "b")
    fw = numpy_helper.from_array((rng.standard_normal((10, 8)) * 0.5).astype(np.float32), "fw")
    fb = numpy_helper.from_array(np.zeros(10, np.float32), "fb")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["l"], transB=1, name="fc"),
        helper.make_node("Softmax", ["l"], ["y"], axis=1, name="softmax"),
    ]
    g = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])],
        [w, b, fw, fb],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    onnx.save(m, path)
    return path


def write_suite(tmp_path: Path, body: str, name: str = "suite.yaml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return p
