"""What a plan says about itself on the ladder: its views, and what bounds its arena."""

from __future__ import annotations

from typing import Any

from guard.compiler.graph.memory import MemoryPlan
from guard.compiler.partition.plan import CompiledPlan
from guard.compiler.runtime.artefact_json import BoundBy


def views_text(p: CompiledPlan) -> str:
    """``concat n22, split s3 elided (+55 more); 1 kept a copy`` for the plan's views."""
    index = {n.name: n for n in p.view.nodes}
    elided = [f"{index[e].op.lower()} {e}" for e in p.memory.elided_nodes if e in index]
    head = ", ".join(elided[:3]) + (f" (+{len(elided) - 3} more)" if len(elided) > 3 else "")
    out = f"{head} elided" if elided else "no view-able node elided"
    if p.memory.copies:
        node, why = next(iter(p.memory.copies.items()))
        out += f"; {len(p.memory.copies)} kept as copies ({node}: {why})"
    return out


def peak_buffers(m: MemoryPlan) -> tuple[int, list[Any]]:
    """(step, buffers live there) at the step of the plan whose live buffers sum highest,
    over the fast region (buffers of spilled copies live outside the budget)."""
    steps = max((b.end for b in m.buffers), default=0) + 1
    live = [0] * (steps + 1)
    fast = [b for b in m.buffers if not any(t.endswith("/spilled") for t in b.tensors)]
    for b in fast:
        live[b.start] += b.nbytes
        live[b.end + 1] -= b.nbytes
    best, cur, at = -1, 0, 0
    for s in range(steps):
        cur += live[s]
        if cur > best:
            best, at = cur, s
    return at, [b for b in fast if b.start <= at <= b.end and b.nbytes]


def bound_by(p: CompiledPlan, top: int = 3) -> list[BoundBy]:
    """The largest buffers live at the plan's peak: what a smaller arena would have to shrink."""
    at, bufs = peak_buffers(p.memory)
    node = p.view.nodes[p.memory.order[at]].name if p.memory.order else ""
    bufs.sort(key=lambda b: -b.nbytes)
    return [
        {"tensors": list(b.tensors[:2]), "bytes": b.nbytes, "at_node": node} for b in bufs[:top]
    ]


def live_per_step(m: MemoryPlan) -> list[int]:
    """Bytes of the plan's buffers live at each step (aliasing counted once)."""
    steps = max((b.end for b in m.buffers), default=0) + 1
    delta = [0] * (steps + 1)
    for b in m.buffers:
        delta[b.start] += b.nbytes
        delta[b.end + 1] -= b.nbytes
    out, cur = [], 0
    for s in range(steps):
        cur += delta[s]
        out.append(cur)
    return out


def stage_peak(p: CompiledPlan, nodes: set[str]) -> int:
    """Peak live bytes over the steps that run ``nodes`` (e.g. a tiled region's bands)."""
    live = live_per_step(p.memory)
    steps = [s for s, i in enumerate(p.memory.order) if p.view.nodes[i].name in nodes]
    return max((live[s] for s in steps if s < len(live)), default=0)


def tiled_stage_peaks(base: CompiledPlan, tiled: CompiledPlan) -> tuple[int, int] | None:
    """(peak over the first stages untiled, the same stages tiled): the stages are the
    nodes tile_strips cut into bands (named ``<node>/strip<k>``); None when none were."""
    bands = {n.name for n in tiled.view.nodes if "/strip" in n.name}
    original = {name.rsplit("/strip", 1)[0] for name in bands}
    if not bands:
        return None
    return stage_peak(base, original), stage_peak(tiled, bands)
