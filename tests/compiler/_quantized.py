"""Quantized test models made by code, cached on disk like guard/zoo (the key covers the
zoo model's own key, the opset, this builder's version and the onnxruntime/onnx/numpy
versions; the write is atomic):

- :func:`qdq_model`: onnxruntime's ``quantize_static`` (QDQ, per-channel s8 weights, u8
  activations: the tool's documented default) over a zoo model or a real-weight model of
  a wheel (``WHEELS``, at a fixed input shape), calibrated with a seeded
  ``CalibrationDataReader``;
- :func:`dynamic_model`: onnxruntime's ``quantize_dynamic`` (s8 weights, u8 activations
  quantised at run time: ``DynamicQuantizeLinear`` -> ``MatMulInteger`` -> ``Cast`` and a
  ``Mul`` by the product of the scales), the tool's default for transformers."""

from __future__ import annotations

import hashlib
import json
import tempfile
from importlib import metadata
from pathlib import Path

import numpy as np
import onnx

from guard.core.fsutil import atomic_write_bytes
from guard.zoo.cache import cached_file, default_cache_dir, model_path

BUILDER = "qdq-1"
DYNAMIC_BUILDER = "dynamic-1"


# Real-weight models inside wheels of the test extra (as benchmarks/int8_table.py takes
# them): name -> (package, file inside it, the input shape it is quantised and run at).
WHEELS: dict[str, tuple[str, str, list[int]]] = {
    "ppocr_cls": ("rapidocr_onnxruntime", "models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                  [1, 3, 48, 192]),
}  # fmt: skip


def _source(name: str) -> tuple[Path, str]:
    """The float model and what names its version in the cache key."""
    if name not in WHEELS:
        return model_path(name), cached_file(name).name
    import pytest

    from guard.zoo.wheels import wheel_model

    package, pattern, _ = WHEELS[name]
    path, why = wheel_model(package, pattern)
    if path is None:
        pytest.skip(why)
    return path, f"{package}-{metadata.version(package)}:{pattern}"


def _cached(name: str, kind: str, pins: dict) -> Path:
    """Where the model for these pins lives in the cache (``kind`` names the file)."""
    pins = {
        "zoo": _source(name)[1], **pins,
        "packages": {p: metadata.version(p) for p in ("onnxruntime", "onnx", "numpy")},
    }  # fmt: skip
    key = hashlib.sha256(json.dumps(pins, sort_keys=True).encode()).hexdigest()[:16]
    return default_cache_dir().parent / "int8" / f"{name}-{kind}-{key}.onnx"


def dynamic_model(name: str) -> Path:
    """The dynamically quantised int8 form of zoo model ``name`` (s8 weights per tensor,
    as ``quantize_dynamic`` writes them by default)."""
    path = _cached(name, "dynamic", {"builder": DYNAMIC_BUILDER})
    if path.is_file():
        return path
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "dynamic.onnx"
        quantize_dynamic(str(model_path(name)), str(out), weight_type=QuantType.QInt8)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, out.read_bytes())
    return path


def qdq_model(name: str, opset: int = 13, calibration: int = 4) -> Path:
    """The QDQ int8 form of zoo (or ``WHEELS``) model ``name`` at ``opset`` (13: converted
    first, as FACTS.md advises; 11: what the quantiser writes for the model as shipped)."""
    src = _source(name)[0]
    pins = {"opset": opset, "builder": BUILDER, "calibration": calibration}
    path = _cached(name, f"qdq{opset}", pins)
    if path.is_file():
        return path
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    m = onnx.load(str(src))
    if opset >= 13:
        m = onnx.version_converter.convert_version(m, opset)
    inp = m.graph.input[0]
    shape = [d.dim_value or 1 for d in inp.type.tensor_type.shape.dim]
    if name in WHEELS:  # a fixed shape: the quantiser and every runtime see the same
        shape = list(WHEELS[name][2])
        for dim, v in zip(inp.type.tensor_type.shape.dim, shape, strict=True):
            dim.ClearField("dim_param")
            dim.dim_value = v

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(0)
            self.it = iter(
                [
                    {inp.name: rng.standard_normal(shape).astype(np.float32)}
                    for _ in range(calibration)
                ]
            )

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.it, None)

    with tempfile.TemporaryDirectory() as tmp:
        f32, out = Path(tmp) / "f32.onnx", Path(tmp) / "qdq.onnx"
        onnx.save(m, str(f32))
        quantize_static(
            str(f32), str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
        )  # fmt: skip
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, out.read_bytes())
    return path
