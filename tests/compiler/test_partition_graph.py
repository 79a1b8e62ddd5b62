"""Partitioner, support predicates and delegate profiles, on hand-made graphs."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from guard.compiler.graph.exec_order import topological_order
from guard.compiler.graph.view import GraphView, OpNode, TensorInfo
from guard.compiler.partition.assign import format_report, partition, report_dict
from guard.compiler.partition.support import (
    CPU,
    NATIVE,
    AllOf,
    AttrRule,
    DtypeIn,
    NoControlFlow,
    OpIn,
    OpNotIn,
    PartitionTarget,
    StaticShapes,
    backends_for,
    list_profiles,
    load_profile,
    profile_from_dict,
)
from guard.core.errors import UsageError


def chain(ops, dtype="float32", size=256):
    """x -> n0 -> n1 -> ... with one tensor per node."""
    tensors = {"x": TensorInfo("x", (1, size), dtype, "input")}
    nodes, prev = [], "x"
    for i, op in enumerate(ops):
        tensors[f"t{i}"] = TensorInfo(f"t{i}", (1, size), dtype)
        nodes.append(OpNode(f"n{i}_{op.lower()}", op, (prev,), (f"t{i}",)))
        prev = f"t{i}"
    return GraphView(nodes, tensors, ["x"], [prev])


def no_lrn(min_size=1):
    return PartitionTarget("gpu", OpNotIn(frozenset({"LRN"}), " by gpu"),
                           min_partition_size=min_size, bandwidth_gb_s=1.0,
                           sync_us=100.0)  # fmt: skip


def test_native_takes_a_whole_graph():
    g = chain(["Relu", "Sigmoid", "Tanh", "Exp", "Erf"])
    plan = partition(g, backends_for(None))
    rep = report_dict(plan, g)
    assert rep["count"] == 1 and rep["fallback_nodes"] == 0 and rep["splits"] == []
    assert rep["boundaries"] == [] and rep["fallback_tax_ms"] == 0.0


def test_native_declines_an_op_without_an_emitter_by_name():
    # No silent interpretation: Sin has no emitter, so it is a named cpu partition.
    g = chain(["Relu", "Sin", "Tanh"])
    plan = partition(g, backends_for(None))
    rep = report_dict(plan, g)
    assert [p["backend"] for p in rep["partitions"]] == ["native", "cpu", "native"]
    assert plan.declines["n1_sin"]["native"] == "no emitter for Sin"
    assert "no emitter for Sin" in format_report(rep)


def test_unsupported_op_mid_network_splits_and_is_named():
    g = chain(["Conv", "Relu", "LRN", "Conv", "Relu"])
    plan = partition(g, [no_lrn(), CPU])
    rep = report_dict(plan, g)
    assert [p["backend"] for p in rep["partitions"]] == ["gpu", "cpu", "gpu"]
    assert rep["count"] == 3 and rep["delegated_partitions"] == 2
    assert rep["fallback_partitions"] == 1
    assert rep["delegated_nodes"] == 4 and rep["fallback_nodes"] == 1
    assert rep["splits"] == [
        {"node": "n2_lrn", "op": "LRN", "partition": 1, "backend": "cpu",
         "declined": {"gpu": "op LRN is excluded by gpu"}}
    ]  # fmt: skip
    # t1 goes gpu -> cpu, t2 cpu -> gpu: 1 KiB each, at 1 GB/s plus 100 us per edge.
    assert [(b["tensor"], b["from"], b["to"], b["bytes"]) for b in rep["boundaries"]] == [
        ("t1", 0, 1, 1024), ("t2", 1, 2, 1024)
    ]  # fmt: skip
    assert rep["fallback_tax_ms"] == pytest.approx(2 * (1024 / 1e9 * 1e3 + 0.1))
    text = format_report(rep, "chain")
    assert "n2_lrn (LRN)" in text and "op LRN is excluded by gpu" in text
    assert "3 partition(s): 2 delegated, 1 fallback" in text


def test_merge_that_would_make_a_cycle_is_refused():
    # a -> f (unsupported) -> c and a -> b -> c: {a, b, c} collapsed would need f inside.
    t = {n: TensorInfo(n, (8,), "float32", "input" if n == "x" else "value") for n in "xabfc"}
    nodes = [
        OpNode("A", "Conv", ("x",), ("a",)),
        OpNode("F", "LRN", ("a",), ("f",)),
        OpNode("B", "Conv", ("a",), ("b",)),
        OpNode("C", "Add", ("b", "f"), ("c",)),
    ]
    g = GraphView(nodes, t, ["x"], ["c"])
    plan = partition(g, [no_lrn(), CPU])
    assert plan.group_of[0] == plan.group_of[2] != plan.group_of[3]
    topological_order(g, plan.group_of)  # the collapsed graph is acyclic
    rep = report_dict(plan, g)
    c = [s for s in rep["splits"] if s["node"] == "C"]
    assert c and "cyclic" in c[0]["declined"]["gpu"]


def test_min_partition_size_sends_islands_to_the_fallback():
    g = chain(["LRN", "Conv", "LRN", "Conv", "Relu", "Gemm"])
    plan = partition(g, [no_lrn(min_size=2), CPU])
    rep = report_dict(plan, g)
    assert [(p["backend"], p["nodes"]) for p in rep["partitions"]] == [("cpu", 3), ("gpu", 3)]
    island = [s for s in rep["splits"] if s["node"] == "n1_conv"][0]
    assert "below min_partition_size 2" in island["declined"]["gpu"]


def test_predicates_decline_with_reasons():
    t = {
        "x": TensorInfo("x", (1, 8, 4, 4), "float32", "input"),
        "w": TensorInfo("w", (8, 8, 3, 3), "float32", "const"),
        "y": TensorInfo("y", (1, 8, 4, 4), "float32"),
        "d": TensorInfo("d", ("N", 8), "float32", "input"),
        "e": TensorInfo("e", ("N", 8), "float32"),
    }
    conv = OpNode("conv", "Conv", ("x", "w"), ("y",), {"dilations": [2, 2], "group": 1})
    dyn = OpNode("dyn", "Relu", ("d",), ("e",))
    loop = OpNode("loop", "Loop", ("x",), ("y",), has_subgraph=True)
    g = GraphView([conv, dyn], t, ["x", "d"], ["y", "e"])
    assert "float32" in DtypeIn(frozenset({"int8"})).decline(conv, g)
    assert DtypeIn(frozenset({"float32"})).decline(conv, g) is None
    assert "dilations=[2, 2]" in AttrRule("Conv", "dilations", "all_in", (1,)).decline(conv, g)
    assert AttrRule("Conv", "dilations", "max", 2).decline(conv, g) is None
    assert AttrRule("Conv", "group", "in", (1,)).decline(conv, g) is None
    assert AttrRule("Relu", "alpha", "max", 0).decline(conv, g) is None  # other op
    assert "dynamic axes" in StaticShapes().decline(dyn, g)
    assert "control flow" in NoControlFlow().decline(loop, g)
    assert "op Conv is not supported" in OpIn(frozenset({"Relu"})).decline(conv, g)
    both = AllOf((DtypeIn(frozenset({"int8"})), AttrRule("Conv", "dilations", "max", 1)))
    why = both.decline(conv, g)
    assert "float32" in why and "dilations" in why
    assert NATIVE.support.decline(conv, g) is None
    assert NATIVE.support.decline(dyn, g) is not None


def test_shipped_profiles_load_and_differ():
    names = list_profiles()
    assert {"native", "gpu-lite", "npu-int8"} <= set(names)
    for n in names:
        b = load_profile(n)
        assert b.name == n and not b.fallback
    g = chain(["Conv", "Relu", "LRN", "Conv", "Relu"])
    gpu = report_dict(partition(g, backends_for("gpu-lite")), g)
    assert gpu["count"] == 3 and gpu["delegated_partitions"] == 2
    assert [s["op"] for s in gpu["splits"]] == ["LRN"]
    npu = report_dict(partition(g, backends_for("npu-int8")), g)
    assert npu["count"] == 1 and npu["delegated_partitions"] == 0  # float model: all on cpu
    assert npu["fallback_nodes"] == 5
    assert "float32" in npu["splits"][0]["declined"]["npu-int8"]
    q = chain(["Conv", "Relu", "Conv", "Add"], dtype="int8")
    q_rep = report_dict(partition(q, backends_for("npu-int8")), q)
    assert q_rep["count"] == q_rep["delegated_partitions"] == 1


def test_profile_from_a_path(tmp_path):
    p = tmp_path / "mine.yaml"
    p.write_text(yaml.safe_dump({"schema_version": 1, "name": "mine", "ops": ["Conv"]}))
    g = chain(["Conv", "Conv", "Relu"])
    rep = report_dict(partition(g, backends_for(p)), g)
    assert rep["by_backend"] == {"mine": 2, "cpu": 1}


@pytest.mark.parametrize(
    "doc, key",
    [
        ({"name": "x"}, "schema_version"),
        ({"schema_version": 1}, "name"),
        ({"schema_version": 1, "name": "x", "opz": []}, "opz"),
        ({"schema_version": 1, "name": "x", "dtypes": ["int77"]}, "dtypes"),
        ({"schema_version": 1, "name": "x", "attributes": {"Conv": {"group": {"below": 2}}}},
         "attributes.Conv.group"),
        ({"schema_version": 1, "name": "x", "min_partition_size": 0}, "min_partition_size"),
    ],
)  # fmt: skip
def test_bad_profiles_name_the_key(doc, key):
    with pytest.raises(UsageError, match=key.replace(".", r"\.")) as err:
        profile_from_dict(doc, where="p.yaml")
    assert "p.yaml" in str(err.value)


def test_unknown_profile_lists_the_shipped_ones():
    with pytest.raises(UsageError, match="gpu-lite"):
        load_profile("no-such-profile")


@st.composite
def supported_dags(draw):
    n = draw(st.integers(1, 18))
    tensors = {"x": TensorInfo("x", (4,), "float32", "input")}
    nodes = []
    for i in range(n):
        ins = draw(st.lists(st.sampled_from(sorted(tensors)), min_size=1, max_size=3, unique=True))
        tensors[f"t{i}"] = TensorInfo(f"t{i}", (4,), "float32")
        op = draw(st.sampled_from(["Conv", "Conv", "Conv", "LRN"]))
        nodes.append(OpNode(f"n{i}", op, tuple(ins), (f"t{i}",)))
    return GraphView(nodes, tensors, ["x"], [f"t{n - 1}"]), draw(st.integers(1, 3))


@settings(max_examples=200, deadline=None)
@given(supported_dags())
def test_partitions_are_connected_convex_and_respect_support(case):
    g, min_size = case
    plan = partition(g, [no_lrn(min_size), CPU])
    topological_order(g, plan.group_of)  # raises if the collapsed graph has a cycle
    for p in plan.partitions:
        members = set(p.nodes)
        if p.backend == "gpu":
            assert all(g.nodes[i].op != "LRN" for i in members)
            assert len(members) >= min_size
        # connected (ignoring direction), apart from edge-less nodes, which join any
        members = {i for i in members if g.preds[i] or g.succs[i]}
        if not members:
            continue
        seen, stack = set(), [min(members)]
        while stack:
            i = stack.pop()
            if i in seen:
                continue
            seen.add(i)
            stack += [j for j in (*g.preds[i], *g.succs[i]) if j in members]
        assert seen == members
    # Maximal: no edge joins two gpu partitions that could merge without a cycle.
    for i in range(len(g.nodes)):
        for j in g.succs[i]:
            a, b = plan.group_of[i], plan.group_of[j]
            if a != b and plan.partitions[a].backend == plan.partitions[b].backend == "gpu":
                merged = [b if x == a else x for x in plan.group_of]
                with pytest.raises(ValueError):
                    topological_order(g, merged)


@pytest.mark.slow
def test_gpu_lite_splits_alexnet_at_its_lrns():
    """A delegate lacking an op used mid-network: the report shows the split and names it."""
    from guard import zoo
    from guard.compiler.partition.plan import partition_report

    rep, text = partition_report(zoo.model_path("alexnet"), {}, "gpu-lite")
    native, _ = partition_report(zoo.model_path("alexnet"), {}, None)
    assert native["count"] == 1 and native["fallback_nodes"] == 0
    lrn = [s for s in rep["splits"] if s["op"] == "LRN"]
    assert len(lrn) == 2 and all(
        "op LRN is excluded by gpu-lite" in s["declined"]["gpu-lite"] for s in lrn
    )
    assert rep["delegated_partitions"] >= 2 and rep["boundaries"] and rep["fallback_tax_ms"] > 0
    assert "(LRN)" in text


def test_ir_control_flow_goes_to_the_fallback_and_keeps_captures_alive():
    """An If whose branch reads an outer value: the view adds the capture as an input."""
    import numpy as np

    from guard.compiler.graph.view import liveness, view_of_graph
    from guard.compiler.ir.core import Graph

    g = Graph("outer")
    g.add_input("x", (1, 8), np.float32)
    g.add_input("c", (), np.bool_)
    g.add_node("Relu", ["x"], [((1, 8), np.float32)], outputs=["a"], name="relu_a")
    g.add_node("Relu", ["a"], [((1, 8), np.float32)], outputs=["b"], name="relu_b")
    branch = Graph("then")
    branch.add_node("Neg", ["a"], [((1, 8), np.float32)], outputs=["t"], name="neg_t")
    branch.outputs = ["t"]
    g.add_node("If", ["c"], [((1, 8), np.float32)], {"then_branch": branch, "else_branch": branch},
               outputs=["y"], name="if_1")  # fmt: skip
    g.add_node("Add", ["y", "b"], [((1, 8), np.float32)], outputs=["z"], name="add_z")
    g.outputs = ["z"]
    v = view_of_graph(g)
    node = v.nodes[2]
    assert node.has_subgraph and node.inputs == ("c", "a") and node.args == ("c",)
    assert liveness(v, range(4))["a"].end == 2  # a stays live until the If reads it
    rep = report_dict(partition(v, backends_for(None)), v)
    assert [(p["backend"], p["nodes"]) for p in rep["partitions"]] == [
        ("native", 2), ("cpu", 1), ("native", 1)
    ]  # fmt: skip
    assert "control flow" in rep["splits"][0]["declined"]["native"]
