"""to_markdown / write_markdown: a GitHub step summary with one table row per result."""

from __future__ import annotations

import re

import pytest

from guard.core.errors import UsageError
from guard.report import to_markdown, write_markdown
from guard.report.markdown import escape


def _table_rows(md: str) -> list[list[str]]:
    """Rows of the first table, split on unescaped pipes, header and rule dropped."""
    block = md.split("\n\n")
    table = next(b for b in block if b.startswith("| model |"))
    rows = []
    for line in table.splitlines()[2:]:
        cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
        rows.append([c.strip() for c in cells])
    return rows


def test_headline_counts_and_icon(doc):
    first = to_markdown(doc).splitlines()[0]
    assert first.startswith("## ❌ guard smoke:")
    assert "1 failed, 1 errored, 2 passed of 4 results" in first


def test_all_pass_headline(doc):
    doc["results"] = [doc["results"][0], doc["results"][2]]
    assert to_markdown(doc).startswith("## ✅ guard smoke: 2 passed of 2 results")


def test_inconclusive_is_not_shown_as_a_pass(doc):
    doc["results"] = [doc["results"][0]]
    doc["results"][0]["verdict"] = "inconclusive"
    assert to_markdown(doc).startswith("## ⚠️ guard smoke: 1 inconclusive of 1 result\n")


def test_one_row_per_result_with_values(doc):
    rows = _table_rows(to_markdown(doc))
    assert len(rows) == 4
    assert all(len(r) == 9 for r in rows)
    by_key = {(r[0], r[1]): r for r in rows}
    assert set(by_key) == {(m, b) for m in ("mlp", "resnet18") for b in ("onnxruntime", "bundled")}
    failing = by_key[("mlp", "bundled")]
    assert failing[2] == "❌ fail"
    assert failing[3] == "1.84" and failing[4] == "2.02"
    assert failing[5] == "1"
    assert failing[6] == "3.00 (2.00)"
    assert failing[7] == "3.20e-06"
    assert failing[8] == "latency"
    errored = by_key[("resnet18", "bundled")]
    assert errored[2] == "⛔ error"
    assert errored[3:8] == ["—"] * 5


def test_failed_checks_section_lists_each_failure_once(doc):
    md = to_markdown(doc)
    section = md.split("### Failed checks\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(section) == 2
    assert section[0].startswith("- **mlp\\[bundled\\]** latency: p50 1.84 ms &gt; bound 1.50 ms")
    # the error message's pipe is escaped, its angle brackets are entities
    assert "&lt;Conv&gt; \\| group=2" in section[1]
    assert "\n- **resnet18" in md and "resnet18.onnx: node 'Conv_12'" in md


def test_pins_warnings_and_graph_sections(doc):
    md = to_markdown(doc)
    pins = md.split("### Manifest pins\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert pins[0].startswith("| model | backend | compiler | runtime |")
    # header, rule, then one row per (model, backend) with a manifest (the errored one has none)
    assert len(pins) == 5
    assert pins[2].startswith("| mlp | onnxruntime | onnxruntime 1.32.0")
    assert "llvm -mcpu=sapphirerapids" in pins[2]
    assert pins[3].startswith("| mlp | bundled | guard-bundled 0.1.0")
    assert pins[4].startswith("| resnet18 | onnxruntime |")
    assert "### Preflight warnings" in md and "tuning cache has no entry" in md
    graph = md.split("### Graph changes\n\n", 1)[1].strip().splitlines()
    assert graph == [
        "- **mlp\\[bundled\\]**: 5 → 4 ops; added FusedGemm ×2, Transpose ×1; "
        "passes that changed it: fuse_gemm"
    ]


def test_sections_absent_when_empty(doc):
    doc["results"] = [doc["results"][0]]
    md = to_markdown(doc)
    assert "### Failed checks" not in md
    assert "### Graph changes" not in md
    assert "### Preflight warnings" not in md


def test_pipes_newlines_and_markup_in_names_cannot_break_the_table(doc):
    doc["results"][0]["model"] = "evil|model\nname"
    doc["results"][0]["checks"][0].update(status="fail", message="a | b\n<script>")
    rows = _table_rows(to_markdown(doc))
    assert len(rows) == 4 and all(len(r) == 9 for r in rows)
    assert rows[0][0] == "evil\\|model name"
    assert "<script>" not in to_markdown(doc)


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("x86_64", "x86_64"),
        ("_private_", "\\_private\\_"),
        ("a*b*", "a\\*b\\*"),
        ("[x](y)", "\\[x\\](y)"),
        ("a & b", "a &amp; b"),
        (None, "—"),
    ],
)
def test_escape(raw, escaped):
    assert escape(raw) == escaped


def test_degenerate_documents_do_not_crash():
    assert to_markdown({}).startswith("## ⚠️ guard guard: no results")
    md = to_markdown({"suite": "s", "results": [{"verdict": "error"}, {}, None, 3]})
    rows = _table_rows(md)
    assert [r[2] for r in rows] == ["⛔ error", "⛔ error"]
    assert md.count("error (no message)") == 2


def test_write_markdown(doc, tmp_path):
    path = write_markdown(doc, tmp_path / "summary.md")
    assert path.read_text(encoding="utf-8") == to_markdown(doc)
    with pytest.raises(UsageError):
        write_markdown(doc, tmp_path / "nope" / "summary.md")


def test_error_repeated_as_an_errored_check_is_listed_once(doc):
    # guard.checks.assemble.error_result carries the error both as `error` and as a "run" check
    r = doc["results"][3]
    r["checks"] = [
        {"name": "run", "status": "error", "value": None, "bound": None, "message": r["error"]}
    ]
    md = to_markdown(doc)
    section = md.split("### Failed checks\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(section) == 2
    assert section[1].startswith("- **resnet18\\[bundled\\]** run (error): resnet18.onnx")


def test_pins_show_nested_driver_extra_compiler_pins_and_short_targets(doc):
    attrs = ",".join(f"+f{i}" for i in range(34))
    m = doc["results"][0]["manifest"]
    m["compiler"]["graph_optimization_level"] = "all"
    m["driver"] = {
        "blas": {"name": "scipy-openblas", "version": "0.3.31", "config": "OpenBLAS ..."},
        "cpu": "AMD EPYC",
        "gpu": None,
    }
    m["target"]["canonical"] = f"llvm -mattr={attrs} -mcpu=znver5 -mtriple=x86_64-linux-gnu"
    pins = to_markdown(doc).split("### Manifest pins\n\n", 1)[1].split("\n\n", 1)[0]
    row = re.split(r"(?<!\\)\|", pins.splitlines()[2])[1:-1]
    assert row[0].strip() == "mlp"
    assert [c.strip() for c in row[2:6]] == [
        "onnxruntime 1.32.0 (graph_optimization_level=all)",
        "onnxruntime 1.32.0",
        "blas=scipy-openblas 0.3.31, cpu=AMD EPYC",
        "llvm -mattr=+f0,+f1,+f2,+f3,… (+30) -mcpu=znver5 -mtriple=x86_64-linux-gnu",
    ]


def test_a_target_pinned_inside_the_compiler_is_shortened_too(doc):
    """The bundled compiler pins its target: a 330-character cell before."""
    attrs = ",".join(f"+avx512f{i}" for i in range(30))
    doc["results"][1]["manifest"]["compiler"]["target"] = f"llvm -mattr={attrs} -mcpu=znver4"
    pins = to_markdown(doc).split("### Manifest pins\n\n", 1)[1].split("\n\n", 1)[0]
    row = pins.splitlines()[3]
    assert "target=llvm -mattr=+avx512f0,+avx512f1,+avx512f2,+avx512f3,… (+26) -mcpu=znver4" in row
    assert max(len(c) for c in row.split("|")) < 120


def test_counted_figures_and_errors_are_listed(doc):
    doc["results"][0]["counted"] = {
        "instructions": 242496.0, "bytes_loaded": 2185520.0, "bytes_stored": 9472.0,
        "target": "llvm -mattr=+neon -mtriple=aarch64-linux-gnu",
    }  # fmt: skip
    doc["results"][0]["latency_status"] = "emulated"
    doc["results"][1]["counted"] = {"error": "counted run of b failed: over its budget of 5 s"}
    md = to_markdown(doc)
    section = md.split("### Counted cost")[1].split("###")[0]
    assert "emulated latency: none; counted: 242.5 k instructions, 2.195 MB moved" in section
    assert "over its budget of 5 s" in section
