"""guard.compiler.graph.grouping: the one partition grouping (bundled partitioner, onnxruntime)."""

from __future__ import annotations

import pytest

from guard.compiler.graph.grouping import absorb_isolated, group_connected, merge_while_acyclic


def _groups(preds: list[list[int]], assign: list[str], *, merge: bool = False) -> list[list[int]]:
    groups, _ = group_connected(preds, assign)
    if merge:
        merge_while_acyclic(groups, assign)
    return sorted(sorted(m) for m in groups.members.values())


def test_a_chain_on_one_assignment_is_one_group():
    assert _groups([[], [0], [1]], ["a"] * 3) == [[0, 1, 2]]


def test_a_merge_that_would_close_a_cycle_is_refused_and_reported():
    # 0(a) -> 1(b) -> 2(a), and 0 -> 2: joining 2 to 0 would put b both before and after.
    groups, refused = group_connected([[], [0], [0, 1]], ["a", "b", "a"])
    assert sorted(sorted(m) for m in groups.members.values()) == [[0], [1], [2]]
    assert refused == [(2, 0)]


def test_nodes_out_of_order_are_visited_in_dependency_order():
    # Node 0 reads node 2's output: the grouping sorts before it joins.
    assert _groups([[2], [0], []], ["a"] * 3) == [[0, 1, 2]]
    with pytest.raises(ValueError, match="cycle"):
        group_connected([[1], [0]], ["a", "a"])


def test_disconnected_groups_merge_only_when_no_path_leaves_the_assignment():
    # Two separate a-chains: one group after the merge.
    assert _groups([[], [0], [], [2]], ["a"] * 4, merge=True) == [[0, 1, 2, 3]]
    # a -> b -> a: the two a's stay apart, merged or not.
    assert _groups([[], [0], [1]], ["a", "b", "a"], merge=True) == [[0], [1], [2]]


def test_an_isolated_node_joins_the_largest_group_of_its_assignment():
    preds = [[], [0], [], []]  # 2 and 3 have no edges
    succs = [[1], [], [], []]
    assign = ["a", "a", "a", "b"]
    groups, _ = group_connected(preds, assign)
    absorb_isolated(groups, preds, succs, assign)
    assert sorted(sorted(m) for m in groups.members.values()) == [[0, 1, 2], [3]]
