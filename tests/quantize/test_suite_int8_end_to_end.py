"""`guard run` of a suite with quantize: and the gate, end to end on zoo:digits (slow).

It passes with calibration data like the suite's inputs, fails (exit 1, the worst tensor
named) when the calibration data is 1000x smaller, the manifest's profile hash moves with
the data, and the bundled int8 outputs are identical for host and x86-64-v3 code."""

from __future__ import annotations

import json

import numpy as np
import pytest

from guard.cli.main import main

SUITE = """
schema_version: 1
suite: int8demo
defaults:
  backends: [onnxruntime, bundled]
  measure: {{warmup_s: 0, min_iters: 2, min_time_s: 0.01, max_time_s: 2, rounds: 1}}
models:
  - name: digits
    source: zoo:digits
    inputs: {{x: {{shape: [1, 64], dist: uniform, low: 0, high: 16}}}}
    quantize: {{calibration: {cal}}}
    checks:
      accuracy: {{dataset: zoo:digits-test, limit: 120}}
      quantization: {{min_top1_agreement: 0.95, min_sqnr_db: 15, max_top1_drop: 0.03}}
"""


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GUARD_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    from guard import zoo

    x, _ = zoo.load_dataset("digits-test")
    np.savez(tmp_path / "cal.npz", x=x[200:264])
    np.savez(tmp_path / "tiny.npz", x=x[200:264] / 1000)
    return tmp_path


def _run(here, cal: str, out: str) -> tuple[int, dict]:
    (here / f"{out}.yaml").write_text(SUITE.format(cal=cal))
    code = main(["run", str(here / f"{out}.yaml"), "--no-track", "--json", str(here / out)])
    return code, json.loads((here / out).read_text())


@pytest.mark.slow
def test_gate_passes_then_fails_on_1000x_smaller_calibration(here, capsys):
    code, good = _run(here, "cal.npz", "good.json")
    rows = {(r["model"], r["backend"]): r for r in good["results"]}
    assert code == 0, [(k, r["verdict"], r["checks"]) for k, r in rows.items()]
    assert set(rows) == {
        (m, b) for m in ("digits", "digits.int8") for b in ("onnxruntime", "bundled")
    }
    assert "quantization" not in rows[("digits", "bundled")]  # the fp32 row is unchanged
    q = rows[("digits.int8", "bundled")]["quantization"]
    assert q["top1_agreement"] >= 0.95 and q["worst_tensors"]
    pins = rows[("digits.int8", "bundled")]["manifest"]["quantization"]
    assert pins["profile_sha256"] == q["profile_sha256"]
    capsys.readouterr()

    code, bad = _run(here, "tiny.npz", "bad.json")
    out = capsys.readouterr().out
    assert code == 1
    int8 = [r for r in bad["results"] if r["model"] == "digits.int8"]
    assert all(r["verdict"] == "fail" for r in int8)
    check = next(c for c in int8[0]["checks"] if c["name"] == "quantization")
    worst = int8[0]["quantization"]["worst_tensors"][0]["tensor"]
    assert check["status"] == "fail" and f"worst tensors: {worst}" in check["message"]
    assert worst in out
    bad_pins = int8[0]["manifest"]["quantization"]
    assert bad_pins["calibration_sha256"] != pins["calibration_sha256"]
    assert bad_pins["profile_sha256"] != pins["profile_sha256"]
    # guard compare shows the changed calibration as a manifest diff
    capsys.readouterr()
    main(["compare", str(here / "good.json"), str(here / "bad.json")])
    assert "quantization" in capsys.readouterr().out


AGREE = """
schema_version: 1
suite: int8agree
defaults:
  backends: [bundled]
  measure: {warmup_s: 0, min_iters: 2, min_time_s: 0.01, max_time_s: 2, rounds: 1}
models:
  - name: digits
    source: zoo:digits
    inputs: {x: {shape: [1, 64], dist: uniform, low: 0, high: 16}}
    targets: [host, "llvm -mcpu=x86-64-v3"]
    quantize: {calibration: cal.npz}
    checks:
      int8_agreement: {across: [host, "llvm -mcpu=x86-64-v3"]}
"""


@pytest.mark.slow
def test_int8_outputs_agree_across_isa_classes_and_compare_says_identical(here, capsys):
    (here / "agree.yaml").write_text(AGREE)
    code = main(["run", str(here / "agree.yaml"), "--no-track", "--json", str(here / "a.json")])
    doc = json.loads((here / "a.json").read_text())
    int8 = [r for r in doc["results"] if r["model"] == "digits.int8"]
    assert code == 0 and len(int8) == 2
    for r in int8:
        c = next(c for c in r["checks"] if c["name"] == "int8_agreement")
        assert c["status"] == "pass" and "identical" in c["message"]
    # two results files, one per target: guard compare pairs the int8 rows across them
    for r in int8:
        side = {**doc, "results": [r]}
        name = "host.json" if r["target"] == "host" else "v3.json"
        (here / name).write_text(json.dumps(side))
    capsys.readouterr()
    main(
        ["compare", str(here / "host.json"), str(here / "v3.json"), "--json", str(here / "c.json")]
    )
    out = capsys.readouterr().out
    assert "digits.int8 [bundled] int8 outputs identical" in out
    assert json.loads((here / "c.json").read_text())["int8"][0]["outputs"] == "identical"
