"""Results files that were edited or damaged: every reader (compare, merge) says exit 2 with
the file and the field, never exit 3, never a verdict on rows it should not have paired."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "compare"))
from compare_fixtures import doc, result  # noqa: E402

from guard.cli.main import main  # noqa: E402


def _write(path: Path, d: dict) -> Path:
    path.write_text(json.dumps(d))
    return path


def _samples(seed: int = 0) -> np.ndarray:
    return 10.0 + np.random.default_rng(seed).standard_normal(40) * 0.1


def _base(tmp_path: Path) -> Path:
    return _write(tmp_path / "base.json", doc(result("a", _samples()), result("b", _samples(1))))


def _run(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    return code, err


@pytest.mark.parametrize("where", ["samples", "rounds", "stats"])
def test_compare_of_huge_latencies_is_bad_input(tmp_path, capsys, where):
    r = result("a", _samples())
    if where == "samples":
        r["samples_ms"] = [1e308] * 40
        for rd in r["rounds"]:
            rd["samples_ms"] = [1e308] * len(rd["samples_ms"])
            rd["p50"] = 1e308
    elif where == "rounds":
        r["rounds"][0]["samples_ms"][0] = 1e308
    else:
        r["latency_ms"]["p50"] = 1e308
    head = _write(tmp_path / "head.json", doc(r, result("b", _samples(1))))
    for argv in (["compare", str(_base(tmp_path)), str(head)], ["compare", str(head), str(head)]):
        code, err = _run(argv, capsys)
        assert code == 2, err
        assert "head.json" in err and "results[0]" in err and "internal error" not in err, err
        assert len(err.splitlines()) == 1


def test_compare_of_a_file_with_no_results_is_bad_input(tmp_path, capsys):
    empty = _write(tmp_path / "empty.json", doc())
    for argv in (
        ["compare", str(_base(tmp_path)), str(empty)],
        ["compare", str(empty), str(_base(tmp_path))],
        ["compare", str(empty), str(empty)],
    ):
        code, err = _run(argv, capsys)
        assert code == 2 and "empty.json: holds no results" in err, err


def test_compare_of_a_file_with_a_duplicate_row_is_bad_input(tmp_path, capsys):
    dup = _write(tmp_path / "dup.json", doc(result("a", _samples()), result("a", _samples(2))))
    code, err = _run(["compare", str(_base(tmp_path)), str(dup)], capsys)
    assert code == 2 and "dup.json: results[1]" in err and "given twice" in err, err


def _shards(tmp_path: Path) -> list[dict]:
    out = []
    cases = [["a", "onnxruntime", "host"], ["b", "onnxruntime", "host"]]
    for i, name in enumerate(("a", "b"), start=1):
        d = doc(result(name, _samples(i)))
        d["exit_code"] = 0
        d["shard"] = {
            "index": i,
            "count": 2,
            "plan_sha256": "p",
            "invocation_id": "inv",
            "suite_cases": cases,
        }
        out.append(d)
    return out


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda r: r.pop("verdict"), "results[0].verdict: is missing"),
        (lambda r: r.__setitem__("verdict", 5), "results[0].verdict: 5 is not a verdict"),
        (lambda r: r.__setitem__("verdict", ["pass"]), "is not a verdict"),
        (lambda r: r.__setitem__("verdict", "maybe"), "'maybe' is not a verdict"),
        (lambda r: r.__setitem__("model", 7), "needs model, backend and target"),
    ],
)
def test_merge_of_a_shard_with_a_bad_verdict_is_bad_input(tmp_path, capsys, edit, words):
    one, two = _shards(tmp_path)
    edit(one["results"][0])
    a, b = _write(tmp_path / "s1.json", one), _write(tmp_path / "s2.json", two)
    code, err = _run(["merge", str(a), str(b), "--json", str(tmp_path / "m.json")], capsys)
    assert code == 2, err
    assert "s1.json" in err and words in err and "internal error" not in err, err
    assert not (tmp_path / "m.json").exists()


def test_the_shards_merge_when_intact(tmp_path, capsys):
    one, two = _shards(tmp_path)
    a, b = _write(tmp_path / "s1.json", one), _write(tmp_path / "s2.json", two)
    code, err = _run(["merge", str(a), str(b), "--json", str(tmp_path / "m.json")], capsys)
    assert code == 0, err
    merged = json.loads((tmp_path / "m.json").read_text())
    assert [r["model"] for r in merged["results"]] == ["a", "b"]


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        # each found by tests/fuzz/test_fuzz_documents.py as an exit 3 in compare
        (
            lambda r: r["manifest"]["tuning_cache"].__setitem__("hits", [1]),
            "manifest.tuning_cache.hits",
        ),
        (lambda r: r["numerics"].__setitem__("max_abs_err", {"a": 1}), "numerics.max_abs_err"),
        (lambda r: r["partitions"].__setitem__("count", [2]), "partitions.count"),
        (lambda r: r.__setitem__("arena_bytes", "big"), "arena_bytes"),
        (lambda r: r["manifest"].__setitem__("tuning_cache", [1]), "manifest.tuning_cache"),
        (lambda r: r["graph"]["ops_after"].__setitem__("Conv", {"n": 1}), "graph.ops_after"),
        (lambda r: r.__setitem__("graph", [1]), "graph"),
    ],
)
def test_compare_of_a_field_of_the_wrong_type_is_bad_input(tmp_path, capsys, edit, field):
    r = result("a", _samples())
    edit(r)
    head = _write(tmp_path / "head.json", doc(r, result("b", _samples(1))))
    code, err = _run(["compare", str(_base(tmp_path)), str(head)], capsys)
    assert code == 2 and f"results[0].{field}" in err and "internal error" not in err, err


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda s: s.__setitem__("suite_cases", [[]]), "shard.suite_cases"),
        (lambda s: s.__setitem__("suite_cases", [[["a"], "b", "c"]]), "shard.suite_cases"),
        (lambda s: s.__setitem__("index", "1"), "shard.index"),
        (lambda s: s.__setitem__("count", 0), "shard.count"),
    ],
)
def test_merge_of_an_edited_shard_block_is_bad_input(tmp_path, capsys, edit, field):
    one, two = _shards(tmp_path)
    edit(one["shard"])
    a, b = _write(tmp_path / "s1.json", one), _write(tmp_path / "s2.json", two)
    code, err = _run(["merge", str(a), str(b), "--json", str(tmp_path / "m.json")], capsys)
    assert code == 2 and field in err and "internal error" not in err, err
