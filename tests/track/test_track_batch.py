"""The one write primitive: chunks stay within MLflow's batch limits, and nothing is lost."""

from __future__ import annotations

import pytest
from mlflow import MlflowClient
from mlflow.entities import Param

from guard.track import batch
from guard.track.batch import _log_batch, chunk, metric_entities
from guard.track.client import experiment_id


def _limits_hold(chunks):
    for c in chunks:
        assert len(c.metrics) <= batch.MAX_METRICS_PER_BATCH
        assert len(c.params) <= batch.MAX_PARAMS_TAGS_PER_BATCH
        assert len(c.tags) <= batch.MAX_PARAMS_TAGS_PER_BATCH
        assert len(c.metrics) + len(c.params) + len(c.tags) <= batch.MAX_ENTITIES_PER_BATCH
        size = sum(len(e.key) + len(str(e.value)) for e in (*c.metrics, *c.params, *c.tags))
        assert size < batch.MAX_BATCH_LOG_REQUEST_SIZE


def test_chunks_respect_every_limit():
    metrics = metric_entities({}, {"s": [(i, 1.0) for i in range(2500)]})
    params = [Param(f"p{i}", "v") for i in range(250)]
    tags = [Param(f"t{i}", "x" * 8000) for i in range(150)]  # 1.2 MB of tag values
    chunks = list(chunk(metrics, params, tags))
    _limits_hold(chunks)
    assert sum(len(c.metrics) for c in chunks) == 2500
    assert [p.key for c in chunks for p in c.params] == [p.key for p in params]
    assert [t.key for c in chunks for t in c.tags] == [t.key for t in tags]
    assert list(chunk([], [], [])) == []


def test_log_batch_above_the_limits_round_trips(sqlite_uri: str):
    client = MlflowClient(sqlite_uri)
    run_id = client.create_run(experiment_id(client, sqlite_uri, "batch")).info.run_id
    params = {f"param.{i:03d}": f"value {i}" for i in range(250)}
    tags = {f"tag.{i:03d}": str(i) for i in range(150)}
    scalars = {f"metric.{i}": float(i) for i in range(20)}
    metrics = metric_entities(scalars, {"latency_ms.sample": [(i, i / 10) for i in range(2500)]})
    requests = _log_batch(client, run_id, metrics, params=params, tags=tags)
    assert requests == 3  # 2520 metrics need 3 batches; params and tags ride along
    data = client.get_run(run_id).data
    assert {k: data.params[k] for k in params} == params
    assert {k: data.tags[k] for k in tags} == tags
    assert {k: data.metrics[k] for k in scalars} == scalars
    history = client.get_metric_history(run_id, "latency_ms.sample")
    assert sorted(m.step for m in history) == list(range(2500))
    assert {m.step: m.value for m in history}[2499] == pytest.approx(249.9)
