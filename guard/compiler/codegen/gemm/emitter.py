"""Gemm, FusedGemm, MatMul, FusedMatMul on the GEMM micro-kernel library (gemm/driver.py).

Mapping onto ``GemmKernel`` (C[M,N] = op(A) @ op(B) + bias, epilogue in registers):

- Gemm: A [M,K] (transA: [K,M]), B [K,N] (transB: [N,K]); C of shape [N]/[1,N] is the
  "row" bias, [M,1] the "col" bias, a full [M,N] C is added by a second pass.
- MatMul: A [..., M, K] @ B [K, N] folds A's batch dims into M (contiguous rows);
  A [..., M, K] @ B [..., K, N] with equal batch dims is the library's batched GEMM.
  Other broadcasts are declined.
- A constant B is packed at build time (``pack_b``); a run-time B is read in place.
- The fused epilogue program: a leading ``Add(acc, bias)`` with a row-broadcast bias
  becomes the library's row bias; the rest runs in registers when it reads no other
  tensor, else as one pointwise pass over C (the output, in place) reading them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen.base import Emitter, Kernel, bcast_strides, float32_only
from guard.compiler.codegen.emit_elementwise import emit_pointwise, program_decline, run_program
from guard.compiler.codegen.gemm.driver import GemmKernel, GemmSchedule
from guard.compiler.codegen.irutil import elem_ptr
from guard.compiler.graph.exec_order import GraphView, OpNode
from guard.compiler.ir.isa_table import active_table
from guard.compiler.tuning.dispatch import gemm_schedule

Shape = tuple[int, ...]


def _prod(s: Sequence[int]) -> int:
    return int(np.prod(s, dtype=np.int64))


def split_program(
    program: Sequence[Mapping[str, Any]], row_ok: Any
) -> tuple[int | None, list[dict[str, Any]], bool]:
    """(bias input index or None, the program after it, whether it reads other inputs)."""
    prog = [dict(s) for s in program]
    bias = None
    if prog and prog[0]["op"] == "Add" and len(prog[0]["args"]) == 2:
        a0, a1 = prog[0]["args"]
        j = a1 if a0 == "acc" else a0 if a1 == "acc" else None
        if isinstance(j, int) and row_ok(j):
            bias = j
            rest = []
            for s in prog[1:]:
                args = []
                for r in s["args"]:
                    if r == "s0":
                        args.append("acc")
                    elif isinstance(r, str) and r.startswith("s"):
                        args.append(f"s{int(r[1:]) - 1}")
                    else:
                        args.append(r)
                rest.append({**s, "args": args})
            prog = rest
    reads = any(isinstance(r, int) for s in prog for r in s["args"])
    return bias, prog, reads


class GemmShape:
    """How one node maps onto a GemmKernel."""

    def __init__(self, op: str, attrs: Mapping[str, Any], shapes: Sequence[Shape | None]) -> None:
        a, bsh = shapes[0], shapes[1]
        assert a is not None and bsh is not None
        self.trans_a = self.trans_b = False
        self.batch = 1
        self.stride_b: int | None = None
        if op in ("Gemm", "FusedGemm"):
            self.trans_a = bool(attrs.get("transA", 0))
            self.trans_b = bool(attrs.get("transB", 0))
            self.M = a[1] if self.trans_a else a[0]
            self.K = a[0] if self.trans_a else a[1]
            self.N = bsh[0] if self.trans_b else bsh[1]
            self.ok = len(a) == 2 and len(bsh) == 2
            self.why = "" if self.ok else "Gemm operands are not 2-D"
        else:
            self.ok = len(a) >= 2 and len(bsh) >= 2
            self.why = "" if self.ok else "no emitter for MatMul on 1-D operands"
            if not self.ok:
                self.M = self.N = self.K = self.ldc = 1
                return
            self.K, self.N = bsh[-2], bsh[-1]
            if len(bsh) == 2:
                self.M = _prod(a[:-1])
            elif tuple(a[:-2]) == tuple(bsh[:-2]):
                self.M = a[-2]
                self.batch = _prod(a[:-2])
            else:
                self.ok, self.why, self.M = (
                    False,
                    f"no emitter for MatMul broadcasting {list(a)} @ {list(bsh)}",
                    1,
                )
        # A task of a column split (split.gemm_tasks, attribute ``cols``: a run of whole
        # panels of the packed B) computes C[:, col0:col0+N] of the GEMM's ``ldc`` columns.
        self.ldc, self.col0 = self.N, 0
        if self.ok and "cols" in attrs:
            self.col0, n1 = (int(c) for c in attrs["cols"])
            self.N = n1 - self.col0

    def kernel(self, vector_width: int, bias: str, record: bool = True) -> Any:
        # The schedule: the tuning cache's on a hit, else the default heuristic (packing
        # and emission both ask, so the packed B always matches the kernel's tile; only
        # the emission's question counts as a look-up: ``record``).
        return GemmKernel(
            self.M, self.N, self.K, trans_a=self.trans_a, trans_b=self.trans_b, bias=bias,
            vector_width=vector_width, batch=self.batch, ldc=self.ldc,
            schedule=gemm_schedule(self, vector_width, record),
        )  # fmt: skip


def same_panels(
    op: str, attrs: Mapping[str, Any], inputs: Sequence[Any], whole: GemmSchedule, width: int
) -> bool:
    """A task of a split GEMM reads B as packed for the whole GEMM: its kernel's schedule
    (the tuning cache's, or the default; a what-if, not counted as a look-up) must take the
    same panel width. ``inputs``: the task's operands (a ``shape`` each) or None."""
    gs = GemmShape(op, attrs, [None if o is None else o.shape for o in inputs])
    s = gemm_schedule(gs, width, record=False)
    return (s.nr, s.use_blas) == (whole.nr, whole.use_blas)


def column_ready(
    op: str, attrs: Mapping[str, Any], shapes: Sequence[Shape | None], whole: GemmSchedule,
    width: int, few_rows: int,
) -> bool:  # fmt: skip
    """Whether the thread split cuts this GEMM (its B packed) into runs of columns: fewer rows
    than columns (A is then the smaller operand, read whole by every task; onnxruntime's MLAS
    cuts N when N > M too), B over L2 (read whole by every row task, from memory) or under
    ``few_rows`` rows (too few row tasks), B packed by the micro-kernel (not BLAS's), the bias
    per column or per row, the epilogue in registers (reading no other tensor, whose columns
    a pointwise pass over C would have to cut)."""
    gs = GemmShape(op, attrs, shapes)
    big_b = 4 * gs.K * gs.N > active_table(width).l2_bytes
    if gs.M >= gs.N or not (big_b or gs.M < few_rows) or whole.use_blas:
        return False
    _, bias_kind, _, _, reads = Gemm()._plan(op, attrs, shapes)
    return bias_kind != "full" and not reads


class Gemm(Emitter):
    ops = frozenset({"Gemm", "FusedGemm", "MatMul", "FusedMatMul"})

    def decline(self, node: OpNode, g: GraphView) -> str | None:
        why = float32_only(node, g)
        if why:
            return why
        shapes = [g.tensors[v].shape if v else None for v in node.args]
        gs = GemmShape(node.op, node.attrs, shapes)
        if not gs.ok:
            return gs.why
        if node.op in ("Gemm", "FusedGemm") and (
            float(node.attrs.get("alpha", 1.0)) != 1.0 or float(node.attrs.get("beta", 1.0)) != 1.0
        ):
            return "no emitter for Gemm with alpha or beta other than 1"
        if node.op.startswith("Fused"):
            return program_decline(node.attrs["program"])
        return None

    def _plan(
        self, k_op: str, attrs: Mapping[str, Any], shapes: Sequence[Shape | None]
    ) -> tuple[GemmShape, str, int | None, list, bool]:
        gs = GemmShape(k_op, attrs, shapes)
        bias_kind, bias_index = "none", None
        if k_op in ("Gemm", "FusedGemm") and len(shapes) > 2 and shapes[2] is not None:
            c = shapes[2]
            if _prod(c) == gs.ldc and (len(c) == 1 or c[-1] == gs.ldc):
                bias_kind, bias_index = "row", 2
            elif _prod(c) == gs.M and len(c) == 2 and c[1] == 1:
                bias_kind, bias_index = "col", 2
            else:
                bias_kind, bias_index = "full", 2
        prog: list = []
        reads = False
        if k_op.startswith("Fused"):
            n_anchor = int(attrs["anchor_inputs"])

            def row_ok(j: int) -> bool:
                s = shapes[j] if j < len(shapes) else None
                return (
                    bias_kind == "none"
                    and j >= n_anchor
                    and s is not None
                    and _prod(s) == gs.ldc
                    and s[-1] == gs.ldc
                )

            bj, prog, reads = split_program(attrs["program"], row_ok)
            if bj is not None:
                bias_kind, bias_index = "row", bj
        return gs, bias_kind, bias_index, prog, reads

    def pack(
        self, op: str, attrs: Mapping[str, Any], index: int, value: np.ndarray,
        shapes: Sequence[tuple[int, ...] | None], vector_width: int,
    ) -> np.ndarray | None:  # fmt: skip
        if index != 1:
            return None
        gs, bias_kind, *_ = self._plan(op, attrs, shapes)
        if not gs.ok or gs.batch != 1:
            return None
        kern = gs.kernel(
            vector_width,
            "row" if bias_kind == "row" else "col" if bias_kind == "col" else "none",
            record=False,  # B is packed whether or not this GEMM is emitted whole
        )
        return kern.pack_b(
            np.asarray(value, np.float32).reshape((gs.N, gs.K) if gs.trans_b else (gs.K, gs.N))
        )

    def emit(
        self, b: ir.IRBuilder, ins: list[ir.Value | None], outs: list[ir.Value], k: Kernel
    ) -> None:
        shapes = [None if o is None else o.shape for o in k.inputs]
        gs, bias_kind, bias_index, prog, reads = self._plan(k.op, k.attrs, shapes)
        lib_bias = bias_kind if bias_kind in ("row", "col") else "none"
        kern = gs.kernel(k.vector_width, lib_bias)
        epilogue = None
        key = None
        if prog and not reads:
            key = json.dumps(prog, sort_keys=True)

            def epilogue(bld: ir.IRBuilder, v: ir.Value) -> ir.Value:
                return run_program(bld, prog, v, lambda j: v)  # reads no inputs

        bop = k.inputs[1]
        b_packed = bop is not None and bop.space == "packed"
        name = f"{b.function.name}_gemm"
        fn = kern.emit(b.module, name, epilogue=epilogue, b_packed=b_packed, epilogue_key=key)
        fn.linkage = "internal"
        bias_ptr = (
            ins[bias_index]
            if bias_index is not None and lib_bias != "none"
            else ir.Constant(ir.PointerType(), None)
        )
        pb, pc = ins[1], outs[0]
        if gs.col0:  # a column task: its panels of B (each K x nr), its columns of bias and C
            if not b_packed or kern.sched.use_blas or bias_kind == "full" or reads:
                raise ValueError(f"{k.op}: a column task needs a packed B and a register epilogue")
            pb = elem_ptr(b, pb, gs.col0 * gs.K)
            pc = elem_ptr(b, pc, gs.col0)
            if lib_bias == "row":
                bias_ptr = elem_ptr(b, bias_ptr, gs.col0)
        b.call(fn, [ins[0], pb, bias_ptr, pc])
        out = k.outputs[0]
        if bias_kind == "full":
            c = k.inputs[2]
            assert c is not None and ins[2] is not None
            emit_pointwise(
                b, out.shape, [(outs[0], bcast_strides(out.shape, out.shape)), (ins[2], bcast_strides(c.shape, out.shape))],
                outs[0], k.vector_width, lambda v: b.fadd(v[0], v[1]),
            )  # fmt: skip
        if prog and reads:
            refs = sorted({r for s in prog for r in s["args"] if isinstance(r, int)})
            operands = [(outs[0], bcast_strides(out.shape, out.shape))]
            for j in refs:
                o = k.inputs[j]
                assert o is not None and ins[j] is not None
                operands.append((ins[j], bcast_strides(o.shape, out.shape)))

            def compute(vals: list[ir.Value]) -> ir.Value:
                return run_program(b, prog, vals[0], lambda j: vals[1 + refs.index(j)])

            emit_pointwise(b, out.shape, operands, outs[0], k.vector_width, compute)
