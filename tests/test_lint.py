"""House style is checked, not hoped for: ruff (pinned in the test extra) over the tree,
ruff's formatter, and mypy over all of guard/ (pyproject's [tool.mypy])."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


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


@pytest.mark.slow  # a cold mypy run over guard/: ~30 s
def test_mypy_is_clean_on_guard(tmp_path):
    # No paths: pyproject's [tool.mypy] names the files (all of guard/, every function
    # typed), so this is exactly what `mypy` says at the root.
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]


def test_tests_never_import_the_tests_package():
    """``from tests.x import y`` works only where the checkout's root is on sys.path (a
    PYTHONPATH, ``python -m pytest``); the README's plain ``pytest`` on a clean clone cannot
    import a package named ``tests`` and the module fails to collect. Helpers are imported
    relatively (``from ._helpers import``) or by the folder pytest puts on sys.path."""
    import re

    pattern = re.compile(r"^\s*(from|import)\s+tests(\.|\s|$)", re.M)
    offenders = [
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "tests").rglob("*.py"))
        if pattern.search(p.read_text(encoding="utf-8"))
    ]
    assert not offenders, f"import helpers relatively, not through 'tests.': {offenders}"
