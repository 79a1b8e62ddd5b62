"""One table maps IR ops to their emitter (tinygrad's ``code_for_op``, per op family).

A missing entry is a clear decline: :func:`decline` says "no emitter for LRN" and the
native backend's support predicate hands the node to the ``cpu`` partition, which the
partition report names and the ``partitions`` check gates. Nothing is interpreted
silently.
"""

from __future__ import annotations

import functools

from guard.compiler.codegen.base import Emitter
from guard.compiler.codegen.conv.emitter import Conv
from guard.compiler.codegen.conv.transpose import ConvTranspose
from guard.compiler.codegen.emit_einsum import Einsum
from guard.compiler.codegen.emit_elementwise import Elementwise
from guard.compiler.codegen.emit_index import Gather
from guard.compiler.codegen.emit_norm import Norm
from guard.compiler.codegen.emit_pool import Pool
from guard.compiler.codegen.emit_quant import Quant
from guard.compiler.codegen.emit_recurrent import GruRnn, Recurrent
from guard.compiler.codegen.emit_reduce import Reduce
from guard.compiler.codegen.emit_resize import Resize
from guard.compiler.codegen.emit_select import Select
from guard.compiler.codegen.emit_tensor import Copy, Fill
from guard.compiler.codegen.gemm.emitter import Gemm
from guard.compiler.codegen.quant.emitter import QuantLinear
from guard.compiler.graph.view import GraphView, OpNode


@functools.cache
def table() -> dict[str, Emitter]:
    out: dict[str, Emitter] = {}
    for e in (
        Elementwise(),
        Copy(),
        Fill(),
        Gemm(),
        Conv(),
        Pool(),
        Norm(),
        Reduce(),
        Resize(),
        ConvTranspose(),
        Gather(),
        Select(),
        Einsum(),
        Recurrent(),
        GruRnn(),
        Quant(),
        QuantLinear(),
    ):
        for op in e.ops:
            out[op] = e
    return out


def emitter_for(op: str) -> Emitter:
    return table()[op]


def decline(node: OpNode, g: GraphView) -> str | None:
    """None when the node has an emitter that takes it, else why not."""
    e = table().get(node.op)
    if e is None:
        return f"no emitter for {node.op}"
    return e.decline(node, g)
