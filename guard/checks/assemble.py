"""One result of the results contract (docs/ARCHITECTURE.md), errors included.

Every result guard writes is assembled here by ``result_dict``, with one key set
(``CONTRACT_KEYS``, in that order, then what other parts of guard add): a measured result,
an emulated one and an error differ only in which values are null. Readers read it back as
a guard.results.result.Result.
"""

from __future__ import annotations

from typing import Any

from guard.checks import evaluate as ck
from guard.core.errors import GuardError, UsageError
from guard.golden.numerics import NumericsJson
from guard.suite import ModelEntry

# The contract's keys, in the order every result is written (docs/ARCHITECTURE.md).
CONTRACT_KEYS = (
    "model", "backend", "target", "verdict", "checks", "error", "error_kind", "manifest",
    "latency_ms", "latency_status", "samples_ms", "rounds", "noise_pct", "measurement",
    "partitions", "arena_bytes", "arena_lower_bound_bytes", "memory", "numerics", "preflight",
    "artefact", "artefact_reused", "graph",
)  # fmt: skip


def result_dict(
    entry: ModelEntry,
    backend: str,
    *,
    checks: list[ck.Check],
    error: str | None = None,
    error_kind: str | None = None,
    manifest: dict[str, Any] | None = None,
    latency_ms: dict[str, Any] | None = None,
    latency_status: str | None = None,
    samples_ms: list[float] | None = None,
    rounds: list[dict[str, Any]] | None = None,
    noise_pct: float | None = None,
    measurement: dict[str, Any] | None = None,
    partitions: dict[str, Any] | None = None,
    arena_bytes: int | None = None,
    arena_lower_bound_bytes: int | None = None,
    memory: dict[str, Any] | None = None,
    numerics: NumericsJson | None = None,
    preflight: dict[str, Any] | None = None,
    artefact: str | None = None,
    artefact_reused: bool | None = None,
    graph: dict[str, Any] | None = None,
    layout_conversions: int | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One result of the results contract: every result, errors included, has the
    contract's keys (``CONTRACT_KEYS``), and ``extra`` (e.g. ``kernels``) follows them."""
    out: dict[str, Any] = dict(
        model=entry.name,
        backend=backend,
        target=entry.target,
        verdict=ck.verdict(checks, error),
        checks=[c.to_dict() for c in checks],
        error=error,
        error_kind=error_kind,
        manifest=manifest,
        latency_ms=latency_ms,
        latency_status=latency_status,
        samples_ms=list(samples_ms or []),
        rounds=rounds,
        noise_pct=noise_pct,
        measurement=measurement,
        partitions=partitions,
        arena_bytes=arena_bytes,
        arena_lower_bound_bytes=arena_lower_bound_bytes,
        memory=memory,
        numerics=numerics,
        preflight=preflight,
        artefact=artefact,
        artefact_reused=artefact_reused,
        graph=graph,
    )
    # relayouts and NCHW<->NHWC transposes in the built graph (null where the backend
    # does not say), beside the partitions it was counted with
    if partitions is not None:
        out["layout_conversions"] = layout_conversions
    out.update(extra or {})
    return out


def error_result(entry: ModelEntry, backend: str, exc: BaseException) -> dict[str, Any]:
    """The result of a (model, backend) guard could not run: the error as a ``run`` check."""
    msg = str(exc) if isinstance(exc, GuardError) else f"internal error: {exc!r}"
    return result_dict(
        entry,
        backend,
        checks=[ck.Check("run", "error", None, None, msg)],
        error=msg,
        error_kind="usage" if isinstance(exc, UsageError) else "internal",
    )
