"""What logging a results document to MLflow did (``log_results``' receipt)."""

from __future__ import annotations

from typing import NotRequired, TypedDict


class Receipt(TypedDict):
    """The experiment, the invocation's parent run and each result's child run, where to
    see them, and whether the same results were logged before (then nothing was sent);
    ``index_error`` when linking a shard to its invocation failed after logging."""

    experiment_id: str
    parent_run_id: str
    child_run_ids: list[str]
    uri: str
    run_url: str | None
    already_tracked: bool
    index_error: NotRequired[str]
