"""compare_docs on synthetic results documents: verdicts, contract, refusal, attribution."""

from __future__ import annotations

import json

import numpy as np
import pytest
from compare_fixtures import doc, lat, manifest, result

from guard.bench.regress import RegressConfig
from guard.compare import compare as C
from guard.compare.reports import to_html, to_markdown, write_reports
from guard.errors import UsageError

CFG = RegressConfig(n_boot=300)


def test_aa_pair_passes_and_exit_0():
    rng = np.random.default_rng(1)
    base = doc(result("mlp", lat(rng)), result("cnn", lat(rng, ms=5)))
    head = doc(result("mlp", lat(rng)), result("cnn", lat(rng, ms=5)))
    cmp = C.compare_docs(base, head, CFG)
    assert [r["verdict"] for r in cmp["rows"]] == ["pass", "pass"]
    assert cmp["manifest_diff"] == {}
    assert C.exit_code(cmp) == 0
    C.validate_comparison(cmp, "x")


def test_slower_head_regresses_exit_1_with_contract_keys():
    rng = np.random.default_rng(2)
    base = doc(result("mlp", lat(rng)), result("cnn", lat(rng, ms=5)))
    head = doc(result("mlp", lat(rng, factor=1.15)), result("cnn", lat(rng, ms=5)))
    cmp = C.compare_docs(base, head, CFG)
    row = cmp["rows"][0]
    assert row["verdict"] == "regressed" and cmp["rows"][1]["verdict"] == "pass"
    for key in (
        "model",
        "backend",
        "target",
        "verdict",
        "ratio",
        "ci",
        "arena_bytes",
        "partitions",
        "numerics",
        "attribution",
    ):
        assert key in row
    assert 1.1 < row["ratio"] < 1.2 and row["ci"][0] > 1.0
    assert row["numerics"] == {
        "output_sha256_changed": False,
        "max_abs_err": [1e-6, 1e-6],
        "max_rel_err": [1e-5, 1e-5],
    }
    assert C.exit_code(cmp) == 1
    assert row["attribution"].startswith("p50 +1")


def test_inconclusive_fails_only_when_strict():
    rng = np.random.default_rng(3)
    base = doc(result("mlp", lat(rng, n=6)))
    head = doc(result("mlp", lat(rng, n=6)))
    cmp = C.compare_docs(base, head, CFG)
    assert cmp["rows"][0]["verdict"] == "inconclusive"
    assert C.exit_code(cmp) == 0 and C.exit_code(cmp, strict=True) == 1


def test_manifest_diff_excludes_host_and_run_stats_and_is_listed_first():
    rng = np.random.default_rng(4)
    b = result("mlp", lat(rng))
    h = result(
        "mlp",
        lat(rng),
        manifest=manifest(runtime__version="1.31.1", tuning_cache__hits=3, sha256="other"),
    )
    cmp = C.compare_docs(doc(b), doc(h), CFG)
    assert cmp["manifest_diff"] == {"runtime.version": ["1.32.0", "1.31.1"]}
    md = to_markdown(cmp)
    assert md.splitlines()[0] == "## Manifest diff"
    assert md.splitlines()[2] == "- `runtime.version`: 1.32.0 → 1.31.1"
    assert "Manifest diff" in to_html(cmp).split("<table>")[0]


def test_incompatible_host_is_refused_with_the_reason():
    rng = np.random.default_rng(5)
    b = result("mlp", lat(rng))
    h = result("mlp", lat(rng), manifest=manifest(host__threads=4))
    with pytest.raises(
        C.IncompatibleBaselineError, match="host.threads differs: baseline 1, head 4"
    ):
        C.compare_docs(doc(b), doc(h), CFG)
    assert issubclass(C.IncompatibleBaselineError, UsageError)


def test_aggregates_only_over_models_on_both_sides():
    rng = np.random.default_rng(6)
    base = doc(result("mlp", lat(rng)), result("old", lat(rng, factor=3)))
    head = doc(result("mlp", lat(rng, factor=1.2)), result("new", lat(rng, factor=0.1)))
    s = C.compare_docs(base, head, CFG)["summary"]
    assert (
        s["compared"] == 1
        and s["only_base"][0].startswith("old/")
        and s["only_head"][0].startswith("new/")
    )
    assert 1.15 < s["geomean_ratio"] < 1.25


def test_attribution_names_partitions_and_unsupported_op():
    rng = np.random.default_rng(7)
    b = result("bert", lat(rng))
    h = result(
        "bert",
        lat(rng, factor=1.14),
        partitions={
            "count": 3,
            "delegated_nodes": 8,
            "fallback_nodes": 2,
            "details": [{"provider": "CPU", "unsupported": ["Erf"]}],
        },
    )
    row = C.compare_docs(doc(b), doc(h), CFG)["rows"][0]
    assert row["partitions"] == [1, 3]
    assert row["attribution"].startswith("p50 +1")
    assert "partitions 1 → 3, Erf unsupported on the delegate" in row["attribution"]


def test_attribution_tuning_ops_numerics():
    rng = np.random.default_rng(8)
    b = result("cnn", lat(rng))
    m = manifest(tuning_cache__hits=6, tuning_cache__misses=4)
    h = result(
        "cnn",
        lat(rng, factor=1.3),
        manifest=m,
        graph={"ops_after": {"Conv": 10, "Relu": 10, "Transpose": 12}},
        numerics={"max_abs_err": 1e-6, "max_abs_err_": 0, "output_sha256": "o1"},
    )
    row = C.compare_docs(doc(b), doc(h), CFG)["rows"][0]
    assert row["tuning_hit_rate"] == [1.0, 0.6]
    assert "tuning hit rate 100% → 60%" in row["attribution"]
    assert "Transpose +12" in row["attribution"]
    assert row["numerics"]["output_sha256_changed"] is True


def test_missing_samples_is_inconclusive_not_a_crash():
    rng = np.random.default_rng(9)
    b = result("mlp", lat(rng))
    h = result("mlp", lat(rng))
    del h["samples_ms"]
    row = C.compare_docs(doc(b), doc(h), CFG)["rows"][0]
    assert row["verdict"] == "inconclusive" and "no raw samples_ms" in row["reason"]


def test_calibrated_noise_raises_row_threshold():
    rng = np.random.default_rng(10)
    b, h = result("mlp", lat(rng, n=400)), result("mlp", lat(rng, n=400, factor=1.06))
    key = "mlp/onnxruntime/llvm -mcpu=sapphirerapids"
    assert C.compare_docs(doc(b), doc(h), CFG)["rows"][0]["verdict"] == "regressed"
    cmp = C.compare_docs(doc(b), doc(h), CFG, noise={key: 10.0})
    assert cmp["rows"][0]["verdict"] != "regressed"
    assert cmp["rows"][0]["stats"]["threshold_pct"] == 10.0


def test_load_results_errors_name_the_file(tmp_path):
    with pytest.raises(UsageError, match="no such results file"):
        C.load_results(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema_version": 2, "results": []}))
    with pytest.raises(UsageError, match=r"bad\.json: schema_version is 2"):
        C.load_results(bad)
    bad.write_text("{not json")
    with pytest.raises(UsageError, match="not a readable JSON"):
        C.load_results(bad)
    bad.write_text(json.dumps({"schema_version": 1, "results": [{"model": "x"}]}))
    with pytest.raises(UsageError, match=r"results\[0\] needs model"):
        C.load_results(bad)


def test_write_reports_json_has_no_nan(tmp_path):
    rng = np.random.default_rng(11)
    b = result("mlp", lat(rng, n=3))
    cmp = C.compare_docs(doc(b), doc(result("mlp", lat(rng, n=3))), CFG)
    paths = write_reports(
        cmp, json_path=tmp_path / "c.json", md_path=tmp_path / "c.md", html_path=tmp_path / "c.html"
    )
    text = paths[0].read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text)["schema_version"] == 1
    assert paths[2].read_text().startswith("<!doctype html>")


def test_contention_is_carried_and_named_in_attribution():
    rng = np.random.default_rng(12)
    b = result("mlp", lat(rng), measurement={"contention": 0.05})
    h = result("mlp", lat(rng, factor=1.2), measurement={"contention": 0.9})
    row = C.compare_docs(doc(b), doc(h), CFG)["rows"][0]
    assert row["contention"] == [0.05, 0.9]
    assert row["attribution"].endswith(": head timed under 90% contention")


def test_pass_rows_only_name_structural_changes():
    rng = np.random.default_rng(13)
    m = manifest(runtime__version="1.31.1")
    busy = {"contention": 1.0}
    b = result("mlp", lat(rng), measurement=busy)
    h = result("mlp", lat(rng), manifest=m, measurement=busy)
    row = C.compare_docs(doc(b), doc(h), CFG)["rows"][0]
    assert row["verdict"] == "pass" and row["attribution"] is None
    h2 = result("mlp", lat(rng), manifest=m, measurement=busy,
                partitions={"count": 2, "delegated_nodes": 9, "fallback_nodes": 1})  # fmt: skip
    row = C.compare_docs(doc(b), doc(h2), CFG)["rows"][0]
    assert row["verdict"] == "pass" and row["attribution"].endswith(": partitions 1 → 2")
    slow = result("mlp", lat(rng, factor=1.3), measurement={"contention": 0.8})
    row = C.compare_docs(doc(b), doc(slow), CFG)["rows"][0]
    assert "both sides timed under 100%/80% contention" in row["attribution"]


def test_suite_regress_pct_from_heads_checks():
    rng = np.random.default_rng(14)
    b = result("mlp", lat(rng, n=400))
    check = {"name": "latency.regress", "status": "skip", "value": None, "bound": 10, "message": ""}
    h = result("mlp", lat(rng, n=400, factor=1.06), checks=[check])
    row = C.compare_docs(doc(b), doc(h), CFG)["rows"][0]
    assert row["stats"]["threshold_pct"] == 10.0 and row["verdict"] != "regressed"
    row = C.compare_docs(doc(b), doc(h), CFG, suite_thresholds=False)["rows"][0]
    assert row["stats"]["threshold_pct"] == 3.0 and row["verdict"] == "regressed"
