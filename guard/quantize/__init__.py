"""guard.quantize: profile-guided int8 quantisation of an fp32 ONNX model (QDQ format).

Glow's scheme (pytorch/glow/lib/Quantization, pytorch/glow/docs/Quantization.md) on guard's
bundled compiler: import and optimise the model with the fp32 passes, run the calibration
samples through the reference interpreter recording each tensor's range (profile.py), choose
each range by a method (ranges.py), write QuantizeLinear/DequantizeLinear pairs into the
source model (qdq.py), and say which tensor lost the accuracy (sqnr.py). build.py strings
them together; calibration.py reads the samples.

    quantize_model(model_path, calibration, QuantOptions(...), source_sha256=...) -> Quantized
    read_calibration(path, graph_inputs) -> Calibration
    tensor_errors(fp32_model, qdq_model, samples) -> [TensorError], worst first
"""

from __future__ import annotations

from guard.quantize.build import Quantized, quantize_model
from guard.quantize.calibration import Calibration, read_calibration
from guard.quantize.profile import Profile
from guard.quantize.qdq import QuantOptions
from guard.quantize.sqnr import TensorError, outputs_sqnr, tensor_errors, top1_agreement

__all__ = [
    "Calibration", "Profile", "QuantOptions", "Quantized", "TensorError", "outputs_sqnr",
    "quantize_model", "read_calibration", "tensor_errors", "top1_agreement",
]  # fmt: skip
