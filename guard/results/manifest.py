"""A result's manifest as a typed record: the pins that make two artefacts comparable
(compiler, runtime, driver, target, tuning cache, model, host) and their hash
(guard.manifest builds it; guard.manifest.pins says which fields are pinned)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from guard.results.record import Json, Record


@dataclass(frozen=True, kw_only=True)
class Component(Record):
    """The compiler or the runtime: its name and version (and backend-specific pins)."""

    name: str | None = None
    version: str | None = None


@dataclass(frozen=True, kw_only=True)
class Target(Record):
    """The target as the suite spelled it and its canonical form (defaults resolved,
    attributes sorted: two spellings of one target are one tuning-cache key)."""

    raw: str | None = None
    canonical: str | None = None


@dataclass(frozen=True, kw_only=True)
class MissedKey(Record):
    """A tuning-cache look-up that missed, with the nearest key and how it differs (older
    caches: ``task`` or ``name`` for the key, ``diff`` or ``difference`` for how)."""

    key: Json = None
    task: Json = None
    name: Json = None
    nearest: Json = None
    differs: Json = None
    diff: Json = None
    difference: Json = None


@dataclass(frozen=True, kw_only=True)
class TuningCache(Record):
    """The tuned-schedule cache the artefact was built with, and its look-ups."""

    sha256: str | None = None
    entries: int | None = None
    hits: int | None = None
    misses: int | None = None
    path: str | None = None
    # each a MissedKey object, or the key alone as a string (caches that record no nearest)
    missed: tuple[Json, ...] = ()
    misses_tuned_for_other_target: int | None = None
    kernel_speedup: float | None = None  # hit kernels against their default schedules

    @property
    def hit_rate(self) -> float | None:
        """hits / (hits + misses); None without look-ups."""
        if self.hits is None or self.misses is None or self.hits + self.misses == 0:
            return None
        return self.hits / (self.hits + self.misses)


@dataclass(frozen=True, kw_only=True)
class ModelPin(Record):
    """The model file's hash, opset and inputs."""

    sha256: str | None = None
    opset: int | None = None
    inputs: Mapping[str, Json] | None = None  # {name: {shape, dtype, ...}} as bound


@dataclass(frozen=True, kw_only=True)
class Host(Record):
    """The machine that measured: its architecture, CPU model, cores and threads used."""

    arch: str | None = None
    cpu: str | None = None
    cores: int | None = None
    threads: int | None = None
    # {l1d_bytes, l2_bytes, l3_bytes} as guard.manifest.cpu.host_caches writes it (older
    # records: a list of {name, level, type, bytes, shared_cpus})
    caches: Json = None


@dataclass(frozen=True, kw_only=True)
class GuardPin(Record):
    """The guard that built the artefact."""

    version: str | None = None
    commit: str | None = None
    dirty: bool | None = None


@dataclass(frozen=True, kw_only=True)
class QuantizationPin(Record):
    """``quantization``: an int8 model's pins (guard.manifest.pins: pinned when present)."""

    source_sha256: str | None = None
    profile_sha256: str | None = None
    calibration_sha256: str | None = None
    method: str | None = None


@dataclass(frozen=True, kw_only=True)
class Manifest(Record):
    """A manifest (schema_version 1), as a result carries it."""

    schema_version: int | None = None
    compiler: Component = field(default_factory=Component)
    runtime: Component = field(default_factory=Component)
    driver: Mapping[str, Json] = field(default_factory=dict)
    target: Target = field(default_factory=Target)
    tuning_cache: TuningCache = field(default_factory=TuningCache)
    model: ModelPin = field(default_factory=ModelPin)
    host: Host = field(default_factory=Host)
    guard: GuardPin = field(default_factory=GuardPin)
    quantization: QuantizationPin | None = None
    sha256: str | None = None
