"""Placement for the memory planner: buffers at offsets in one arena.

Greedy: buffers in some order, each at the lowest aligned offset that collides with no
placed buffer whose interval overlaps its own. Equal sizes are common (layers share
shapes), so three tie-breaks of "largest first" are tried, then two classic alternative
orders (size x lifetime, greedy by breadth); the lowest arena wins and its name is the
plan's ``strategy``. ``peak`` is the lower bound no placement of these buffers can beat.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from guard.compiler.graph.view import Interval

K = TypeVar("K")
# (aligned size, live interval, buffer id) -> sort key: the order buffers are placed in.
OrderKey = Callable[[int, Interval, int], tuple[int, ...]]


# Orders tried by the greedy placer, first to last; the lowest arena wins (ties keep the
# earlier). The first three are "largest first" and differ only in how equal sizes are
# broken (many layers share a shape). Two more are the classic alternatives for when
# largest-first leaves holes: largest size x lifetime first, and "greedy by breadth"
# (TFLite): visit steps by live bytes, most first, placing each step's unplaced tensors
# largest first. Every order uses the same lowest-non-colliding-offset rule.
_TIE_BREAKS: dict[str, OrderKey] = {
    "largest-first/earliest": lambda sz, it, b: (-sz, it.start, b),
    "largest-first/longest": lambda sz, it, b: (-sz, it.start - it.end, it.start, b),
    "largest-first/latest": lambda sz, it, b: (-sz, -it.end, b),
    "largest-area-first": lambda sz, it, b: (-sz * (it.end - it.start + 1), it.start, b),
}


def _breadth_key(sizes: Mapping[int, int], ivs: Mapping[int, Interval]) -> OrderKey:
    steps = max((it.end for it in ivs.values()), default=0) + 1
    live = [0] * (steps + 1)
    for b, it in ivs.items():
        live[it.start] += sizes[b]
        live[it.end + 1] -= sizes[b]
    for t in range(1, steps):
        live[t] += live[t - 1]
    rank = {t: r for r, t in enumerate(sorted(range(steps), key=lambda t: (-live[t], t)))}
    # A buffer is placed when its busiest step comes up: the minimum rank over its steps.
    first = {b: min(rank[t] for t in range(it.start, it.end + 1)) for b, it in ivs.items()}
    return lambda sz, it, b: (first[b], -sz, it.start, b)


def _place(sizes: Mapping[int, int], ivs: Mapping[int, Interval], key: OrderKey) -> dict[int, int]:
    """Greedy: in ``key`` order, each buffer at the lowest offset clear of every placed
    buffer whose interval overlaps its own (sizes are aligned, so offsets stay aligned)."""
    offsets: dict[int, int] = {}
    placed: list[tuple[int, int, int, int]] = []  # (offset, end offset, first, last step)
    for b in sorted(sizes, key=lambda b: key(sizes[b], ivs[b], b)):
        size, it = sizes[b], ivs[b]
        if size == 0:
            offsets[b] = 0
            continue
        start, end = it.start, it.end
        busy = sorted((o, hi) for o, hi, first, last in placed if first <= end and start <= last)
        off = 0
        for lo, hi in busy:
            if off + size <= lo:
                break
            off = max(off, hi)
        offsets[b] = off
        placed.append((off, off + size, start, end))
    return offsets


def best_placement(
    sizes: Mapping[int, int], ivs: Mapping[int, Interval], lower: int
) -> tuple[dict[int, int], int, str]:
    """(offset per buffer, arena bytes, the winning order's name): the lowest arena over
    every order; stops early when an order reaches ``lower`` (no placement beats it)."""
    best: tuple[dict[int, int], int, str] | None = None
    keys = {**_TIE_BREAKS, "greedy-by-breadth": _breadth_key(sizes, ivs)}
    for name, key in keys.items():
        offsets = _place(sizes, ivs, key)
        arena = max((offsets[b] + sizes[b] for b in sizes), default=0)
        if best is None or arena < best[1]:
            best = (offsets, arena, name)
        if arena == lower:
            break
    assert best is not None
    return best


def peak(sizes: Mapping[K, int], ivs: Mapping[K, Interval], steps: int) -> int:
    """Max over steps of the bytes of the items live at that step (the lower bound)."""
    delta = [0] * (steps + 1)
    for k, s in sizes.items():
        delta[ivs[k].start] += s
        delta[ivs[k].end + 1] -= s
    peak = cur = 0
    for s in range(steps):
        cur += delta[s]
        peak = max(peak, cur)
    return peak
