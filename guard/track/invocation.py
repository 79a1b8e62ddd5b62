"""One logical invocation over many shards: a parent run that the shards' runs hang under.

``guard run --shard K/N --invocation-id ID`` (or ``GUARD_INVOCATION_ID``) makes, in
``guard/<suite>``::

    invocation run   guard.level=invocation, guard.invocation_id=ID, guard.shard_count=N
      shard run      guard.level=shard, guard.run.shard=K/N (what an unsharded run logs as
        result run   its invocation), one per (model, backend, target), as always

MLflow has no unique constraint guard could use to create the invocation run exactly
once, so shards that start at the same moment may each create one. Every shard therefore
creates (or finds) a candidate when it starts, before measuring, and links its own run
when it logs, minutes later, to the canonical candidate: the earliest (start time, run id)
among those tagged with the id. By then every shard that started with it has created its
candidate, so all shards agree; spare candidates are marked ``guard.superseded_by`` and
deleted by the shard that links last. Readers that group by ``guard.invocation_id`` (every
shard and result run carries it) never depend on which candidate won.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from guard.core.errors import UsageError
from guard.results.documents import Git, ResultsDocument, Shard
from guard.track.batch import _log_batch, metric_entities
from guard.track.client import experiment_id, http_limits, mlflow_client, translated
from guard.track.records import parent_metrics, tag_value, worst_verdict

if TYPE_CHECKING:  # mlflow itself is imported only when a client is made
    from mlflow import MlflowClient
    from mlflow.entities import Run

INVOCATION_TAG = "guard.invocation_id"


def _candidates(client: MlflowClient, experiment_id: str, invocation_id: str) -> list[Run]:
    runs = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`{INVOCATION_TAG}` = '{_safe(invocation_id)}' "
        "and tags.`guard.level` = 'invocation'",
        max_results=100,
    )
    return sorted(runs, key=lambda r: (r.info.start_time, r.info.run_id))


def _safe(value: str) -> str:
    if "'" in value:
        raise UsageError(f"invocation id {value!r} may not contain a quote")
    return value


def _create(
    client: MlflowClient,
    experiment_id: str,
    suite: str,
    invocation_id: str,
    count: Any,
    git: Git,
) -> str:
    commit = str(git.commit or "nogit")[:10]
    tags = {
        "guard.level": "invocation",
        INVOCATION_TAG: invocation_id,
        "guard.suite": suite,
        "guard.sharded": "true",
        "guard.shard_count": str(count),
        "guard.git.commit": git.commit,
        "guard.git.branch": git.branch,
    }
    run = client.create_run(
        experiment_id,
        start_time=int(time.time() * 1000),
        run_name=f"{suite}@{commit} ({count} shards, {invocation_id})",
    )
    _log_batch(
        client, run.info.run_id, tags={k: tag_value(v) for k, v in tags.items() if v is not None}
    )
    return str(run.info.run_id)


def ensure_invocation(
    uri: str, suite: str, invocation_id: str, count: int, git: Git | None = None
) -> tuple[str, int]:
    """The invocation run of ``invocation_id``, created when there is none yet: its run id
    and start time (ms).

    Raises TrackingError when the store cannot be reached: the caller measures anyway and
    keeps results locally.
    """
    with http_limits(), translated(uri, f"opening invocation {invocation_id!r}"):
        client = mlflow_client(uri)
        eid = experiment_id(client, uri, suite)
        found = _candidates(client, eid, invocation_id)
        if not found:
            _create(client, eid, suite, invocation_id, count, git if git is not None else Git())
            found = _candidates(client, eid, invocation_id)
        return str(found[0].info.run_id), int(found[0].info.start_time)


def link_shard(
    client: MlflowClient,
    experiment_id: str,
    shard_run_id: str,
    doc: ResultsDocument,
) -> str | None:
    """Make ``shard_run_id`` (the run a shard logged) a child of its invocation's run."""
    from mlflow.entities import RunStatus

    shard = doc.shard or Shard()
    inv = shard.invocation_id
    if not inv:
        return None
    found = _candidates(client, experiment_id, str(inv))
    if not found:  # pushed later, into a store that never saw the shard start
        _create(
            client,
            experiment_id,
            str(doc.suite),
            str(inv),
            shard.count,
            doc.git,
        )
        found = _candidates(client, experiment_id, str(inv))
    canonical = str(found[0].info.run_id)
    k, n = shard.index, shard.count
    verdicts = [r.verdict for r in doc.results]
    _log_batch(
        client,
        shard_run_id,
        tags={
            "mlflow.parentRunId": canonical,
            "guard.level": "shard",
            "guard.shard": f"{k}/{n}",
            INVOCATION_TAG: tag_value(inv),
        },
    )
    _log_batch(
        client,
        canonical,
        tags={
            "guard.shard_plan_sha256": tag_value(shard.plan_sha256),
            f"guard.shard.{k}.run_id": shard_run_id,
            f"guard.shard.{k}.verdict": worst_verdict(verdicts),
            f"guard.shard.{k}.results": str(len(verdicts)),
        },
    )
    for spare in found[1:]:
        spare_id = str(spare.info.run_id)
        _log_batch(client, spare_id, tags={"guard.superseded_by": canonical})
        for child in client.search_runs(
            [experiment_id], f"tags.mlflow.parentRunId = '{spare_id}'", max_results=1000
        ):
            _log_batch(client, child.info.run_id, tags={"mlflow.parentRunId": canonical})
        client.delete_run(spare_id)
    if canonical and found[0].info.status != RunStatus.to_string(RunStatus.FINISHED):
        client.set_terminated(canonical, status="FINISHED")
    return canonical


def record_merged(uri: str, doc: ResultsDocument) -> str:
    """Put a merged results document (guard merge) on its invocation's run: the worst
    verdict, the counts, and ``results.json``, so ``run:<id>`` of the invocation is the
    whole run. Writing it again overwrites it (idempotent). Returns the run id."""
    inv = doc.merged.invocation_id if doc.merged is not None else None
    if not inv:
        raise UsageError(
            "the merged results carry no invocation id: nothing to record",
            hint="Only shards run with --invocation-id (or "
            "GUARD_INVOCATION_ID) log under one invocation.",
        )
    suite = str(doc.suite)
    with http_limits(), translated(uri, f"recording the merge of invocation {inv!r}"):
        client = mlflow_client(uri)
        eid = experiment_id(client, uri, suite)
        found = _candidates(client, eid, str(inv))
        if not found:
            raise UsageError(
                f"no invocation run {inv!r} in guard/{suite} at {uri}",
                hint="Were the shards logged there? Push kept ones first (guard track push).",
            )
        run_id = str(found[0].info.run_id)
        _log_batch(
            client,
            run_id,
            metric_entities(parent_metrics(doc)),
            tags={
                "guard.verdict": worst_verdict([r.verdict for r in doc.results]),
                "guard.merged": "true",
                "guard.exit_code": str(doc.exit_code),
            },
        )
        client.log_dict(run_id, doc.to_json(), "results.json")
    return run_id
