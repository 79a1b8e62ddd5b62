"""Rung 5 of the escape ladder: int8 activations between layers.

Quantising needs calibration data and a QDQ writer (guard.quantize), which sit above the
compiler, so the ladder takes a *quantise hook*: a callable, supplied by ``guard fit``
(guard.cli.fit) and the bundled backend (guard.backends.bundled), that quantises the fp32
model the ladder was started from and returns the optimised int8 graph with a line saying
what it was calibrated on (guard.quantize.fit_hook). The rung's arena is the int8 build's
arena with the rungs before re-applied on it where they apply: views (the plan itself),
the memory-aware schedule, and strip tiling (tile_strips takes the integer convolutions,
their requantise chains and the byte ops, whose bands are bit-identical to the untiled
nodes; the rung names the region and strips it tiled, or why none). Its outputs differ from the fp32 build's by the quantisation error, which
guard.compiler.fit.measure states (max abs, max relative to the output's range, top-1
agreement for a classifier) instead of holding the rung to the fp32 tolerance.

Without a hook, a model that is already quantised has its 8-bit arena tensors counted;
any other model says how to quantise it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from guard.compiler.fit.step import Step
from guard.compiler.ir.core import Graph
from guard.compiler.partition.plan import CompiledPlan, plan
from guard.core.budget_bytes import fmt_bytes, int8_error_text
from guard.core.errors import GuardError

INT8_UNAVAILABLE = (
    "not applied: no quantise hook and the model is not quantised (guard fit quantises "
    "with --calibration DATA or seeded inputs; or fit the model guard quantize writes)"
)


@dataclass(frozen=True)
class Quantised:
    """What a quantise hook returns: the optimised int8 graph (the same pipeline and target
    as the fp32 graph the ladder climbs) and what its ranges came from."""

    graph: Graph
    calibration: str  # e.g. "calibrated on 8 seeded inputs; pass --calibration for real ranges"


QuantiseHook = Callable[[], Quantised]


def eight_bit(p: CompiledPlan) -> tuple[int, int]:
    """(bytes of 8-bit arena tensors, bytes of all arena tensors) of ``p``."""
    sizes = [(p.view.tensors[t].nbytes, p.view.tensors[t].dtype) for t in p.memory.slots]
    return sum(n for n, dt in sizes if dt in ("int8", "uint8")), sum(n for n, _ in sizes)


def counted_step(p: CompiledPlan) -> Step:
    """Rung 5 without a hook: a quantised model's 8-bit arena tensors are counted."""
    eight, total = eight_bit(p)
    if eight:
        return Step(5, "int8", p.arena_bytes, f"already int8 between layers: {fmt_bytes(eight)} "
                    f"of {fmt_bytes(total)} arena tensors are 8-bit (a quantised model)", 0.0,
                    plan=p)  # fmt: skip
    return Step(5, "int8", None, INT8_UNAVAILABLE, 0.0)


def quantised_step(
    hook: QuantiseHook,
    profile: str | Path | None,
    left: float,
    clock: Callable[[], float],
    budget: int,
    tile: Callable[[CompiledPlan, float], tuple[CompiledPlan, str, float]],
    searched: Callable[[CompiledPlan, float], tuple[CompiledPlan, str]],
    at_least: float = 0.0,
) -> Step:
    """Rung 5 with a hook: quantise, plan, re-apply the schedule and (where tile_strips
    takes it) tiling within ``left`` seconds, or ``at_least`` after quantising; the arena
    is the int8 build's."""
    t0 = clock()
    end = t0 + left
    try:
        q = hook()
    except GuardError as exc:  # a model the QDQ writer or the calibration data refuses
        why = " ".join(str(exc).split())[:240]
        return Step(5, "int8", None, f"not applied: quantising failed: {why}", clock() - t0)
    base = plan(q.graph, profile)
    end = max(end, clock() + at_least)
    eight, total = eight_bit(base)
    parts = [
        q.calibration,
        f"int8 build {fmt_bytes(base.arena_bytes)} ({fmt_bytes(eight)} of "
        f"{fmt_bytes(total)} arena tensors 8-bit)",
    ]
    best = base
    if base.arena_bytes > budget and clock() < end:
        new, what = searched(base, max(end - clock(), 0.5))
        if new.arena_bytes < best.arena_bytes:
            best = new
            parts.append(f"schedule: {what}")
    extra = 0.0
    if best.arena_bytes > budget:
        if clock() >= end:
            parts.append("tiling not tried: the search bound was reached")
        else:
            new, what, more = tile(best, max(end - clock(), 0.5))
            if new.arena_bytes < best.arena_bytes:
                best, extra = new, more
                parts.append(f"tile: {what}")
            else:
                parts.append(f"not tiled: {what}")
    if not parts[-1].endswith(f"arena {fmt_bytes(best.arena_bytes)}"):  # tile's says it
        parts.append(f"arena {fmt_bytes(best.arena_bytes)}")
    return Step(5, "int8", best.arena_bytes, "; ".join(parts), clock() - t0, extra,
                plan=best, quantised=True)  # fmt: skip


def error_text(s: Step) -> str:
    """An int8 rung's stated error against the fp32 unconstrained build ("" unmeasured)."""
    if not s.quantised or s.max_abs_err is None:
        return ""
    return int8_error_text(s.max_abs_err, s.max_rel_err, s.top1_agreement)
