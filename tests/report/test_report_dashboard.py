"""The dashboard reads real MLflow runs back and draws one trend per result series."""

from __future__ import annotations

import copy
import xml.etree.ElementTree as ET

import pytest

from guard.cli import main
from guard.report.dashboard import series_from_runs, sparkline


def test_sparkline_skips_missing_points_and_scales():
    svg = sparkline([1.0, None, 3.0, 2.0])
    pts = ET.fromstring(svg).find("polyline").get("points").split()
    assert len(pts) == 3
    assert sparkline([None, None]) == '<span class="muted">-</span>'
    flat = ET.fromstring(sparkline([5.0, 5.0])).find("polyline").get("points").split()
    assert len(flat) == 2  # a flat series still draws


def test_series_group_and_order():
    rows = [{"tags.guard.model": "m", "tags.guard.backend": "b", "tags.guard.target": "t",
             "start_time": s} for s in ("2026-01-03", "2026-01-01", "2026-01-02")]
    (key, ordered), = series_from_runs(rows).items()
    assert key == ("m", "b", "t")
    assert [r["start_time"] for r in ordered] == ["2026-01-01", "2026-01-02", "2026-01-03"]


@pytest.mark.slow
def test_dashboard_from_a_real_store(tmp_path, monkeypatch, doc, capsys):
    report_doc = doc
    from guard.track import log_results

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    for i in range(3):
        doc = copy.deepcopy(report_doc)
        doc["suite"] = "dash"
        doc["started"] = f"2026-11-2{i}T10:00:00+00:00"
        for r in doc["results"]:
            if r.get("latency_ms"):
                r["latency_ms"]["p50"] = 10.0 + i
        log_results(doc, uri)
    out = tmp_path / "d.html"
    assert main(["dashboard", "dash", "--tracking-uri", uri, "--out", str(out)]) == 0
    assert "3 invocation(s)" in capsys.readouterr().out
    page = out.read_text()
    n_series = len({(r["model"], r["backend"]) for r in report_doc["results"]})
    assert page.count("<polyline") >= n_series  # at least the p50 trend of each series
    assert page.count("<tr>") == 1 + n_series + 1 + 3  # headers, series, invocations
    assert "<script" not in page and "src=" not in page and "href=" not in page
    assert main(["dashboard", "nothing-here", "--tracking-uri", uri, "--out",
                 str(tmp_path / "e.html")]) == 0
    assert "No results logged" in (tmp_path / "e.html").read_text()
