"""The issue's done-when, end to end through the CLI: head's only change is an op the
native backend declines; `guard doctor` names it at step 3 with its node, and
`guard reduce` of that model writes a bundle of a few nodes whose suite fails the same way.

The decline comes from the native backend's profile with LRN excluded (what the code
generator does for an op without an emitter); see NATIVE_WITHOUT_LRN.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from reduce_fixtures import NATIVE_WITHOUT_LRN, lrn_net, write_suite

from guard.cli import main


def _side(root: Path, lrn: bool) -> Path:
    root.mkdir(parents=True)
    (root / "native-no-lrn.yaml").write_text(yaml.safe_dump(NATIVE_WITHOUT_LRN))
    return write_suite(
        root,
        lrn_net(lrn=lrn),
        profile="native-no-lrn.yaml",
        checks={"partitions": {"max": 1}, "tolerance": {"rtol": 1e-4, "atol": 1e-5}},
    )


def test_doctor_names_the_declined_op_and_reduce_bundles_it(tmp_path: Path, capsys) -> None:
    base_suite, head_suite = _side(tmp_path / "base", False), _side(tmp_path / "head", True)
    base_json, head_json = tmp_path / "base.json", tmp_path / "head.json"
    assert main(["run", str(base_suite), "--no-track", "--json", str(base_json)]) == 0
    assert main(["run", str(head_suite), "--no-track", "--json", str(head_json)]) == 1
    capsys.readouterr()

    assert main(["doctor", str(base_json), str(head_json), "--json", "-"]) == 1
    doc = json.loads(capsys.readouterr().out)
    case = doc["cases"][0]
    step3 = case["findings"][2]
    assert case["first_cause"] == 3 and step3["status"] == "cause_found"
    assert "LRN node 'lrn_mid'" in step3["summary"]
    assert "op LRN is excluded by native-no-lrn" in step3["summary"]
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
    assert {"node": "lrn_mid", "op": "LRN"} in summary["kept"]

    rerun = tmp_path / "bundle-run.json"
    assert main(["run", str(bundle / "suite.yaml"), "--no-track", "--json", str(rerun)]) == 1
    capsys.readouterr()
    assert main(["doctor", str(rerun), "--json", "-"]) == 1
    again = json.loads(capsys.readouterr().out)["cases"][0]["findings"][2]
    assert again["status"] == "cause_found" and "lrn_mid" in again["summary"]
