"""The one topological sort of the compiler: Kahn's algorithm, smallest index first.

Smallest index first keeps an already sorted list in its order (``range(n)``), so a
graph written in dependency order is not reshuffled; the ONNX importer (a model's nodes)
and the partitioner's grouping (node indices) both sort with it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence


def topological(preds: Sequence[Iterable[int]]) -> list[int]:
    """Indices in dependency order; ``preds[i]`` are the indices node i reads from.

    On a cycle the order is short: the nodes on a cycle, and those downstream of one,
    never become ready and are missing. The caller says what that means for it.
    """
    succs: list[list[int]] = [[] for _ in preds]
    indeg = [0] * len(preds)
    for i, ps in enumerate(preds):
        for p in set(ps):
            succs[p].append(i)
            indeg[i] += 1
    ready = [i for i, d in enumerate(indeg) if d == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for s in succs[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(ready, s)
    return order
