"""guard run --counted, twice, then guard compare: the done-when of counted runs.

One bundled result for this host (counted on x86-64-v3, built beside it), one for AArch64
(counted in the static runner under qemu-aarch64) and one onnxruntime result (counted in
Python under qemu-x86_64 -cpu max): two separate runs give the same counts within 0.05% (bundled: identical; onnxruntime,
inputs and outputs bound once and the least inference taken: within 0.005% on this
overhead-dominated MLP, see benchmarks/counted.md) and every counted row of guard compare
says pass.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from guard.cli.main import main
from guard.counting.emulator import EMULATORS

TOOLS = (EMULATORS["x86_64"], EMULATORS["aarch64"], "cc", "aarch64-linux-gnu-gcc")
needs_tools = pytest.mark.skipif(
    any(shutil.which(t) is None for t in TOOLS),
    reason="counting needs qemu-user, gcc and gcc-aarch64-linux-gnu (apt-get install -y "
    "qemu-user gcc gcc-aarch64-linux-gnu libc6-dev-arm64-cross)",
)
SUITE = """schema_version: 1
suite: counted
defaults:
  threads: 1
  measure: {{warmup_s: 0.01, min_iters: 3, min_time_s: 0.01, max_time_s: 0.5, rounds: 1,
            counted: {{inferences: 5, warmup: 3, max_s: 900}}}}
  checks:
    tolerance: {{rtol: 1.0e-4, atol: 1.0e-5}}
models:
  - name: mlp
    source: {source}
    inputs:
      x: {{shape: [1, 256], dist: normal, seed: 0}}
    backends: [bundled]
    targets: [host, "llvm -mtriple=aarch64-linux-gnu -mattr=+neon"]
  - name: mlp_ort
    source: {source}
    inputs:
      x: {{shape: [1, 256], dist: normal, seed: 0}}
    backends: [onnxruntime]
"""


NO_PMU = "no hardware instruction counter here (perf_event_open: ENOENT)"


@pytest.fixture(autouse=True)
def no_pmu(monkeypatch: pytest.MonkeyPatch) -> None:
    """These runs count under the emulator (``engine: auto`` falls back to it), whatever
    the host: where a PMU counts, auto would count natively, without bytes."""
    from guard.counting import count as counted

    monkeypatch.setattr(counted, "pmu_status", lambda: (False, NO_PMU))


def _run(suite: Path, out: Path, *extra: str) -> dict:
    code = main(["run", str(suite), "--no-track", "--json", str(out), *extra])
    assert code in (0, 1), code
    return json.loads(out.read_text())


@pytest.mark.slow
@needs_tools
def test_two_counted_runs_agree_and_compare_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.chdir(tmp_path)
    suite = tmp_path / "counted.yaml"
    suite.write_text(SUITE.format(source="zoo:mlp"))
    a = _run(suite, tmp_path / "a.json")
    note = f"{NO_PMU}: counted under the emulator"
    assert capsys.readouterr().err.count(f"guard: counted: {note}") == 1  # once, not per model
    assert {r["counted"]["engine_note"] for r in a["results"]} == {note}
    b = _run(suite, tmp_path / "b.json", "--baseline", str(tmp_path / "a.json"))
    counted = {}
    for doc in (a, b):
        for r in doc["results"]:
            assert "error" not in r["counted"], r["counted"]
            counted.setdefault((r["model"], r["target"]), []).append(r["counted"])
    assert len(counted) == 3
    targets = {c[0]["target"] for c in counted.values()}
    assert "llvm -mcpu=x86-64-v3 -mtriple=x86_64-linux-gnu" in targets
    assert "qemu -cpu max" in targets
    for (model, target), (x, y) in counted.items():
        assert x["fingerprint"] == y["fingerprint"], (model, target)
        drift = abs(x["instructions"] / y["instructions"] - 1)
        assert drift <= 5e-4, (model, target, drift)
        assert x["instructions"] > 1e4 and x["bytes_loaded"] > 256 * 4
    for r in b["results"]:
        check = next(c for c in r["checks"] if c["name"] == "counted")
        assert check["status"] == "pass", check
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    assert "Counted cost per inference" in out
    cmp_rows = [line for line in out.splitlines() if line.startswith("| mlp")]
    assert sum("| pass |" in line for line in cmp_rows) >= 3


@pytest.mark.slow
@needs_tools
def test_guard_ab_counted_gives_a_counted_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.chdir(tmp_path)
    suite = tmp_path / "ab.yaml"
    suite.write_text(
        SUITE.format(source="zoo:mlp")
        .split("  - name: mlp_ort")[0]
        .replace('targets: [host, "llvm -mtriple=aarch64-linux-gnu -mattr=+neon"]', "target: host")
    )
    out = tmp_path / "ab.json"
    code = main(["ab", str(suite), "--counted", "--budget-s", "1", "--json", str(out)])
    assert code in (0, 1)
    (row,) = json.loads(out.read_text())["counted"]
    assert row["verdict"] == "pass" and row["same_artefact"] is True
    assert row["counted_target"] == "llvm -mcpu=x86-64-v3 -mtriple=x86_64-linux-gnu"
    assert "Counted cost per inference" in capsys.readouterr().out


def _conv7(path: Path) -> None:
    """A convolution to 7 channels: onnxruntime blocks channels by the host's vector width
    (16 on AVX-512, 8 under the emulator's AVX2), so a payload optimised here cannot run
    there; the counted run optimises the source model inside the emulator instead."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.full((7, 16, 3, 3), 0.01, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])], "conv7",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 7, 16, 16])], [w],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


@pytest.mark.slow
@needs_tools
def test_an_onnxruntime_model_with_odd_channels_is_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(tmp_path)
    _conv7(tmp_path / "conv7.onnx")
    suite = tmp_path / "conv7.yaml"
    suite.write_text(
        "schema_version: 1\nsuite: conv7\ndefaults:\n  threads: 1\n"
        "  measure: {warmup_s: 0.01, min_iters: 3, min_time_s: 0.01, max_time_s: 0.5, "
        "rounds: 1, counted: {inferences: 2, warmup: 1}}\n"
        "models:\n  - name: conv7\n    source: conv7.onnx\n    backends: [onnxruntime]\n"
        "    inputs:\n      x: {shape: [1, 16, 16, 16], dist: normal, seed: 0}\n"
    )
    (r,) = _run(suite, tmp_path / "r.json")["results"]
    assert "error" not in r["counted"], r["counted"]
    assert r["counted"]["instructions"] > 16 * 16 * 7
