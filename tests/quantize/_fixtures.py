"""Small fp32 models for the quantisation tests: parse_model text plus seeded initializers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.parser
from onnx import numpy_helper

from guard.quantize.calibration import Calibration

# x -> Conv(3->8, 3x3) -> BatchNorm -> Relu -> Conv(8->8, 1x1) -> Relu -> GAP -> Flatten
#   -> Gemm(8->4, transB) -> y
CONVNET = """
<ir_version: 8, opset_import: ["" : 13]>
convnet (float[1, 3, 8, 8] x) => (float[1, 4] y) {
    c1 = Conv <pads = [1, 1, 1, 1]> (x, w1, b1)
    n1 = BatchNormalization (c1, gamma, beta, mean, var)
    r1 = Relu (n1)
    c2 = Conv (r1, w2, b2)
    r2 = Relu (c2)
    p = GlobalAveragePool (r2)
    f = Flatten (p)
    y = Gemm <transB = 1> (f, w3, b3)
}
"""


def convnet_weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "w1": rng.normal(0, 0.3, (8, 3, 3, 3)),
        "b1": rng.normal(0, 0.1, 8),
        "gamma": 1 + rng.normal(0, 0.1, 8),
        "beta": rng.normal(0, 0.1, 8),
        "mean": rng.normal(0, 0.1, 8),
        "var": rng.uniform(0.5, 1.5, 8),
        "w2": rng.normal(0, 0.4, (8, 8, 1, 1)),
        "b2": rng.normal(0, 0.1, 8),
        "w3": rng.normal(0, 0.5, (4, 8)),
        "b3": rng.normal(0, 0.1, 4),
    }


def model(text: str, weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    m = onnx.parser.parse_model(text)
    m.graph.initializer.extend(
        numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in weights.items()
    )
    onnx.checker.check_model(m)
    return m


def convnet() -> onnx.ModelProto:
    return model(CONVNET, convnet_weights())


def save(m: onnx.ModelProto, tmp_path: Path, name: str = "model.onnx") -> Path:
    p = tmp_path / name
    onnx.save(m, str(p))
    return p


def samples(n: int, shape: tuple[int, ...] = (1, 3, 8, 8), seed: int = 0, scale: float = 1.0,
            name: str = "x") -> Calibration:  # fmt: skip
    rng = np.random.default_rng(seed)
    return Calibration.from_feeds(
        [{name: (rng.standard_normal(shape) * scale).astype(np.float32)} for _ in range(n)],
        "test",
    )
