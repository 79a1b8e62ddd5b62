"""Fixtures of the tracking tests: a synthetic results doc and a fresh embedded store."""

from __future__ import annotations

from pathlib import Path

import pytest
from track_docs import make_doc

from guard.track import resolve_uri


@pytest.fixture
def doc() -> dict:
    return make_doc()


@pytest.fixture
def sqlite_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    return resolve_uri(None, tmp_path)
