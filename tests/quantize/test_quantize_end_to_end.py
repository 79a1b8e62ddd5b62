"""End to end on a trained classifier: quantise zoo:digits, run the QDQ model on onnxruntime,
OpenVINO and the bundled compiler, and check top-1 agreement with fp32 on the held-out set."""

from __future__ import annotations

import onnx
import pytest

from guard import zoo
from guard.backends import get_backend
from guard.backends.base import BuildRequest
from guard.core.fsutil import file_sha256
from guard.quantize import QuantOptions, quantize_model, top1_agreement
from guard.quantize.calibration import Calibration


@pytest.mark.slow
@pytest.mark.parametrize("method", ["percentile", "entropy"])
def test_digits_int8_agrees_with_fp32_on_three_runtimes(tmp_path, method):
    import onnxruntime as ort

    path = zoo.model_path("digits")
    x, _ = zoo.load_dataset("digits-test")
    cal = Calibration.from_feeds([{"x": x[i : i + 1]} for i in range(0, 64)], "digits[:64]")
    q = quantize_model(path, cal, QuantOptions(method=method), source_sha256=file_sha256(path))
    out = tmp_path / "digits.int8.onnx"
    onnx.save(q.model, str(out))
    assert q.plan.weights and q.plan.activations and q.worst
    assert q.output_sqnr_db is not None and q.output_sqnr_db > 15.0

    fp32 = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    runs = {
        "onnxruntime": ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(
            None, {"x": x}
        )
    }
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(
        core.read_model(str(out)), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}
    )
    runs["openvino"] = [compiled(x)[0]]
    art = tmp_path / "art"
    art.mkdir()
    backend = get_backend("bundled")
    backend.build(BuildRequest(out, {"x": x.shape}, "host", "host", 1, art))
    runs["bundled"] = backend.load(art, threads=1).run({"x": x})
    for name, outs in runs.items():
        agree = top1_agreement([[o] for o in fp32[0]], [[o] for o in outs[0]])
        assert agree is not None and agree >= 0.98, (name, agree)
