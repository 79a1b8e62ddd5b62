"""The MLflow client, and the two guards around every call guard makes to a tracking store.

guard.track (and the readers outside it: the dashboard, baselines, calibration) makes its
clients with :func:`mlflow_client` and wraps each call in :func:`http_limits` (give up on
an unreachable server in seconds, not MLflow's minutes of retries) and :func:`translated`
(a store failure becomes one ``TrackingError`` line naming the URI and what to do). The
fluent calls that read MLflow's global URI (``mlflow.search_runs``, artifact downloads)
run inside guard.track.query's ``scoped_tracking_uri``. This module sits below the ones
that log (log), index (index, invocation) and query (query), so none of them imports
another for its client.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from guard.core.errors import InternalError, TrackingError
from guard.track.uri import ARTIFACTS_DIR, _quiet_mlflow, artifact_root, is_http, sqlite_path

if TYPE_CHECKING:  # mlflow itself is imported when a client is made
    from mlflow import MlflowClient

# Over HTTP, MLflow retries a failed request 7 times with doubling backoff (minutes).
# guard has a local fallback, so it gives up sooner unless the user chose otherwise.
HTTP_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
}


def experiment_name(suite: str) -> str:
    """One experiment per suite: ``guard/<suite>``."""
    return f"guard/{suite}"


@contextlib.contextmanager
def http_limits() -> Iterator[None]:
    """MLflow's HTTP retry settings of :data:`HTTP_DEFAULTS`, unless the user set them."""
    added = {k: v for k, v in HTTP_DEFAULTS.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


@contextlib.contextmanager
def translated(uri: str, action: str) -> Iterator[None]:
    """Failures of the store become one-line TrackingErrors naming the URI and what to do."""
    from mlflow.exceptions import MlflowException

    try:
        import requests

        network_errors: tuple[type[BaseException], ...] = (requests.RequestException,)
    except ImportError:  # pragma: no cover - mlflow depends on requests
        network_errors = ()
    failures: tuple[type[BaseException], ...] = (*network_errors, OSError)
    try:
        yield
    except MlflowException as exc:
        if getattr(exc, "error_code", None) == "INVALID_PARAMETER_VALUE":
            # The store is fine: it refused a key or value guard built. guard's bug, exit 3.
            raise InternalError(
                f"MLflow refused what guard logged while {action}: {first_line(exc.message)}",
                hint="This is a bug in guard: please report it with this line.",
            ) from exc
        raise TrackingError(
            f"tracking store {uri} failed while {action}: {first_line(exc.message)}",
            hint=_hint(uri),
        ) from exc
    except failures as exc:
        raise TrackingError(
            f"tracking store {uri} failed while {action}: {first_line(str(exc))}",
            hint=_hint(uri),
        ) from exc


def first_line(text: str, limit: int = 300) -> str:
    line = next((s.strip() for s in str(text).splitlines() if s.strip()), "unknown error")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _hint(uri: str) -> str:
    if is_http(uri):
        return (
            "check the server and --tracking-uri / MLFLOW_TRACKING_URI; "
            "keep the results JSON and send it later with `guard track push`."
        )
    return "check that the store is writable, or pass another --tracking-uri."


def mlflow_client(uri: str) -> MlflowClient:
    """An ``mlflow.MlflowClient`` for ``uri`` (mlflow is imported here, when first needed)."""
    _quiet_mlflow()
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _relocate_artifacts(uri: str, location: str) -> bool:
    """Point a copied local store's artifacts at its own directory; True if it did.

    An embedded store records absolute artifact locations (MLflow has no relative ones):
    a ``.guard/`` copied elsewhere still names the original's ``mlartifacts``, so every new
    run of the copy would write its artifacts into the original. When an experiment's
    location is another directory's ``mlartifacts``, every experiment and run under that
    root is moved onto this store's root (where the copy of those artifacts lies).
    """
    root, db = artifact_root(uri), sqlite_path(uri)
    if root is None or db is None or location == root:
        return False
    if not location.startswith("file://") or location.rstrip("/").rsplit("/", 1)[-1] != (
        ARTIFACTS_DIR
    ):
        return False  # a location the user chose: left alone
    old = location.rstrip("/")
    n = len(old)
    try:
        con = sqlite3.connect(db, timeout=30)
        try:
            with con:
                for table, column in (
                    ("experiments", "artifact_location"),
                    ("runs", "artifact_uri"),
                ):
                    con.execute(
                        f"UPDATE {table} SET {column} = ? || substr({column}, ?) "  # noqa: S608
                        f"WHERE {column} = ? OR substr({column}, 1, ?) = ?",
                        (root, n + 1, old, n + 1, old + "/"),
                    )
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise TrackingError(
            f"the tracking store {db} was copied from another directory and its artifact "
            f"locations ({old}) cannot be moved to {root}: {exc}",
            hint="Make the store writable, or pass --tracking-uri.",
        ) from None
    print(
        f"guard: note: the tracking store {db} was copied from another directory; its "
        f"artifact locations now point at {root} instead of {old}",
        file=sys.stderr,
    )
    return True


# MLflow 3's UI opens an experiment on its GenAI traces page unless the experiment says
# it holds model runs: its web app reads this tag (values genai_development,
# custom_model_development, ...) to choose the runs table.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"


def experiment_id(client: MlflowClient, uri: str, suite: str) -> str:
    """The id of the suite's experiment, created (or restored from deleted) when needed."""
    from mlflow.exceptions import MlflowException

    name = experiment_name(suite)
    found = client.get_experiment_by_name(name)
    if found is not None and _relocate_artifacts(uri, str(found.artifact_location or "")):
        found = client.get_experiment_by_name(name)
    if found is not None:
        if found.lifecycle_stage == "deleted":
            client.restore_experiment(found.experiment_id)
        if found.tags.get(EXPERIMENT_KIND_TAG) != EXPERIMENT_KIND:  # made by an older guard
            client.set_experiment_tag(found.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        return str(found.experiment_id)
    try:
        return str(
            client.create_experiment(
                name,
                artifact_location=artifact_root(uri),
                tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND},
            )
        )
    except MlflowException:
        # Another guard created it between our lookup and create.
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return str(found.experiment_id)
