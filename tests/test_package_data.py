"""What a wheel ships: the suites (and their goldens) and the dashboard template.

setuptools' build_py is the step that lays out a wheel's files; run offline on a copy of the
tree, then guard is imported from that layout in a directory with no suites/ of its own.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_built_package_finds_the_default_suite(tmp_path: Path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "guard", src / "guard", symlinks=True, ignore=ignore)
    shutil.copytree(ROOT / "suites", src / "suites", ignore=ignore)
    lib = tmp_path / "lib"
    build = subprocess.run(
        [sys.executable, "-c", "from setuptools import setup; setup()", "-q", "build_py",
         "--build-lib", str(lib)],
        cwd=src, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-2000:]
    shipped = lib / "guard" / "suites"
    assert (shipped / "default.yaml").is_file() and not (shipped).is_symlink()
    assert (lib / "guard" / "report" / "templates" / "dashboard.html.j2").is_file()
    goldens = {p.relative_to(shipped).as_posix() for p in shipped.rglob("*") if p.is_file()}
    expected = {p.relative_to(ROOT / "suites").as_posix()
                for p in (ROOT / "suites").rglob("*") if p.is_file()}  # fmt: skip
    assert goldens == expected
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    found = subprocess.run(
        [sys.executable, "-c", "from guard.cli.run import default_suite; print(default_suite())"],
        cwd=elsewhere, capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": str(lib), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert found.returncode == 0, found.stderr[-2000:]
    assert Path(found.stdout.strip()) == shipped / "default.yaml"
