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
   the halo recomputed (guard.compiler.passes.tile_strips, chosen by
   guard.compiler.fit.tile: up to three regions one after another); the regions and
   strip counts with the smallest arena
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
``defaults.build_timeout_s``), after which the remaining rungs say they were cut, but for
the int8 rung's schedule and tiling, which get at least a third of the bound after
quantising.
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

from guard.compiler.fit.describe import bound_by, views_text
from guard.compiler.fit.int8 import (
    QuantiseHook,
    counted_step,
    eight_bit,
    error_text,
    quantised_step,
)
from guard.compiler.fit.step import Step
from guard.compiler.fit.tile import tile
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
from guard.compiler.ir.core import Graph
from guard.compiler.partition.plan import CompiledPlan, plan
from guard.compiler.passes.recompute_cheap import RecomputeCheap, candidates
from guard.compiler.runtime.artefact_json import BoundBy, MemoryBudget
from guard.core.budget_bytes import fmt_bytes

SEARCH_S = 30.0
INT8_SHARE = 1 / 3  # of the search bound, the int8 rung's own schedule and tiling at least
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
        (4, lambda b, left: tile(b, profile, left, clock, budget_bytes, base, searched)),
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
        # Quantising is not a search: with a hook it runs even past the bound; the schedule
        # and tiling on the int8 build take what is left, at least INT8_SHARE of the bound
        # after quantising (the fp32 rungs' tiling may have spent it all).
        if quantise is None or eight_bit(best)[0]:  # no hook, or a quantised model already
            steps.append(counted_step(best))
        else:
            int8 = quantised_step(
                quantise, profile, deadline - clock(), clock, budget_bytes,
                lambda b, rest: tile(b, profile, rest, clock, budget_bytes, b, searched),
                searched, INT8_SHARE * search_s,
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
