"""No writer crashes on a partial or mistyped results document (error results are partial)."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from guard.report import render_console, to_html, to_markdown, write_json
from guard.report.junit import dumps as junit_dumps

# Text that tends to break reports: markup, pipes, control characters, non-ASCII.
_nasty = st.text(alphabet=st.sampled_from("a|<>&_*[]`\\\x00\x1b\x7f\n\t é\ufffe"), max_size=12)
_scalar = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20) | _nasty
junk = st.recursive(
    _scalar,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
FIELDS = [
    "model",
    "backend",
    "target",
    "verdict",
    "error",
    "checks",
    "manifest",
    "latency_ms",
    "samples_ms",
    "partitions",
    "arena_bytes",
    "arena_lower_bound_bytes",
    "numerics",
    "graph",
    "preflight",
    "artefact",
]
check = st.dictionaries(
    st.sampled_from(["name", "status", "value", "bound", "message"]),
    junk | st.sampled_from(["pass", "fail", "skip", "created", "error"]),
)
result = st.dictionaries(
    st.sampled_from(FIELDS),
    junk | st.lists(check, max_size=3) | st.sampled_from(["pass", "fail", "error", "inconclusive"]),
)
documents = st.fixed_dictionaries(
    {"schema_version": st.just(1), "results": st.lists(result | junk, max_size=4)},
    optional={"suite": junk, "git": junk, "started": junk, "exit_code": junk},
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents)
def test_renderers_never_crash(doc):
    md = to_markdown(doc)
    assert md.startswith("## ")
    ET.fromstring(to_html(doc).split("\n", 1)[1])
    root = ET.fromstring(junit_dumps(doc).split("\n", 1)[1])
    suite = root.find("testsuite")
    assert int(suite.get("tests")) == len(suite.findall("testcase"))
    render_console(doc, Console(file=io.StringIO(), width=100))


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(documents)
def test_json_writes_any_plain_document(tmp_path, doc):
    path = write_json(doc, tmp_path / "r.json")
    assert isinstance(json.loads(path.read_text(encoding="utf-8")), dict)


def test_control_characters_are_replaced_everywhere(doc):
    nasty = "a\x00b\x1b[31mc\x7f"
    doc["results"][0]["model"] = nasty
    doc["results"][1]["checks"][0]["message"] = nasty
    doc["results"][3]["error"] = nasty
    ET.fromstring(to_html(doc).split("\n", 1)[1])
    ET.fromstring(junit_dumps(doc).split("\n", 1)[1])
    buf = io.StringIO()
    render_console(doc, Console(file=buf, width=140, color_system=None))
    for out in (to_markdown(doc), buf.getvalue()):
        assert "\x00" not in out and "\x1b" not in out and "\x7f" not in out
        assert "a\ufffdb\ufffd[31mc\ufffd" in out.replace("\\[", "[")
