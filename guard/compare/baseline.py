"""Where a comparison side comes from: a results file, an MLflow run, or a branch's latest runs.

A side is named on the command line as:

- a path to a results file (``guard run --json``);
- ``run:<id>``: an MLflow invocation run (its ``results.json`` artifact);
- ``branch:<name>`` (or ``mlflow:<name>``): for every (model, backend, canonical target) of
  the other side, the newest result run on that branch whose host class is compatible,
  from a commit other than the other side's own (``guard compare head.json`` on main must
  not compare HEAD's run with itself). Newer runs on another host are skipped, and a key
  with no compatible run is refused with the reason of the newest incompatible one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from guard.compare.compare import IncompatibleBaselineError, host_incompatibility
from guard.core.errors import UsageError
from guard.results.documents import ResultsDocument
from guard.results.load import read_results, validate_results
from guard.results.result import Result
from guard.track import find_runs, load_artifact_dict
from guard.track.client import http_limits, mlflow_client, translated
from guard.track.index import baseline_document, baseline_on_branch

BRANCH_PREFIXES = ("branch:", "mlflow:")
# The column of find_runs' frame holding a run's commit (guard.track.records tags it).
COMMIT_COLUMN = "tags.guard.git.commit"


def is_mlflow_spec(spec: str) -> bool:
    return spec.startswith(("run:", *BRANCH_PREFIXES))


def load_run(uri: str, run_id: str) -> ResultsDocument:
    """The results document an invocation run carries."""
    with http_limits(), translated(uri, f"reading run {run_id}"):
        run = mlflow_client(uri).get_run(run_id)
    if run.info.status != "FINISHED":
        # Logged in part (a kill, a failure): not a measurement to compare against yet.
        raise UsageError(
            f"run:{run_id} at {uri} is {run.info.status}, not FINISHED: its invocation was "
            "not logged whole",
            hint="push its results again (guard track push --pending), then compare.",
        )
    doc = load_artifact_dict(uri, run.info.artifact_uri, "results.json")
    validate_results(doc, f"run:{run_id}")
    return ResultsDocument.from_json(doc)


def latest_on_branch(
    uri: str,
    suite: str,
    branch: str,
    wanted: Sequence[Result],
    *,
    max_candidates: int = 20,
    finder: Callable[..., Any] | None = None,
    loader: Callable[[str], Any] | None = None,
    exclude_commit: str | None = None,
) -> ResultsDocument:
    """A baseline document assembled from the newest compatible result run per key.

    ``wanted`` are the head side's results (their keys and manifests decide what is
    compatible); runs of ``exclude_commit`` (the head's own commit) are skipped.
    ``finder``/``loader`` default to guard.track.find_runs and MLflow's artifact download;
    tests pass fakes.
    """
    finder = finder or find_runs
    load = loader or (lambda artifact_uri: load_artifact_dict(uri, artifact_uri, "result.json"))
    results = []
    for head_r in wanted:
        key = head_r.key
        frame = finder(uri, suite, model=head_r.model, backend=head_r.backend, branch=branch)
        if frame is None or len(frame) == 0:
            continue  # a model new on this side: compare reports it as only_head
        refused = None
        if exclude_commit and COMMIT_COLUMN in frame:
            frame = frame[frame[COMMIT_COLUMN] != exclude_commit]
        for artifact_uri in list(frame["artifact_uri"])[:max_candidates]:
            cand = Result.from_json(load(artifact_uri))
            if not cand.read or cand.key != key:
                continue
            why = host_incompatibility(cand.manifest, head_r.manifest)
            if why is None:
                results.append(cand)
                break
            refused = refused or why
        else:
            if refused:
                raise IncompatibleBaselineError(
                    f"no compatible baseline for {key} on branch {branch!r}: {refused}",
                    hint="Run the suite on this host class on that branch first.",
                )
    return baseline_document(uri, suite, branch, results)


def load_side(
    spec: str,
    *,
    uri: str | None = None,
    suite: str | None = None,
    other: ResultsDocument | None = None,
) -> ResultsDocument:
    """Resolve a side spec to a results document (see the module docstring)."""
    if not is_mlflow_spec(spec):
        from guard.results import pytest_benchmark

        pb = pytest_benchmark.read(Path(spec))  # a pytest-benchmark file, by its shape
        return ResultsDocument.from_json(pb) if pb is not None else read_results(Path(spec))
    if uri is None:
        raise UsageError(
            f"{spec}: an MLflow side needs a tracking URI", hint="Pass --tracking-uri."
        )
    if spec.startswith("run:"):
        return load_run(uri, spec[4:])
    branch = spec.split(":", 1)[1]
    if other is None:
        raise UsageError(
            f"{spec}: a branch baseline is resolved against the other side",
            hint="Give the other side as a results file or run:<id>.",
        )
    suite = suite or other.suite
    if not suite:
        raise UsageError(f"{spec}: which suite? pass --suite")
    own = other.git.commit
    # guard's index answers in one search per case; runs logged before it go to the scan.
    return baseline_on_branch(
        uri,
        str(suite),
        branch,
        other.results,
        fallback=latest_on_branch,
        exclude_commit=str(own) if own else None,
    )
