"""A copied ``.guard/`` is a store of its own: its runs' artifacts land in the copy, never in
the directory it was copied from (MLflow records absolute artifact locations)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "track"))
from track_docs import make_doc  # noqa: E402

from guard.cli.main import main  # noqa: E402


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def _push(cwd: Path, started: str, monkeypatch, capsys) -> str:
    monkeypatch.chdir(cwd)
    doc = make_doc()
    doc["started"] = started
    path = cwd / f"r-{started[:13]}.json"
    path.write_text(json.dumps(doc))
    assert main(["track", "push", str(path)]) == 0
    return capsys.readouterr().err


@pytest.mark.slow
def test_a_copied_guard_dir_keeps_its_artifacts_to_itself(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    a, b = tmp_path / "A", tmp_path / "B"
    a.mkdir()
    _push(a, "2026-11-29T13:00:00+00:00", monkeypatch, capsys)
    original = _files(a / ".guard" / "mlartifacts")
    assert original
    shutil.copytree(a, b)

    err = _push(b, "2026-11-30T13:00:00+00:00", monkeypatch, capsys)
    assert _files(a / ".guard" / "mlartifacts") == original  # nothing written to A
    assert _files(b / ".guard" / "mlartifacts") > original  # the new run's are in B
    assert "was copied from another directory" in err

    con = sqlite3.connect(b / ".guard" / "mlflow.db")
    try:
        locations = [r[0] for r in con.execute("SELECT artifact_uri FROM runs")]
        locations += [r[0] for r in con.execute("SELECT artifact_location FROM experiments")]
    finally:
        con.close()
    own = (b / ".guard" / "mlartifacts").resolve().as_uri()
    assert all(loc.startswith(own) for loc in locations if loc.startswith("file:")), locations

    # A itself is untouched by the copy's fix, and keeps its own locations.
    err = _push(a, "2026-12-01T13:00:00+00:00", monkeypatch, capsys)
    assert "copied" not in err
