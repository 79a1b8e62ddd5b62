"""guard.core.schema: one reader for versioned documents, one error naming the file and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guard.core.errors import EXIT_BAD_INPUT, SchemaError, SuiteError, UsageError
from guard.core.schema import (
    RESULTS_SCHEMA_VERSION,
    At,
    Schema,
    read_json,
    results_document,
    section,
    show,
)
from guard.manifest.store import ManifestError

DOC = Schema("widget", 2, "Re-create it with `guard widget`.")


def test_the_error_names_file_and_field_and_is_bad_input():
    err = At("r.json").key("results").item(0).key("rounds").fail("must be a list", "Re-run.")
    assert str(err) == "r.json: results[0].rounds: must be a list. Re-run."
    assert isinstance(err, UsageError) and err.exit_code == EXIT_BAD_INPUT
    assert (err.file, err.field) == ("r.json", "results[0].rounds")
    # Without a field the message is the file's alone.
    assert str(At("r.json").fail("broken")) == "r.json: broken"


def test_per_document_errors_are_schema_errors():
    assert issubclass(SuiteError, SchemaError) and issubclass(ManifestError, SchemaError)
    err = At("m.json", "host", ManifestError).fail("missing")
    assert isinstance(err, ManifestError) and str(err) == "m.json: host: missing"


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], r"^w\.json: not a JSON object \(a list\), so not a widget document\. Re-create"),
        ({}, r"^w\.json: schema_version: missing \(this guard reads widget schema_version 2\)"),
        ({"schema_version": 1}, r"schema_version: unsupported version 1 \(this guard reads"),
        ({"schema_version": 3}, r"schema_version: unsupported version 3"),
        ({"schema_version": True}, r"schema_version: unsupported version True"),
        ({"schema_version": 2.0}, r"schema_version: unsupported version 2\.0"),
        ({"schema_version": "2"}, r"schema_version: unsupported version '2'"),
    ],
)
def test_check_refuses_other_versions_and_non_objects(doc, message):
    with pytest.raises(SchemaError, match=message) as err:
        DOC.check(doc, "w.json")
    assert "\n" not in str(err.value) and str(err.value).endswith("`guard widget`.")


def test_check_accepts_its_version_and_up_to_reads_older_ones():
    assert DOC.check({"schema_version": 2, "x": 1}, "w.json") == {"schema_version": 2, "x": 1}
    older = Schema("cache", 3, "Re-tune.", up_to=True)
    assert older.check_version({"schema_version": 1}, older.at("c.json")) == 1
    with pytest.raises(
        SchemaError, match=r"version 4 \(this guard reads cache schema_version 1 to 3"
    ):
        older.check({"schema_version": 4}, "c.json")
    with pytest.raises(SchemaError, match="unsupported version 0"):
        older.check({"schema_version": 0}, "c.json")


def test_read_json_failures_are_one_line_naming_the_file(tmp_path: Path):
    def refused(path: Path, message: str) -> None:
        with pytest.raises(SchemaError, match=message) as err:
            read_json(path, what="widget file", hint="Pass a widget.")
        text = str(err.value)
        assert text.startswith(f"{path}: ") and text.endswith("Pass a widget.")
        assert "\n" not in text

    refused(tmp_path / "none.json", "widget file not found")
    refused(tmp_path, "is a directory")
    (tmp_path / "bad.json").write_text('{"a": 1,\n')
    refused(tmp_path / "bad.json", r"not valid JSON \(line 2, column 1\)")
    (tmp_path / "latin.json").write_bytes(b'{"a": "\xff"}')
    refused(tmp_path / "latin.json", "widget file is not UTF-8 text")
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    refused(tmp_path / "deep.json", "nested too deeply")
    (tmp_path / "big.json").write_text(json.dumps({"a": "x" * 100}))
    with pytest.raises(SchemaError, match="over guard's limit of 10 bytes"):
        read_json(tmp_path / "big.json", what="widget file", limit=10)


def test_load_reads_and_checks(tmp_path: Path):
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"schema_version": 2}))
    assert DOC.load(path) == {"schema_version": 2}
    path.write_text(json.dumps({"schema_version": 9}))
    with pytest.raises(SchemaError, match=rf"^{path}: schema_version: unsupported version 9"):
        DOC.load(path)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            {"schema_version": RESULTS_SCHEMA_VERSION, "suite": "s"},
            r"^r\.json: results: expected a",
        ),
        (
            {"schema_version": 1, "suite": "s", "results": {}},
            r"results: expected a list of objects, got an",
        ),
        (
            {"schema_version": 1, "suite": "s", "results": [{}, 3]},
            r"^r\.json: results\[1\]: expected an",
        ),
        ({"schema_version": 1, "results": [], "suite": ""}, r"suite: expected a non-empty name"),
        ({"schema_version": 2, "results": []}, r"schema_version: unsupported version 2"),
    ],
)
def test_results_document_frame(doc, message):
    with pytest.raises(SchemaError, match=message):
        results_document(doc, "r.json", hint="Re-run.", require_suite=True)


def test_results_document_passes_a_valid_frame():
    doc = {"schema_version": 1, "suite": "s", "results": [{"model": "m"}]}
    assert results_document(doc, "r.json", hint="Re-run.", require_suite=True) is doc
    assert results_document({"schema_version": 1, "results": []}, "r.json", hint="") == {
        "schema_version": 1,
        "results": [],
    }


def test_section_and_show():
    assert section({"git": {"commit": "abc"}}, "git") == {"commit": "abc"}
    assert section({"git": None}, "git") == {} and section({"git": [1]}, "git") == {}
    assert section(None, "git") == {}
    assert len(show("x" * 10_000)) < 60 and len(show(list(range(10_000)))) < 60
