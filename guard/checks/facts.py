"""What one run of one (model, backend, target) established, for the checks to judge
(guard.checks.evaluate): the result's parts as the typed records it will write
(guard.results), built once when the result is finished (guard.run.facts.gather_facts)."""

from __future__ import annotations

from dataclasses import dataclass, field

from guard.results.counted import Counted
from guard.results.documents import CountedRow, RowStats
from guard.results.manifest import TuningCache
from guard.results.result import (
    Contention,
    Latency,
    MemoryBudget,
    Numerics,
    Partitions,
    Quantization,
)


@dataclass(frozen=True)
class Facts:
    """What one run of one (model, backend, target) established; checks read only this.

    Built once, when the result is finished (guard.run.facts), and read by ``evaluate``
    once: nothing fills it in later."""

    backend: str
    arch: str
    numerics: Numerics
    latency_ms: Latency | None = None
    truncated: bool = False
    contention: Contention | None = None  # guard.measure.preflight.contention_block
    accuracy: float | None = None
    accuracy_n: int | None = None
    accuracy_error: str | None = None
    baseline_given: bool = False
    regress: RowStats | None = None  # Comparison.to_dict() against the baseline
    regress_reason: str | None = None  # why there is no comparison
    latency_skipped: str | None = None  # why latency was not measured (e.g. emulated)
    partitions: Partitions = field(default_factory=Partitions)
    arena_bytes: int | None = None
    arena_lower_bound_bytes: int | None = None
    # options.bundled.memory_budget's ladder (memory.budget in the result), when one was set
    arena_budget: MemoryBudget | None = None
    tuning: TuningCache = field(default_factory=TuningCache)  # the manifest's tuning_cache
    counted: Counted | None = None  # the counted block (guard.counting.count)
    counted_cmp: CountedRow | None = None  # guard.counting.verdict row against the baseline
    counted_bound: float | None = None  # checks.counted.regress_pct
    quantization: Quantization | None = None  # an int8 row's block (guard.run.int8)
