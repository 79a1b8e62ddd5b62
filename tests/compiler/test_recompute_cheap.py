"""recompute_cheap (rung 3 of the budget ladder): a cheap tensor idle across the peak is
computed again for its late reader, and the arena drops by its size.

    x [64 KiB] -> r = Relu(x) [64 KiB] -> u = Sigmoid(r) -> big = Concat(u,u,u,u) [256 KiB]
    -> q = ReduceMean(big) -> z = Add(r, q) -> w = Add(z, x)

At the Concat step x, r, u and big are live: 64 + 64 + 64 + 256 = 448 KiB. r is read
before it (by Sigmoid) and after it (by the first Add), and Relu is cheap and reads x,
which is live at the late reader anyway. Recomputing r just before the Add lets the
first r die at the Sigmoid: 384 KiB.
"""

from __future__ import annotations

from guard.compiler.fit.ladder import searched
from guard.compiler.partition.plan import plan
from guard.compiler.passes.recompute_cheap import RecomputeCheap, candidates

from ._helpers import HEADER, apply, assert_same_outputs, graph_of

KiB = 1024

TEXT = f"""{HEADER}
agraph (float[16,1024] x) => (float[16,1024] w) {{
    r = Relu(x)
    u = Sigmoid(r)
    big = Concat<axis=0>(u, u, u, u)
    q = ReduceMean<axes=[0], keepdims=1>(big)
    z = Add(r, q)
    w = Add(z, x)
}}"""


def test_idle_cheap_tensor_is_recomputed_and_the_arena_drops():
    g = graph_of(TEXT)
    before = plan(g)
    found = candidates(before.view, before.memory)
    assert [t for t, _ in found] == ["r"]
    tiled, res = apply(RecomputeCheap(splits=tuple(found)), g)
    assert res.changed and res.stats["num_recomputed"] == 1
    assert [n.op for n in tiled.nodes].count("Relu") == 2
    # the default greedy would run the clone early again; the ladder re-plans with the
    # memory-aware order, which places it after the peak
    after = searched(plan(tiled), 5.0)[0]
    assert after.arena_bytes < before.arena_bytes
    assert before.arena_bytes - after.arena_bytes == 64 * KiB
    assert_same_outputs(g, tiled, rtol=0, atol=0)


def test_not_fired_when_the_inputs_would_have_to_stay_live():
    # r = Relu(t) where t dies at the Relu: recomputing r would keep t live instead
    text = TEXT.replace("r = Relu(x)", "t = Neg(x)\n    r = Relu(t)")
    g = graph_of(text)
    p = plan(g)
    assert "r" not in [t for t, _ in candidates(p.view, p.memory)]


def test_declines_a_tensor_not_written_by_an_elementwise_node():
    g = graph_of(TEXT)
    same, res = apply(RecomputeCheap(splits=(("big", ("q",)),)), g)
    assert not res.changed and "not written by one elementwise node" in res.notes[0]
