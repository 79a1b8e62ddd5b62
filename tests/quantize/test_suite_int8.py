"""The suite's quantize: block, the int8 row's check, manifest pins, int8 agreement, doctor."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from guard.checks.evaluate import quantization_check
from guard.compare.crossarch import encode_outputs
from guard.compare.int8_outputs import agreement, int8_rows, line
from guard.core.errors import SuiteError
from guard.doctor import diagnose
from guard.manifest.pins import build_manifest
from guard.results.documents import Int8Row, ResultsDocument
from guard.results.result import Quantization, Result
from guard.run.int8 import add_int8_agreement
from guard.suite import load_suite
from guard.suite.check_blocks import CheckBlocks, Int8Agreement, QuantizationBounds, Tolerance

SUITE = """
schema_version: 1
suite: q
defaults: {{backends: [onnxruntime]}}
models:
  - name: m
    source: zoo:digits
    targets: [host, "llvm -mcpu=x86-64-v3"]
    {quantize}
    checks:
      {checks}
"""


def _suite(tmp_path, quantize="quantize: {calibration: cal.npz}", checks="{}"):
    np.savez(tmp_path / "cal.npz", x=np.zeros((4, 64), np.float32))
    p = tmp_path / "s.yaml"
    p.write_text(SUITE.format(quantize=quantize, checks=checks))
    return load_suite(p)


def test_the_block_adds_an_int8_entry_beside_the_fp32_one(tmp_path):
    s = _suite(
        tmp_path,
        "quantize: {calibration: cal.npz, method: entropy, keep_fp32: [Gemm]}",
        'quantization: {min_top1_agreement: 0.99, min_sqnr_db: 20}\n      int8_agreement: {across: [host, "llvm -mcpu=x86-64-v3"]}',
    )
    names = [(e.name, e.target) for e in s.models]
    assert names == [
        ("m", "host"), ("m", "llvm -mcpu=x86-64-v3"),
        ("m.int8", "host"), ("m.int8", "llvm -mcpu=x86-64-v3"),
    ]  # fmt: skip
    fp32, int8 = s.models[0], s.models[2]
    assert fp32.quantize is None and int8.quantize is not None
    assert int8.quantize.method == "entropy" and int8.quantize.keep_fp32 == ("Gemm",)
    assert int8.quantize.calibration == str((tmp_path / "cal.npz").resolve())
    assert int8.checks.quantization == QuantizationBounds(min_top1_agreement=0.99, min_sqnr_db=20.0)
    assert "(m.int8)" in int8.where


@pytest.mark.parametrize(
    ("quantize", "checks", "words"),
    [
        ("quantize: {method: minmax}", "{}", "quantize: needs 'calibration'"),
        ("quantize: {calibration: nope.npz}", "{}", "nope.npz does not exist"),
        ("quantize: {calibration: cal.npz, method: kl}", "{}", "quantize.method: expected one of"),
        ("quantize: {calibration: cal.npz, per_channel: 1}", "{}", "per_channel: is true or false"),
        ("quantize: {calibration: cal.npz, bits: 4}", "{}", "quantize.bits: unknown key"),
        ("quantize: {calibration: inputs}", "quantization: {min_top1_agreement: 2}", "fraction"),
        ("quantize: {calibration: inputs}", "int8_agreement: {across: [host]}", "two or more"),
        ("quantize: {calibration: inputs}", "int8_agreement: {across: [host, aarch64]}",
         "target 'aarch64' is not one of the model's targets"),
    ],
)  # fmt: skip
def test_bad_blocks_are_one_line_naming_the_key(tmp_path, quantize, checks, words):
    with pytest.raises(SuiteError) as e:
        _suite(tmp_path, quantize, checks)
    assert words in str(e.value) and "s.yaml" in str(e.value) and "\n" not in str(e.value)
    assert e.value.exit_code == 2


def _manifest(q=None):
    return build_manifest(
        compiler={"name": "c", "version": "1"},
        runtime={"name": "r", "version": "1"},
        target_raw="host",
        threads=1,
        model_path="m.onnx",
        model_opset=13,
        model_inputs={},
        tuning_cache=None,
        driver={"kernel": "k"},
        host={"arch": "x86_64", "cpu": "c", "cores": 2, "threads": 1},
        guard_info={"version": "0"},
        model_sha256="ab",
        quantization=q,
    )


def test_the_manifest_pins_the_profile_and_calibration_when_present():
    plain = _manifest()
    assert "quantization" not in plain
    a = _manifest({"profile_sha256": "p1", "calibration_sha256": "c1", "source_sha256": "ab"})
    b = _manifest({"profile_sha256": "p2", "calibration_sha256": "c2", "source_sha256": "ab"})
    assert a["quantization"]["profile_sha256"] == "p1"
    assert len({plain["sha256"], a["sha256"], b["sha256"]}) == 3
    from guard.manifest.diff import diff_manifests

    assert any("quantization" in str(k) for k in diff_manifests(a, b))


BLOCK = {
    "sqnr_db": 8.0,
    "top1_agreement": 0.9,
    "samples": 16,
    "calibration_sha256": "c2",
    "profile_sha256": "p2",
    "worst_tensors": [
        {"tensor": "h_relu", "node": "relu", "sqnr_db": 3.1},
        {"tensor": "logits", "node": "fc2/Gemm", "sqnr_db": 5.0},
    ],
}


def test_the_quantization_check_names_the_worst_tensors_when_it_fails():
    c = quantization_check(QuantizationBounds(0.99, 20.0), Quantization.of(BLOCK))
    assert c.status == "fail" and "top-1 agreement 0.900 < 0.99" in c.message
    assert "output SQNR 8.0 dB < 20" in c.message
    assert "worst tensors: h_relu (node relu, 3.1 dB), logits" in c.message
    ok = quantization_check(QuantizationBounds(0.8, 5.0), Quantization.of(BLOCK))
    assert ok.status == "pass" and "worst" not in ok.message
    drop = quantization_check(QuantizationBounds(max_top1_drop=0.01), Quantization.of(BLOCK))
    assert drop.status == "pass" and "no accuracy dataset" in drop.message


def _result(target, outs, backend="bundled", model="m.int8"):
    from guard.golden.store import outputs_sha256

    arrays = [np.asarray(o, np.float32) for o in outs]
    return {
        "model": model,
        "backend": backend,
        "target": target,
        "verdict": "pass",
        "checks": [
            {"name": "tolerance", "status": "pass", "value": None, "bound": None, "message": ""}
        ],  # fmt: skip
        "numerics": {
            "output_sha256": outputs_sha256(arrays),
            "outputs": encode_outputs(arrays, ["y", "z"][: len(arrays)]),
        },
        "quantization": dict(BLOCK),
    }


def test_int8_outputs_identical_or_differ_with_the_first_differing_tensor():
    a = _result("host", [[1.0, 2.0], [3.0]])
    same = _result("llvm -mcpu=x86-64-v3", [[1.0, 2.0], [3.0]])
    other = _result("llvm -mcpu=x86-64-v3", [[1.0, 2.0], [3.5]])
    assert agreement(Result.from_json(a), Result.from_json(same)) == ("identical", None)
    assert agreement(Result.from_json(a), Result.from_json(other)) == ("differ", "z")
    rows = int8_rows(_doc(a), _doc(other))
    assert rows[0]["outputs"] == "differ" and rows[0]["first_differing"] == "z"
    assert "int8 outputs differ (host vs llvm -mcpu=x86-64-v3): first differing tensor z" in line(
        Int8Row.from_json(rows[0])
    )
    fp32 = {**a, "model": "m"}
    del fp32["quantization"]
    assert int8_rows(_doc(fp32), _doc(fp32)) == []


def _doc(*results: dict) -> ResultsDocument:
    return ResultsDocument.from_json({"results": list(results)})


def test_the_int8_agreement_check_fails_on_any_difference():
    from guard.suite.entries import ModelEntry
    from guard.suite.quantize import QuantizeSpec

    across = ["host", "llvm -mcpu=x86-64-v3"]
    entry = ModelEntry(
        "m.int8", "zoo:digits", {}, ("bundled",), "host", 1, {},
        CheckBlocks(int8_agreement=Int8Agreement(tuple(across))), quantize=QuantizeSpec("inputs"),
    )  # fmt: skip
    results = [_result("host", [[1.0], [2.0]]), _result(across[1], [[1.0], [2.0]])]
    add_int8_agreement(results, [entry])
    assert [r["checks"][-1]["status"] for r in results] == ["pass", "pass"]
    results = [_result("host", [[1.0], [2.0]]), _result(across[1], [[1.0], [2.5]])]
    add_int8_agreement(results, [entry])
    assert results[1]["verdict"] == "fail"
    assert "first differing tensor z" in results[1]["checks"][-1]["message"]


def test_doctor_step_12_names_the_tensor_on_an_int8_row_only():
    head = _result("host", [[1.0]])
    head["checks"].append({"name": "quantization", "status": "fail", "value": 8.0,
                           "bound": 20.0, "message": "..."})  # fmt: skip
    base = _result("host", [[1.0]])
    base["quantization"] = {**BLOCK, "calibration_sha256": "c1", "sqnr_db": 30.0}
    doc = diagnose(
        ResultsDocument.from_json({"suite": "q", "results": [head]}),
        ResultsDocument.from_json({"suite": "q", "results": [base]}),
    )
    steps = doc["cases"][0]["findings"]
    assert [f["step"] for f in steps][-1] == 12
    f12 = steps[-1]
    assert f12["status"] == "cause_found" and "h_relu (node relu)" in f12["summary"]
    assert "calibration set changed" in f12["summary"] and "keep_fp32" in f12["action"]
    fp32 = {**head, "model": "m"}
    del fp32["quantization"]
    doc = diagnose(ResultsDocument.from_json({"suite": "q", "results": [fp32]}))
    assert [f["step"] for f in doc["cases"][0]["findings"]] == list(range(1, 12))


def test_the_dashboard_panel_pairs_each_int8_series_with_its_fp32_twin():
    import datetime as dt

    from guard.report import dashboard as D
    from guard.report.dashboard_int8 import int8_panel
    from guard.report.dashboard_series import group_series

    def row(model, t, **metrics):
        r = {"run_id": f"{model}{t}", "start_time": dt.datetime.fromisoformat(t).replace(tzinfo=dt.UTC),
             "tags.guard.model": model, "tags.guard.backend": "bundled",
             "tags.guard.target": "host", "tags.guard.arch": "x86_64",
             "tags.guard.git.commit": "c" * 40, "tags.guard.verdict": "pass"}  # fmt: skip
        r.update({f"metrics.{k}": v for k, v in metrics.items()})
        return r

    rows = [
        row("m", "2026-01-01", **{"latency_ms.p50": 4.0}),
        row(
            "m.int8",
            "2026-01-01",
            **{
                "latency_ms.p50": 8.0,
                "quantization.top1_agreement": 0.99,
                "quantization.sqnr_db": 31.5,
            },
        ),  # fmt: skip
        row("other", "2026-01-01", **{"latency_ms.p50": 1.0}),
    ]
    panel = int8_panel(group_series(rows))
    assert len(panel) == 1
    p = panel[0]
    assert (p["model"], p["fp32_p50"], p["int8_p50"], p["ratio"]) == ("m", 4.0, 8.0, 2.0)
    assert (p["top1_agreement"], p["sqnr_db"]) == (0.99, 31.5)
    html = D.render({"suite": "q", "uri": "sqlite:///x", "experiment": "guard/q", "generated": "",
                     "series": [], "regressions": [], "notes": [], "invocations": [],
                     "state": "ok", "backends": [], "targets": [], "archs": [],
                     "int8": panel})  # fmt: skip
    assert "int8 beside fp32" in html and "2.00x" in html and "0.990" in html


def test_the_track_metrics_and_the_report_say_when_int8_outputs_moved():
    from guard.compare.int8_outputs import summary_line
    from guard.results.result import Result
    from guard.track.records import result_metrics

    m = result_metrics(Result.from_json(_result("host", [[1.0]])))
    assert m["quantization.top1_agreement"] == 0.9 and m["quantization.sqnr_db"] == 8.0
    same = Int8Row(model="m.int8", backend="b", outputs="identical")
    moved = replace(same, outputs="differ", first_differing="y")
    assert (
        summary_line([same]) == "int8 outputs unchanged: identical bytes on all 1 int8 result(s)."
    )
    assert summary_line([same, moved]) == (
        "int8 outputs moved on 1 of 2 int8 result(s) (first: m.int8 [b], tensor y)."
    )


def test_the_int8_row_is_judged_on_the_suites_inputs_and_fresh_draws(tmp_path):
    from guard.run.int8 import EVAL_SEEDS, _eval_feeds
    from guard.suite.entries import ModelEntry
    from guard.suite.model import bind, load_model, make_inputs

    from . import _fixtures as F

    path = F.save(F.convnet(), tmp_path)
    entry = ModelEntry("m.int8", str(path), {}, ("bundled",), "host", 1, {}, {})
    spec = bind(load_model(path), path, {}, "here")
    feeds = make_inputs(spec, {})
    evals = _eval_feeds(entry, spec, feeds)
    assert len(evals) == 1 + EVAL_SEEDS and evals[0] is feeds
    assert len({e["x"].tobytes() for e in evals}) == len(evals)  # every draw is new


def test_the_suite_schema_knows_the_quantize_block_and_its_checks():
    import jsonschema

    from guard.suite.schema import suite_schema

    doc = {
        "schema_version": 1,
        "suite": "q",
        "models": [
            {
                "name": "m",
                "source": "m.onnx",
                "targets": ["host", "llvm -mcpu=x86-64-v3"],
                "quantize": {"calibration": "cal.npz", "method": "entropy", "keep_fp32": ["Gemm"]},
                "checks": {
                    "quantization": {"min_top1_agreement": 0.99, "min_sqnr_db": 20},
                    "int8_agreement": {"across": ["host", "llvm -mcpu=x86-64-v3"]},
                },
            }
        ],
    }
    v = jsonschema.Draft202012Validator(suite_schema())
    assert not list(v.iter_errors(doc))
    doc["models"][0]["quantize"] = {"method": "kl"}
    assert len(list(v.iter_errors(doc))) >= 2  # no calibration, unknown method


def test_the_int8_row_gets_a_quantisation_step_tolerance_unless_the_suite_sets_one(tmp_path):
    s = _suite(tmp_path, "quantize: {calibration: inputs}")
    fp32, int8 = s.models[0], s.models[2]
    assert fp32.checks.tolerance is None and int8.checks.tolerance == Tolerance(0.01, 0.01)
    s = _suite(tmp_path, "quantize: {calibration: inputs}", "tolerance: {rtol: 0.001}")
    assert s.models[2].checks.tolerance == Tolerance(rtol=0.001)
