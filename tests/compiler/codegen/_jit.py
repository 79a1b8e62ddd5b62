"""JIT a module of emitted kernels for the host (O3, new pass builder) and call them."""

from __future__ import annotations

import ctypes

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir

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

    def __init__(self, module: ir.Module, opt: int = 3) -> None:
        _init()
        target = llvm.Target.from_default_triple()
        # Each engine owns its own TargetMachine (sharing one segfaults at exit).
        tm = target.create_target_machine(
            cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3
        )
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
