"""Issue 27 H1, M1 and the kill sweep: SIGKILL at every named stage of a tracked
``guard run`` (GUARD_FAULT), then ``guard track push --pending`` and the next run; nothing
lost, nothing doubled, nothing half visible, the store sound and in place.

The sweep (kill_trial.POINTS, one real guard process killed per point) is slow, and so
are the checks of a half-logged invocation made by hand (a store is created for each);
the default run checks the journal and the fault hook itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kill_trial import POINTS, failures, trial

from guard.core import fault
from guard.track import (
    end_dead_invocations,
    find_runs,
    journal_results,
    log_results,
    push_pending,
)
from guard.track.recover import CHILD_KEY_TAG, PARENT_KILLED_TAG, owner_tags


@pytest.mark.slow
@pytest.mark.parametrize(("point", "journalled"), POINTS, ids=[p for p, _ in POINTS])
def test_kill_at_each_point_loses_and_doubles_nothing(point, journalled, tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out = trial(point, journalled, tmp_path)
    assert failures(out) == [], out


def test_fault_points_fire_only_where_named(monkeypatch):
    monkeypatch.delenv(fault.ENV, raising=False)
    fault.point("journal")  # unset: nothing happens
    monkeypatch.setenv(fault.ENV, "mlflow.log_child@2")
    assert fault.armed("mlflow.log_child") and not fault.armed("journal")
    fault.point("journal")
    code = "from guard.core import fault; fault.point('a:x.json'); fault.point('a', 'x.json')"
    env = {**os.environ, fault.ENV: "a:x.json"}
    done = subprocess.run([sys.executable, "-c", code], env=env, timeout=60)
    assert done.returncode == -9


def _doc(n: int = 2) -> dict:
    results = [
        {
            "model": f"m{i}",
            "backend": "onnxruntime",
            "target": "host",
            "verdict": "pass",
            "latency_ms": {"p50": 1.0 + i},
            "samples_ms": [1.0, 1.1, 0.9],
        }
        for i in range(n)
    ]
    return {
        "schema_version": 1,
        "suite": "killed",
        "started": "2026-12-04T09:00:00+00:00",
        "finished": "2026-12-04T09:00:30+00:00",
        "git": {"commit": "abc", "branch": "main"},
        "results": results,
    }


@pytest.mark.slow
def test_a_half_logged_invocation_is_ended_killed_then_finished_once(tmp_path, monkeypatch):
    """What a SIGKILL after the first child leaves: that child FINISHED, the second child
    RUNNING, the parent RUNNING with a dead process. Readers must not count it; the next
    push ends it KILLED, then finishes it without a second run of any result (H1)."""
    from mlflow import MlflowClient

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    doc = _doc()
    receipt = log_results(dict(doc), uri)
    client = MlflowClient(uri)
    parent, kids = receipt["parent_run_id"], receipt["child_run_ids"]
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    client.update_run(parent, status="RUNNING")
    client.update_run(kids[1], status="RUNNING")
    for key, value in {**owner_tags(), "guard.pid": str(dead.pid), "guard.pid_started": ""}.items():
        client.set_tag(parent, key, value)
    assert find_runs(uri, "killed").empty  # children of an unfinished parent: not counted
    assert find_runs(uri, "killed", level="invocation").empty

    journal = journal_results(doc, tmp_path)
    assert journal.parent == (tmp_path / ".guard" / "pending").resolve()
    [(path, again)] = push_pending(tmp_path, uri)
    assert path == journal and not journal.exists()
    assert again["already_tracked"] is False and again["parent_run_id"] == parent
    assert again["child_run_ids"][0] == kids[0]  # kept: it was logged whole
    assert client.get_run(kids[1]).info.lifecycle_stage == "deleted"  # cut short: redone
    seen = find_runs(uri, "killed")
    assert len(seen) == 2 and sorted(seen[f"tags.{CHILD_KEY_TAG}"]) == sorted(
        client.get_run(k).data.tags[CHILD_KEY_TAG] for k in again["child_run_ids"]
    )
    assert PARENT_KILLED_TAG not in client.get_run(kids[0]).data.tags
    assert client.get_run(parent).info.status == "FINISHED"
    # Pushed again: nothing new.
    path2 = journal_results(doc, tmp_path)
    [(_, third)] = push_pending(tmp_path, uri)
    assert third["already_tracked"] is True and not path2.exists()
    assert len(find_runs(uri, "killed", level=None, include_unfinished=True)) == 3


@pytest.mark.slow
def test_a_run_killed_while_logging_is_ended_killed_by_the_next_one(tmp_path):
    """The recovery itself: a RUNNING parent of a dead process on this host ends KILLED
    and its children are tagged, as soon as the next logging opens the experiment."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = log_results(_doc(), uri)
    client = MlflowClient(uri)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    client.update_run(first["parent_run_id"], status="RUNNING")
    client.set_tag(first["parent_run_id"], "guard.pid", str(dead.pid))
    assert end_dead_invocations(uri, "nosuch") == []
    assert end_dead_invocations(uri, "killed") == [first["parent_run_id"]]  # guard run's start
    assert end_dead_invocations(uri, "killed") == []
    client.update_run(first["parent_run_id"], status="RUNNING")
    other = _doc(1)
    other["started"] = "2026-12-04T10:00:00+00:00"
    log_results(other, uri)  # and any logging into the experiment
    assert client.get_run(first["parent_run_id"]).info.status == "KILLED"
    for kid in first["child_run_ids"]:
        assert client.get_run(kid).data.tags[PARENT_KILLED_TAG] == "KILLED"
    assert len(find_runs(uri, "killed")) == 1


def test_results_are_journalled_before_the_first_mlflow_call(tmp_path, monkeypatch):
    """M1: with or without --json, the results are on disk before MLflow is called."""
    import guard.track.log as log

    seen: list[list[str]] = []

    def first_call(*_a, **_k):
        seen.append([p.name for p in (tmp_path / ".guard" / "pending").glob("*.json")])
        raise RuntimeError("stop here")

    monkeypatch.setattr(log, "mlflow_client", first_call)
    monkeypatch.setattr(log, "check_reachable", lambda _uri: None)
    from guard.run.deliver import Interruption, finish

    class Opts:
        workdir = tmp_path
        json_path = junit_path = markdown_path = html_path = None
        console = None
        require_tracking = False

    doc = _doc()
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    finish(doc, 0, uri=uri, tracking_problem=None, opts=Opts(), stop=Interruption())
    assert len(seen) == 1 and len(seen[0]) == 1  # journalled, once, before the call
    kept = Path(doc["tracking"]["kept"])
    assert kept.name == seen[0][0] and json.loads(kept.read_text())["results"] == doc["results"]


@pytest.mark.slow
def test_results_being_logged_by_a_live_process_are_not_logged_again(tmp_path):
    """A push of results whose parent is RUNNING under a live process (a guard run logging
    them now) says so instead of making a second parent and second result runs (H1)."""
    from mlflow import MlflowClient

    from guard.core.errors import TrackingError
    from guard.track import keep_results, push

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    doc = _doc()
    first = log_results(dict(doc), uri)
    MlflowClient(uri).update_run(first["parent_run_id"], status="RUNNING")  # we are alive
    with pytest.raises(TrackingError, match="being logged .* right now"):
        push(keep_results(doc, tmp_path), uri)
    assert len(find_runs(uri, "killed", level=None, include_unfinished=True)) == 3
