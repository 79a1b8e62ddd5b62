"""Change points and creep on synthetic histories."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from guard.compare import history as H
from guard.core.errors import UsageError


def test_one_step_is_found_where_it_happened():
    rng = np.random.default_rng(0)
    v = list(10 * np.exp(rng.normal(0, 0.02, 20))) + list(11.4 * np.exp(rng.normal(0, 0.02, 15)))
    a = H.analyse(v, bound=15.0)
    assert [s["index"] for s in a["steps"]] == [20]
    assert a["steps"][0]["pct"] == pytest.approx(14, abs=3)
    assert a["headroom_consumed"] == pytest.approx(1.4 / 5.0, abs=0.08)
    text = H.format_history("mlp latency_ms.p50", a)
    assert "step at 20" in text and "headroom" in text


def test_noise_alone_has_no_step_and_no_trend():
    rng = np.random.default_rng(1)
    misses = 0
    for _ in range(20):
        a = H.analyse(list(10 * np.exp(rng.normal(0, 0.05, 40))))
        misses += bool(a["steps"]) or a["trend"]["significant"]
    assert misses <= 1


def test_creep_is_a_trend_and_eats_headroom():
    rng = np.random.default_rng(2)
    v = 10 * np.exp(np.linspace(0, 0.2, 40) + rng.normal(0, 0.01, 40))
    a = H.analyse(list(v), bound=14.0)
    assert a["trend"]["significant"] and a["trend"]["pct_per_run"] == pytest.approx(0.51, abs=0.1)
    assert 0.35 < a["headroom_consumed"] < 0.75
    assert "creep:" in H.format_history("m", a)


def test_already_past_the_bound():
    a = H.analyse([10, 10, 10, 12, 12, 12], bound=9.0, min_size=2)
    assert math.isinf(a["headroom_consumed"])
    assert "all of it" in H.format_history("m", a)


def test_bad_series():
    with pytest.raises(UsageError):
        H.analyse([1.0])
    with pytest.raises(UsageError):
        H.analyse([1.0, -1.0])


def test_series_from_runs_orders_oldest_first():
    frame = pd.DataFrame(
        {
            "start_time": pd.to_datetime(["2026-11-03", "2026-11-01", "2026-11-02"]),
            "metrics.latency_ms.p50": [3.0, 1.0, None],
            "tags.guard.git.commit": ["c" * 40, "a" * 40, "b" * 40],
        }
    )
    values, labels = H.series_from_runs(frame, "latency_ms.p50")
    assert values == [1.0, 3.0]
    assert labels[0].startswith("aaaaaaaaaa@2026-11-01")
    assert H.series_from_runs(frame, "nope") == ([], [])


def test_runs_without_a_commit_tag_are_labelled_nogit():
    """Issue 28 item 2: with ``--branch ''`` runs logged outside git join the series; their
    missing commit tag is NaN in the frame, and slicing it raised a TypeError (exit 3)."""
    frame = pd.DataFrame(
        {
            "start_time": pd.to_datetime(["2026-11-01", "2026-11-02", "2026-11-03"]),
            "metrics.latency_ms.p50": [1.0, 2.0, 3.0],
            "tags.guard.git.commit": ["a" * 40, None, ""],
        }
    )
    values, labels = H.series_from_runs(frame, "latency_ms.p50")
    assert values == [1.0, 2.0, 3.0]
    assert [lab.split("@")[0] for lab in labels] == ["aaaaaaaaaa", "nogit", "nogit"]


@pytest.mark.slow
def test_history_cli_on_a_real_store(tmp_path, capsys):
    """Ten runs logged to sqlite MLflow, a +15% step after the sixth."""
    from compare_fixtures import doc, result

    from guard.cli.main import main
    from guard.track import log_results

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    rng = np.random.default_rng(5)
    for i in range(10):
        level = 2.0 if i < 6 else 2.3
        r = result("mlp", level * np.exp(rng.normal(0, 0.01, 50)))
        r["latency_ms"]["p50"] = level * float(np.exp(rng.normal(0, 0.01)))
        d = doc(r)
        d["git"] = {"commit": f"c{i}".ljust(40, "0"), "dirty": False, "branch": "main"}
        d["started"] = f"2026-11-29T13:{i:02d}:00+00:00"  # a run's time orders its history
        log_results(d, uri)
    out = tmp_path / "h.json"
    code = main(["history", "smoke", "--model", "mlp", "--tracking-uri", uri, "--bound", "3.0",
                 "--json", str(out)])  # fmt: skip
    assert code == 0
    text = capsys.readouterr().out
    assert "step at c600000000@" in text and "headroom to the bound 3 consumed: 29%" in text
    (series,) = json.loads(out.read_text())["series"]
    assert series["analysis"]["steps"][0]["pct"] == pytest.approx(15, abs=3)
    assert main(["history", "smoke", "--model", "nope", "--tracking-uri", uri]) == 2


@pytest.mark.slow
def test_counted_history_is_exact_and_says_where_counts_stop_comparing(tmp_path, capsys):
    """Eight counted runs: +0.8% at the fourth (one exact step, where PELT's 1% noise floor
    would see none), 0.01% of wobble elsewhere, and the emulator changed at the seventh."""
    from compare_fixtures import doc, result

    from guard.cli.main import main
    from guard.track import log_results

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    counts = [1_000_000, 1_000_100, 1_000_000, 1_008_000, 1_008_100, 1_008_000, 1_300_000,
              1_300_000]  # fmt: skip
    for i, n in enumerate(counts):
        r = result("mlp", [2.0] * 20)
        r["counted"] = {
            "instructions": n, "bytes_loaded": 4_000_000, "bytes_stored": 1_000_000,
            "fingerprint": {"engine": "qemu-tcg-plugin", "plugin_sha256": "ab",
                            "emulator": "qemu 7.2" if i < 6 else "qemu 8.2",
                            "target": "x86-64-v3", "input_sha256": "cd"},
        }  # fmt: skip
        d = doc(r)
        d["git"] = {"commit": f"c{i}".ljust(40, "0"), "dirty": False, "branch": "main"}
        d["started"] = f"2026-11-29T13:{i:02d}:00+00:00"
        log_results(d, uri)
    out = tmp_path / "h.json"
    code = main(["history", "smoke", "--model", "mlp", "--tracking-uri", uri,
                 "--metric", "counted.instructions", "--json", str(out)])  # fmt: skip
    assert code == 0
    text = capsys.readouterr().out
    assert "step at c300000000@" in text and "(+0.8%)" in text, text
    assert "counts not comparable: emulator differs (qemu 7.2 vs qemu 8.2) at c600000000@" in text
    (series,) = json.loads(out.read_text())["series"]
    (step,) = series["analysis"]["steps"]
    assert step["before"] == 1_000_000 and step["after"] == 1_008_000
    assert [b["index"] for b in series["analysis"]["breaks"]] == [6]


@pytest.mark.slow
def test_history_keeps_backends_and_targets_apart(tmp_path, capsys):
    """mlp on onnxruntime (2 ms) and bundled (4.8 ms), five runs each, no change in either:
    mixed into one series, the switch between backends read as a +138% step."""
    from compare_fixtures import doc, result

    from guard.cli.main import main
    from guard.track import log_results

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    rng = np.random.default_rng(7)
    for i in range(5):
        rows = []
        for backend, target, level in (
            ("onnxruntime", "host", 2.0),
            ("bundled", "host", 4.77),
            ("bundled", "llvm -mtriple=aarch64-linux-gnu", 9.0),
        ):
            r = result("mlp", level * np.exp(rng.normal(0, 0.01, 50)))
            r["backend"], r["target"] = backend, target
            r["latency_ms"]["p50"] = level * float(np.exp(rng.normal(0, 0.01)))
            rows.append(r)
        d = doc(*rows)
        d["git"] = {"commit": f"c{i}".ljust(40, "0"), "dirty": False, "branch": "main"}
        d["started"] = f"2026-11-29T13:{i:02d}:00+00:00"  # a run's time orders its history
        log_results(d, uri)
    out = tmp_path / "h.json"
    assert (
        main(["history", "smoke", "--model", "mlp", "--tracking-uri", uri, "--json", str(out)]) == 0
    )
    text = capsys.readouterr().out
    assert "mlp [onnxruntime] host" in text and "mlp [bundled] host" in text
    assert "no step detected" in text and "step at" not in text
    series = json.loads(out.read_text())["series"]
    assert {(s["backend"], s["target"]) for s in series} == {
        ("onnxruntime", "host"),
        ("bundled", "host"),
        ("bundled", "llvm -mtriple=aarch64-linux-gnu"),
    }
    assert all(not s["analysis"]["steps"] and s["analysis"]["points"] == 5 for s in series)


def test_a_step_in_the_newest_of_five_runs_is_found():
    """Short histories cut shorter segments: a 2x slower head is a change point at once."""
    a = H.analyse([2.0, 2.04, 1.98, 2.02, 4.1])
    assert [s["index"] for s in a["steps"]] == [4]
    assert H.default_min_size(40) == 3


def test_bound_comes_from_the_suite_per_arch():
    from pathlib import Path

    from guard.suite import load_suite

    suite = load_suite(Path(__file__).resolve().parents[2] / "suites" / "smoke.yaml")
    assert H.suite_bound(suite, "mlp", "latency_ms.p50", "x86_64") == 20.0
    assert H.suite_bound(suite, "mlp", "latency_ms.p90", "aarch64") == 80.0
    assert H.suite_bound(suite, "mlp", "latency_ms.p99", "x86_64") is None
    assert H.suite_bound(suite, "nope", "latency_ms.p50") is None
    assert H.suite_bound(suite, "mlp", "arena_bytes") is None
