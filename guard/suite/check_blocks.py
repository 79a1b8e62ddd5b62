"""A suite's ``checks:`` blocks as typed records: what each gate is bounded by.

guard.suite.blocks validates a block's keys and values (CHECK_KEYS names them) and builds
its record here; a model's block is merged key by key over the defaults' one. A field is
None when the suite does not set it, so a record says which keys were written:
``to_dict`` gives back exactly those (the reproducer guard reduce writes), and the
defaults the checks apply (tolerance's rtol 1e-4, atol 1e-5) stay with the checks.
Values keep the type the suite gave (an integer bound stays an int), so a check's bound
in the results JSON is what it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Self

# A latency bound: one for every arch, or one per arch ({x86_64: 150, aarch64: 300}).
ArchBound = float | dict[str, float]
# The latency bounds by percentile, in the order the checks are written.
LATENCY_KEYS = ("p50_ms", "p90_ms", "p99_ms")


@dataclass(frozen=True)
class _Block:
    """A check block whose fields are its keys; None is a key the suite does not set (a
    key the block cannot do without, blocks.REQUIRED_CHECK_KEYS, is a field without one)."""

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> Self:
        return cls(**d)  # blocks.py validated every key and value

    def to_dict(self) -> dict[str, object]:
        """The keys the suite set, in the block's field order."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        return {k: v for k, v in out.items() if v is not None}


@dataclass(frozen=True)
class LatencyBounds(_Block):
    p50_ms: ArchBound | None = None
    p90_ms: ArchBound | None = None
    p99_ms: ArchBound | None = None
    regress_pct: float | None = None
    strict: bool | None = None  # fail a bound missed under contention

    def bounds(self) -> list[tuple[str, ArchBound]]:
        """(key, bound) of each percentile the suite bounds, p50 first."""
        keyed = zip(LATENCY_KEYS, (self.p50_ms, self.p90_ms, self.p99_ms), strict=True)
        return [(k, b) for k, b in keyed if b is not None]


@dataclass(frozen=True)
class Tolerance(_Block):
    """``tolerance`` (against the golden) and ``expected`` (against a test_data output)."""

    rtol: float | None = None
    atol: float | None = None


@dataclass(frozen=True)
class AccuracyBound(_Block):
    dataset: str  # "zoo:<name>"
    min_top1: float | None = None
    limit: int | None = None  # the dataset's first ``limit`` samples


@dataclass(frozen=True)
class PartitionsBound(_Block):
    max: int


@dataclass(frozen=True)
class ArenaBound(_Block):
    max_bytes: int


@dataclass(frozen=True)
class TuningBound(_Block):
    min_hit_rate: float


@dataclass(frozen=True)
class CountedBound(_Block):
    regress_pct: float | None = None


@dataclass(frozen=True)
class QuantizationBounds(_Block):
    """The int8 row's bounds against its fp32 source (guard.suite.quantize)."""

    min_top1_agreement: float | None = None
    min_sqnr_db: float | None = None
    max_top1_drop: float | None = None


@dataclass(frozen=True)
class Int8Agreement(_Block):
    across: tuple[str, ...] = ()  # the targets whose int8 rows must agree

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> Self:
        across = d.get("across") or ()
        return cls(tuple(across))  # type: ignore[arg-type]  # validated: a list of strings

    def to_dict(self) -> dict[str, object]:
        return {"across": list(self.across)}


BLOCK_TYPES: dict[str, type[_Block]] = {
    "latency": LatencyBounds,
    "tolerance": Tolerance,
    "expected": Tolerance,
    "accuracy": AccuracyBound,
    "partitions": PartitionsBound,
    "arena": ArenaBound,
    "tuning": TuningBound,
    "counted": CountedBound,
    "quantization": QuantizationBounds,
    "int8_agreement": Int8Agreement,
}


@dataclass(frozen=True)
class CheckBlocks:
    """The check blocks of one suite entry; None is a check the suite does not configure."""

    latency: LatencyBounds | None = None
    tolerance: Tolerance | None = None
    expected: Tolerance | None = None
    accuracy: AccuracyBound | None = None
    partitions: PartitionsBound | None = None
    arena: ArenaBound | None = None
    tuning: TuningBound | None = None
    counted: CountedBound | None = None
    quantization: QuantizationBounds | None = None
    int8_agreement: Int8Agreement | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Mapping[str, object]]) -> CheckBlocks:
        """Blocks from their JSON form (a test's, or a reproducer's ``checks:``)."""
        blocks = {k: BLOCK_TYPES[k].from_dict(v) for k, v in d.items()}
        return cls(**blocks)  # type: ignore[arg-type]  # BLOCK_TYPES gives each its type

    def to_dict(self) -> dict[str, dict[str, object]]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        return {k: b.to_dict() for k, b in out.items() if b is not None}

    def expected_tolerance(self) -> Tolerance | None:
        """The block test_data's outputs are held to: ``expected``, or ``tolerance`` when
        ``expected`` is absent or sets no key."""
        if self.expected is not None and self.expected.to_dict():
            return self.expected
        return self.tolerance
