"""onnxruntime's per-node profile: its own profiler, read back into result ``kernels``, shown
by ``guard profile`` and logged to MLflow as a bar chart."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from guard.backends import get_backend
from guard.backends.base import BuildRequest
from guard.backends.ort_profile import node_times, top_nodes
from guard.cli.main import main

sys.path.insert(0, str(Path(__file__).parents[1] / "run"))
from run_helpers import small_convnet  # noqa: E402


def event(node: str, op: str, us: float) -> dict:
    return {
        "cat": "Node",
        "name": f"{node}_kernel_time",
        "dur": us,
        "args": {"op_name": op, "provider": "CPUExecutionProvider"},
    }


def test_the_first_run_is_dropped_and_nodes_are_ranked_by_mean_time():
    events = [
        {"cat": "Session", "name": "model_run", "dur": 999},
        event("conv", "Conv", 500), event("fc", "Gemm", 300),  # warm-up run: dropped
        event("conv", "Conv", 30), event("fc", "Gemm", 10), {"cat": "Node", "name": "conv_fence_before"},
        event("conv", "Conv", 50), event("fc", "Gemm", 10),
    ]  # fmt: skip
    rows = top_nodes(node_times(events), top=5)
    assert [r["kernel"] for r in rows] == ["conv", "fc"]
    assert rows[0]["ms"] == pytest.approx(0.040) and rows[1]["ms"] == pytest.approx(0.010)
    assert rows[0]["share"] == pytest.approx(0.8) and rows[0]["op"] == "Conv"
    assert rows[0]["nodes"] == ["conv"] and rows[0]["source"] == "onnxruntime profiler"
    assert len(top_nodes(node_times(events), top=1)) == 1


@pytest.mark.slow
def test_a_loaded_artefact_profiles_its_nodes_with_onnxruntimes_profiler(tmp_path):
    model = small_convnet(tmp_path / "net.onnx")
    be = get_backend("onnxruntime")
    out = tmp_path / "art"
    out.mkdir()
    be.build(
        BuildRequest(
            model_path=model, input_shapes={"x": (1, 3, 16, 16)}, target_raw="host",
            target_canonical="llvm", threads=1, out_dir=out, options={},
        )
    )  # fmt: skip
    sess = be.load(out, 1)
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    rows = sess.kernels(feeds, top=3, runs=3)
    assert 1 <= len(rows) <= 3
    assert all(r["ms"] > 0 and r["provider"] == "CPUExecutionProvider" for r in rows)
    assert sum(r["share"] for r in rows) <= 1.0001
    assert any("Conv" in str(r["op"]) for r in rows), rows
    assert not list(Path.cwd().glob("ort_profile*.json"))  # nothing left behind


def results_doc(kernels: list | None) -> dict:
    r = {"model": "net", "backend": "onnxruntime", "target": "host", "verdict": "pass"}
    if kernels is not None:
        r["kernels"] = kernels
    return {"schema_version": 1, "suite": "s", "started": "x", "git": {}, "results": [r]}


def test_guard_profile_prints_the_top_nodes_and_draws_the_chart(tmp_path, capsys):
    rows = top_nodes(node_times([event("conv", "Conv", 1), event("conv", "Conv", 30),
                                 event("fc<&>", "Gemm", 1), event("fc<&>", "Gemm", 10)]), 10)  # fmt: skip
    path = tmp_path / "r.json"
    path.write_text(json.dumps(results_doc(rows)))
    assert main(["profile", str(path), "--chart", str(tmp_path / "top.svg")]) == 0
    out = capsys.readouterr().out
    assert "net [onnxruntime] host: top 2 by time (onnxruntime profiler" in out
    lines = [line for line in out.splitlines() if "Conv" in line or "Gemm" in line]
    assert "0.03" in lines[0] and "75.0%" in lines[0] and lines[1].split()[2] == "Gemm"
    svg = ET.parse(tmp_path / "top.svg").getroot()  # well-formed
    bars = [e for e in svg.iter("{http://www.w3.org/2000/svg}rect") if e.get("fill") != "white"]
    assert [float(b.get("width")) for b in bars] == [300.0, 100.0]  # 0.03 ms vs 0.01 ms
    assert "conv [Conv]" in (tmp_path / "top.svg").read_text()
    path.write_text(json.dumps(results_doc(None)))
    assert main(["profile", str(path)]) == 2
    assert "no result here carries a per-node profile" in capsys.readouterr().err


@pytest.mark.slow
def test_the_bar_chart_is_an_artefact_of_the_results_mlflow_run(tmp_path):
    from mlflow import MlflowClient

    from guard.results.result import Result
    from guard.track.profile_chart import CHART, log_profile_chart

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    client = MlflowClient(uri)
    eid = client.create_experiment("p", artifact_location=str(tmp_path / "art"))
    run = client.create_run(eid)
    rows = top_nodes(node_times([event("conv", "Conv", 1), event("conv", "Conv", 30)]), 10)
    log_profile_chart(client, run.info.run_id, Result.from_json(results_doc(rows)["results"][0]))
    no_profile = Result.from_json({"model": "x", "backend": "tvm"})
    log_profile_chart(client, run.info.run_id, no_profile)
    listed = [f.path for f in client.list_artifacts(run.info.run_id, "profile")]
    assert listed == [CHART]
