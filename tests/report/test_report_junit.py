"""write_junit: structure checked by parsing the XML back."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema

from guard.core.errors import UsageError
from guard.report import write_junit

XSD = xmlschema.XMLSchema(Path(__file__).with_name("junit.xsd"))
WALL_S = [2.4, 6.0, 12.5, 0.7]  # each case's build + load + numerics + measurement


def _parse(doc, tmp_path):
    return ET.parse(write_junit(doc, tmp_path / "junit.xml")).getroot()


@pytest.fixture
def timed(doc):
    for r, s in zip(doc["results"], WALL_S, strict=True):
        r["duration_s"] = s
    return doc


def test_validates_against_a_strict_junit_schema(timed, tmp_path):
    path = write_junit(timed, tmp_path / "junit.xml")
    XSD.validate(str(path))  # raises with the offending element and why


def test_schema_rejects_what_reporters_choke_on(tmp_path):
    bad = tmp_path / "bad.xml"
    bad.write_text(
        '<testsuites tests="1" failures="0" errors="0" skipped="0" time="1">'
        '<testsuite name="s" tests="1" failures="0" errors="0" skipped="0" time="-1">'
        '<testcase name="x" time="1"/></testsuite></testsuites>'
    )
    assert not XSD.is_valid(str(bad))  # negative time, testcase without classname
    root_skipped = tmp_path / "root.xml"
    root_skipped.write_text('<testsuites tests="0" failures="0" errors="0" skipped="0" time="0"/>')
    assert not XSD.is_valid(str(root_skipped))  # guard wrote this before; strict schemas refuse it


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
    # One classname per suite.model.backend: reporters group the checks of one case.
    assert [c.get("classname") for c in cases][:3] == ["smoke.mlp.onnxruntime"] * 3
    assert {c.get("classname") for c in cases} == {
        "smoke.mlp.onnxruntime",
        "smoke.mlp.bundled",
        "smoke.resnet18.onnxruntime",
        "smoke.resnet18.bundled",
    }
    names = [c.get("name") for c in cases]
    assert names[:3] == ["latency", "tolerance", "partitions"]
    assert ("smoke.resnet18.bundled", "run") in {(c.get("classname"), c.get("name")) for c in cases}
    pairs = [(c.get("classname"), c.get("name")) for c in cases]
    assert len(set(pairs)) == len(pairs)


def test_failure_carries_the_check_message(doc, tmp_path):
    suite = _parse(doc, tmp_path).find("testsuite")
    case = next(
        c
        for c in suite.findall("testcase")
        if c.get("name") == "latency" and c.get("classname") == "smoke.mlp.bundled"
    )
    failure = case.find("failure")
    assert failure is not None
    assert failure.get("message") == doc["results"][1]["checks"][0]["message"]
    assert "bound: 1.5" in failure.text


def test_error_result_carries_its_error(doc, tmp_path):
    suite = _parse(doc, tmp_path).find("testsuite")
    case = next(
        c
        for c in suite.findall("testcase")
        if c.get("name") == "run" and c.get("classname") == "smoke.resnet18.bundled"
    )
    assert case.find("error").get("message") == doc["results"][3]["error"]


def test_errored_check_is_an_error_not_a_second_run_case(doc, tmp_path):
    r = doc["results"][3]
    r["checks"] = [{"name": "build", "status": "error", "message": "compiler crashed"}]
    suite = _parse(doc, tmp_path).find("testsuite")
    names = [c.get("name") for c in suite.findall("testcase")]
    assert "build" in names and names.count("run") == 0
    assert suite.get("errors") == "1"


def test_time_is_each_cases_wall_time(timed, tmp_path):
    """Not the p50 latency (CI showed 0.4 ms for a case that took seconds)."""
    suite = _parse(timed, tmp_path).find("testsuite")
    per_case: dict[str, float] = {}
    for c in suite.findall("testcase"):
        per_case[c.get("classname")] = per_case.get(c.get("classname"), 0) + float(c.get("time"))
    assert per_case == pytest.approx(
        {
            "smoke.mlp.onnxruntime": 2.4,
            "smoke.mlp.bundled": 6.0,
            "smoke.resnet18.onnxruntime": 12.5,
            "smoke.resnet18.bundled": 0.7,
        },
        abs=1e-5,
    )
    assert float(suite.get("time")) == pytest.approx(sum(WALL_S), abs=1e-5)


def test_other_targets_name_their_testcases(doc, tmp_path):
    doc["results"][0]["target"] = "llvm -mtriple=aarch64-linux-gnu -mattr=+neon"
    names = [c.get("name") for c in _parse(doc, tmp_path).find("testsuite").findall("testcase")]
    assert names[0] == "latency [llvm -mtriple=aarch64-linux-gnu -mattr=+neon]"


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
    assert [(c.get("classname"), c.get("name")) for c in cases] == [("s.?.?", "run")]
    assert cases[0].find("error").get("message") == "error (no message)"


def test_missing_parent(doc, tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        write_junit(doc, tmp_path / "missing" / "junit.xml")
