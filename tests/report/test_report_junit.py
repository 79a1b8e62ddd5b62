"""write_junit: structure checked by parsing the XML back."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from guard.errors import UsageError
from guard.report import write_junit


def _parse(doc, tmp_path):
    return ET.parse(write_junit(doc, tmp_path / "junit.xml")).getroot()


def test_counts_and_names(doc, tmp_path):
    root = _parse(doc, tmp_path)
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert len(suites) == 1
    suite = suites[0]
    assert suite.get("name") == "smoke"
    cases = suite.findall("testcase")
    # 3 + 3 + 2 checks, plus one ".run" case for the result that errored before any check
    assert len(cases) == 9
    assert suite.get("tests") == root.get("tests") == "9"
    assert suite.get("failures") == "1" and len(suite.findall("testcase/failure")) == 1
    assert suite.get("errors") == "1" and len(suite.findall("testcase/error")) == 1
    assert suite.get("skipped") == "1" and len(suite.findall("testcase/skipped")) == 1
    assert {c.get("classname") for c in cases} == {"guard.smoke"}
    names = [c.get("name") for c in cases]
    assert names[:3] == [
        "mlp[onnxruntime].latency",
        "mlp[onnxruntime].tolerance",
        "mlp[onnxruntime].partitions",
    ]
    assert "resnet18[bundled].run" in names
    assert len(set(names)) == len(names)


def test_failure_carries_the_check_message(doc, tmp_path):
    suite = _parse(doc, tmp_path).find("testsuite")
    case = next(c for c in suite.findall("testcase") if c.get("name") == "mlp[bundled].latency")
    failure = case.find("failure")
    assert failure is not None
    assert failure.get("message") == doc["results"][1]["checks"][0]["message"]
    assert "bound: 1.5" in failure.text


def test_error_result_carries_its_error(doc, tmp_path):
    suite = _parse(doc, tmp_path).find("testsuite")
    case = next(c for c in suite.findall("testcase") if c.get("name") == "resnet18[bundled].run")
    assert case.find("error").get("message") == doc["results"][3]["error"]


def test_errored_check_is_an_error_not_a_second_run_case(doc, tmp_path):
    r = doc["results"][3]
    r["checks"] = [{"name": "build", "status": "error", "message": "compiler crashed"}]
    suite = _parse(doc, tmp_path).find("testsuite")
    names = [c.get("name") for c in suite.findall("testcase")]
    assert "resnet18[bundled].build" in names and "resnet18[bundled].run" not in names
    assert suite.get("errors") == "1"


def test_time_is_p50_for_latency_checks(doc, tmp_path):
    suite = _parse(doc, tmp_path).find("testsuite")
    times = {c.get("name"): float(c.get("time")) for c in suite.findall("testcase")}
    assert times["mlp[bundled].latency"] == pytest.approx(1.84e-3)
    assert times["resnet18[onnxruntime].latency"] == pytest.approx(21.3e-3)
    assert times["mlp[bundled].tolerance"] == 0.0
    assert times["resnet18[bundled].run"] == 0.0
    assert float(suite.get("time")) == pytest.approx(sum(times.values()))


def test_properties_and_timestamp(doc, tmp_path):
    suite = _parse(doc, tmp_path).find("testsuite")
    props = {p.get("name"): p.get("value") for p in suite.findall("properties/property")}
    assert props["git.commit"] == doc["git"]["commit"]
    assert props["git.dirty"] == "True"
    assert suite.get("timestamp") == doc["started"]


def test_control_characters_do_not_break_the_xml(doc, tmp_path):
    doc["results"][1]["checks"][0]["message"] = "bad\x00byte\x1b[31m red"
    failure = _parse(doc, tmp_path).find("testsuite/testcase/failure")
    assert "byte" in failure.get("message")


def test_empty_and_minimal_documents(tmp_path):
    root = _parse({}, tmp_path)
    assert root.find("testsuite").get("tests") == "0"
    root = _parse({"suite": "s", "results": [{"verdict": "error"}, "junk", None]}, tmp_path)
    cases = root.findall("testsuite/testcase")
    assert [c.get("name") for c in cases] == ["?[?].run"]
    assert cases[0].find("error").get("message") == "error (no message)"


def test_missing_parent(doc, tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        write_junit(doc, tmp_path / "missing" / "junit.xml")
