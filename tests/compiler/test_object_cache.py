"""object_cache: a kernel plan built before loads its object instead of being emitted and
compiled; the object equals a fresh compile's byte for byte and runs equal to the
reference interpreter on the host, x86-64-v3 and skylake-avx512 at 1 and 2 threads; a
change of model, target, table, compiler source or LLVM is another key; a damaged entry
is compiled again; a build under a tuning dispatch never uses the cache."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import guard.compiler.codegen.object_cache as oc
from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen.build import NativeCode, emit_module, host_target, jit, plan_kernels
from guard.compiler.codegen.module import compile_module
from guard.compiler.partition.plan import CompiledPlan, plan
from guard.compiler.runtime.weights import pack_weights
from guard.compiler.tuning.dispatch import Dispatch, applied
from guard.core.fsutil import sources_sha256

from .codegen._jit import TARGETS, skip_unless_runnable, target_of


def _model(channels: int = 8):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((channels, 3, 3, 3)).astype(np.float32)
    fc = rng.standard_normal((channels * 64, 10)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(fc, "fc")]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"]),
        helper.make_node("MatMul", ["f", "fc"], ["y"]),
    ]
    g = helper.make_graph(
        nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits,
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _plan(channels: int = 8, target=None) -> CompiledPlan:
    table = (target or host_target()).table
    g, _ = optimize(import_onnx(_model(channels)), "O2", target=table)
    return plan(g)


def _kernels(p: CompiledPlan, target):
    _, layout = pack_weights({k: c.data for k, c in p.graph.constants.items()})
    return plan_kernels(p, layout, target)


def _count_emits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = oc.emit_module

    def counting(kplan, target):
        calls.append(1)
        return real(kplan, target)

    monkeypatch.setattr(oc, "emit_module", counting)
    return calls


@pytest.mark.parametrize("isa", ["host", *TARGETS])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_hit_is_the_fresh_object_and_runs_equal_to_the_reference(
    tmp_path, monkeypatch, isa, threads
):
    target = host_target() if isa == "host" else skip_unless_runnable(isa)
    p = _plan(target=target)
    kplan, packed = _kernels(p, target)
    emits = _count_emits(monkeypatch)
    fresh = compile_module(emit_module(kplan, target), target)
    first = oc.code_for(kplan, target, tmp_path)
    second = oc.code_for(kplan, target, tmp_path)
    assert emits == [1]  # the second build emitted and compiled nothing
    assert first.object_code == fresh.object_code == second.object_code
    assert second.kernels == first.kernels
    rt, _ = jit(p, target, threads, code=NativeCode(kplan, packed, second, target))
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    want = run_reference(p.graph, feeds)["y"]
    np.testing.assert_allclose(rt.run(feeds)["y"], want, rtol=1e-4, atol=1e-4)


def _key(p: CompiledPlan, target) -> str:
    kplan, _ = _kernels(p, target)
    return oc.plan_key(kplan, oc.key_parts(target))


def test_each_part_of_the_key_changes_it(monkeypatch):
    host = host_target()
    base = _key(_plan(), host)
    assert _key(_plan(), host) == base  # the same plan again: the same key
    assert _key(_plan(channels=16), host) != base  # another model
    v3 = target_of("avx2")
    assert _key(_plan(target=v3), v3) != base  # another target
    other_cpu = dataclasses.replace(v3, cpu="znver3")
    assert _key(_plan(target=v3), other_cpu) != _key(_plan(target=v3), v3)  # another CPU
    monkeypatch.setattr(oc, "compiler_sha256", lambda: "0" * 64)
    assert _key(_plan(), host) != base  # another compiler
    monkeypatch.undo()
    import llvmlite

    monkeypatch.setattr(llvmlite, "__version__", "0.0.0")
    assert _key(_plan(), host) != base  # another llvmlite
    monkeypatch.undo()
    p = _plan()
    kplan, _ = _kernels(p, host)
    parts = oc.key_parts(host)
    moved = dataclasses.replace(kplan, packed_bytes=kplan.packed_bytes + 64)
    assert oc.plan_key(moved, parts) != oc.plan_key(kplan, parts)  # one field of the plan
    parts2 = {**parts, "table": "another table"}
    assert oc.plan_key(kplan, parts2) != oc.plan_key(kplan, parts)


def test_the_compiler_hash_reads_every_source_file(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("y = 2\n")
    first = sources_sha256(tmp_path)
    (tmp_path / "sub" / "b.py").write_text("y = 3\n")
    sources_sha256.cache_clear()
    assert sources_sha256(tmp_path) != first
    sources_sha256.cache_clear()
    assert oc.compiler_sha256() == sources_sha256(oc.COMPILER_ROOT)


def test_a_damaged_entry_is_compiled_again(tmp_path, monkeypatch):
    target = host_target()
    kplan, _ = _kernels(_plan(), target)
    good = oc.code_for(kplan, target, tmp_path)
    (entry,) = [d for d in tmp_path.iterdir() if not d.name.startswith(".")]
    (entry / "kernels.o").write_bytes(b"\x7fELF not an object")
    emits = _count_emits(monkeypatch)
    again = oc.code_for(kplan, target, tmp_path)
    assert emits == [1] and again.object_code == good.object_code
    assert (entry / "kernels.o").read_bytes() == good.object_code  # rewritten
    assert oc.code_for(kplan, target, tmp_path).object_code == good.object_code
    assert emits == [1]


def test_a_build_under_a_tuning_dispatch_never_uses_the_cache(tmp_path, monkeypatch):
    target = host_target()
    kplan, _ = _kernels(_plan(), target)
    emits = _count_emits(monkeypatch)
    d = Dispatch(None, "t", "c")
    with applied(d):
        oc.code_for(kplan, target, tmp_path)
        oc.code_for(kplan, target, tmp_path)
    assert emits == [1, 1] and not list(tmp_path.iterdir())
