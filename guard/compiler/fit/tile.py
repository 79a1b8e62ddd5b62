"""Rung 4 of the escape ladder, and the int8 rung's tiling: regions run in strips of rows.

guard.compiler.passes.tile_strips rewrites one region; this module chooses them. A
region starts at the graph input (the first stages; at the output of the elementwise
chain right after it where there is one, an int8 build's QuantizeLinear: the float input
then dies before the strips run), or at one of the HEADS tensors furthest from the output
on the single-input chain that ends in a 4-D graph output (a head: a detector's
upsampling convolutions); an interior entry stays whole.
Per entry, only exits under 1/8 of the arena (or a graph output) and smaller than every
exit before them are candidates (the concat of the strips is a full copy of the exit, and
a later exit of no smaller size adds halo and saves nothing), counted from the first node
and again from the node at the arena's peak (a small exit early, such as an int8 build's
quantised input, would hide the exits past the peak).
Every (region, strips) is ranked by the liveness peak of its band-after-band order (cheap,
linear), the best few planned whole (aliasing and placement decide the arena); the
smallest arena wins, or, when one fits, the fitting one with the fewest extra MACs (the
planning stops at the first of those estimated to fit that does).

Regions are tiled one after another while the arena drops and does not fit (at most
REGIONS: a detector's stem moves the peak into its head, the head then back into the
stem); a region that keeps the arena is taken as well and kept only if the next one
lowers it (two equal peaks, a stem's and a head's, fall only together), and then, when there are several, each region's entry (along the input's
elementwise chain), exit and strip count are tried again with the others fixed (its
choice was made while the peak was elsewhere).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from guard.compiler.fit.describe import peak_buffers
from guard.compiler.graph.view import peak_live_bytes, view_of_graph
from guard.compiler.ir.core import Graph
from guard.compiler.partition.plan import CompiledPlan, plan
from guard.compiler.passes.tile_entries import head_entries, head_fronts, stem_entries
from guard.compiler.passes.tile_strips import (
    Entry,
    Region,
    TileStrips,
    conv_macs,
    regions,
)
from guard.core.budget_bytes import fmt_bytes

REGIONS = 3  # regions tiled one after another
STRIPS = (4, 8, 14, 28)
HEADS = 2  # head entries tried, the furthest from the output
Tiling = tuple[Entry, str, int]  # TileStrips' entry, exit, strips
Searched = Callable[[CompiledPlan, float], tuple[CompiledPlan, str]]


def tile(
    p: CompiledPlan,
    profile: str | Path | None,
    left: float,
    clock: Callable[[], float],
    budget: int,
    base: CompiledPlan,
    searched: Searched,
) -> tuple[CompiledPlan, str, float]:
    """``p`` tiled (see the module docstring), what was tiled, and the extra MACs in % of
    ``base``'s; ``p`` and why not when no tiling lowers its arena. ``searched`` re-orders
    the result (the ladder's memory-aware schedule)."""
    end = clock() + left
    cur, done = p, list[tuple[Tiling, str]]()
    best, kept = p, 0  # the smallest plan so far and how many of ``done`` it has
    why = ""
    for _ in range(REGIONS):
        # a tiling that keeps the arena is taken too: with two equal peaks (a stem and a
        # head) neither region alone lowers it, both together do
        new, note, spec = _one(cur, profile, end, clock, budget, base)
        if spec is None:
            why = why or note
            break
        cur = new
        done.append((spec, note))
        if cur.arena_bytes < best.arena_bytes:
            best, kept = cur, len(done)
        elif len(done) - kept >= 2:
            break  # two regions in a row that lowered nothing
        if best.arena_bytes <= budget or clock() > end:
            break
    if not kept:
        return p, why or "no tiling lowered the arena (one region, or two together)", 0.0
    cur, done = best, done[:kept]
    specs, notes = [s for s, _ in done], [n for _, n in done]
    if len(specs) > 1 and cur.arena_bytes > budget and clock() < end:
        cur, specs, notes = _again(p, cur, specs, notes, profile, end, clock)
    if cur.arena_bytes > budget:
        cur = searched(cur, max(end - clock(), 0.5))[0]
    extra = 100 * (conv_macs(cur.graph) - conv_macs(base.graph)) / max(conv_macs(base.graph), 1)
    return cur, f"{'; then '.join(notes)}; arena {fmt_bytes(cur.arena_bytes)}", extra


def _exits(g: Graph, entry: Entry, arena: int) -> list[Region]:
    """The regions from ``entry`` whose exit may be cut (see the module docstring)."""
    return [
        r for r in regions(g, entry) if r.exit in g.outputs or g.values[r.exit].nbytes * 8 <= arena
    ]


def _apply(g: Graph, trial: list[Tiling]) -> tuple[Graph, list[str]] | None:
    """A copy of ``g`` with every tiling of ``trial`` applied, and their notes (None when
    one does not apply)."""
    g = g.clone()
    res = [TileStrips(exit=x, strips=k, entry=e).run(g) for e, x, k in trial]
    return (g, [r.notes[0] for r in res]) if all(r.changed for r in res) else None


def _again(
    p: CompiledPlan,
    cur: CompiledPlan,
    specs: list[Tiling],
    notes: list[str],
    profile: str | Path | None,
    end: float,
    clock: Callable[[], float],
) -> tuple[CompiledPlan, list[Tiling], list[str]]:
    """On ``p``'s graph, with the other regions fixed: a first-stage region's entry moved
    along the input's elementwise chain (each planned whole), then each region's exit (it
    or one of the next four) and strip count, the best three by liveness peak planned."""
    stems: list[Entry] = [None, *stem_entries(p.graph)]
    for i in range(len(specs)):
        e, x, k = specs[i]
        for e2 in stems if e in stems else []:
            trial = [*specs[:i], (e2, x, k), *specs[i + 1 :]]
            built = _apply(p.graph, trial) if e2 != e and clock() < end else None
            if built is not None:
                new = plan(built[0], profile)
                if new.arena_bytes < cur.arena_bytes:
                    cur, specs, notes = new, trial, built[1]
    ranked: list[tuple[int, list[Tiling], Graph, list[str]]] = []
    for i, (e, x, k) in enumerate(specs):
        exits = [r.exit for r in _exits(p.graph, e, p.arena_bytes)]
        for x2 in exits[exits.index(x) :][:5] if x in exits else [x]:
            for k2 in sorted({k, *STRIPS}):
                trial = [*specs[:i], (e, x2, k2), *specs[i + 1 :]]
                built = _apply(p.graph, trial) if (x2, k2) != (x, k) and clock() < end else None
                if built is not None:
                    v = view_of_graph(built[0])
                    ranked.append((peak_live_bytes(v, range(len(v.nodes))), trial, *built))
    for _est, trial, g, why in sorted(ranked, key=lambda t: t[0])[:3]:
        if clock() > end:
            break
        new = plan(g, profile)
        if new.arena_bytes < cur.arena_bytes:
            cur, specs, notes = new, trial, why
    return cur, specs, notes


def _one(
    p: CompiledPlan,
    profile: str | Path | None,
    end: float,
    clock: Callable[[], float],
    budget: int,
    base: CompiledPlan,
) -> tuple[CompiledPlan, str, Tiling | None]:
    """One region tiled on ``p`` (its arena lower, or equal: see ``tile``): the plan, its
    note and (entry, exit, strips), or ``p``, why not and None."""
    g0 = p.graph
    at, _ = peak_buffers(p.memory)
    peak_node = p.view.nodes[p.memory.order[at]].name if p.memory.order else ""
    peak = next((i for i, n in enumerate(g0.nodes) if n.name == peak_node), 0)
    pick: list[Region] = []
    first: list[Entry] = [*stem_entries(g0)[-1:]] or [None]  # _again tries the others
    heads = head_entries(g0)[-HEADS:]
    fronts = head_fronts(g0, heads[-1]) if heads else []
    entry: Entry
    for entry in (*first, *heads, *fronts):
        found = _exits(g0, entry, p.arena_bytes)
        for start in (-1, peak):
            mine: list[Region] = []
            for r in found:
                if r.nodes[-1] >= start and (
                    not mine or g0.values[r.exit].nbytes < g0.values[mine[-1].exit].nbytes
                ):
                    mine.append(r)
            pick += [r for r in mine if r not in pick]
    if not pick:
        return p, "no row-local first stage or head ends in a tensor under 1/8 of the arena", None
    macs0 = max(conv_macs(base.graph), 1)
    ranked: list[tuple[int, float, Graph, str, Tiling]] = []
    for r in pick:
        rows = g0.values[r.exit].shape[r.h_axis[r.exit]]
        for strips in sorted({s for s in STRIPS if s <= rows}):
            if clock() > end:
                break
            g = g0.clone()
            entry = r.entries if len(r.entries) > 1 else r.entry
            entry = None if entry in g0.inputs else entry
            res = TileStrips(exit=r.exit, strips=strips, entry=entry).run(g)
            if not res.changed:
                continue
            v = view_of_graph(g)
            est = peak_live_bytes(v, range(len(v.nodes)))
            extra = 100 * (conv_macs(g) - conv_macs(base.graph)) / macs0
            ranked.append((est, extra, g, res.notes[0], (entry, r.exit, strips)))
    if not ranked:
        return p, "no tiling could be evaluated within the search bound", None
    under = sorted((t for t in ranked if t[0] <= budget), key=lambda t: (t[1], t[0]))
    best_est = sorted(ranked, key=lambda t: (t[0], t[1]))
    trials: list[tuple[CompiledPlan, str, float, Tiling]] = []
    planned: dict[int, CompiledPlan] = {}  # a tiling in both lists is planned once
    for _est, extra, g, note, spec in [*under[:2], *best_est[:3]]:
        if trials and (clock() > end or trials[0][0].arena_bytes <= budget):
            break  # the fewest extra MACs of those estimated to fit does fit
        if id(g) not in planned:
            planned[id(g)] = plan(g, profile)
        trials.append((planned[id(g)], note, extra, spec))
    fitting = [t for t in trials if t[0].arena_bytes <= budget]
    new, note, _, spec = (
        min(fitting, key=lambda t: (t[2], t[0].arena_bytes))
        if fitting
        else min(trials, key=lambda t: (t[0].arena_bytes, t[2]))
    )
    if new.arena_bytes > p.arena_bytes:
        return p, f"{len(ranked)} tilings tried, none lowered the arena", None
    return new, note, spec
