"""guard doctor takes MLflow sides as guard compare does (run:<id>), from a real store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from doctor_fixtures import conv_net, suite_doc

from guard.cli.main import main


@pytest.mark.slow
def test_doctor_reads_an_mlflow_invocation_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # guard run keeps its artefacts under ./.guard
    import onnx

    onnx.save(conv_net("LRN"), str(tmp_path / "net.onnx"))
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite_doc("net.onnx", profile="gpu-lite")))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out = tmp_path / "r.json"
    assert (
        main(["run", str(tmp_path / "suite.yaml"), "--tracking-uri", uri, "--json", str(out)]) == 1
    )
    run_id = json.loads(out.read_text())["tracking"]["parent_run_id"]
    capsys.readouterr()
    assert main(["doctor", f"run:{run_id}", "--tracking-uri", uri, "--json", "-"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["head"] == f"run:{run_id}"
    step3 = doc["cases"][0]["findings"][2]
    assert step3["status"] == "cause_found" and "lrn_mid" in step3["summary"]
