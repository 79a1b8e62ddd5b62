"""The escape ladder: climb rungs until the activation arena fits a byte budget.

Rungs, tried in order, each on top of the ones before (the seed document's memory
chapter; issue 35):

1. ``views``: today's build. Concat/split/slice/reshape nodes the planner can place as
   views move no bytes (guard.compiler.graph.memory_alias); the rung names them.
2. ``schedule``: a memory-aware order (guard.compiler.graph.memory_order: exact on small
   graphs, a bounded beam on large ones), re-planned; kept when the arena drops.
3. ``recompute``: cheap producers whose tensors sit idle across the peak are computed
   twice (guard.compiler.passes.recompute_cheap); each kept only when the arena drops.
4. ``tile``: the first stages of a CNN (from the graph input), or its head (from an
   interior tensor, which stays whole, to a graph output), run in strips of rows with
   the halo recomputed (guard.compiler.passes.tile_strips); the region and strip count
   with the smallest arena
   (or, when one fits, the fitting one with the fewest extra MACs) win.
5. ``int8``: the model quantised by the caller's hook (guard.compiler.fit.int8: calibration
   data, else seeded inputs), planned with the schedule and tiling re-applied where they
   apply; its outputs state their quantisation error instead of meeting the fp32
   tolerance. Without a hook a quantised model's 8-bit tensors are counted.
6. ``spill``: tensors idle across the peak are copied to a second region and back
   (guard.compiler.graph.memory_spill); the rung's arena is the fast region (what the
   budget bounds), and it reports the spill region's bytes and the copies' traffic.

The climb stops at the first rung whose arena fits (``stop_at_fit``) or when every rung
is tried; the whole search is bounded by ``search_s`` seconds (SEARCH_S: 30 s, far below
``defaults.build_timeout_s``), after which the remaining rungs say they were cut.
Reordering, views and tiling change no arithmetic and recomputation repeats it, so the
outputs of rungs 1-4 and 6 equal the unconstrained build's (guard.compiler.fit.measure
checks); rung 5's (and a spill on top of it) differ by the stated quantisation error.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from guard.compiler.fit.describe import bound_by, peak_buffers, views_text
from guard.compiler.fit.int8 import (
    QuantiseHook,
    counted_step,
    eight_bit,
    error_text,
    quantised_step,
)
from guard.compiler.fit.step import Step
from guard.compiler.graph.exec_order import Schedule
from guard.compiler.graph.memory import plan_memory
from guard.compiler.graph.memory_order import memory_order
from guard.compiler.graph.memory_spill import (
    fills_late,
    insert_copies,
    spill_candidates,
    spill_traffic,
    split_regions,
)
from guard.compiler.graph.view import peak_live_bytes, view_of_graph
from guard.compiler.ir.core import Graph
from guard.compiler.partition.plan import CompiledPlan, plan
from guard.compiler.passes.recompute_cheap import RecomputeCheap, candidates
from guard.compiler.passes.tile_strips import Region, TileStrips, conv_macs, head_entries, regions
from guard.compiler.runtime.artefact_json import BoundBy, MemoryBudget
from guard.core.budget_bytes import fmt_bytes

SEARCH_S = 30.0
NAMES = {1: "views", 2: "schedule", 3: "recompute", 4: "tile", 5: "int8", 6: "spill"}


@dataclass(frozen=True)
class Ladder:
    budget_bytes: int
    fits: bool
    rung: int | None  # the rung that made it fit; None when none did
    steps: tuple[Step, ...]
    chosen: CompiledPlan  # the fitting plan, else the smallest reachable
    smallest_bytes: int
    bound_by: tuple[BoundBy, ...]  # buffers live at the smallest plan's peak
    unconstrained_lower_bound_bytes: int
    seconds: float
    unmeasured: tuple[int, ...] = ()  # rungs whose plan measure did not build (its deadline)

    def to_dict(self) -> MemoryBudget:
        return {
            "bytes": self.budget_bytes,
            "fits": self.fits,
            "rung": self.rung,
            "ladder": [s.to_dict() for s in self.steps],
            "smallest_reachable_bytes": self.smallest_bytes,
            "bound_by": [b.copy() for b in self.bound_by],
            "unconstrained_lower_bound_bytes": self.unconstrained_lower_bound_bytes,
            "search_s": round(self.seconds, 3),
        }

    def summary(self) -> str:
        """One line: where it fits, or the smallest reachable and what bounds it."""
        if self.fits:
            s = next(x for x in self.steps if x.rung == self.rung)
            cost = f", latency {s.latency_cost_pct:+.1f}%" if s.latency_cost_pct is not None else ""
            err = error_text(s)
            return (
                f"fits {fmt_bytes(self.budget_bytes)} at rung {self.rung} ({s.name}): arena "
                f"{fmt_bytes(s.arena_bytes or 0)}{cost}" + (f"; {err}" if err else "")
            )
        bound = ", ".join(f"{'+'.join(b['tensors'])} ({fmt_bytes(b['bytes'])})"
                          for b in self.bound_by)  # fmt: skip
        return (
            f"does not fit {fmt_bytes(self.budget_bytes)}: the smallest reachable arena is "
            f"{fmt_bytes(self.smallest_bytes)} ({self.smallest_bytes} B), bound by {bound}"
        )


def climb(
    graph: Graph,
    budget_bytes: int,
    profile: str | Path | None = None,
    *,
    stop_at_fit: bool = True,
    search_s: float = SEARCH_S,
    clock: Callable[[], float] = time.perf_counter,
    quantise: QuantiseHook | None = None,
) -> Ladder:
    """Climb the ladder for the optimised ``graph`` (see the module docstring);
    ``quantise`` returns the model's optimised int8 graph for rung 5."""
    t0 = clock()
    deadline = t0 + search_s
    steps: list[Step] = []

    def fits(p: CompiledPlan) -> bool:
        return p.arena_bytes <= budget_bytes

    base = plan(graph, profile)
    best = base
    steps.append(Step(1, "views", base.arena_bytes, views_text(base), clock() - t0, plan=base))
    rungs: list[tuple[int, Callable[[CompiledPlan, float], tuple[CompiledPlan, str, float]]]] = [
        (2, lambda b, left: _schedule(b, left)),
        (3, lambda b, left: _recompute(b, profile, left, clock)),
        (4, lambda b, left: _tile(b, profile, left, clock, budget_bytes, base)),
    ]
    for rung, run in rungs:
        if stop_at_fit and fits(best):
            break
        left = deadline - clock()
        if left <= 0:
            steps.append(Step(rung, NAMES[rung], None, f"not tried: the {search_s:.0f} s "
                              "search bound was reached", 0.0))  # fmt: skip
            continue
        t = clock()
        new, what, extra = run(best, left)
        if new.arena_bytes < best.arena_bytes:
            best = new
        steps.append(Step(rung, NAMES[rung], best.arena_bytes, what, clock() - t, extra,
                          plan=best))  # fmt: skip
    if not (stop_at_fit and fits(best)):
        # Quantising is not a search: with a hook it runs even past the bound (the schedule
        # and tiling on the int8 build take only what is left).
        if quantise is None or eight_bit(best)[0]:  # no hook, or a quantised model already
            steps.append(counted_step(best))
        else:
            int8 = quantised_step(
                quantise, profile, deadline - clock(), clock, budget_bytes,
                lambda b, rest: _tile(b, profile, rest, clock, budget_bytes, b),
                searched,
            )  # fmt: skip
            steps.append(int8)
            if int8.plan is not None and int8.plan.arena_bytes < best.arena_bytes:
                best = int8.plan
    if not (stop_at_fit and fits(best)):
        left = deadline - clock()
        t = clock()
        on_int8 = any(s.quantised and s.plan is best for s in steps)
        if left <= 0:
            steps.append(Step(6, "spill", None, f"not tried: the {search_s:.0f} s search "
                              "bound was reached", 0.0))  # fmt: skip
        else:
            spill = _spill(best, profile, left, clock, budget_bytes, t)
            steps.append(dataclasses.replace(spill, quantised=on_int8 and spill.plan is not None))
    fitting = [s for s in steps if s.arena_bytes is not None and s.arena_bytes <= budget_bytes]
    chosen_step = fitting[0] if fitting else min(
        (s for s in steps if s.arena_bytes is not None), key=lambda s: (s.arena_bytes, s.rung)
    )  # fmt: skip
    chosen = chosen_step.plan or best
    smallest = min(s.arena_bytes for s in steps if s.arena_bytes is not None)
    return Ladder(
        budget_bytes=budget_bytes,
        fits=bool(fitting),
        rung=fitting[0].rung if fitting else None,
        steps=tuple(steps),
        chosen=chosen,
        smallest_bytes=smallest,
        bound_by=tuple(bound_by(chosen)),
        unconstrained_lower_bound_bytes=base.lower_bound_bytes,
        seconds=clock() - t0,
    )


def searched(p: CompiledPlan, left: float) -> tuple[CompiledPlan, str]:
    """``p`` re-ordered by the memory-aware scheduler when that lowers the arena."""
    o = memory_order(p.view, p.partitions.group_of, budget_s=max(left / 3, 0.5))
    mem = plan_memory(p.view, o.order)
    if mem.arena_bytes >= p.arena_bytes:
        return p, f"no lower order ({o.describe()}; arena {fmt_bytes(mem.arena_bytes)})"
    sched = Schedule(o.order, "memory-aware", o.peak_bytes, p.schedule.topo_peak_bytes)
    new = dataclasses.replace(p, schedule=sched, memory=mem)
    return new, (
        f"order searched ({o.describe()}): peak {fmt_bytes(p.schedule.peak_bytes)} -> "
        f"{fmt_bytes(o.peak_bytes)}, arena {fmt_bytes(p.arena_bytes)} -> "
        f"{fmt_bytes(mem.arena_bytes)}"
    )


def _schedule(p: CompiledPlan, left: float) -> tuple[CompiledPlan, str, float]:
    new, what = searched(p, left)
    return new, what, 0.0


def _replan(g: Graph, profile: str | Path | None, left: float) -> CompiledPlan:
    p = plan(g, profile)
    return searched(p, left)[0]


def _recompute(
    p: CompiledPlan, profile: str | Path | None, left: float, clock: Callable[[], float]
) -> tuple[CompiledPlan, str, float]:
    end = clock() + left
    done: list[str] = []
    best = p
    tried = 0
    for t, late in candidates(p.view, p.memory)[:8]:
        if clock() > end:
            break
        tried += 1
        g = best.graph.clone()
        if not RecomputeCheap(splits=((t, late),)).run(g).changed:
            continue
        new = _replan(g, profile, end - clock())
        if new.arena_bytes < best.arena_bytes:
            best = new
            done.append(t)
    if not tried:
        return p, "no cheap producer idles across the peak (nothing to recompute)", 0.0
    if not done:
        return p, f"{tried} candidate(s) tried, none lowered the arena", 0.0
    return best, f"recomputed {', '.join(done)} (arena {fmt_bytes(best.arena_bytes)})", 0.0


def _tile(
    p: CompiledPlan,
    profile: str | Path | None,
    left: float,
    clock: Callable[[], float],
    budget: int,
    base: CompiledPlan,
) -> tuple[CompiledPlan, str, float]:
    end = clock() + left
    g0 = p.graph
    # The first stages (from the graph input) and the heads (from an interior tensor to a
    # graph output, the entry whole). Per entry, only exits smaller than every exit before
    # them (the concat of the strips is a full copy of the exit, and a later exit of no
    # smaller size adds halo and saves nothing), the shortest region first; a head's exit
    # is the output itself.
    # The same from the node at the arena's peak on as well (a small exit early, such as
    # an int8 build's quantised input, would hide the exits past the peak).
    at, _ = peak_buffers(p.memory)
    peak_node = p.view.nodes[p.memory.order[at]].name if p.memory.order else ""
    peak = next((i for i, n in enumerate(g0.nodes) if n.name == peak_node), 0)
    pick: list[Region] = []
    for entry in (None, *head_entries(g0)):
        found = [r for r in regions(g0, entry) if g0.values[r.exit].nbytes * 8 <= p.arena_bytes]
        if entry is not None:
            found = [r for r in found if r.exit in g0.outputs]
        for start in (-1, peak):
            mine: list[Region] = []
            for r in found:
                if r.nodes[-1] >= start and (
                    not mine or g0.values[r.exit].nbytes < g0.values[mine[-1].exit].nbytes
                ):
                    mine.append(r)
            pick += [r for r in mine if r not in pick]
    if not pick:
        return p, "no row-local first stage or head ends in a tensor under 1/8 of the arena", 0.0
    macs0 = max(conv_macs(base.graph), 1)
    # Rank every tiling by the liveness peak of its band-after-band order (cheap, linear),
    # then plan the best few whole (aliasing and placement decide the arena).
    ranked: list[tuple[int, float, Graph, str]] = []
    for r in pick:
        rows = g0.values[r.exit].shape[r.h_axis[r.exit]]
        for strips in sorted({s for s in (4, 8, 14, 28) if s <= rows}):
            if clock() > end:
                break
            g = g0.clone()
            entry = None if r.entry in g0.inputs else r.entry
            res = TileStrips(exit=r.exit, strips=strips, entry=entry).run(g)
            if not res.changed:
                continue
            v = view_of_graph(g)
            est = peak_live_bytes(v, range(len(v.nodes)))
            extra = 100 * (conv_macs(g) - conv_macs(base.graph)) / macs0
            ranked.append((est, extra, g, res.notes[0]))
    if not ranked:
        return p, "no tiling could be evaluated within the search bound", 0.0
    under = sorted((t for t in ranked if t[0] <= budget), key=lambda t: (t[1], t[0]))
    best_est = sorted(ranked, key=lambda t: (t[0], t[1]))
    trials: list[tuple[CompiledPlan, str, float]] = []
    for _est, extra, g, note in [*under[:2], *best_est[:3]]:
        if trials and clock() > end:
            break
        trials.append((plan(g, profile), note, extra))
    fitting = [t for t in trials if t[0].arena_bytes <= budget]
    new, note, extra = (
        min(fitting, key=lambda t: (t[2], t[0].arena_bytes))
        if fitting
        else min(trials, key=lambda t: (t[0].arena_bytes, t[2]))
    )
    if new.arena_bytes >= p.arena_bytes:
        return p, f"{len(ranked)} tilings tried, none lowered the arena", 0.0
    new = searched(new, max(end - clock(), 0.5))[0]
    return new, f"{note}; arena {fmt_bytes(new.arena_bytes)}", extra


def _spill(
    p: CompiledPlan,
    profile: str | Path | None,
    left: float,
    clock: Callable[[], float],
    budget: int,
    t0: float,
) -> Step:
    """Rung 6: spill the largest idle tensor at the fast region's peak, re-plan, repeat
    while the fast region shrinks and does not fit (at most 8 tensors)."""
    end = clock() + left
    cur = p
    split, fast, spill = split_regions(p.memory)
    done: list[str] = []
    for _ in range(8):
        if fast <= budget or clock() > end:
            break
        cands = spill_candidates(cur.view, cur.memory)
        if not cands:
            break
        t, late = cands[0]
        g = cur.graph.clone()
        insert_copies(g, t, late)
        new = plan(g, profile)
        if len(set(new.partitions.group_of)) == 1:  # moving the copies keeps one block
            order = fills_late(new.view, new.memory.order)
            new = dataclasses.replace(new, memory=plan_memory(new.view, order))
        nsplit, nfast, nspill = split_regions(new.memory)
        if nfast >= fast:
            break
        cur, split, fast, spill = new, nsplit, nfast, nspill
        done.append(t)
    if not done:
        why = (
            "no tensor idles across the peak in the fast region (nothing to spill)"
            if not spill_candidates(p.view, p.memory)
            else "spilling the largest idle tensor did not shrink the fast region"
        )
        return Step(6, "spill", p.arena_bytes, why, clock() - t0, plan=p)
    traffic = spill_traffic(split)
    chosen = dataclasses.replace(cur, memory=split)
    what = (
        f"spilled {', '.join(done)}: fast region {fmt_bytes(fast)}, {fmt_bytes(spill)} "
        f"outside the budget, {fmt_bytes(traffic)} copied per inference"
    )
    return Step(6, "spill", fast, what, clock() - t0, spill_bytes=spill,
                spill_traffic_bytes=traffic, plan=chosen)  # fmt: skip
