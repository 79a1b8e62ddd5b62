"""A counted block becomes MLflow metrics and parent series (guard.track.records)."""

from __future__ import annotations

from guard.results.documents import ResultsDocument
from guard.results.result import Result
from guard.track.records import result_metrics, series_metrics


def _result(counted: dict) -> Result:
    return Result.from_json({"model": "mlp", "backend": "bundled", "target": "host",
                             "verdict": "pass", "checks": [], "counted": counted})  # fmt: skip


def test_counted_figures_are_metrics_and_a_series():
    r = _result({"instructions": 1000.0, "bytes_loaded": 300.0, "bytes_stored": 100.0,
                 "fingerprint": {"engine": "qemu-tcg-plugin"}})  # fmt: skip
    m = result_metrics(r)
    assert m["counted.instructions"] == 1000.0 and m["counted.bytes_moved"] == 400.0
    series = series_metrics(ResultsDocument(results=(r,)))
    assert any(k.endswith("/counted.instructions") for k in series)


def test_a_counted_error_logs_no_counts():
    m = result_metrics(_result({"error": "counted run of mlp [bundled] failed: crashed"}))
    assert not any(k.startswith("counted.") for k in m)


def test_a_hardware_count_logs_instructions_and_no_bytes_and_tags_its_engine():
    from guard.track.records import child_tags

    r = _result({"engine": "perf_event_open", "instructions": 1000.0, "bytes_loaded": None,
                 "bytes_stored": None, "loads": None, "stores": None,
                 "fingerprint": {"engine": "perf_event_open"}})  # fmt: skip
    m = result_metrics(r)
    assert m["counted.instructions"] == 1000.0
    assert not {"counted.bytes_moved", "counted.bytes_loaded", "counted.loads"} & set(m)
    assert child_tags(r, ResultsDocument.from_json({}))["guard.counted_engine"] == "perf_event_open"
