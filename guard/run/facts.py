"""The checks' facts of one result (guard.run.one_result): what ``begin_result`` established
before the rounds (``Known``: accuracy, the int8 block, the count and its comparison with
the baseline's), what the rounds add (``against_baseline``: the latency comparison with
--baseline), gathered into the one ``checks.Facts`` record ``checks.evaluate`` judges
(``gather_facts``). Each part is the record the result will write (guard.results)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guard import manifest as mf
from guard.checks import evaluate as ck
from guard.golden.numerics import NumericsJson
from guard.results.counted import Counted
from guard.results.documents import CountedRow, ResultsDocument, RowStats
from guard.results.manifest import Manifest, TuningCache
from guard.results.result import (
    Contention,
    Latency,
    MemoryBudget,
    Numerics,
    Partitions,
    Quantization,
    Result,
    ResultKey,
)
from guard.run.case import Case
from guard.suite import ModelEntry


def host_arch(manifest: Manifest) -> str:
    """The architecture the artefact was built for (its canonical target's), else this
    machine's."""
    try:
        return mf.target_arch(str(manifest.target.canonical))
    except Exception:  # noqa: BLE001 - fall back to the host's arch
        return os.uname().machine


def result_key(model: str, backend: str, manifest: Manifest) -> ResultKey:
    """The key this result will have (Result.key: the manifest's canonical target)."""
    return Result(model=model, backend=backend, manifest=manifest).key


def against_baseline(
    entry: ModelEntry,
    backend: str,
    head_r: Result,
    bound: float | None,
    baseline: ResultsDocument | None,
    noise: Mapping[str, Mapping[str, float]] | None = None,
) -> tuple[RowStats | None, str | None]:
    """(comparison, None) against the --baseline results file, or (None, why not).

    ``head_r`` is this result's measurement as the results file will hold it (manifest,
    rounds, measurement): judged exactly as ``guard compare`` judges two files, with the
    suite's calibrated noise (``noise``: "model/backend/target" -> its noise file entry)
    where ``guard calibrate`` measured it.
    """
    from guard.compare.compare import host_incompatibility, latency_comparison
    from guard.stats.regress import DEFAULT_RUN_NOISE_PCT, RegressConfig

    if baseline is None or bound is None:
        return None, None
    key = result_key(entry.name, backend, head_r.manifest)
    base = next(
        (
            r
            for r in baseline.results
            if r.verdict != "error" and r.manifest.to_json() and r.key == key
        ),
        None,
    )
    if base is None:
        return None, f"the baseline has no result for {key.model} [{key.backend}] on this target"
    why = host_incompatibility(base.manifest, head_r.manifest)
    if why:
        return None, f"baseline refused: {why}"
    calibrated = (noise or {}).get(str(key)) or {}
    cfg = RegressConfig(
        regress_pct=bound,
        noise_pct=calibrated.get("noise_pct"),
        run_noise_pct=calibrated.get("run_noise_pct", DEFAULT_RUN_NOISE_PCT),
    )
    comp, reason = latency_comparison(base, head_r, cfg)
    return (RowStats.from_json(comp.to_dict()), None) if comp is not None else (None, reason)


@dataclass
class Known:
    """What the checks will read of ``begin_result``'s phase (the build, the session, the
    golden, accuracy, the int8 block, the count): the ``checks.Facts`` fields established
    before the rounds, each the record the result will write. The numerics are the
    result's JSON block itself (``PendingResult.numerics``), read when the facts are."""

    backend: str
    arch: str
    tuning: TuningCache  # the manifest's tuning_cache
    accuracy: float | None = None
    accuracy_n: int | None = None
    accuracy_error: str | None = None
    quantization: Quantization | None = None  # an int8 row's block (guard.run.int8)
    counted: Counted | None = None  # the counted block (guard.run.counted)
    counted_bound: float | None = None
    counted_cmp: CountedRow | None = None  # against the baseline's count


def gather_facts(
    known: Known,
    numerics: NumericsJson,
    *,
    baseline_given: bool,
    partitions: Partitions,
    arena_bytes: int | None,
    arena_lower_bound_bytes: int | None,
    arena_budget: MemoryBudget | None,
    regress_reason: str | None,
    regress: RowStats | None = None,
    latency_ms: Latency | None = None,
    truncated: bool = False,
    contention: Contention | None = None,
    latency_skipped: str | None = None,
) -> ck.Facts:
    """The one ``checks.Facts`` of a finished result: what ``begin_result`` established,
    the numerics as the result writes them, and what the rounds (or emulation) added."""
    return ck.Facts(
        backend=known.backend,
        arch=known.arch,
        numerics=Numerics.from_json(numerics),
        tuning=known.tuning,
        accuracy=known.accuracy,
        accuracy_n=known.accuracy_n,
        accuracy_error=known.accuracy_error,
        quantization=known.quantization,
        counted=known.counted,
        counted_bound=known.counted_bound,
        counted_cmp=known.counted_cmp,
        baseline_given=baseline_given,
        latency_ms=latency_ms,
        truncated=truncated,
        contention=contention,
        regress=regress,
        regress_reason=regress_reason,
        latency_skipped=latency_skipped,
        partitions=partitions,
        arena_bytes=arena_bytes,
        arena_lower_bound_bytes=arena_lower_bound_bytes,
        arena_budget=arena_budget,
    )


def count_known(
    case: Case,
    known: Known,
    cfg: Any,
    workdir: Path,
    baseline: ResultsDocument | None,
    tools_missing: list[str] | None,
) -> None:
    """Count the case (guard.run.counted) into ``known``: the block, and the comparison
    with the baseline's count under the suite's bound."""
    from guard.run.counted import count_case, counted_against

    block = count_case(case, cfg, workdir, tools_missing if tools_missing is not None else [])
    if block is None:
        return
    key = result_key(case.model, case.backend, Manifest.of(case.manifest))
    known.counted = block
    known.counted_bound, known.counted_cmp = counted_against(case.entry, block, baseline, key)


def memory_budget(memory_extra: Mapping[str, object]) -> MemoryBudget | None:
    """The memory budget's ladder a backend reported with its memory plan (``memory.budget``
    in the result), as the checks read it."""
    budget = memory_extra.get("budget")
    return MemoryBudget.from_json(budget) if budget is not None else None
