"""Round trip through the embedded sqlite store: log a results doc, read it back."""

from __future__ import annotations

import json
import os
from pathlib import Path

import mlflow
import pytest
from mlflow import MlflowClient
from track_docs import TRIPLES, make_doc

from guard.core.errors import EXIT_BAD_INPUT, SchemaError, TrackingError
from guard.track import (
    find_runs,
    keep_results,
    load_artifact_dict,
    log_results,
    push,
    resolve_uri,
)
from guard.track.query import scoped_tracking_uri


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory):
    """One store, one logged invocation of make_doc(), shared by the read-back tests."""
    work = tmp_path_factory.mktemp("work")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        mp.chdir(work)
        uri = resolve_uri(None, work)
        doc = make_doc()
        info = log_results(doc, uri)
        yield work, uri, doc, info


def _search(uri: str, **kw):
    with scoped_tracking_uri(uri):
        return mlflow.search_runs(experiment_names=["guard/smoke"], **kw)


def test_resolve_uri_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert resolve_uri(None, tmp_path) == f"sqlite:///{tmp_path.resolve()}/.guard/mlflow.db"
    assert (tmp_path / ".guard").is_dir()
    assert os.environ["MLFLOW_DISABLE_TELEMETRY"] == "true"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:1")
    assert resolve_uri(None, tmp_path) == "http://127.0.0.1:1"
    assert resolve_uri("http://127.0.0.1:2", tmp_path) == "http://127.0.0.1:2"


def test_one_parent_with_a_nested_run_per_result(logged):
    _, uri, _, info = logged
    runs = _search(uri)
    assert len(runs) == 4
    parents = runs[runs["tags.mlflow.parentRunId"].isna()]
    children = runs[runs["tags.mlflow.parentRunId"].notna()]
    assert list(parents["run_id"]) == [info["parent_run_id"]]
    assert sorted(children["run_id"]) == sorted(info["child_run_ids"])
    assert set(children["tags.mlflow.parentRunId"]) == {info["parent_run_id"]}
    assert set(runs["status"]) == {"FINISHED"}
    names = set(children["tags.mlflow.runName"])
    assert names == {"/".join(t) for t in TRIPLES}
    assert parents.iloc[0]["tags.mlflow.runName"] == "smoke@0123456789"


def test_parent_tags_and_counts(logged):
    _, uri, doc, info = logged
    parent = MlflowClient(uri).get_run(info["parent_run_id"])
    tags, metrics = parent.data.tags, parent.data.metrics
    assert tags["guard.git.commit"] == doc["git"]["commit"]
    assert tags["guard.git.branch"] == "main"
    assert tags["guard.git.dirty"] == "true"
    assert tags["guard.arch"] == "x86_64"
    assert tags["guard.suite_sha256"] == doc["suite_sha256"]
    assert tags["guard.verdict"] == "fail"
    assert metrics["results.total"] == 3 and metrics["results.fail"] == 1
    assert metrics["results.pass"] == 2
    # started (13:00 UTC) becomes the run's start time.
    assert parent.info.start_time == 1795957200000


def test_child_metrics_params_tags(logged):
    _, uri, doc, info = logged
    runs = _search(uri, filter_string="tags.`guard.backend` = 'bundled'")
    assert len(runs) == 1
    row = runs.iloc[0]
    src = doc["results"][1]
    for stat in ("min", "p50", "p90", "p99", "mean", "stdev", "cv", "n"):
        assert row[f"metrics.latency_ms.{stat}"] == pytest.approx(src["latency_ms"][stat])
    assert row["metrics.numerics.max_abs_err"] == pytest.approx(2e-6)
    assert row["metrics.numerics.max_rel_err"] == pytest.approx(1e-5)
    assert row["metrics.numerics.top1"] == pytest.approx(0.97)
    assert row["metrics.numerics.accuracy"] == pytest.approx(0.96)
    assert row["metrics.partitions.count"] == 2
    assert row["metrics.arena_bytes"] == 1_200_001
    assert row["metrics.arena_lower_bound_bytes"] == 1_000_000
    assert row["metrics.tuning.hit_rate"] == pytest.approx(0.9)
    assert row["params.compiler.version"] == "1.1.0"
    assert row["params.target.canonical"] == "canon:host"
    assert row["params.sha256"] == src["manifest"]["sha256"]
    assert row["tags.guard.verdict"] == "fail"
    assert row["tags.guard.failed_checks"] == "latency.p50_ms,tolerance"
    assert (row["tags.guard.model"], row["tags.guard.target"]) == ("mlp", "host")
    history = MlflowClient(uri).get_metric_history(row["run_id"], "latency_ms.sample")
    assert [(m.step, m.value) for m in history] == list(enumerate(src["samples_ms"]))


def test_artifacts_are_listed_and_land_under_dot_guard(logged):
    work, uri, doc, info = logged
    client = MlflowClient(uri)
    assert [f.path for f in client.list_artifacts(info["parent_run_id"])] == ["results.json"]
    for i, run_id in enumerate(info["child_run_ids"]):
        assert {f.path for f in client.list_artifacts(run_id)} == {"manifest.json", "result.json"}
        local = Path(client.download_artifacts(run_id, "manifest.json", str(work / f"dl{i}")))
        assert json.loads(local.read_text()) == doc["results"][i]["manifest"]
    run = client.get_run(info["parent_run_id"])
    assert run.info.artifact_uri.startswith((work / ".guard" / "mlartifacts").resolve().as_uri())
    assert not (work / "mlruns").exists() and not (work / "mlflow.db").exists()


def test_find_runs_filters(logged):
    _, uri, _, info = logged
    assert len(find_runs(uri, "smoke")) == 3
    assert len(find_runs(uri, "smoke", model="mlp")) == 2
    assert list(find_runs(uri, "smoke", backend="tvm")["tags.guard.model"]) == ["resnet18"]
    target = TRIPLES[2][2]
    assert len(find_runs(uri, "smoke", target=target, branch="main")) == 1
    assert len(find_runs(uri, "smoke", branch="other")) == 0
    parents = find_runs(uri, "smoke", level="invocation")
    assert list(parents["run_id"]) == [info["parent_run_id"]]
    assert len(find_runs(uri, "smoke", level=None)) == 4
    assert len(find_runs(uri, "smoke", parent_run_id=info["parent_run_id"])) == 3
    assert find_runs(uri, "no-such-suite").empty
    # search_runs' global URI must not leak into the environment guard resolves from.
    assert "MLFLOW_TRACKING_URI" not in os.environ
    # Baselines read the result record back from a row's artifact_uri.
    row = find_runs(uri, "smoke", backend="tvm").iloc[0]
    assert load_artifact_dict(uri, row["artifact_uri"], "result.json")["backend"] == "tvm"
    assert "MLFLOW_TRACKING_URI" not in os.environ
    with pytest.raises(TrackingError, match="unknown run filter 'colour'"):
        find_runs(uri, "smoke", colour="red")


def test_artefact_dir_manifest_is_uploaded_as_is(sqlite_uri: str, tmp_path: Path):
    art = tmp_path / "artefact0"
    art.mkdir()
    (art / "manifest.json").write_text('{"from": "artefact dir"}\n')
    doc = make_doc(TRIPLES[:1], suite="one")
    info = log_results(doc, sqlite_uri, artefact_dirs={0: art})
    client = MlflowClient(sqlite_uri)
    got = client.download_artifacts(info["child_run_ids"][0], "manifest.json", str(tmp_path))
    assert Path(got).read_text() == '{"from": "artefact dir"}\n'


def test_push_sends_kept_results_once(sqlite_uri: str, tmp_path: Path):
    doc = make_doc(TRIPLES[:2], suite="pushed")
    path = keep_results(doc, tmp_path)
    assert path.parent == (tmp_path / ".guard" / "pending").resolve()
    first = push(path, sqlite_uri)
    assert first["already_tracked"] is False and len(first["child_run_ids"]) == 2
    again = push(path, sqlite_uri)
    assert again["already_tracked"] is True
    assert again["parent_run_id"] == first["parent_run_id"]
    assert sorted(again["child_run_ids"]) == sorted(first["child_run_ids"])
    assert len(find_runs(sqlite_uri, "pushed", level=None)) == 3
    # What the pipeline adds after logging does not make it a new invocation...
    receipt = {**doc, "tracking": {"uri": sqlite_uri}, "exit_code": 1}
    assert push(keep_results(receipt, tmp_path), sqlite_uri)["already_tracked"] is True
    # A parent left FAILED by an interrupted logging does not count as tracked: the push
    # finishes it, keeping its fully logged children (no result gets a second run).
    MlflowClient(sqlite_uri).set_terminated(first["parent_run_id"], status="FAILED")
    assert find_runs(sqlite_uri, "pushed").empty  # its children are not counted meanwhile
    retry = push(path, sqlite_uri)
    assert retry["already_tracked"] is False
    assert retry["parent_run_id"] == first["parent_run_id"]
    assert sorted(retry["child_run_ids"]) == sorted(first["child_run_ids"])
    assert len(find_runs(sqlite_uri, "pushed", level=None)) == 3
    # ...but a different measurement is one.
    doc["results"][0]["latency_ms"]["p50"] += 1
    assert push(keep_results(doc, tmp_path), sqlite_uri)["already_tracked"] is False
    assert keep_results(doc, tmp_path) != path  # a second keep never overwrites


@pytest.mark.parametrize(
    "content, match",
    [
        (None, "results file not found"),
        ("{not json", "not valid JSON"),
        (
            '{"schema_version": 2, "suite": "s", "results": []}',
            "schema_version: unsupported version 2 .this guard reads results schema_version 1",
        ),
        ('{"schema_version": 1, "results": []}', "suite: expected a non-empty name, got None"),
        ('{"schema_version": 1, "suite": "s", "results": {}}', "results: expected a list"),
        (
            '{"schema_version": 1, "suite": "s", "results": [1]}',
            r"results\[0\]: expected an object",
        ),
        ("[]", r"not a JSON object \(a list\), so not a results document"),
    ],
)
def test_push_rejects_bad_files(tmp_path: Path, content, match):
    path = tmp_path / "results.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SchemaError, match=match) as err:
        push(path, f"sqlite:///{tmp_path}/never.db")
    assert str(path) in str(err.value) and err.value.exit_code == EXIT_BAD_INPUT
    assert not (tmp_path / "never.db").exists()
