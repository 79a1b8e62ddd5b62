"""guard cache: what guard keeps per user, shown and pruned (issue 28 item 9: 1.4 GB grew
in ~/.cache/guard with nothing to show or prune it)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from guard.cli.main import main


def _entry(path: Path, size: int, age_days: float) -> None:
    path.mkdir(parents=True)
    (path / "blob").write_bytes(b"x" * size)
    t = time.time() - age_days * 86400
    os.utime(path, (t, t))


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("GUARD_CACHE", str(root))
    _entry(root / "envs" / "onnxruntime==1.31.1-aaaa", 3 * 2**20, 40)
    _entry(root / "envs" / "onnxruntime==1.32.0-bbbb", 2 * 2**20, 10)
    _entry(root / "zoo" / "resnet50", 1 * 2**20, 1)
    (root / "notes.json").write_text("[]\n")
    return root


def test_show_lists_each_part_and_its_size(cache, capsys):
    assert main(["cache", "show", "--all"]) == 0
    out = capsys.readouterr().out
    assert f"{cache}: 6.0 MiB in 3 entr(ies)" in out
    assert "  envs/: 5.0 MiB in 2 entr(ies)" in out and "  zoo/: 1.0 MiB in 1 entr(ies)" in out
    assert "onnxruntime==1.31.1-aaaa  3.0 MiB" in out


def test_prune_by_age_then_by_size(cache, capsys):
    assert main(["cache", "prune", "--older-than", "30", "--dry-run"]) == 0
    assert "would remove envs/onnxruntime==1.31.1-aaaa (3.0 MiB)" in capsys.readouterr().out
    assert (cache / "envs" / "onnxruntime==1.31.1-aaaa").is_dir()  # a dry run removes nothing
    assert main(["cache", "prune", "--older-than", "30"]) == 0
    assert not (cache / "envs" / "onnxruntime==1.31.1-aaaa").exists()
    capsys.readouterr()
    assert main(["cache", "prune", "--max-size", "1.5M"]) == 0  # the oldest go first
    assert "freed 2.0 MiB (1 entr(ies))" in capsys.readouterr().out
    assert not (cache / "envs" / "onnxruntime==1.32.0-bbbb").exists()
    assert (cache / "zoo" / "resnet50").is_dir() and (cache / "notes.json").is_file()


@pytest.mark.parametrize("argv", [["prune"], ["prune", "--max-size", "lots"],
                                  ["prune", "--older-than", "-1"]])  # fmt: skip
def test_bad_prune_arguments_are_exit_2(cache, argv, capsys):
    assert main(["cache", *argv]) == 2
    assert "guard: error:" in capsys.readouterr().err
