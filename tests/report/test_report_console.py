"""render_console and progress, rendered into in-memory consoles."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from guard.report import progress, render_console, results_table


def _console(width: int = 140, terminal: bool = False) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    console = Console(
        file=buf,
        width=width,
        force_terminal=terminal,
        color_system="standard" if terminal else None,
        legacy_windows=False,
    )
    return console, buf


def test_table_rows_failures_and_warnings(doc):
    console, buf = _console()
    render_console(doc, console)
    out = buf.getvalue()
    lines = out.splitlines()
    for model, backend in [("mlp", "onnxruntime"), ("mlp", "bundled"), ("resnet18", "bundled")]:
        assert any(model in line and backend in line for line in lines)
    failing = next(line for line in lines if "mlp" in line and "bundled" in line and "fail" in line)
    assert "1.84" in failing and "latency" in failing
    assert "❌ guard smoke: 1 failed, 1 errored, 2 passed of 4 results" in out
    assert f"✗ mlp[bundled] latency: {doc['results'][1]['checks'][0]['message']}" in out
    assert "✗ resnet18[bundled] error: resnet18.onnx" in out
    assert "! mlp[bundled]: tuning cache has no entry" in out


def test_verdicts_are_coloured(doc):
    console, buf = _console(terminal=True)
    render_console(doc, console)
    out = buf.getvalue()
    assert "\x1b[1;31mfail" in out  # bold red
    assert "\x1b[32mpass" in out  # green
    assert "\x1b[1;35merror" in out  # bold magenta


def test_markup_in_names_is_printed_literally(doc):
    doc["results"][0]["model"] = "[bold]net[/bold]"
    doc["results"][1]["checks"][0]["message"] = "bound [red]exceeded"
    console, buf = _console()
    render_console(doc, console)
    out = buf.getvalue()
    assert "[bold]net[/bold]" in out
    assert "bound [red]exceeded" in out


def test_narrow_console_drops_columns_but_keeps_rows(doc):
    console, buf = _console(width=80)
    render_console(doc, console)
    lines = buf.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "p90" not in buf.getvalue()
    assert sum(1 for line in lines if line.lstrip().startswith(("mlp", "resnet18"))) == 4
    assert len(results_table(doc).columns) == 9
    assert len(results_table(doc, compact=True).columns) == 7


def test_degenerate_documents(capsys):
    console, buf = _console()
    render_console({}, console)
    assert "no results" in buf.getvalue()
    render_console({"results": [{"verdict": "error"}, None]})  # default console: stdout
    assert "error (no message)" in capsys.readouterr().out


def test_progress_is_silent_off_a_terminal(monkeypatch):
    monkeypatch.delenv("CI", raising=False)  # under CI it logs a line per step (below)
    console, buf = _console(terminal=False)
    with progress(3, console) as p:
        p.step("mlp[onnxruntime] build")
        p.advance()
        p.step("mlp[onnxruntime] run")
        p.advance()
    assert buf.getvalue() == ""
    assert (p.completed, p.total, p.label) == (2, 3, "mlp[onnxruntime] run")


def test_progress_draws_a_bar_on_a_terminal():
    console, buf = _console(width=100, terminal=True)
    with progress(2, console) as p:
        p.step("resnet18[bundled] build")
        p.advance()
        p.step("resnet18[bundled] run [x]")
        p.advance()
        p.advance()  # one too many: must not break the bar
    out = buf.getvalue()
    assert "resnet18[bundled] build" in out
    assert "resnet18[bundled] run [x]" in out  # label shown literally, not as markup
    assert "2/2" in out and "3/2" not in out
    assert p.completed == 3


def test_progress_propagates_errors_and_stops_the_bar():
    console, buf = _console(terminal=True)
    with pytest.raises(RuntimeError, match="boom"):
        with progress(5, console) as p:
            p.step("building")
            raise RuntimeError("boom")
    # the live display is gone: plain printing works again, with no bar redrawn after it
    console.print("after")
    assert buf.getvalue().rstrip().endswith("after")


def test_progress_without_a_terminal_logs_steps_only_under_ci(monkeypatch):
    import io

    from rich.console import Console

    from guard.report import progress

    for ci, expect in ((None, ""), ("true", "guard: [1/2] a [x]\nguard: [2/2] b [y]\n")):
        if ci is None:
            monkeypatch.delenv("CI", raising=False)
        else:
            monkeypatch.setenv("CI", ci)
        buf = io.StringIO()
        with progress(2, Console(file=buf, force_terminal=False, width=80)) as bar:
            bar.step("a [x]")
            bar.advance()
            bar.step("b [y]")
            bar.advance()
        assert buf.getvalue() == expect


CONTENDED = [
    "load average 3.76 exceeds 2 cores - 0.5: other work competes for the CPU; latencies are "
    "not trustworthy",
    "other processes used 100% of the spare CPU during the timed loop (> 20%): latencies may "
    "be off by 2x; re-run on a quiet machine",
    "round 1/2: other processes used 89% of the spare CPU during the timed loop (> 20%): "
    "latencies may be off by 2x; re-run on a quiet machine",
    "round 1/2: this process got 36% of a core during the timed loop (< 90%): it was "
    "preempted and its samples include waiting; re-run on a quiet machine",
]


def test_contention_is_one_line_per_suite(doc):
    """A busy machine used to print two near-identical warnings per result (and per round)."""
    from rich.console import Console

    from guard.report import _summary as S
    from guard.report import render_console, to_markdown

    for r in doc["results"]:
        r["preflight"] = {"warnings": list(CONTENDED)}
    doc["results"][1]["preflight"]["warnings"].append("build: tuning cache miss for conv2d")
    warns = S.warnings(doc)
    assert len(warns) == 2
    suite, line = warns[0]
    assert suite == "smoke" and line.startswith("CPU contention while measuring 4 of 4 result(s)")
    assert "up to 100% of the spare CPU" in line and "as little as 36% of a core" in line
    assert warns[1] == ("mlp[bundled]", "build: tuning cache miss for conv2d")
    console = Console(width=200, record=True, force_terminal=False)
    render_console(doc, console)
    assert console.export_text().count("CPU contention") == 1
    assert to_markdown(doc).count("CPU contention") == 1


def test_warnings_are_whole_or_cut_between_words(doc):
    """Issue 28 item 8: warnings were cut mid-word at 300 characters, a command in one
    unusable. A warning is kept whole to 1000 characters; past that (and any other message
    past its limit) it is cut between words, with ' …'."""
    from guard.report import _summary as S

    command = "guard golden update suites/a-rather-long-suite-name.yaml --model m --reason " + (
        "'inputs changed: " + ", ".join(f"x{i}.seed 0 -> 1" for i in range(12)) + "'"
    )
    long = "inputs changed since the golden was stored: store them with: " + command
    assert 300 < len(long) < 1000
    doc["results"][0]["preflight"] = {"warnings": [long]}
    (warn,) = [msg for _, msg in S.warnings(doc) if "golden" in msg]
    assert warn == long
    console, buf = _console(width=120)
    render_console(doc, console)
    assert "x11.seed 0 -> 1'" in buf.getvalue().replace("\n", " ")
    words = "word " * 100
    cut = S.one_line(words + "tail", 50)
    assert cut.endswith("word …") and len(cut) <= 52 and "wor …" not in cut
    assert S.one_line("x" * 80, 50) == "x" * 49 + " …"  # one word: cut where it must be
