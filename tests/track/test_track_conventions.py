"""MLflow conventions a person investigating runs relies on (issue: records one can use).

System tags, child runs spanning their own build and measurement, no 'null' strings, keys
under MLflow's limits with long targets shortened, per-series metrics on the parent that
MLflow's chart view plots across invocations, and the inputs as a logged dataset.
"""

from __future__ import annotations

import copy

import mlflow
import pytest
from mlflow import MlflowClient
from mlflow.utils import validation as v
from track_docs import make_doc

from guard.cli.main import main
from guard.core.errors import EXIT_BAD_INPUT, TrackingError
from guard.track import log_results, records, resolve_uri

LONG_TARGET = "llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=znver4 -mattr=" + ",".join(
    f"+avx512feature{i}" for i in range(20)
)


@pytest.fixture
def two_invocations(sqlite_uri):
    first = make_doc([("mlp", "onnxruntime", "host"), ("mlp", "bundled", LONG_TARGET)])
    first["finished"] = "2026-11-29T13:05:00+00:00"
    first["results"][0]["started"] = "2026-11-29T13:01:00+00:00"
    first["results"][0]["finished"] = "2026-11-29T13:02:30+00:00"
    second = copy.deepcopy(first)
    second["started"] = "2026-11-30T13:00:00+00:00"
    second["finished"] = "2026-11-30T13:05:00+00:00"
    second["git"]["commit"] = "f" * 40
    for r in second["results"]:
        r["latency_ms"]["p50"] *= 2
        r.pop("started", None)
        r.pop("finished", None)
    return sqlite_uri, [first, second], [log_results(d, sqlite_uri) for d in (first, second)]


def _all_runs(uri):
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("guard/smoke")
    return client, client.search_runs([exp.experiment_id])


def test_system_tags_on_every_run(two_invocations):
    uri, docs, _ = two_invocations
    client, runs = _all_runs(uri)
    assert len(runs) == 6
    for run in runs:
        tags = run.data.tags
        for key in ("mlflow.user", "mlflow.source.name", "mlflow.source.type", "mlflow.runName"):
            assert tags.get(key), (key, tags)
        assert tags["mlflow.source.git.commit"] in {d["git"]["commit"] for d in docs}
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert all("guard run of suite" in r.data.tags["mlflow.note.content"] for r in parents)


def test_no_null_strings_and_keys_within_limits(two_invocations):
    uri, _, _ = two_invocations
    _, runs = _all_runs(uri)
    for run in runs:
        assert "null" not in run.data.params.values()
        for key in [*run.data.params, *run.data.metrics, *run.data.tags]:
            assert len(key) <= v.MAX_ENTITY_KEY_LENGTH, key
    names = {r.data.tags["mlflow.runName"] for r in runs}
    assert f"mlp/bundled/{records.target_key(LONG_TARGET)}" in names
    child = next(r for r in runs if r.data.tags.get("guard.target") == LONG_TARGET)
    assert child.data.params["target.raw"] == LONG_TARGET  # the full string, as a param


def test_child_runs_span_their_own_build_and_measurement(two_invocations):
    uri, docs, infos = two_invocations
    client = MlflowClient(uri)
    own = client.get_run(infos[0]["child_run_ids"][0]).info
    assert own.start_time == records.iso_ms(docs[0]["results"][0]["started"])
    assert own.end_time - own.start_time == 90_000
    # Without its own times a child spans the invocation, not the ~100 ms logging took.
    other = client.get_run(infos[1]["child_run_ids"][0]).info
    assert other.end_time - other.start_time == 5 * 60_000
    parent = client.get_run(infos[1]["parent_run_id"]).info
    assert parent.end_time == records.iso_ms(docs[1]["finished"])


def test_series_metrics_on_the_parent_plot_across_invocations(two_invocations):
    uri, docs, _ = two_invocations
    series = records.series_key("mlp", "onnxruntime", "host")
    key = f"{series}/latency_ms.p50"
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("guard/smoke")
    parents = client.search_runs(
        [exp.experiment_id],
        filter_string="tags.`guard.level` = 'invocation'",
        order_by=["attributes.start_time ASC"],
    )
    values = [p.data.metrics[key] for p in parents]
    first = docs[0]["results"][0]["latency_ms"]["p50"]
    assert values == [pytest.approx(first), pytest.approx(2 * first)]
    long_series = records.series_key("mlp", "bundled", LONG_TARGET)
    assert f"{long_series}/latency_ms.p90" in parents[0].data.metrics
    assert parents[0].data.params[f"target.{records.target_key(LONG_TARGET)}"] == LONG_TARGET
    assert f"{series}/latency_ms.p10" in parents[0].data.metrics


def test_inputs_logged_as_a_dataset(two_invocations):
    uri, _, infos = two_invocations
    run = MlflowClient(uri).get_run(infos[0]["child_run_ids"][0])
    (inp,) = run.inputs.dataset_inputs
    assert inp.dataset.name == "mlp inputs"
    assert {t.key: t.value for t in inp.tags}["mlflow.data.context"] == "golden inputs"


def test_target_key_is_short_stable_and_legal():
    assert records.target_key("host") == "host"
    key = records.target_key(LONG_TARGET)
    assert key == records.target_key(LONG_TARGET) and len(key) <= 40
    assert key != records.target_key(LONG_TARGET + ",+one")
    assert v.validate_param_and_metric_name(key)


def test_no_run_left_running_when_a_child_fails(sqlite_uri, monkeypatch):
    real = MlflowClient.log_dict

    def fail_on_result(self, run_id, dictionary, artifact_file, *a, **k):
        if artifact_file == "result.json":
            raise mlflow.exceptions.MlflowException("disk full")
        return real(self, run_id, dictionary, artifact_file, *a, **k)

    monkeypatch.setattr(MlflowClient, "log_dict", fail_on_result)
    with pytest.raises(TrackingError, match="disk full"):
        log_results(make_doc(), sqlite_uri)
    _, runs = _all_runs(sqlite_uri)
    assert runs and {r.info.status for r in runs} == {"FAILED"}


@pytest.mark.parametrize("bad", ["localhost:5000", "not a uri", "ftp://x/y", "http://"])
def test_a_tracking_uri_that_is_not_a_uri_is_exit_2(bad, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(TrackingError, match="tracking"):
        resolve_uri(bad, tmp_path)
    assert main(["dashboard", "smoke", "--tracking-uri", bad]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and repr(bad) in err[0]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", bad)
    with pytest.raises(TrackingError, match="MLFLOW_TRACKING_URI"):
        resolve_uri(None, tmp_path)


def test_a_value_mlflow_refuses_is_guards_bug_not_the_store(sqlite_uri, monkeypatch):
    """It used to say 'check that the store is writable' (exit 2) for guard's own bad key."""
    from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

    from guard.core.errors import EXIT_INTERNAL, InternalError

    def refuse(self, *a, **k):
        raise mlflow.exceptions.MlflowException("Invalid metric name", INVALID_PARAMETER_VALUE)

    monkeypatch.setattr(MlflowClient, "log_batch", refuse)
    with pytest.raises(InternalError, match="bug in guard") as caught:
        log_results(make_doc(), sqlite_uri)
    assert caught.value.exit_code == EXIT_INTERNAL and "writable" not in str(caught.value)
    _, runs = _all_runs(sqlite_uri)
    assert {r.info.status for r in runs} == {"FAILED"}
