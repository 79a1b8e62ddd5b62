"""The results document (``guard run --json``) and the comparison document (``guard compare
--json``) as typed records, each with its schema version (docs/ARCHITECTURE.md).

guard.results.load reads them (one loader each, validating ``schema_version``); the
writers (guard.run.runner, guard.compare.compare) still assemble the JSON, and any
document read here writes back byte for byte (guard.results.record).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from guard.results.record import Json, Record
from guard.results.result import Result

# The comparison document's version (the results file's is guard.core.schema's, beside the
# frame check every results reader shares).
COMPARISON_SCHEMA_VERSION = 1

RowVerdict = Literal["pass", "regressed", "improved", "inconclusive"]


@dataclass(frozen=True, kw_only=True)
class Git(Record):
    """The checkout a run was made from."""

    commit: str | None = None
    dirty: bool | None = None
    branch: str | None = None


@dataclass(frozen=True, kw_only=True)
class Shard(Record):
    """``shard``: which slice of the suite's cases a shard's run holds (guard.run.shard)."""

    index: int | None = None
    count: int | None = None
    plan_sha256: str | None = None
    weights_from: str | None = None
    cases: tuple[tuple[str, ...], ...] = ()
    suite_cases: tuple[tuple[str, ...], ...] = ()
    expected_s: float | None = None
    invocation_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class Merged(Record):
    """``merged``: the shard files ``guard merge`` joined into this document."""

    files: tuple[str, ...] = ()
    shards: tuple[int | None, ...] | None = None
    shard_count: int | None = None
    plan_sha256: str | None = None
    invocation_id: str | None = None
    missing_shards: Json = None
    tracking: tuple[Json, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ResultsDocument(Record):
    """A results file: the run's suite, when and from which checkout, and its results."""

    schema_version: int | None = None
    suite: str | None = None
    suite_path: str | None = None
    suite_sha256: str | None = None
    started: str | None = None
    finished: str | None = None
    git: Git = field(default_factory=Git)
    results: tuple[Result, ...] = ()
    user: str | None = None  # who ran it, where the run recorded it
    # what delivery adds: the exit code, the signal that stopped the run, what tracking did
    exit_code: int | None = None
    interrupted: str | None = None
    tracking: Mapping[str, Json] = field(default_factory=dict)
    shard: Shard | None = None
    merged: Merged | None = None


@dataclass(frozen=True, kw_only=True)
class RowNumerics(Record):
    """A comparison row's numerics: whether the output hash changed, errors base/head."""

    output_sha256_changed: bool | None = None
    max_abs_err: tuple[float | None, ...] = ()
    max_rel_err: tuple[float | None, ...] = ()
    max_abs_diff: float | None = None  # interleaved A/B: head's outputs against base's


@dataclass(frozen=True, kw_only=True)
class RowStats(Record):
    """A comparison row's ``stats``: the judgement's figures (guard.stats.verdicts.Comparison),
    or only the reason where there was none."""

    verdict: str | None = None
    ratio: float | None = None
    ci: tuple[float | None, ...] = ()
    p_slower: float | None = None
    p_faster: float | None = None
    threshold_pct: float | None = None
    mde_pct: float | None = None
    n_base: int | None = None
    n_head: int | None = None
    method: str | None = None
    alpha: float | None = None
    reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class ComparisonRow(Record):
    """One (model, backend, target) of a comparison: the latency verdict and ratio with its
    interval, and [base, head] pairs of what else moved."""

    model: str | None = None
    backend: str | None = None
    target: str | None = None
    verdict: RowVerdict | None = None
    ratio: float | None = None
    ci: tuple[float | None, ...] = ()
    p90_ratio: float | None = None
    arena_bytes: tuple[int | None, ...] = ()
    partitions: tuple[int | None, ...] = ()
    numerics: RowNumerics = field(default_factory=RowNumerics)
    tuning_hit_rate: tuple[float | None, ...] = ()
    contention: tuple[float | None, ...] = ()
    noise_pct: tuple[float | None, ...] = ()
    rounds: tuple[int | None, ...] = ()
    manifest_diff: Mapping[str, tuple[Json, ...]] = field(default_factory=dict)
    stats: RowStats = field(default_factory=RowStats)
    reason: str | None = None
    attribution: str | None = None


@dataclass(frozen=True, kw_only=True)
class CountedRow(Record):
    """One counted row of a comparison (guard.counting.rows): instructions and bytes moved
    per inference, base and head, and the exact verdict."""

    model: str | None = None
    backend: str | None = None
    target: str | None = None
    counted_target: str | None = None
    verdict: str | None = None  # pass|regressed|improved|not comparable|missing
    message: str | None = None
    instructions: tuple[float | None, ...] = ()
    bytes_moved: tuple[float | None, ...] = ()
    instructions_pct: float | None = None
    bytes_moved_pct: float | None = None
    bound_pct: float | None = None
    same_artefact: bool | None = None


@dataclass(frozen=True, kw_only=True)
class Side(Record):
    """One side of a comparison: its label, suite and checkout."""

    label: str | None = None
    suite: str | None = None
    git: Git = field(default_factory=Git)


@dataclass(frozen=True, kw_only=True)
class Int8Row(Record):
    """One row of ``int8``: an int8 result's outputs on each side, identical or not."""

    model: str | None = None
    backend: str | None = None
    base_target: str | None = None
    head_target: str | None = None
    outputs: str | None = None  # identical | differ | unknown
    first_differing: str | None = None


@dataclass(frozen=True, kw_only=True)
class ComparisonConfig(Record):
    """``config``: the thresholds the rows were judged with."""

    regress_pct: float | None = None
    alpha: float | None = None
    noise_k: float | None = None
    run_noise_pct: float | None = None
    calibrated_noise: Mapping[str, float] = field(default_factory=dict)
    calibrated_run_noise: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Summary(Record):
    """``summary``: the aggregates over the rows present on both sides."""

    compared: int | None = None
    by_verdict: Mapping[str, int] = field(default_factory=dict)
    geomean_ratio: float | None = None
    only_base: tuple[str, ...] = ()
    only_head: tuple[str, ...] = ()
    cross_arch: Mapping[str, int] = field(default_factory=dict)
    counted: Json = None
    int8: Mapping[str, int] = field(default_factory=dict)
    without_rounds: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ComparisonDocument(Record):
    """A comparison file: the two sides, the manifest fields that differ, and the rows."""

    schema_version: int | None = None
    base: Side = field(default_factory=Side)
    head: Side = field(default_factory=Side)
    config: ComparisonConfig = field(default_factory=ComparisonConfig)
    manifest_diff: Mapping[str, tuple[Json, ...]] = field(default_factory=dict)
    rows: tuple[ComparisonRow, ...] = ()
    cross_arch: tuple[Mapping[str, Json], ...] = ()
    counted: tuple[CountedRow, ...] = ()
    int8: tuple[Int8Row, ...] = ()  # guard.compare.int8_outputs
    summary: Summary = field(default_factory=Summary)
