"""One rung's outcome on the escape ladder (guard.compiler.fit.ladder)."""

from __future__ import annotations

from dataclasses import dataclass, field

from guard.compiler.partition.plan import CompiledPlan
from guard.compiler.runtime.artefact_json import RungFile


@dataclass(frozen=True)
class Step:
    """One rung's outcome: the arena after it (None: the rung could not run) and what it did."""

    rung: int
    name: str
    arena_bytes: int | None
    what: str
    seconds: float
    extra_macs_pct: float = 0.0
    latency_cost_pct: float | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None  # max abs error over the fp32 output's max magnitude
    top1_agreement: float | None = None  # a classifier's top-1 against fp32, seeded inputs
    quantised: bool = False  # rung 5 (and a spill on top of it): outputs state their error
    spill_bytes: int | None = None  # rung 6: bytes in the spill region, outside the budget
    spill_traffic_bytes: int | None = None  # rung 6: bytes copied out and back per inference
    plan: CompiledPlan | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> RungFile:
        out: RungFile = {
            "rung": self.rung,
            "name": self.name,
            "arena_bytes": self.arena_bytes,
            "latency_cost_pct": self.latency_cost_pct,
            "what": self.what,
            "extra_macs_pct": round(self.extra_macs_pct, 3),
            "max_abs_err": self.max_abs_err,
            "seconds": round(self.seconds, 3),
        }
        if self.quantised:
            out["quantised"] = True
            out["max_rel_err"] = self.max_rel_err
            out["top1_agreement"] = self.top1_agreement
        if self.spill_bytes is not None:
            out["spill_bytes"] = self.spill_bytes
            out["spill_traffic_bytes"] = self.spill_traffic_bytes
        return out
