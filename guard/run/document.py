"""The results document as ``guard run`` and ``guard merge`` write it: TypedDicts.

The writers build these objects key for key (explicit nulls included), so the results
file stays byte for byte what it was while mypy checks the keys; readers read the file as
guard.results.documents.ResultsDocument. A result inside is what
guard.checks.assemble.result_dict builds (ResultJson: the results contract's keys,
CONTRACT_KEYS there).
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from guard.checks.assemble import ResultJson
from guard.core.json_types import JsonObject
from guard.core.supported import OutsideRange


class ShardBlock(TypedDict):
    """A shard's ``shard`` block (guard.run.shard.Plan.describe, then shard_work)."""

    index: int
    count: int
    plan_sha256: str
    weights_from: str  # "count", "results:<file>" or "mlflow:<uri>"
    cases: list[list[str]]  # [model, backend, target] of this shard
    suite_cases: list[list[str]]  # of every shard, in suite order
    expected_s: float | None  # this shard's share of the timings (None by count)
    invocation_id: NotRequired[str | None]  # set by shard_work


class RunHead(TypedDict):
    """The results document's fields other than the results (written in progress too)."""

    schema_version: int
    suite: str
    suite_path: str
    suite_sha256: str
    started: str
    git: JsonObject  # the guard.results.documents.Git record's JSON
    unsupported_versions: NotRequired[list[OutsideRange]]


class InProgressJson(RunHead):
    """The results so far (guard.run.stream.InProgress), a batch at a time."""

    results: list[ResultJson]
    in_progress: dict[str, int]  # {done, total}


class RunDocument(RunHead):
    """``guard run``'s results document."""

    finished: str
    results: list[ResultJson]
    shard: NotRequired[ShardBlock]
    interrupted: NotRequired[str]  # the signal that ended the run
    exit_code: NotRequired[int]
    # where the results went: the URI and guard.track.log_results' receipt (passed
    # through), or the error and where the results were kept
    tracking: NotRequired[JsonObject]


class MergedBlock(TypedDict):
    """A merged document's ``merged`` block."""

    files: list[str]
    shards: list[int | None] | None
    shard_count: int | None
    plan_sha256: str | None
    invocation_id: str | None
    missing_shards: list[int]
    tracking: list[JsonObject]  # each shard's tracking block, as it wrote it


class MergedDocument(TypedDict):
    """``guard merge``'s results document."""

    schema_version: int
    suite: str | None
    suite_path: str | None
    suite_sha256: str | None
    started: str | None
    finished: str | None
    git: JsonObject  # the first shard's Git record's JSON, dirty if any was
    results: list[JsonObject]  # each a Result record's JSON
    merged: MergedBlock
    exit_code: NotRequired[int]
