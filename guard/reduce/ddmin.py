"""Delta debugging (Zeller's ddmin) over connected subgraphs.

The items are a model's compute nodes in graph order; a candidate is tested only when it is
weakly connected, and a disconnected chunk or complement is tried one component at a time
(a disconnected set is not one reproducer, it is several). Chunks are contiguous runs in
graph order, so they tend to be connected already. Results are cached by node set; the
reduction stops at a 1-minimal set (no single node can be removed) or when ``max_tests``
is spent, returning the smallest failing set found so far.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass
class Reduction:
    nodes: list[int]
    tests: int
    minimal: bool  # False when max_tests stopped it before 1-minimality
    log: list[tuple[int, bool]] = field(default_factory=list)  # (size tested, failed?)


def _chunks(items: Sequence[int], n: int) -> list[list[int]]:
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for k in range(n):
        end = start + size + (1 if k < extra else 0)
        if end > start:
            out.append(list(items[start:end]))
        start = end
    return out


def ddmin(
    items: Sequence[int],
    fails: Callable[[list[int]], bool],
    components: Callable[[Sequence[int]], list[list[int]]],
    *,
    max_tests: int = 400,
) -> Reduction:
    """The smallest connected subset of ``items`` for which ``fails`` holds.

    ``fails(items)`` must hold for the whole set (the caller checks it first).
    """
    cache: dict[frozenset[int], bool] = {}
    red = Reduction(list(items), 0, True)

    def test(cand: list[int]) -> bool:
        key = frozenset(cand)
        if key not in cache:
            if red.tests >= max_tests:
                raise _Budget
            red.tests += 1
            cache[key] = bool(fails(sorted(cand)))
            red.log.append((len(cand), cache[key]))
        return cache[key]

    current = sorted(items)
    n = 2
    try:
        while len(current) >= 2:
            chunks = _chunks(current, min(n, len(current)))
            found = None
            for c in chunks:  # reduce to a chunk
                found = next((comp for comp in components(c) if test(comp)), None)
                if found:
                    n = 2
                    break
            # With two chunks the complements are the chunks themselves: already tested.
            if found is None and len(chunks) > 2:  # reduce to a complement
                for c in chunks:
                    rest = [x for x in current if x not in set(c)]
                    found = next((comp for comp in components(rest) if test(comp)), None)
                    if found:
                        n = max(n - 1, 2)
                        break
            if found is not None:
                current = sorted(found)
                continue
            if n >= len(current):
                break
            n = min(len(current), 2 * n)
    except _Budget:
        red.minimal = False
    red.nodes = current
    return red


class _Budget(Exception):
    pass
