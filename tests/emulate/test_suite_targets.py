"""Suites with several targets: one entry (and so one result) per (model, backend, target)."""

from __future__ import annotations

from pathlib import Path

import pytest

from guard.core.errors import SuiteError
from guard.suite import load_suite

ARM = "llvm -mtriple=aarch64-linux-gnu -mattr=+neon"


def _suite(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text("schema_version: 1\nsuite: s\n" + text)
    return p


def test_defaults_targets_give_one_entry_per_target(tmp_path: Path) -> None:
    suite = load_suite(_suite(tmp_path, f"""
defaults: {{backends: [bundled], targets: [host, "{ARM}"]}}
models:
  - {{name: mlp, source: "zoo:mlp"}}
  - {{name: digits, source: "zoo:digits", target: host}}
  - {{name: three, source: "zoo:mlp", targets: ["{ARM} -mcpu=neoverse-n1", host]}}
"""))  # fmt: skip
    got = [(m.name, m.target) for m in suite.models]
    assert got == [
        ("mlp", "host"), ("mlp", ARM), ("digits", "host"),
        ("three", f"{ARM} -mcpu=neoverse-n1"), ("three", "host"),
    ]  # fmt: skip
    # messages about one of them say which target
    assert suite.models[1].where.endswith(f"models[0] (mlp) [{ARM}]")
    assert suite.models[2].where.endswith("models[1] (digits)")


def test_the_one_target_spelling_still_works(tmp_path: Path) -> None:
    suite = load_suite(_suite(tmp_path, f"""
defaults: {{target: "{ARM}"}}
models: [{{name: mlp, source: "zoo:mlp"}}]
"""))  # fmt: skip
    assert [m.target for m in suite.models] == [ARM]
    suite = load_suite(_suite(tmp_path, 'models: [{name: mlp, source: "zoo:mlp"}]\n'))
    assert [m.target for m in suite.models] == ["host"]


@pytest.mark.parametrize(
    ("text", "key", "why"),
    [
        ("defaults: {target: host, targets: [host]}", "defaults.targets", "not both"),
        ("defaults: {targets: []}", "defaults.targets", "non-empty list"),
        ("defaults: {targets: host}", "defaults.targets", "non-empty list"),
        ("defaults: {targets: [host, 3]}", r"defaults.targets\[1\]", "expected a target string"),
        ("defaults: {targets: [host, ' host']}", r"defaults.targets\[1\]", "listed twice"),
        ("defaults: {target: ''}", "defaults.target", "expected a target string"),
    ],
)
def test_bad_targets_name_the_key(tmp_path: Path, text: str, key: str, why: str) -> None:
    path = _suite(tmp_path, text + '\nmodels: [{name: mlp, source: "zoo:mlp"}]\n')
    with pytest.raises(SuiteError, match=rf"s.yaml: {key}: .*{why}"):
        load_suite(path)


def test_model_level_bad_targets(tmp_path: Path) -> None:
    path = _suite(tmp_path, 'models: [{name: mlp, source: "zoo:mlp", targets: [host, host]}]\n')
    with pytest.raises(
        SuiteError, match=r"models\[0\].targets\[1\]: target 'host' is listed twice"
    ):
        load_suite(path)


def test_shipped_aarch64_suite_lists_host_and_aarch64() -> None:
    suite = load_suite(Path(__file__).parents[2] / "suites" / "aarch64.yaml")
    assert {m.target for m in suite.models} == {"host", ARM}
    assert all(m.backends == ("bundled",) for m in suite.models)
