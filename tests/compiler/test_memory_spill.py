"""Spill (rung 6 of the budget ladder): a tensor idle across the peak is copied to a
second region and back; the fast region shrinks by its size, outputs stay equal.

    x [64 KiB] -> r = Relu(x) -> u = Sigmoid(r) -> big = Concat(u,u,u,u) [256 KiB]
    -> q = ReduceMean(big) -> z = Add(r, q) -> w = Add(z, x)

At the Concat x, r, u and big are live (448 KiB). r is idle there: spilled after Relu
and filled before the first Add, the fast region holds x, u and big (384 KiB) and the
spill region r's 64 KiB; the copies move 128 KiB per inference.
"""

from __future__ import annotations

import dataclasses
import tempfile

import numpy as np

from guard.compiler import run_reference, verify
from guard.compiler.fit.ladder import climb
from guard.compiler.graph.memory import check_plan, plan_memory
from guard.compiler.graph.memory_spill import (
    fills_late,
    insert_copies,
    spill_candidates,
    spill_traffic,
    split_regions,
)
from guard.compiler.partition.plan import plan
from guard.compiler.runtime.artefact import load_artefact, save_artefact
from guard.compiler.runtime.engine import Runtime

from ._helpers import HEADER, feeds_for, graph_of

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


def spilled():
    g = graph_of(TEXT)
    before = plan(g)
    cands = spill_candidates(before.view, before.memory)
    assert [t for t, _ in cands] == ["r"]
    g2 = g.clone()
    insert_copies(g2, *cands[0])
    verify(g2)
    p = plan(g2)
    mem = plan_memory(p.view, fills_late(p.view, p.memory.order))
    split, fast, spill = split_regions(mem)
    return g, before, dataclasses.replace(p, memory=split), fast, spill


def test_the_fast_region_shrinks_by_the_spilled_tensor():
    g, before, after, fast, spill = spilled()
    assert before.arena_bytes == 448 * KiB
    assert fast == 384 * KiB and spill == 64 * KiB
    assert after.arena_bytes == fast + spill  # one allocation: fast region, then spill
    assert spill_traffic(after.memory) == 128 * KiB
    check_plan(after.memory)
    slow = [s for t, s in after.memory.slots.items() if t.endswith("/spilled")]
    assert slow and all(s.offset >= fast for s in slow)


def test_spilled_plan_runs_to_the_same_outputs():
    g, _, after, _, _ = spilled()
    feeds = feeds_for(g)
    want = run_reference(g, feeds)["w"]
    np.testing.assert_array_equal(Runtime.from_plan(after).run(feeds)["w"], want)
    with tempfile.TemporaryDirectory() as d:  # the generated code, at the split offsets
        save_artefact(after, d)
        got = load_artefact(d).runtime().run(feeds)["w"]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_the_ladder_fits_by_spilling_and_says_what_it_costs():
    # x dies before the peak: recomputing r (rung 3) would need x; spilling does not
    text = TEXT.replace("u = Sigmoid(r)", "u = Add(r, x)").replace("w = Add(z, x)", "w = Neg(z)")
    g = graph_of(text)
    ladder = climb(g, 350 * KiB)
    assert [s.arena_bytes for s in ladder.steps[:3]] == [384 * KiB] * 3
    assert ladder.fits and ladder.rung == 6
    step = ladder.steps[-1]
    assert step.name == "spill" and step.arena_bytes == 320 * KiB
    assert step.spill_bytes == 64 * KiB and step.spill_traffic_bytes == 128 * KiB
    assert "outside the budget" in step.what
    d = ladder.to_dict()["ladder"][-1]
    assert d["spill_bytes"] == 64 * KiB


def test_nothing_to_spill_when_every_live_tensor_is_read_at_the_peak():
    g = graph_of(
        f"""{HEADER}
        agraph (float[16,1024] x) => (float[64,1024] y) {{
            y = Concat<axis=0>(x, x, x, x)
        }}"""
    )
    p = plan(g)
    assert spill_candidates(p.view, p.memory) == []
