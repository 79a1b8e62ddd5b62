"""guard.track: MLflow logging of results and baseline queries.

One experiment per suite (``guard/<suite>``), a parent run per invocation and a nested run
per (model, backend, target). Every run-data write goes through one batch primitive
(guard.track.batch._log_batch). mlflow itself is imported only when a function needs it.
"""

from guard.track.log import (
    end_dead_invocations,
    journal_results,
    keep_results,
    log_journalled,
    log_results,
    push,
    push_pending,
)
from guard.track.query import find_runs, load_artifact_dict, scoped_tracking_uri
from guard.track.store import StoreRefused
from guard.track.uri import check_reachable, resolve_uri, unreachable_message

__all__ = [
    "StoreRefused",
    "check_reachable",
    "end_dead_invocations",
    "find_runs",
    "journal_results",
    "keep_results",
    "log_journalled",
    "load_artifact_dict",
    "log_results",
    "push",
    "push_pending",
    "resolve_uri",
    "scoped_tracking_uri",
    "unreachable_message",
]
