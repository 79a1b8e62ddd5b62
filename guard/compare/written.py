"""The JSON a comparison document is written as (docs/ARCHITECTURE.md), one TypedDict per
object its writers build.

The writers (``compare_docs`` and its rows, the cross-architecture, counted and int8 rows,
the interleaved A/B rows of guard.experiment) build these dict literals, so mypy checks
every key they set while the JSON stays byte for byte what the literals say: key order and
explicit nulls included. Readers do not read these: they read the comparison as
guard.results.documents.ComparisonDocument, whose fields are these keys.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

from guard.counting.rows import CountedRowJson
from guard.results.record import Json
from guard.stats.verdicts import ComparisonJson

# {dotted.pin: [base, head]} of the pins two manifests differ in
ManifestDiff = dict[str, list[Json]]


class RowNumerics(TypedDict):
    """A row's ``numerics``: the outputs' change and each side's error against the golden."""

    output_sha256_changed: bool
    max_abs_err: list[float | None]
    max_rel_err: NotRequired[list[float | None]]
    max_abs_diff: NotRequired[float | None]  # interleaved A/B: head's outputs against base's


class NotCompared(TypedDict):
    """A row's ``stats`` where no latency comparison was made: why."""

    reason: str | None


class ComparisonRowJson(TypedDict):
    """One latency row (``rows``): a results comparison's or an interleaved A/B's."""

    model: str
    backend: str
    target: str
    verdict: str
    ratio: float
    ci: list[float]
    p90_ratio: float | None
    arena_bytes: list[int | None]
    partitions: list[int | None]
    numerics: RowNumerics
    tuning_hit_rate: list[float | None]
    contention: list[float | None]
    noise_pct: NotRequired[list[float | None]]
    rounds: NotRequired[list[int]]
    manifest_diff: ManifestDiff
    stats: ComparisonJson | NotCompared
    reason: str | None
    attribution: NotRequired[str | None]


class EncodedTensor(TypedDict):
    """One output tensor as a result carries it (``numerics.outputs.tensors``)."""

    name: str
    dtype: str
    shape: list[int]
    stride: int
    data: str  # zlib + base64 of the kept elements, little-endian


class EncodedOutputs(TypedDict):
    """A result's outputs in a compact, JSON-safe form (``numerics.outputs``)."""

    encoding: str
    tensors: list[EncodedTensor]


class OutputDriftJson(TypedDict):
    """A cross-architecture row's ``outputs``: the drift between the two sides' outputs."""

    hash_equal: bool
    rtol: float
    atol: float
    max_abs: float | None
    max_rel: float | None
    allclose: bool | None
    top1_agreement: float | None
    elements: int | None
    sampled: bool
    max_abs_bound: NotRequired[float | None]
    how: NotRequired[str]


class CrossSideJson(TypedDict):
    """One side of a cross-architecture row."""

    target: str
    arch: str | None
    host_arch: str | None
    latency_status: str | None


class CountedPairJson(TypedDict):
    """Counted cost on each architecture, side by side (never a verdict)."""

    instructions: list[float]
    bytes_moved: list[float | None]
    targets: list[str | None]


class CrossArchRowJson(TypedDict):
    """One cross-architecture row (``cross_arch``)."""

    model: str
    backend: str
    arches: list[str | None]
    sides: list[CrossSideJson]
    verdict: str
    outputs: OutputDriftJson
    partitions: list[int | None]
    partitions_equal: bool
    arena_bytes: list[int | None]
    arena_equal: bool
    latency: str
    counted: CountedPairJson | None
    summary: str


class Int8RowJson(TypedDict):
    """One paired int8 result (``int8``): whether the two sides' outputs are identical."""

    model: str
    backend: str
    base_target: str
    head_target: str
    outputs: str
    first_differing: str | None


class SideJson(TypedDict):
    """``base`` / ``head``: the side's label and, for results documents, suite and git."""

    label: str
    suite: NotRequired[str | None]
    git: NotRequired[Json]


class ConfigJson(TypedDict):
    """``config``: what judged the rows."""

    regress_pct: float
    alpha: float
    noise_k: float
    run_noise_pct: NotRequired[float | None]
    calibrated_noise: NotRequired[dict[str, float]]
    calibrated_run_noise: NotRequired[dict[str, float]]


class SummaryJson(TypedDict):
    """``summary``: counts over the rows both sides have."""

    compared: int
    by_verdict: dict[str, int]
    geomean_ratio: float | None
    only_base: list[str]
    only_head: list[str]
    cross_arch: NotRequired[dict[str, int]]
    counted: NotRequired[dict[str, int]]
    int8: NotRequired[dict[str, int]]
    without_rounds: NotRequired[list[str]]


class BumpChange(TypedDict):
    package: str
    old: str | None
    new: str | None


class BumpJson(TypedDict):
    """``bump`` (guard bump): the pins changed, the environments, the suite, the rounds."""

    changes: list[BumpChange]
    envs: dict[str, str]
    suite: str
    rounds: int


class RefJson(TypedDict):
    """One side of ``refs`` (guard ab --base-ref): the ref, its commit and environment."""

    ref: str | None
    sha: str | None
    guard: str
    python: str
    env: str | None


class ComparisonDocumentJson(TypedDict):
    """The comparison document (schema_version 1): ``guard compare``'s, or an interleaved
    A/B's (``mode``) with the same contract."""

    schema_version: int
    mode: NotRequired[Literal["interleaved-ab", "interleaved-ab-refs"]]
    base: SideJson
    head: SideJson
    config: ConfigJson
    manifest_diff: ManifestDiff
    rows: list[ComparisonRowJson]
    cross_arch: NotRequired[list[CrossArchRowJson]]
    counted: NotRequired[list[CountedRowJson]]
    int8: NotRequired[list[Int8RowJson]]
    summary: SummaryJson
    bump: NotRequired[BumpJson]
    refs: NotRequired[dict[str, RefJson]]
