"""The dashboard reads real MLflow runs back: one interactive, self-contained page."""

from __future__ import annotations

import copy
import datetime as dt
import json
import re

import pytest

from guard.cli.main import main
from guard.core.errors import UsageError
from guard.report import dashboard as D
from guard.report import dashboard_charts as C
from guard.report import dashboard_series as S


def _row(model="m", backend="b", target="host", arch="x86_64", t="2026-01-01", **metrics):
    row = {"run_id": f"r{t}", "start_time": dt.datetime.fromisoformat(t).replace(tzinfo=dt.UTC),
           "tags.guard.model": model, "tags.guard.backend": backend, "tags.guard.target": target,
           "tags.guard.arch": arch, "tags.guard.git.commit": "c" * 40}  # fmt: skip
    row.update({f"metrics.{k.replace('__', '.')}": v for k, v in metrics.items()})
    return row


def test_series_split_by_backend_target_and_arch_oldest_first():
    rows = [_row(t="2026-01-03"), _row(t="2026-01-01"), _row(backend="o"), _row(arch="aarch64")]
    series = S.group_series(rows)
    assert [(s.backend, s.arch, len(s.points)) for s in series] == [
        ("b", "aarch64", 1),
        ("b", "x86_64", 2),
        ("o", "x86_64", 1),
    ]
    assert series[1].points[0].time < series[1].points[1].time


def test_pin_changes_name_the_field_and_both_values():
    rows = [_row(t=f"2026-01-0{i}") for i in (1, 2, 3)]
    for r, v in zip(rows, ("1.31.1", "1.31.1", "1.32.0"), strict=True):
        r["params.runtime.version"] = v
        r["params.tuning_cache.hits"] = "7"  # counters are not pins
    (s,) = S.group_series(rows)
    (change,) = S.pin_changes(s.points)
    assert change["index"] == 2 and change["changes"] == ["runtime.version: 1.31.1 → 1.32.0"]


def test_latency_axis_is_log_and_spans_data_and_bound():
    axis = C.latency_axis([0.0366, 0.0379], 20.0)
    lo, hi = axis["range"]
    assert axis["type"] == "log" and lo < -1.43 and hi > 1.3  # 0.0366 ms and 20 ms inside
    narrow = C.latency_axis([0.0366, 0.0379], None)["range"]
    assert narrow[1] - narrow[0] >= 1.0  # a 4% wiggle is not stretched over the whole height


def test_change_points_come_from_guard_history():
    rows = [_row(t=f"2026-01-0{i + 1}", latency_ms__p50=v)
            for i, v in enumerate([2.0, 2.04, 1.98, 2.02, 4.1])]  # fmt: skip
    (s,) = S.group_series(rows)
    S.analyse_series(s)
    (step,) = s.steps
    assert step["index"] == 4 and step["pct"] == pytest.approx(103, abs=2)


def test_change_points_ignore_runs_flagged_as_contended():
    """Issue 28 item 4: a +50% step made of contended runs is not a change point; the
    series says how many runs it left out, and a quiet step is still found."""
    values = [2.0, 2.02, 1.99, 2.01, 2.0, 3.0, 3.02, 2.99, 3.01, 3.0]
    rows = [_row(t=f"2026-01-{i + 1:02d}", latency_ms__p50=v, contention__flagged=float(i >= 5))
            for i, v in enumerate(values)]  # fmt: skip
    (s,) = S.group_series(rows)
    S.analyse_series(s)
    assert s.steps == [] and "ignore 5 run(s) flagged as contended" in s.analysis_note
    # Older runs without the block: their preflight contention decides.
    for r in rows:
        r["metrics.preflight.contention"] = 0.6 if r.pop("metrics.contention.flagged") else 0.0
    (old,) = S.group_series(rows)
    S.analyse_series(old)
    assert old.steps == [] and "ignore 5 run(s)" in old.analysis_note
    for r in rows:
        r["metrics.preflight.contention"] = 0.0
    (quiet,) = S.group_series(rows)
    S.analyse_series(quiet)
    assert [st["index"] for st in quiet.steps] == [5] and "contended" not in quiet.analysis_note


# The counted history of the bundled results when ``counted``: +3% at the third run, then
# the emulator changes at the fourth (a break: counts before and after are not compared).
COUNTED_INSTRUCTIONS = (1_000_000, 1_000_000, 1_030_000, 1_030_000, 1_030_000)
COUNTED_EMULATOR = ("qemu-x86_64 7.2.22",) * 3 + ("qemu-x86_64 8.2.2",) * 2


def counted_block(i):
    return {"instructions": COUNTED_INSTRUCTIONS[i], "bytes_loaded": 4_000_000,
            "bytes_stored": 1_000_000, "loads": 90_000, "stores": 30_000, "wall_s": 1.5,
            "fingerprint": {"engine": "qemu-tcg-plugin", "emulator": COUNTED_EMULATOR[i],
                            "plugin_sha256": "ab" * 32, "target": "x86-64-v3",
                            "input_sha256": "cd" * 32, "artefact_sha256": "ef" * 32}}  # fmt: skip


def _log_history(uri, doc, n=5, counted=False):
    """n invocations; the last is 2x slower and bumps the onnxruntime runtime pin."""
    from guard.track import log_results

    for i in range(n):
        d = copy.deepcopy(doc)
        d["suite"] = "dash"
        d["started"] = f"2026-11-2{i}T10:00:00+00:00"
        d["git"]["commit"] = f"{i}" * 40
        for r in d["results"]:
            if r.get("latency_ms"):
                r["latency_ms"]["p50"] *= 2.0 if i == n - 1 else 1.0 + 0.004 * (i % 2)
                r["samples_ms"] = [x * (2.0 if i == n - 1 else 1.0) for x in r["samples_ms"]]
                if counted and r["backend"] == "bundled":
                    r["counted"] = counted_block(i)
            if i == n - 1 and r.get("manifest") and r["backend"] == "onnxruntime":
                r["manifest"]["runtime"]["version"] = "1.33.0"
        log_results(d, uri)


@pytest.mark.slow
def test_dashboard_from_a_real_store(tmp_path, monkeypatch, doc, capsys):
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    _log_history(uri, doc)
    out = tmp_path / "d.html"
    assert main(["dashboard", "dash", "--tracking-uri", uri, "--out", str(out)]) == 0
    said = capsys.readouterr().out
    # The error result is a FAILED run (guard.track.log) that readers still show: 4 series.
    assert "5 invocation(s)" in said and "4 series" in said, said
    page = out.read_text()
    # Self-contained: plotly's bundle is inline; outside it the page references nothing.
    from plotly.offline import get_plotlyjs

    bundle = get_plotlyjs()
    assert bundle in page
    rest = page.replace(bundle, "")
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", rest) and "<link" not in rest
    assert page.count('class="plotly-graph-div"') == 3  # the errored series has no points
    for needle in ("p10-p90", "change point +99.6%", "runtime.version: 1.32.0 \\u2192 1.33.0",
                   'data-filter="backend"', 'data-filter="arch"', "Regressions"):  # fmt: skip
        assert needle in page, needle
    rows = re.findall(r'<tr class="filterable"[^>]*>.*?</tr>', page, re.S)
    assert len(rows) == 3 and all("+99.6% (regression)" in r for r in rows)
    assert all("3333333333..4444444444" in r for r in rows)  # the commit range of the step


@pytest.mark.slow
def test_pages_that_say_what_is_missing(tmp_path, monkeypatch, doc, capsys):
    from mlflow import MlflowClient

    from guard.track import log_results

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    suite = tmp_path / "dash.yaml"
    suite.write_text("schema_version: 1\nsuite: dash\nmodels:\n  - {name: mlp, source: zoo:mlp}\n")
    empty = tmp_path / "empty.html"
    assert main(["dashboard", str(suite), "--tracking-uri", uri, "--out", str(empty)]) == 0
    assert "No runs of suite dash are logged" in empty.read_text()
    # A name that is neither a suite nor an experiment is bad input, and writes nothing.
    assert (
        main(["dashboard", "nosuch", "--tracking-uri", uri, "--out", str(tmp_path / "n.html")]) == 2
    )
    assert not (tmp_path / "n.html").exists()
    assert "nosuch" in capsys.readouterr().err
    # One run; then a second arch.
    one = copy.deepcopy(doc)
    one["suite"] = "dash"
    log_results(one, uri)
    page = tmp_path / "one.html"
    assert main(["dashboard", "dash", "--tracking-uri", uri, "--out", str(page)]) == 0
    assert "One run so far" in page.read_text()
    arm = copy.deepcopy(one)
    for r in arm["results"]:
        if r.get("manifest"):
            r["manifest"]["host"]["arch"] = "aarch64"
    log_results(arm, uri)
    assert main(["dashboard", "dash", "--tracking-uri", uri, "--out", str(page)]) == 0
    assert "Runs from 2 archs (aarch64, x86_64)" in page.read_text()
    # Deleted experiment.
    client = MlflowClient(uri)
    client.delete_experiment(client.get_experiment_by_name("guard/dash").experiment_id)
    assert main(["dashboard", "dash", "--tracking-uri", uri, "--out", str(page)]) == 0
    assert "was deleted" in page.read_text()


def test_an_unknown_suite_file_is_exit_2(tmp_path):
    with pytest.raises(UsageError, match="no such suite file"):
        D.resolve_suite(str(tmp_path / "nope.yaml"))


def test_links_to_mlflow_runs_on_a_server_only():
    link = D._mlflow_link("http://127.0.0.1:5000/", "7")
    assert link("abc") == "http://127.0.0.1:5000/#/experiments/7/runs/abc"
    assert D._mlflow_link("sqlite:////tmp/m.db", "7")("abc") is None


def test_points_carry_their_mlflow_url_for_a_click():
    rows = [_row(t=f"2026-01-0{i + 1}", latency_ms__p50=2.0) for i in range(2)]
    (s,) = S.group_series(rows)
    fig = C.series_figure(s, D._mlflow_link("http://127.0.0.1:5000", "3"))
    p50 = next(t for t in fig.data if t.name == "p50")
    assert [c[6] for c in p50.customdata] == [
        f"http://127.0.0.1:5000/#/experiments/3/runs/{p.run_id}" for p in s.points
    ]


def test_a_counted_series_is_drawn_in_its_own_panel():
    rows = [_row(t=f"2026-01-0{i + 1}", latency_ms__p50=2.0, counted__instructions=v)
            for i, v in enumerate([1.0e6, 1.0e6, 1.24e6])]  # fmt: skip
    (s,) = S.group_series(rows)
    fig = C.series_figure(s, lambda _run: None)
    (trace,) = [t for t in fig.data if t.name == "instructions / inference (counted)"]
    assert list(trace.y) == [1.0e6, 1.0e6, 1.24e6]


def test_panels_without_a_value_are_not_drawn():
    rows = [_row(t=f"2026-01-0{i + 1}", latency_ms__p50=2.0, arena_bytes=4096) for i in range(3)]
    (s,) = S.group_series(rows)
    names = [t.name for t in C.series_figure(s, lambda _run: None).data]
    assert "arena (bytes)" in names and "instructions / inference (counted)" not in names
    assert "partitions" not in names and "max abs error" not in names


def _counted_rows(values, emulators=None, **fp):
    rows = []
    for i, v in enumerate(values):
        fingerprint = {"engine": "qemu-tcg-plugin", "plugin_sha256": "ab", "target": "x86-64-v3",
                       "input_sha256": "cd", "emulator": (emulators or ["qemu 7.2"] * 9)[i], **fp}  # fmt: skip
        row = _row(t=f"2026-01-0{i + 1}", counted__instructions=v, counted__bytes_loaded=4e6,
                   counted__bytes_stored=1e6)  # fmt: skip
        row["run_id"] = f"run{i}"
        row["tags.guard.git.commit"] = f"{i}" * 40
        row["tags.guard.counted.fingerprint"] = json.dumps(fingerprint)
        rows.append(row)
    (s,) = S.group_series(rows)
    return s


def test_counted_steps_are_exact_at_the_commit_that_made_them():
    # Counts do not move between processes: a 0.6% step past the 0.5% bound is one step at
    # that very commit, however many runs lie around it; 0.04% of wobble is none.
    s = _counted_rows([1e6, 1.0004e6, 1e6, 1.006e6, 1.006e6, 0.99e6])
    S.analyse_series(s)
    assert [(st["point"], st["kind"], round(st["pct"], 2)) for st in s.counted_steps] == [
        (3, "regression", 0.6),
        (5, "improvement", -1.59),
    ]
    assert s.counted_steps[0]["from_commit"] == "2" * 10 and s.counted_steps[0]["run_id"] == "run3"
    assert s.counted_breaks == [] and s.steps == []  # no latency in these runs
    s = _counted_rows([1e6, 1.006e6])
    s.counted_regress_pct = 1.0  # the suite's checks.counted.regress_pct
    S.analyse_series(s)
    assert s.counted_steps == []


def test_a_changed_fingerprint_is_a_break_not_a_step():
    s = _counted_rows(
        [1e6, 1e6, 1.2e6, 1.2e6], emulators=["qemu 7.2", "qemu 7.2", "qemu 8.2", "qemu 8.2"]
    )
    S.analyse_series(s)
    assert s.counted_steps == []
    (brk,) = s.counted_breaks
    assert brk["point"] == 2 and "not comparable: emulator differs" in brk["why"]
    fig = C.series_figure(s, lambda _run: None)
    texts = [a.text for a in fig.layout.annotations]
    assert any("not comparable: emulator differs" in t for t in texts), texts
