"""``guard fit``'s entry: the whole ladder for one model, as a dict and as text."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from guard.compiler import import_onnx, optimize, verify
from guard.compiler.codegen.llvm_target import codegen_target
from guard.compiler.fit.int8 import QuantiseHook, error_text
from guard.compiler.fit.ladder import SEARCH_S, Ladder, climb
from guard.compiler.runtime.artefact_json import MemoryBudget
from guard.core.budget_bytes import fmt_bytes
from guard.core.user_cache import cache_root

WITHIN_S = 60.0  # guard fit's default bound: a zoo model's ladder in under a minute


def fit_model(
    model_path: str | Path,
    input_shapes: Mapping[str, Sequence[int]] | None,
    budget_bytes: int,
    *,
    latency: bool = True,
    seconds: float = 3.0,
    search_s: float = SEARCH_S,
    name: str | None = None,
    quantise: QuantiseHook | None = None,
    within_s: float | None = WITHIN_S,
) -> tuple[MemoryBudget, str]:
    """Import, optimise (O2, the host's layouts), climb every rung (not stopping at the
    first fit: the command shows the whole ladder) and, with ``latency``, build and time
    each distinct rung against the unconstrained build; ``quantise`` (guard.quantize.fit_hook)
    makes the int8 rung's model. Compiled objects are kept in guard's cache (``codegen``:
    guard.compiler.codegen.object_cache), so a second ladder of the model compiles nothing
    it compiled before. With ``within_s``, a plan whose build would end the
    command past that many seconds is not built (its latency is not measured: said)."""
    t0 = time.perf_counter()
    graph = import_onnx(model_path, dict(input_shapes or {}))
    optimised, _ = optimize(graph, "O2", target=codegen_target("host").table)
    verify(optimised)
    ladder = climb(optimised, budget_bytes, stop_at_fit=False, search_s=search_s, quantise=quantise)
    if latency:
        from guard.compiler.fit.measure import measure

        deadline = None if within_s is None else t0 + within_s
        cache = cache_root() / "codegen"  # guard.compiler.codegen.object_cache
        ladder = measure(ladder, seconds=seconds, deadline=deadline, cache=cache)
    return ladder.to_dict(), text(ladder, name or Path(model_path).name, latency)


def text(ladder: Ladder, name: str, latency: bool) -> str:
    lines = [
        f"{name}: budget {fmt_bytes(ladder.budget_bytes)} ({ladder.budget_bytes} B); liveness "
        f"lower bound of the unconstrained schedule {fmt_bytes(ladder.unconstrained_lower_bound_bytes)}",
        f"  {'rung':<13} {'arena':>11} {'latency':>9}  what",
    ]
    for s in ladder.steps:
        arena = fmt_bytes(s.arena_bytes) if s.arena_bytes is not None else "-"
        if s.latency_cost_pct is not None:
            cost = f"{s.latency_cost_pct:+.1f}%"
        else:
            cost = "-" if s.arena_bytes is None or not latency else "n/a"
        mark = "*" if ladder.fits and s.rung == ladder.rung else " "
        err = error_text(s)
        what = f"{s.what}; {err}" if err else s.what
        lines.append(f" {mark}{s.rung} {s.name:<11} {arena:>11} {cost:>9}  {what}")
    if ladder.unmeasured:
        rungs = ", ".join(str(r) for r in ladder.unmeasured)
        lines.append(
            f"  latency of rung(s) {rungs} not measured: building them would pass the "
            "command's time bound (--within)"
        )
    lines.append(f"  {ladder.summary()}")
    lines.append(
        f"  search {ladder.seconds:.1f} s (bound {SEARCH_S:.0f} s)"
        + ("; latency measured interleaved in one process" if latency else "")
    )
    return "\n".join(lines)
