"""Golden store, tolerance and accuracy checks."""

from guard.golden.numerics import compare_outputs, top1_accuracy
from guard.golden.store import Golden, GoldenStore, array_sha256, outputs_sha256

__all__ = [
    "Golden",
    "GoldenStore",
    "array_sha256",
    "compare_outputs",
    "outputs_sha256",
    "top1_accuracy",
]
