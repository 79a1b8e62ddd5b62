"""write_json: stable round trip, numpy conversion, atomicity, bad paths."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from guard.core.errors import InternalError, UsageError
from guard.report import write_json


def test_round_trip_equals_input(doc, tmp_path):
    path = write_json(doc, tmp_path / "results.json")
    assert path == tmp_path / "results.json"
    assert json.loads(path.read_text(encoding="utf-8")) == doc


def test_output_is_sorted_and_stable(doc, tmp_path):
    a = write_json(doc, tmp_path / "a.json").read_bytes()
    reordered = dict(reversed(list(doc.items())))
    b = write_json(reordered, tmp_path / "b.json").read_bytes()
    assert a == b
    top_keys = [line.split('"')[1] for line in a.decode().splitlines() if line.startswith('  "')]
    assert top_keys == sorted(top_keys)
    assert a.endswith(b"\n")


def test_numpy_scalars_and_arrays_are_converted(doc, tmp_path):
    r = doc["results"][0]
    r["latency_ms"]["p50"] = np.float32(0.5)
    r["latency_ms"]["n"] = np.int64(40)
    r["samples_ms"] = np.array([0.5, 0.25], dtype=np.float64)
    r["numerics"]["bit_exact"] = np.bool_(True)
    r["partitions"]["by_provider"] = {"CPU": np.int32(12)}
    r["latency_ms"]["stdev"] = float("nan")  # strict JSON has no NaN
    out = json.loads(write_json(doc, tmp_path / "r.json").read_text())
    got = out["results"][0]
    assert got["latency_ms"]["p50"] == 0.5 and isinstance(got["latency_ms"]["p50"], float)
    assert got["latency_ms"]["n"] == 40 and isinstance(got["latency_ms"]["n"], int)
    assert got["samples_ms"] == [0.5, 0.25]
    assert got["numerics"]["bit_exact"] is True
    assert got["partitions"]["by_provider"] == {"CPU": 12}
    assert got["latency_ms"]["stdev"] is None


def test_missing_parent_is_a_usage_error_naming_the_path(doc, tmp_path):
    target = tmp_path / "no" / "such" / "results.json"
    with pytest.raises(UsageError) as info:
        write_json(doc, target)
    assert str(target) in str(info.value)
    assert info.value.exit_code == 2
    assert not (tmp_path / "no").exists()


def test_directory_target_is_a_usage_error(doc, tmp_path):
    with pytest.raises(UsageError, match="directory"):
        write_json(doc, tmp_path)


def test_unserialisable_value_leaves_old_file_untouched_and_no_temp(doc, tmp_path):
    target = tmp_path / "results.json"
    target.write_text("old contents\n")
    os.chmod(target, 0o640)
    doc["results"][1]["numerics"]["weird"] = object()
    with pytest.raises(InternalError, match=r"\$\.results\[1\]\.numerics\.weird"):
        write_json(doc, target)
    assert target.read_text() == "old contents\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def test_failure_during_write_removes_temp_file(doc, tmp_path, monkeypatch):
    target = tmp_path / "results.json"
    target.write_text("old contents\n")

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        write_json(doc, target)
    assert target.read_text() == "old contents\n"
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_replaces_existing_file_keeping_its_mode(doc, tmp_path):
    target = tmp_path / "results.json"
    target.write_text("old")
    os.chmod(target, 0o640)
    write_json(doc, target)
    assert json.loads(target.read_text()) == doc
    assert target.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_new_file_is_world_readable(doc, tmp_path):
    path = write_json(doc, tmp_path / "new.json")
    assert path.stat().st_mode & 0o777 == 0o644


def test_accepts_str_paths_and_error_results(tmp_path):
    doc = {"schema_version": 1, "results": [{"verdict": "error", "error": None}]}
    path = write_json(doc, str(tmp_path / "e.json"))
    assert isinstance(path, Path)
    assert json.loads(path.read_text()) == doc
