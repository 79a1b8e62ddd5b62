"""Fixtures for the spine tests (helpers live in run_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from run_helpers import small_convnet


@pytest.fixture
def convnet(tmp_path: Path) -> Path:
    return small_convnet(tmp_path / "net.onnx")


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    wd = tmp_path / "work"
    wd.mkdir()
    monkeypatch.chdir(wd)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return wd
