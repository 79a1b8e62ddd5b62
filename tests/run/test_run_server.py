"""guard run against a real `mlflow server` on loopback: one parent, a child per result."""

from __future__ import annotations

import json

import pytest
from run_helpers import FAST_MEASURE, small_convnet, write_suite

from guard.cli.main import main


@pytest.mark.slow
@pytest.mark.server
def test_run_against_real_server_reads_back_parent_and_children(
    tmp_path, workdir, mlflow_server, monkeypatch
):
    import mlflow

    a = small_convnet(tmp_path / "a.onnx")
    b = small_convnet(tmp_path / "b.onnx", opset=13)
    suite = write_suite(
        tmp_path,
        f"""
    schema_version: 1
    suite: spine-served
    defaults:
      backends: [onnxruntime]
      measure: {FAST_MEASURE}
      checks: {{partitions: {{max: 1}}}}
    models:
      - {{name: a, source: {a}}}
      - {{name: b, source: {b}}}
    """,
    )
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    code = main(["run", str(suite), "--json", str(tmp_path / "r.json")])
    doc = json.loads((tmp_path / "r.json").read_text())
    assert code == 0, doc
    assert doc["tracking"]["uri"] == mlflow_server

    mlflow.set_tracking_uri(mlflow_server)
    runs = mlflow.search_runs(experiment_names=["guard/spine-served"], output_format="list")
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 2
    parent = parents[0]
    assert parent.info.run_id == doc["tracking"]["parent_run_id"]
    assert parent.data.tags["guard.suite_sha256"] == doc["suite_sha256"]
    by_model = {c.data.tags["guard.model"]: c for c in children}
    assert set(by_model) == {"a", "b"}
    for name, child in by_model.items():
        result = next(r for r in doc["results"] if r["model"] == name)
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert child.data.tags["guard.verdict"] == "pass"
        m = child.data.metrics
        assert m["latency_ms.p50"] == pytest.approx(result["latency_ms"]["p50"])
        assert m["latency_ms.n"] == result["latency_ms"]["n"] >= 5
        assert m["partitions.count"] == 1
        assert m["arena_bytes"] == result["arena_bytes"]
        assert "numerics.max_abs_err" in m
        # params: the flattened manifest
        assert child.data.params["runtime.version"] == result["manifest"]["runtime"]["version"]
        assert child.data.params["target.canonical"] == result["manifest"]["target"]["canonical"]
