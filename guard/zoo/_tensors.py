"""Seeded, stable tensors and small graph helpers shared by the zoo builders.

Every random tensor is drawn from a generator seeded by ``sha256(model/tensor)``, so a
tensor's values depend only on its model, its name and numpy's generator, never on the
order in which a builder happens to create tensors.
"""

from __future__ import annotations

import hashlib

import numpy as np
import onnx
from onnx import numpy_helper

# The IR version each opset the zoo emits first shipped with (onnx.helper.VERSION_TABLE):
# the lowest IR a runtime must understand, so older runtimes still load zoo models.
IR_FOR_OPSET = {9: 4, 16: 8, 17: 8}


def rng_for(model: str, tensor: str) -> np.random.Generator:
    """A generator seeded by the model and tensor names (stable across runs and orders)."""
    digest = hashlib.sha256(f"{model}/{tensor}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def normal(
    model: str, tensor: str, shape: tuple[int, ...], std: float, mean: float = 0.0
) -> np.ndarray:
    """float32 N(mean, std**2) values of ``shape``, seeded by the model and tensor names."""
    values = rng_for(model, tensor).standard_normal(shape, dtype=np.float32)
    values *= np.float32(std)
    if mean:
        values += np.float32(mean)
    return values


def uniform(model: str, tensor: str, shape: tuple[int, ...], low: float, high: float) -> np.ndarray:
    """float32 U(low, high) values of ``shape``, seeded by the model and tensor names."""
    values = rng_for(model, tensor).random(shape, dtype=np.float32)
    return (np.float32(low) + values * np.float32(high - low)).astype(np.float32)


def he_std(fan_in: int) -> float:
    """Kaiming/He normal scale for a layer followed by ReLU: keeps E[x^2] layer to layer."""
    return float(np.sqrt(2.0 / max(fan_in, 1)))


def initializer(name: str, values: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.ascontiguousarray(values), name)


def finish(model: onnx.ModelProto, *, producer_version: str) -> onnx.ModelProto:
    """Stamp producer fields; no timestamps, since the bytes must be reproducible.

    The full check (checker + strict shape inference) runs on the serialised bytes when the
    cache writes them (guard.zoo.cache), so a 575 MB model is serialised once, not twice.
    """
    model.producer_name = "guard.zoo"
    model.producer_version = producer_version
    return model
