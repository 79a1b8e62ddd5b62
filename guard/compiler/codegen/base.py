"""What every emitter is: a decline predicate, an optional constant packer, and ``emit``.

An emitter writes the body of one kernel function ``void k(ptr in0, ..., ptr out0, ...)``
with llvmlite.ir; shapes are compile-time constants (a kernel is specialised to its
shapes, Glow's way), so loops have constant bounds and LLVM unrolls and vectorises them.
``decline`` returns why a node cannot be emitted (the native backend's support predicate
reports it and the node lands in the ``cpu`` partition), or None.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen.kernel_plan import Operand
from guard.compiler.graph.view import GraphView, OpNode


@dataclass(frozen=True)
class Kernel:
    """One kernel to emit: the op, its attributes and its operands' types."""

    op: str
    attrs: Mapping[str, Any]
    inputs: tuple[Operand | None, ...]
    outputs: tuple[Operand, ...]
    vector_width: int


class Emitter:
    """One op family. Subclasses override ``emit`` and usually ``decline``."""

    ops: frozenset[str] = frozenset()

    def decline(self, node: OpNode, g: GraphView) -> str | None:
        return None

    def pack(
        self, op: str, attrs: Mapping[str, Any], index: int, value: np.ndarray,
        shapes: Sequence[tuple[int, ...] | None], vector_width: int,
    ) -> np.ndarray | None:  # fmt: skip
        """Input ``index`` (a constant) re-laid for this kernel at build time, or None."""
        return None

    def emit(
        self, b: ir.IRBuilder, ins: list[ir.Value | None], outs: list[ir.Value], k: Kernel
    ) -> None:
        raise NotImplementedError


def float32_only(node: OpNode, g: GraphView, what: str = "") -> str | None:
    for v in (*node.args, *node.outputs):
        if v and g.tensors[v].dtype != "float32":
            return f"no emitter for {node.op} on {g.tensors[v].dtype} ({v!r}){what}"
    return None


def strides(shape: Sequence[int]) -> list[int]:
    """Row-major element strides."""
    out = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        out[d] = out[d + 1] * int(shape[d + 1])
    return out


def bcast_strides(shape: Sequence[int], out_shape: Sequence[int]) -> list[int]:
    """Element strides of ``shape`` read at ``out_shape``'s indices (0 where broadcast)."""
    pad = len(out_shape) - len(shape)
    full = [1] * pad + list(shape)
    st = strides(full)
    return [0 if full[d] == 1 and out_shape[d] != 1 else st[d] for d in range(len(out_shape))]


def merge_dims(
    shape: Sequence[int], operand_strides: Sequence[Sequence[int]]
) -> tuple[list[int], list[list[int]]]:
    """Merge adjacent dims where every operand's strides are contiguous across them."""
    dims = [int(d) for d in shape] or [1]
    sts = [list(s) or [0] for s in operand_strides]
    out_d = [dims[-1]]
    out_s = [[s[-1]] for s in sts]
    for d in range(len(dims) - 2, -1, -1):
        inner = out_d[0]
        if all(s[d] == os[0] * inner for s, os in zip(sts, out_s, strict=True)):
            out_d[0] = dims[d] * inner
        else:
            out_d.insert(0, dims[d])
            for s, os in zip(sts, out_s, strict=True):
                os.insert(0, s[d])
    return out_d, out_s
