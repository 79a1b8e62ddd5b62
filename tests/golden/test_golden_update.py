"""guard golden update: a real reference run; an update that changes nothing is a no-op."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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


def _run(suite: Path, goldens: Path, out: Path) -> tuple[int, dict]:
    code = main(["run", str(suite), "--golden-dir", str(goldens), "--no-track", "--backend",
                 "onnxruntime", "--json", str(out)])  # fmt: skip
    return code, json.loads(out.read_text())["results"][0]


@pytest.mark.slow  # three guard runs of a zoo model: ~20 s on two cores
def test_a_changed_input_seed_is_seen_and_asks_for_an_update(tmp_path: Path, monkeypatch, capsys):
    """Issue 28 item 5: a new seed was silently ignored (the golden's stored inputs were
    reused). Now the run re-derives the inputs, checks them against the reference, names
    the change, asks for guard golden update with that reason, and stores nothing."""
    monkeypatch.chdir(tmp_path)
    suite, goldens = tmp_path / "g.yaml", tmp_path / "goldens"
    suite.write_text(SUITE)
    assert _run(suite, goldens, tmp_path / "a.json")[1]["numerics"]["golden_status"] == "created"
    stored = (goldens / "mlp" / "golden.json").read_bytes()
    assert json.loads(stored)["input_specs"]["x"]["seed"] == 0

    suite.write_text(suite.read_text().replace("seed: 0", "seed: 1"))
    capsys.readouterr()
    code, r = _run(suite, goldens, tmp_path / "b.json")
    assert code == 0 and r["numerics"]["golden_status"] == "stale"
    assert r["numerics"]["golden_stale"] == "x.seed 0 -> 1"
    (warning,) = [w for w in r["preflight"]["warnings"] if "golden update" in w]
    assert f"guard golden update {suite} --model mlp --reason 'inputs changed: x.seed 0 -> 1'" in (
        warning
    )
    assert "golden update" in capsys.readouterr().out
    assert (goldens / "mlp" / "golden.json").read_bytes() == stored  # nothing stored
    # The new inputs were used: the ones the golden holds after the update.
    new_inputs = r["numerics"]["inputs_sha256"]
    assert main(["golden", "update", str(suite), "--golden-dir", str(goldens), "--reason",
                 "inputs changed: x.seed 0 -> 1"]) == 0  # fmt: skip
    code, r = _run(suite, goldens, tmp_path / "d.json")
    assert r["numerics"]["golden_status"] == "compared" and r["numerics"]["inputs_sha256"] == (
        new_inputs
    )


def test_a_golden_without_input_specs_names_what_the_data_show(tmp_path: Path, monkeypatch):
    """Goldens stored before input specs were recorded: the re-derived data decide."""
    monkeypatch.chdir(tmp_path)
    suite, goldens = tmp_path / "g.yaml", tmp_path / "goldens"
    suite.write_text(SUITE)
    assert (
        main(["golden", "update", str(suite), "--golden-dir", str(goldens), "--reason", "a"]) == 0
    )
    meta_path = goldens / "mlp" / "golden.json"
    meta = json.loads(meta_path.read_text())
    del meta["input_specs"]
    meta_path.write_text(json.dumps(meta))
    from guard.golden.produce import ensure_golden, input_changes
    from guard.run.case import prepare_model
    from guard.suite import load_suite
    from guard.suite.model import make_inputs

    suite.write_text(SUITE.replace("seed: 0", "seed: 3"))
    entry = load_suite(suite).models[0]
    golden = GoldenStore(goldens).load("mlp")
    spec, path = prepare_model(entry)
    feeds = make_inputs(spec, dict(entry.inputs))
    assert input_changes(golden, feeds, {}) == [
        "x: the data differ from the golden's (its spec or file changed)"
    ]
    _, status = ensure_golden(GoldenStore(goldens), entry, spec, path)
    assert status == "stale"
