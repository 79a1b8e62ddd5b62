"""A convolution's tuned schedule, end to end: tasks extracted from a model, a cache entry
with a non-default ConvSchedule (channel blocks, unroll, the other loop order) per task,
a bundled build that hits every task and emits those schedules, outputs equal to the
reference interpreter's; and `guard tune`'s measurement of a conv task."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from guard.backends import get_backend
from guard.backends.base import BuildRequest
from guard.compiler import import_onnx, run_reference
from guard.compiler.codegen.conv.schedule import conv_space
from guard.compiler.codegen.llvm_target import codegen_target
from guard.compiler.runtime.artefact import compiler_version
from guard.compiler.tuning.cache import Entry, merge_into
from guard.compiler.tuning.tune import extract_tasks, measure
from guard.manifest import canonicalize


def conv_model(path: Path) -> Path:
    """Two convolutions: 16 -> 48 3x3 on 11x11 (rows narrower than a tile), 48 -> 32 1x1."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array((rng.standard_normal((48, 16, 3, 3)) * 0.2).astype("f4"), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(48).astype("f4"), "b1")
    w2 = numpy_helper.from_array((rng.standard_normal((32, 48, 1, 1)) * 0.2).astype("f4"), "w2")
    g = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["a"], ["r"]),
            helper.make_node("Conv", ["r", "w2"], ["y"]),
        ],
        "convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 11, 11])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 11, 11])],
        [w1, b1, w2],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def test_a_tuned_conv_schedule_is_hit_and_correct(tmp_path):
    model = conv_model(tmp_path / "convs.onnx")
    host = canonicalize("host")
    shapes = {"x": (1, 16, 11, 11)}
    tasks = extract_tasks(model, shapes, host, compiler_version())
    assert [t.key.op for t in tasks] == ["conv", "conv"]
    entries, chosen = [], {}
    for t in tasks:
        # the last point of the space: most channel vectors, unrolled, rows outermost
        s = conv_space(t.shape)[-1]
        assert s != t.default and s.loop_order == "oh_kv"
        chosen[t.key.text] = s
        entries.append(Entry(t.key, s, 1e-5, t.default, 2e-5, {"measured": {"count": 1}}))
    cache = tmp_path / "cache.json"
    merge_into(cache, entries)
    be = get_backend("bundled")
    out = tmp_path / "art"
    info = be.build(BuildRequest(model_path=model, input_shapes=shapes, target_raw=host,
                                 target_canonical=host, threads=1, out_dir=out,
                                 tuning_cache=cache))  # fmt: skip
    assert (info.tuning["hits"], info.tuning["misses"]) == (2, 0)
    assert info.tuning["kernel_speedup"] == 2.0
    x = np.random.default_rng(1).standard_normal((1, 16, 11, 11)).astype(np.float32)
    (y,) = be.load(out, 1).run({"x": x})
    (ref,) = run_reference(import_onnx(model, shapes), {"x": x}).values()
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


def test_the_tuner_measures_conv_candidates(tmp_path):
    model = conv_model(tmp_path / "convs.onnx")
    host = canonicalize("host")
    (task, _) = extract_tasks(model, {"x": (1, 16, 11, 11)}, host, compiler_version())
    space = conv_space(task.shape)
    res = measure(task, [task.default, space[0], space[-1]], codegen_target(host), reps=2)
    assert [m.schedule for m in res] == [task.default, space[0], space[-1]]
    assert all(len(m.samples) == 2 and m.median > 0 for m in res)


def test_whole_tasks_are_the_steps_not_the_thread_split(tmp_path, monkeypatch):
    """``whole=True`` (the per-layer benchmark's view): one task per convolution at its
    full FLOPs, where the thread split (its floor lowered) would give per-task pieces."""
    from guard.compiler.codegen import split

    monkeypatch.setattr(split, "MIN_TASK_FLOPS", 1)
    model = conv_model(tmp_path / "convs.onnx")
    target = canonicalize("llvm -mcpu=x86-64-v3 -mtriple=x86_64-linux-gnu")
    full = {2 * 48 * 16 * 9 * 121, 2 * 32 * 48 * 121}
    whole = extract_tasks(model, {"x": (1, 16, 11, 11)}, target, "t", whole=True)
    assert {t.flops for t in whole if t.key.op == "conv"} == full
    assert all(t.count == 1 for t in whole)
    parts = extract_tasks(model, {"x": (1, 16, 11, 11)}, target, "t")
    assert max(t.flops for t in parts if t.key.op == "conv") < min(full)
