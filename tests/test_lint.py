"""House style is checked, not hoped for: ruff (pinned in the test extra) over the tree,
ruff's formatter, and mypy over the packages that type-check clean."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Packages mypy passes with no error under pyproject's [tool.mypy] (every function typed
# there). A package joins this list when it is clean; it never leaves it.
CLEAN_PACKAGES = [
    "guard/bench",
    "guard/manifest",
    "guard/golden",
    "guard/zoo",
    "guard/track",
    "guard/suite",
    "guard/schema.py",
    "guard/merge.py",
    "guard/shard.py",
]


def _tool(name: str) -> str:
    exe = Path(sys.executable).with_name(name)
    found = str(exe) if exe.exists() else shutil.which(name)
    assert found, f"{name} is not installed: pip install -e '.[test]'"
    return found


def test_ruff_check_is_clean():
    out = subprocess.run(
        [_tool("ruff"), "check", "--no-cache", "guard", "tests", "benchmarks"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


# The tree is ruff-formatted; a change that is not fails here (run `ruff format`).
def test_ruff_format_is_clean():
    out = subprocess.run(
        [_tool("ruff"), "format", "--check", "--no-cache", "guard", "tests", "benchmarks"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


@pytest.mark.slow  # a cold mypy run over these packages and what they import: ~30 s
def test_mypy_is_clean_on_the_clean_packages(tmp_path):
    # follow_imports=silent: modules outside the list are read for their types, and their
    # own errors are not this test's (they are counted in the report, not hidden here).
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--follow-imports=silent",
            "--cache-dir",
            str(tmp_path / "mypy"),
            *CLEAN_PACKAGES,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
