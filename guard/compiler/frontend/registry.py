"""The converter registry: op type -> {since_version: converter}, one explicit dict.

``lookup(op, opset)`` picks the converter with the highest since_version <= opset, which is
how a converter for, say, Squeeze's axes-as-attribute (opset 1) and axes-as-input (opset
13) coexist; ``lookup(op, opset, domain)`` finds a contrib op (``com.microsoft``).
"""

from __future__ import annotations

from guard.compiler.frontend import (
    ops_elementwise,
    ops_index,
    ops_linalg,
    ops_nn,
    ops_norm,
    ops_qoperator,
    ops_quant,
    ops_recurrent,
    ops_reduce,
    ops_resize,
    ops_tensor,
)  # fmt: skip
from guard.compiler.frontend.context import Converter

CONVERTERS: dict[str, dict[int, Converter]] = {}
for _family in (
    ops_elementwise,
    ops_nn,
    ops_norm,
    ops_tensor,
    ops_index,
    ops_reduce,
    ops_resize,
    ops_recurrent,
    ops_quant,
    ops_qoperator,
    ops_linalg,
):
    for _op, _versions in _family.CONVERTERS.items():
        CONVERTERS.setdefault(_op, {}).update(_versions)


# Contrib ops by domain (one version each): onnxruntime's QOperator ops.
DOMAINS: dict[str, dict[str, Converter]] = {ops_qoperator.DOMAIN: ops_qoperator.CONTRIB}


def lookup(op: str, opset: int, domain: str = "") -> Converter | None:
    if domain not in ("", "ai.onnx"):
        return DOMAINS.get(domain, {}).get(op)
    versions = CONVERTERS.get(op)
    if not versions:
        return None
    eligible = [v for v in versions if v <= opset]
    return versions[max(eligible)] if eligible else None
