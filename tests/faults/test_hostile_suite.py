"""Hostile suite files: each is one line naming the file and key, exit 2, bounded memory."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from guard.cli.main import main
from guard.core.errors import SuiteError
from guard.suite import MAX_SUITE_BYTES, load_suite

BASE = """schema_version: {sv}
suite: s
defaults:
  backends: [onnxruntime]
  {d}
models:
  - name: m
    source: m.onnx
    {m}
"""


def suite(tmp_path: Path, d: str = "", m: str = "", sv: str = "1") -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(BASE.format(sv=sv, d=d, m=m))
    return p


@pytest.mark.parametrize(
    ("d", "m", "sv", "key", "words"),
    [
        ("options: {bundled: 5}", "", "1", "defaults.options.bundled", "expected a mapping"),
        ("", "options: {tvm: [1]}", "1", "models[0].options.tvm", "expected a mapping"),
        ("options: {bundld: {}}", "", "1", "defaults.options.bundld", "Did you mean 'bundled'"),
        ("checks: {arena: {}}", "", "1", "defaults.checks.arena", "needs 'max_bytes'"),
        ("checks: {partitions: {}}", "", "1", "defaults.checks.partitions", "needs 'max'"),
        ("checks: {tuning: {}}", "", "1", "defaults.checks.tuning", "needs 'min_hit_rate'"),
        ("profile: 1", "", "1", "defaults.profile", "expected a delegate profile"),
        ("", "profile: [a]", "1", "models[0].profile", "expected a delegate profile"),
        ("threads: 1.0e+30", "", "1", "defaults.threads", "out of range"),
        ("threads: 1e30", "", "1", "defaults.threads", "out of range"),
        ("threads: 100000", "", "1", "defaults.threads", "more than guard allows"),
        ("", "threads: 5000", "1", "models[0].threads", "more than guard allows"),
        (
            "checks: {accuracy: {dataset: 'zoo:nope'}}",
            "",
            "1",
            "defaults.checks.accuracy.dataset",
            "unknown dataset 'zoo:nope'",
        ),
        (
            "checks: {accuracy: {dataset: digits-test}}",
            "",
            "1",
            "defaults.checks.accuracy.dataset",
            "expected a dataset name",
        ),
        ("checks: {tolerance: {rtol: .inf}}", "", "1", "defaults.checks.tolerance.rtol", "finite"),
        ("checks: {tolerance: {atol: .inf}}", "", "1", "defaults.checks.tolerance.atol", "finite"),
        ("checks: {tolerance: {atol: .nan}}", "", "1", "defaults.checks.tolerance.atol", "finite"),
        ("checks: {latency: {p50_ms: .inf}}", "", "1", "defaults.checks.latency.p50_ms", "finite"),
        (
            "checks: {latency: {p90_ms: {x86_64: .inf}}}",
            "",
            "1",
            "defaults.checks.latency.p90_ms.x86_64",
            "finite",
        ),
        ("measure: {max_time_s: .inf}", "", "1", "defaults.measure.max_time_s", "finite"),
        ("", "", "true", "schema_version", "unsupported version True"),
        ("", "", "1.0", "schema_version", "unsupported version 1.0"),
        ("build_timeout_s: 0", "", "1", "defaults.build_timeout_s", "must be > 0"),
        ("build_timeout_s: .inf", "", "1", "defaults.build_timeout_s", "finite"),
        (
            "",
            "inputs: {x: {shape: [1.0e+300]}}",
            "1",
            "models[0].inputs.x.shape[0]",
            "non-negative integer",
        ),
        ("", "description: [1, 2]", "1", "models[0].description", "expected a string"),
        ("", "inputs: {1: {shape: [1]}}", "1", "models[0].inputs", "is not a string"),
        (
            "options: {onnxruntime: {providers: 5}}",
            "",
            "1",
            "defaults.options.onnxruntime.providers",
            "expected a list of execution provider names",
        ),
        (
            "options: {bundled: {profile: 5}}",
            "",
            "1",
            "defaults.options.bundled.profile",
            "expected a name",
        ),
        (
            "",
            "options: {bundled: {pipeline: {a: 1}}}",
            "1",
            "models[0].options.bundled.pipeline",
            "expected a name",
        ),
    ],
)
def test_bad_suite_key_is_one_line_exit_2(tmp_path, capsys, d, m, sv, key, words):
    p = suite(tmp_path, d, m, sv)
    with pytest.raises(SuiteError) as info:
        load_suite(p)
    msg = str(info.value)
    assert f"{p}: {key}" in msg or f"{p.resolve()}: {key}" in msg, msg
    assert words in msg and "\n" not in msg
    assert main(["run", str(p), "--no-track"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and words in err


def test_build_timeout_is_read_per_model(tmp_path):
    s = load_suite(suite(tmp_path, "build_timeout_s: 30", "build_timeout_s: 7.5"))
    assert s.models[0].build_timeout_s == 7.5
    s = load_suite(suite(tmp_path, "build_timeout_s: 30"))
    assert s.models[0].build_timeout_s == 30.0


def test_default_build_timeout_is_generous(tmp_path):
    assert load_suite(suite(tmp_path)).models[0].build_timeout_s >= 600


def _bomb(levels: int = 9) -> str:
    lines = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines)


def test_alias_bomb_is_refused_quickly_and_never_expanded(tmp_path, capsys):
    # 9 levels of 9 aliases: 387 million strings if expanded, as an error message would.
    p = tmp_path / "bomb.yaml"
    p.write_text(f"schema_version: 1\nsuite: s\n{_bomb()}\nmodels: *l9\n")
    t0 = time.monotonic()
    assert main(["run", str(p), "--no-track"]) == 2
    assert time.monotonic() - t0 < 20
    err = capsys.readouterr().err
    assert "alias" in err and len(err) < 500


def test_small_aliases_still_work(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(
        "schema_version: 1\nsuite: s\ndefaults:\n  measure: &m {min_iters: 3}\n"
        "models:\n  - {name: a, source: a.onnx, measure: *m}\n"
        "  - {name: b, source: b.onnx, measure: *m}\n"
    )
    s = load_suite(p)
    assert s.models[1].measure["min_iters"] == 3


def test_a_value_in_a_message_is_shortened(tmp_path):
    # An alias-shared list that is not a bomb, but big: the message shows a few items only.
    big = "[" + ", ".join(str(i) for i in range(5000)) + "]"
    with pytest.raises(SuiteError) as info:
        load_suite(suite(tmp_path, f"threads: {big}"))
    assert len(str(info.value)) < 300 and "..." in str(info.value)


def test_recursive_alias_is_refused(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("schema_version: 1\nsuite: s\nmodels: &a [*a]\n")
    with pytest.raises(SuiteError, match="alias"):
        load_suite(p)


def test_deep_nesting_is_refused(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("[" * 100_000)
    with pytest.raises(SuiteError, match="nested too deeply"):
        load_suite(p)


def test_oversized_suite_is_refused_before_reading(tmp_path):
    p = tmp_path / "big.yaml"
    with open(p, "wb") as f:
        f.truncate(MAX_SUITE_BYTES + 1)
    with pytest.raises(SuiteError, match="over guard's limit"):
        load_suite(p)


@pytest.mark.parametrize("dev", ["/dev/zero", "/dev/null", "/dev/urandom"])
def test_device_as_suite_is_refused(dev):
    if not os.path.exists(dev):
        pytest.skip(f"{dev} missing")
    with pytest.raises(SuiteError, match="not a regular file"):
        load_suite(dev)


def test_directory_as_suite_is_refused(tmp_path):
    with pytest.raises(SuiteError, match="is a directory"):
        load_suite(tmp_path)


def test_fifo_as_suite_does_not_block(tmp_path):
    fifo = tmp_path / "s.yaml"
    os.mkfifo(fifo)
    # In a subprocess: a regression would block forever, which a timeout turns into a failure.
    proc = subprocess.run(
        [sys.executable, "-m", "guard.cli.main", "run", str(fifo), "--no-track"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "not a regular file" in proc.stderr and "Traceback" not in proc.stderr


def test_symlink_loop_suite_and_source(tmp_path, capsys):
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop)
    with pytest.raises(SuiteError, match="symlink loop"):
        load_suite(loop)
    src = tmp_path / "loop.onnx"
    src.symlink_to(src)
    p = suite(tmp_path)
    p.write_text(p.read_text().replace("m.onnx", "loop.onnx"))
    assert main(["run", str(p), "--no-track"]) == 2
    err = capsys.readouterr().err
    assert "loop.onnx" in err and "symlink loop" in err and "Traceback" not in err
