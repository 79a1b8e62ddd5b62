"""compare_docs on synthetic results documents: verdicts, contract, refusal, attribution."""

from __future__ import annotations

import json

import numpy as np
import pytest
from compare_fixtures import doc, lat, manifest, result

from guard.compare import compare as C
from guard.compare import reports
from guard.compare.reports import write_reports
from guard.core.errors import UsageError
from guard.results.documents import ComparisonDocument, ResultsDocument
from guard.results.load import load_results
from guard.stats.regress import RegressConfig

# These results are one process's samples cut into rounds: no run offset to allow for.
CFG = RegressConfig(n_boot=300, run_noise_pct=0.0)


def compare_docs(base: dict, head: dict, *args, **kwargs) -> dict:
    """compare_docs on two fixture documents, read as guard reads a results file."""
    typed = ResultsDocument.from_json(base), ResultsDocument.from_json(head)
    return C.compare_docs(*typed, *args, **kwargs)


def exit_code(cmp: dict, strict: bool = False) -> int:
    return C.exit_code(ComparisonDocument.from_json(cmp), strict=strict)


def to_markdown(cmp: dict) -> str:
    return reports.to_markdown(ComparisonDocument.from_json(cmp))


def to_html(cmp: dict) -> str:
    return reports.to_html(ComparisonDocument.from_json(cmp))


def wandering(rng, levels):
    """One process's result whose rounds sit at ``levels`` (x 2 ms), each round 400 tight
    iterations: a process-to-process offset that no iteration inside it can see."""
    rounds = [list(2.0 * lv * np.exp(rng.normal(0, 0.002, 400))) for lv in levels]
    r = result("mlp", np.concatenate(rounds))
    r["rounds"] = [{"samples_ms": x, "p50": float(np.median(x)), "n": len(x)} for x in rounds]
    return r


def test_aa_pair_passes_and_exit_0():
    rng = np.random.default_rng(1)
    base = doc(result("mlp", lat(rng)), result("cnn", lat(rng, ms=5)))
    head = doc(result("mlp", lat(rng)), result("cnn", lat(rng, ms=5)))
    cmp = compare_docs(base, head, CFG)
    assert [r["verdict"] for r in cmp["rows"]] == ["pass", "pass"]
    assert cmp["manifest_diff"] == {}
    assert exit_code(cmp) == 0
    C.validate_comparison(cmp, "x")


def test_slower_head_regresses_exit_1_with_contract_keys():
    rng = np.random.default_rng(2)
    base = doc(result("mlp", lat(rng)), result("cnn", lat(rng, ms=5)))
    head = doc(result("mlp", lat(rng, factor=1.15)), result("cnn", lat(rng, ms=5)))
    cmp = compare_docs(base, head, CFG)
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
    assert exit_code(cmp) == 1
    assert row["attribution"].startswith("p50 +1")


def test_inconclusive_fails_only_when_strict():
    rng = np.random.default_rng(3)
    base = doc(result("mlp", lat(rng, n=6)))
    head = doc(result("mlp", lat(rng, n=6)))
    cmp = compare_docs(base, head, CFG)
    assert cmp["rows"][0]["verdict"] == "inconclusive"
    assert exit_code(cmp) == 0 and exit_code(cmp, strict=True) == 1


def test_manifest_diff_excludes_host_and_run_stats_and_is_listed_first():
    rng = np.random.default_rng(4)
    b = result("mlp", lat(rng))
    h = result(
        "mlp",
        lat(rng),
        manifest=manifest(runtime__version="1.31.1", tuning_cache__hits=3, sha256="other"),
    )
    cmp = compare_docs(doc(b), doc(h), CFG)
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
        compare_docs(doc(b), doc(h), CFG)
    assert issubclass(C.IncompatibleBaselineError, UsageError)


def test_aggregates_only_over_models_on_both_sides():
    rng = np.random.default_rng(6)
    base = doc(result("mlp", lat(rng)), result("old", lat(rng, factor=3)))
    head = doc(result("mlp", lat(rng, factor=1.2)), result("new", lat(rng, factor=0.1)))
    s = compare_docs(base, head, CFG)["summary"]
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
    row = compare_docs(doc(b), doc(h), CFG)["rows"][0]
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
    row = compare_docs(doc(b), doc(h), CFG)["rows"][0]
    assert row["tuning_hit_rate"] == [1.0, 0.6]
    assert "tuning hit rate 100% → 60%" in row["attribution"]
    assert "Transpose +12" in row["attribution"]
    assert row["numerics"]["output_sha256_changed"] is True


def test_missing_samples_is_inconclusive_not_a_crash():
    rng = np.random.default_rng(9)
    b = result("mlp", lat(rng))
    h = result("mlp", lat(rng))
    del h["samples_ms"], h["rounds"]
    row = compare_docs(doc(b), doc(h), CFG)["rows"][0]
    assert row["verdict"] == "inconclusive" and "head result has no rounds" in row["reason"]


def test_a_results_file_without_rounds_gets_no_latency_verdict():
    """Older results files (one session, no rounds): a clear line, never a silent verdict,
    even when their pooled iterations would call a 15% difference p~0."""
    rng = np.random.default_rng(11)
    b, h = result("mlp", lat(rng)), result("mlp", lat(rng, factor=1.15))
    b.pop("rounds")
    cmp = compare_docs(doc(b), doc(h), CFG)
    (row,) = cmp["rows"]
    assert row["verdict"] == "inconclusive" and exit_code(cmp) == 0
    assert "base result has no rounds" in row["reason"] and "re-run" in row["reason"]
    assert row["ratio"] == pytest.approx(1.15, rel=0.05)  # the ratio is still shown
    assert cmp["summary"]["without_rounds"] == ["mlp/onnxruntime/llvm -mcpu=sapphirerapids"]


def test_rounds_not_iterations_are_the_units():
    """Two processes whose rounds wander by a few percent (a process-to-process offset),
    each round with thousands of tight iterations: pooled, the iterations would call the
    +4% significant; the rounds see an offset they cannot tell from noise."""
    rng = np.random.default_rng(12)
    base_levels = [1.00, 1.05, 0.97, 1.04, 0.99]
    head_levels = [1.06, 1.01, 1.08, 1.03, 1.07]

    b, h = wandering(rng, base_levels), wandering(rng, head_levels)
    (row,) = compare_docs(doc(b), doc(h), CFG)["rows"]
    assert row["verdict"] == "inconclusive" and row["stats"]["method"] == "welch-rounds"
    assert row["stats"]["n_base"] == row["stats"]["n_head"] == 5
    assert "could detect a slowdown of" in row["reason"]


def test_contention_difference_makes_a_small_move_inconclusive_not_a_big_one():
    rng = np.random.default_rng(13)

    def pair(factor):
        b, h = result("mlp", lat(rng, n=400)), result("mlp", lat(rng, n=400, factor=factor))
        for rd in b["rounds"]:
            rd["contention"] = 0.0
        for rd in h["rounds"]:
            rd["contention"] = 1.0
        return compare_docs(doc(b), doc(h), CFG)["rows"][0]

    row = pair(1.10)
    assert row["verdict"] == "inconclusive" and "contention differs" in row["reason"]
    assert "would be regressed" in row["reason"]
    row = pair(2.0)  # a co-tenant moves latency ~28%, not 2x
    assert row["verdict"] == "regressed" and "holds with contention differs" in row["reason"]


def test_a_preempted_side_is_inconclusive_with_the_reason():
    rng = np.random.default_rng(14)
    b, h = result("mlp", lat(rng, n=400)), result("mlp", lat(rng, n=400, factor=1.2))
    h["measurement"] = {"cpu_share": 0.6}
    (row,) = compare_docs(doc(b), doc(h), CFG)["rows"]
    assert row["verdict"] == "inconclusive" and "head was preempted" in row["reason"]


def test_preemption_in_few_calls_keeps_the_verdict():
    rng = np.random.default_rng(17)
    b, h = result("mlp", lat(rng, n=400)), result("mlp", lat(rng, n=400, factor=1.2))
    h["measurement"] = {"cpu_share": 0.1, "preempted_fraction": 0.02}
    b["measurement"] = {"cpu_share": 0.1, "preempted_fraction": 0.01}
    (row,) = compare_docs(doc(b), doc(h), CFG)["rows"]
    assert row["verdict"] == "regressed", row["reason"]


def test_a_preempted_one_thread_side_is_judged_on_cpu_time_per_call():
    """Head waited for a core (wall +50%); its CPU time per call shows the real +10%."""
    rng = np.random.default_rng(18)

    def side(wall_factor, cpu_factor, threads=1):
        r = result("mlp", lat(rng, n=400, factor=wall_factor))
        r["manifest"]["host"]["threads"] = threads
        for rd in r["rounds"]:
            rd["cpu_ms_per_call"] = 2.0 * cpu_factor * float(np.exp(rng.normal(0, 0.01)))
        return r

    b, h = side(1.0, 1.0), side(1.5, 1.10)
    h["measurement"] = {"cpu_share": 0.6}
    (row,) = compare_docs(doc(b), doc(h), CFG)["rows"]
    assert row["verdict"] == "regressed" and row["stats"]["method"] == "welch-rounds-cpu"
    assert "judged on CPU time per call (head was preempted" in row["reason"]
    assert row["ratio"] == pytest.approx(1.10, rel=0.03)
    # two threads: CPU time sums the threads', no stand-in for latency: inconclusive
    b2, h2 = side(1.0, 1.0, threads=2), side(1.5, 1.10, threads=2)
    h2["measurement"] = {"cpu_share": 0.6}
    (row2,) = compare_docs(doc(b2), doc(h2), CFG)["rows"]
    assert row2["verdict"] == "inconclusive" and "head was preempted" in row2["reason"]


def test_another_suite_is_refused_with_a_clear_line():
    rng = np.random.default_rng(15)
    with pytest.raises(UsageError, match="suite 'smoke'.*suite 'default'"):
        compare_docs(
            doc(result("mlp", lat(rng))), doc(result("mlp", lat(rng)), suite="default"), CFG
        )


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda r: r.update(samples_ms=[]), "results[0].samples_ms: must be a non-empty list"),
        (
            lambda r: r["samples_ms"].__setitem__(3, float("inf")),
            "results[0].samples_ms[3]: inf is not a finite positive",
        ),
        (lambda r: r["rounds"][2].update(samples_ms=[]), "results[0].rounds[2].samples_ms"),
        (lambda r: r["rounds"][0].update(p50=float("nan")), "results[0].rounds[0].p50"),
        (lambda r: r["rounds"][0].update(p50=-1.0), "results[0].rounds[0].p50"),
        (lambda r: r.update(rounds=[]), "results[0].rounds: must be a non-empty list"),
        (
            lambda r: r["rounds"][1].update(cpu_ms_per_call=float("nan")),
            "results[0].rounds[1].cpu_ms_per_call",
        ),
        (lambda r: r["rounds"][4].update(host_ms=0), "results[0].rounds[4].host_ms"),
        (lambda r: r["rounds"][3].update(simd_ms="fast"), "results[0].rounds[3].simd_ms"),
    ],
)
def test_hand_edited_samples_are_refused_naming_the_field(tmp_path, edit, field):
    rng = np.random.default_rng(16)
    d = doc(result("mlp", lat(rng)))
    edit(d["results"][0])
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(d))  # json writes inf/nan as Infinity/NaN, as a hand edit might
    with pytest.raises(UsageError) as e:
        load_results(path)
    assert field in str(e.value) and str(path) in str(e.value)
    assert e.value.exit_code == 2


def test_error_results_owe_no_samples(tmp_path):
    d = doc(
        {
            "model": "m",
            "backend": "onnxruntime",
            "target": "host",
            "verdict": "error",
            "error": "x",
            "latency_ms": None,
            "samples_ms": [],
            "rounds": None,
        }
    )
    path = tmp_path / "r.json"
    path.write_text(json.dumps(d))
    assert load_results(path)["results"][0]["verdict"] == "error"


def test_calibrated_noise_raises_row_threshold():
    rng = np.random.default_rng(10)
    b, h = result("mlp", lat(rng, n=400)), result("mlp", lat(rng, n=400, factor=1.06))
    key = "mlp/onnxruntime/llvm -mcpu=sapphirerapids"
    assert compare_docs(doc(b), doc(h), CFG)["rows"][0]["verdict"] == "regressed"
    cmp = compare_docs(doc(b), doc(h), CFG, noise={key: 10.0})
    assert cmp["rows"][0]["verdict"] != "regressed"
    assert cmp["rows"][0]["stats"]["threshold_pct"] == 10.0


def test_load_results_errors_name_the_file(tmp_path):
    with pytest.raises(UsageError, match="nope.json: results file not found"):
        load_results(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema_version": 2, "results": []}))
    with pytest.raises(UsageError, match=r"bad\.json: schema_version: unsupported version 2"):
        load_results(bad)
    bad.write_text("{not json")
    with pytest.raises(UsageError, match=r"bad\.json: not valid JSON \(line 1"):
        load_results(bad)
    bad.write_text(json.dumps({"schema_version": 1, "results": [{"model": "x"}]}))
    with pytest.raises(UsageError, match=r"bad\.json: results\[0\]: needs model"):
        load_results(bad)


def test_write_reports_json_has_no_nan(tmp_path):
    rng = np.random.default_rng(11)
    b = result("mlp", lat(rng, n=3))
    cmp = compare_docs(doc(b), doc(result("mlp", lat(rng, n=3))), CFG)
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
    row = compare_docs(doc(b), doc(h), CFG)["rows"][0]
    assert row["contention"] == [0.05, 0.9]
    assert row["attribution"].endswith(": head timed under 90% contention")


def test_pass_rows_only_name_structural_changes():
    rng = np.random.default_rng(13)
    m = manifest(runtime__version="1.31.1")
    busy = {"contention": 1.0}
    b = result("mlp", lat(rng), measurement=busy)
    h = result("mlp", lat(rng), manifest=m, measurement=busy)
    row = compare_docs(doc(b), doc(h), CFG)["rows"][0]
    assert row["verdict"] == "pass" and row["attribution"] is None
    h2 = result("mlp", lat(rng), manifest=m, measurement=busy,
                partitions={"count": 2, "delegated_nodes": 9, "fallback_nodes": 1})  # fmt: skip
    row = compare_docs(doc(b), doc(h2), CFG)["rows"][0]
    assert row["verdict"] == "pass" and row["attribution"].endswith(": partitions 1 → 2")
    slow = result("mlp", lat(rng, factor=1.3), measurement={"contention": 0.8})
    row = compare_docs(doc(b), doc(slow), CFG)["rows"][0]
    assert "both sides timed under 100%/80% contention" in row["attribution"]


def test_suite_regress_pct_from_heads_checks():
    rng = np.random.default_rng(14)
    b = result("mlp", lat(rng, n=400))
    check = {"name": "latency.regress", "status": "skip", "value": None, "bound": 10, "message": ""}
    h = result("mlp", lat(rng, n=400, factor=1.06), checks=[check])
    row = compare_docs(doc(b), doc(h), CFG)["rows"][0]
    assert row["stats"]["threshold_pct"] == 10.0 and row["verdict"] != "regressed"
    row = compare_docs(doc(b), doc(h), CFG, suite_thresholds=False)["rows"][0]
    assert row["stats"]["threshold_pct"] == 3.0 and row["verdict"] == "regressed"


def test_host_speed_is_allowed_for_only_between_the_same_probe():
    """Rounds that read a machine 15% slower during head, the model feeling half of it:
    adjusted when both files name the same probe, not when the probes differ (another
    interpreter runs the loop at another speed)."""
    rng = np.random.default_rng(14)

    def side(speed, probe):
        log_host = np.log(speed) + rng.normal(0, 0.08, 5)
        rounds = [list(2.0 * np.exp(0.5 * lh + rng.normal(0, 0.002, 200))) for lh in log_host]
        r = result("mlp", np.concatenate(rounds), measurement={"host_probe": probe})
        r["rounds"] = [
            {
                "samples_ms": x,
                "p50": float(np.median(x)),
                "n": len(x),
                "host_ms": 4 * np.exp(lh),
                "simd_ms": 0.8 * np.exp(rng.normal(0, 0.05)),
            }
            for x, lh in zip(rounds, log_host, strict=True)
        ]
        return r

    b, h = side(1.0, "loop; CPython 3.11.7"), side(1.15, "loop; CPython 3.11.7")
    (row,) = compare_docs(doc(b), doc(h), CFG)["rows"]
    assert row["stats"]["method"] == "ancova-rounds-host" and row["verdict"] != "regressed"
    assert "adjusted for host speed" in row["reason"]
    h["measurement"]["host_probe"] = "loop; CPython 3.12.1"
    (row,) = compare_docs(doc(b), doc(h), CFG)["rows"]
    assert row["stats"]["method"] == "welch-rounds"
    assert (
        "host speed not allowed for: the probes differ (base loop; CPython 3.11.7" in row["reason"]
    )


def test_rounds_that_cannot_resolve_the_threshold_point_to_the_interleaved_comparison():
    """Two runs whose levels wander: inconclusive, and the report says what would resolve
    it; a pair that resolves its threshold gets no such line."""
    rng = np.random.default_rng(12)

    cmp = compare_docs(
        doc(wandering(rng, [1.00, 1.05, 0.97, 1.04, 0.99])),
        doc(wandering(rng, [1.06, 1.01, 1.08, 1.03, 1.07])),
        CFG,
    )
    (row,) = cmp["rows"]
    assert row["verdict"] == "inconclusive"
    md = to_markdown(cmp)
    mde = row["stats"]["mde_pct"]
    assert f"1 inconclusive row(s) could only have flagged a slowdown of {mde:.1f}% or more" in md
    assert "`guard ab SUITE --base-ref BASE`" in md
    steady = [1.0, 1.001, 0.999, 1.0, 1.0]
    quiet = compare_docs(doc(wandering(rng, steady)), doc(wandering(rng, steady)), CFG)
    assert quiet["rows"][0]["verdict"] == "pass"
    assert "could only have flagged" not in to_markdown(quiet)
