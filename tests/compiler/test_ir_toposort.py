"""guard.compiler.ir.toposort: the compiler's one topological sort."""

from __future__ import annotations

from guard.compiler.ir.toposort import topological


def test_a_sorted_graph_keeps_its_order_and_ties_go_to_the_smallest_index() -> None:
    assert topological([[], [0], [0], [1, 2]]) == [0, 1, 2, 3]
    # 2 and 1 both wait on 3; once it is done, 1 comes before 2 (smallest index first)
    assert topological([[], [3], [3], [0], [1, 2, 2]]) == [0, 3, 1, 2, 4]


def test_a_cycle_leaves_its_nodes_and_their_users_out() -> None:
    order = topological([[], [2], [1], [2], []])
    assert order == [0, 4]  # 1 <-> 2 is a cycle, 3 reads from it
