"""House style is checked, not hoped for: ruff (pinned in the test extra) over the tree."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_check_is_clean():
    ruff = Path(sys.executable).with_name("ruff")
    exe = str(ruff) if ruff.exists() else shutil.which("ruff")
    assert exe, "ruff is not installed: pip install -e '.[test]'"
    out = subprocess.run([exe, "check", "--no-cache", "guard", "tests", "benchmarks"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
