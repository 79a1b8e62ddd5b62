"""A result's ``counted`` block as a typed record: instructions and bytes per inference,
counted by an emulator or the host's hardware counter, and the fingerprint that says which
two counts are comparable (guard.counting.count writes it; guard.counting.verdict compares)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from guard.results.record import Record


@dataclass(frozen=True, kw_only=True)
class Fingerprint(Record):
    """What decides what a count means: the engine, the emulator and plugin or the hardware
    counter's event and CPU, the counting target, the artefact and the inputs."""

    engine: str | None = None
    emulator: str | None = None
    plugin_sha256: str | None = None
    event: str | None = None
    cpu: str | None = None
    cpu_features: str | None = None
    cpu_model: str | None = None
    kernel: str | None = None
    target: str | None = None
    artefact_sha256: str | None = None
    input_sha256: str | None = None


@dataclass(frozen=True, kw_only=True)
class CountedKernel(Record):
    """One generated kernel's instructions in the counted inference, and what it runs."""

    instructions: float | None = None
    op: str | None = None
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Counted(Record):
    """``counted``: per inference after warm-up, or ``error`` when the count failed."""

    engine: str | None = None
    target: str | None = None
    arch: str | None = None
    runs_in: str | None = None
    inferences: int | None = None
    warmup: int | None = None
    instructions: float | None = None
    bytes_loaded: float | None = None  # null where the engine counts no bytes
    bytes_stored: float | None = None
    loads: float | None = None
    stores: float | None = None
    spread_pct: float | None = None
    wall_s: float | None = None
    engine_note: str | None = None
    bytes_note: str | None = None
    artefact: str | None = None  # the sibling built for the counting target, if any
    kernels: Mapping[str, CountedKernel] = field(default_factory=dict)
    fingerprint: Fingerprint = field(default_factory=Fingerprint)
    error: str | None = None

    @property
    def failed(self) -> bool:
        """Whether this block says why there is no count (``{"error": ...}``)."""
        return self.error is not None
