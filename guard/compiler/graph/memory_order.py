"""A memory-aware schedule: the order of nodes with the lowest peak of live bytes.

The budget ladder's second rung (guard.compiler.fit.ladder). The default scheduler
(guard.compiler.graph.exec_order) is a one-step greedy; this one searches.

Search: level by level (level k = every state with k nodes run), a state is the *set* of
nodes run so far, and two orders that ran the same set have the same live tensors, so
states are merged keeping the lower peak (dynamic programming over the graph's downsets).
Each level keeps at most ``width`` states, ranked by (peak so far, bytes live now). While
no level is cut the result is the exact minimum peak over all topological orders
(``Ordering.exact``); on larger graphs it is a beam search whose width is the bound, and
the search also stops at ``budget_s`` seconds (then the best state completes greedily).
Either way its compile time is reported (``seconds``).

Liveness is guard.compiler.graph.view's: a tensor is live from the step that writes it
through the last step that reads it; graph inputs from step 0, graph outputs to the end.
Sizes are 64-byte aligned. Aliasing is ignored here (views share bytes in the plan): the
planner re-plans the chosen order, and the ladder keeps it only when the arena drops.
Partition-contiguous: with ``group_of``, a partition once started runs to its end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from guard.compiler.graph.view import GraphView, align, peak_live_bytes


@dataclass(frozen=True)
class Ordering:
    order: tuple[int, ...]
    peak_bytes: int
    exact: bool  # no level was cut and the time bound was not hit: the minimum peak
    states: int  # states expanded
    seconds: float

    def describe(self) -> str:
        how = "exact (every downset kept)" if self.exact else "beam search"
        return f"{how}, {self.states} states, {self.seconds:.2f} s"


@dataclass
class _State:
    mask: int
    live: int
    peak: int
    group: int  # the open partition (-1: none)
    free: tuple[int, ...]  # nodes whose predecessors have all run
    parent: _State | None  # the state before the last node ran
    node: int  # the last node run (-1: none)
    rank: int  # the place of this state's order among its level's, lexicographically

    def order(self) -> list[int]:
        out, s = [], self
        while s.parent is not None:
            out.append(s.node)
            s = s.parent
        return out[::-1]


def memory_order(
    g: GraphView,
    group_of: Sequence[int] | None = None,
    *,
    width: int = 256,
    budget_s: float = 10.0,
    clock: Callable[[], float] = time.perf_counter,
) -> Ordering:
    """The order of ``g``'s nodes with the lowest peak found (see the module docstring)."""
    now = clock
    t0 = now()
    n = len(g.nodes)
    groups = list(group_of) if group_of is not None else [0] * n
    size = {t: align(g.tensors[t].nbytes) for t in g.arena_tensors()}
    outputs = set(g.outputs)
    cons_mask: dict[str, int] = {}
    for t, cs in g.consumers.items():
        m = 0
        for c in cs:
            m |= 1 << c
        cons_mask[t] = m
    pred_mask = [sum(1 << p for p in g.preds[i]) for i in range(n)]
    group_mask: dict[int, int] = {}
    for i, grp in enumerate(groups):
        group_mask[grp] = group_mask.get(grp, 0) | (1 << i)
    start_live = sum(size[t] for t in g.inputs if t in size)
    # A graph input nobody reads is live at step 0 only: it never frees (counted in start).
    roots = tuple(i for i in range(n) if not pred_mask[i])
    frontier = [_State(0, start_live, start_live, -1, roots, None, -1, 0)]
    exact = True
    states = 0
    full = (1 << n) - 1

    # Per node, what running it does to the live bytes: its outputs' bytes, those of its
    # outputs nobody reads (live at this step only), and (consumers, bytes) of each
    # distinct input that may free after it.
    writes = [sum(size[o] for o in nd.outputs if o in size) for nd in g.nodes]
    dead = [
        sum(size[o] for o in nd.outputs if o in size and o not in outputs and o not in cons_mask)
        for nd in g.nodes
    ]
    frees = [
        [(cons_mask.get(v, 0), size[v]) for v in dict.fromkeys(nd.inputs)
         if v in size and v not in outputs]
        for nd in g.nodes
    ]  # fmt: skip

    def run(s: _State, i: int) -> tuple[int, int, int]:
        """(mask, live bytes, peak) after running node ``i`` in state ``s``."""
        mask = s.mask | (1 << i)
        live = s.live + writes[i]
        peak = max(s.peak, live)
        for cm, sz in frees[i]:
            if cm & ~mask == 0:
                live -= sz
        return mask, live - dead[i], peak

    def step(s: _State, i: int, mask: int, live: int, peak: int, rank: int) -> _State:
        grp = groups[i]
        open_group = -1 if group_mask[grp] & ~mask == 0 else grp
        free = tuple(
            [j for j in s.free if j != i] + [k for k in g.succs[i] if pred_mask[k] & ~mask == 0]
        )
        return _State(mask, live, peak, open_group, free, s, i, rank)

    def ready(s: _State) -> list[int]:
        if s.group < 0:
            return list(s.free)
        return [i for i in s.free if groups[i] == s.group]

    # States of one level have orders of one length, so a child's order ranks by its
    # parent's rank, then its last node: states carry that rank, not their order, and
    # only the kept ones are made.
    for _level in range(n):
        if now() - t0 > budget_s:
            exact = False
            frontier = [_complete_greedy(frontier[0], run, step, ready, full)]
            break
        # mask -> (peak, live, parent's rank, node, parent): (rank, node) is unique, so
        # the tuples sort without reaching the parent
        best: dict[int, tuple[int, int, int, int, _State]] = {}
        for s in frontier:
            for i in ready(s):
                states += 1
                mask = s.mask | (1 << i)  # run(s, i), inline: the search's inner loop
                live = s.live + writes[i]
                peak = live if live > s.peak else s.peak
                for cm, sz in frees[i]:
                    if cm & ~mask == 0:
                        live -= sz
                live -= dead[i]
                old = best.get(mask)
                if old is None or (peak, live) < (old[0], old[1]):
                    best[mask] = (peak, live, s.rank, i, s)
        ranked = sorted(best.values())
        if len(ranked) > width:
            exact = False
            ranked = ranked[:width]
        rank = {(c[2], c[3]): r for r, c in enumerate(sorted(ranked, key=lambda c: (c[2], c[3])))}
        frontier = [
            step(c[4], c[3], c[4].mask | (1 << c[3]), c[1], c[0], rank[c[2], c[3]]) for c in ranked
        ]
    winner = min(frontier, key=lambda s: (s.peak, s.rank))
    order = tuple(winner.order())
    return Ordering(order, peak_live_bytes(g, order), exact, states, now() - t0)


def _complete_greedy(s: _State, run, step, ready, full: int) -> _State:  # type: ignore[no-untyped-def]
    """Finish ``s`` one node at a time, each the one that leaves the fewest live bytes
    (of equals, the lowest node: the orders differ only there)."""
    while s.mask != full:
        live, peak, i, mask = min((lv, pk, i, m) for i in ready(s) for m, lv, pk in [run(s, i)])
        s = step(s, i, mask, live, peak, 0)
    return s
