"""A comparison's cross-architecture rows (``cross_arch``, guard.compare.crossarch) as typed
records: the two sides, the drift between their outputs, and their counted cost side by side.

guard.compare.crossarch writes the rows; its report and exit code read them through these
records (``CrossArchRow.of``), as every reader reads the rest of a comparison document.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from guard.results.record import Record


@dataclass(frozen=True, kw_only=True)
class CrossSide(Record):
    """One side of a cross-architecture row: its target, the architecture of its code and
    of the machine that ran it, and whether its latency was measured or emulated."""

    target: str | None = None
    arch: str | None = None
    host_arch: str | None = None
    latency_status: str | None = None


@dataclass(frozen=True, kw_only=True)
class OutputDrift(Record):
    """``outputs``: how far the other side's outputs are from the reference side's."""

    hash_equal: bool | None = None
    rtol: float | None = None
    atol: float | None = None
    max_abs: float | None = None
    max_rel: float | None = None
    allclose: bool | None = None
    top1_agreement: float | None = None
    elements: int | None = None
    sampled: bool | None = None
    max_abs_bound: float | None = None  # a side without outputs: the sum of both errors
    how: str | None = None


@dataclass(frozen=True, kw_only=True)
class CountedPair(Record):
    """``counted``: instructions and bytes moved per inference on each architecture
    (bytes None where a hardware counter counted)."""

    instructions: tuple[float, ...] = ()
    bytes_moved: tuple[float | None, ...] = ()
    targets: tuple[str | None, ...] = ()


@dataclass(frozen=True, kw_only=True)
class CrossArchRow(Record):
    """One model on two architectures: output drift, partitions and arena, [ref, other]."""

    model: str | None = None
    backend: str | None = None
    arches: tuple[str | None, ...] = ()
    sides: tuple[CrossSide, ...] = ()
    verdict: str | None = None  # consistent | drift | differs | inconclusive
    outputs: OutputDrift = field(default_factory=OutputDrift)
    partitions: tuple[int | None, ...] = ()
    partitions_equal: bool | None = None
    arena_bytes: tuple[int | None, ...] = ()
    arena_equal: bool | None = None
    latency: str | None = None
    counted: CountedPair | None = None
    summary: str | None = None
