"""guard's index over MLflow history (guard.track.index) and the shared invocation
(guard.track.invocation), against a real embedded store."""

from __future__ import annotations

import threading

import pytest
from mlflow import MlflowClient

import guard.track.log as track_log
from guard.core.errors import UsageError
from guard.results.documents import ResultsDocument
from guard.results.result import Result
from guard.track import log_results, resolve_uri
from guard.track.client import experiment_id, mlflow_client
from guard.track.index import BASELINE_KEY_TAG, baseline_key, baseline_on_branch, case_times
from guard.track.invocation import ensure_invocation, link_shard
from guard.track.log import _log

pytestmark = pytest.mark.slow  # a fresh sqlite store costs seconds (migrations)

CASES = [("mlp", "onnxruntime"), ("mlp", "bundled")]


def _doc(
    commit: str,
    branch: str = "main",
    arch: str = "x86_64",
    p50: float = 1.0,
    duration: float = 1.0,
    started: str = "2026-12-01T08:00:00+00:00",
    shard=None,
):
    results = [
        {
            "model": m,
            "backend": b,
            "target": "host",
            "verdict": "pass",
            "checks": [],
            "manifest": {
                "host": {"arch": arch, "cpu": "cpu", "threads": 1},
                "target": {"raw": "host", "canonical": "llvm -mcpu=x"},
                "sha256": f"{arch}-{b}",
            },
            "latency_ms": {"p50": p50},
            "duration_s": duration,
        }
        for m, b in CASES
    ]
    doc = {
        "schema_version": 1,
        "suite": "idx",
        "started": started,
        "git": {"commit": commit, "dirty": False, "branch": branch},
        "results": results,
    }
    if shard:
        doc["shard"] = shard
    return doc


@pytest.fixture
def uri(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    return resolve_uri(None, tmp_path)


def _no_scan(*args, **kwargs):
    raise AssertionError("the index should have answered without the scan")


def test_key_separates_branch_host_and_case():
    r = ResultsDocument.from_json(_doc("a")).results[0]
    k = baseline_key(r, "main")
    assert k == baseline_key(Result.from_json(r.to_json()), "main") and len(k) == 40
    assert baseline_key(r, "feature") != k
    other_host = ResultsDocument.from_json(_doc("a", arch="aarch64")).results[0]
    assert baseline_key(other_host, "main") != k
    assert baseline_key(ResultsDocument.from_json(_doc("a")).results[1], "main") != k
    assert baseline_key(r, None) is None


def test_newest_compatible_run_on_the_branch(uri):
    log_results(_doc("a" * 40, p50=1.0, started="2026-12-01T08:00:00+00:00"), uri)
    log_results(_doc("b" * 40, p50=2.0, started="2026-12-01T09:00:00+00:00"), uri)
    # Newer, but another host class and another branch: never a baseline for x86_64 main.
    log_results(_doc("c" * 40, arch="aarch64", p50=9.0, started="2026-12-01T10:00:00+00:00"), uri)
    log_results(_doc("d" * 40, branch="pr", p50=8.0, started="2026-12-01T11:00:00+00:00"), uri)
    head = ResultsDocument.from_json(_doc("e" * 40, branch="pr")).results
    base = baseline_on_branch(uri, "idx", "main", head, fallback=_no_scan)
    assert [r.latency_ms.p50 for r in base.results if r.latency_ms] == [2.0, 2.0]
    # HEAD's own commit is never its baseline: the one before it is.
    base = baseline_on_branch(uri, "idx", "main", head, fallback=_no_scan, exclude_commit="b" * 40)
    assert [r.latency_ms.p50 for r in base.results if r.latency_ms] == [1.0, 1.0]
    with pytest.raises(UsageError, match="no baseline runs"):
        baseline_on_branch(uri, "idx", "nowhere", head, fallback=None)


def test_runs_logged_before_the_index_fall_back_to_the_scan(uri, monkeypatch):
    # As an older guard logged them: without the index tags (now part of each run's batch).
    monkeypatch.setattr(track_log, "result_tags", lambda result, doc: {})
    doc = _doc("a" * 40)
    _log(doc, ResultsDocument.from_json(doc), uri, {})
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("guard/idx").experiment_id])
    assert not any(BASELINE_KEY_TAG in r.data.tags for r in runs)
    asked = []

    def scan(uri_, suite, branch, wanted, **kw):
        asked.append([(r.model, r.backend) for r in wanted])
        return ResultsDocument.from_json(
            {"results": [dict(r.to_json(), found_by="scan") for r in wanted]}
        )

    head = ResultsDocument.from_json(_doc("e" * 40)).results
    base = baseline_on_branch(uri, "idx", "main", head, fallback=scan)
    assert asked == [CASES] and all(r.extra["found_by"] == "scan" for r in base.results)


def test_case_times_ignore_the_invocation_itself_and_later_runs(uri):
    log_results(_doc("a" * 40, duration=3.0), uri)
    log_results(
        _doc(
            "b" * 40,
            duration=7.0,
            started="2026-12-01T09:00:00+00:00",
            shard={"index": 1, "count": 2, "invocation_id": "inv"},
        ),
        uri,
    )
    wanted = [(m, b, "host") for m, b in CASES]
    assert set(case_times(uri, "idx", wanted).values()) == {7.0}
    assert set(case_times(uri, "idx", wanted, exclude_invocation="inv").values()) == {3.0}
    assert case_times(uri, "idx", wanted, before_ms=0) == {}


def test_concurrent_shards_end_under_one_invocation_run(uri):
    client = mlflow_client(uri)
    eid = experiment_id(client, uri, "idx")
    opened, errors = [], []

    def start():
        try:
            opened.append(ensure_invocation(uri, "idx", "inv-9", 3))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    docs = [
        _doc(c * 40, shard={"index": k, "count": 3, "invocation_id": "inv-9", "plan_sha256": "p"})
        for k, c in ((1, "a"), (2, "b"), (3, "c"))
    ]
    receipts = [log_results(d, uri) for d in docs]
    parents = client.search_runs(
        [eid], "tags.`guard.invocation_id` = 'inv-9' and tags.`guard.level` = 'invocation'"
    )
    assert len(parents) == 1  # spare candidates (if the starts raced) are gone
    parent = parents[0]
    assert parent.info.run_id in {run_id for run_id, _ in opened}
    assert parent.info.status == "FINISHED"
    shards = client.search_runs([eid], "tags.`guard.level` = 'shard'")
    assert sorted(s.data.tags["guard.shard"] for s in shards) == ["1/3", "2/3", "3/3"]
    assert {s.data.tags["mlflow.parentRunId"] for s in shards} == {parent.info.run_id}
    assert {s.info.run_id for s in shards} == {r["parent_run_id"] for r in receipts}
    assert parent.data.tags["guard.shard.2.results"] == "2"
    # Linking again (a re-push) changes nothing.
    again = link_shard(
        client, eid, receipts[0]["parent_run_id"], ResultsDocument.from_json(docs[0])
    )
    assert again == parent.info.run_id


def test_merge_is_recorded_on_the_invocation_run(uri, tmp_path):
    import json

    from guard.cli.main import main
    from guard.track.query import load_artifact_dict

    docs = [
        _doc(
            "a" * 40,
            shard={
                "index": k,
                "count": 2,
                "invocation_id": "inv-m",
                "plan_sha256": "p",
                "cases": [list(c) + ["host"]],
                "suite_cases": [[m, b, "host"] for m, b in CASES],
            },
        )
        for k, c in ((1, CASES[0]), (2, CASES[1]))
    ]
    for k, d in enumerate(docs):
        d["results"] = [d["results"][k]]
        log_results(d, uri)
    paths = []
    for k, d in enumerate(docs, 1):
        paths.append(tmp_path / f"r{k}.json")
        paths[-1].write_text(json.dumps(d))
    assert main(["merge", *map(str, paths), "--quiet", "--tracking-uri", uri]) == 0
    client = MlflowClient(uri)
    eid = client.get_experiment_by_name("guard/idx").experiment_id
    [parent] = client.search_runs([eid], "tags.`guard.level` = 'invocation'")
    assert parent.data.tags["guard.merged"] == "true"
    assert parent.data.metrics["results.total"] == 2
    merged = load_artifact_dict(uri, parent.info.artifact_uri, "results.json")
    assert [r["backend"] for r in merged["results"]] == ["onnxruntime", "bundled"]
