"""One result of the results contract (docs/ARCHITECTURE.md), errors included.

Every result guard writes is assembled here by ``result_dict``, with one key set
(``CONTRACT_KEYS``, in that order, then what other parts of guard add): a measured result,
an emulated one and an error differ only in which values are null. Readers read it back as
a guard.results.result.Result.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from guard.backends.base import KernelRow, PartitionsJson
from guard.checks import evaluate as ck
from guard.core.errors import GuardError, UsageError
from guard.core.json_types import JsonObject
from guard.golden.numerics import NumericsJson
from guard.manifest.written import ManifestJson
from guard.measure.json_shapes import RoundJson
from guard.measure.preflight import Preflight
from guard.suite import ModelEntry

# The contract's keys, in the order every result is written (docs/ARCHITECTURE.md).
CONTRACT_KEYS = (
    "model", "backend", "target", "verdict", "checks", "error", "error_kind", "manifest",
    "latency_ms", "latency_status", "samples_ms", "rounds", "noise_pct", "measurement",
    "partitions", "arena_bytes", "arena_lower_bound_bytes", "memory", "numerics", "preflight",
    "artefact", "artefact_reused", "graph",
)  # fmt: skip

# latency_ms: min/p50/p90/p99/mean/stdev in ms, cv and n (guard.measure.summary)
LatencyJson = dict[str, float | int | None]


class MeasurementJson(TypedDict, total=False):
    """A result's ``measurement``: how its rounds were measured, or that it was emulated."""

    warmup_iters: int
    truncated: bool
    stopped_by: str | None
    contention: float | None
    cpu_share: float | None
    preempted_fraction: float | None
    rounds: int
    round_isolation: str
    host_probe: str | None
    round_order: str
    cpus: list[int] | None
    config: JsonObject  # the suite's measure: block
    emulated: bool
    emulator: str | None
    reason: str


class BuildWarnings(TypedDict):
    """The ``preflight`` of a result run under emulation: the build's warnings only."""

    warnings: list[str]


class ResultExtra(TypedDict, total=False):
    """What follows the contract's keys: contention, quantization, kernels, counted."""

    contention: JsonObject  # the Contention record's JSON
    quantization: JsonObject  # the Quantization record's JSON
    kernels: list[KernelRow]
    counted: JsonObject  # the Counted record's JSON


class ResultJson(TypedDict):
    """One result as written (docs/ARCHITECTURE.md): the contract's keys, in order, then
    ``layout_conversions`` (with partitions) and the extras."""

    model: str
    backend: str
    target: str
    verdict: str
    checks: list[JsonObject]  # each a CheckJson (or a Check record's JSON, when rewritten)
    error: str | None
    error_kind: str | None
    manifest: ManifestJson | None
    latency_ms: LatencyJson | None
    latency_status: str | None
    samples_ms: list[float]
    rounds: list[RoundJson] | None
    noise_pct: float | None
    measurement: MeasurementJson | None
    partitions: PartitionsJson | None
    arena_bytes: int | None
    arena_lower_bound_bytes: int | None
    memory: JsonObject | None  # {how, ...}: the backend's own memory report
    numerics: NumericsJson | None
    preflight: Preflight | BuildWarnings | None
    artefact: str | None
    artefact_reused: bool | None
    graph: JsonObject | None  # the backend's graph report, passed through
    layout_conversions: NotRequired[int | None]
    contention: NotRequired[JsonObject]
    quantization: NotRequired[JsonObject]
    kernels: NotRequired[list[KernelRow]]
    counted: NotRequired[JsonObject]
    # the case's span (build, load, numerics and rounds), set by the runner
    duration_s: NotRequired[float]
    started: NotRequired[str]
    finished: NotRequired[str]


def result_dict(
    entry: ModelEntry,
    backend: str,
    *,
    checks: list[ck.Check],
    error: str | None = None,
    error_kind: str | None = None,
    manifest: ManifestJson | None = None,
    latency_ms: LatencyJson | None = None,
    latency_status: str | None = None,
    samples_ms: list[float] | None = None,
    rounds: list[RoundJson] | None = None,
    noise_pct: float | None = None,
    measurement: MeasurementJson | None = None,
    partitions: PartitionsJson | None = None,
    arena_bytes: int | None = None,
    arena_lower_bound_bytes: int | None = None,
    memory: JsonObject | None = None,
    numerics: NumericsJson | None = None,
    preflight: Preflight | BuildWarnings | None = None,
    artefact: str | None = None,
    artefact_reused: bool | None = None,
    graph: JsonObject | None = None,
    layout_conversions: int | None = None,
    extra: ResultExtra | None = None,
) -> ResultJson:
    """One result of the results contract: every result, errors included, has the
    contract's keys (``CONTRACT_KEYS``), and ``extra`` (e.g. ``kernels``) follows them."""
    out: ResultJson = {
        "model": entry.name,
        "backend": backend,
        "target": entry.target,
        "verdict": ck.verdict(checks, error),
        "checks": [dict(c.to_dict()) for c in checks],
        "error": error,
        "error_kind": error_kind,
        "manifest": manifest,
        "latency_ms": latency_ms,
        "latency_status": latency_status,
        "samples_ms": list(samples_ms or []),
        "rounds": rounds,
        "noise_pct": noise_pct,
        "measurement": measurement,
        "partitions": partitions,
        "arena_bytes": arena_bytes,
        "arena_lower_bound_bytes": arena_lower_bound_bytes,
        "memory": memory,
        "numerics": numerics,
        "preflight": preflight,
        "artefact": artefact,
        "artefact_reused": artefact_reused,
        "graph": graph,
    }
    # relayouts and NCHW<->NHWC transposes in the built graph (null where the backend
    # does not say), beside the partitions it was counted with
    if partitions is not None:
        out["layout_conversions"] = layout_conversions
    out.update(extra or {})
    return out


def error_result(entry: ModelEntry, backend: str, exc: BaseException) -> ResultJson:
    """The result of a (model, backend) guard could not run: the error as a ``run`` check."""
    msg = str(exc) if isinstance(exc, GuardError) else f"internal error: {exc!r}"
    return result_dict(
        entry,
        backend,
        checks=[ck.Check("run", "error", None, None, msg)],
        error=msg,
        error_kind="usage" if isinstance(exc, UsageError) else "internal",
    )
