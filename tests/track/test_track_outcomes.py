"""What MLflow shows of an invocation's outcome (issue 28 item 9): a result guard could not
produce is a FAILED run with its error in a tag and the description, so is its invocation;
an inconclusive result says why in the description; the experiment opens on its runs."""

from __future__ import annotations

import copy

from mlflow import MlflowClient

from guard.track import find_runs, log_results


def _with_error_and_inconclusive(doc: dict) -> dict:
    d = copy.deepcopy(doc)
    err, unsure = d["results"][0], d["results"][2]
    err.update(verdict="error", error="the build of mlp failed: Conv: kernel shape mismatch",
               error_kind="internal", latency_ms=None, samples_ms=[])  # fmt: skip
    unsure["verdict"] = "inconclusive"
    unsure["checks"][0].update(status="inconclusive", message="p50 13.5 ms > bound 10 ms; "
                               "inconclusive (contention: 3 of 3 rounds contended)")  # fmt: skip
    return d


def test_an_invocation_with_an_error_ends_failed_and_says_why(doc, sqlite_uri):
    receipt = log_results(_with_error_and_inconclusive(doc), sqlite_uri)
    client = MlflowClient(sqlite_uri)
    parent = client.get_run(receipt["parent_run_id"])
    assert parent.info.status == "FAILED"
    assert "kernel shape mismatch" in parent.data.tags["guard.error"]
    note = parent.data.tags["mlflow.note.content"]
    assert "mlp/onnxruntime/host: error (the build of mlp failed" in note
    assert "inconclusive (latency.p50_ms: p50 13.5 ms > bound 10 ms; inconclusive (contention" in (
        note
    )
    kids = {c: client.get_run(c) for c in receipt["child_run_ids"]}
    by_verdict = {r.data.tags["guard.verdict"]: r for r in kids.values()}
    assert by_verdict["error"].info.status == "FAILED"
    assert by_verdict["error"].data.tags["mlflow.note.content"].startswith("**error**: the build")
    assert by_verdict["inconclusive"].info.status == "FINISHED"
    assert "contention" in by_verdict["inconclusive"].data.tags["mlflow.note.content"]
    # Logged in full: readers still see its measured results, and it is not logged twice.
    frame = find_runs(sqlite_uri, doc["suite"])
    # FAILED in MLflow (red), and still a whole record to every reader: verdict error.
    assert sorted(frame["tags.guard.verdict"]) == ["error", "fail", "inconclusive"]
    again = log_results(_with_error_and_inconclusive(doc), sqlite_uri)
    assert again["already_tracked"] and again["parent_run_id"] == receipt["parent_run_id"]


def test_the_experiment_opens_on_its_runs_table(doc, sqlite_uri):
    """MLflow 3 opens an experiment on its GenAI traces page unless mlflow.experimentKind
    says it holds model runs; an experiment made by an older guard gets the tag too."""
    log_results(doc, sqlite_uri)
    client = MlflowClient(sqlite_uri)
    exp = client.get_experiment_by_name(f"guard/{doc['suite']}")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    client.delete_experiment_tag(exp.experiment_id, "mlflow.experimentKind")
    d = copy.deepcopy(doc)
    d["git"]["commit"] = "f" * 40
    log_results(d, sqlite_uri)
    exp = client.get_experiment_by_name(f"guard/{doc['suite']}")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
