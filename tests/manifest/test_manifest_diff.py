"""Manifest diffs: every differing field, pinned first, and their human text."""

from __future__ import annotations

import copy
from typing import Any

from guard.manifest import diff_manifests, format_diff

BASE: dict[str, Any] = {
    "schema_version": 1,
    "compiler": {"name": "onnxruntime", "version": "1.31.1"},
    "runtime": {"name": "onnxruntime", "version": "1.31.1"},
    "driver": {"kernel": "6.8.0", "cpu": "Xeon", "microcode": None, "blas": None, "gpu": None},
    "target": {"raw": "host", "canonical": "llvm -mcpu=x86-64-v4 -mtriple=x86_64-linux-gnu"},
    "tuning_cache": {"path": None, "sha256": None, "entries": None, "hits": None, "misses": None},
    "model": {"sha256": "a" * 64, "opset": 17, "inputs": {"x": {"shape": [1, 3]}}},
    "host": {"arch": "x86_64", "cpu": "Xeon", "cores": 2, "threads": 1},
    "guard": {"version": "0.1.0", "commit": "abc", "dirty": False},
    "sha256": "1" * 64,
}


def head() -> dict[str, Any]:
    h = copy.deepcopy(BASE)
    h["runtime"]["version"] = "1.32.0"
    h["compiler"]["version"] = "1.32.0"
    h["guard"]["commit"] = "def"
    h["model"]["inputs"]["x"]["shape"] = [4, 3]
    h["driver"]["gpu"] = {"vendor": "nvidia", "driver": "570.86.15", "cuda": "12.8"}
    h["sha256"] = "2" * 64
    return h


def test_identical_manifests_have_no_diff() -> None:
    assert diff_manifests(BASE, copy.deepcopy(BASE)) == {}
    assert format_diff({}).startswith("manifests match")


def test_every_differing_field_pinned_first() -> None:
    d = diff_manifests(BASE, head())
    assert list(d) == [
        "compiler.version",
        "driver.gpu.cuda",
        "driver.gpu.driver",
        "driver.gpu.vendor",
        "model.inputs.x.shape",
        "runtime.version",
        "guard.commit",
    ]
    assert d["runtime.version"] == ["1.31.1", "1.32.0"]
    assert d["driver.gpu.driver"] == [None, "570.86.15"]  # absent reads as null
    assert d["model.inputs.x.shape"] == [[1, 3], [4, 3]]
    assert "sha256" not in d  # derived: it says nothing about which pin moved


def test_format_diff_text() -> None:
    h = copy.deepcopy(BASE)
    h["runtime"]["version"] = "1.32.0"
    h["guard"]["commit"] = "def"
    h["tuning_cache"]["hits"] = 12
    assert format_diff(diff_manifests(BASE, h)) == (
        "pinned (the artefacts differ in these):\n"
        "  runtime.version: 1.31.1 → 1.32.0\n"
        "recorded, not pinned:\n"
        "  guard.commit: abc → def\n"
        "  tuning_cache.hits: null → 12"
    )


def test_format_diff_with_only_recorded_differences() -> None:
    h = copy.deepcopy(BASE)
    h["host"]["cores"] = 64
    assert format_diff(diff_manifests(BASE, h)) == "recorded, not pinned:\n  host.cores: 2 → 64"


def test_a_field_only_one_side_has() -> None:
    h = copy.deepcopy(BASE)
    h["compiler"]["opt_level"] = "O3"
    d = diff_manifests(BASE, h)
    assert d == {"compiler.opt_level": [None, "O3"]}
    assert "compiler.opt_level: null → O3" in format_diff(d)


def _write(path, manifest):
    import json

    from guard.manifest.pins import manifest_sha256

    m = copy.deepcopy(manifest)
    m["sha256"] = manifest_sha256(m)
    path.write_text(json.dumps(m))
    return str(path)


def test_cli_exit_code_follows_diff_convention(tmp_path, capsys) -> None:
    """1 when a pin differs (the artefacts are not comparable), 0 when none does."""
    from guard.cli.main import main

    a = _write(tmp_path / "a.json", BASE)
    assert main(["manifest", "diff", a, _write(tmp_path / "b.json", head())]) == 1
    assert "runtime.version: 1.31.1 → 1.32.0" in capsys.readouterr().out
    assert main(["manifest", "diff", a, _write(tmp_path / "same.json", BASE)]) == 0
    recorded_only = copy.deepcopy(BASE)
    recorded_only["guard"]["commit"] = "def"
    assert main(["manifest", "diff", a, _write(tmp_path / "r.json", recorded_only)]) == 0
    assert main(["manifest", "diff", a, str(tmp_path / "missing.json")]) == 2
