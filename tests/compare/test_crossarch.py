"""Cross-architecture rows: output drift, partitions and arena between x86_64 and AArch64."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from guard.compare import crossarch as xa
from guard.results.cross_arch import CrossArchRow
from guard.results.documents import ComparisonDocument, ResultsDocument
from guard.results.result import Result

X86 = "llvm -mattr=+avx2,+fma -mcpu=x86-64-v3 -mtriple=x86_64-linux-gnu"
ARM = "llvm -mattr=+neon -mtriple=aarch64-linux-gnu"
ARM_N1 = "llvm -mattr=+dotprod,+neon -mcpu=neoverse-n1 -mtriple=aarch64-linux-gnu"


def _result(model: str, target: str, host: str, outputs: list[np.ndarray], *,
            emulated: bool = False, partitions: int = 1, arena: int = 4096,
            store: bool = True, sha: str | None = None, backend: str = "bundled") -> dict[str, Any]:  # fmt: skip
    names = [f"out{i}" for i in range(len(outputs))]
    numerics: dict[str, Any] = {
        "max_abs_err": 1e-6, "max_rel_err": 1e-6,
        "output_sha256": sha or str(hash(b"".join(o.tobytes() for o in outputs))),
    }  # fmt: skip
    if store:
        numerics["outputs"] = xa.encode_outputs(outputs, names)
    return {
        "model": model, "backend": backend, "target": target, "verdict": "pass",
        "checks": [{"name": "tolerance", "status": "pass", "value": 0.0,
                    "bound": {"rtol": 1e-4, "atol": 1e-5}, "message": ""}],
        "manifest": {"target": {"raw": target, "canonical": target},
                     "host": {"arch": host, "cpu": "cpu", "threads": 1}},
        "latency_ms": None if emulated else {"p50": 1.0},
        "latency_status": "emulated" if emulated else "measured",
        "partitions": {"count": partitions}, "arena_bytes": arena,
        "numerics": numerics,
    }  # fmt: skip


def _doc(*results: dict[str, Any], started: str = "2026-12-01T09:00:00+00:00") -> dict[str, Any]:
    return {"schema_version": 1, "suite": "s", "started": started,
            "finished": started, "git": {"commit": "c"}, "results": list(results)}  # fmt: skip


def _row(ref: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    return xa.cross_row(Result.from_json(ref), Result.from_json(other))


def _rows(base: dict[str, Any], head: dict[str, Any]) -> list[dict[str, Any]]:
    return xa.cross_arch_rows(ResultsDocument.from_json(base), ResultsDocument.from_json(head))


def _failing(row: dict[str, Any], strict: bool = False) -> list[str | None]:
    return [r.verdict for r in xa.failing([CrossArchRow.from_json(row)], strict=strict)]


def _compare(base: dict[str, Any], head: dict[str, Any]) -> dict[str, Any]:
    from guard.compare.compare import compare_docs

    return compare_docs(ResultsDocument.from_json(base), ResultsDocument.from_json(head))


LOGITS = np.array([[0.1, 2.0, -1.0], [3.0, 0.5, 0.2]], np.float32)


@pytest.mark.parametrize(
    "arrays",
    [
        [LOGITS],
        [np.float32(3.5).reshape(()), np.arange(7, dtype=np.int64)],
        [np.linspace(-1, 1, 100_000, dtype=np.float32).reshape(10, 10_000)],  # sampled
    ],
)
def test_outputs_round_trip(arrays: list[np.ndarray]) -> None:
    enc = xa.encode_outputs(arrays, [f"o{i}" for i in range(len(arrays))])
    dec = xa.decode_outputs(enc)
    assert dec is not None and len(dec) == len(arrays)
    for a, d in zip(arrays, dec, strict=True):
        assert d.shape == list(a.shape)
        np.testing.assert_array_equal(d.values, a.reshape(-1)[:: d.stride])
    big = arrays[0].size > xa.MAX_STORED_ELEMENTS
    assert (dec[0].stride > 1) is big
    assert dec[0].values.size <= (xa.SAMPLE_ELEMENTS if big else arrays[0].size)


def test_undecodable_outputs_are_none() -> None:
    assert xa.decode_outputs(None) is None
    assert xa.decode_outputs({"encoding": "other"}) is None
    bad = xa.encode_outputs([LOGITS], ["o"])
    bad["tensors"][0]["data"] = "!!!"
    assert xa.decode_outputs(bad) is None


def test_identical_outputs_are_consistent_with_equal_hashes() -> None:
    host = _result("m", X86, "x86_64", [LOGITS])
    arm = _result("m", ARM, "x86_64", [LOGITS.copy()], emulated=True)
    row = _row(host, arm)
    assert row["verdict"] == xa.CONSISTENT
    assert row["arches"] == ["x86_64", "aarch64"]
    o = row["outputs"]
    assert o["hash_equal"] and o["max_abs"] == 0.0 and o["allclose"]
    assert o["top1_agreement"] == 1.0
    assert row["latency"] == xa.LATENCY_NOTE
    assert row["sides"][1]["latency_status"] == "emulated"


def test_drift_within_and_outside_tolerance() -> None:
    host = _result("m", X86, "x86_64", [LOGITS])
    small = _result("m", ARM, "x86_64", [LOGITS * (1 + 1e-6)], emulated=True)
    row = _row(host, small)
    assert row["verdict"] == xa.CONSISTENT and not row["outputs"]["hash_equal"]
    assert 0 < row["outputs"]["max_abs"] < 1e-5
    assert row["outputs"]["max_rel"] == pytest.approx(1e-6, rel=0.2)
    # the class of the second sample flips on Arm: drift, and top-1 agreement says so
    flipped = LOGITS.copy()
    flipped[1, 1] = 4.0
    row = _row(host, _result("m", ARM, "x86_64", [flipped], emulated=True))
    assert row["verdict"] == xa.DRIFT
    assert row["outputs"]["allclose"] is False
    assert row["outputs"]["max_abs"] == pytest.approx(3.5)
    assert row["outputs"]["top1_agreement"] == 0.5
    assert _failing(row) == [xa.DRIFT]
    assert "outside rtol=0.0001" in row["summary"]


def test_partition_or_arena_difference_is_its_own_verdict() -> None:
    host = _result("m", X86, "x86_64", [LOGITS])
    arm = _result("m", ARM, "x86_64", [LOGITS], emulated=True, partitions=2, arena=8192)
    row = _row(host, arm)
    assert row["verdict"] == xa.DIFFERS
    assert row["partitions"] == [1, 2] and not row["partitions_equal"]
    assert row["arena_bytes"] == [4096, 8192] and not row["arena_equal"]
    assert _failing(row) == [] and _failing(row, strict=True) == [xa.DIFFERS]
    assert "partitions 1 vs 2" in row["summary"] and "arena 4096 vs 8192 B" in row["summary"]


def test_without_stored_outputs_only_hashes_and_a_bound_are_known() -> None:
    host = _result("m", X86, "x86_64", [LOGITS], store=False, sha="a")
    arm = _result("m", ARM, "x86_64", [LOGITS], emulated=True, store=False, sha="b")
    row = _row(host, arm)
    assert row["verdict"] == xa.INCONCLUSIVE
    assert row["outputs"]["max_abs_bound"] == pytest.approx(2e-6)
    same = _result("m", ARM, "x86_64", [LOGITS], emulated=True, store=False, sha="a")
    assert _row(host, same)["verdict"] == xa.CONSISTENT


def test_one_run_with_two_targets_pairs_native_with_emulated_once() -> None:
    arm = _result("m", ARM, "x86_64", [LOGITS], emulated=True)
    host = _result("m", X86, "x86_64", [LOGITS])
    other = _result("n", X86, "x86_64", [LOGITS])
    doc = _doc(arm, host, other)
    rows = _rows(doc, copy.deepcopy(doc))
    assert len(rows) == 1
    assert [s["arch"] for s in rows[0]["sides"]] == ["x86_64", "aarch64"]  # native first


def test_an_x86_job_and_an_arm_job_pair_up_by_model_and_backend() -> None:
    x86 = _doc(_result("m", X86, "x86_64", [LOGITS]), _result("n", X86, "x86_64", [LOGITS]))
    arm = _doc(_result("m", ARM_N1, "aarch64", [LOGITS]),
               _result("m", ARM_N1, "aarch64", [LOGITS], backend="onnxruntime"),
               started="2026-12-01T09:05:00+00:00")  # fmt: skip
    rows = _rows(x86, arm)
    assert [(r["model"], r["backend"], r["arches"]) for r in rows] == [
        ("m", "bundled", ["x86_64", "aarch64"])
    ]
    assert rows[0]["sides"][1]["host_arch"] == "aarch64"


def test_two_runs_that_both_have_both_architectures_compare_like_with_like() -> None:
    base = _doc(_result("m", X86, "x86_64", [LOGITS]),
                _result("m", ARM, "x86_64", [LOGITS], emulated=True))  # fmt: skip
    head = copy.deepcopy(base)
    head["started"] = "2026-12-02T09:00:00+00:00"
    # no x86_64-vs-aarch64 pair across the runs: only the emulated target with itself
    rows = _rows(base, head)
    assert [r["arches"] for r in rows] == [["aarch64", "aarch64"]]


def test_one_aarch64_target_emulated_and_native_is_a_cross_row() -> None:
    emulated = _doc(_result("m", ARM, "x86_64", [LOGITS], emulated=True))
    native = _doc(_result("m", ARM, "aarch64", [LOGITS]), started="2026-12-02T00:00:00+00:00")
    assert xa.is_cross(Result.from_json(emulated["results"][0]),
                       Result.from_json(native["results"][0]))  # fmt: skip
    rows = _rows(emulated, native)
    assert len(rows) == 1 and rows[0]["arches"] == ["aarch64", "aarch64"]
    assert [s["host_arch"] for s in rows[0]["sides"]] == ["x86_64", "aarch64"]


def test_error_results_are_left_out() -> None:
    host = _result("m", X86, "x86_64", [LOGITS])
    broken = _result("m", ARM, "x86_64", [LOGITS], emulated=True)
    broken["verdict"] = "error"
    doc = _doc(host, broken)
    assert _rows(doc, doc) == []


def test_markdown_section() -> None:
    host = _result("m", X86, "x86_64", [LOGITS])
    arm = _result("m", ARM, "x86_64", [LOGITS], emulated=True, partitions=2)
    lines = xa.markdown_lines([CrossArchRow.from_json(_row(host, arm))])
    assert lines[0] == "## Cross-architecture consistency"
    row = lines[-1]
    assert "m / bundled" in row and "x86_64 vs aarch64 (emulated)" in row
    assert "differs" in row and "1 vs 2" in row and xa.LATENCY_NOTE in row
    assert xa.markdown_lines([]) == []


def test_guard_compare_of_one_run_shows_cross_rows_and_drift_fails() -> None:
    from guard.compare.compare import exit_code
    from guard.compare.reports import to_markdown

    host = _result("m", X86, "x86_64", [LOGITS])
    flipped = LOGITS.copy()
    flipped[1, 1] = 4.0
    arm = _result("m", ARM, "x86_64", [flipped], emulated=True)
    doc = _doc(host, arm)
    cmp = _compare(doc, copy.deepcopy(doc))
    assert [r["verdict"] for r in cmp["cross_arch"]] == [xa.DRIFT]
    assert cmp["summary"]["cross_arch"][xa.DRIFT] == 1
    assert exit_code(ComparisonDocument.from_json(cmp)) == 1
    assert "## Cross-architecture consistency" in to_markdown(ComparisonDocument.from_json(cmp))


def test_same_target_emulated_and_native_is_not_refused_as_another_host() -> None:
    from guard.compare.compare import exit_code

    emulated = _doc(_result("m", ARM, "x86_64", [LOGITS], emulated=True))
    native = _doc(_result("m", ARM, "aarch64", [LOGITS]), started="2026-12-02T00:00:00+00:00")
    cmp = _compare(emulated, native)  # was IncompatibleBaselineError (host.arch differs)
    assert cmp["rows"] == []
    assert [r["verdict"] for r in cmp["cross_arch"]] == [xa.CONSISTENT]
    assert exit_code(ComparisonDocument.from_json(cmp)) == 0


def test_an_emulated_target_in_two_runs_gets_a_consistency_row_not_a_latency_row() -> None:
    base = _doc(_result("m", X86, "x86_64", [LOGITS]),
                _result("m", ARM, "x86_64", [LOGITS], emulated=True))  # fmt: skip
    head = _doc(_result("m", X86, "x86_64", [LOGITS]),
                _result("m", ARM, "x86_64", [LOGITS], emulated=True, partitions=3),
                started="2026-12-02T09:00:00+00:00")  # fmt: skip
    cmp = _compare(base, head)
    assert [r["target"] for r in cmp["rows"]] == [X86]
    assert [(r["arches"], r["verdict"]) for r in cmp["cross_arch"]] == [
        (["aarch64", "aarch64"], xa.DIFFERS)
    ]
    # one run compared with itself: the emulated result is not compared with itself
    same = _compare(base, copy.deepcopy(base))
    assert [r["target"] for r in same["rows"]] == [X86]
    assert [r["arches"] for r in same["cross_arch"]] == [["x86_64", "aarch64"]]
