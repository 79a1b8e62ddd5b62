"""guard golden update: a real reference run; an update that changes nothing is a no-op."""

from __future__ import annotations

import json
from pathlib import Path

from guard.cli.main import main
from guard.golden import GoldenStore

SUITE = """schema_version: 1
suite: g
models:
  - name: mlp
    source: zoo:mlp
    inputs:
      x: {shape: [1, 256], dist: normal, seed: 0}
"""


def test_update_with_nothing_changed_writes_nothing(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    suite = tmp_path / "g.yaml"
    suite.write_text(SUITE)
    goldens = tmp_path / "goldens"
    args = ["golden", "update", str(suite), "--golden-dir", str(goldens), "--reason", "first"]
    assert main(args) == 0
    assert "mlp: golden created none -> " in capsys.readouterr().out
    meta_path = goldens / "mlp" / "golden.json"
    before = {p.name: p.read_bytes() for p in (goldens / "mlp").iterdir()}

    assert main([*args[:-1], "nothing changed"]) == 0
    out = capsys.readouterr().out
    assert "mlp: golden unchanged" in out and "->" not in out
    assert {p.name: p.read_bytes() for p in (goldens / "mlp").iterdir()} == before
    assert len(json.loads(meta_path.read_text())["history"]) == 1

    # A real change (other inputs) is an update with a second history entry.
    suite.write_text(SUITE.replace("seed: 0", "seed: 1"))
    assert main([*args[:-1], "new seed"]) == 0
    assert "mlp: golden updated" in capsys.readouterr().out
    history = json.loads(meta_path.read_text())["history"]
    assert [h["why"] for h in history] == ["first", "new seed"]
    assert history[1]["old_sha256"] != history[1]["new_sha256"]
    assert GoldenStore(goldens).load("mlp").sha256 == history[1]["new_sha256"]
