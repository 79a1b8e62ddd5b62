"""Issue 27 must-have 8 on the shared stack: the kill sweep against an MLflow server
backed by PostgreSQL (started on 127.0.0.1 and stopped, as tests/scale does). A kill
inside the server's own transaction is PostgreSQL's to roll back; the points are guard's
own: the journal and each MLflow call."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from kill_trial import POINTS, failures, trial

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scale"))
from scale_stack import MlflowServer, PostgresCluster, missing_reason  # noqa: E402

SERVER_POINTS = [(p, j) for p, j in POINTS if p.startswith(("journal", "mlflow."))]


@pytest.fixture(scope="module")
def pg_server(tmp_path_factory):
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    pg = PostgresCluster().start()
    server = MlflowServer(pg.uri, tmp_path_factory.mktemp("server"))
    try:
        server.start()
    except RuntimeError as exc:
        pg.stop()
        pytest.fail(f"mlflow server on PostgreSQL did not start: {exc}", pytrace=False)
    try:
        yield pg, server
    finally:
        server.stop()
        pg.stop()


@pytest.mark.slow
@pytest.mark.parametrize(("point", "journalled"), SERVER_POINTS, ids=[p for p, _ in SERVER_POINTS])
def test_kill_at_each_point_against_a_postgres_server(
    point, journalled, pg_server, tmp_path, monkeypatch
):
    pg, server = pg_server
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    name = "pg_" + "".join(c if c.isalnum() else "_" for c in point)
    out = trial(point, journalled, tmp_path, server=server.url, db_uri=pg.uri, suite_name=name)
    assert failures(out) == [], out
    assert out["moved"] == 0 and out["integrity"] == 0
