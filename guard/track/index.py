"""guard's own index over MLflow history: one tag that names what a baseline is.

Every result run of a known branch carries ``guard.baseline_key``: a hash of (branch,
model, backend, canonical target, host class). "The newest compatible run of this case on
main" is then one tag-equality search with ``max_results=1``, newest first (the
database's part still grows with the history, cheaply per run), instead of a search per case that returns hundreds of runs (every param, metric and tag
of each) and reads their artifacts one by one until one is compatible: at 10k runs that
scan took 39 s on a tracking server and 2 minutes on a sqlite file, the index 0.5 s and
2 s (benchmarks/README.md). Runs logged without the tag are still found: a case the index
does not answer falls back to the scan.

The tag is written with the rest of each result run's data (``log_results``, so ``guard
run`` and ``guard track push`` alike); a shard's links to the shared invocation right after,
by :func:`annotate`, through the one batch primitive.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from guard.core.errors import GuardError, UsageError
from guard.core.schema import RESULTS_SCHEMA_VERSION
from guard.results.documents import ResultsDocument
from guard.results.result import Result
from guard.track import invocation
from guard.track.client import experiment_name, http_limits, mlflow_client, translated
from guard.track.query import committed, scoped_tracking_uri
from guard.track.receipt import Receipt

if TYPE_CHECKING:  # mlflow itself is imported only when a client is made
    from mlflow import MlflowClient
    from mlflow.entities import Experiment, Run

BASELINE_KEY_TAG = "guard.baseline_key"
INDEX_VERSION = "1"  # part of the hashed key: a changed key recipe never matches old runs
# Lookups in flight at once: each is a round trip (search, then artifact) to the server.
LOOKUP_WORKERS = 8
_NEWEST = 5  # runs fetched per index lookup: the newest whose invocation finished wins


def baseline_key(result: Result, branch: str | None) -> str | None:
    """The index key of a result on a branch; None when the branch is unknown."""
    if not branch:
        return None
    host = result.manifest.host
    parts = [
        INDEX_VERSION,
        str(branch),
        result.model,
        result.backend,
        result.canonical_target,
        # the host class (guard.compare.compare.HOST_FIELDS): arch, cpu, threads
        str(host.arch),
        str(host.cpu),
        str(host.threads),
    ]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:40]


def result_tags(result: Result, doc: ResultsDocument) -> dict[str, str]:
    """The index tags of one result run."""
    tags: dict[str, str] = {}
    key = baseline_key(result, doc.git.branch)
    if key:
        tags[BASELINE_KEY_TAG] = key
    if doc.shard is not None and doc.shard.invocation_id:
        tags["guard.invocation_id"] = doc.shard.invocation_id
    return tags


def annotate(uri: str, doc: ResultsDocument, receipt: Receipt) -> None:
    """Link a shard's run to its invocation (guard.track.invocation). The index tags
    (:func:`result_tags`) go on each result run with the rest of its data, in the batch
    that logs it: a run is never visible without them."""
    with http_limits(), translated(uri, "indexing the logged runs"):
        client = mlflow_client(uri)
        parent_id = receipt.get("parent_run_id")
        if parent_id and doc.shard is not None:
            invocation.link_shard(client, str(receipt["experiment_id"]), str(parent_id), doc)


def annotate_logged(uri: str, doc: ResultsDocument, receipt: Receipt) -> Receipt:
    """:func:`annotate` for ``log_results``: the results are logged already, so a failure
    here is reported in the receipt (``index_error``) rather than raised."""
    try:
        annotate(uri, doc, receipt)
    except GuardError as exc:
        receipt["index_error"] = str(exc)
    return receipt


def _experiment(client: MlflowClient, suite: str) -> Experiment | None:
    return client.get_experiment_by_name(experiment_name(suite))


def latest_result_run(
    client: MlflowClient, experiment_id: str, key: str, exclude_commit: str | None = None
) -> Run | None:
    """The newest FINISHED result run with this baseline key (of another commit than
    ``exclude_commit``), or None.

    The commit is checked on the newest run first: a second tag condition costs the
    database a join over every run, and the newest run is of another commit unless HEAD
    itself was logged on that branch.
    """
    where = f"tags.`{BASELINE_KEY_TAG}` = '{key}' and attributes.status = 'FINISHED'"

    def newest(condition: str) -> Run | None:
        # A few, in case the newest are of an invocation a kill cut short (not counted).
        found = client.search_runs(
            [experiment_id],
            filter_string=condition,
            max_results=_NEWEST,
            order_by=["attributes.start_time DESC"],
        )
        runs = committed(client, experiment_id, list(found))
        return runs[0] if runs else None

    run = newest(where)
    if run is None or not exclude_commit or run.data.tags.get("guard.git.commit") != exclude_commit:
        return run
    if "'" in exclude_commit:
        return None
    return newest(f"{where} and tags.`guard.git.commit` != '{exclude_commit}'")


def baseline_on_branch(
    uri: str,
    suite: str,
    branch: str,
    wanted: Sequence[Result],
    *,
    fallback: Callable[..., ResultsDocument] | None = None,
    loader: Callable[[str], Any] | None = None,
    exclude_commit: str | None = None,
    workers: int = LOOKUP_WORKERS,
) -> ResultsDocument:
    """A baseline document: per head result, the newest compatible run on ``branch``.

    Cases the index answers cost one search and one artifact read each, a few at a time
    (each is a round trip to the server); the rest go to ``fallback``
    (guard.compare.baseline.latest_on_branch, the scan) in one call, whose errors (no runs
    at all, only incompatible ones) stand. Runs of ``exclude_commit`` (the head's own
    commit) are never a baseline.
    """
    if loader is None:
        import mlflow

        def loader(artifact_uri: str) -> Any:
            return mlflow.artifacts.load_dict(f"{artifact_uri.rstrip('/')}/result.json")

    found: list[Result | None] = []
    with (
        http_limits(),
        translated(uri, f"looking up baselines of suite {suite!r}"),
        scoped_tracking_uri(uri),  # once for all threads: artifact URIs resolve against it
    ):
        client = mlflow_client(uri)
        experiment = _experiment(client, suite)

        def one(head_r: Result) -> Result | None:
            key = baseline_key(head_r, branch)
            if experiment is None or key is None:
                return None
            run = latest_result_run(client, experiment.experiment_id, key, exclude_commit)
            cand = loader(run.info.artifact_uri) if run is not None else None
            found = Result.from_json(cand)
            if not found.read or found.model != head_r.model:
                return None  # no result.json, or not this model's
            return found

        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(wanted)))) as pool:
            found = list(pool.map(one, wanted))
    results = [r for r in found if r is not None]
    missing = [h for h, r in zip(wanted, found, strict=True) if r is None]
    if missing and fallback is not None:
        try:
            extra = {"exclude_commit": exclude_commit} if exclude_commit else {}
            scanned = fallback(uri, suite, branch, list(missing), **extra)
            results.extend(scanned.results)
        except UsageError:
            if not results:
                raise
    return baseline_document(uri, suite, branch, results)


def baseline_document(
    uri: str, suite: str, branch: str, results: Sequence[Result]
) -> ResultsDocument:
    """The results document of a branch's baseline runs (each as it was read), or the
    error that there are none."""
    if not results:
        raise UsageError(
            f"no baseline runs of suite {suite!r} on branch {branch!r} in {uri}",
            hint="Run `guard run` on that branch with tracking on, or pass a results file.",
        )
    return ResultsDocument.from_json(
        {
            "schema_version": RESULTS_SCHEMA_VERSION,
            "suite": suite,
            "git": {"branch": branch},
            "results": [r.to_json() for r in results],
        }
    )


def case_times(
    uri: str,
    suite: str,
    cases: Sequence[tuple[str, str, str]],
    *,
    before_ms: int | None = None,
    exclude_invocation: str | None = None,
    per_case: int = 4,
) -> dict[tuple[str, str, str], float]:
    """Seconds per case (``duration_s``) from the newest result runs of the suite.

    Only runs that started before ``before_ms`` and are not of ``exclude_invocation`` count,
    so every shard of one invocation reads the same history. One search, newest first,
    bounded to a few runs per case; a store that cannot answer gives no times (the shards
    balance by count) rather than failing the run.
    """
    wanted = set(cases)
    out: dict[tuple[str, str, str], float] = {}
    where = "tags.`guard.level` = 'result' and attributes.status = 'FINISHED'"
    if before_ms is not None:
        where += f" and attributes.start_time < {int(before_ms)}"
    try:
        with http_limits(), translated(uri, f"reading case times of suite {suite!r}"):
            client = mlflow_client(uri)
            experiment = _experiment(client, suite)
            if experiment is None:
                return out
            found = client.search_runs(
                [experiment.experiment_id],
                filter_string=where,
                max_results=max(1, per_case * len(wanted)),
                order_by=["attributes.start_time DESC"],
            )
            runs = committed(client, experiment.experiment_id, list(found))
    except GuardError:
        return out
    for run in runs:
        tags, metrics = run.data.tags, run.data.metrics
        if exclude_invocation and tags.get("guard.invocation_id") == exclude_invocation:
            continue
        case = (tags.get("guard.model"), tags.get("guard.backend"), tags.get("guard.target"))
        if case in wanted and case not in out and "duration_s" in metrics:
            out[case] = float(metrics["duration_s"])
    return out
