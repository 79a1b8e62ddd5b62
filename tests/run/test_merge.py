"""guard merge: joins one run's shards, refuses anything else naming the files."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from guard.cli.main import main
from guard.core.errors import UsageError
from guard.run.merge import merge_documents
from guard.run.shard import plan

CASES = [
    ("mlp", "onnxruntime", "host"),
    ("mlp", "bundled", "host"),
    ("digits", "onnxruntime", "host"),
    ("digits", "bundled", "host"),
]


def _result(case, verdict="pass"):
    m, b, t = case
    return {
        "model": m,
        "backend": b,
        "target": t,
        "verdict": verdict,
        "checks": [
            {"name": "latency.p50_ms", "status": verdict, "value": 1.0, "bound": 2.0, "message": ""}
        ],
        "latency_ms": {"p50": 1.0},
        "duration_s": 1.0,
    }


def _shards(tmp_path: Path, n: int = 2, verdicts=None, override=None) -> list[Path]:
    p = plan(CASES, n, None)
    paths = []
    for k in range(1, n + 1):
        doc = {
            "schema_version": 1,
            "suite": "scale",
            "suite_sha256": "abc",
            "started": f"2026-12-01T08:0{k}:00+00:00",
            "finished": f"2026-12-01T08:1{k}:00+00:00",
            "git": {"commit": "c0ffee", "dirty": False, "branch": "main"},
            "results": [_result(c, (verdicts or {}).get(c, "pass")) for c in p.shard_cases(k)],
            "shard": {**p.describe(k), "invocation_id": "inv-1"},
        }
        for key, value in (override or {}).get(k, {}).items():
            doc[key] = value
        path = tmp_path / f"r{k}.json"
        path.write_text(json.dumps(doc))
        paths.append(path)
    return paths


def test_merged_file_is_one_run_in_suite_order(tmp_path):
    # Given in reverse: the merge still puts results in the suite's order.
    merged = merge_documents(list(reversed(_shards(tmp_path, 3))))
    assert [tuple(r[k] for k in ("model", "backend", "target")) for r in merged["results"]] == CASES
    assert merged["started"] == "2026-12-01T08:01:00+00:00"
    assert merged["finished"] == "2026-12-01T08:13:00+00:00"
    assert merged["exit_code"] == 0
    assert merged["merged"]["shard_count"] == 3 and merged["merged"]["missing_shards"] == []


def test_exit_code_and_reports_as_for_one_run(tmp_path, capsys):
    paths = _shards(tmp_path, 2, verdicts={CASES[3]: "fail"})
    out = tmp_path / "all.json"
    code = main(
        [
            "merge",
            *map(str, paths),
            "--json",
            str(out),
            "--junit",
            str(tmp_path / "j.xml"),
            "--markdown",
            str(tmp_path / "s.md"),
            "--quiet",
        ]
    )
    assert code == 1
    doc = json.loads(out.read_text())
    assert doc["exit_code"] == 1 and len(doc["results"]) == 4
    assert "fail" in (tmp_path / "s.md").read_text().lower()
    assert (tmp_path / "j.xml").read_text().count("<testcase") >= 4
    # The merged file is a results file: guard compare reads it (A/A: nothing regressed).
    assert main(["compare", str(out), str(out), "--quiet"]) in (0, 1)


@pytest.mark.parametrize(
    "key,value,what",
    [
        ("suite", "other", "suites"),
        ("git", {"commit": "deadbeef", "dirty": False}, "commits"),
        ("suite_sha256", "zzz", "suite files"),
    ],
)
def test_refuses_mixed_runs_naming_the_files(tmp_path, capsys, key, value, what):
    paths = _shards(tmp_path, 2, override={2: {key: value}})
    assert main(["merge", *map(str, paths), "--json", str(tmp_path / "all.json")]) == 2
    err = capsys.readouterr().err
    assert f"different {what}" in err and str(paths[0]) in err and str(paths[1]) in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "all.json").exists()  # no partial result left behind


def test_refuses_another_schema_version_naming_the_file(tmp_path, capsys):
    paths = _shards(tmp_path, 2, override={2: {"schema_version": 2}})
    assert main(["merge", *map(str, paths)]) == 2
    assert str(paths[1]) in capsys.readouterr().err


def test_refuses_different_plans_and_repeated_shards(tmp_path):
    paths = _shards(tmp_path, 2)
    doc = json.loads(paths[1].read_text())
    doc["shard"]["plan_sha256"] = "0" * 64
    paths[1].write_text(json.dumps(doc))
    with pytest.raises(UsageError, match="shard plans"):
        merge_documents(paths)
    with pytest.raises(UsageError, match="shard 1 given twice"):
        merge_documents([paths[0], paths[0]])


def test_missing_shard_refused_or_turned_into_errors(tmp_path):
    paths = _shards(tmp_path, 3)
    with pytest.raises(UsageError, match=r"shard\(s\) 2 of 3 missing"):
        merge_documents([paths[0], paths[2]])
    merged = merge_documents([paths[0], paths[2]], allow_missing=True)
    errors = [r for r in merged["results"] if r["verdict"] == "error"]
    assert errors and all("shard (2)" in r["error"] for r in errors)
    assert len(merged["results"]) == 4 and merged["exit_code"] == 3


def test_a_case_in_two_files_is_refused(tmp_path):
    a = {"schema_version": 1, "suite": "s", "git": {"commit": "c"}, "results": [_result(CASES[0])]}
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps(copy.deepcopy(a)))
    with pytest.raises(UsageError, match=f"in both {pa} and {pb}"):
        merge_documents([pa, pb])


def test_unreadable_inputs_name_the_file(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    assert main(["merge", str(bad)]) == 2
    assert str(bad) in capsys.readouterr().err
    assert main(["merge", str(tmp_path / "absent.json")]) == 2


def test_reports_go_through_the_report_package_as_for_a_run(tmp_path, capsys):
    """guard merge checks and writes its reports with guard.report.outputs, like guard run:
    a path given twice, or a directory, is refused (exit 2, naming the flag) before any
    report is written."""
    paths = _shards(tmp_path)
    same = str(tmp_path / "r.out")
    assert main(["merge", *map(str, paths), "--json", same, "--html", same, "--quiet"]) == 2
    assert "--html" in capsys.readouterr().err and not Path(same).exists()
    (tmp_path / "ro").mkdir()
    code = main(
        ["merge", *map(str, paths), "--json", str(tmp_path / "all.json"), "--quiet"]
        + ["--markdown", str(tmp_path / "s.md"), "--junit", str(tmp_path / "j.xml")]
        + ["--html", str(tmp_path / "ro")]
    )
    assert code == 2 and "is a directory, not a file" in capsys.readouterr().err
    assert not (tmp_path / "all.json").exists() and not (tmp_path / "s.md").exists()
    code = main(
        ["merge", *map(str, paths), "--json", str(tmp_path / "all.json"), "--quiet"]
        + ["--junit", str(tmp_path / "j.xml")]
    )
    assert code == 0
    assert json.loads((tmp_path / "all.json").read_text())["results"]
    assert (tmp_path / "j.xml").read_text().startswith("<?xml")
