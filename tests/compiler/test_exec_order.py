"""Scheduler: liveness, the min-net-allocation heuristic against plain topological order."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guard.compiler.graph.exec_order import schedule, topological_order
from guard.compiler.graph.view import (
    GraphView,
    Interval,
    OpNode,
    TensorInfo,
    liveness,
    peak_live_bytes,
)
from guard.core.errors import ModelError


def two_towers() -> GraphView:
    """x feeds two towers, each big -> small; plain order runs both big layers together.

    Original order a1, b1, a2, b2, add: at b1, x + a1 + b1 = 64 + 1024 + 1024 bytes live.
    Finishing tower a first (a2 frees a1) keeps at most one big tensor live.
    """
    t = [TensorInfo("x", (64,), "uint8", "input")]
    t += [TensorInfo(n, (1024,), "uint8") for n in ("a1", "b1")]
    t += [TensorInfo(n, (64,), "uint8") for n in ("a2", "b2", "y")]
    nodes = [
        OpNode("A1", "Conv", ("x",), ("a1",)),
        OpNode("B1", "Conv", ("x",), ("b1",)),
        OpNode("A2", "Conv", ("a1",), ("a2",)),
        OpNode("B2", "Conv", ("b1",), ("b2",)),
        OpNode("ADD", "Add", ("a2", "b2"), ("y",)),
    ]
    return GraphView(nodes, {x.name: x for x in t}, ["x"], ["y"])


def test_liveness_intervals():
    g = two_towers()
    iv = liveness(g, range(5))
    assert iv["x"] == Interval(0, 1)
    assert iv["a1"] == Interval(0, 2)
    assert iv["y"] == Interval(4, 4)


def test_heuristic_beats_plain_order():
    g = two_towers()
    s = schedule(g)
    assert s.topo_peak_bytes == 64 + 1024 + 1024
    assert s.strategy == "min-net-alloc"
    assert s.peak_bytes == 64 + 1024 + 64  # x, b1 and a2 at B1
    assert s.peak_bytes == peak_live_bytes(g, s.order)
    assert [g.nodes[i].name for i in s.order] == ["A1", "A2", "B1", "B2", "ADD"]


def test_partition_contiguous_orders():
    g = two_towers()
    group_of = [0, 1, 0, 1, 2]  # tower a, tower b, the add
    order = topological_order(g, group_of)
    assert [group_of[i] for i in order] == [0, 0, 1, 1, 2]
    s = schedule(g, group_of)
    runs = [group_of[i] for i in s.order]
    assert runs == sorted(runs, key=runs.index)  # each group one contiguous run
    with pytest.raises(ValueError, match="convex"):
        topological_order(g, [0, 1, 1, 0, 2])  # {A1, B2} and {B1, A2}: each needs the other


def test_view_rejects_bad_graphs():
    x = {"x": TensorInfo("x", (4,), "float32", "input"), "y": TensorInfo("y", (4,), "float32")}
    with pytest.raises(ModelError, match="before it is computed"):
        GraphView([OpNode("n", "Relu", ("y",), ("y",))], x, ["x"], ["y"])
    with pytest.raises(ModelError, match="never computed"):
        GraphView([], x, ["x"], ["y"])
    dyn = TensorInfo("d", (-1, 4), "float32", "input")
    with pytest.raises(ModelError, match="dynamic shape"):
        _ = dyn.nbytes


@st.composite
def dags(draw):
    n = draw(st.integers(1, 16))
    tensors = {"x": TensorInfo("x", (draw(st.integers(1, 4096)),), "uint8", "input")}
    nodes = []
    for i in range(n):
        ins = draw(st.lists(st.sampled_from(sorted(tensors)), min_size=1, max_size=3, unique=True))
        tensors[f"t{i}"] = TensorInfo(f"t{i}", (draw(st.integers(1, 4096)),), "uint8")
        nodes.append(OpNode(f"n{i}", "Op", tuple(ins), (f"t{i}",)))
    return GraphView(nodes, tensors, ["x"], [f"t{n - 1}"])


@settings(max_examples=200, deadline=None)
@given(dags())
def test_schedule_is_valid_and_never_worse_than_topological(g):
    s = schedule(g)
    assert sorted(s.order) == list(range(len(g.nodes)))
    done = set()
    for i in s.order:
        assert all(p in done for p in g.preds[i])
        done.add(i)
    assert s.peak_bytes == peak_live_bytes(g, s.order) <= s.topo_peak_bytes
