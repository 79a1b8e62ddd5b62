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

from guard.core import fault
from guard.core.errors import TrackingError
from guard.core.fsutil import atomic_write_text
from guard.core.json_types import Json, JsonObject
from guard.core.schema import results_document
from guard.results.documents import ResultsDocument
from guard.results.load import load_results
from guard.results.result import Result
from guard.track import records, recover
from guard.track.batch import _log_batch, metric_entities
from guard.track.client import (
    experiment_id,
    experiment_name,
    http_limits,
    mlflow_client,
    translated,
)
from guard.track.index import annotate_logged, result_tags
from guard.track.pending import PENDING_DIR, journal, journalled, keep, push_lock
from guard.track.profile_chart import log_profile_chart
from guard.track.receipt import Receipt
from guard.track.uri import GUARD_DIR, check_reachable, run_url

if TYPE_CHECKING:  # mlflow itself is imported only when a client is made
    from mlflow import MlflowClient

# The identity of a measurement. Keys a caller adds after logging (guard.run.deliver's
# "tracking" receipt, "exit_code") must not make a pushed copy look like a new invocation.
_IDENTITY_KEYS = ("schema_version", "suite", "started", "git", "suite_sha256", "results")


def results_sha256(doc: Mapping[str, Json]) -> str:
    """The digest of a results document's identity keys (any version's document)."""
    identity = {k: doc.get(k) for k in _IDENTITY_KEYS}
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _started_ms(doc: ResultsDocument) -> int:
    started = doc.started
    if started:
        try:
            return int(datetime.fromisoformat(started.replace("Z", "+00:00")).timestamp() * 1000)
        except ValueError:
            pass
    return int(time.time() * 1000)


_REWRITE = "write it with a matching guard (`guard run --json PATH`)."


def _validate(doc: Any, where: str) -> JsonObject:
    return results_document(doc, where, hint=_REWRITE, require_suite=True)


def log_results(doc: JsonObject, uri: str, artefact_dirs: dict[int, Path] | None = None) -> Receipt:
    """Log one invocation; return experiment_id, parent_run_id, child_run_ids, uri, run_url
    and ``already_tracked`` (the same results were logged before: nothing was sent).

    ``artefact_dirs`` maps a result's index to its artefact directory; the manifest.json
    found there is uploaded as is, otherwise the record's own manifest is. Idempotent per
    results digest and per result (guard.track.recover): logging results again, or after a
    kill cut an earlier logging short, never makes a second run of any result.
    """
    doc = _validate(doc, "results")
    typed = ResultsDocument.from_json(doc)
    check_reachable(uri)  # a server or database that does not answer fails fast
    with http_limits(), translated(uri, f"logging suite {typed.suite!r}"):
        receipt = _log(doc, typed, uri, artefact_dirs or {})
    if receipt["already_tracked"]:
        return receipt
    return annotate_logged(uri, typed, receipt)  # shard -> invocation link


def _receipt(uri: str, eid: str, parent_id: str, child_ids: list[str], done: bool) -> Receipt:
    return {
        "experiment_id": eid,
        "parent_run_id": parent_id,
        "child_run_ids": child_ids,
        "uri": uri,
        "run_url": run_url(uri, eid, parent_id),
        "already_tracked": done,
    }


def _log(
    doc: JsonObject, typed: ResultsDocument, uri: str, artefact_dirs: dict[int, Path]
) -> Receipt:
    from mlflow.entities import RunStatus

    fault.install_store_hook()  # GUARD_FAULT=store.transaction only
    client = mlflow_client(uri)
    eid = experiment_id(client, uri, str(typed.suite))
    digest = results_sha256(doc)
    recover.end_dead(client, eid)  # parents a kill left RUNNING on this host end KILLED
    parents = recover.parents_of(client, eid, digest)
    done, unfinished = recover.resumable(parents)
    busy = recover.being_logged(parents)
    if done is None and unfinished is None and busy is not None:
        tags = busy.data.tags
        raise TrackingError(
            f"these results are being logged to {uri} right now (parent run "
            f"{busy.info.run_id}, pid {tags.get(recover.PID_TAG)} on "
            f"{tags.get(recover.HOST_TAG)}): not logged twice",
            hint="push again once it ends; if that process is gone on another host, push "
            "from that host (or end the run KILLED in MLflow).",
        )
    if done is not None:
        kids = [c.info.run_id for c in recover.children(client, eid, done.info.run_id)]
        return _receipt(uri, eid, done.info.run_id, kids, True)
    started = _started_ms(typed)
    arch = records.host_arch(typed) or platform.machine()
    if unfinished is not None:  # a kill cut it short: finish it, keeping what is logged
        parent_id = unfinished.info.run_id
        client.update_run(parent_id, status="RUNNING")
        _log_batch(client, parent_id, tags=recover.owner_tags())
    else:
        tags = {**records.parent_tags(typed, arch, digest), **recover.owner_tags()}
        parent = client.create_run(
            eid, start_time=started, run_name=records.parent_name(typed), tags=tags
        )
        parent_id = parent.info.run_id
    fault.point("mlflow.create_parent")
    child_ids: list[str] = []
    status = RunStatus.to_string(RunStatus.FAILED)
    try:
        _log_batch(
            client,
            parent_id,
            # At the start time: logged again (finishing an invocation), the same points.
            metric_entities(records.parent_metrics(typed), timestamp=started),
            params={
                "suite": str(typed.suite),
                "schema_version": str(typed.schema_version),
                **records.series_params(typed),
            },
            tags=records.parent_tags(typed, arch, digest),
        )
        fault.point("mlflow.log_parent")
        client.log_dict(parent_id, doc, "results.json")
        fault.point("mlflow.log_results_json")
        logged = {
            c.data.tags.get(recover.CHILD_KEY_TAG): c
            for c in recover.children(client, eid, parent_id)
        }
        for index, result in enumerate(typed.results):
            key = recover.child_key(digest, index)
            old = logged.pop(key, None)
            if old is not None and old.info.status == "FINISHED":
                if recover.PARENT_KILLED_TAG in old.data.tags:
                    client.delete_tag(old.info.run_id, recover.PARENT_KILLED_TAG)
                child_ids.append(old.info.run_id)
                continue
            if old is not None:  # cut short while it was logged: log it again, once
                client.delete_run(old.info.run_id)
            child_ids.append(
                _log_child(client, eid, parent_id, typed, result, artefact_dirs.get(index), key)
            )
            fault.point("mlflow.log_child")
        for stray in logged.values():  # not a result of these results: never counted
            client.delete_run(stray.info.run_id)
        fault.point("mlflow.finish_parent")
        status = RunStatus.to_string(RunStatus.FINISHED)
    except KeyboardInterrupt:
        status = RunStatus.to_string(RunStatus.KILLED)
        raise
    finally:
        if status != RunStatus.to_string(RunStatus.FINISHED):
            try:
                recover.end_killed(client, eid, parent_id, status)
            except Exception:  # noqa: BLE001 - the store is failing: never mask why
                pass
        else:
            # An invocation with a result guard could not produce ends FAILED (red in
            # MLflow), its errors in the guard.error tag and the description.
            final = status
            if records.errors_of(typed):
                # Logged in full all the same: the tag tells it from a FAILED logging
                # (guard.track.recover.logged_in_full, guard.track.query).
                _log_batch(client, parent_id, tags={recover.COMPLETE_TAG: "true"})
                final = RunStatus.to_string(RunStatus.FAILED)
            _terminate(client, parent_id, final, records.iso_ms(typed.finished))
    fault.point("mlflow.finished")
    return _receipt(uri, eid, parent_id, child_ids, False)


def _log_child(
    client: MlflowClient,
    experiment_id: str,
    parent_id: str,
    doc: ResultsDocument,
    result: Result,
    artefact_dir: Path | None,
    key: str,
) -> str:
    from mlflow.entities import RunStatus

    start, end = records.result_span(result, doc)
    # The parent and the key from the start: a kill mid-child leaves a run its parent finds.
    first = {"mlflow.parentRunId": parent_id, recover.CHILD_KEY_TAG: key}
    run = client.create_run(
        experiment_id, start_time=start, run_name=records.child_name(result), tags=first
    )
    run_id = run.info.run_id
    status = RunStatus.to_string(RunStatus.FAILED)
    logged = False
    try:
        history = {"latency_ms.sample": records.sample_history(result)}
        tags = {**records.child_tags(result, doc), **result_tags(result, doc)}
        _log_batch(
            client,
            run_id,
            metric_entities(records.result_metrics(result), history, timestamp=start),
            params=records.manifest_params(result.manifest),
            tags=tags,
        )
        manifest_file = Path(artefact_dir) / "manifest.json" if artefact_dir else None
        if manifest_file is not None and manifest_file.is_file():
            client.log_artifact(run_id, str(manifest_file))
        else:
            client.log_dict(run_id, result.manifest.to_json(), "manifest.json")
        client.log_dict(run_id, result.to_json(), "result.json")
        log_profile_chart(client, run_id, result)
        _log_inputs(client, run_id, result)
        # A result guard could not produce is a FAILED run, its error in guard.error and
        # the description; one logged in full otherwise FINISHED.
        failed = result.verdict == "error"
        status = RunStatus.to_string(RunStatus.FAILED if failed else RunStatus.FINISHED)
        logged = True
    except KeyboardInterrupt:
        status = RunStatus.to_string(RunStatus.KILLED)
        raise
    finally:
        _terminate(client, run_id, status, end, logged)
    return str(run_id)


def _log_inputs(client: MlflowClient, run_id: str, result: Result) -> None:
    """The model's fixed inputs as the run's dataset (MLflow's Datasets column)."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    found = records.inputs_dataset(result)
    if found is None:
        return
    context = InputTag(key="mlflow.data.context", value="golden inputs")
    client.log_inputs(run_id, datasets=[DatasetInput(Dataset(**found), tags=[context])])


def _terminate(
    client: MlflowClient, run_id: str, status: str, end_ms: int | None, logged: bool = True
) -> None:
    """End a run; if even that fails, the original error (if any) is the one raised."""
    try:
        client.set_terminated(run_id, status=status, end_time=end_ms)
    except Exception:  # noqa: BLE001 - never mask the failure that got us here
        if logged:
            raise


def push(results_path: Path, uri: str) -> Receipt:
    """Send results kept earlier; results already tracked at ``uri`` are not logged twice,
    and results a kill left half-logged are finished (log_results).

    Returns log_results' dict (``"already_tracked": bool``).
    """
    with push_lock(Path(results_path)):  # two pushes of one file: the second logs nothing
        return _push_locked(Path(results_path), uri)


def _push_locked(results_path: Path, uri: str) -> Receipt:
    from guard.results import pytest_benchmark

    # A pytest-benchmark file (by its shape) is logged as the results of its own suite.
    bench = pytest_benchmark.read(results_path)
    doc = (
        dict(bench)
        if bench is not None
        else load_results(results_path, version_hint=_REWRITE, require_suite=True)
    )
    return log_results(doc, uri)


def push_pending(workdir: Path, uri: str) -> list[tuple[Path, Receipt]]:
    """Push every results file journalled in ``<workdir>/.guard/pending/`` (oldest first)
    and remove each once it is logged; [(path, receipt)]. The first failure is raised:
    what was not delivered stays for the next push. A file a running ``guard run`` is
    logging is locked by it (``log_journalled``): waited for, and gone once it is logged."""
    done = []
    for path in journalled(Path(workdir).resolve() / GUARD_DIR / PENDING_DIR):
        with push_lock(path):
            if not path.exists():
                continue  # the run that journalled it logged it meanwhile
            receipt = _push_locked(path, uri)
            path.unlink(missing_ok=True)
        done.append((path, receipt))
    return done


def log_journalled(doc: JsonObject, uri: str, journal_path: Path | None) -> Receipt:
    """``log_results`` holding the lock of the results' journal file (so a concurrent
    ``guard track push --pending`` waits instead of logging them too), which is removed
    once they are logged."""
    if journal_path is None:
        return log_results(doc, uri)
    with push_lock(journal_path):
        receipt = log_results(doc, uri)
        journal_path.unlink(missing_ok=True)
    return receipt


def end_dead_invocations(uri: str, suite: str) -> list[str]:
    """At the start of a run: end KILLED the invocations of ``guard/<suite>`` that a killed
    guard on this host left RUNNING (guard.track.recover.end_dead); their ids."""
    with http_limits(), translated(uri, f"looking for runs a kill left in suite {suite!r}"):
        client = mlflow_client(uri)
        found = client.get_experiment_by_name(experiment_name(suite))
        if found is None:
            return []
        return recover.end_dead(client, str(found.experiment_id))


def journal_results(doc: Mapping[str, Json], workdir: Path) -> Path:
    """Journal finished results under ``<workdir>/.guard/pending/`` before they are logged."""
    return journal(doc, Path(workdir).resolve() / GUARD_DIR / PENDING_DIR, results_sha256(doc))


def keep_results(doc: Mapping[str, Json], workdir: Path, journalled: Path | None = None) -> Path:
    """Write results that could not be sent to ``<workdir>/.guard/pending/``; return the path.

    ``journalled``, the results' journal file (``journal_results``), is rewritten in place
    (with the tracking error); otherwise each call gets its own file, claimed exclusively
    (guard.track.pending).
    """
    if journalled is not None and journalled.is_file():
        try:
            return atomic_write_text(
                journalled, json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n"
            )
        except OSError:
            return journalled  # the journal as written before logging is the same results
    return keep(doc, Path(workdir).resolve() / GUARD_DIR / PENDING_DIR)
