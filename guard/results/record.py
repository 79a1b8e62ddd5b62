"""The typed result: one record per (model, backend, target), and the one key that names it.

``Result`` has a field for every key of a result in the results contract
(docs/ARCHITECTURE.md) and keeps whatever else a result carries in ``extra``, in order, so
a field another part of guard adds (``duration_s``, ``kernels``, ``counted``, ...) or a
newer guard wrote passes through untouched: ``Result.from_dict(d).to_dict() == d`` for
every result object. A contract key the source did not have stays absent (older files
lack ``rounds``, ``noise_pct``, ...), so reading a file never adds keys to it.
``to_dict`` is the one serialiser; guard.results.result builds a Result once, at the end
of a case, and guard.results.load reads files.

``Result.key`` is its guard.core.result_key.ResultKey, the one key every reader pairs
results by.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from guard.core.errors import UsageError
from guard.core.result_key import ResultKey


# The contract's keys, in the order a result is written (docs/ARCHITECTURE.md).
@dataclass
class Result:
    """One result of the results contract; ``extra`` holds every other key, in order."""

    model: str
    backend: str
    target: str
    verdict: str
    checks: list[dict[str, Any]]
    error: str | None = None
    error_kind: str | None = None
    manifest: dict[str, Any] | None = None
    latency_ms: dict[str, Any] | None = None
    # "measured", or "emulated" (foreign-arch code run under qemu: latency_ms is null)
    latency_status: str | None = None
    samples_ms: list[float] = field(default_factory=list)
    rounds: list[dict[str, Any]] | None = None  # per round: samples_ms, p50, n, contention
    noise_pct: float | None = None  # between-round spread: 100 x SD of the rounds' log medians
    measurement: dict[str, Any] | None = None
    partitions: dict[str, Any] | None = None
    arena_bytes: int | None = None
    arena_lower_bound_bytes: int | None = None
    memory: dict[str, Any] | None = None
    numerics: dict[str, Any] | None = None
    preflight: dict[str, Any] | None = None
    artefact: str | None = None
    artefact_reused: bool | None = None
    graph: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # Contract keys the source object did not have (an older file): to_dict leaves them out.
    absent: frozenset[str] = frozenset()

    @property
    def key(self) -> ResultKey:
        return ResultKey.of(self.to_dict())

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "result") -> Result:
        """The Result of a result object, losslessly (see the module docstring)."""
        for k in ("model", "backend", "target"):
            if k not in d:
                raise UsageError(f"{where}: needs model, backend and target")
        known = {k: d[k] for k in CONTRACT_KEYS if k in d}
        extra = {k: v for k, v in d.items() if k not in _CONTRACT}
        absent = frozenset(k for k in CONTRACT_KEYS if k not in d)
        known.setdefault("verdict", None)
        known.setdefault("checks", None)
        return cls(**known, extra=extra, absent=absent)

    def to_dict(self) -> dict[str, Any]:
        """The result object of the results contract: the one serialiser."""
        out = {k: getattr(self, k) for k in CONTRACT_KEYS if k not in self.absent}
        out.update(self.extra)
        return out


CONTRACT_KEYS = tuple(f.name for f in fields(Result) if f.name not in ("extra", "absent"))
_CONTRACT = frozenset(CONTRACT_KEYS)
