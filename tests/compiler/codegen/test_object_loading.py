"""Generated objects load wherever RuntimeDyld maps them (issue 38).

MCJIT maps an object's code and constant sections separately. In a process whose address
space has grown by gigabytes (a test session, a benchmark of several models), a new
object's sections could land more than 2 GiB apart, and an object of the small code model
(32-bit PC-relative references to its constant pools and jump tables) then aborted the
whole process in LLVM (``isInt<32>(RealOffset)``): QDQ Inception-v2's object did so on its
third load with 500 MiB reserved between loads. x86_64 objects now use the large code
model (llvm_target.CodegenTarget.code_model). Slow: one int8 Inception-v2 build (~30 s),
in its own interpreter, since the failure is an abort."""

from __future__ import annotations

import numpy as np
import pytest

from .._isolated import run_isolated

pytestmark = pytest.mark.slow

LOADS = 8
RESERVE = 500 << 20  # bytes of address space reserved (not touched) between two loads


def test_an_object_loads_and_runs_after_the_address_space_grew_by_gigabytes():
    run_isolated("compiler.codegen.test_object_loading", "load_many")


def test_x86_objects_use_absolute_64_bit_relocations():
    from guard.compiler.codegen.llvm_target import codegen_target

    assert codegen_target("llvm -mtriple=x86_64-linux-gnu -mcpu=haswell").code_model == (
        "static",
        "large",
    )
    arm = codegen_target("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1")
    assert arm.code_model == ("pic", "default")  # linked by the system linker for qemu


def load_many() -> None:
    from guard.compiler import import_onnx, optimize
    from guard.compiler.codegen.build import host_target, jit
    from guard.compiler.partition.plan import plan

    from .._quantized import qdq_model

    g0 = import_onnx(qdq_model("inception_v2"))
    compiled = plan(optimize(g0, "O2")[0])
    x = np.random.default_rng(0).standard_normal(g0.values[g0.inputs[0]].shape)
    feeds = {g0.inputs[0]: x.astype(np.float32)}
    out = g0.outputs[0]
    first, code = jit(compiled, host_target())
    want = first.run(feeds)[out]
    keep: list[object] = [first]
    for _ in range(LOADS):
        keep.append(np.empty(RESERVE, np.uint8))
        rt, _ = jit(compiled, code=code)
        keep.append(rt)
        np.testing.assert_array_equal(rt.run(feeds)[out], want)
