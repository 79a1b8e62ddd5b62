"""JIT a module of emitted kernels (O3, new pass builder) and call them: for the host, or
for one of the x86 classes in TARGETS when the host runs that class's code.

TARGETS are the two x86 classes every schedule test runs for (codegen for a target needs
no such CPU); :func:`skip_unless_runnable` skips a test that runs a class's code on a
host that lacks it, saying why."""

from __future__ import annotations

import ctypes

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir

from guard.compiler.codegen.llvm_target import CodegenTarget, codegen_target, runnable_here

TARGETS = {
    "avx2": "llvm -mtriple=x86_64-linux-gnu -mcpu=x86-64-v3",
    "avx512": "llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512",
}


def target_of(name: str) -> CodegenTarget:
    return codegen_target(TARGETS[name])


def skip_unless_runnable(name: str) -> CodegenTarget:
    """The target of class ``name``; skips the calling test when this host cannot run it."""
    t = target_of(name)
    why = runnable_here(t)
    if why:
        pytest.skip(f"{name} code does not run here: {why}")
    return t


_initialised = False


def _init() -> None:
    global _initialised
    if not _initialised:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _initialised = True


def host_vector_width() -> int:
    _init()
    feats = llvm.get_host_cpu_features()
    return 16 if feats.get("avx512f") else 8


class Jitted:
    """Keeps the engine alive; ``fn(name)`` gives a ctypes callable taking float arrays."""

    def __init__(
        self, module: ir.Module, opt: int = 3, target: CodegenTarget | None = None
    ) -> None:
        _init()
        # Each engine owns its own TargetMachine (sharing one segfaults at exit).
        if target is None:
            tm = llvm.Target.from_default_triple().create_target_machine(
                cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3
            )
        else:
            tm = target.target_machine()
        module.triple = llvm.get_process_triple()
        module.data_layout = str(tm.target_data)
        mod = llvm.parse_assembly(str(module))
        mod.verify()
        pto = llvm.create_pipeline_tuning_options(speed_level=opt)
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
        self.ir = str(mod)
        self.engine = llvm.create_mcjit_compiler(mod, tm)
        self.engine.finalize_object()
        self._mod = mod

    def address(self, name: str) -> int:
        return self.engine.get_function_address(name)

    def fn(self, name: str, nargs: int = 4):
        """A callable over ``nargs`` float arrays (None passes a null pointer)."""
        proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * nargs))
        f = proto(self.address(name))

        def call(*arrays) -> None:
            assert len(arrays) == nargs, (name, len(arrays), nargs)
            f(*[None if x is None else x.ctypes.data for x in arrays])

        call.raw = f  # type: ignore[attr-defined]
        return call


def f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)
