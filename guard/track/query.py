"""Baseline queries: a thin filter builder over ``mlflow.search_runs``."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from guard.core.errors import TrackingError
from guard.track.client import experiment_name, http_limits, mlflow_client, translated
from guard.track.recover import COMPLETE_TAG
from guard.track.uri import _quiet_mlflow

# find_runs keyword -> the tag it filters on.
_TAG_FILTERS = {
    "model": "guard.model",
    "backend": "guard.backend",
    "target": "guard.target",
    "branch": "guard.git.branch",
    "commit": "guard.git.commit",
    "verdict": "guard.verdict",
    "manifest_sha256": "guard.manifest_sha256",
    "arch": "guard.arch",
}
_LEVELS = {
    "result": "result",
    "child": "result",
    "invocation": "invocation",
    "parent": "invocation",
}


@contextlib.contextmanager
def scoped_tracking_uri(uri: str) -> Iterator[None]:
    """mlflow.search_runs reads the global URI, and setting it also sets MLFLOW_TRACKING_URI
    in os.environ, which would then outrank guard's own default: restore both afterwards."""
    import mlflow
    from mlflow.tracking._tracking_service import utils

    saved_global = utils._tracking_uri
    saved_env = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        # None (no URI was set) unsets it again: mlflow handles None, its annotation says str.
        mlflow.set_tracking_uri(saved_global)  # type: ignore[arg-type]
        if saved_env is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = saved_env


def _quote(value: str) -> str:
    if "'" not in value:
        return f"'{value}'"
    if '"' not in value:
        return f'"{value}"'
    raise TrackingError(f"cannot filter on a value holding both quote characters: {value}")


def filter_string(level: str | None = "result", **filters: Any) -> str:
    """The search filter for ``find_runs``' keywords (None values are ignored)."""
    clauses = []
    if level is not None:
        if level not in _LEVELS:
            raise TrackingError(
                f"unknown run level {level!r}", hint=f"use one of {sorted(_LEVELS)}"
            )
        clauses.append(f"tags.`guard.level` = '{_LEVELS[level]}'")
    for key, value in filters.items():
        if value is None:
            continue
        if key == "parent_run_id":
            clauses.append(f"tags.mlflow.parentRunId = {_quote(str(value))}")
            continue
        if key not in _TAG_FILTERS:
            known = sorted([*_TAG_FILTERS, "parent_run_id"])
            raise TrackingError(f"unknown run filter {key!r}", hint=f"use one of {known}")
        clauses.append(f"tags.`{_TAG_FILTERS[key]}` = {_quote(str(value))}")
    return " and ".join(clauses)


def finished_parents(client: Any, experiment_id: str, parent_ids: Any) -> set[str]:
    """Which of ``parent_ids`` are FINISHED: an invocation's children count only then
    (guard.track.recover: a parent is finished last, so a kill leaves nothing counted)."""
    ids = sorted({str(p) for p in parent_ids if isinstance(p, str) and p})
    out: set[str] = set()
    for i in range(0, len(ids), 100):
        chunk = ids[i : i + 100]
        listed = ", ".join(f"'{p}'" for p in chunk if "'" not in p)
        if not listed:
            continue
        for status in (
            "attributes.status = 'FINISHED'",
            f"attributes.status = 'FAILED' and tags.`{COMPLETE_TAG}` = 'true'",
        ):
            found = client.search_runs(
                [experiment_id],
                filter_string=f"attributes.run_id IN ({listed}) and {status}",
                max_results=len(chunk),
            )
            out.update(r.info.run_id for r in found)  # fmt: skip
    return out


def committed(client: Any, experiment_id: str, runs: list[Any]) -> list[Any]:
    """The runs (MLflow Run objects) whose parent, if they have one, is FINISHED."""
    parents = [r.data.tags.get("mlflow.parentRunId") for r in runs]
    done = finished_parents(client, experiment_id, parents)
    return [r for r, p in zip(runs, parents, strict=True) if p is None or p in done]


def _committed_frame(client: Any, experiment_id: str, frame: Any) -> Any:
    column = "tags.mlflow.parentRunId"
    if frame.empty or column not in frame.columns:
        return frame
    parents = frame[column]
    done = finished_parents(client, experiment_id, parents.dropna().unique())
    keep = parents.isna() | parents.isin(done)
    return frame[keep].reset_index(drop=True)


def find_runs(
    uri: str,
    suite: str,
    *,
    level: str | None = "result",
    max_results: int = 1000,
    order_by: list[str] | None = None,
    include_unfinished: bool = False,
    **filters: Any,
) -> Any:
    """Runs of ``guard/<suite>`` as a pandas DataFrame, newest first.

    ``level``: "result" (children, the default), "invocation" (parents), or None for both.
    Filters (equality on tags): model, backend, target, branch, commit, verdict,
    manifest_sha256, arch, parent_run_id. An experiment that does not exist yet gives an
    empty frame. Only FINISHED runs under a parent logged in full (FINISHED, or FAILED with
    ``guard.logged``: an invocation with an error result), and those parents, unless
    ``include_unfinished``.
    """
    _quiet_mlflow()
    import mlflow
    import pandas as pd  # lazy, as mlflow is: the frame mlflow.search_runs returns

    where = filter_string(level, **filters)
    if not include_unfinished:
        # A run cut short (KILLED by a signal, FAILED mid-logging, RUNNING after a kill -9)
        # is not a measurement to compare against: its results are pushed again later.
        finished = "attributes.status = 'FINISHED'"
        where = f"{where} and {finished}" if where else finished
    with (
        http_limits(),
        translated(uri, f"searching runs of suite {suite!r}"),
        scoped_tracking_uri(uri),
    ):
        client = mlflow_client(uri)
        experiment = client.get_experiment_by_name(experiment_name(suite))
        if experiment is None:
            return pd.DataFrame()
        order = order_by or ["attributes.start_time DESC"]
        ids = [experiment.experiment_id]
        frame = mlflow.search_runs(ids, where, max_results=max_results, order_by=order)
        if include_unfinished:
            return frame
        # Two kinds of FAILED run are whole records all the same: an invocation with a
        # result guard could not produce, logged in full (guard.track.recover.logged_in_full),
        # and that result's own run (verdict error), which _committed_frame keeps only under
        # such a parent.
        failed = []
        if level != "result":
            failed.append(
                f"{filter_string('invocation', **filters)} and attributes.status = "
                f"'FAILED' and tags.`{COMPLETE_TAG}` = 'true'"
            )
        if level != "invocation":
            failed.append(
                f"{filter_string('result', **filters)} and attributes.status = "
                "'FAILED' and tags.`guard.verdict` = 'error'"
            )
        added = False
        for where_failed in failed:
            more = mlflow.search_runs(ids, where_failed, max_results=max_results, order_by=order)
            if not more.empty:
                frame = more if frame.empty else pd.concat([frame, more], ignore_index=True)
                added = True
        if added:
            if order_by is None:
                frame = frame.sort_values("start_time", ascending=False)
            frame = frame.head(max_results).reset_index(drop=True)
        return _committed_frame(client, experiment.experiment_id, frame)


def load_artifact_dict(uri: str, artifact_uri: str, name: str) -> Any:
    """A JSON artifact of a run (e.g. ``results.json`` of a parent, ``result.json`` of a
    child), given the run's ``artifact_uri`` as find_runs returns it.

    Server artifact URIs (``mlflow-artifacts:/...``) resolve against the tracking URI, so
    it is set for the call and restored afterwards.
    """
    _quiet_mlflow()
    import mlflow

    with (
        http_limits(),
        translated(uri, f"reading {name} of run artifacts {artifact_uri}"),
        scoped_tracking_uri(uri),
    ):
        return mlflow.artifacts.load_dict(f"{artifact_uri.rstrip('/')}/{name}")
