"""The results -> run data mapping, without a store."""

from __future__ import annotations

import math

import mlflow.utils.validation as v
from track_docs import make_doc, make_result

from guard.results.documents import ResultsDocument
from guard.results.manifest import Manifest
from guard.results.result import Result
from guard.track import batch, records


def test_limits_match_installed_mlflow():
    assert records.MAX_ENTITY_KEY_LENGTH == v.MAX_ENTITY_KEY_LENGTH
    assert records.MAX_PARAM_VAL_LENGTH == v.MAX_PARAM_VAL_LENGTH
    assert records.MAX_TAG_VAL_LENGTH == v.MAX_TAG_VAL_LENGTH
    assert batch.MAX_METRICS_PER_BATCH == v.MAX_METRICS_PER_BATCH
    assert batch.MAX_PARAMS_TAGS_PER_BATCH == v.MAX_PARAMS_TAGS_PER_BATCH
    assert batch.MAX_ENTITIES_PER_BATCH == v.MAX_ENTITIES_PER_BATCH
    assert batch.MAX_BATCH_LOG_REQUEST_SIZE == v.MAX_BATCH_LOG_REQUEST_SIZE


def test_clean_key_is_legal_for_mlflow():
    for raw in ["driver.cuda/version", "a:b", "x//y", "..", "", "ü-é ok", "k" * 400, "/abs"]:
        key = records.clean_key(raw)
        assert v.validate_param_and_metric_name(key), key
        assert not v.path_not_unique(key), key
        assert 0 < len(key) <= v.MAX_ENTITY_KEY_LENGTH


def test_manifest_params_are_flattened_and_truncated():
    manifest = make_result(0, "m", "b", "t")["manifest"]
    manifest["long"] = "x" * 10_000
    params = records.manifest_params(Manifest.from_json(manifest))
    assert params["compiler.version"] == "1.0.0"
    assert params["tuning_cache.hits"] == "9"
    assert params["host.threads"] == "1"
    assert params["flags"] == '["-O3", "fast-math"]'
    # None and empty sections are left out: MLflow would show the string 'null' or '{}'.
    assert "nullable" not in params and "driver" not in params
    assert "null" not in params.values()
    assert len(params["long"]) == v.MAX_PARAM_VAL_LENGTH
    assert records.manifest_params(None) == {}


def test_result_metrics_cover_the_contract():
    m = records.result_metrics(Result.from_json(make_result(1, "m", "b", "t")))
    assert m["latency_ms.p50"] == 3.0 and m["latency_ms.cv"] == 0.2 and m["latency_ms.n"] == 5
    assert m["numerics.max_abs_err"] == 2e-6 and m["numerics.top1"] == 0.97
    assert m["numerics.accuracy"] == 0.96
    assert "numerics.output_sha256" not in m and "numerics.golden_sha256" not in m
    assert m["partitions.count"] == 2 and m["partitions.fallback_nodes"] == 1
    assert m["arena_bytes"] == 1_200_001 and m["arena_lower_bound_bytes"] == 1_000_000
    assert math.isclose(m["tuning.hit_rate"], 0.9)
    assert m["checks.failed"] == 2 and m["checks.total"] == 3
    assert m["graph.ops_before_total"] == 6 and m["graph.passes_changed"] == 1
    assert all(isinstance(x, float) for x in m.values())


def test_result_metrics_tolerate_none_and_missing_fields():
    bare = Result.from_json(
        {
            "model": "m",
            "backend": "b",
            "target": "t",
            "verdict": "error",
            "latency_ms": None,
            "partitions": {"count": None},
            "arena_bytes": None,
            "numerics": None,
            "checks": None,
            "manifest": None,
            "samples_ms": None,
        }
    )
    m = records.result_metrics(bare)
    assert m == {"checks.total": 0.0, "checks.failed": 0.0}
    assert records.sample_history(bare) == []
    assert records.tuning_hit_rate(bare) is None
    tags = records.child_tags(bare, ResultsDocument.from_json({"suite": "s"}))
    assert tags["guard.verdict"] == "error" and tags["guard.failed_checks"] == ""


def test_hit_rate_absent_without_lookups():
    r = make_result(0, "m", "b", "t")
    r["manifest"]["tuning_cache"].update(hits=0, misses=0)
    assert "tuning.hit_rate" not in records.result_metrics(Result.from_json(r))


def test_samples_are_capped_and_cleaned():
    r = Result.from_json({"samples_ms": [1.0, None, "x", float("nan"), 2.0]})
    assert records.sample_history(r) == [(0, 1.0), (4, 2.0)]
    cap = records.MAX_SAMPLE_STEPS
    assert len(records.sample_history(Result.from_json({"samples_ms": [1.0] * cap}))) == cap
    # A long run is thinned evenly: the history still spans first to (nearly) last iteration.
    n = 5 * cap + 3
    thinned = records.sample_history(Result.from_json({"samples_ms": [float(i) for i in range(n)]}))
    assert len(thinned) <= cap and thinned[0] == (0, 0.0)
    assert all(step == value for step, value in thinned)
    assert thinned[-1][0] >= n - 6


def test_verdicts_and_tags():
    assert records.worst_verdict(["pass", "inconclusive"]) == "inconclusive"
    assert records.worst_verdict(["pass", "fail", "inconclusive"]) == "fail"
    assert records.worst_verdict(["fail", "error"]) == "error"
    assert records.worst_verdict(["pass", None]) == "error"
    assert records.worst_verdict([]) == "pass"
    doc = ResultsDocument.from_json(make_doc())
    tags = records.child_tags(doc.results[1], doc)
    assert tags["guard.failed_checks"] == "latency.p50_ms,tolerance"
    assert tags["guard.git.branch"] == "main"
    ptags = records.parent_tags(doc, "x86_64", "f" * 64)
    assert ptags["guard.verdict"] == "fail" and ptags["guard.git.dirty"] == "true"
    assert records.host_arch(doc) == "x86_64"
    assert records.child_name(doc.results[2]).startswith("resnet18/tvm/llvm")
