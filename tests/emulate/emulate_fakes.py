"""Tiny AArch64 objects with the artefact entry ABI, generated with llvmlite for the tests.

``guard_main(arena, weights, packed, inputs, outputs)`` (the code generator's main entry
ABI): stages ``x * w`` in the arena, then writes ``y = arena + b`` and ``s = sum(x)``;
``w`` is N floats in the weights blob, ``b`` N floats in the packed blob.
``guard_part0(arena, weights, packed)`` (a partition entry) doubles the N floats at
arena offset 0 in place. Variants crash (a store to an unmapped address) or hang (a loop that never
ends), to test that the emulated run reports them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from llvmlite import ir

from guard.emulate.tools import TOOLCHAINS, Toolchain

N = 8
F32 = ir.FloatType()
I64 = ir.IntType(64)
I8P = ir.IntType(8).as_pointer()


def _f32p(b: ir.IRBuilder, ptrs: ir.Value, k: int) -> ir.Value:
    return b.bitcast(b.load(b.gep(ptrs, [ir.Constant(I64, k)])), F32.as_pointer())


def _crash(b: ir.IRBuilder) -> None:
    # a volatile store to an unmapped page (address 8): a null store would be UB that the
    # optimiser deletes
    bad = b.inttoptr(ir.Constant(I64, 8), F32.as_pointer())
    st = b.store(ir.Constant(F32, 1.0), bad)
    st.volatile = True  # type: ignore[attr-defined]


def entry_module(kind: str = "ok", triple: str = "aarch64-linux-gnu") -> ir.Module:
    m = ir.Module(name=f"fake_{kind}")
    m.triple = triple
    part = ir.Function(m, ir.FunctionType(ir.VoidType(), [I8P, I8P, I8P]), "guard_part0")
    pb = ir.IRBuilder(part.append_basic_block("entry"))
    if kind == "crash":
        _crash(pb)
    else:
        pa = pb.bitcast(part.args[0], F32.as_pointer())
        for i in range(N):
            slot = pb.gep(pa, [ir.Constant(I64, i)])
            pb.store(pb.fmul(pb.load(slot), ir.Constant(F32, 2.0)), slot)
    pb.ret_void()
    fty = ir.FunctionType(ir.VoidType(), [I8P, I8P, I8P, I8P.as_pointer(), I8P.as_pointer()])
    fn = ir.Function(m, fty, "guard_main")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    arena, weights, packed, ins, outs = fn.args
    if kind == "crash":
        _crash(b)
        b.ret_void()
        return m
    if kind == "hang":
        loop = fn.append_basic_block("loop")
        slot = b.bitcast(arena, F32.as_pointer())
        b.branch(loop)
        lb = ir.IRBuilder(loop)
        # a volatile store keeps the loop from being optimised away
        st = lb.store(ir.Constant(F32, 0.0), slot)
        st.volatile = True  # type: ignore[attr-defined]
        lb.branch(loop)
        return m
    x, y, s = _f32p(b, ins, 0), _f32p(b, outs, 0), _f32p(b, outs, 1)
    w = b.bitcast(weights, F32.as_pointer())
    pk = b.bitcast(packed, F32.as_pointer())
    a = b.bitcast(arena, F32.as_pointer())
    acc = ir.Constant(F32, 0.0)
    for i in range(N):
        xi = b.load(b.gep(x, [ir.Constant(I64, i)]))
        b.store(
            b.fmul(xi, b.load(b.gep(w, [ir.Constant(I64, i)]))), b.gep(a, [ir.Constant(I64, i)])
        )
        acc = b.fadd(acc, xi)
    for i in range(N):
        ai = b.load(b.gep(a, [ir.Constant(I64, i)]))
        bi = b.load(b.gep(pk, [ir.Constant(I64, i)]))
        b.store(b.fadd(ai, bi), b.gep(y, [ir.Constant(I64, i)]))
    b.store(acc, s)
    b.ret_void()
    return m


def emit_object(module: ir.Module, path: Path, features: str = "+neon") -> Path:
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    mod = llvm.parse_assembly(str(module))
    target = llvm.Target.from_triple(module.triple)
    tm = target.create_target_machine(cpu="generic", features=features, opt=2, reloc="pic")
    path.write_bytes(tm.emit_object(mod))
    return path


def weights(directory: Path) -> tuple[np.ndarray, np.ndarray]:
    """Writes weights.bin (w) and packed.bin (b) into ``directory``; returns (w, b)."""
    w = np.linspace(-1.0, 2.0, N, dtype=np.float32)
    bias = np.arange(N, dtype=np.float32) * 0.5
    w.tofile(directory / "weights.bin")
    bias.tofile(directory / "packed.bin")
    return w, bias


def tools_mark(tc: Toolchain) -> pytest.MarkDecorator:
    """Skip unless ``tc``'s emulator and cross compiler are installed, naming the packages."""
    return pytest.mark.skipif(
        any(shutil.which(t) is None for t in (tc.emulator, tc.compiler)),
        reason=f"{tc.emulator} or {tc.compiler} not installed (apt-get install -y "
        f"{tc.emulator_package} {tc.compiler_package} {tc.libc_package})",
    )


needs_tools = tools_mark(TOOLCHAINS["aarch64"])
