"""Fault tests: hostile input, kills at chosen points, read-only and full directories, races.

Helpers live in faults_helpers.py (a uniquely named module, not conftest)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "run"))


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    wd = tmp_path / "work"
    wd.mkdir()
    monkeypatch.chdir(wd)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return wd
