"""Frontends: ONNX -> IR (one converter per op, dispatched by opset)."""

from guard.compiler.frontend.importer import import_onnx

__all__ = ["import_onnx"]
