"""The memory-aware scheduler (rung 2 of the budget ladder): exact on small graphs, a
bounded beam on large ones, partition-contiguous, and no change to the outputs."""

from __future__ import annotations

import itertools

import numpy as np

from guard.compiler import optimize, run_reference
from guard.compiler.graph.exec_order import schedule
from guard.compiler.graph.memory import check_plan, plan_memory
from guard.compiler.graph.memory_order import memory_order
from guard.compiler.graph.view import GraphView, OpNode, TensorInfo, peak_live_bytes
from guard.compiler.partition.plan import plan
from guard.compiler.runtime.engine import Runtime

from ._helpers import HEADER, feeds_for, graph_of

KiB = 1024


def fan(widths: list[int], tail: int) -> GraphView:
    """One input feeding branches b_i (a big temporary h_i, then a small r_i), all joined.

    x [16 KiB] -> h_i [widths[i] KiB] -> r_i [tail KiB] -> out = sum of r_i.
    Running each branch to its small end before starting the next keeps one h_i live at a
    time, while breadth-first (every h_i first) holds all of them. The exact search must find the depth-first order, with the
    widest branch first (its r joins fewer finished r's).
    """
    nodes, tensors = [], {"x": TensorInfo("x", (16 * KiB,), "uint8", "input")}
    joins = []
    for i, w in enumerate(widths):
        tensors[f"h{i}"] = TensorInfo(f"h{i}", (w * KiB,), "uint8")
        tensors[f"r{i}"] = TensorInfo(f"r{i}", (tail * KiB,), "uint8")
        joins.append(f"r{i}")
    for i in range(len(widths)):  # breadth-first in the node list: the worst order
        nodes.append(OpNode(f"big{i}", "Relu", ("x",), (f"h{i}",)))
    for i in range(len(widths)):
        nodes.append(OpNode(f"small{i}", "Relu", (f"h{i}",), (f"r{i}",)))
    tensors["out"] = TensorInfo("out", (tail * KiB,), "uint8")
    nodes.append(OpNode("join", "Sum", tuple(joins), ("out",)))
    return GraphView(nodes, tensors, ["x"], ["out"])


def brute_force(g: GraphView) -> int:
    best = None
    for perm in itertools.permutations(range(len(g.nodes))):
        pos = {n: k for k, n in enumerate(perm)}
        if all(pos[p] < pos[i] for i in range(len(g.nodes)) for p in g.preds[i]):
            pk = peak_live_bytes(g, perm)
            best = pk if best is None else min(best, pk)
    assert best is not None
    return best


def test_exact_matches_brute_force_and_beats_breadth_first():
    g = fan([64, 32, 48], 4)
    o = memory_order(g)
    assert o.exact
    assert o.peak_bytes == brute_force(g)
    # Depth-first, widest first: small0 holds x 16 + h0 64 + r0 4 = 84 KiB (a reader's
    # step holds its input and its output); later branches hold less (16 + 4 + 48 + 4).
    assert o.peak_bytes == 84 * KiB
    assert peak_live_bytes(g, range(len(g.nodes))) == (16 + 64 + 32 + 48) * KiB
    assert o.peak_bytes <= schedule(g).peak_bytes


def test_beam_is_bounded_and_says_so():
    g = fan([8 + i for i in range(10)], 1)
    o = memory_order(g, width=2)
    assert not o.exact  # a level had more than 2 states
    assert sorted(o.order) == list(range(len(g.nodes)))
    assert o.peak_bytes == peak_live_bytes(g, o.order)
    assert o.peak_bytes <= peak_live_bytes(g, range(len(g.nodes)))


def test_time_bound_completes_greedily():
    ticks = iter(range(0, 10**6, 5))  # a fake clock: every call is 5 s later
    g = fan([8, 9, 10], 1)
    o = memory_order(g, budget_s=1.0, clock=lambda: float(next(ticks)))
    assert not o.exact
    assert sorted(o.order) == list(range(len(g.nodes)))


def test_partitions_stay_contiguous():
    g = fan([64, 32, 48], 4)
    # branch i (big_i, small_i) is partition i; the join is partition 3
    group_of = [0, 1, 2, 0, 1, 2, 3]
    o = memory_order(g, group_of)
    runs = [group_of[i] for i in o.order]
    blocks = [k for k, _ in itertools.groupby(runs)]
    assert len(blocks) == len(set(blocks))  # each partition is one run of the order


def test_reordered_plan_runs_to_the_same_outputs():
    g = graph_of(
        f"""{HEADER}
        agraph (float[1,8,16,16] x) => (float[1,32,16,16] y) {{
            a = Relu(x)
            b = Sigmoid(x)
            a2 = Concat<axis=1>(a, a, a, a)
            b2 = Concat<axis=1>(b, b, b, b)
            a3 = Tanh(a2)
            b3 = Neg(b2)
            y = Add(a3, b3)
        }}"""
    )
    opt, _ = optimize(g, "O2")
    compiled = plan(opt)
    o = memory_order(compiled.view)
    mem = plan_memory(compiled.view, o.order)
    check_plan(mem)
    feeds = feeds_for(opt)
    import dataclasses

    rt = Runtime.from_plan(dataclasses.replace(compiled, memory=mem))
    got = rt.run(feeds)
    want = run_reference(opt, feeds)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
