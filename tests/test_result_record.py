"""The typed result (guard.results.result), its key, the one loader of
results files (guard.results.load) and the one place a result is assembled
(guard.checks.assemble)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guard.checks import evaluate as ck
from guard.checks.assemble import CONTRACT_KEYS, error_result, result_dict
from guard.core.errors import UsageError
from guard.results.documents import ResultsDocument
from guard.results.load import load_results
from guard.results.result import Result, ResultKey
from guard.run.shard import plan, times_from_results
from guard.suite import ModelEntry
from guard.suite.check_blocks import CheckBlocks

SPR = "llvm -mcpu=sapphirerapids -mtriple=x86_64-linux-gnu"


def _entry(name: str = "mlp", target: str = "host") -> ModelEntry:
    return ModelEntry(
        name=name,
        source="zoo:mlp",
        inputs={},
        backends=("bundled",),
        target=target,
        threads=1,
        measure={},
        checks=CheckBlocks(),
    )


def test_a_built_result_has_the_contract_keys_in_order_then_its_extras():
    d = result_dict(
        _entry(),
        "bundled",
        checks=[ck.Check("latency.p50_ms", "pass", 1.0, 2.0, "")],
        manifest={"target": {"raw": "host", "canonical": SPR}},
        extra={"kernels": [{"name": "gemm", "share": 0.5}]},
    )
    assert list(d) == [*CONTRACT_KEYS, "kernels"]
    assert d["verdict"] == "pass" and d["target"] == "host"
    assert Result.from_json(d).to_json() == d
    assert list(Result.from_json(d).to_json()) == list(d)
    assert json.dumps(Result.from_json(d).to_json()) == json.dumps(d)


def test_fields_other_helpers_add_and_keys_older_files_lack_round_trip_losslessly():
    """A newer field (counted, contention, layout_conversions, a second golden's numerics)
    passes through untouched; a contract key an older file lacks is not added."""
    old = {
        "model": "mlp",
        "backend": "onnxruntime",
        "target": "host",
        "verdict": "pass",
        "checks": [],
        "latency_ms": {"p50": 1.0},
        "samples_ms": [1.0, 1.1],
        "counted": {"engine": "valgrind", "instructions": 123, "fingerprint": {"a": 1}},
        "contention": {"flagged": False, "load_max": 0.2},
        "layout_conversions": 3,
        "numerics": {"max_abs_err": 0.0, "golden": {"second": {"max_abs_err": 1e-6}}},
        "duration_s": 2.5,
    }
    r = Result.from_json(old)
    assert r.to_json() == old and json.dumps(r.to_json()) == json.dumps(old)
    assert r.rounds == () and "rounds" not in r.to_json()
    assert r.counted is not None and r.counted.instructions == 123
    assert r.counted.fingerprint.extra == {"a": 1}
    assert r.contention.flagged is False and r.layout_conversions == 3
    assert r.duration_s == 2.5 and r.numerics.max_abs_err == 0.0
    assert r.numerics.extra == {"golden": {"second": {"max_abs_err": 1e-6}}}
    assert r.extra == {}


def test_one_key_on_the_canonical_target_and_the_suite_spelling_as_the_case():
    a = {"model": "m", "backend": "b", "target": "host", "manifest": {"target": {"canonical": SPR}}}
    b = {**a, "target": "native"}
    err = {"model": "m", "backend": "b", "target": "host", "manifest": None}
    assert ResultKey.of(a) == ResultKey.of(b) == ResultKey("m", "b", SPR)
    assert str(ResultKey.of(a)) == f"m/b/{SPR}"
    assert ResultKey.of(a).case == ("m", "b", "host") and ResultKey.of(b).case[2] == "native"
    assert ResultKey.of(err) == ResultKey("m", "b", "host")  # no manifest: the spelling
    assert Result.from_json(a | {"verdict": "pass", "checks": []}).key == ResultKey.of(a)
    errored = error_result(_entry(), "b", ValueError("x"))
    assert ResultKey.of(errored) == ResultKey("mlp", "b", "host")


def test_shard_balancing_reads_times_by_the_suite_spelling_of_canonical_results():
    """Results carry canonical targets in their manifests; the plan is made of the suite's
    cases (same on every runner), and the times still find them."""
    cases = [
        ("big", "onnxruntime", "host"),
        ("a", "onnxruntime", "host"),
        ("b", "onnxruntime", "host"),
    ]
    doc = {
        "results": [
            {"model": m, "backend": be, "target": t, "manifest": {"target": {"canonical": SPR}},
             "duration_s": s}
            for (m, be, t), s in zip(cases, (9.0, 1.0, 1.0), strict=True)
        ]
    }  # fmt: skip
    times = times_from_results(ResultsDocument.from_json(doc))
    assert times == {cases[0]: 9.0, cases[1]: 1.0, cases[2]: 1.0}
    p = plan(cases, 2, times, "results:x")
    assert p.source == "results:x" and p.shard_cases(1) == [cases[0]]
    assert p.shard_cases(2) == cases[1:]


def test_the_one_loader_reads_older_files_and_checks_the_version(tmp_path: Path):
    old = {
        "schema_version": 1,
        "suite": "s",
        "results": [
            {"model": "m", "backend": "onnxruntime", "target": "host", "verdict": "pass",
             "latency_ms": {"p50": 1.0}, "samples_ms": [1.0], "layout_conversions": 2}
        ],
    }  # fmt: skip
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    assert load_results(path, require_suite=True) == old
    path.write_text(json.dumps({**old, "schema_version": 2}))
    with pytest.raises(UsageError, match="schema_version: unsupported version 2"):
        load_results(path)
    path.write_text(json.dumps({k: v for k, v in old.items() if k != "suite"}))
    assert load_results(path)["results"]
    with pytest.raises(UsageError, match="suite"):
        load_results(path, require_suite=True)
