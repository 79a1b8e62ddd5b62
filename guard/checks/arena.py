"""The ``arena`` check of a result: the planned arena against ``checks.arena.max_bytes``;
with options.bundled.memory_budget, the rung of the budget's ladder (guard.compiler.fit)
that made it fit, or the smallest reachable arena and the tensors that bound it."""

from __future__ import annotations

from typing import Any

from guard.core.budget_bytes import int8_error_text
from guard.results.result import BudgetRung, MemoryBudget
from guard.suite.check_blocks import ArenaBound


def arena_verdict(
    cfg: ArenaBound | None,
    arena: int | None,
    lower: int | None,
    budget: MemoryBudget | None = None,
) -> tuple[str, int | None, Any, str]:
    """(status, value, bound, message): ``arena <= max_bytes`` (the budget when only a
    budget is set)."""
    bound = cfg.max_bytes if cfg is not None else budget.bytes if budget else None
    if arena is None or bound is None:
        return "skip", None, bound, "backend does not report an arena size"
    rung = None
    if budget is not None:
        rung = next((s for s in budget.ladder if s.rung == budget.rung), None)
    if rung is not None and rung.spill_bytes is not None:
        # the spill rung: the budget bounds the fast region, the spill region lies outside
        arena = rung.arena_bytes
        assert arena is not None, "a spill rung has its arena"
    ok = arena <= bound
    lb = f" (liveness lower bound {lower:,} B)" if lower else ""
    msg = f"arena {arena:,} B {'<=' if ok else '>'} max {bound:,} B{lb}"
    if budget is not None:
        if budget.fits and rung is not None:
            cost = rung.latency_cost_pct
            msg += (
                f"; memory_budget {budget.bytes:,} B fits at rung {rung.rung} "
                f"({rung.name}: {rung.what})"
                + (f", latency {cost:+.1f}%" if cost is not None else "")
                + (f"; {stated_error(rung)}" if rung.quantised else "")
            )
        else:
            bound_by = ", ".join(f"{'+'.join(b.tensors)} ({b.bytes:,} B)" for b in budget.bound_by)
            msg += (
                f"; memory_budget {budget.bytes:,} B does not fit: the smallest reachable "
                f"arena is {budget.smallest_reachable_bytes:,} B, bound by {bound_by}"
            )
            ok = False
    return ("pass" if ok else "fail"), arena, bound, msg


def stated_error(rung: BudgetRung) -> str:
    """An int8 rung's error against the fp32 unconstrained build (it is not held to the
    fp32 tolerance: quantising changes the numbers)."""
    if rung.max_abs_err is None:
        return "int8 outputs: error not measured"
    return int8_error_text(rung.max_abs_err, rung.max_rel_err, rung.top1_agreement)
