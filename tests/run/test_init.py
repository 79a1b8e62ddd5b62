"""guard init: a suite entry from a model file that the next guard run passes."""

from __future__ import annotations

import json

import onnx
import pytest
from onnx import TensorProto, helper
from run_helpers import small_convnet
from test_real_inputs import mlp

from guard.cli.main import main
from guard.compiler.frontend.prepare import GraphInput
from guard.prepare.init import resolve_dims


def test_symbolic_dims_are_bound_and_named():
    f32 = onnx.helper.tensor_dtype_to_np_dtype(TensorProto.FLOAT)
    inputs = [
        GraphInput("img", f32, ("N", 3, "H", "W")),
        GraphInput("ids", f32, ("N", "seq")),
        GraphInput("mask", f32, ("batch_size", "seq")),
        GraphInput("x", f32, (None, -1)),
    ]
    shapes, lines = resolve_dims(inputs, {"seq": 7})
    assert shapes == {
        "img": [1, 3, 224, 224],
        "ids": [1, 7],
        "mask": [1, 7],
        "x": [1, 16],
    }
    assert "img[2] H -> 224 (image height/width)" in lines
    assert "ids[1] seq -> 7 (--dim)" in lines
    assert "x[0] unnamed -> 1 (batch)" in lines
    assert "x[1] negative dim -> 16 (length)" in lines


def test_a_model_no_backend_runs_is_written_switched_off_with_the_reason(tmp_path, workdir, capsys):
    # A custom-domain op: the model is valid ONNX, but neither onnxruntime nor guard runs it.
    g = helper.make_graph(
        [helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example")],
        "custom",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    )
    onnx.save(m, tmp_path / "custom.onnx")
    suite = tmp_path / "s.yaml"
    assert main(["init", str(tmp_path / "custom.onnx"), "--suite", str(suite)]) == 2
    text = suite.read_text()
    assert "# guard init: no backend builds custom on this host" in text
    assert "#   - name: custom" in text
    assert "onnxruntime: not used: the golden reference could not run it" in text
    assert "Frobnicate" in text
    assert "no backend builds custom" in capsys.readouterr().out


@pytest.mark.slow
def test_init_then_run_passes_and_a_second_model_is_appended(tmp_path, workdir, capsys):
    model = mlp(tmp_path / "mlp.onnx")
    conv = small_convnet(tmp_path / "conv.onnx", batch="N")
    suite = tmp_path / "suites" / "mine.yaml"
    assert main(["init", str(model), "--suite", str(suite)]) == 0
    out = capsys.readouterr().out
    assert "bound x[0] N -> 1 (batch)" in out
    assert f"Run it with: guard run {suite}" in out
    assert main(["init", str(conv), "--suite", str(suite)]) == 0
    text = suite.read_text()
    assert "source: ../mlp.onnx" in text and "source: ../conv.onnx" in text
    assert "# tvm: not tried (guard init --backends onnxruntime,bundled,tvm tries it)" in text
    assert (suite.parent / "goldens" / "mine" / "conv" / "golden.json").is_file()
    code = main(["run", str(suite), "--no-track", "--json", str(tmp_path / "r.json")])
    doc = json.loads((tmp_path / "r.json").read_text())
    assert code == 0, doc
    got = {(r["model"], r["backend"]): r for r in doc["results"]}
    assert set(got) == {(m, b) for m in ("mlp", "conv") for b in ("onnxruntime", "bundled")}
    for r in got.values():
        assert r["verdict"] == "pass"
        assert r["numerics"]["golden_status"] == "compared"  # init built the golden
