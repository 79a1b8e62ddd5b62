"""Memory planner: the textbook example, the inception problem, aliasing, and properties.

The property tests run the plan: every tensor is a numpy view at its planned offset in
one arena, elided nodes do nothing, every other node computes and writes its outputs
there. If two tensors that are live together overlapped, or an alias were unsafe, a value
read later would have been overwritten and the outputs would differ from plain execution.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guard.compiler.graph.exec_order import schedule
from guard.compiler.graph.memory import MemoryPlan, check_plan, plan_memory
from guard.compiler.graph.memory_alias import SLICE_VIEW_OPS, Aliasing, alias_buffers
from guard.compiler.graph.view import GraphView, OpNode, TensorInfo, liveness, peak_live_bytes

KiB = 1024


def view(spec, tensors, inputs, outputs):
    nodes = [OpNode(n, op, tuple(i), tuple(o), attrs) for n, op, i, o, attrs in spec]
    return GraphView(nodes, {t.name: t for t in tensors}, inputs, outputs)


def textbook() -> GraphView:
    """A seven-op backbone slice with a long skip, int8 activations (bytes = elements).

    x  [1,3,1024,1024]  3072 KiB  input image
    t0 [1,16,256,256]   1024 KiB  stem conv, stride 4          (x  -> t0)
    t1 [1,32,256,256]   2048 KiB  conv 3x3                      (t0 -> t1)  long skip
    t2 [1,32,128,128]    512 KiB  conv 3x3 stride 2             (t1 -> t2)
    t3 [1,32,64,64]      128 KiB  conv 3x3 stride 2             (t2 -> t3)
    t4 [1,32,64,64]      128 KiB  conv 3x3                      (t3 -> t4)
    t5 [1,32,256,256]   2048 KiB  resize x4                     (t4 -> t5)
    t6 [1,64,256,256]   4096 KiB  concat(t1, t5) on channels    (graph output)

    naive = 3072+1024+2048+512+128+128+2048+4096 = 13056 KiB.
    Peak at the concat: t1 + t5 + t6 = 8192 KiB. Greedy places t6 at 0, t1 at 4096,
    t5 at 6144, and fits everything else below: arena 8192 KiB, zero fragmentation.
    With the concat elided, t1 and t5 are written straight into t6 (one 4096 KiB buffer
    live from step 1) and the peak is at step 1: t0 + t6 = 5120 KiB.
    """
    shapes = {
        "x": (1, 3, 1024, 1024), "t0": (1, 16, 256, 256), "t1": (1, 32, 256, 256),
        "t2": (1, 32, 128, 128), "t3": (1, 32, 64, 64), "t4": (1, 32, 64, 64),
        "t5": (1, 32, 256, 256), "t6": (1, 64, 256, 256),
    }  # fmt: skip
    tensors = [
        TensorInfo(n, s, "int8", "input" if n == "x" else "value") for n, s in shapes.items()
    ]
    spec = [
        ("stem", "Conv", ["x"], ["t0"], {}),
        ("conv1", "Conv", ["t0"], ["t1"], {}),
        ("down1", "Conv", ["t1"], ["t2"], {}),
        ("down2", "Conv", ["t2"], ["t3"], {}),
        ("conv4", "Conv", ["t3"], ["t4"], {}),
        ("up", "Resize", ["t4"], ["t5"], {}),
        ("cat", "Concat", ["t1", "t5"], ["t6"], {"axis": 1}),
    ]
    return view(spec, tensors, ["x"], ["t6"])


def inception() -> GraphView:
    """x (1024 KiB) feeds four branches of 512 KiB each, concatenated into 2048 KiB."""
    tensors = [TensorInfo("x", (1, 256, 64, 64), "int8", "input")]
    tensors += [TensorInfo(f"b{k}", (1, 128, 64, 64), "int8") for k in range(4)]
    tensors += [TensorInfo("y", (1, 512, 64, 64), "int8")]
    spec = [(f"branch{k}", "Conv", ["x"], [f"b{k}"], {}) for k in range(4)]
    spec += [("cat", "Concat", [f"b{k}" for k in range(4)], ["y"], {"axis": 1})]
    return view(spec, tensors, ["x"], ["y"])


def test_textbook_numbers():
    g = textbook()
    plain = plan_memory(g, elide=False)
    check_plan(plain)
    assert plain.naive_bytes == 13056 * KiB
    assert plain.lower_bound_bytes == 8192 * KiB
    assert plain.arena_bytes == 8192 * KiB
    assert plain.fragmentation == 0.0
    assert not plain.elided_nodes
    elided = plan_memory(g)
    check_plan(elided)
    assert elided.elided_nodes == ("cat",)
    assert elided.lower_bound_bytes == 5120 * KiB
    assert elided.arena_bytes == 5120 * KiB
    assert elided.unaliased_peak_bytes == 8192 * KiB
    t6 = elided.slots["t6"].offset
    assert elided.slots["t1"].offset == t6
    assert elided.slots["t5"].offset == t6 + 2048 * KiB


def test_inception_problem_numbers():
    g = inception()
    plain = plan_memory(g, elide=False)
    check_plan(plain)
    # Before the concat x and all four branches are live (3072); at it, the branches and y.
    assert plain.lower_bound_bytes == 4096 * KiB
    assert plain.arena_bytes == 4096 * KiB
    elided = plan_memory(g)
    check_plan(elided)
    # The branches write into y, allocated from the first branch: x + y = 3072 KiB.
    assert elided.lower_bound_bytes == 3072 * KiB
    assert elided.arena_bytes == 3072 * KiB
    assert [elided.slots[f"b{k}"].offset - elided.slots["y"].offset for k in range(4)] == [
        k * 512 * KiB for k in range(4)
    ]


def test_concat_not_elided_when_outer_dim_is_not_one():
    g = view(
        [("a", "Relu", ["x"], ["p"], {}), ("b", "Relu", ["x"], ["q"], {}),
         ("cat", "Concat", ["p", "q"], ["y"], {"axis": 1})],
        [TensorInfo("x", (2, 64), "float32", "input"), TensorInfo("p", (2, 64), "float32"),
         TensorInfo("q", (2, 64), "float32"), TensorInfo("y", (2, 128), "float32")],
        ["x"], ["y"],
    )  # fmt: skip
    plan = plan_memory(g)
    assert "cat" not in plan.elided_nodes
    assert plan.slots["p"].how == "own"
    assert "slices are strided" in plan.copies["cat"]


def test_concat_input_claimed_once_and_graph_inputs_never_parts():
    # densenet shape: the second concat reuses a part of the first, so it materialises.
    g = view(
        [("f1", "Relu", ["x"], ["a"], {}), ("f2", "Neg", ["x"], ["b"], {}),
         ("c1", "Concat", ["a", "b"], ["ab"], {"axis": 1}),
         ("f3", "Neg", ["ab"], ["c"], {}),
         ("c2", "Concat", ["a", "c"], ["ac"], {"axis": 1}),
         ("c3", "Concat", ["x", "c"], ["xc"], {"axis": 1})],
        [TensorInfo("x", (1, 16), "float32", "input"), TensorInfo("a", (1, 16), "float32"),
         TensorInfo("b", (1, 16), "float32"), TensorInfo("ab", (1, 32), "float32"),
         TensorInfo("c", (1, 32), "float32"), TensorInfo("ac", (1, 48), "float32"),
         TensorInfo("xc", (1, 48), "float32")],
        ["x"], ["ac", "xc"],
    )  # fmt: skip
    plan = plan_memory(g)
    check_plan(plan)
    # a can be a slice of ab or of ac, not both (the planner keeps the cheaper one).
    assert len({"c1", "c2"} & set(plan.elided_nodes)) == 1
    assert "c3" not in plan.elided_nodes  # x is a graph input
    assert "'x' is a graph input" in plan.copies["c3"]
    kept = ({"c1", "c2"} - set(plan.elided_nodes)).pop()
    assert "lower bound" in plan.copies[kept] or "inside another buffer" in plan.copies[kept]
    assert _run_planned(g, plan) == _run_plain(g)


def test_inplace_only_when_input_dies():
    g = view(
        [("r1", "Relu", ["x0"], ["a"], {}), ("r2", "Relu", ["a"], ["b"], {}),
         ("r3", "Relu", ["b"], ["c"], {}), ("add", "Add", ["b", "c"], ["d"], {})],
        [TensorInfo("x0", (1, 16), "float32", "input")]
        + [TensorInfo(n, (1, 16), "float32") for n in "abcd"],
        ["x0"], ["d"],
    )  # fmt: skip
    plan = plan_memory(g)
    check_plan(plan)
    assert plan.slots["b"].how == "inplace" and plan.slots["b"].offset == plan.slots["a"].offset
    assert plan.slots["c"].how == "own"  # b is still read by add
    assert "add" in plan.inplace_nodes
    off = plan_memory(g, inplace=False)
    assert not off.inplace_nodes and off.lower_bound_bytes >= plan.lower_bound_bytes


def test_plan_round_trips_through_dict():
    plan = plan_memory(textbook())
    again = MemoryPlan.from_dict(plan.to_dict())
    assert again == plan
    with pytest.raises(ValueError, match="schema_version"):
        MemoryPlan.from_dict({**plan.to_dict(), "schema_version": 99})


def test_plan_is_frozen():
    plan = plan_memory(textbook())
    with pytest.raises(AttributeError):
        plan.arena_bytes = 0  # type: ignore[misc]
    with pytest.raises(TypeError):
        plan.slots["x"] = None  # type: ignore[index]


def test_check_plan_catches_an_overlap():
    plan = plan_memory(inception(), elide=False)
    bad = MemoryPlan.from_dict(
        {
            **plan.to_dict(),
            "buffer_table": [
                [b.id, 0, b.nbytes, b.start, b.end, list(b.tensors)] for b in plan.buffers
            ],
        }
    )
    with pytest.raises(AssertionError, match="overlap"):
        check_plan(bad)


# -- random graphs, executed in the arena ----------------------------------------------------

KERNELS = {
    "Relu": lambda xs, n: [np.maximum(xs[0], 0)],
    "Neg": lambda xs, n: [-xs[0]],
    "Add": lambda xs, n: [xs[0] + xs[1]],
    "Grow": lambda xs, n: [
        np.concatenate([xs[0] * 0.5, np.ones((1, n.attrs["k"]), np.float32)], axis=1)
    ],
    "Reshape": lambda xs, n: [xs[0].reshape(n.attrs["shape"])],
    "Identity": lambda xs, n: [xs[0].copy()],
    "Concat": lambda xs, n: [np.concatenate(xs, axis=1)],
    "Split": lambda xs, n: np.split(xs[0], [n.attrs["at"]], axis=1),
    "Slice": lambda xs, n: [xs[0][:, n.attrs["starts"][0] : n.attrs["ends"][0]]],
}


@st.composite
def random_dags(draw):
    tensors = {"x0": TensorInfo("x0", (1, draw(st.integers(1, 40))), "float32", "input")}
    spec = []
    for i in range(draw(st.integers(1, 14))):
        names = list(tensors)
        op = draw(st.sampled_from(sorted(KERNELS)))
        a = draw(st.sampled_from(names))
        shape = tensors[a].shape
        ins, outs = [a], [(f"t{i}", shape)]
        attrs = {}
        if op == "Add":
            same = [n for n in names if tensors[n].shape == shape]
            ins = [a, draw(st.sampled_from(same))]
        elif op == "Grow":
            attrs = {"k": draw(st.integers(1, 24))}
            outs = [(f"t{i}", (1, shape[-1] + attrs["k"]))] if shape[0] == 1 else []
        elif op == "Reshape":
            attrs = {"shape": shape[::-1]}
            outs = [(f"t{i}", shape[::-1])]
        elif op == "Concat":
            rows = [n for n in names if tensors[n].shape[0] == shape[0]]
            if len(rows) < 2:
                continue
            ins = draw(st.lists(st.sampled_from(rows), min_size=2, max_size=3, unique=True))
            outs = [(f"t{i}", (shape[0], sum(tensors[n].shape[1] for n in ins)))]
        elif op == "Split":
            if shape[0] != 1 or shape[1] < 2:
                outs = []
            else:
                at = draw(st.integers(1, shape[1] - 1))
                attrs = {"at": at, "axis": 1}
                outs = [(f"t{i}a", (1, at)), (f"t{i}b", (1, shape[1] - at))]
        elif op == "Slice":
            if shape[0] != 1:
                continue
            lo = draw(st.integers(0, shape[1] - 1))
            hi = draw(st.integers(lo + 1, shape[1]))
            attrs = {"axes": [1], "starts": [lo], "ends": [hi], "steps": [1]}
            outs = [(f"t{i}", (1, hi - lo))]
        if not outs:
            continue
        for name, s in outs:
            tensors[name] = TensorInfo(name, s, "float32")
        spec.append((f"n{i}", op, ins, [o for o, _ in outs], attrs))
    produced = [o for s in spec for o in s[3]]
    outputs = draw(
        st.lists(st.sampled_from(produced or ["x0"]), min_size=1, max_size=2, unique=True)
    )
    return view(spec, tensors.values(), ["x0"], outputs)


def _feeds(g):
    rng = np.random.default_rng(0)
    return {i: rng.standard_normal(g.tensors[i].shape).astype(np.float32) for i in g.inputs}


def _run_plain(g):
    env = dict(_feeds(g))
    for n in g.nodes:
        env.update(zip(n.outputs, KERNELS[n.op]([env[i] for i in n.inputs], n), strict=True))
    return [env[o].tolist() for o in g.outputs]


def _run_planned(g, plan):
    arena = np.full(plan.arena_bytes + 64, 255, np.uint8)  # NaN bytes where nothing was written

    def at(t):
        s = plan.slots[t]
        info = g.tensors[t]
        return arena[s.offset : s.offset + s.nbytes].view(info.dtype).reshape(info.shape)

    for k, v in _feeds(g).items():
        at(k)[...] = v
    elided = set(plan.elided_nodes)
    for i in plan.order:
        n = g.nodes[i]
        if n.name in elided:
            continue
        results = KERNELS[n.op]([at(x).copy() for x in n.inputs], n)
        for o, r in zip(n.outputs, results, strict=True):
            at(o)[...] = r
    return [at(o).tolist() for o in g.outputs]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_dags(), st.booleans())
def test_random_dag_plans_are_valid_and_run_correctly(g, reorder):
    order = schedule(g).order if reorder else None
    plan = plan_memory(g, order)
    check_plan(plan)  # live buffers disjoint, inside the arena, arena >= lower bound
    for s in plan.slots.values():
        assert 0 <= s.offset and s.offset + s.nbytes <= plan.arena_bytes
    # Tensors in different buffers that are live together never share a byte.
    slots = list(plan.slots.values())
    for a in slots:
        for b in slots:
            if (
                a.buffer != b.buffer
                and a.start <= b.end
                and b.start <= a.end
                and a.nbytes
                and b.nbytes
            ):
                assert a.offset + a.nbytes <= b.offset or b.offset + b.nbytes <= a.offset
    assert plan.lower_bound_bytes <= plan.arena_bytes <= plan.naive_bytes
    assert plan.unaliased_peak_bytes == peak_live_bytes(g, plan.order)
    assert _run_planned(g, plan) == _run_plain(g)


def test_planned_run_detects_a_broken_plan():
    """The executed check can fail: place every buffer at offset 0 and outputs change."""
    g2 = view(
        [("a", "Neg", ["x0"], ["p"], {}), ("b", "Neg", ["x0"], ["q"], {}), ("c", "Add", ["p", "q"], ["r"], {})],
        [TensorInfo("x0", (1, 16), "float32", "input")] + [TensorInfo(n, (1, 16), "float32") for n in "pqr"],
        ["x0"], ["r"],
    )  # fmt: skip
    ok2 = plan_memory(g2)
    bad2 = MemoryPlan.from_dict(
        {
            **ok2.to_dict(),
            "slots": [
                [s.name, 0, s.nbytes, s.buffer, s.start, s.end, s.how] for s in ok2.slots.values()
            ],
        }
    )
    assert _run_planned(g2, ok2) == _run_plain(g2)
    assert _run_planned(g2, bad2) != _run_plain(g2)


def test_an_elision_that_raises_the_peak_is_undone():
    """p is made first and small, q late; eliding the concat keeps p+q live from step 0,
    across the two 4 KiB temporaries: the planner keeps the concat a copy and says why."""
    g = view(
        [("P", "Relu", ["x"], ["p"], {}), ("T1", "Conv", ["x"], ["t1"], {}),
         ("T2", "Conv", ["t1"], ["t2"], {}), ("Q", "Conv", ["t2"], ["q"], {}),
         ("cat", "Concat", ["p", "q"], ["y"], {"axis": 1})],
        [TensorInfo("x", (1, 16), "float32", "input"), TensorInfo("p", (1, 16), "float32"),
         TensorInfo("t1", (1, 1024), "float32"), TensorInfo("t2", (1, 1024), "float32"),
         TensorInfo("q", (1, 256), "float32"), TensorInfo("y", (1, 272), "float32")],
        ["x"], ["y"],
    )  # fmt: skip
    plan = plan_memory(g)
    check_plan(plan)
    assert "cat" not in plan.elided_nodes
    assert "raised the lower bound" in plan.copies["cat"]
    assert plan.lower_bound_bytes == 64 + 4096 + 4096  # p, t1, t2 at T2


def _decisions(a: Aliasing) -> tuple[object, ...]:
    b = a.bufs
    return (b.of, b.size, b.members, b.how, a.elided, a.inplaced, a.copies)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_dags(), st.booleans())
def test_an_undo_trial_resumed_at_its_step_decides_as_one_from_the_start(g, reorder):
    """The planner's elision trials go on from the decisions before the undone node's
    step (taken without the undo): each equals the walk from step 0 with the undo."""
    order = schedule(g).order if reorder else tuple(range(len(g.nodes)))
    iv = liveness(g, order)
    steps = {s for s, i in enumerate(order) if g.nodes[i].op in SLICE_VIEW_OPS}
    first = alias_buffers(g, order, iv, True, True, keep_at=steps)
    assert set(first.before) == steps
    for s in steps:
        deny = frozenset({order[s]})
        whole = alias_buffers(g, order, iv, True, True, deny)
        resumed = alias_buffers(g, order, iv, True, True, deny, resume=(s, first.before[s]))
        assert _decisions(resumed) == _decisions(whole)
    assert _decisions(alias_buffers(g, order, iv, True, True)) == _decisions(first)
