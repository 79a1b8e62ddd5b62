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
    order: list[int]
    live: int
    peak: int
    group: int  # the open partition (-1: none)
    free: tuple[int, ...]  # nodes whose predecessors have all run


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
    frontier = [_State(0, [], start_live, start_live, -1, roots)]
    exact = True
    states = 0
    full = (1 << n) - 1

    def step(s: _State, i: int) -> _State:
        node = g.nodes[i]
        mask = s.mask | (1 << i)
        outs = [o for o in node.outputs if o in size]
        live = s.live + sum(size[o] for o in outs)
        peak = max(s.peak, live)
        for v in dict.fromkeys(node.inputs):
            if v in size and v not in outputs and cons_mask.get(v, 0) & ~mask == 0:
                live -= size[v]
        for o in outs:  # written, never read: live at this step only
            if o not in outputs and o not in cons_mask:
                live -= size[o]
        grp = groups[i]
        open_group = -1 if group_mask[grp] & ~mask == 0 else grp
        free = tuple(
            [j for j in s.free if j != i] + [k for k in g.succs[i] if pred_mask[k] & ~mask == 0]
        )
        return _State(mask, [*s.order, i], live, peak, open_group, free)

    def ready(s: _State) -> list[int]:
        if s.group < 0:
            return list(s.free)
        return [i for i in s.free if groups[i] == s.group]

    for _level in range(n):
        if now() - t0 > budget_s:
            exact = False
            frontier = [_complete_greedy(frontier[0], step, ready, full)]
            break
        best: dict[int, _State] = {}
        for s in frontier:
            for i in ready(s):
                states += 1
                nxt = step(s, i)
                old = best.get(nxt.mask)
                if old is None or (nxt.peak, nxt.live) < (old.peak, old.live):
                    best[nxt.mask] = nxt
        ranked = sorted(best.values(), key=lambda s: (s.peak, s.live, s.order))
        if len(ranked) > width:
            exact = False
            ranked = ranked[:width]
        frontier = ranked
    winner = min(frontier, key=lambda s: (s.peak, s.order))
    order = tuple(winner.order)
    return Ordering(order, peak_live_bytes(g, order), exact, states, now() - t0)


def _complete_greedy(s: _State, step, ready, full: int) -> _State:  # type: ignore[no-untyped-def]
    """Finish ``s`` one node at a time, each the one that leaves the fewest live bytes."""
    while s.mask != full:
        s = min((step(s, i) for i in ready(s)), key=lambda t: (t.live, t.peak, t.order))
    return s
