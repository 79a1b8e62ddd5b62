"""Runtime: one arena, one weights blob, partitions in order; outputs equal the reference.

Fast tests use a small ONNX model built here (conv, LRN mid-network, concat, split,
reshape, gemm); the slow test runs every zoo model (the nine onnx light topologies
included) through import, O2, plan and the runtime.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.graph.memory import check_plan
from guard.compiler.partition.plan import partition_report, plan
from guard.compiler.runtime.engine import Runtime
from guard.compiler.runtime.weights import (
    WEIGHTS_SCHEMA_VERSION,
    WeightsLayout,
    pack_weights,
    weight_views,
)
from guard.core.errors import ModelError


def small_model() -> onnx.ModelProto:
    rng = np.random.default_rng(1)

    def init(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.3, name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("LRN", ["r"], ["n"], size=3),
        helper.make_node("Conv", ["n", "w2"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["d"]),
        helper.make_node("Split", ["d"], ["s1", "s2"], axis=1),
        helper.make_node("Add", ["s1", "s2"], ["e"]),
        helper.make_node("Concat", ["e", "r"], ["f"], axis=1),
        helper.make_node("Flatten", ["f"], ["g"]),
        helper.make_node("Gemm", ["g", "w3"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [init("w1", 8, 4, 3, 3), init("b1", 8), init("w2", 16, 8, 3, 3), init("w3", 10, 1024)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def feeds_for(graph):
    rng = np.random.default_rng(0)
    return {
        i: rng.standard_normal(graph.values[i].shape).astype(graph.values[i].dtype)
        for i in graph.inputs
    }


def test_runtime_equals_reference_native():
    g = import_onnx(small_model(), {"x": (1, 4, 8, 8)})
    compiled = plan(g)
    check_plan(compiled.memory)
    assert compiled.partition_report["count"] == 1
    rt = Runtime.from_plan(compiled)
    assert rt.arena.nbytes >= compiled.arena_bytes
    feeds = feeds_for(g)
    ref = run_reference(g, feeds)
    for _ in range(2):  # the arena is reused: a second run must not see the first's bytes
        out = rt.run(feeds)
        assert out.keys() == ref.keys()
        for k in ref:
            np.testing.assert_array_equal(out[k], ref[k])


def test_runtime_with_a_split_partition_equals_reference():
    g = import_onnx(small_model(), {"x": (1, 4, 8, 8)})
    compiled = plan(g, "gpu-lite")
    rep = compiled.partition_report
    assert [p["backend"] for p in rep["partitions"]] == ["gpu-lite", "cpu", "gpu-lite"]
    assert [s["op"] for s in rep["splits"]] == ["LRN"]
    assert "op LRN is excluded by gpu-lite" in compiled.partition_text()
    order_groups = [compiled.partitions.group_of[i] for i in compiled.memory.order]
    assert order_groups == sorted(order_groups)  # partitions run as contiguous blocks
    feeds = feeds_for(g)
    calls: list[str] = []

    def spy(name):
        from guard.compiler.runtime.engine import reference_executor

        def run(op, args, attrs):
            calls.append(f"{name}:{op}")
            return reference_executor(op, args, attrs)

        return run

    rt = Runtime.from_plan(compiled, {"gpu-lite": spy("gpu"), "cpu": spy("cpu")})
    out = rt.run(feeds)
    np.testing.assert_array_equal(out["y"], run_reference(g, feeds)["y"])
    assert "cpu:LRN" in calls and "gpu:Conv" in calls and "cpu:Conv" not in calls


def test_runtime_detects_a_corrupted_plan():
    """Equality with the reference is a real check: a plan with all tensors at 0 breaks it."""
    from guard.compiler.graph.memory import MemoryPlan

    g = import_onnx(small_model(), {"x": (1, 4, 8, 8)})
    compiled = plan(g)
    d = compiled.memory.to_dict()
    d["slots"] = [[s[0], 0, *s[2:]] for s in d["slots"]]
    bad = MemoryPlan.from_dict(d)
    blob, layout = pack_weights({k: c.data for k, c in g.constants.items()})
    rt = Runtime(compiled.view, bad, compiled.partitions.group_of, ("native",), blob, layout)
    feeds = feeds_for(g)
    assert not np.array_equal(rt.run(feeds)["y"], run_reference(g, feeds)["y"])


def test_runtime_refuses_bad_feeds():
    g = import_onnx(small_model(), {"x": (1, 4, 8, 8)})
    rt = Runtime.from_plan(plan(g))
    with pytest.raises(ModelError, match="no feed for input 'x'"):
        rt.run({})
    with pytest.raises(ModelError, match=r"shape \[1, 4, 4, 4\]"):
        rt.run({"x": np.zeros((1, 4, 4, 4), np.float32)})


def test_weights_blob_is_aligned_and_read_only():
    arrays = {"b": np.arange(3, dtype=np.int8), "a": np.ones((2, 3), np.float32)}
    blob, layout = pack_weights(arrays)
    assert [e.name for e in layout.entries] == ["a", "b"]
    assert all(e.offset % 64 == 0 for e in layout.entries)
    views = weight_views(blob, layout)
    np.testing.assert_array_equal(views["b"], arrays["b"])
    with pytest.raises(ValueError):
        views["a"][0, 0] = 2.0


def test_weights_index_round_trips_through_json():
    blob, layout = pack_weights({"w": np.arange(6, dtype=np.float32).reshape(2, 3)})
    index = json.loads(json.dumps(layout.to_dict()))
    assert index["schema_version"] == WEIGHTS_SCHEMA_VERSION
    assert WeightsLayout.from_dict(index) == layout


def test_partition_report_for_a_model_file(tmp_path):
    path = tmp_path / "small.onnx"
    onnx.save(small_model(), path)
    rep, text = partition_report(path, {"x": (1, 4, 8, 8)}, "gpu-lite")
    # After O2, Conv+Relu is one node: alone before the LRN it is below gpu-lite's
    # min_partition_size 2, so it joins the LRN on the cpu and one delegate partition is left.
    assert rep["count"] == 2 and rep["delegated_partitions"] == 1
    assert rep["fallback_partitions"] == 1
    assert {s["op"]: s["backend"] for s in rep["splits"]}["LRN"] == "cpu"
    assert "below min_partition_size 2" in text
    assert "small.onnx on gpu-lite" in text and "LRN" in text and "arena:" in text
    assert "kernels" not in rep  # gpu-lite is a delegate profile: no generated code
    rep, text = partition_report(path, {"x": (1, 4, 8, 8)}, None)
    assert (
        rep["count"] == 1
        and rep["memory"]["arena_bytes"] <= 1.10 * rep["memory"]["lower_bound_bytes"]
    )
    # The native partition lists which kernel each node became.
    assert [n for n, _, _ in rep["kernels"]][0] == "a" and "a -> k0_fusedconv (FusedConv)" in text


def _zoo() -> list[str]:
    from guard import zoo

    return zoo.list_models()  # every zoo model, including ones added later


@pytest.mark.slow
def test_every_zoo_model_plans_tightly_and_runs_exactly(summary_line):
    from guard import zoo

    ratios, failures = {}, []
    for name in _zoo():
        d = zoo.describe(name)
        shapes = {k: [1 if isinstance(x, str) else x for x in v] for k, v in d["inputs"].items()}
        g, _ = optimize(import_onnx(zoo.model_path(name), shapes), "O2")
        compiled = plan(g)
        check_plan(compiled.memory)
        ratios[name] = compiled.arena_bytes / compiled.lower_bound_bytes
        if compiled.partition_report["count"] != 1 or compiled.partition_report["fallback_nodes"]:
            failures.append(f"{name}: {compiled.partition_text()}")
        if ratios[name] > 1.10:
            failures.append(f"{name}: arena/lower bound {ratios[name]:.3f}")
        feeds = feeds_for(g)
        out = Runtime.from_plan(compiled).run(feeds)
        ref = run_reference(g, feeds)
        for k in ref:
            if not np.array_equal(out[k], ref[k], equal_nan=True):
                failures.append(f"{name}: output {k} differs from the reference")
    geomean = math.exp(sum(math.log(r) for r in ratios.values()) / len(ratios))
    summary_line(
        f"bundled arena / lower bound (zoo, O2, native): "
        f"{ {k: round(v, 4) for k, v in ratios.items()} } geomean {geomean:.4f}"
    )
    assert not failures, "\n".join(failures)


def _light_models() -> list[Path]:
    return sorted((Path(onnx.__file__).parent / "backend/test/data/light").glob("*.onnx"))


@pytest.mark.slow
def test_the_nine_onnx_light_topologies_as_shipped(summary_line):
    """The onnx wheel's light models themselves (weights stubbed by ConstantOfShape)."""
    paths = _light_models()
    assert len(paths) == 9
    ratios, failures = {}, []
    for path in paths:
        g, _ = optimize(import_onnx(path, None), "O2")
        compiled = plan(g)
        check_plan(compiled.memory)
        ratios[path.stem] = compiled.arena_bytes / compiled.lower_bound_bytes
        rep = compiled.partition_report
        if rep["count"] != 1 or rep["fallback_nodes"] or ratios[path.stem] > 1.10:
            failures.append(
                f"{path.stem}: ratio {ratios[path.stem]:.3f}\n{compiled.partition_text()}"
            )
        feeds = feeds_for(g)
        out, ref = Runtime.from_plan(compiled).run(feeds), run_reference(g, feeds)
        failures += [f"{path.stem}: {k} differs" for k in ref if not np.array_equal(out[k], ref[k])]
    summary_line(
        f"bundled arena / lower bound (light files as shipped): "
        f"{ {k: round(v, 4) for k, v in ratios.items()} }"
    )
    assert not failures, "\n".join(failures)


@st.composite
def random_ir_graphs(draw):
    """Random IR graphs over (1, c) / (c, 1) float tensors: views, slices, in-place ops."""
    from guard.compiler.ir.core import Graph

    g = Graph("random")
    g.add_input("x0", (1, draw(st.integers(1, 48))), np.float32)
    shapes = {"x0": g.values["x0"].shape}
    for i in range(draw(st.integers(1, 12))):
        op = draw(
            st.sampled_from(
                ["Relu", "Neg", "Add", "Concat", "Split", "Reshape", "Slice", "Transpose"]
            )
        )
        a = draw(st.sampled_from(sorted(shapes)))
        s = shapes[a]
        ins, attrs, outs = [a], {}, [(f"t{i}", s)]
        if op == "Add":
            ins = [a, draw(st.sampled_from(sorted(n for n in shapes if shapes[n] == s)))]
        elif op == "Concat":
            rows = sorted(n for n in shapes if shapes[n][0] == s[0])
            ins = draw(st.lists(st.sampled_from(rows), min_size=1, max_size=3))
            attrs = {"axis": 1}
            outs = [(f"t{i}", (s[0], sum(shapes[n][1] for n in ins)))]
        elif op in ("Split", "Slice") and (s[0] != 1 or s[1] < 2):
            continue
        elif op == "Split":
            at = draw(st.integers(1, s[1] - 1))
            attrs = {"axis": 1, "split": [at, s[1] - at]}
            outs = [(f"t{i}a", (1, at)), (f"t{i}b", (1, s[1] - at))]
        elif op == "Slice":
            lo = draw(st.integers(0, s[1] - 1))
            hi = draw(st.integers(lo + 1, s[1]))
            attrs = {"axes": [1], "starts": [lo], "ends": [hi], "steps": [1]}
            outs = [(f"t{i}", (1, hi - lo))]
        elif op == "Reshape":
            attrs = {"shape": [s[1], s[0]]}
            outs = [(f"t{i}", (s[1], s[0]))]
        elif op == "Transpose":
            attrs = {"perm": [1, 0]}
            outs = [(f"t{i}", (s[1], s[0]))]
        g.add_node(
            op, ins, [(sh, np.float32) for _, sh in outs], attrs, outputs=[o for o, _ in outs]
        )
        shapes.update(outs)
    produced = [o for n in g.nodes for o in n.outputs] or ["x0"]
    g.outputs = draw(st.lists(st.sampled_from(produced), min_size=1, max_size=3, unique=True))
    return g


@settings(max_examples=80, deadline=None)
@given(random_ir_graphs())
def test_runtime_equals_reference_on_random_ir_graphs(g):
    from guard.compiler import verify

    verify(g)
    compiled = plan(g)
    check_plan(compiled.memory)
    rt = Runtime.from_plan(compiled)
    feeds = feeds_for(g)
    ref = run_reference(g, feeds)
    for _ in range(2):
        out = rt.run(feeds)
        for k in ref:
            np.testing.assert_array_equal(out[k], ref[k])


def test_an_executor_that_returns_the_wrong_type_is_caught():
    from guard.compiler.runtime.engine import reference_executor
    from guard.core.errors import InternalError

    g = import_onnx(small_model(), {"x": (1, 4, 8, 8)})

    def sloppy(op, args, attrs):
        return [o.astype(np.float64) for o in reference_executor(op, args, attrs)]

    rt = Runtime.from_plan(plan(g), {"native": sloppy})
    with pytest.raises(InternalError, match="produced float64"):
        rt.run(feeds_for(g))
