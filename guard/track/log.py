"""Log a results document to MLflow: a parent run per invocation, a child per result.

Experiment ``guard/<suite>``. The parent carries the invocation (git, arch, suite hash,
worst verdict, counts) and the whole results document as ``results.json``; each child
(``<model>/<backend>/<target>``, tag ``mlflow.parentRunId``) carries the flattened manifest
as params, the measurements as metrics (raw samples as the history of
``latency_ms.sample``), the verdict and failed checks as tags, and ``manifest.json`` and
``result.json`` as artifacts. Run data goes through guard.track.batch._log_batch only.

Results that could not be sent are kept as JSON (``keep_results``) and sent later with
``push``; a pushed document that is already tracked is not logged twice.
"""

from __future__ import annotations

import hashlib
import json
import platform
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guard.core.results_file import load_results
from guard.core.schema import results_document, section
from guard.track import records
from guard.track.batch import _log_batch, metric_entities
from guard.track.client import (
    experiment_id,
    experiment_name,
    http_limits,
    mlflow_client,
    translated,
)
from guard.track.index import annotate_logged
from guard.track.pending import PENDING_DIR, keep, push_lock
from guard.track.profile_chart import log_profile_chart
from guard.track.uri import GUARD_DIR, check_reachable, run_url

if TYPE_CHECKING:  # mlflow itself is imported only when a client is made
    from mlflow import MlflowClient

# The identity of a measurement. Keys a caller adds after logging (guard.run.deliver's
# "tracking" receipt, "exit_code") must not make a pushed copy look like a new invocation.
_IDENTITY_KEYS = ("schema_version", "suite", "started", "git", "suite_sha256", "results")


def results_sha256(doc: Mapping[str, Any]) -> str:
    identity = {k: doc.get(k) for k in _IDENTITY_KEYS}
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _started_ms(doc: Mapping[str, Any]) -> int:
    started = doc.get("started")
    if isinstance(started, str):
        try:
            return int(datetime.fromisoformat(started.replace("Z", "+00:00")).timestamp() * 1000)
        except ValueError:
            pass
    return int(time.time() * 1000)


_REWRITE = "write it with a matching guard (`guard run --json PATH`)."


def _validate(doc: Any, where: str) -> dict[str, Any]:
    return results_document(doc, where, hint=_REWRITE, require_suite=True)


def log_results(
    doc: dict[str, Any], uri: str, artefact_dirs: dict[int, Path] | None = None
) -> dict[str, Any]:
    """Log one invocation; return experiment_id, parent_run_id, child_run_ids, uri, run_url.

    ``artefact_dirs`` maps a result's index to its artefact directory; the manifest.json
    found there is uploaded as is, otherwise the record's own manifest is.
    """
    doc = _validate(doc, "results")
    check_reachable(uri)  # a server or database that does not answer fails fast
    with http_limits(), translated(uri, f"logging suite {doc['suite']!r}"):
        receipt = _log(doc, uri, artefact_dirs or {})
    return annotate_logged(uri, doc, receipt)  # baseline index, shard -> invocation link


def _log(doc: dict[str, Any], uri: str, artefact_dirs: dict[int, Path]) -> dict[str, Any]:
    from mlflow.entities import RunStatus

    client = mlflow_client(uri)
    eid = experiment_id(client, uri, doc["suite"])
    git = section(doc, "git")
    short = str(git.get("commit") or "nogit")[:10]
    started = _started_ms(doc)
    arch = records.host_arch(doc) or platform.machine()

    parent = client.create_run(eid, start_time=started, run_name=f"{doc['suite']}@{short}")
    parent_id = parent.info.run_id
    child_ids: list[str] = []
    status = RunStatus.to_string(RunStatus.FAILED)
    try:
        _log_batch(
            client,
            parent_id,
            metric_entities(records.parent_metrics(doc)),
            params={
                "suite": doc["suite"],
                "schema_version": str(doc["schema_version"]),
                **records.series_params(doc),
            },
            tags=records.parent_tags(doc, arch, results_sha256(doc)),
        )
        client.log_dict(parent_id, doc, "results.json")
        for index, result in enumerate(doc["results"]):
            child_ids.append(
                _log_child(client, eid, parent_id, doc, result, artefact_dirs.get(index))
            )
        status = RunStatus.to_string(RunStatus.FINISHED)
    except KeyboardInterrupt:
        status = RunStatus.to_string(RunStatus.KILLED)
        raise
    finally:
        if status != RunStatus.to_string(RunStatus.FINISHED):
            _end_children(client, eid, parent_id, child_ids, status)
        _terminate(client, parent_id, status, records.iso_ms(doc.get("finished")))
    return {
        "experiment_id": eid,
        "parent_run_id": parent_id,
        "child_run_ids": child_ids,
        "uri": uri,
        "run_url": run_url(uri, eid, parent_id),
    }


def _end_children(
    client: MlflowClient, experiment_id: str, parent_id: str, known: list[str], status: str
) -> None:
    """Give the children of a parent that did not finish its status (KILLED or FAILED).

    Children logged before the failure are not a tracked invocation either: readers
    (history, dashboard, baselines) take FINISHED runs only, and the kept results are
    pushed again later.
    """
    ids = set(known)
    try:
        ids |= {
            r.info.run_id
            for r in client.search_runs(
                [experiment_id],
                filter_string=f"tags.mlflow.parentRunId = '{parent_id}'",
                max_results=10_000,
            )
        }
    except Exception:  # noqa: BLE001 - the store is failing: mark what we know
        pass
    for child_id in sorted(ids):
        _terminate(client, child_id, status, None)


def _log_child(
    client: MlflowClient,
    experiment_id: str,
    parent_id: str,
    doc: Mapping[str, Any],
    result: Mapping[str, Any],
    artefact_dir: Path | None,
) -> str:
    from mlflow.entities import RunStatus

    start, end = records.result_span(result, doc)
    run = client.create_run(experiment_id, start_time=start, run_name=records.child_name(result))
    run_id = run.info.run_id
    status = RunStatus.to_string(RunStatus.FAILED)
    try:
        history = {"latency_ms.sample": records.sample_history(result)}
        tags = {"mlflow.parentRunId": parent_id, **records.child_tags(result, doc)}
        _log_batch(
            client,
            run_id,
            metric_entities(records.result_metrics(result), history),
            params=records.manifest_params(result.get("manifest")),
            tags=tags,
        )
        manifest_file = Path(artefact_dir) / "manifest.json" if artefact_dir else None
        if manifest_file is not None and manifest_file.is_file():
            client.log_artifact(run_id, str(manifest_file))
        else:
            client.log_dict(run_id, result.get("manifest") or {}, "manifest.json")
        client.log_dict(run_id, dict(result), "result.json")
        log_profile_chart(client, run_id, result)
        _log_inputs(client, run_id, result)
        status = RunStatus.to_string(RunStatus.FINISHED)
    except KeyboardInterrupt:
        status = RunStatus.to_string(RunStatus.KILLED)
        raise
    finally:
        _terminate(client, run_id, status, end)
    return str(run_id)


def _log_inputs(client: MlflowClient, run_id: str, result: Mapping[str, Any]) -> None:
    """The model's fixed inputs as the run's dataset (MLflow's Datasets column)."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    found = records.inputs_dataset(result)
    if found is None:
        return
    context = InputTag(key="mlflow.data.context", value="golden inputs")
    client.log_inputs(run_id, datasets=[DatasetInput(Dataset(**found), tags=[context])])


def _terminate(client: MlflowClient, run_id: str, status: str, end_ms: int | None) -> None:
    """End a run; if even that fails, the original error (if any) is the one raised."""
    try:
        client.set_terminated(run_id, status=status, end_time=end_ms)
    except Exception:  # noqa: BLE001 - never mask the failure that got us here
        if status == "FINISHED":
            raise


def push(results_path: Path, uri: str) -> dict[str, Any]:
    """Send results kept earlier; a document already tracked at ``uri`` is not logged twice.

    Returns log_results' dict plus ``"already_tracked": bool``.
    """
    with push_lock(Path(results_path)):  # two pushes of one file: the second logs nothing
        doc = load_results(results_path, version_hint=_REWRITE, require_suite=True)
        check_reachable(uri)  # a server or database that does not answer fails fast
        digest = results_sha256(doc)
        with http_limits(), translated(uri, f"looking up {results_path}"):
            existing = _find_parent(uri, doc["suite"], digest)
        if existing is not None:
            url = run_url(uri, existing["experiment_id"], existing["parent_run_id"])
            return {**existing, "uri": uri, "run_url": url, "already_tracked": True}
        return {**log_results(doc, uri), "already_tracked": False}


def _find_parent(uri: str, suite: str, digest: str) -> dict[str, Any] | None:
    client = mlflow_client(uri)
    experiment = client.get_experiment_by_name(experiment_name(suite))
    if experiment is None:
        return None
    eid = experiment.experiment_id
    parents = client.search_runs(
        [eid],
        # A parent left FAILED by an interrupted logging is not "tracked": log again.
        filter_string=f"tags.`guard.results_sha256` = '{digest}' and attributes.status = 'FINISHED'",
        max_results=1,
    )
    if not parents:
        return None
    parent_id = parents[0].info.run_id
    children = client.search_runs(
        [eid], filter_string=f"tags.mlflow.parentRunId = '{parent_id}'", max_results=10_000
    )
    return {
        "experiment_id": str(eid),
        "parent_run_id": parent_id,
        "child_run_ids": [c.info.run_id for c in children],
    }


def keep_results(doc: Mapping[str, Any], workdir: Path) -> Path:
    """Write results that could not be sent to ``<workdir>/.guard/pending/``; return the path.

    Each call gets its own file, claimed exclusively (guard.track.pending).
    """
    return keep(doc, Path(workdir).resolve() / GUARD_DIR / PENDING_DIR)
