"""to_html / write_html: self-contained, well-formed, says what the Markdown says."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from html.parser import HTMLParser

from guard.report import to_html, write_html


class _Balance(HTMLParser):
    VOID = {"meta", "br", "hr", "img", "link", "input"}

    def __init__(self):
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if not self.stack or self.stack.pop() != tag:
            self.errors.append(tag)


def _parse(html: str) -> ET.Element:
    return ET.fromstring(html.split("\n", 1)[1])  # drop <!DOCTYPE html>


def test_writes_well_formed_html(doc, tmp_path):
    path = write_html(doc, tmp_path / "report.html")
    html = path.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>\n")
    p = _Balance()
    p.feed(html)
    p.close()
    assert p.errors == [] and p.stack == []
    root = _parse(html)
    assert root.tag == "html"
    assert "1 failed, 1 errored, 2 passed" in root.find("head/title").text


def test_table_and_sections(doc):
    root = _parse(to_html(doc))
    rows = root.findall("body/table")[0].findall("tr")
    assert len(rows) == 5  # header + one per result
    failing = [td.text for td in rows[2].findall("td")]
    assert failing[:4] == ["mlp", "bundled", "fail", "1.84"]
    assert rows[2].findall("td")[2].get("class") == "fail"
    headings = [h.text for h in root.findall("body/h2")]
    assert headings == ["Failed checks", "Preflight warnings", "Manifest pins", "Graph changes"]
    items = root.findall("body/ul")[0].findall("li")
    assert len(items) == 2
    assert items[1].find("b").tail.endswith(doc["results"][3]["error"])


def test_self_contained_and_escaped(doc):
    doc["results"][0]["model"] = '<img src="https://example.com/x.png">'
    html = to_html(doc)
    p = _Balance()
    p.feed(html)
    assert {tag for tag, _ in p.tags} <= {
        "html",
        "head",
        "meta",
        "title",
        "style",
        "body",
        "h1",
        "h2",
        "p",
        "table",
        "tr",
        "th",
        "td",
        "ul",
        "li",
        "b",
    }
    assert all("src" not in attrs and "href" not in attrs for _, attrs in p.tags)
    style = html.split("<style>", 1)[1].split("</style>", 1)[0]
    assert "url(" not in style and "@import" not in style
    assert (
        _parse(html).findall("body/table")[0].findall("tr")[1][0].text == doc["results"][0]["model"]
    )


def test_degenerate_documents():
    root = _parse(to_html({}))
    assert "no results" in root.find("body/h1").text
    root = _parse(to_html({"results": [None, {"verdict": "error", "model": "m"}]}))
    assert len(root.findall("body/table/tr")) == 2
