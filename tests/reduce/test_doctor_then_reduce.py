"""The issue's done-when, end to end through the CLI: head's only change is an op the
native code generator declines (InstanceNormalization: "no emitter for ..."); `guard
doctor` names it at step 3 with its node, and `guard reduce` of that model writes a bundle
of a few nodes whose suite fails the same way. Plain suites, the default native backend:
no profile, no hook.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from reduce_fixtures import lrn_net, write_suite

from guard.cli.main import main

CHECKS = {"partitions": {"max": 1}, "tolerance": {"rtol": 1e-4, "atol": 1e-5}}


@pytest.mark.slow  # ~12 s: three guard runs and a reduction through the code generator
def test_doctor_names_the_declined_op_and_reduce_bundles_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # guard run keeps its artefacts under ./.guard
    base_suite = write_suite(tmp_path / "base", lrn_net(lrn=False), checks=CHECKS)
    head_suite = write_suite(tmp_path / "head", lrn_net(op="InstanceNormalization"), checks=CHECKS)
    base_json, head_json = tmp_path / "base.json", tmp_path / "head.json"
    assert main(["run", str(base_suite), "--no-track", "--json", str(base_json)]) == 0
    assert main(["run", str(head_suite), "--no-track", "--json", str(head_json)]) == 1
    capsys.readouterr()

    assert main(["doctor", str(base_json), str(head_json), "--json", "-"]) == 1
    doc = json.loads(capsys.readouterr().out)
    case = doc["cases"][0]
    step3 = case["findings"][2]
    assert case["first_cause"] == 3 and step3["status"] == "cause_found"
    assert "InstanceNormalization node 'instnorm_mid'" in step3["summary"]
    assert "no emitter for InstanceNormalization" in step3["summary"]
    step11 = case["findings"][10]
    assert "--partitions" in step11["action"] and str(head_suite) in step11["action"]

    bundle = tmp_path / "bundle"
    assert (
        main(
            [
                "reduce",
                "--suite",
                str(head_suite),
                "--model",
                "net",
                "--partitions",
                "--out",
                str(bundle),
            ]
        )
        == 0
    )
    summary = json.loads((bundle / "reduce.json").read_text())
    assert summary["nodes_before"] == 10 and summary["nodes_after"] <= 3
    assert {"node": "instnorm_mid", "op": "InstanceNormalization"} in summary["kept"]

    rerun = tmp_path / "bundle-run.json"
    assert main(["run", str(bundle / "suite.yaml"), "--no-track", "--json", str(rerun)]) == 1
    r = json.loads(rerun.read_text())["results"][0]
    assert [c["name"] for c in r["checks"] if c["status"] == "fail"] == ["partitions"]
    capsys.readouterr()
    assert main(["doctor", str(rerun), "--json", "-"]) == 1
    again = json.loads(capsys.readouterr().out)["cases"][0]["findings"][2]
    assert again["status"] == "cause_found" and "instnorm_mid" in again["summary"]
