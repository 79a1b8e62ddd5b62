"""zoo:mobilenet_v2: the paper's block table, built by code, and runnable by onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx

from guard.zoo import mobilenet_v2
from guard.zoo.cache import model_path


def test_structure_follows_the_block_table():
    m = onnx.load(model_path("mobilenet_v2"))
    ops = [n.op_type for n in m.graph.node]
    blocks = sum(n for _, _, n, _ in mobilenet_v2.BLOCKS)
    assert blocks == 17
    expands = sum(n for t, _, n, _ in mobilenet_v2.BLOCKS if t != 1)
    assert ops.count("Conv") == 1 + expands + 2 * blocks + 1  # stem, blocks, head
    # residual adds: stride 1 and equal channels (every repeat after the first)
    assert ops.count("Add") == sum(n - 1 for _, _, n, _ in mobilenet_v2.BLOCKS)
    depthwise = [n for n in m.graph.node if n.name.endswith(".dw/Conv")]
    assert len(depthwise) == blocks
    assert all(a.i > 1 for n in depthwise for a in n.attribute if a.name == "group")


def test_runs_in_onnxruntime():
    import onnxruntime as ort

    s = ort.InferenceSession(str(model_path("mobilenet_v2")), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    (y,) = s.run(None, {"x": x})
    assert y.shape == (1, 1000) and np.isfinite(y).all() and y.std() > 0
