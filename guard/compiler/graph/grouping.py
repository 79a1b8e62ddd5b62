"""Grouping nodes into partitions: union of same-assignment nodes, keeping the collapsed
graph acyclic. One implementation, used by the bundled partitioner
(guard.compiler.partition.assign) and by the onnxruntime backend's partition report.

It sees only node indices, each node's predecessors and each node's assignment (a
backend or execution-provider name); what a node is, and why it was assigned where it is,
stays with the caller.

- :func:`group_connected`: nodes in topological order; a node joins the groups of its
  predecessors with the same assignment unless the merge would make the collapsed graph
  cyclic (a path from one group to the other through a third). Every group is convex.
- :func:`absorb_isolated`: a node with no edges at all joins the largest group of its
  assignment (it costs no boundary, so it should not count as a partition).
- :func:`merge_while_acyclic`: groups with the same assignment merge, connected or not,
  while no path between them leaves the assignment (two disconnected CPU chains are one
  partition; two CPU regions with a delegate region between them are two).
"""

from __future__ import annotations

from collections.abc import Sequence

from guard.compiler.ir.toposort import topological


class Groups:
    """Union of nodes into groups, keeping the collapsed graph (group successor sets)."""

    def __init__(self) -> None:
        self.of: dict[int, int] = {}  # node -> group id
        self.members: dict[int, list[int]] = {}  # group id -> nodes
        self.succ: dict[int, set[int]] = {}
        self.pred: dict[int, set[int]] = {}

    def add(self, node: int, preds: Sequence[int]) -> None:
        """``node`` as a group of its own; every one of ``preds`` is already added."""
        self.of[node] = node
        self.members[node] = [node]
        self.succ[node] = set()
        self.pred[node] = {self.of[p] for p in preds}
        for gp in self.pred[node]:
            self.succ[gp].add(node)

    def _reaches_indirectly(self, a: int, b: int) -> bool:
        """A path a -> x -> ... -> b in the collapsed graph with x not b."""
        seen, stack = {a, b}, [s for s in self.succ[a] if s != b]
        while stack:
            x = stack.pop()
            if x in seen:
                continue
            seen.add(x)
            for s in self.succ[x]:
                if s == b:
                    return True
                stack.append(s)
        return False

    def blocker(self, a: int, b: int) -> bool:
        """Merging groups ``a`` and ``b`` would make the collapsed graph cyclic."""
        return self._reaches_indirectly(a, b) or self._reaches_indirectly(b, a)

    def merge(self, a: int, b: int) -> int:
        """Merge two groups (into the larger one); returns the id that remains."""
        keep, gone = (a, b) if len(self.members[a]) >= len(self.members[b]) else (b, a)
        for n in self.members.pop(gone):
            self.of[n] = keep
            self.members[keep].append(n)
        for s in self.succ.pop(gone):
            self.pred[s].discard(gone)
            if s != keep:
                self.pred[s].add(keep)
                self.succ[keep].add(s)
        for p in self.pred.pop(gone):
            self.succ[p].discard(gone)
            if p != keep:
                self.succ[p].add(keep)
                self.pred[keep].add(p)
        self.succ[keep].discard(keep)
        self.pred[keep].discard(keep)
        return keep


def group_connected(
    preds: Sequence[Sequence[int]], assign: Sequence[str]
) -> tuple[Groups, list[tuple[int, int]]]:
    """Join each node to its same-assignment predecessors' groups while acyclic.

    Returns the groups and the (node, predecessor) pairs whose merge was refused because
    it would have made the collapsed graph cyclic, in the order they were met.
    """
    groups = Groups()
    refused: list[tuple[int, int]] = []
    order = topological(preds)
    if len(order) != len(preds):
        raise ValueError("the node graph has a cycle: it cannot be grouped")
    for i in order:
        groups.add(i, preds[i])
        for p in sorted(preds[i], reverse=True):
            if assign[p] != assign[i]:
                continue
            a, b = groups.of[i], groups.of[p]
            if a == b:
                continue
            if groups.blocker(a, b):
                refused.append((i, p))
                continue
            groups.merge(a, b)
    return groups, refused


def absorb_isolated(
    groups: Groups,
    preds: Sequence[Sequence[int]],
    succs: Sequence[Sequence[int]],
    assign: Sequence[str],
) -> None:
    """Each node with no edges at all joins the largest other group of its assignment."""
    for i in range(len(preds)):
        if preds[i] or succs[i] or len(groups.members[groups.of[i]]) > 1:
            continue
        same = [
            k for k, m in groups.members.items() if k != groups.of[i] and assign[m[0]] == assign[i]
        ]
        if same:
            groups.merge(max(same, key=lambda k: len(groups.members[k])), groups.of[i])


def merge_while_acyclic(groups: Groups, assign: Sequence[str]) -> None:
    """Merge same-assignment groups, first pair first (groups ordered by their smallest
    node), while some pair can merge without making the collapsed graph cyclic."""
    while True:
        ids = sorted(groups.members, key=lambda k: min(groups.members[k]))
        pair = next(
            (
                (a, b)
                for x, a in enumerate(ids)
                for b in ids[x + 1 :]
                if assign[groups.members[a][0]] == assign[groups.members[b][0]]
                and not groups.blocker(a, b)
            ),
            None,
        )
        if pair is None:
            return
        groups.merge(*pair)
