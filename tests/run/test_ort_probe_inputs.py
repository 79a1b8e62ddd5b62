"""onnxruntime's memory probe runs the model on the suite's bound inputs (issue 9, item 4).

A model whose behaviour depends on an input's value: an If on a scalar sample rate, as a
voice-activity detector has. Fed zeros, its else-branch reshapes 6 values to [4]: an
error. Fed the suite's ``sr: 16000``, it runs. And when the suite's value is itself bad,
the error guard prints is onnxruntime's own, not the last line of its verbose log.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from run_helpers import FAST_MEASURE, write_suite

from guard.cli.main import main


def sample_rate_model(path: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    sr = helper.make_tensor_value_info("sr", TensorProto.INT64, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    good = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y_then"])],
        "then",
        [],
        [helper.make_tensor_value_info("y_then", TensorProto.FLOAT, [2, 3])],
    )
    bad = helper.make_graph(
        [helper.make_node("Reshape", ["x", "bad_shape"], ["y_else"])],
        "else",
        [],
        [helper.make_tensor_value_info("y_else", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.array([4], np.int64), "bad_shape")],
    )
    nodes = [
        helper.make_node(
            "Constant", [], ["rate"], value=numpy_helper.from_array(np.array(16000, np.int64))
        ),
        helper.make_node("Equal", ["sr", "rate"], ["ok"]),
        helper.make_node("If", ["ok"], ["y"], then_branch=good, else_branch=bad),
    ]
    g = helper.make_graph(nodes, "vad", [x, sr], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    onnx.save(m, path)
    return path


def suite(tmp_path: Path, model: Path, rate: int) -> Path:
    return write_suite(
        tmp_path,
        f"""
    schema_version: 1
    suite: vad
    defaults:
      backends: [onnxruntime]
      threads: 1
      measure: {FAST_MEASURE}
    models:
      - name: vad
        source: {model}
        inputs:
          x: {{shape: [2, 3], dist: normal, seed: 0}}
          sr: {{shape: [], dist: const, value: {rate}}}
    """,
        name=f"vad-{rate}.yaml",
    )


@pytest.mark.slow
def test_probe_runs_on_the_suites_sample_rate(tmp_path, workdir):
    model = sample_rate_model(tmp_path / "vad.onnx")
    out = tmp_path / "r.json"
    code = main(["run", str(suite(tmp_path, model, 16000)), "--no-track", "--json", str(out)])
    (r,) = json.loads(out.read_text())["results"]
    assert code == 0 and r["verdict"] == "pass", r.get("error")
    assert r["arena_lower_bound_bytes"] > 0


@pytest.mark.slow
def test_probe_failure_reports_onnxruntimes_error(tmp_path, workdir, capsys):
    model = sample_rate_model(tmp_path / "vad.onnx")
    out = tmp_path / "r.json"
    # 8000 Hz takes the else-branch. The golden (made at 16000) exists, so the reference
    # does not run again: the build's probe is the first to run the model at 8000.
    main(["run", str(suite(tmp_path, model, 16000)), "--no-track"])
    shutil.rmtree(Path.cwd() / ".guard" / "artefacts")  # the next build probes again
    bad = suite(tmp_path, model, 8000)
    code = main(["run", str(bad), "--no-track", "--json", str(out)])
    (r,) = json.loads(out.read_text())["results"]
    assert code == 2 and r["verdict"] == "error"
    err = r["error"]
    # onnxruntime's own words (a reshape of 6 values to [4]), not a verbose-log line
    assert "reshape" in err.lower() and "guard-probe" not in err, err
    assert "[I:onnxruntime" not in err and "VERBOSE" not in err.upper(), err


def test_a_golden_reference_that_cannot_run_is_exit_2_with_onnxruntimes_error(tmp_path, workdir):
    model = sample_rate_model(tmp_path / "vad.onnx")
    out = tmp_path / "r.json"
    code = main(["run", str(suite(tmp_path, model, 8000)), "--no-track", "--json", str(out)])
    (r,) = json.loads(out.read_text())["results"]
    assert code == 2 and r["error_kind"] == "usage"
    assert "golden reference" in r["error"] and "reshape" in r["error"].lower()
