"""The HTML pages in a real browser: Debian's chromium, headless, driven by playwright.

Each page is opened from a file with every network request refused and recorded: it must
render (the dashboard's plotly traces, bound, change-point and manifest markers; the run and
compare reports' tables) with no console error and no request leaving the machine. Set
GUARD_SCREENSHOTS=DIR to keep a screenshot of each page there.
"""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="Debian's chromium is not installed (apt-get install -y chromium): the "
        "browser test drives it offline through playwright",
    ),
]
playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright (test extra)")


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


class Opened:
    def __init__(self, page, errors, requests):
        self.page, self.errors, self.requests = page, errors, requests


def _open(browser, path: Path, ready: str) -> Opened:
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))

    def route(r):
        if r.request.url.startswith("file://"):
            return r.continue_()
        requests.append(r.request.url)
        return r.abort()

    page.route("**/*", route)
    page.goto(path.resolve().as_uri())
    page.wait_for_selector(ready, state="attached", timeout=30_000)
    shots = os.environ.get("GUARD_SCREENSHOTS")
    if shots:
        page.screenshot(path=str(Path(shots) / f"{path.stem}.png"), full_page=True)
    return Opened(page, errors, requests)


def test_dashboard_renders_its_charts(browser, tmp_path, monkeypatch, doc):
    from test_report_dashboard import _log_history

    from guard.cli.main import main

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    _log_history(uri, doc, counted=True)
    out = tmp_path / "dashboard.html"
    assert main(["dashboard", "dash", "--tracking-uri", uri, "--out", str(out)]) == 0
    o = _open(browser, out, ".plotly-graph-div .scatterlayer .trace")
    page = o.page
    assert page.locator(".plotly-graph-div").count() == 3
    # Per chart: band (2 traces), p50, no bound (a bare name has no suite file), 3 panels
    # (arena, partitions, max error), and the counted panel on the counted series alone.
    assert page.locator(".plotly-graph-div .scatterlayer .trace").count() == 3 * 6 + 1
    assert page.locator(".plotly-graph-div .scatterlayer .trace path.js-line").count() >= 3 * 4
    assert page.locator(".plotly-graph-div .scatterlayer .point").count() >= 3 * 5
    annotations = page.eval_on_selector_all(
        ".plotly-graph-div .annotation-text", "els => els.map(e => e.textContent)"
    )
    assert sum("change point +99.6%" in a for a in annotations) == 3
    # The counted series (mlp, bundled): its +3% step at the third run, exact, and the
    # emulator change at the fourth drawn as a break, not a step.
    counted = page.locator(".plotly-graph-div").first
    marks = counted.locator(".annotation-text").all_text_contents()
    assert sum("counted +3.00%" in a for a in marks) == 1, marks
    assert sum("not comparable: emulator differs" in a for a in marks) == 1, marks
    rows = page.locator("#regressions tr.filterable").all_inner_texts()
    assert len(rows) == 4 and sum("1,000,000 → 1,030,000 instructions" in r for r in rows) == 1
    assert (
        sum(
            a.startswith("manifest:") and "runtime.version: 1.32.0 → 1.33.0" in a
            for a in annotations
        )
        == 2
    )
    # The markers: 3 change points, 2 manifest changes, the counted step and break.
    assert page.locator(".plotly-graph-div .shapelayer path").count() == 3 + 2 + 2
    # Hover: plotly draws the commit, date and manifest hash of the point.
    first = page.locator(".plotly-graph-div").first
    point = first.locator(".scatterlayer .trace").nth(2).locator(".point").last
    point.hover(force=True)
    page.wait_for_selector(".hoverlayer .hovertext", timeout=10_000)
    hover = page.eval_on_selector(".hoverlayer .hovertext", "e => e.textContent")
    assert "commit 4444444444" in hover and "manifest cccccccccccc" in hover and " ms" in hover
    # Filters hide the other series.
    page.select_option('select[data-filter="backend"]', "bundled")
    assert page.locator("section.series:not(.hidden)").count() == 2  # mlp, resnet18 (errored)
    assert page.locator("#shown").inner_text() == "2 of 4 series shown"
    assert o.errors == [] and o.requests == []


def test_run_report_renders(browser, tmp_path, doc):
    from guard.report import write_html

    path = write_html(doc, tmp_path / "run-report.html")
    o = _open(browser, path, "table")
    assert o.page.locator("table").first.locator("tr").count() == 1 + len(doc["results"])
    assert "Failed checks" in o.page.locator("h2").all_inner_texts()
    assert o.errors == [] and o.requests == []


def test_compare_report_renders(browser, tmp_path, doc):
    from guard.compare.compare import compare_docs
    from guard.compare.reports import write_reports
    from guard.results.documents import ResultsDocument

    head = copy.deepcopy(doc)
    for r in head["results"]:
        if r.get("samples_ms"):
            r["samples_ms"] = [x * 1.5 for x in r["samples_ms"] * 8]
            r["latency_ms"]["p50"] *= 1.5
    base = copy.deepcopy(doc)
    for r in base["results"]:
        if r.get("samples_ms"):
            r["samples_ms"] = r["samples_ms"] * 8
    cmp = compare_docs(ResultsDocument.from_json(base), ResultsDocument.from_json(head))
    path = tmp_path / "compare-report.html"
    write_reports(cmp, json_path=None, md_path=None, html_path=path, title="guard compare")
    o = _open(browser, path, "table")
    text = o.page.locator("body").inner_text()
    assert "regressed" in text
    assert o.page.locator("table tr").count() >= 1 + 3
    assert o.errors == [] and o.requests == []
